// Turning a CUTLASS status into the exception the kernel entries throw
// (shared by the sm90 and sm80 launchers).
#pragma once

#include <stdexcept>
#include <string>

#include <cuda_runtime_api.h>
#include <cutlass/cutlass.h>

namespace w8a8 {

// Throws "CUTLASS <step> failed: <status>" (plus the pending CUDA error, if
// any) unless `status` is kSuccess.
inline void throw_if_failed(cutlass::Status status, const char* step) {
  if (status != cutlass::Status::kSuccess) {
    std::string message = std::string("CUTLASS ") + step + " failed: " + cutlassGetStatusString(status);
    cudaError_t error = cudaGetLastError();
    if (error != cudaSuccess) {
      message += std::string(" (CUDA: ") + cudaGetErrorString(error) + ")";
    }
    throw std::runtime_error(message);
  }
}

}  // namespace w8a8
