// Norms over the last dimension: RMSNorm (optionally Gemma-style, scale by 1 + weight), fused
// residual-add + RMSNorm, LayerNorm. Accumulation in float; weights in T or float.
#ifndef XKERNELS_NORM_H_
#define XKERNELS_NORM_H_

#include "xkernels/row_kernel.h"

namespace xkernels {
namespace norm {

struct RMSNormAttr {
  float eps;
  float weight_offset;  // 0 for RMSNorm, 1 for Gemma's (1 + w)
};

// Sum of squares -> x * rsqrt(mean(x^2) + eps) * (weight_offset + w).
template <bool kFused>
struct RMSNormOp {
  using Stats = float;
  using Attr = RMSNormAttr;
  struct Param {
    float inv_rms;
  };
  using Unfused = RMSNormOp<false>;
  static constexpr bool kWeight = true, kBias = false, kFusedAdd = kFused, kShift = false;
  static constexpr bool kNoL1 = false, kStaged = !kFused;
  struct Merge {
    XK_DEVICE float operator()(float a, float b) const { return a + b; }
  };
  static XK_DEVICE float prep(float x, const Attr&) { return x; }
  static XK_DEVICE float identity() { return 0.f; }
  template <int VPT, int V, class Get, class Reduce>
  static XK_DEVICE float stats(Get v, const bool (&)[VPT], const Reduce& reduce, const Attr&,
                               float, int) {
    float s = 0.f;  // vectors that are not ok hold zeros
#pragma unroll
    for (int j = 0; j < VPT; ++j)
#pragma unroll
      for (int k = 0; k < V; ++k) s += v(j, k) * v(j, k);
    return reduce(s, reduce::Sum{});
  }
  static XK_DEVICE Param finalize(float sum_sq, int cols, const Attr& attr) {
    return {rsqrtf(sum_sq / static_cast<float>(cols) + attr.eps)};
  }
  static XK_DEVICE float apply(float v, float w, float, const Param& p, const Attr& attr) {
    return v * p.inv_rms * (attr.weight_offset + w);
  }
};

// Count, mean and sum of squared deviations, merged pairwise (Chan et al.) in a symmetric form.
struct MeanM2 {
  float n, mean, m2;
};

struct Sum2 {
  XK_DEVICE float2 operator()(float2 a, float2 b) const { return {a.x + b.x, a.y + b.y}; }
};

struct LayerNormOp {
  using Stats = MeanM2;
  struct Attr {
    float eps;
  };
  struct Param {
    float mean, inv_std;
  };
  using Unfused = LayerNormOp;
  static constexpr bool kWeight = true, kBias = true, kFusedAdd = false, kShift = true;
  // Each row re-reads two column vectors (weight and bias) as large as its own input: kept in
  // L1, they are not re-fetched from L2 per row. Measured on the H100, bf16 32768x8192: 2481 ->
  // 2879 GB/s (with plain loads ptxas also spilled 8 bytes at the 32-register cap). RMSNorm,
  // softmax and the activations lost 1-4% with it, so they keep plain loads.
  static constexpr bool kNoL1 = true, kStaged = true;
  struct Merge {
    XK_DEVICE MeanM2 operator()(const MeanM2& a, const MeanM2& b) const {
      const float n = a.n + b.n;
      if (n == 0.f) return a;
      const float d = b.mean - a.mean;
      return {n, (a.n * a.mean + b.n * b.mean) / n, a.m2 + b.m2 + d * d * (a.n * b.n / n)};
    }
  };
  static XK_DEVICE float prep(float x, const Attr&) { return x; }
  static XK_DEVICE MeanM2 identity() { return {0.f, 0.f, 0.f}; }
  // One reduction of (sum d, sum d^2) with d = x - shift, the row's first value: shifted
  // to a point of the row, the plain sums do not cancel catastrophically (the variance's error is
  // relative to the spread around that point, about the row's own). Measured on the H100 against
  // the two reductions of a mean and then the squared deviations from it: see the commit log.
  template <int VPT, int V, class Get, class Reduce>
  // The count is known (the scope's share of the row), so only two sums are reduced.
  static XK_DEVICE MeanM2 stats(Get v, const bool (&ok)[VPT], const Reduce& reduce, const Attr&,
                                float shift, int count) {
    float2 acc = {0.f, 0.f};
#pragma unroll
    for (int j = 0; j < VPT; ++j) {
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const float d = ok[j] ? v(j, k) - shift : 0.f;
        acc.x += d;
        acc.y += d * d;
      }
    }
    acc = reduce(acc, Sum2{});
    if (count == 0) return {0.f, shift, 0.f};
    const float n = static_cast<float>(count), mean_d = acc.x / n;
    return {n, shift + mean_d, fmaxf(acc.y - acc.x * mean_d, 0.f)};
  }
  static XK_DEVICE Param finalize(const MeanM2& s, int cols, const Attr& attr) {
    return {s.mean, rsqrtf(s.m2 / static_cast<float>(cols) + attr.eps)};
  }
  static XK_DEVICE float apply(float v, float w, float b, const Param& p, const Attr&) {
    return (v - p.mean) * p.inv_std * w + b;
  }
};

}  // namespace norm

