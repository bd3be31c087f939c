// Rotary position embedding (RoPE) of Q and K in one pass, optionally after an RMSNorm of each head
// (Qwen3's and Gemma 3's QK norm). In place or into other tensors; strided token and head layouts
// (views into a packed QKV tensor), head_dim contiguous.
//
// Layout of a block: `tpb` tokens x `groups` head slots x `lanes` threads, over a share of the
// heads (grid.y; rope::Plan's splits). Cos and sin come from a shared-memory table, once per
// (token, frequency), or from registers (rope::kVariants says which, and whether the first loads
// go before them); each thread takes `units` pairs of V-element vectors of every head of its slot
// (head g, g + groups, ...), a head's lanes side by side in one warp, kChunk heads' loads in flight
// at a time. A pair holds V frequencies: (x[i..i+V), x[i+d/2..i+d/2+V)) for rotate-half,
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
  int heads_per_block;          // a block's share of the heads (grid.y splits them)
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

// The rotation of the pair (x, y) by c = (cos, sin): (x cos - y sin, y cos + x sin), with the
// roundings spelled out so that every variant (and the probe's reference) gives the same bits
// whatever the compiler would contract.
XK_DEVICE float2 rotate(float x, float y, float2 c) {
  return {fmaf(x, c.x, -__fmul_rn(y, c.y)), fmaf(y, c.x, __fmul_rn(x, c.y))};
}

