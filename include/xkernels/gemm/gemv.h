// Decode GEMMs of a few rows of a, out [m, n] = a [m, k] @ b [n, k]^T with 16-bit a and b, as
// passes over b: GemvKernel for one row (below), GemvBulkKernel for 2-8 (further down).
//
// One row of a (kGemvMaxRows), with no tensor cores. The product is a pass over b (n x k x 2
// bytes), the mma tiles' 64 rows are all padding but one, and what bounds it is how fast b
// streams from memory.
//
// One block per output column (a row of b): its threads load consecutive 16-byte vectors of the
// row, 4 each in flight (b streamed past L1: ld.global.cs), the matching vectors of a's rows
// through L1 (every block reads them), fp32 products summed along the row, then across the block. A
// gated product (act >= 0) takes the gate's and the up's rows j and n + j in the same warp and
// stores act(gate) * up. Bias, fp32 or the input's type out, as the other kernels.
//
// Measured on the H100 (gemm_probe, bf16): 1 x 8192 x 8192 44.3 us against the 64-row wgmma
// tiles' 52.2 (cuBLAS 47.5 and torch.compile's Triton kernel 43.7 in the bench), 1 x 8192 x 28672
// 151.0 against 160.0.
#ifndef XKERNELS_GEMM_GEMV_H_
#define XKERNELS_GEMM_GEMV_H_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "xkernels/common.h"
#include "xkernels/gemm/epilogue.h"
#include "xkernels/gemm/params.h"
#include "xkernels/math.h"
#include "xkernels/mma.h"
#include "xkernels/tma.h"

