// Conversions between float and the 16-bit float types, and whole-row loads and stores, shared by
// the host implementations (ops.cc, attention.cc, gemm.cc). Plain C++: rounding is to nearest
// even, and the 16-bit conversions are branch-free so that the kLanes blocks below vectorize.
#ifndef XKERNELS_BINDINGS_HOST_CONVERT_H_
#define XKERNELS_BINDINGS_HOST_CONVERT_H_

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "host/ops.h"

// With GCC on x86-64 glibc, a function with this attribute also gets x86-64-v3 (AVX2, FMA, F16C)
// and x86-64-v4 (AVX-512) clones, picked at load time. -ffp-contract=off (jit.py) keeps any clone
// from fusing a multiply and an add that the source does not, and std::fma rounds once in all of
// them: the same arithmetic in the same order, so the same results.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__GLIBC__) && \
    !defined(XKERNELS_HOST_NO_CLONES)
#define XK_HOST_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"), flatten))
#define XK_HOST_CLONED 1  // the clone that runs is the CPU's: x86-64-v4 where it has AVX-512
#else
#define XK_HOST_CLONES
#endif

namespace xkernels::host {

// Elements per block of the per-element loops: a fixed trip count, which GCC vectorizes.
constexpr int64_t kLanes = 16;

// part[0] + ... + part[kLanes - 1], added pairwise (lane j + w into lane j, w = kLanes / 2 .. 1):
// kLanes partial sums of a vectorized loop into one, in the same order on every CPU.
inline float AddLanes(float* part) {
  for (int64_t w = kLanes / 2; w > 0; w /= 2)
    for (int64_t j = 0; j < w; ++j) part[j] += part[j + w];
  return part[0];
}

inline float BitsToFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint32_t FloatToBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline uint16_t Load16(const char* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return h;
}
inline void Store16(char* p, uint16_t h) { std::memcpy(p, &h, 2); }

inline float Bf16ToFloat(uint16_t h) { return BitsToFloat(static_cast<uint32_t>(h) << 16); }
inline uint16_t FloatToBf16(float f) {  // round to nearest even; NaN stays NaN (quiet)
  const uint32_t u = FloatToBits(f);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t quiet = (u >> 16) | 0x40u;
  return static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? quiet : rounded);
}

// Branch-free, so that the kLanes blocks vectorize: both outcomes computed, one selected.
inline float F16ToFloat(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16, em = h & 0x7fffu;  // em: exponent and mantissa
  const uint32_t normal = (em << 13) + (112u << 23);            // rebias 15 -> 127
  const uint32_t inf_nan = (em << 13) | 0x7f800000u;
  // zero, subnormal: em * 2^-24, exact in float
  const uint32_t sub = FloatToBits(static_cast<float>(static_cast<int32_t>(em)) * 5.9604645e-8f);
  const uint32_t bits = em < 0x400u ? sub : (em >= 0x7c00u ? inf_nan : normal);
  return BitsToFloat(sign | bits);
}
inline uint16_t FloatToF16(float f) {  // round to nearest even; branch-free as F16ToFloat
  const uint32_t u = FloatToBits(f), sign = (u >> 16) & 0x8000u, ua = u & 0x7fffffffu;
  // normal: rebias 127 -> 15 and round off 13 bits (a carry moves into the exponent)
  const uint32_t normal = (ua - (112u << 23) + 0xfffu + ((ua >> 13) & 1u)) >> 13;
  // below 2^-14, multiples of 2^-24: 0.5 + |f| rounds to one (0.5's ulp is 2^-24), and
  // 2^-14 itself comes out as 0x400, the smallest normal
  const uint32_t sub = FloatToBits(BitsToFloat(ua) + 0.5f) - 0x3f000000u;
  uint32_t h = ua < 0x38800000u ? sub : normal;
  h = ua >= 0x477ff000u ? 0x7c00u : h;  // from 65520 up (inf too): overflows to inf
  h = ua > 0x7f800000u ? 0x7e00u : h;   // NaN
  return static_cast<uint16_t>(sign | h);
}

