// What the standalone kernel probes (benchmarks/*_probe.cu) share: a CUDA error check that stops
// the probe, the hash their random inputs come from (the same inputs on every run), a bf16 fill.
#ifndef XKERNELS_BENCHMARKS_PROBE_H_
#define XKERNELS_BENCHMARKS_PROBE_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#define CHECK(x)                                                                                 \
  do {                                                                                           \
    cudaError_t e_ = (x);                                                                        \
    if (e_ != cudaSuccess) {                                                                     \
      std::printf("CUDA error %s at %s:%d: %s\n", cudaGetErrorName(e_), __FILE__, __LINE__, #x); \
      std::exit(1);                                                                              \
    }                                                                                            \
  } while (0)

// splitmix64's finaliser over (seed, i): 64 well-mixed bits per element index.
__device__ inline uint64_t ProbeHash(uint64_t seed, uint64_t i) {
  uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull ^ seed;
  x ^= x >> 31, x *= 0xBF58476D1CE4E5B9ull, x ^= x >> 29, x *= 0x94D049BB133111EBull, x ^= x >> 32;
  return x;
}

// p[i] uniform in [lo, hi), rounded to bf16, from ProbeHash(seed, i).
__global__ void FillB16(__nv_bfloat16* p, int64_t n, uint64_t seed, float lo, float hi) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float u = static_cast<float>(ProbeHash(seed, i) & 0xFFFFFF) / 16777216.f;
    p[i] = __float2bfloat16(lo + (hi - lo) * u);
  }
}

#endif  // XKERNELS_BENCHMARKS_PROBE_H_