namespace xkernels::gemm {

// m = 1 only: at m = 4 the kernel ran 55.8 us against the wgmma tiles' 51.0 at 4 x 8192 x 8192
// (187.5 against 164.6 at k 28672): every row of a costs its own conversions and FMAs per vector
// of b, and the issue rate, not the memory, bounds it; m = 2 and 3 were not measured.
constexpr int kGemvMaxRows = 1;
constexpr int kGemvWarps = 8;   // columns per block
constexpr int kGemvUnroll = 4;  // 16-byte vectors of b in flight per lane

// What both GEMV kernels take: 16-bit operands, b as [n, k], the kernel left to the dispatcher,
// unsplit.
inline bool GemvOperands(const Params& p) {
  return p.path == Path::kAuto && p.splits <= 1 && p.in_type != Elem::kE4M3 &&
         p.b_layout == BLayout::kNK;
}

// Whether p takes the GEMV kernel on a device of compute capability major `cc_major`: a's rows
// few enough, and GemvOperands.
inline bool UseGemv(const Params& p, int cc_major) {
  return cc_major >= 8 && GemvOperands(p) && p.m >= 1 && p.m <= kGemvMaxRows && p.k > 0;
}

// The bulk-copy kernel (GemvBulkKernel) for m 2-8, in two forms: m 2-4 in groups of 16 rows of
// b and 2048-deep pieces, m 5-8 in groups of 32 (two 16-row tiles share each B fragment of a) and
// 1024-deep pieces; 3 slots either way (200-206 KB of shared memory, one block per SM). H200,
// gemm_ab AB_SET=mg (2026-11-28, two cards, each form against the sm90 tiles m 2-8 took before in
// the same runs, cuBLAS beside them), bf16, us, m 2 / 4 / 8:
//   8192 x 8192   34.2-34.4 / 34.2-34.4 / 35.1-35.5, tiles 35.9-36.3, cuBLAS 34.0-34.7
//   8192 x 28672  109.1-109.4 / 109.3-109.6 / 110.6-111.0, tiles 112.7-113.1, cuBLAS 111-112
//   6144 x 4096   14.4-14.5 / 15.2-15.3 / 15.7-15.9, tiles 17.3-17.4, cuBLAS 16.5-16.8
//   4096 x 14336  29.8-30.0 / 30.3-30.4 / 30.2-30.3, tiles 33.3-33.5, cuBLAS 31.7-32.2
//   28672 x 4096  57.2 / 57.0-57.1 / 57.3-58.8, tiles 63.9-64.7, cuBLAS 55.6-57.0
// (the 32-row form at m 2-4: 35.0-35.4 / 110.9-112.9 at the first two shapes; the 16-row one at m
// 8: 36.3 / 113.7 / 16.8 / 32.3 / 64.8). At m 16 (two B tiles) the 32-row form lost at 8192 x
// 8192 (37.6-37.7 against 36.1-36.3): a's vectors, read once per group, cost the L2 as much
// traffic as b there. At m 1 the GEMV kernel stays ahead where rows are long (8192 x 8192: 30.8
// against 34.2 for the best bulk form; ncu, one call each: DRAM 82% against 77% of its peak).
constexpr int kGemvBulkMaxRows = 8;
constexpr int kGemvBulkStages = 3;
// 16-row tiles of b per group, and the pieces' depth, for m rows of a
constexpr int GemvBulkTiles(int m) { return m <= 4 ? 1 : 2; }
constexpr int GemvBulkDepth(int m) { return m <= 4 ? 2048 : 1024; }

// Whether p takes the bulk-copy kernel on a device of compute capability major `cc_major` with
// `sms` SMs: Hopper (its 227 KB of shared memory per block; measured there only), m 2-8,
// GemvOperands, 32-row groups of b for about every SM (n >= 3800 on 132 SMs), and k of at least
// 4096 (the shapes it was measured on).
inline bool UseGemvBulk(const Params& p, int cc_major, int sms) {
  return cc_major == 9 && GemvOperands(p) && p.m >= 2 && p.m <= kGemvBulkMaxRows && p.k >= 4096 &&
         10 * ceil_div<int64_t>(p.n, 32) >= 9 * int64_t{sms};
}

// Whether p takes either GEMV kernel (no split, no workspace).
inline bool UseAnyGemv(const Params& p, int cc_major, int sms) {
  return UseGemv(p, cc_major) || UseGemvBulk(p, cc_major, sms);
}

namespace detail {

// The output at column `col` of a row whose sums are `sum` (the gate's, where p is gated) and
// `up`: + bias, and act(gate) * up where gated; both GEMV kernels' epilogue.
template <typename Out>
XK_DEVICE float GemvValue(const Params& p, int col, float sum, float up) {
  float v = sum;
  if (p.bias != nullptr) v += LoadBias(p.bias, p.bias_type, col);
  if (p.act >= 0) {
    if (p.bias != nullptr) up += LoadBias(p.bias, p.bias_type, p.n + col);
    v = Gated<sizeof(Out) == 2>(p.act, v, up);
  }
  return v;
}

// sum over the 8 pairs of x and y (8 16-bit values each) into acc
template <typename T>
XK_DEVICE float Dot8(const uint4& x, const uint4& y, float acc) {
  const uint32_t xs[4] = {x.x, x.y, x.z, x.w}, ys[4] = {y.x, y.y, y.z, y.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    float2 u, v;
    if constexpr (std::is_same_v<T, __nv_bfloat16>) {
      u = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&xs[i]));
      v = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&ys[i]));
    } else {
      u = __half22float2(*reinterpret_cast<const __half2*>(&xs[i]));
      v = __half22float2(*reinterpret_cast<const __half2*>(&ys[i]));
    }
    acc = fmaf(u.x, v.x, acc);
    acc = fmaf(u.y, v.y, acc);
  }
  return acc;
}

