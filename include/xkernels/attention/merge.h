// Merging attention states (params.h, MergeParams): split-KV's second kernel over the workspace,
// and the exported merge_state / merge_states. One warp per (row, head): the lanes split the
// head dimension in 4-float columns and walk the states with a running max, so any number of
// states takes one pass.
#ifndef XKERNELS_ATTENTION_MERGE_H_
#define XKERNELS_ATTENTION_MERGE_H_

#include <cuda_runtime.h>

#include "xkernels/attention/params.h"
#include "xkernels/common.h"
#include "xkernels/dtypes.h"
#include "xkernels/math.h"

namespace xkernels::attention {

namespace detail {

// Four consecutive elements of v (float or 16-bit), as floats.
template <typename TV>
XK_DEVICE float4 load4(const TV* p) {
  if constexpr (sizeof(TV) == 4) {
    return *reinterpret_cast<const float4*>(p);
  } else {
    const uint2 raw = *reinterpret_cast<const uint2*>(p);
    const TV* e = reinterpret_cast<const TV*>(&raw);
    return make_float4(to_float(e[0]), to_float(e[1]), to_float(e[2]), to_float(e[3]));
  }
}
template <typename TO>
XK_DEVICE void store4(TO* p, float4 x) {
  if constexpr (sizeof(TO) == 4) {
    *reinterpret_cast<float4*>(p) = x;
  } else {
    TO e[4] = {from_float<TO>(x.x), from_float<TO>(x.y), from_float<TO>(x.z), from_float<TO>(x.w)};
    *reinterpret_cast<uint2*>(p) = *reinterpret_cast<const uint2*>(e);
  }
}
// Scalar fallback for head dims or pointers that are not 4-aligned.
template <typename TV>
XK_DEVICE float load1(const TV* p) {
  return to_float(*p);
}

}  // namespace detail

// kVec4: every v, out row is 4-element aligned and head_dim % 4 == 0 (the launcher checks).
// One warp per (row, head). The lanes read the states' log-sum-exps in parallel (state i on lane
// i % 32) and reduce max and sum with shuffles; then every lane walks the states for its columns,
// each state's weight broadcast from the lane that holds it, the loads of 16 successive states
// issued together (split-KV merges 16-64 states per row), the first 16 with the log-sum-exps.
template <typename TV, typename TO, bool kVec4>
__global__ void MergeStatesKernel(const __grid_constant__ MergeParams p) {
  constexpr int kWarps = 4;
  const int lane = threadIdx.x % 32;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  pdl_wait();
  if (item >= p.rows * p.heads) return;
  const int64_t r = item / p.heads;
  const int h = static_cast<int>(item % p.heads);
  if (p.valid_indptr != nullptr && (r < p.valid_indptr[0] || r >= p.valid_indptr[p.valid_batch])) {
    return;
  }
  const float to_log2 = p.log2_in ? 1.f : math::kLog2e;
  const int n_main = p.v1 != nullptr ? p.num_states - 1 : p.num_states;
  const TV* v = static_cast<const TV*>(p.v) + p.v_rows.offset(r) + h * p.v_stride_h;
  const float* s = p.s + p.s_rows.offset(r) + h * p.s_stride_h;
  auto lse2 = [&](int i) {  // state i's log2-sum-exp
    const float si =
        i < n_main ? s[i * p.s_stride_k] : p.s1[p.s1_rows.offset(r) + h * p.s1_stride_h];
    return si * to_log2;
  };
  constexpr int kPer = kVec4 ? 4 : 1;  // columns per lane per pass
  // kBatch states' loads in flight at once (a merge of 16 split-KV states: one round of memory
  // latency, not sixteen), then their weighted sum
  constexpr int kBatch = 16;
  const TV* v1 = p.v1 != nullptr
                     ? static_cast<const TV*>(p.v1) + p.v1_rows.offset(r) + h * p.v1_stride_h
                     : nullptr;
  auto load_batch = [&](float (&x)[kBatch][kPer], int d, int first, int n) {
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int i = first + u;
      const bool live = u < n && d < p.head_dim;
      const TV* src = i < n_main ? v + i * p.v_stride_k + d : v1 + d;
      if constexpr (kVec4) {
        const float4 t = live ? detail::load4(src) : make_float4(0.f, 0.f, 0.f, 0.f);
        x[u][0] = t.x, x[u][1] = t.y, x[u][2] = t.z, x[u][3] = t.w;
      } else {
        x[u][0] = live ? detail::load1(src) : 0.f;
      }
    }
  };
  // The first batch of the first columns is loaded with the log-sum-exps, before the weights (it
  // does not depend on them): split-KV's merge of 16 states of head_dim <= 128 then waits for
  // memory once, where it waited three times (the log-sum-exps, then two batches of 8 states).
  // Measured on the H100, bf16 decode of batch 1 over 32768 keys (GQA 32/8, 16 splits): the merge
  // 8.0-8.4 -> 4.7 us (ncu), the call 54.3 -> 53.0 us (xkernels bench: 2470 -> 2532 GB/s).
  float first[kBatch][kPer];
  load_batch(first, lane * kPer, 0, min(kBatch, p.num_states));
  const float own = lane < p.num_states ? lse2(lane) : -math::kInf;  // state `lane`'s
  float mx = own;
  for (int i = lane + 32; i < p.num_states; i += 32) mx = fmaxf(mx, lse2(i));
#pragma unroll
  for (int o = 16; o > 0; o /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  const float m_use = mx == -math::kInf ? 0.f : mx;
  float sum = lane < p.num_states ? math::ex2_approx(own - m_use) : 0.f;
  for (int i = lane + 32; i < p.num_states; i += 32) sum += math::ex2_approx(lse2(i) - m_use);
#pragma unroll
  for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  const float inv = sum > 0.f ? 1.f / sum : 0.f;
  TO* out = static_cast<TO*>(p.out) + p.out_rows.offset(r) + h * p.out_stride_h;
  for (int d0 = 0; d0 < p.head_dim; d0 += 32 * kPer) {
    const int d = d0 + lane * kPer;
    float acc[kPer] = {};
    for (int base = 0; base < p.num_states; base += 32) {
      // this lane's weight for state base + lane; 0 past the last state
      const int mine = base + lane;
      const float w_mine = mine < p.num_states
                               ? math::ex2_approx((base == 0 ? own : lse2(mine)) - m_use) * inv
                               : 0.f;
      const int n = min(32, p.num_states - base);
      for (int k0 = 0; k0 < n; k0 += kBatch) {
        float x[kBatch][kPer];
        if (d0 == 0 && base == 0 && k0 == 0) {
#pragma unroll
          for (int u = 0; u < kBatch; ++u)
#pragma unroll
            for (int e = 0; e < kPer; ++e) x[u][e] = first[u][e];
        } else {
          load_batch(x, d, base + k0, min(kBatch, n - k0));
        }
#pragma unroll
        for (int u = 0; u < kBatch; ++u) {
          const float w = __shfl_sync(0xffffffffu, w_mine, (k0 + u) % 32);
#pragma unroll
          for (int e = 0; e < kPer; ++e) {  // an empty state (w = 0) may hold anything, NaN too
            acc[e] += w != 0.f ? w * x[u][e] : 0.f;
          }
        }
      }
    }
    if (d < p.head_dim) {
      if constexpr (kVec4) {
        detail::store4(out + d, make_float4(acc[0], acc[1], acc[2], acc[3]));
      } else {
        out[d] = from_float<TO>(acc[0]);
      }
    }
  }
  if (lane == 0 && p.lse != nullptr) {
    p.lse[p.lse_rows.offset(r) + h * p.lse_stride_h] =
        sum > 0.f ? (m_use + math::lg2_approx(sum)) * math::kLn2 : -math::kInf;
  }
}

// Merges p's states on `stream`. v of TV (float for split-KV partials), out of TO.
template <typename TV, typename TO>
cudaError_t MergeStates(const MergeParams& p, cudaStream_t stream) {
  if (p.rows * p.heads == 0) return cudaSuccess;
  DeviceProps props;
  XK_CUDA_TRY(GetDeviceProps(&props));
  // 4-element vectors where every pointer, row, state and head stride allows them
  auto vec_ok = [](const void* ptr, size_t elem, RowStride rows, int64_t s1, int64_t s2) {
    return is_aligned(ptr, static_cast<int64_t>(4 * elem)) && rows.divisible_by(4) && s1 % 4 == 0 &&
           s2 % 4 == 0;
  };
  const bool vec4 = p.head_dim % 4 == 0 &&
                    vec_ok(p.v, sizeof(TV), p.v_rows, p.v_stride_k, p.v_stride_h) &&
                    (p.v1 == nullptr || vec_ok(p.v1, sizeof(TV), p.v1_rows, 0, p.v1_stride_h)) &&
                    vec_ok(p.out, sizeof(TO), p.out_rows, 0, p.out_stride_h);
  const int64_t blocks = (p.rows * p.heads + 3) / 4;
  const dim3 grid(static_cast<unsigned>(blocks)), block(128);
  return vec4 ? LaunchKernel(MergeStatesKernel<TV, TO, true>, grid, block, stream, props, 1, p)
              : LaunchKernel(MergeStatesKernel<TV, TO, false>, grid, block, stream, props, 1, p);
}

}  // namespace xkernels::attention

#endif  // XKERNELS_ATTENTION_MERGE_H_
