// Capability, SM count and shared memory per SM of the visible CUDA devices,
// queried once (shared by the bindings).
#pragma once

#include <vector>

#include <cuda_runtime_api.h>

#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>

#include "torch/messages.h"

namespace w8a8 {

struct DeviceInfo {
  int major = 0, minor = 0, sm_count = 0;
  int shared_memory_per_sm = 0;  // bytes of one multiprocessor (what its resident CTAs share)
};

// Capability and SM count of every visible device, queried once (C++ static
// initialisation is thread-safe) and read lock-free afterwards.
inline const DeviceInfo& device_info(c10::DeviceIndex device) {
  static const std::vector<DeviceInfo> infos = [] {
    std::vector<DeviceInfo> all(c10::cuda::device_count());
    for (int d = 0; d < static_cast<int>(all.size()); ++d) {
      C10_CUDA_CHECK(cudaDeviceGetAttribute(&all[d].major, cudaDevAttrComputeCapabilityMajor, d));
      C10_CUDA_CHECK(cudaDeviceGetAttribute(&all[d].minor, cudaDevAttrComputeCapabilityMinor, d));
      C10_CUDA_CHECK(cudaDeviceGetAttribute(&all[d].sm_count, cudaDevAttrMultiProcessorCount, d));
      C10_CUDA_CHECK(cudaDeviceGetAttribute(&all[d].shared_memory_per_sm,
                                            cudaDevAttrMaxSharedMemoryPerMultiprocessor, d));
    }
    return all;
  }();
  TORCH_INTERNAL_ASSERT(device >= 0 && device < static_cast<int>(infos.size()),
                        msg::join("device ", int(device), " out of range"));
  return infos[device];
}

}  // namespace w8a8