// The sum over `lanes` adjacent lanes of a warp (a power of two up to 32; the same in the whole
// warp, whose every lane takes part).
XK_DEVICE float sum_lanes(float v, int lanes) {
  for (int o = lanes / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Kernel variants, timed side by side by benchmarks/rope_probe.cu. Every one does the same
// arithmetic on the same values (identical results); they differ in when the loads are issued,
// where cos and sin come from and how many heads' loads are in flight.
struct VariantSpec {
  const char* name;
  bool smem_trig;  // cos and sin once per (token, frequency) into shared memory, then a barrier;
                   // else each thread's own frequencies, in registers
  bool early;      // the first heads' loads issued before cos and sin (their latency overlaps)
  int share;       // registers: a warp's `share` head slots of one token split a lane's
                   // frequencies and exchange them by shuffles (1: each computes all of them)
  int chunk;       // heads per round of loads (0: 2, or 1 with two units)
  int min_blocks;  // __launch_bounds__(256, min_blocks): 3 caps registers at 80, 2 at 128
  int fallback;    // the variant used where `share` does not fit the layout
};
constexpr VariantSpec kVariants[] = {
    {"base", true, false, 1, 0, 3, 0},       // the first version: cos/sin table, then the loads
    {"early", true, true, 1, 0, 3, 1},       // the first loads, then the table
    {"regs", false, true, 1, 0, 3, 2},       // the first loads, then cos/sin in registers
    {"warp4", false, true, 4, 0, 3, 2},      // as regs, a quarter of the cos/sin each + shuffles
    {"warp4b2", false, true, 4, 0, 2, 2},    // as warp4, up to 128 registers
    {"warp4c4b2", false, true, 4, 4, 2, 2},  // as warp4b2, four heads' loads per round
    {"earlyc4b2", true, true, 1, 4, 2, 6},   // as early, four heads per round, 128 registers
};
constexpr int kNumVariants = static_cast<int>(sizeof(kVariants) / sizeof(kVariants[0]));

// The variants compiled into ApplyRope (a bit per variant). The bindings build what Choose can
// pick; the probe defines XKERNELS_ROPE_VARIANTS as ~0 for all of them.
#ifdef XKERNELS_ROPE_VARIANTS
constexpr unsigned kBuiltVariants = XKERNELS_ROPE_VARIANTS;
#else
constexpr unsigned kBuiltVariants = 1u << 0;
#endif

// What ApplyRope launches: a kernel variant and the block layout.
struct Plan {
  int variant = 0;    // index into kVariants
  int hpt = 0;        // heads per thread (0: as many as keep two waves of SMs busy, up to 8)
  int splits = 1;     // blocks that share a token's heads (grid.y): more blocks for few tokens
  int threads = 256;  // threads per block, at most (a multiple of 32 up to 256)
};

// The dispatch rule: the plan for `tokens` tokens of `heads` heads (q's and k's). One place to
// switch; what it may pick must be in kBuiltVariants. From benchmarks/rope_probe.cu on an H100
// (Llama 3 8B / Qwen3 8B q and k, bf16): 64-thread blocks for many tokens (apply_rope 4096 /
// 32768 tokens 37.3 -> 34.2 / 246 -> 240 us; qk_norm_rope 42.5 -> 37.3 / 265 -> 257), a token's
// heads split over two blocks for few (qk_norm_rope 128 tokens 4.20 -> 3.68 us).
inline Plan Choose(int64_t tokens, int heads, bool norm) {
  (void)heads, (void)norm;
  Plan plan;
  if (tokens <= 512) {
    plan.splits = 2;
  } else {
    plan.threads = 64;
  }
  return plan;
}

// The effective share of a variant for kV x kU frequencies per thread.
XK_HOST_DEVICE constexpr int ShareOf(int var, int v, int u) {
  return (v * u) % kVariants[var].share == 0 ? kVariants[var].share : 1;
}

// kV elements per vector, kU units per lane, kNorm: the QK norm first; kVar: kVariants[kVar].
// With 256 threads and three blocks per SM at most 80 registers, which every instance fits
// without spilling (ptxas -v): 24 warps with two heads' 16-byte pairs each in flight. The 16-bit
// values stay packed in registers until the arithmetic (a float copy of two heads' pairs took 139
// registers).
template <typename T, typename W, int kV, int kU, bool kNorm, int kVar>
__global__ void __launch_bounds__(256, kVariants[kVar].min_blocks)
    RopeKernel(const __grid_constant__ KernelParams<T, W> p) {
  constexpr bool kSmemTrig = kVariants[kVar].smem_trig, kEarly = kVariants[kVar].early;
  constexpr int kChunk = kVariants[kVar].chunk > 0 ? kVariants[kVar].chunk : (kU >= 2 ? 1 : 2);
  constexpr int kF = kV * kU;  // frequencies per thread
  constexpr int kShare = ShareOf(kVar, kV, kU);
  static_assert(kSmemTrig || kF % kShare == 0, "share must divide a thread's frequencies");
  using Vt = Vec<T, kV>;
  extern __shared__ float2 s_cs[];  // (tpb, half): cos, sin (kSmemTrig)

  const int tpt = p.lanes * p.groups;  // threads per token
  const int tid = static_cast<int>(threadIdx.x);
  const int tt = tid / tpt, lane = tid % p.lanes, g = (tid % tpt) / p.lanes;
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * p.tpb;
  const int64_t t = t0 + tt;
  const bool live = t < p.tokens;
  const int h0 = static_cast<int>(blockIdx.y) * p.heads_per_block;  // this block's heads
  const int h_end = min(p.heads, h0 + p.heads_per_block);

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

  const T* q_in = p.q + p.q_rows.offset(t);
  const T* k_in = p.k + p.k_rows.offset(t);
  T* q_out = p.q_out + p.q_out_rows.offset(t);
  T* k_out = p.k_out + p.k_out_rows.offset(t);
  Vt a[kChunk][kU], b[kChunk][kU];  // (heads, units): the raw vectors
  bool ok[kChunk], is_q[kChunk];
  const T* src[kChunk];
  T* dst[kChunk];
  auto load = [&](int j0) {
#pragma unroll
    for (int m = 0; m < kChunk; ++m) {
      const int h = h0 + g + (j0 + m) * p.groups;
      ok[m] = live && j0 + m < p.heads_per_thread && h < h_end;
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
  };

  pdl_wait();
  if constexpr (kEarly) load(0);
  float2 r_cs[kU][kV];  // (units, frequencies): cos, sin in registers (!smem_trig)
  if constexpr (kSmemTrig) {
    for (int i = tid; i < p.tpb * p.half; i += static_cast<int>(blockDim.x)) {
      const int ti = i / p.half, f = i - ti * p.half;
      if (t0 + ti < p.tokens) {
        const float pos = static_cast<float>(__ldg(p.positions + p.pos_rows.offset(t0 + ti)));
        s_cs[i] = cos_sin(pos, p.freq[f]);
      }
    }
    __syncthreads();
  } else {
    // Frequency e (0 <= e < kF) of this thread: unit e / kV, element e % kV. Slot gw of the kShare
    // slots side by side in the warp computes e = gw, gw + kShare, ...; all read them by shuffles.
    const float pos = live ? static_cast<float>(__ldg(p.positions + p.pos_rows.offset(t))) : 0.f;
    const int gw = (tid / p.lanes) % kShare;
    float2 mine[kF / kShare];
#pragma unroll
    for (int k = 0; k < kF / kShare; ++k) {
      const int e = gw + k * kShare;
      const int f = (lane + (e / kV) * p.lanes) * kV + e % kV;
      mine[k] = cos_sin(pos, p.freq[min(f, p.half - 1)]);  // past half: unused
    }
    if constexpr (kShare == 1) {
#pragma unroll
      for (int e = 0; e < kF; ++e) r_cs[e / kV][e % kV] = mine[e];
    } else {
      const int w0 = (tid & 31) - gw * p.lanes;  // slot 0's lane in the warp
#pragma unroll
      for (int e = 0; e < kF; ++e) {
        const int from = w0 + (e % kShare) * p.lanes;
        r_cs[e / kV][e % kV] = {__shfl_sync(0xffffffffu, mine[e / kShare].x, from),
                                __shfl_sync(0xffffffffu, mine[e / kShare].y, from)};
      }
    }
  }
  pdl_release();
  const float2* cs_row = s_cs + tt * p.half;
  // cos and sin of unit u's frequency j
  auto cs_at = [&](int u, int j) -> float2 {
    if constexpr (kSmemTrig) {
      return cs_row[(lane + u * p.lanes) * kV + j];
    } else {
      return r_cs[u][j];
    }
  };

  for (int j0 = 0; j0 < p.heads_per_thread; j0 += kChunk) {
    if (!kEarly || j0 > 0) load(j0);
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
              ss = fmaf(y, y, fmaf(x, x, ss));
            }
          }
        }
        if (ok[m]) {  // the unrotated dims
          for (int v = lane; v < p.tail; v += p.lanes) {
            Vt x;
            x.load(src[m] + 2 * p.half + v * kV);
#pragma unroll
            for (int j = 0; j < kV; ++j) ss = fmaf(to_float(x[j]), to_float(x[j]), ss);
          }
        }
        ss = sum_lanes(ss, p.lanes);  // a head's lanes sit side by side in one warp
        scale[m] = rsqrtf(fmaf(ss, p.inv_head_dim, p.eps));
      }
    }