// float8 e4m3fn (the OCP FP8 E4M3 of H100's tensor cores): sign, 4 exponent bits of bias 7, 3
// mantissa bits; no infinities, 0x7f and 0xff are NaN; the largest finite value is 448 (0x7e),
// subnormals are multiples of 2^-9.
inline float E4M3ToFloat(uint8_t q) {
  const uint32_t sign = (q & 0x80u) << 24, exp = (q >> 3) & 0xf, man = q & 0x7;
  if (exp == 0xf && man == 0x7) return BitsToFloat(sign | 0x7fc00000u);  // NaN
  if (exp == 0) {  // zero, subnormal: man * 2^-9
    const float v = static_cast<float>(man) * 0.001953125f;
    return sign ? -v : v;
  }
  return BitsToFloat(sign | ((exp + 120) << 23) | (man << 20));
}

// Round to nearest even, saturating to +-448 (infinities too, as cvt.rn.satfinite does); NaN stays
// NaN (0x7f with f's sign).
inline uint8_t FloatToE4M3(float f) {
  const uint32_t u = FloatToBits(f);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const float a = std::fabs(f);
  if (std::isnan(f)) return sign | 0x7f;
  // From 464, the midpoint between 448 and the next step (480, which e4m3fn spends on NaN), the
  // even neighbour 448 or saturation: 448 either way.
  if (a >= 464.f) return sign | 0x7e;
  if (a < 0.015625f) {  // below the smallest normal 2^-6: a * 2^9 rounds to 0..8 (8: 2^-6, 0x08)
    return sign | static_cast<uint8_t>(std::nearbyint(a * 512.f));
  }
  const uint32_t ua = FloatToBits(a);
  const uint32_t rounded = ua + 0x7ffffu + ((ua >> 20) & 1u);  // 23 -> 3 mantissa bits, ties even
  return sign | static_cast<uint8_t>((((rounded >> 23) - 120) << 3) | ((rounded >> 20) & 0x7));
}

inline size_t DTypeSize(DType t) { return t == DType::kF32 ? 4 : 2; }

// n contiguous elements of type t at p, as floats: one dtype switch per row.
inline void LoadFloats(const char* __restrict p, DType t, int64_t n, float* __restrict dst) {
  int64_t c = 0;
  switch (t) {
    case DType::kF32:
      std::memcpy(dst, p, 4 * n);
      return;
    case DType::kBF16:
      for (; c + kLanes <= n; c += kLanes)
        for (int64_t j = 0; j < kLanes; ++j) dst[c + j] = Bf16ToFloat(Load16(p + 2 * (c + j)));
      for (; c < n; ++c) dst[c] = Bf16ToFloat(Load16(p + 2 * c));
      return;
    case DType::kF16:
      for (; c + kLanes <= n; c += kLanes)
        for (int64_t j = 0; j < kLanes; ++j) dst[c + j] = F16ToFloat(Load16(p + 2 * (c + j)));
      for (; c < n; ++c) dst[c] = F16ToFloat(Load16(p + 2 * c));
      return;
  }
}

// Stores f(0), ..., f(n - 1) as n contiguous elements of type t at p, each rounded to t.
template <class F>
inline void StoreFloats(char* __restrict p, DType t, int64_t n, F f) {
  int64_t c = 0;
  switch (t) {
    case DType::kF32:
      for (; c + kLanes <= n; c += kLanes) {
        for (int64_t j = 0; j < kLanes; ++j) {
          const float v = f(c + j);
          std::memcpy(p + 4 * (c + j), &v, 4);
        }
      }
      for (; c < n; ++c) {
        const float v = f(c);
        std::memcpy(p + 4 * c, &v, 4);
      }
      return;
    case DType::kBF16:
      for (; c + kLanes <= n; c += kLanes)
        for (int64_t j = 0; j < kLanes; ++j) Store16(p + 2 * (c + j), FloatToBf16(f(c + j)));
      for (; c < n; ++c) Store16(p + 2 * c, FloatToBf16(f(c)));
      return;
    case DType::kF16:
      for (; c + kLanes <= n; c += kLanes)
        for (int64_t j = 0; j < kLanes; ++j) Store16(p + 2 * (c + j), FloatToF16(f(c + j)));
      for (; c < n; ++c) Store16(p + 2 * c, FloatToF16(f(c)));
      return;
  }
}

}  // namespace xkernels::host

#endif  // XKERNELS_BINDINGS_HOST_CONVERT_H_
