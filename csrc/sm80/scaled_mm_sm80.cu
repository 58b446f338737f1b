// Entry of the sm80 int8 scaled matmul (torch-free): the config table, the
// plan (checks the params once, picks an entry by the M ladder or config_id)
// and the calls into the picked entry's launcher. No kernels here: they are
// instantiated in the instance files setup.py generates from W8A8_SM80_TABLE.
#include <stdexcept>
#include <string>

#include "sm80/scaled_mm_sm80.h"
#include "sm80/scaled_mm_sm80_configs.cuh"

namespace w8a8 {
namespace {

struct ConfigEntry {
  sm80::ConfigId id;
  const char* name;
  // The K ranges of a split-K entry (split_k_slices of its config); null for data-parallel ones.
  int (*k_slices)(int64_t m, int64_t n, int64_t k, const sm80::Sm80Device& device);
  size_t (*workspace_size[2])(const ScaledMmSm80Params&, int);  // [out dtype]
  void (*run[2])(const ScaledMmSm80Params&, int, void*, cudaStream_t);
};

template <class Config, template <class, class> class Launcher>
constexpr ConfigEntry make_entry(sm80::ConfigId id, const char* name,
                                 int (*k_slices)(int64_t, int64_t, int64_t, const sm80::Sm80Device&)) {
  using Bf16 = Launcher<Config, cutlass::bfloat16_t>;
  using Fp16 = Launcher<Config, cutlass::half_t>;
  static_assert(int(ScaledMmOutDtype::kBFloat16) == 0 && int(ScaledMmOutDtype::kFloat16) == 1);
  return ConfigEntry{id, name, k_slices, {&Bf16::workspace_size, &Fp16::workspace_size}, {&Bf16::run, &Fp16::run}};
}

template <class Config>
constexpr ConfigEntry entry(sm80::ConfigId id, const char* name) {
  return make_entry<Config, sm80::ScaledMmSm80Launcher>(id, name, nullptr);
}

template <class Config>
constexpr ConfigEntry split_k_entry(sm80::ConfigId id, const char* name) {
  return make_entry<Config, sm80::ScaledMmSm80SplitKLauncher>(id, name, &sm80::split_k_slices<Config>);
}

#define W8A8_SM80_ENTRY(id, name, Config) entry<sm80::Config>(sm80::id, name),
#define W8A8_SM80_SPLIT_K_ENTRY(id, name, Config) split_k_entry<sm80::Config>(sm80::id, name),
// The table of scaled_mm_sm80_configs.cuh (W8A8_SM80_TABLE), in id order. Names: tile M x N x K,
// warp tile, stages.
constexpr ConfigEntry kConfigs[] = {W8A8_SM80_TABLE(W8A8_SM80_ENTRY, W8A8_SM80_SPLIT_K_ENTRY)};
#undef W8A8_SM80_ENTRY
#undef W8A8_SM80_SPLIT_K_ENTRY

constexpr bool table_matches_ids() {
  if (sizeof(kConfigs) / sizeof(kConfigs[0]) != sm80::kNumConfigs) return false;
  for (int i = 0; i < sm80::kNumConfigs; ++i) {
    if (kConfigs[i].id != i) return false;
  }
  return true;
}
static_assert(table_matches_ids(), "kConfigs must list every ConfigId once, in id order");

// Invalid params: std::invalid_argument (the bindings raise it as ValueError).
[[noreturn]] void fail(const std::string& message) { throw std::invalid_argument("scaled_mm_sm80: " + message); }

// CUTLASS and launch failures: std::runtime_error naming the entry.
[[noreturn]] void rethrow(const ScaledMmSm80Plan& plan, const std::exception& e) {
  throw std::runtime_error(std::string("scaled_mm_sm80: config ") + plan.config_name + ": " + e.what());
}

}  // namespace

int scaled_mm_sm80_num_configs() { return sm80::kNumConfigs; }

const char* scaled_mm_sm80_config_name(int config_id) {
  return config_id >= 0 && config_id < sm80::kNumConfigs ? kConfigs[config_id].name : nullptr;
}

// The binding checks the same rules with the op's wording first; these keep
// non-torch callers from launching on shapes the kernels cannot serve.
ScaledMmSm80Plan scaled_mm_sm80_plan(const ScaledMmSm80Params& p) {
  const std::string problem_error = scaled_mm_problem_error(p);
  if (!problem_error.empty()) fail(problem_error);
  if (p.sm_count <= 0) fail("expected sm_count > 0, got " + std::to_string(p.sm_count));
  if (p.config_id < -1 || p.config_id >= sm80::kNumConfigs) {
    fail("expected config_id in [-1, " + std::to_string(sm80::kNumConfigs - 1) + "], got " +
         std::to_string(p.config_id));
  }
  const sm80::Sm80Device device{p.sm_count, p.shared_memory_per_sm};
  const int id = p.config_id >= 0 ? p.config_id : sm80::select_config(p.m, p.n, p.k, device);
  const ConfigEntry& config = kConfigs[id];
  ScaledMmSm80Plan plan;
  plan.config_id = id;
  plan.config_name = config.name;
  plan.k_slices = config.k_slices ? config.k_slices(p.m, p.n, p.k, device) : 1;
  return plan;
}

size_t scaled_mm_sm80_workspace_size(const ScaledMmSm80Params& params, const ScaledMmSm80Plan& plan) {
  try {
    return kConfigs[plan.config_id].workspace_size[int(params.out_dtype)](params, plan.k_slices);
  } catch (const std::exception& e) {
    rethrow(plan, e);
  }
}

void scaled_mm_sm80(const ScaledMmSm80Params& params, const ScaledMmSm80Plan& plan, void* workspace,
                    cudaStream_t stream) {
  try {
    kConfigs[plan.config_id].run[int(params.out_dtype)](params, plan.k_slices, workspace, stream);
  } catch (const std::exception& e) {
    rethrow(plan, e);
  }
}

}  // namespace w8a8
