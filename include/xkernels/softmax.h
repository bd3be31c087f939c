// Softmax over the last dimension, in base 2 internally: v = x * scale * log2(e), out = 2^(v - max)
// / sum. A row that is entirely -inf gives zeros (there is no mass to normalise), not NaN.
#ifndef XKERNELS_SOFTMAX_H_
#define XKERNELS_SOFTMAX_H_

#include "xkernels/math.h"
#include "xkernels/row_kernel.h"

namespace xkernels {
namespace softmax {

// Running max and sum of 2^(v - max): the online-softmax state.
struct MaxSum {
  float m, s;
};

struct SoftmaxOp {
  using Stats = MaxSum;
  struct Attr {
    float scale_log2;  // scale * log2(e)
  };
  struct Param {
    float m, inv_sum;
  };
  using Unfused = SoftmaxOp;
  static constexpr bool kWeight = false, kBias = false, kFusedAdd = false, kShift = false;
  // Staged persistent clusters measured slower for softmax (4096x131072 bf16: 2259 vs 2620
  // GB/s; ptxas spilled 12 bytes at the 64-register cap), faster for the norms. Without weights,
  // its rows of 64 KB or more take RowKernelSmem (2780-2826 there).
  static constexpr bool kNoL1 = false, kStaged = false;
  // Pairwise: two ex2 per merge, branch-free (measured on the H100 against a one-ex2 merge that
  // picks the larger max with selects: 32768x8192 bf16 2759 vs 2588 GB/s). Across lanes
  // (`lanes`, which the reducers prefer): a max butterfly, one rescale of each lane's sum to
  // the common max, a sum butterfly: one ex2 per lane instead of two per merge step.
  struct Merge {
    XK_DEVICE MaxSum operator()(const MaxSum& a, const MaxSum& b) const {
      const float m = fmaxf(a.m, b.m);
      if (m == -math::kInf) return {m, 0.f};
      return {m, a.s * math::ex2_approx(a.m - m) + b.s * math::ex2_approx(b.m - m)};
    }
    static XK_DEVICE MaxSum identity() { return {-math::kInf, 0.f}; }
    static XK_DEVICE MaxSum lanes(MaxSum v, int width) {
      float m = v.m;
      for (int o = width >> 1; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
      float s = m == -math::kInf ? 0.f : v.s * math::ex2_approx(v.m - m);  // 2^-inf = 0
      for (int o = width >> 1; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
      return {m, s};
    }
  };
  static XK_DEVICE float prep(float x, const Attr& attr) { return x * attr.scale_log2; }
  static XK_DEVICE MaxSum identity() { return {-math::kInf, 0.f}; }
  // Each thread's (max, sum of 2^(v - max)), then one reduction of those pairs: measured faster
  // than a max reduction followed by a sum reduction (32768x8192 bf16: 2751 vs 2364 GB/s).
  template <int VPT, int V, class Get, class Reduce>
  static XK_DEVICE MaxSum stats(Get v, const bool (&ok)[VPT], const Reduce& reduce, const Attr&,
                                float, int) {
    float m = -math::kInf;
#pragma unroll
    for (int j = 0; j < VPT; ++j)
#pragma unroll
      for (int k = 0; k < V; ++k) m = ok[j] ? fmaxf(m, v(j, k)) : m;
    const bool live = m != -math::kInf;  // a thread with only -inf (or no) values sums nothing
    float s = 0.f;
#pragma unroll
    for (int j = 0; j < VPT; ++j)
#pragma unroll
      for (int k = 0; k < V; ++k) s += ok[j] && live ? math::ex2_approx(v(j, k) - m) : 0.f;
    return reduce(MaxSum{m, s}, Merge{});
  }
  static XK_DEVICE Param finalize(const MaxSum& st, int, const Attr&) {
    return {st.m, st.s > 0.f ? 1.f / st.s : 0.f};
  }
  static XK_DEVICE float apply(float v, float, float, const Param& p, const Attr&) {
    return p.m == -math::kInf ? 0.f : math::ex2_approx(v - p.m) * p.inv_sum;
  }
};

}  // namespace softmax

/// out = softmax(scale * input) over each row of [rows, cols].
template <typename T>
cudaError_t Softmax(T* out, const T* input, int64_t rows, int cols, RowStride out_stride,
                    RowStride in_stride, float scale, cudaStream_t stream) {
  rowwise::RowArgs<T, T> a;
  a.out = out;
  a.out_rs = out_stride;
  a.in = input;
  a.in_rs = in_stride;
  a.rows = rows;
  a.cols = cols;
  return rowwise::LaunchRows<softmax::SoftmaxOp>(a, {scale * math::kLog2e}, stream);
}

}  // namespace xkernels

#endif  // XKERNELS_SOFTMAX_H_
