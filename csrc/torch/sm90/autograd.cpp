// The public ops' autograd kernel: inference only, in C++.
//
// The ops have no derivative (int8 weights have none, the quantizers none that would be
// meaningful). A backward through one raises with the op's name; the forward runs as if autograd
// were off. w8a8/ops.py states the same rule in Python (torch.library.register_autograd) where
// this library is not built; here it costs no Python per call: a Python autograd kernel adds
// ~10 us to every call made outside torch.inference_mode() (under torch.no_grad() too, where
// transformers' generate runs), since the autograd dispatch key is still on there.
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/basic_ops.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/library.h>

#include "torch/op_namespace.h"

namespace w8a8 {
namespace {

// The words of w8a8/ops.py's _inference_only, for the op `name` ("linear", ...).
std::string inference_only_message(const std::string& name) {
  return "w8a8." + name +
         " is inference only: int8 weights have no gradient and the quantizers none that would be meaningful; "
         "keep W8A8 layers out of the autograd graph (torch.inference_mode) or train the float model";
}

// A grad_fn that raises `message` on backward, held as the autograd engine holds nodes: a
// std::shared_ptr before torch's autograd moved to c10::intrusive_ptr (2026), one after.
using NodePtr = std::decay_t<decltype(std::declval<torch::autograd::Edge&>().function)>;

template <class Ptr>
struct ErrorNode;
template <class Node>
struct ErrorNode<std::shared_ptr<Node>> {
  static std::shared_ptr<Node> make(std::string message, torch::autograd::edge_list edges) {
    return std::make_shared<torch::autograd::Error>(std::move(message), std::move(edges));
  }
};
template <class Node>
struct ErrorNode<c10::intrusive_ptr<Node>> {
  static c10::intrusive_ptr<Node> make(std::string message, torch::autograd::edge_list edges) {
    return c10::make_intrusive<torch::autograd::Error>(std::move(message), std::move(edges));
  }
};

// Runs the op below autograd. Where grad mode is on and an input asks for a gradient, the float
// outputs get a grad_fn that raises inference_only_message on backward (the int8 codes cannot
// carry one), so a forward without torch.no_grad() still works and a backward never returns a
// silent zero or a missing gradient.
void inference_only(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  std::vector<at::Tensor> asking;
  if (at::GradMode::is_enabled()) {
    for (const c10::IValue& value : torch::jit::last(*stack, schema.arguments().size())) {
      if (value.isTensor() && value.toTensor().requires_grad()) asking.push_back(value.toTensor());
    }
  }
  {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    op.redispatchBoxed(keys & c10::after_ADInplaceOrView_keyset, stack);
  }
  if (asking.empty()) return;
  const std::string& full_name = schema.name();  // "w8a8::linear"
  const std::string name = full_name.substr(full_name.find("::") + 2);
  const NodePtr node = ErrorNode<NodePtr>::make(inference_only_message(name), torch::autograd::collect_next_edges(asking));
  for (const c10::IValue& value : torch::jit::last(*stack, schema.returns().size())) {
    if (!value.isTensor()) continue;
    const at::Tensor& out = value.toTensor();
    if (at::isFloatingType(out.scalar_type())) torch::autograd::set_history(out, node);  // not the int8 codes
  }
}

}  // namespace
}  // namespace w8a8

#ifndef W8A8_SWEEP_CONFIGS  // a sweep build (benchmarks/sweep) registers kernel ops only
// The public ops with float inputs a gradient could flow from; their schemas are in w8a8/ops.py,
// which registers its Python rule only for the ops this leaves without an autograd kernel.
TORCH_LIBRARY_IMPL(W8A8_OPS, Autograd, m) {
  for (const char* name : {"scaled_mm", "linear", "rms_norm_quant", "add_rms_norm_quant", "silu_mul_quant"}) {
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&w8a8::inference_only>());
  }
}
#endif