#pragma unroll
    for (int m = 0; m < kChunk; ++m) {
      if (!ok[m]) continue;
      const W* w = is_q[m] ? p.q_weight : p.k_weight;
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        if (!unit_ok[u]) continue;
        // x * scale * weight at offset o of the head (plain x without the norm)
        auto in = [&](const Vt& v, int j, int o) {
          if constexpr (kNorm) return to_float(v[j]) * scale[m] * to_float(__ldg(w + o));
          return to_float(v[j]);
        };
        if (pairs_in_vector) {
#pragma unroll
          for (int i = 0; i < kV / 2; ++i) {
            const float2 c0 = cs_at(u, i), c1 = cs_at(u, kV / 2 + i);
            const float x0 = in(a[m][u], 2 * i, base[u] + 2 * i);
            const float x1 = in(a[m][u], 2 * i + 1, base[u] + 2 * i + 1);
            const float y0 = in(b[m][u], 2 * i, base2[u] + 2 * i);
            const float y1 = in(b[m][u], 2 * i + 1, base2[u] + 2 * i + 1);
            const float2 ra = rotate(x0, x1, c0), rb = rotate(y0, y1, c1);
            a[m][u][2 * i] = from_float<T>(ra.x);
            a[m][u][2 * i + 1] = from_float<T>(ra.y);
            b[m][u][2 * i] = from_float<T>(rb.x);
            b[m][u][2 * i + 1] = from_float<T>(rb.y);
          }
        } else {
#pragma unroll
          for (int j = 0; j < kV; ++j) {
            const float2 c = cs_at(u, j);
            const float x = in(a[m][u], j, base[u] + j), y = in(b[m][u], j, base2[u] + j);
            const float2 r = rotate(x, y, c);
            a[m][u][j] = from_float<T>(r.x);
            b[m][u][j] = from_float<T>(r.y);
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

template <typename T, typename W, int kV, int kU, bool kNorm, int kVar>
cudaError_t LaunchRope(const KernelParams<T, W>& kp, const DeviceProps& props,
                       cudaStream_t stream) {
  const int tpt = kp.lanes * kp.groups;
  // at most 16 KB (see Prepare)
  const size_t smem = kVariants[kVar].smem_trig ? sizeof(float2) * kp.tpb * kp.half : 0;
  const int64_t blocks = ceil_div<int64_t>(kp.tokens, kp.tpb);
  const int splits = ceil_div(kp.heads, kp.heads_per_block);
  const LaunchConfig lc(dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(splits)),
                        dim3(static_cast<unsigned>(tpt * kp.tpb)), stream, 1, UsePDL(props), smem);
  return cudaLaunchKernelEx(&lc.cfg, RopeKernel<T, W, kV, kU, kNorm, kVar>, kp);
}

template <typename T, typename W, int kV, bool kNorm, int kVar>
cudaError_t DispatchUnits(const KernelParams<T, W>& kp, int units, const DeviceProps& props,
                          cudaStream_t stream) {
  // A warp's slots of one token exchange cos and sin: each cluster of `share` slots must lie in
  // one token and one warp; else the variant's fallback.
  constexpr int kFallback = kVariants[kVar].fallback;
  auto fits = [&](int share) {
    const int cluster = kp.lanes * share;
    return share == 1 || (cluster <= 32 && (kp.lanes * kp.groups) % cluster == 0);
  };
  switch (units) {
    case 1:
      if (!fits(ShareOf(kVar, kV, 1))) break;
      return LaunchRope<T, W, kV, 1, kNorm, kVar>(kp, props, stream);
    case 2:
      if (!fits(ShareOf(kVar, kV, 2))) break;
      return LaunchRope<T, W, kV, 2, kNorm, kVar>(kp, props, stream);
    case 4:
      if constexpr (kV == 1) {
        if (!fits(ShareOf(kVar, kV, 4))) break;
        return LaunchRope<T, W, kV, 4, kNorm, kVar>(kp, props, stream);
      }
      return cudaErrorInvalidValue;
    case 8:
      if constexpr (kV == 1) {
        if (!fits(ShareOf(kVar, kV, 8))) break;
        return LaunchRope<T, W, kV, 8, kNorm, kVar>(kp, props, stream);
      }
      return cudaErrorInvalidValue;
    default:
      return cudaErrorInvalidValue;
  }
  if constexpr (kFallback != kVar) {
    return DispatchUnits<T, W, kV, kNorm, kFallback>(kp, units, props, stream);
  }
  return cudaErrorInvalidValue;
}

template <typename T, typename W, int kV, bool kNorm, int kVar = 0>
cudaError_t DispatchVariant(const KernelParams<T, W>& kp, int variant, int units,
                            const DeviceProps& props, cudaStream_t stream) {
  if constexpr (kVar < kNumVariants) {
    if (variant != kVar) {
      return DispatchVariant<T, W, kV, kNorm, kVar + 1>(kp, variant, units, props, stream);
    }
    if constexpr (((kBuiltVariants >> kVar) & 1u) != 0 &&
                  ((kBuiltVariants >> kVariants[kVar].fallback) & 1u) != 0) {
      return DispatchUnits<T, W, kV, kNorm, kVar>(kp, units, props, stream);
    }
  }
  return cudaErrorNotSupported;  // not compiled in (kBuiltVariants)
}

inline int pow2_ceil(int x) {
  int p = 1;
  while (p < x) p *= 2;
  return p;
}

// The frequencies inv_freq(i) / pi as hi + lo floats, i < rotary_dim / 2.
inline void FillFreqs(const Config& cfg, float2* freq) {
  constexpr double kInvPi = 0.31830988618379067153776752674503;
  for (int i = 0; i < cfg.rotary_dim / 2; ++i) {
    const double f = InvFreq(cfg, i) * kInvPi;
    const float hi = static_cast<float>(f);
    freq[i] = {hi, static_cast<float>(f - hi)};
  }
}

// The kernel's parameters and layout for `pr` under `plan` (16-byte vectors where every pointer,
// stride and boundary allows, else single elements: *vec), and the units per lane (*units).
template <typename T, typename W>
cudaError_t Prepare(const Problem& pr, const Plan& plan, const DeviceProps& props,
                    KernelParams<T, W>* out, int* vec, int* units) {
  const Config& cfg = pr.rope;
  const int heads = pr.num_qo_heads + pr.num_kv_heads;
  if (pr.head_dim <= 0 || pr.head_dim % 2 || pr.head_dim > kMaxHeadDim || cfg.rotary_dim <= 0 ||
      cfg.rotary_dim % 2 || cfg.rotary_dim > pr.head_dim || plan.variant < 0 ||
      plan.variant >= kNumVariants || plan.hpt < 0 || plan.splits < 1 || plan.threads < 32 ||
      plan.threads > 256 || plan.threads % 32 != 0) {
    return cudaErrorInvalidValue;
  }
  KernelParams<T, W>& kp = *out;
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
  FillFreqs(cfg, kp.freq);

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
  *vec = v;
  kp.lanes_used = kp.half / v;
  kp.tail = (pr.head_dim - cfg.rotary_dim) / v;
  kp.lanes = std::min(32, pow2_ceil(kp.lanes_used));
  *units = pow2_ceil(ceil_div(kp.lanes_used, kp.lanes));  // 1 or 2; 4, 8 for v 1

  // Heads per thread (plan.hpt, or the first rule): as many as keep two waves of 2048-thread SMs
  // busy (more heads mean more loads in flight), up to 8.
  kp.heads_per_block = ceil_div(heads, plan.splits);
  const int hb = kp.heads_per_block;
  int hpt = plan.hpt;
  if (hpt == 0) {
    hpt = 1;
    for (int c : {8, 4, 2}) {
      if (pr.tokens * plan.splits * kp.lanes * ceil_div(hb, c) >= int64_t{4096} * props.sm_count) {
        hpt = c;
        break;
      }
    }
  }
  const int threads = std::max(plan.threads, kp.lanes);
  int groups = std::min(ceil_div(hb, hpt), threads / kp.lanes);
  // Threads per token: a power of two up to a warp, else whole warps, so that a warp's shuffles
  // see every lane of it.
  int tpt = kp.lanes * groups;
  tpt = tpt <= 32 ? pow2_ceil(tpt) : ceil_div(tpt, 32) * 32;
  if (tpt > 256) tpt = 256;
  kp.groups = tpt / kp.lanes;
  kp.heads_per_thread = ceil_div(hb, kp.groups);
  kp.tpb = std::max(1, threads / tpt);  // at most 16 KB of cos and sin: tpb * half <= 2048
  // Few tokens: smaller blocks, still of whole warps (the QK norm's shuffles take every lane).
  while (kp.tpb > 1 && kp.tpb / 2 >= kp.tokens && (kp.tpb / 2 * tpt) % 32 == 0) kp.tpb /= 2;
  return cudaSuccess;
}

}  // namespace rope

/// RoPE of q and k (rope::Problem) on `stream`, in place when q_out == q and k_out == k; with
/// q_weight and k_weight, an RMSNorm of each head first. T: __half, __nv_bfloat16 or float; W
/// (the weights): T or float. head_dim even and at most 512, rotary_dim even and at most head_dim;
/// any strides (16-byte vectors where every pointer, stride and rotary_dim / 2 allow, else single
/// elements). Positions below 2^24 give angles exact to float rounding. `plan`: the kernel
/// variant and layout (rope::Choose's by default; cudaErrorNotSupported for a variant not in
/// rope::kBuiltVariants).
template <typename T, typename W = T>
cudaError_t ApplyRope(const rope::Problem& pr, const rope::Plan& plan, cudaStream_t stream) {
  if (pr.tokens == 0 || pr.num_qo_heads + pr.num_kv_heads == 0) return cudaSuccess;
  DeviceProps props;
  XK_CUDA_TRY(GetDeviceProps(&props));
  rope::KernelParams<T, W> kp;
  int v = 0, units = 0;
  XK_CUDA_TRY((rope::Prepare<T, W>(pr, plan, props, &kp, &v, &units)));
  const bool norm = pr.q_weight != nullptr;
  constexpr int kVec = vec16<T>();
  if (v == kVec) {
    return norm ? rope::DispatchVariant<T, W, kVec, true>(kp, plan.variant, units, props, stream)
                : rope::DispatchVariant<T, W, kVec, false>(kp, plan.variant, units, props, stream);
  }
  return norm ? rope::DispatchVariant<T, W, 1, true>(kp, plan.variant, units, props, stream)
              : rope::DispatchVariant<T, W, 1, false>(kp, plan.variant, units, props, stream);
}

template <typename T, typename W = T>
cudaError_t ApplyRope(const rope::Problem& pr, cudaStream_t stream) {
  const rope::Plan plan =
      rope::Choose(pr.tokens, pr.num_qo_heads + pr.num_kv_heads, pr.q_weight != nullptr);
  return ApplyRope<T, W>(pr, plan, stream);
}

}  // namespace xkernels

#endif  // XKERNELS_ROPE_H_