XK_DEVICE uint4 LoadStream(const void* p) {
  uint4 v;
  asm volatile("ld.global.cs.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// acc[r] (r < m) += a row r . b row `row`, over the 16-byte vectors t, t + kThreads, ... of the
// row (this thread's share), kGemvUnroll of b's in flight
template <typename T, int kM, int kThreads>
XK_DEVICE void DotRows(const Params& p, int64_t row, int t, float (&acc)[kM]) {
  const T* a = static_cast<const T*>(p.a);
  const T* b = static_cast<const T*>(p.b) + row * p.ldb;
  const int vecs = p.k / 8;
  int v = t;
  for (; v + kThreads * (kGemvUnroll - 1) < vecs; v += kThreads * kGemvUnroll) {
    uint4 bv[kGemvUnroll];
#pragma unroll
    for (int u = 0; u < kGemvUnroll; ++u) bv[u] = LoadStream(b + 8 * (v + kThreads * u));
#pragma unroll
    for (int r = 0; r < kM; ++r) {
      if (r < p.m) {
#pragma unroll
        for (int u = 0; u < kGemvUnroll; ++u) {
          const uint4 av =
              __ldg(reinterpret_cast<const uint4*>(a + r * p.lda + 8 * (v + kThreads * u)));
          acc[r] = Dot8<T>(av, bv[u], acc[r]);
        }
      }
    }
  }
  for (; v < vecs; v += kThreads) {
    const uint4 bv = LoadStream(b + 8 * v);
#pragma unroll
    for (int r = 0; r < kM; ++r) {
      if (r < p.m) {
        acc[r] = Dot8<T>(__ldg(reinterpret_cast<const uint4*>(a + r * p.lda + 8 * v)), bv, acc[r]);
      }
    }
  }
}

// The sums of acc[r] over the block (in thread 0), through shared memory red[kGemvWarps][kM].
template <int kM>
XK_DEVICE void BlockSum(float (&acc)[kM], float (*red)[kM]) {
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
#pragma unroll
  for (int r = 0; r < kM; ++r) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], o);
    if (lane == 0) red[warp][r] = acc[r];
  }
  __syncthreads();
  if (threadIdx.x == 0) {
#pragma unroll
    for (int r = 0; r < kM; ++r) {
      float s = 0.f;
#pragma unroll
      for (int w = 0; w < kGemvWarps; ++w) s += red[w][r];
      acc[r] = s;
    }
  }
}

// One block per output column: its kGemvWarps warps share the row's k (consecutive 16-byte
// vectors across the block, 4 KB a step), so a column is a short piece of work and the grid has
// n of them (one warp per column, whole rows each, left the last of 2.6 waves a third full at
// n 8192: 1 x 8192 x 28672 173.7 us, against 161 with the wgmma tiles).
template <typename T, typename Out, int kM>
__global__ void __launch_bounds__(32 * kGemvWarps) GemvKernel(const Params p) {
  constexpr int kThreads = 32 * kGemvWarps;
  __shared__ float red[kGemvWarps][kM], red_up[kGemvWarps][kM];
  pdl_wait();
  const int col = static_cast<int>(blockIdx.x);
  const int t = static_cast<int>(threadIdx.x);
  float acc[kM] = {}, up[kM] = {};
  DotRows<T, kM, kThreads>(p, col, t, acc);
  if (p.act >= 0) DotRows<T, kM, kThreads>(p, static_cast<int64_t>(p.n) + col, t, up);
  BlockSum<kM>(acc, red);
  if (p.act >= 0) BlockSum<kM>(up, red_up);
  pdl_release();
  if (t == 0) {
#pragma unroll
    for (int r = 0; r < kM; ++r) {
      if (r < p.m) {
        static_cast<Out*>(p.out)[r * p.ldc + col] =
            static_cast<Out>(GemvValue<Out>(p, col, acc[r], up[r]));
      }
    }
  }
}

