// Softmax over the last dimension, in base 2 internally: v = x * scale * log2(e), out = 2^(v - max)
// / sum. A row that is entirely -inf gives zeros (there is no mass to normalise), not NaN.
#ifndef XKERNELS_SOFTMAX_H_
#define XKERNELS_SOFTMAX_H_

#include "xkernels/math.h"
#include "xkernels/row_kernel.h"

namespace xkernels {
namespace softmax {

// Running max and sum of 2^(v - max): the online-softmax state.
// Rows at least this long that cannot take 16-byte vectors take SoftmaxUnalignedKernel.
constexpr int kUnalignedMinCols = 2048;

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

// Rows that do not start 16-byte aligned (a row length that is not a multiple of 16 bytes:
// GPT-2's vocabulary of 50257), where out and in share every row's misalignment (the same row
// strides, bases a multiple of 16 bytes apart): each row as up to V - 1 leading elements, 16-byte
// vectors, and the trailing elements. Two passes over the row, (max, sum) then the output;
// persistent blocks, one row at a time. kStage: pass 1 keeps each thread's vectors in dynamic
// shared memory (cols / V of them per block), where pass 2 reads them back (each thread its own,
// so no barrier); else pass 2 reads the row again, mostly from L2 while rows are short. Measured
// on the H100, bf16 (xkernels bench --sweep, us): before it these rows took RowKernelLong with
// 2-byte accesses (1024x50257 869 GB/s, 8192x50257 908, 2026-11-26); re-read -> staged (512
// threads; 1024 at a block per SM or fewer): 8192x50257 852.0 -> 671.0 (1933 -> 2454 GB/s: at 4
// rows of 100 KB per SM in flight the second read missed L2; torch 764), 1024x50257 111.4 -> 87.1,
// 1x50257 10.77 -> 8.22 (torch.compile 10.54).
template <typename T, int kThreads, bool kStage = false>
__global__ void __launch_bounds__(kThreads)
    SoftmaxUnalignedKernel(const rowwise::RowArgs<T, T> a, const SoftmaxOp::Attr attr) {
  constexpr int V = vec16<T>();
  __shared__ uint4 scratch[2][32];  // two reductions' warp partials, alternating (no 2nd barrier)
  extern __shared__ uint4 stage_raw[];  // kStage: the row's vectors
  Vec<T, V>* const stage = reinterpret_cast<Vec<T, V>*>(stage_raw);
  pdl_wait();
  pdl_release();
  int t = 0;
  for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x, ++t) {
    const T* in = a.in + a.in_rs.offset(row);
    T* out = a.out + a.out_rs.offset(row);
    const int mis = static_cast<int>((reinterpret_cast<uintptr_t>(in) / sizeof(T)) % V);
    const int head = min(a.cols, mis == 0 ? 0 : V - mis);  // elements before the first vector
    const int body = (a.cols - head) / V;                    // 16-byte vectors
    const int tail = head + body * V;                        // the first element after them
    // pass 1: this thread's (max, sum of 2^(v - max)) over its elements, v = x * scale * log2(e)
    MaxSum st{-math::kInf, 0.f};
    auto take = [&](const float (&v)[V], int count) {
      float vm = -math::kInf;
#pragma unroll
      for (int k = 0; k < V; ++k) vm = k < count ? fmaxf(vm, v[k]) : vm;
      const float m = fmaxf(st.m, vm);
      if (m == -math::kInf) return;
      float s = st.s * math::ex2_approx(st.m - m);  // 2^-inf = 0
#pragma unroll
      for (int k = 0; k < V; ++k) s += k < count ? math::ex2_approx(v[k] - m) : 0.f;
      st = {m, s};
    };
    auto edge = [&](int j) {  // one element of the head or the tail
      float v[V] = {};
      v[0] = to_float(in[j]) * attr.scale_log2;
      take(v, 1);
    };
    for (int j = static_cast<int>(threadIdx.x); j < head; j += kThreads) edge(j);
    for (int j = tail + static_cast<int>(threadIdx.x); j < a.cols; j += kThreads) edge(j);
#pragma unroll 4
    for (int i = static_cast<int>(threadIdx.x); i < body; i += kThreads) {
      Vec<T, V> raw;
      raw.load(in + head + i * V);
      if constexpr (kStage) stage[i] = raw;
      float v[V];
#pragma unroll
      for (int k = 0; k < V; ++k) v[k] = to_float(raw[k]) * attr.scale_log2;
      take(v, V);
    }
    st = reduce::BlockReducer<false, kThreads / 32>{scratch[t & 1]}(st, SoftmaxOp::Merge{});
    const SoftmaxOp::Param p = SoftmaxOp::finalize(st, a.cols, attr);
    // pass 2: the outputs
    auto value = [&](float x) { return SoftmaxOp::apply(x * attr.scale_log2, 0.f, 0.f, p, attr); };
    for (int j = static_cast<int>(threadIdx.x); j < head; j += kThreads) {
      out[j] = from_float<T>(value(to_float(in[j])));
    }
    for (int j = tail + static_cast<int>(threadIdx.x); j < a.cols; j += kThreads) {
      out[j] = from_float<T>(value(to_float(in[j])));
    }
#pragma unroll 4
    for (int i = static_cast<int>(threadIdx.x); i < body; i += kThreads) {
      Vec<T, V> raw;
      if constexpr (kStage) {
        raw = stage[i];
      } else {
        raw.load(in + head + i * V);
      }
      float v[V];
#pragma unroll
      for (int k = 0; k < V; ++k) v[k] = value(to_float(raw[k]));
      Vec<T, V>::cast_store(out + head + i * V, v);
    }
  }
}

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
  const softmax::SoftmaxOp::Attr attr{scale * math::kLog2e};
  constexpr int kV = vec16<T>();
  const bool vectors = cols % kV == 0 && is_aligned(input, 16) && in_stride.divisible_by(kV) &&
                       is_aligned(out, 16) && out_stride.divisible_by(kV);
  const uintptr_t apart = reinterpret_cast<uintptr_t>(out) - reinterpret_cast<uintptr_t>(input);
  const bool same_rows = in_stride.outer == out_stride.outer &&
                         in_stride.inner == out_stride.inner &&
                         in_stride.inner_count == out_stride.inner_count && apart % 16 == 0;
  if (!vectors && same_rows && cols >= softmax::kUnalignedMinCols && rows > 0) {
    DeviceProps props;
    XK_CUDA_TRY(GetDeviceProps(&props));
    constexpr int kThreads = 512;
    // Rows staged in shared memory where two blocks of them fit on an SM; grids of a block per
    // SM or fewer (latency-bound) in blocks of 1024 threads, twice the loads in flight.
    const int64_t stage = int64_t{cols / kV} * 16;
    constexpr int kStatic = sizeof(uint4) * 64;  // the kernel's own shared memory (scratch)
    const auto staged = [&](auto threads) -> cudaError_t {
      constexpr int kT = decltype(threads)::value;
      constexpr auto kernel = softmax::SoftmaxUnalignedKernel<T, kT, true>;
      std::remove_const_t<decltype(kernel)> k;
      XK_CUDA_TRY(SmemOptIn<kernel>(props.smem_optin - kStatic, &k));
      int fit = 0;
      XK_CUDA_TRY(CachedFit<kernel>(static_cast<int>(stage / 16), &fit, [&](int* f) {
        return cudaOccupancyMaxActiveBlocksPerMultiprocessor(f, kernel, kT,
                                                             static_cast<size_t>(stage));
      }));
      const int64_t blocks = std::min<int64_t>(rows, int64_t{fit} * props.sm_count);
      const LaunchConfig lc(dim3(static_cast<unsigned>(blocks)), kT, stream, 1, UsePDL(props),
                            static_cast<size_t>(stage));
      return cudaLaunchKernelEx(&lc.cfg, k, a, attr);
    };
    if (2 * (stage + 2 * kStatic + props.smem_reserved) <= props.smem_per_sm) {  // 1 KB spare
      return rows <= props.sm_count ? staged(std::integral_constant<int, 1024>{})
                                    : staged(std::integral_constant<int, kThreads>{});
    }
    const int64_t blocks = std::min<int64_t>(rows, int64_t{4} * props.sm_count);
    return LaunchKernel(softmax::SoftmaxUnalignedKernel<T, kThreads>,
                        dim3(static_cast<unsigned>(blocks)), kThreads, stream, props, 1, a, attr);
  }
  return rowwise::LaunchRows<softmax::SoftmaxOp>(a, attr, stream);
}

}  // namespace xkernels

#endif  // XKERNELS_SOFTMAX_H_
