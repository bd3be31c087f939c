// Launch helpers shared by every launcher: error propagation, device properties, sizes.
#ifndef XKERNELS_COMMON_H_
#define XKERNELS_COMMON_H_

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <utility>

#include "xkernels/rows.h"

#define XK_DEVICE __device__ __forceinline__

// Evaluate a CUDA runtime call and return its error from the enclosing function if it failed.
#define XK_CUDA_TRY(expr)                       \
  do {                                          \
    const cudaError_t xk_err_ = (expr);         \
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

// Launchers cache what they ask the driver per device, in tables of kMaxDevices entries.
constexpr int kMaxDevices = 64;

inline cudaError_t CurrentDevice(int* dev) {
  XK_CUDA_TRY(cudaGetDevice(dev));
  return *dev >= 0 && *dev < kMaxDevices ? cudaSuccess : cudaErrorInvalidDevice;
}

// How many blocks or clusters of kKernel fit on the device at once for a launch shape `key`, as
// ask(&fit) tells (the driver's occupancy calculator): asked once per device and shape, then
// cached (launchers are hot), one entry per device holding the last shape asked about. At least 1.
template <auto kKernel, class Ask>
cudaError_t CachedFit(int key, int* fit, Ask ask) {
  struct Entry {
    int key = -1, fit = 0;
  };
  static Entry entries[kMaxDevices];
  int dev = 0;
  XK_CUDA_TRY(CurrentDevice(&dev));
  Entry& e = entries[dev];
  if (e.key != key) {
    int n = 0;
    XK_CUDA_TRY(ask(&n));
    e = {key, n > 1 ? n : 1};  // benign race: every thread writes the same
  }
  *fit = e.fit;
  return cudaSuccess;
}

// Properties of the current device, read once per device and cached (launchers are hot).
struct DeviceProps {
  int sm_count = 0;
  int cc_major = 0;
  int smem_optin = 0;  // shared memory a block may opt in to, in bytes
  int smem_per_sm = 0;    // shared memory of an SM, in bytes
  int smem_reserved = 0;  // shared memory the system reserves per block, in bytes
  int mem_gbps = 0;       // DRAM bandwidth from the memory clock and bus width, GB/s (0: unknown)
};

// Memory this fast (GB/s, DeviceProps::mem_gbps; by the published clocks and buses the H200's
// 6144-bit HBM3e at 3.2 GHz gives 4916, the H100 SXM's 5120-bit HBM3 at 2.6 GHz 3352, the H100
// NVL's 6144 bits at 2.6 GHz 4023; rows_probe prints the device's) takes the launch rules
// measured on the H200 where they differ from the H100's (row_kernel.h, activation.h).
constexpr int kFastMemoryGBps = 4300;
inline bool fast_memory(const DeviceProps& p) { return p.mem_gbps >= kFastMemoryGBps; }

inline cudaError_t GetDeviceProps(DeviceProps* out) {
  static DeviceProps cache[kMaxDevices];
  int dev = 0;
  XK_CUDA_TRY(CurrentDevice(&dev));
  DeviceProps& p = cache[dev];
  if (p.sm_count == 0) {  // benign race: every thread writes the same values
    XK_CUDA_TRY(cudaDeviceGetAttribute(&p.cc_major, cudaDevAttrComputeCapabilityMajor, dev));
    XK_CUDA_TRY(
        cudaDeviceGetAttribute(&p.smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    XK_CUDA_TRY(
        cudaDeviceGetAttribute(&p.smem_per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev));
    XK_CUDA_TRY(
        cudaDeviceGetAttribute(&p.smem_reserved, cudaDevAttrReservedSharedMemoryPerBlock, dev));
    // Double data rate: 2 transfers a clock. A device that does not report them gets 0 (and the
    // H100's rules), not an error.
    int clock_khz = 0, bus_bits = 0;
    if (cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, dev) != cudaSuccess) {
      (void)cudaGetLastError();  // not sticky: cleared for the caller's next check
      clock_khz = bus_bits = 0;
    }
    p.mem_gbps = static_cast<int>(2ll * clock_khz * (bus_bits / 8) / 1000000);
    XK_CUDA_TRY(cudaDeviceGetAttribute(&p.sm_count, cudaDevAttrMultiProcessorCount, dev));
  }
  *out = p;
  return cudaSuccess;
}

// kKernel's dynamic shared memory limit raised to `bytes`, once per device and kernel (above 48 KB
// a block must opt in). Returns kKernel.
template <auto kKernel>
cudaError_t SmemOptIn(int bytes, decltype(kKernel)* kernel) {
  static bool ready[kMaxDevices] = {};
  int dev = 0;
  XK_CUDA_TRY(CurrentDevice(&dev));
  if (!ready[dev]) {  // benign race: every thread sets the same attribute
    XK_CUDA_TRY(cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    ready[dev] = true;
  }
  *kernel = kKernel;
  return cudaSuccess;
}

// Programmatic dependent launch (PDL, sm_90+). Kernels launched with it may start while the
// kernel before them in the stream is still running: they call pdl_wait() before their first
// global memory access (it returns once that kernel has completed and its writes are visible;
// a no-op for a kernel launched without PDL), and pdl_release() to let the kernel after them
// start early. What this hides is the launch itself: measured on the H100 in CUDA graphs, bf16
// rmsnorm 1x4096 2.08 -> 1.89 us, 128x4096 2.89 -> 2.58 us, silu_and_mul 1x28672 1.77 -> 1.49.
XK_DEVICE void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
XK_DEVICE void pdl_release() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Launches use PDL on sm_90+ unless XKERNELS_DISABLE_PDL=1 (read once per process).
inline bool UsePDL(const DeviceProps& props) {
  static const bool disabled = [] {
    const char* v = std::getenv("XKERNELS_DISABLE_PDL");
    return v != nullptr && v[0] != '\0' && v[0] != '0';
  }();
  return props.cc_major >= 9 && !disabled;
}

// A launch configuration: `grid` x `block` on `stream`, as clusters of `cluster` blocks along x
// when cluster > 1 (sm_90+), with PDL when `pdl`, and `smem_bytes` of dynamic shared memory.
// Not copyable: `cfg` points into it.
struct LaunchConfig {
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attrs[2];

  LaunchConfig(dim3 grid, dim3 block, cudaStream_t stream, int cluster, bool pdl,
               size_t smem_bytes = 0) {
    int n = 0;
    if (cluster > 1) {
      attrs[n].id = cudaLaunchAttributeClusterDimension;
      attrs[n].val.clusterDim.x = static_cast<unsigned>(cluster);
      attrs[n].val.clusterDim.y = 1;
      attrs[n].val.clusterDim.z = 1;
      ++n;
    }
    if (pdl) {
      attrs[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
      attrs[n].val.programmaticStreamSerializationAllowed = 1;
      ++n;
    }
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem_bytes;
    cfg.stream = stream;
    cfg.attrs = attrs;
    cfg.numAttrs = n;
  }
  LaunchConfig(const LaunchConfig&) = delete;
  LaunchConfig& operator=(const LaunchConfig&) = delete;
};

// Launch `kernel` on `stream`, with PDL where UsePDL allows, and as clusters of `cluster` blocks
// along x when cluster > 1 (sm_90+). Returns the launch's error.
template <typename... Params, typename... Args>
cudaError_t LaunchKernel(void (*kernel)(Params...), dim3 grid, dim3 block, cudaStream_t stream,
                         const DeviceProps& props, int cluster, Args&&... args) {
  const LaunchConfig lc(grid, block, stream, cluster, UsePDL(props));
  return cudaLaunchKernelEx(&lc.cfg, kernel, std::forward<Args>(args)...);
}

// LaunchKernel for grids of one wave or less of blocks without static shared memory, more blocks
// than SMs, spread evenly: at most ceil(blocks / SMs) per SM, held there by dynamic shared
// memory, where that is fewer than fit. Else the scheduler fills SMs as they free up, and with PDL
// the next kernel's blocks take the slots this grid leaves free, so that where this grid's blocks
// land (and when it ends) follows the kernel before it: some SMs then hold twice the blocks of
// others.
// Dynamic shared memory per block of which `cap` blocks fit on an SM and cap + 1 do not (blocks
// with no static shared memory), or 0 where no size does that.
inline int64_t SpreadSmem(int cap, const DeviceProps& props) {
  const int64_t bytes = props.smem_per_sm / (cap + 1) + 16;
  return cap * (bytes + props.smem_reserved) > props.smem_per_sm || bytes > props.smem_optin
             ? 0
             : bytes;
}

template <auto kKernel, typename... Args>
cudaError_t LaunchSpread(dim3 grid, int threads, cudaStream_t stream, const DeviceProps& props,
                         Args&&... args) {
  const int64_t blocks = int64_t{grid.x} * grid.y * grid.z;
  const int cap = static_cast<int>((blocks + props.sm_count - 1) / props.sm_count);
  int fit = 0;
  XK_CUDA_TRY(CachedFit<kKernel>(threads, &fit, [&](int* f) {
    return cudaOccupancyMaxActiveBlocksPerMultiprocessor(f, kKernel, threads, 0);
  }));
  const int64_t bytes = SpreadSmem(cap, props);
  if (blocks <= props.sm_count || cap >= fit || bytes == 0) {
    return LaunchKernel(kKernel, grid, threads, stream, props, 1, std::forward<Args>(args)...);
  }
  decltype(kKernel) kernel;
  XK_CUDA_TRY(SmemOptIn<kKernel>(props.smem_optin, &kernel));
  const LaunchConfig lc(grid, threads, stream, 1, UsePDL(props), static_cast<size_t>(bytes));
  return cudaLaunchKernelEx(&lc.cfg, kernel, std::forward<Args>(args)...);
}

}  // namespace xkernels

#endif  // XKERNELS_COMMON_H_
