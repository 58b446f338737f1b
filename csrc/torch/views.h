// Tensors over storage an op already holds (its own allocations, its contiguous inputs), built
// directly: narrow, view, view(dtype), reshape and as_strided are each a dispatcher call (narrow
// three), and the few of them an op chained cost about as much host time as its kernel launches.
// Each result is a plain tensor sharing the storage, not an autograd view of the source: the ops
// return only such tensors of their own allocations, and hand the others to their kernels alone.
#pragma once

#include <cstdint>
#include <utility>

#include <ATen/ATen.h>
#include <c10/core/TensorImpl.h>
#include <c10/core/TensorOptions.h>
#include <c10/util/Exception.h>

namespace w8a8 {

// A `dtype` tensor of `sizes` and `strides` (contiguous ones where `strides` is empty) over
// `source`'s storage, its first element `byte_offset` bytes into the storage.
inline at::Tensor storage_tensor(const at::Tensor& source, at::ScalarType dtype, c10::IntArrayRef sizes,
                                 c10::IntArrayRef strides, int64_t byte_offset) {
  const caffe2::TypeMeta meta = c10::scalarTypeToTypeMeta(dtype);
  const auto item = static_cast<int64_t>(meta.itemsize());
  TORCH_INTERNAL_ASSERT(byte_offset % item == 0, "w8a8: storage_tensor at a misaligned offset");
  // The backend's key only (as at::empty): the constructor adds autograd's, or under inference mode does not.
  auto impl = c10::make_intrusive<c10::TensorImpl>(
      c10::Storage(source.storage()),
      c10::DispatchKeySet(c10::computeDispatchKey(dtype, source.layout(), source.device())), meta);
  if (strides.empty()) {
    impl->set_sizes_contiguous(sizes);
  } else {
    impl->set_sizes_and_strides(sizes, strides);
  }
  impl->set_storage_offset(byte_offset / item);
  int64_t last = byte_offset / item;  // the furthest element the tensor reaches (none when empty)
  bool empty = false;
  for (size_t d = 0; d < sizes.size(); ++d) {
    empty = empty || sizes[d] == 0;
    last += (sizes[d] - 1) * impl->stride(d);
  }
  TORCH_INTERNAL_ASSERT(empty || (last + 1) * item <= static_cast<int64_t>(source.storage().nbytes()),
                        "w8a8: storage_tensor past the end of its storage");
  return at::Tensor::wrap_tensor_impl(std::move(impl));
}

// `dtype` `sizes` contiguous, `byte_offset` bytes into `buffer`'s storage: one of the outputs an
// op carves from one allocation.
inline at::Tensor carve(const at::Tensor& buffer, at::ScalarType dtype, c10::IntArrayRef sizes, int64_t byte_offset) {
  return storage_tensor(buffer, dtype, sizes, {}, byte_offset);
}

// The first elements of contiguous `t` as a contiguous tensor of `sizes`: t.narrow(0, 0, rows).view(sizes).
inline at::Tensor leading(const at::Tensor& t, c10::IntArrayRef sizes) {
  return storage_tensor(t, t.scalar_type(), sizes, {}, t.storage_offset() * static_cast<int64_t>(t.element_size()));
}

// t.reshape(sizes), directly where `t` is contiguous.
inline at::Tensor reshaped(const at::Tensor& t, c10::IntArrayRef sizes) {
  return t.is_contiguous() ? leading(t, sizes) : t.reshape(sizes);
}

// x [..., k] as [rows, k]: x itself where it is 2-D, else reshaped.
inline at::Tensor as_rows(const at::Tensor& x, int64_t k) {
  if (x.dim() == 2) return x;
  return k == 0 ? x.reshape({-1, k}) : reshaped(x, {x.numel() / k, k});
}

// `t` with `rows` rows (2-D, same strides and start): the sm90 GEMM's view of codes and scales over
// their padded storage. The caller checks the rows lie in the storage.
inline at::Tensor with_rows(const at::Tensor& t, int64_t rows) {
  return storage_tensor(t, t.scalar_type(), {rows, t.size(1)}, t.strides(),
                        t.storage_offset() * static_cast<int64_t>(t.element_size()));
}

}  // namespace w8a8