/// RMSNorm of each row of input [rows, cols]: out = x / sqrt(mean(x^2) + eps) * w, or with
/// gemma = true, * (1 + w). weight: [cols] of T or float. Strides are in elements.
template <typename T, typename W>
cudaError_t RMSNorm(T* out, const T* input, const W* weight, int64_t rows, int cols,
                    RowStride out_stride, RowStride in_stride, float eps, cudaStream_t stream,
                    bool gemma = false) {
  rowwise::RowArgs<T, W> a;
  a.out = out;
  a.out_rs = out_stride;
  a.in = input;
  a.in_rs = in_stride;
  a.weight = weight;
  a.rows = rows;
  a.cols = cols;
  return rowwise::LaunchRows<norm::RMSNormOp<false>>(a, {eps, gemma ? 1.f : 0.f}, stream);
}

/// residual_out = round(input + residual); out = RMSNorm(residual_out). For the in-place form,
/// pass out = input and residual_out = residual.
template <typename T, typename W>
cudaError_t FusedAddRMSNorm(T* out, T* residual_out, const T* input, const T* residual,
                            const W* weight, int64_t rows, int cols, RowStride out_stride,
                            RowStride residual_out_stride, RowStride in_stride,
                            RowStride residual_stride, float eps, cudaStream_t stream,
                            bool gemma = false) {
  rowwise::RowArgs<T, W> a;
  a.out = out;
  a.out_rs = out_stride;
  a.res_out = residual_out;
  a.res_out_rs = residual_out_stride;
  a.in = input;
  a.in_rs = in_stride;
  a.res = residual;
  a.res_rs = residual_stride;
  a.weight = weight;
  a.rows = rows;
  a.cols = cols;
  return rowwise::LaunchRows<norm::RMSNormOp<true>>(a, {eps, gemma ? 1.f : 0.f}, stream);
}

/// LayerNorm of each row: (x - mean) / sqrt(var + eps) * weight + bias (biased variance).
template <typename T, typename W>
cudaError_t LayerNorm(T* out, const T* input, const W* weight, const W* bias, int64_t rows,
                      int cols, RowStride out_stride, RowStride in_stride, float eps,
                      cudaStream_t stream) {
  rowwise::RowArgs<T, W> a;
  a.out = out;
  a.out_rs = out_stride;
  a.in = input;
  a.in_rs = in_stride;
  a.weight = weight;
  a.bias = bias;
  a.rows = rows;
  a.cols = cols;
  return rowwise::LaunchRows<norm::LayerNormOp>(a, {eps}, stream);
}

}  // namespace xkernels

#endif  // XKERNELS_NORM_H_
