// Float vectors of the CPU's register width for the host products (attention.cc, gemm.cc): GCC
// and Clang vector extensions, whose arithmetic runs lane by lane (IEEE float, no contraction:
// -ffp-contract=off) in one register where the width matches the CPU's. A product keeps its R x C
// partial results in such values, so that they stay in registers (loops over float arrays left
// them in memory: 5-7 GFLOP/s on a 2-CPU Xeon). Each call takes the width of the code that runs
// (VectorLanes): wider values are split into pieces that GCC moves through memory (16 floats on
// AVX2: 3 GFLOP/s).
#ifndef XKERNELS_BINDINGS_HOST_VECTORS_H_
#define XKERNELS_BINDINGS_HOST_VECTORS_H_

#include <cstdint>
#include <cstring>

#include "host/convert.h"

// (Vec values cross only inline functions of the host files: no ABI to keep.)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

namespace xkernels::host {

template <int64_t W>
struct VecOf {
  typedef float type __attribute__((vector_size(W * sizeof(float))));
};
template <int64_t W>
using Vec = typename VecOf<W>::type;

template <int64_t W>
inline Vec<W> LoadV(const float* p) {
  Vec<W> v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <class V>
inline void StoreV(float* p, const V& v) {
  std::memcpy(p, &v, sizeof v);
}

// Floats per vector register of the code that runs: with XK_HOST_CLONES, the clone of this CPU
// (x86-64-v4: 16, AVX-512; v3: 8, AVX2; else 4); without, the target it was compiled for.
inline int64_t VectorLanes() {
#if defined(XK_HOST_CLONED) && __GNUC__ >= 12  // ISA levels in __builtin_cpu_supports
  static const int64_t lanes = __builtin_cpu_supports("x86-64-v4")   ? 16
                               : __builtin_cpu_supports("x86-64-v3") ? 8
                                                                     : 4;
  return lanes;
#elif defined(XK_HOST_CLONED)  // GCC 11: the levels' defining features
  static const int64_t lanes =
      __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
              __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")
          ? 16
      : __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? 8
                                                                        : 4;
  return lanes;
#elif defined(__AVX512F__)
  return 16;
#elif defined(__AVX2__)
  return 8;
#else
  return 4;
#endif
}

}  // namespace xkernels::host

#endif  // XKERNELS_BINDINGS_HOST_VECTORS_H_
