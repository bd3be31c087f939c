// Launch helpers shared by every launcher: error propagation, device properties, sizes.
#ifndef XKERNELS_COMMON_H_
#define XKERNELS_COMMON_H_

#include <cuda_runtime.h>

#include <cstdint>

#include "xkernels/rows.h"

#define XK_DEVICE __device__ __forceinline__

// Evaluate a CUDA runtime call and return its error from the enclosing function if it failed.
#define XK_CUDA_TRY(expr)                  \
  do {                                     \
    const cudaError_t xk_err_ = (expr);    \
    if (xk_err_ != cudaSuccess) return xk_err_; \
  } while (0)

// After a <<<...>>> launch: the launch's own error (bad configuration, missing image), if any.
#define XK_LAUNCH_CHECK() XK_CUDA_TRY(cudaGetLastError())

namespace xkernels {

template <typename I>
constexpr I ceil_div(I a, I b) {
  return (a + b - 1) / b;
}

inline bool is_aligned(const void* p, int64_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(bytes) == 0;
}

// Properties of the current device, read once per device and cached (launchers are hot).
struct DeviceProps {
  int sm_count = 0;
  int cc_major = 0;
};

inline cudaError_t GetDeviceProps(DeviceProps* out) {
  constexpr int kMaxDevices = 64;
  static DeviceProps cache[kMaxDevices];
  int dev = 0;
  XK_CUDA_TRY(cudaGetDevice(&dev));
  if (dev < 0 || dev >= kMaxDevices) return cudaErrorInvalidDevice;
  DeviceProps& p = cache[dev];
  if (p.sm_count == 0) {  // benign race: every thread writes the same values
    XK_CUDA_TRY(cudaDeviceGetAttribute(&p.cc_major, cudaDevAttrComputeCapabilityMajor, dev));
    XK_CUDA_TRY(cudaDeviceGetAttribute(&p.sm_count, cudaDevAttrMultiProcessorCount, dev));
  }
  *out = p;
  return cudaSuccess;
}

}  // namespace xkernels

#endif  // XKERNELS_COMMON_H_