// The decode GEMM of 2 to kGemvBulkMaxRows rows of a (sm_90+), on the tensor cores: mma.sync
// m16n8k16 with b's rows as the 16-row A operand and a's rows (tokens) as the 8-column B operand.
// What bounds it is again how b streams from memory, and that depends on how b's rows are read:
// the mma fragments loaded straight from global memory (lane (g, c) reading rows g and g + 8, 16
// rows x 64 bytes per instruction) ran 1 x 8192 x 8192 in 36.7 us where the GEMV's whole-row
// reads take 31.3 (H200, gemm_ab AB_SET=mg, 2026-11-28). So a block here runs groups of 16 kA
// rows of b in turn (persistent, one block per SM), a producer warp copying kKC-long pieces of
// each row into a ring of kStages slots with one bulk copy per row (runs of 2 kKC contiguous
// bytes), and kGemvWarps consumer warps each take a kKC / kGemvWarps slice of a piece. a's
// vectors come through L1 straight into the B fragments.
//
// The sum over k does not depend on the order of k, so each lane reads whole 16-byte vectors:
// lane (g, c) (g = lane / 4, c = lane % 4) takes vector 4u + c of a 32-deep step from b's rows g
// and g + 8 and from a's row g, and the first and second half of each vector are the k pairs of
// two m16n8k16 products; A and B see the same permutation of k. Rows lie in shared memory 2 kKC +
// 64 bytes apart (an odd multiple of 64 bytes), so that lane (g, c)'s 16-byte reads of rows g and
// g + 8 meet no bank twice.
template <int kA, int kT, int kKC, int kStages>
struct GemvBulk {
  static constexpr int kRows = 16 * kA, kPitch = kKC + 32, kThreads = 32 * (kGemvWarps + 1);
  static constexpr int kSlot = kRows * kPitch * 2;  // bytes
  static constexpr int kRed = kGemvWarps * kA * kT * 4 * 32 * 4;
  static constexpr int kSmem = kStages * kSlot + kRed + 2 * kStages * 8;
  static_assert(kKC % (32 * kGemvWarps) == 0, "whole 32-deep steps per warp");
};

template <typename T, typename Out, int kA, int kT, int kKC, int kStages>
__global__ void __launch_bounds__(32 * (kGemvWarps + 1), 1) GemvBulkKernel(const Params p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  __trap();  // bulk copies and mbarrier transactions: sm_90+
#else
  using G = GemvBulk<kA, kT, kKC, kStages>;
  constexpr int kRows = G::kRows, kPitch = G::kPitch, kU = kKC / 32 / kGemvWarps;
  constexpr int kVals = (kA * kT * 128 + 32 * kGemvWarps - 1) / (32 * kGemvWarps);
  extern __shared__ __align__(128) uint8_t smem[];
  T* ring = reinterpret_cast<T*>(smem);
  float (*red)[kA * kT * 4][32] =
      reinterpret_cast<float (*)[kA * kT * 4][32]>(smem + kStages * G::kSlot);
  const uint32_t bars = mma::smem_addr(smem + kStages * G::kSlot + G::kRed);  // full, then empty
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      tma::mbar_init(bars + 8 * s, 1);
      tma::mbar_init(bars + 8 * (kStages + s), kGemvWarps);
    }
    tma::mbar_fence_init();
  }
  __syncthreads();
  pdl_wait();
  const int groups = (p.n + kRows - 1) / kRows, pieces = (p.k + kKC - 1) / kKC;
  const int passes = p.act >= 0 ? 2 : 1;
  if (warp == kGemvWarps) {  // the producer
    int it = 0;
    for (int grp = static_cast<int>(blockIdx.x); grp < groups; grp += static_cast<int>(gridDim.x)) {
      for (int pass = 0; pass < passes; ++pass) {
        for (int c = 0; c < pieces; ++c, ++it) {
          const int slot = it % kStages;
          tma::mbar_wait(bars + 8 * (kStages + slot), ((it / kStages) & 1) ^ 1);
          const int k0 = c * kKC, len = min(kKC, p.k - k0);
          if (lane == 0) tma::mbar_arrive_expect_tx(bars + 8 * slot, kRows * len * 2);
          __syncwarp();
#pragma unroll
          for (int r = lane; r < kRows; r += 32) {
            const int row = min(grp * kRows + r, p.n - 1) + pass * p.n;  // (past n: unstored)
            tma::load_1d(mma::smem_addr(ring + slot * (kRows * kPitch) + r * kPitch),
                         static_cast<const T*>(p.b) + static_cast<int64_t>(row) * p.ldb + k0,
                         static_cast<uint32_t>(len * 2), bars + 8 * slot);
          }
        }
      }
    }
    return;
  }
  const int g = lane / 4, q = lane % 4;
  const T* arow[kT];
  uint32_t tokens = 0;
