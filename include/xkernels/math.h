// PTX math: the fast approximations used by the 16-bit paths, with accurate float fallbacks.
#ifndef XKERNELS_MATH_H_
#define XKERNELS_MATH_H_

#include "xkernels/common.h"

namespace xkernels::math {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
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
// gelu(x) = x * Phi(x), Phi the normal CDF, in one of two forms:
// - 0.5 x (1 + erff(x / sqrt(2))): the default. erff is cheap (one branch per element, ex2 on
//   one side only), but cancels for x < 0: rounded to bf16 (fp16), 17% (3.4%) of outputs over
//   [-20, 20] are off the correctly rounded value, all in the tail.
// - kShort (with kFast): Phi from erfc's tail, branchless, two MUFU ops. For z = |x| / sqrt(2),
//   t = 1 / (1 + z / 2): erfc(z) / 2 = t * e^(-z^2) * P(t), P of degree 6 fitted (weighted least
//   squares toward minimax, z in [0, 10], where e^(-z^2) runs out of floats) to a relative error
//   of 1.4e-6; Phi = 1 - erfc(z) / 2 for x >= 0, erfc(z) / 2 below. 0.009% (0.03%) of bf16
//   (fp16) outputs off the correctly rounded value.
// The gated elementwise kernels take kShort for 16-bit outputs in every grid (the plain gelu and
// add_bias_gelu in latency grids only; on fast_memory the plain gelu in every grid: BiasActK).
// Measured on the H100, bf16 gelu_and_mul, CUDA graphs, erff / kShort (A/B): 1x28672 1.61 / 1.42
// us, 4096x28672 116.00 / 116.57 us, 8192x28672 229.46 / 231.05 us (torch.compile 230.43; silu
// 230.92); on the H200, whose memory outruns erff's arithmetic there, 8192x14336 192.71 / 160.44
// us (silu_and_mul 161.20; see ActAndMulK).
template <bool kFast, bool kShort = false>
XK_DEVICE float gelu(float x) {
  if constexpr (kFast && kShort) {
    const float t = rcp_approx(fmaf(fabsf(x), 0.35355339059327376f, 1.f));  // 1 / (1 + z / 2)
    float p = 0.04408267140388489f;
    p = fmaf(p, t, -0.17829281091690063f);
    p = fmaf(p, t, 0.19449609518051147f);
    p = fmaf(p, t, 0.019032856449484825f);
    p = fmaf(p, t, 0.1407177448272705f);
    p = fmaf(p, t, 0.1387975513935089f);
    p = fmaf(p, t, 0.14116524159908295f);
    const float h = t * p * ex2_approx(x * x * (-0.5f * kLog2e));  // erfc(z) / 2
    return x * (x >= 0.f ? 1.f - h : h);
  }
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

// kShort: the form with the shorter dependency chain where there is a choice (gelu).
template <Act A, bool kFast, bool kShort = false>
XK_DEVICE float activate(float x) {
  if constexpr (A == Act::kSilu) return silu<kFast>(x);
  if constexpr (A == Act::kGelu) return gelu<kFast, kShort>(x);
  return gelu_tanh<kFast>(x);
}

}  // namespace xkernels::math

#endif  // XKERNELS_MATH_H_
