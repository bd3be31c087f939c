// PTX math: the fast approximations used by the 16-bit paths, with accurate float fallbacks.
#ifndef XKERNELS_MATH_H_
#define XKERNELS_MATH_H_

#include "xkernels/common.h"

namespace xkernels::math {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kInf = __builtin_huge_valf();

XK_DEVICE float ex2_approx(float x) {  // 2^x; -inf -> +0
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
XK_DEVICE float lg2_approx(float x) {
  float y;
  asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
XK_DEVICE float rcp_approx(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
XK_DEVICE float rsqrt_approx(float x) {
  float y;
  asm("rsqrt.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
XK_DEVICE float tanh_approx(float x) {  // sm_75+; max relative error about 2^-11
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Activations. kFast selects the PTX approximations: right for 16-bit outputs, whose rounding
// (2^-8, 2^-11) dwarfs them; float outputs keep the accurate library functions.
template <bool kFast>
XK_DEVICE float silu(float x) {
  if constexpr (kFast) return x * rcp_approx(1.f + ex2_approx(-x * kLog2e));
  return x / (1.f + expf(-x));
}
template <bool kFast>
XK_DEVICE float gelu(float x) {  // exact (erf) form; erff is accurate and cheap enough for both
  return 0.5f * x * (1.f + erff(x * 0.70710678118654752f));
}
template <bool kFast>
XK_DEVICE float gelu_tanh(float x) {
  constexpr float kAlpha = 0.79788456080286536f;  // sqrt(2 / pi)
  const float u = kAlpha * (x + 0.044715f * x * x * x);
  if constexpr (kFast) return 0.5f * x * (1.f + tanh_approx(u));
  return 0.5f * x * (1.f + tanhf(u));
}

enum class Act : int { kSilu = 0, kGelu = 1, kGeluTanh = 2 };

template <Act A, bool kFast>
XK_DEVICE float activate(float x) {
  if constexpr (A == Act::kSilu) return silu<kFast>(x);
  if constexpr (A == Act::kGelu) return gelu<kFast>(x);
  return gelu_tanh<kFast>(x);
}

}  // namespace xkernels::math

#endif  // XKERNELS_MATH_H_