#pragma unroll
  for (int j = 0; j < kT; ++j) {
    const int r = 8 * j + g;
    tokens |= (r < p.m ? 1u : 0u) << j;
    arow[j] = static_cast<const T*>(p.a) + static_cast<int64_t>(r < p.m ? r : 0) * p.lda;
  }
  int it = 0;
  for (int grp = static_cast<int>(blockIdx.x); grp < groups; grp += static_cast<int>(gridDim.x)) {
    float gate[kVals], up[kVals];
    for (int pass = 0; pass < passes; ++pass) {
      float acc[kA][kT][4];
#pragma unroll
      for (int i = 0; i < kA; ++i) {
#pragma unroll
        for (int j = 0; j < kT; ++j) {
          acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.f;
        }
      }
      for (int c = 0; c < pieces; ++c, ++it) {
        const int slot = it % kStages;
        const int off = warp * (kKC / kGemvWarps) + 8 * q;  // this lane's first k in the piece
        const int len = min(kKC, p.k - c * kKC);
        // a's vectors: loaded before the wait for b's where they fit in 32 registers
        constexpr bool kAhead = kU * kT <= 8;
        uint4 x[kU][kT];
        auto load_x = [&](int u) {
#pragma unroll
          for (int j = 0; j < kT; ++j) {
            x[u][j] = make_uint4(0, 0, 0, 0);
            if ((tokens >> j & 1u) && off + 32 * u < len) {
              x[u][j] = __ldg(reinterpret_cast<const uint4*>(arow[j] + c * kKC + off + 32 * u));
            }
          }
        };
        if constexpr (kAhead) {
#pragma unroll
          for (int u = 0; u < kU; ++u) load_x(u);
        }
        tma::mbar_wait(bars + 8 * slot, (it / kStages) & 1);
        const T* base = ring + slot * (kRows * kPitch) + g * kPitch + off;
#pragma unroll
        for (int u = 0; u < kU; ++u) {
          const bool ok = off + 32 * u < len;
          if constexpr (!kAhead) load_x(u);
#pragma unroll
          for (int i = 0; i < kA; ++i) {
            uint4 w0 = *reinterpret_cast<const uint4*>(base + 16 * i * kPitch + 32 * u);
            uint4 w1 = *reinterpret_cast<const uint4*>(base + (16 * i + 8) * kPitch + 32 * u);
            if (!ok) w0 = w1 = make_uint4(0, 0, 0, 0);  // (a stale slot's values past k)
            const uint32_t lo[4] = {w0.x, w1.x, w0.y, w1.y};
            const uint32_t hi[4] = {w0.z, w1.z, w0.w, w1.w};
#pragma unroll
            for (int j = 0; j < kT; ++j) {
              mma::mma_m16n8k16<T>(acc[i][j], lo, x[u][j].x, x[u][j].y);
              mma::mma_m16n8k16<T>(acc[i][j], hi, x[u][j].z, x[u][j].w);
            }
          }
        }
        // the slot's reads performed before the producer's next copies into it may land: without
        // the fence the arrive left ahead of the last shared loads in flight (ptxas orders no wait
        // for them), and a copy overwrote a few 16-byte reads (b1k2048 in gemm_ab, 2026-11-28)
        tma::fence_async_shared();
        __syncwarp();
        if (lane == 0) tma::mbar_arrive(bars + 8 * (kStages + slot));
      }
      // the consumer warps' sums (named barrier 1: the producer warp does not take part)
#pragma unroll
      for (int i = 0; i < kA; ++i) {
#pragma unroll
        for (int j = 0; j < kT; ++j) {
#pragma unroll
          for (int e = 0; e < 4; ++e) red[warp][(i * kT + j) * 4 + e][lane] = acc[i][j][e];
        }
      }
      tma::named_sync(1, 32 * kGemvWarps);
#pragma unroll
      for (int e = 0; e < kVals; ++e) {
        const int f = static_cast<int>(threadIdx.x) + 32 * kGemvWarps * e;
        float s = 0.f;
        if (f < kA * kT * 128) {
#pragma unroll
          for (int w = 0; w < kGemvWarps; ++w) s += red[w][f / 32][f % 32];
        }
        if (pass == 0) {
          gate[e] = s;
        } else {
          up[e] = s;
        }
      }
      tma::named_sync(1, 32 * kGemvWarps);
    }
#pragma unroll
    for (int e = 0; e < kVals; ++e) {
      const int f = static_cast<int>(threadIdx.x) + 32 * kGemvWarps * e;
      const int idx = f / 32, ln = f % 32;
      const int i = idx / (4 * kT), j = idx / 4 % kT, h = idx % 4;
      const int row = grp * kRows + 16 * i + ln / 4 + 8 * (h / 2);
      const int token = 8 * j + 2 * (ln % 4) + h % 2;
      if (f < kA * kT * 128 && row < p.n && token < p.m) {
        static_cast<Out*>(p.out)[static_cast<int64_t>(token) * p.ldc + row] =
            static_cast<Out>(GemvValue<Out>(p, row, gate[e], up[e]));
      }
    }
  }
  // (at the end: released after pdl_wait, the next kernel lost 0.2-1.4 us of 15-113 at m 2-8,
  // H200, gemm_ab AB_SET=mg, 2026-11-28)
  pdl_release();
