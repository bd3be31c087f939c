// Rotary position embedding (RoPE) of Q and K in one pass, optionally after an RMSNorm of each head
// (Qwen3's and Gemma 3's QK norm). In place or into other tensors; strided token and head layouts
// (views into a packed QKV tensor), head_dim contiguous.
//
// Layout of a block: `tpb` tokens x `groups` head slots x `lanes` threads. The block first computes
// the cos and sin of its tokens' frequencies into shared memory, once per (token, frequency);
// then each thread takes `units` pairs of V-element vectors of every head of its slot (head g,
// g + groups, ...), a head's lanes side by side in one warp, kChunk heads' loads in flight at a
// time. A pair holds V frequencies: (x[i..i+V), x[i+d/2..i+d/2+V)) for rotate-half,
// x[2i..2i+2V) for interleaved. Angles are exact to float rounding at any position below 2^24:
// pos * inv_freq / pi is formed in two floats, reduced modulo 2 exactly and fed to sincospif.
#ifndef XKERNELS_ROPE_H_
#define XKERNELS_ROPE_H_

#include <algorithm>

#include "xkernels/common.h"
#include "xkernels/rope_params.h"
#include "xkernels/vec.h"

namespace xkernels {
namespace rope {

template <typename T, typename W>
struct KernelParams {
  T* q_out;
  T* k_out;
  const T* q;
  const T* k;
  const int32_t* positions;
  const W* q_weight;  // null: no norm
  const W* k_weight;
  int64_t tokens;
  RowStride q_rows, k_rows, q_out_rows, k_out_rows, pos_rows;
  int64_t q_stride_h, k_stride_h, q_out_stride_h, k_out_stride_h;
  int num_qo_heads, heads;  // heads: q's and k's together
  int head_dim, half;       // half: rotary_dim / 2, the frequencies
  int lanes_used;           // units of the rotary dims: half / V
  int tail;                 // vectors of V past rotary_dim
  int lanes, groups, heads_per_thread, tpb;
  bool interleaved, copy_tail;  // copy_tail: the unrotated dims go to another tensor
  float eps, inv_head_dim;
  float2 freq[kMaxFreqs];  // inv_freq / pi, as hi + lo floats
};

// cos and sin of pos * pi * (f.x + f.y), the product formed exactly in two floats and reduced
// modulo 2 (exactly: a - 2 rint(a / 2) loses no bit) before sincospif.
XK_DEVICE float2 cos_sin(float pos, float2 f) {
  const float a = __fmul_rn(pos, f.x);
  const float e = fmaf(pos, f.x, -a);  // pos * f.x - a, exactly
  const float r = a - 2.f * rintf(0.5f * a);
  const float t = r + fmaf(pos, f.y, e);
  float s, c;
  sincospif(t, &s, &c);
  return {c, s};
}

// The sum over `lanes` adjacent lanes of a warp (a power of two up to 32; the same in the whole
// warp, whose every lane takes part).
XK_DEVICE float sum_lanes(float v, int lanes) {
  for (int o = lanes / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// kV elements per vector, kU units per lane, kNorm: the QK norm first. Three blocks of 256 per SM
// (at most 80 registers, which every instance fits without spilling: ptxas -v): 24 warps with
// two heads' 16-byte pairs each in flight. The 16-bit values stay packed in registers until the
// arithmetic (a float copy of two heads' pairs took 139 registers).
template <typename T, typename W, int kV, int kU, bool kNorm>
__global__ void __launch_bounds__(256, 3) RopeKernel(const __grid_constant__ KernelParams<T, W> p) {
  constexpr int kChunk = kU >= 2 ? 1 : 2;  // heads per round of loads
  using Vt = Vec<T, kV>;
  extern __shared__ float2 s_cs[];  // (tpb, half): cos, sin

  const int tpt = p.lanes * p.groups;  // threads per token
  const int tid = static_cast<int>(threadIdx.x);
  const int tt = tid / tpt, lane = tid % p.lanes, g = (tid % tpt) / p.lanes;
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * p.tpb;
  const int64_t t = t0 + tt;
  const bool live = t < p.tokens;

  pdl_wait();
  for (int i = tid; i < p.tpb * p.half; i += static_cast<int>(blockDim.x)) {
    const int ti = i / p.half, f = i - ti * p.half;
    if (t0 + ti < p.tokens) {
      const float pos = static_cast<float>(__ldg(p.positions + p.pos_rows.offset(t0 + ti)));
      s_cs[i] = cos_sin(pos, p.freq[f]);
    }
  }
  __syncthreads();
  pdl_release();

  // Unit u of this lane: elements [base, base + kV) and [base2, base2 + kV) of a head, frequencies
  // [f0, f0 + kV). Interleaved pairs sit inside each vector (with kV 1, across the two).
  bool unit_ok[kU];
  int base[kU], base2[kU];
#pragma unroll
  for (int u = 0; u < kU; ++u) {
    const int unit = lane + u * p.lanes;
    unit_ok[u] = unit < p.lanes_used;
    base[u] = p.interleaved ? 2 * unit * kV : unit * kV;
    base2[u] = p.interleaved ? base[u] + kV : p.half + unit * kV;
  }
  const bool pairs_in_vector = kV > 1 && p.interleaved;
  const float2* cs_row = s_cs + tt * p.half;

  const T* q_in = p.q + p.q_rows.offset(t);
  const T* k_in = p.k + p.k_rows.offset(t);
  T* q_out = p.q_out + p.q_out_rows.offset(t);
  T* k_out = p.k_out + p.k_out_rows.offset(t);
  for (int j0 = 0; j0 < p.heads_per_thread; j0 += kChunk) {
    Vt a[kChunk][kU], b[kChunk][kU];  // (heads, units): the raw vectors
    bool ok[kChunk], is_q[kChunk];
    const T* src[kChunk];
    T* dst[kChunk];
#pragma unroll
    for (int m = 0; m < kChunk; ++m) {
      const int h = g + (j0 + m) * p.groups;
      ok[m] = live && j0 + m < p.heads_per_thread && h < p.heads;
      is_q[m] = h < p.num_qo_heads;
      const int hk = h - p.num_qo_heads;
      src[m] = is_q[m] ? q_in + h * p.q_stride_h : k_in + hk * p.k_stride_h;
      dst[m] = is_q[m] ? q_out + h * p.q_out_stride_h : k_out + hk * p.k_out_stride_h;
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        if (ok[m] && unit_ok[u]) {
          a[m][u].load(src[m] + base[u]);
          b[m][u].load(src[m] + base2[u]);
        }
      }
    }
    float scale[kChunk];
#pragma unroll
    for (int m = 0; m < kChunk; ++m) {
      scale[m] = 1.f;
      if constexpr (kNorm) {
        float ss = 0.f;
#pragma unroll
        for (int u = 0; u < kU; ++u) {
          if (ok[m] && unit_ok[u]) {
#pragma unroll
            for (int j = 0; j < kV; ++j) {
              const float x = to_float(a[m][u][j]), y = to_float(b[m][u][j]);
              ss += x * x + y * y;
            }
          }
        }
        if (ok[m]) {  // the unrotated dims
          for (int v = lane; v < p.tail; v += p.lanes) {
            Vt x;
            x.load(src[m] + 2 * p.half + v * kV);
#pragma unroll
            for (int j = 0; j < kV; ++j) ss += to_float(x[j]) * to_float(x[j]);
          }
        }
        ss = sum_lanes(ss, p.lanes);  // a head's lanes sit side by side in one warp
        scale[m] = rsqrtf(ss * p.inv_head_dim + p.eps);
      }
    }
#pragma unroll
    for (int m = 0; m < kChunk; ++m) {
      if (!ok[m]) continue;
      const W* w = is_q[m] ? p.q_weight : p.k_weight;
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        if (!unit_ok[u]) continue;
        const float2* cs = cs_row + (lane + u * p.lanes) * kV;
        // x * scale * weight at offset o of the head (plain x without the norm)
        auto in = [&](const Vt& v, int j, int o) {
          if constexpr (kNorm) return to_float(v[j]) * scale[m] * to_float(__ldg(w + o));
          return to_float(v[j]);
        };
        if (pairs_in_vector) {
#pragma unroll
          for (int i = 0; i < kV / 2; ++i) {
            const float2 c0 = cs[i], c1 = cs[kV / 2 + i];
            const float x0 = in(a[m][u], 2 * i, base[u] + 2 * i);
            const float x1 = in(a[m][u], 2 * i + 1, base[u] + 2 * i + 1);
            const float y0 = in(b[m][u], 2 * i, base2[u] + 2 * i);
            const float y1 = in(b[m][u], 2 * i + 1, base2[u] + 2 * i + 1);
            a[m][u][2 * i] = from_float<T>(x0 * c0.x - x1 * c0.y);
            a[m][u][2 * i + 1] = from_float<T>(x1 * c0.x + x0 * c0.y);
            b[m][u][2 * i] = from_float<T>(y0 * c1.x - y1 * c1.y);
            b[m][u][2 * i + 1] = from_float<T>(y1 * c1.x + y0 * c1.y);
          }
        } else {
#pragma unroll
          for (int j = 0; j < kV; ++j) {
            const float2 c = cs[j];
            const float x = in(a[m][u], j, base[u] + j), y = in(b[m][u], j, base2[u] + j);
            a[m][u][j] = from_float<T>(x * c.x - y * c.y);
            b[m][u][j] = from_float<T>(y * c.x + x * c.y);
          }
        }
        a[m][u].store(dst[m] + base[u]);
        b[m][u].store(dst[m] + base2[u]);
      }
      if (kNorm || p.copy_tail) {  // the unrotated dims: normalised, or copied to the output
        for (int v = lane; v < p.tail; v += p.lanes) {
          const int o = 2 * p.half + v * kV;
          Vt x;
          x.load(src[m] + o);
          if constexpr (kNorm) {
#pragma unroll
            for (int j = 0; j < kV; ++j) {
              x[j] = from_float<T>(to_float(x[j]) * scale[m] * to_float(__ldg(w + o + j)));
            }
          }
          x.store(dst[m] + o);
        }
      }
    }
  }
}

template <typename T, typename W, int kV, int kU, bool kNorm>
cudaError_t LaunchRope(KernelParams<T, W>& kp, const DeviceProps& props, cudaStream_t stream) {
  const int tpt = kp.lanes * kp.groups;
  const size_t smem = sizeof(float2) * kp.tpb * kp.half;  // at most 16 KB (see ApplyRope)
  const int64_t blocks = ceil_div<int64_t>(kp.tokens, kp.tpb);
  const LaunchConfig lc(dim3(static_cast<unsigned>(blocks)),
                        dim3(static_cast<unsigned>(tpt * kp.tpb)), stream, 1, UsePDL(props), smem);
  return cudaLaunchKernelEx(&lc.cfg, RopeKernel<T, W, kV, kU, kNorm>, kp);
}

template <typename T, typename W, int kV, bool kNorm>
cudaError_t DispatchUnits(KernelParams<T, W>& kp, int units, const DeviceProps& props,
                          cudaStream_t stream) {
  switch (units) {
    case 1:
      return LaunchRope<T, W, kV, 1, kNorm>(kp, props, stream);
    case 2:
      return LaunchRope<T, W, kV, 2, kNorm>(kp, props, stream);
    case 4:
      if constexpr (kV == 1) return LaunchRope<T, W, kV, 4, kNorm>(kp, props, stream);
      break;
    case 8:
      if constexpr (kV == 1) return LaunchRope<T, W, kV, 8, kNorm>(kp, props, stream);
      break;
  }
  return cudaErrorInvalidValue;
}

inline int pow2_ceil(int x) {
  int p = 1;
  while (p < x) p *= 2;
  return p;
}

}  // namespace rope

/// RoPE of q and k (rope::Problem) on `stream`, in place when q_out == q and k_out == k; with
/// q_weight and k_weight, an RMSNorm of each head first. T: __half, __nv_bfloat16 or float; W
/// (the weights): T or float. head_dim even and at most 512, rotary_dim even and at most head_dim;
/// any strides (16-byte vectors where every pointer, stride and rotary_dim / 2 allow, else single
/// elements). Positions below 2^24 give angles exact to float rounding.
template <typename T, typename W = T>
cudaError_t ApplyRope(const rope::Problem& pr, cudaStream_t stream) {
  const rope::Config& cfg = pr.rope;
  const int heads = pr.num_qo_heads + pr.num_kv_heads;
  if (pr.tokens == 0 || heads == 0) return cudaSuccess;
  if (pr.head_dim <= 0 || pr.head_dim % 2 || pr.head_dim > rope::kMaxHeadDim ||
      cfg.rotary_dim <= 0 || cfg.rotary_dim % 2 || cfg.rotary_dim > pr.head_dim) {
    return cudaErrorInvalidValue;
  }
  DeviceProps props;
  XK_CUDA_TRY(GetDeviceProps(&props));

  rope::KernelParams<T, W> kp;
  kp.q_out = static_cast<T*>(pr.q_out);
  kp.k_out = static_cast<T*>(pr.k_out);
  kp.q = static_cast<const T*>(pr.q);
  kp.k = static_cast<const T*>(pr.k);
  kp.positions = pr.positions;
  kp.q_weight = static_cast<const W*>(pr.q_weight);
  kp.k_weight = static_cast<const W*>(pr.k_weight);
  kp.tokens = pr.tokens;
  kp.q_rows = pr.q_rows, kp.k_rows = pr.k_rows;
  kp.q_out_rows = pr.q_out_rows, kp.k_out_rows = pr.k_out_rows, kp.pos_rows = pr.pos_rows;
  kp.q_stride_h = pr.q_stride_h, kp.k_stride_h = pr.k_stride_h;
  kp.q_out_stride_h = pr.q_out_stride_h, kp.k_out_stride_h = pr.k_out_stride_h;
  kp.num_qo_heads = pr.num_qo_heads;
  kp.heads = heads;
  kp.head_dim = pr.head_dim;
  kp.half = cfg.rotary_dim / 2;
  kp.interleaved = cfg.interleaved;
  kp.copy_tail = pr.q_out != pr.q || pr.k_out != pr.k;
  kp.eps = pr.eps;
  kp.inv_head_dim = 1.f / static_cast<float>(pr.head_dim);
  constexpr double kInvPi = 0.31830988618379067153776752674503;
  for (int i = 0; i < kp.half; ++i) {
    const double f = rope::InvFreq(cfg, i) * kInvPi;
    const float hi = static_cast<float>(f);
    kp.freq[i] = {hi, static_cast<float>(f - hi)};
  }

  // 16-byte vectors where every pointer, stride and boundary allows; else single elements.
  constexpr int kVec = vec16<T>();
  auto fits = [&](int v) {
    const int64_t bytes = static_cast<int64_t>(v) * sizeof(T);
    const bool heads_ok =
        (pr.num_qo_heads <= 1 || (pr.q_stride_h % v == 0 && pr.q_out_stride_h % v == 0)) &&
        (pr.num_kv_heads <= 1 || (pr.k_stride_h % v == 0 && pr.k_out_stride_h % v == 0));
    return kp.half % v == 0 && pr.head_dim % v == 0 && heads_ok && is_aligned(pr.q, bytes) &&
           is_aligned(pr.k, bytes) && is_aligned(pr.q_out, bytes) && is_aligned(pr.k_out, bytes) &&
           pr.q_rows.divisible_by(v) && pr.k_rows.divisible_by(v) &&
           pr.q_out_rows.divisible_by(v) && pr.k_out_rows.divisible_by(v);
  };
  const int v = fits(kVec) ? kVec : 1;
  kp.lanes_used = kp.half / v;
  kp.tail = (pr.head_dim - cfg.rotary_dim) / v;
  kp.lanes = std::min(32, rope::pow2_ceil(kp.lanes_used));
  const int units = rope::pow2_ceil(ceil_div(kp.lanes_used, kp.lanes));  // 1 or 2; 4, 8 for v 1

  // Heads per thread: as many as keep two waves of 2048-thread SMs busy (sin and cos are shared
  // by a thread's heads through registers, and more heads mean more loads in flight), up to 8.
  int hpt = 1;
  for (int c : {8, 4, 2}) {
    if (pr.tokens * kp.lanes * ceil_div(heads, c) >= int64_t{4096} * props.sm_count) {
      hpt = c;
      break;
    }
  }
  int groups = std::min(ceil_div(heads, hpt), 256 / kp.lanes);
  // Threads per token: a power of two up to a warp, else whole warps, so that a warp's shuffles
  // see every lane of it.
  int tpt = kp.lanes * groups;
  tpt = tpt <= 32 ? rope::pow2_ceil(tpt) : ceil_div(tpt, 32) * 32;
  if (tpt > 256) tpt = 256;
  kp.groups = tpt / kp.lanes;
  kp.heads_per_thread = ceil_div(heads, kp.groups);
  kp.tpb = std::max(1, 256 / tpt);  // at most 16 KB of cos and sin: tpb * half <= 2048
  // Few tokens: smaller blocks, still of whole warps (the QK norm's shuffles take every lane).
  while (kp.tpb > 1 && kp.tpb / 2 >= kp.tokens && (kp.tpb / 2 * tpt) % 32 == 0) kp.tpb /= 2;

  const bool norm = pr.q_weight != nullptr;
  if (v == kVec) {
    return norm ? rope::DispatchUnits<T, W, kVec, true>(kp, units, props, stream)
                : rope::DispatchUnits<T, W, kVec, false>(kp, units, props, stream);
  }
  return norm ? rope::DispatchUnits<T, W, 1, true>(kp, units, props, stream)
              : rope::DispatchUnits<T, W, 1, false>(kp, units, props, stream);
}

}  // namespace xkernels

#endif  // XKERNELS_ROPE_H_