#endif
}

}  // namespace detail

// Runs p (16-bit, b as [n, k], m <= 8 kT, sm_90+) on GemvBulkKernel<.., kA, kT, kKC, kStages>:
// `blocks` persistent blocks (0: one per SM; at most one per group), on `stream`.
template <typename Out, int kA, int kT, int kKC, int kStages>
cudaError_t LaunchGemvBulk(const Params& p, cudaStream_t stream, const DeviceProps& props,
                           int blocks = 0) {
  using G = detail::GemvBulk<kA, kT, kKC, kStages>;
  const int groups = ceil_div(p.n, G::kRows);
  const dim3 grid(static_cast<unsigned>(std::min(groups, blocks > 0 ? blocks : props.sm_count)));
  auto launch = [&](auto t) -> cudaError_t {
    using T = decltype(t);
    constexpr auto kKernel = &detail::GemvBulkKernel<T, Out, kA, kT, kKC, kStages>;
    std::remove_const_t<decltype(kKernel)> k = nullptr;
    XK_CUDA_TRY(SmemOptIn<kKernel>(G::kSmem, &k));
    const LaunchConfig lc(grid, G::kThreads, stream, 1, UsePDL(props), G::kSmem);
    return cudaLaunchKernelEx(&lc.cfg, k, p);
  };
  if constexpr (std::is_same_v<Out, float>) {
    return p.in_type == Elem::kF16 ? launch(__half{}) : launch(__nv_bfloat16{});
  } else {
    return launch(Out{});  // 16-bit outputs: the inputs' type
  }
}

// Runs p (UseGemvBulk) on `stream`.
template <typename Out>
cudaError_t LaunchGemvBulk(const Params& p, cudaStream_t stream, const DeviceProps& props) {
  return p.m <= 4 ? LaunchGemvBulk<Out, GemvBulkTiles(4), 1, GemvBulkDepth(4), kGemvBulkStages>(
                        p, stream, props)
                  : LaunchGemvBulk<Out, GemvBulkTiles(8), 1, GemvBulkDepth(8), kGemvBulkStages>(
                        p, stream, props);
}

// Runs p (UseGemv) on `stream`.
template <typename Out>
cudaError_t LaunchGemv(const Params& p, cudaStream_t stream, const DeviceProps& props) {
  static_assert(kGemvMaxRows == 1, "GemvKernel<.., kM> for more rows");
  const dim3 grid(static_cast<unsigned>(p.n));
  auto launch = [&](auto t) -> cudaError_t {
    using T = decltype(t);
    return LaunchKernel(detail::GemvKernel<T, Out, 1>, grid, 32 * kGemvWarps, stream, props, 1, p);
  };
  if constexpr (std::is_same_v<Out, float>) {
    return p.in_type == Elem::kF16 ? launch(__half{}) : launch(__nv_bfloat16{});
  } else {
    return launch(Out{});  // 16-bit outputs: the inputs' type
  }
}

}  // namespace xkernels::gemm

#endif  // XKERNELS_GEMM_GEMV_H_
