// GEMM for sm_80 and up, the course's path: a cp.async ring of swizzled shared-memory stages,
// ldmatrix into registers, mma.sync.m16n8k16 with fp32 accumulators (the primitives of
// mma.h, pipeline.h and swizzle.h, shared with attention).
//
// One thread block computes a kBM x kBN tile of out = a @ b^T over the k range of its split
// (blockIdx.y): kWarpsM x kWarpsN warps each own a kWM x kWN slab of it, and k advances 64 at a
// time (one 128-byte row of 16-bit values, 8 swizzled chunks) through kStages slots. A warp's
// fragments are double buffered (v2): the ldmatrix of the next 16-deep step, or of the next k
// tile's first step after its one barrier, go out before this step's MMAs (H100, bf16 8192^3:
// 365 -> 432 TFLOP/s against v1, which loaded each step's fragments right before its MMAs). Tails
// need no special path: n and k are multiples of 8, so each 16-byte chunk a thread copies is whole
// in or whole out, and chunks outside the matrices are zero-filled by cp.async (zeros add nothing).
// With one split the epilogue adds the bias and stores the output; with several, each split stores
// its fp32 partial tile into the workspace and SplitKReduce sums them.
#ifndef XKERNELS_GEMM_SM80_H_
#define XKERNELS_GEMM_SM80_H_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "xkernels/common.h"
#include "xkernels/gemm/epilogue.h"
#include "xkernels/gemm/params.h"
#include "xkernels/mma.h"
#include "xkernels/pipeline.h"
#include "xkernels/swizzle.h"

namespace xkernels::gemm {

template <int kBM_, int kBN_, int kWarpsM_, int kWarpsN_, int kStages_>
struct Sm80Tile {
  static constexpr int kBM = kBM_, kBN = kBN_, kWarpsM = kWarpsM_, kWarpsN = kWarpsN_;
  static constexpr int kStages = kStages_;
  static constexpr int kBK = 64;
  static constexpr int kThreads = 32 * kWarpsM * kWarpsN;
  static constexpr int kWM = kBM / kWarpsM, kWN = kBN / kWarpsN;  // a warp's slab
  static constexpr int kMTiles = kWM / 16, kNTiles = kWN / 8;     // its mma tiles
  static constexpr int kABytes = kBM * kBK * 2;                   // (kBM, kBK) 16-bit
  static constexpr int kBBytes = kBN * kBK * 2;                   // (kBN, kBK) or (kBK, kBN)
  static constexpr int kStageBytes = kABytes + kBBytes;
  static constexpr int kSmemBytes = kStages * kStageBytes;
  static_assert(kWM % 16 == 0 && kWN % 16 == 0, "warp slabs of whole 16 x 16 fragments");
  static_assert(kBN % 64 == 0, "b [k, n] stages: rows of 8, 16 or 32 chunks");
  static_assert(kStages >= 2, "a ring of at least two stages");
};

template <class Tl, typename T, typename Out, BLayout kLayout>
__global__ void __launch_bounds__(Tl::kThreads) Sm80Kernel(const Params p) {
  static_assert(sizeof(T) == 2, "16-bit operands");
  constexpr int kBK = Tl::kBK, kThreads = Tl::kThreads, kStages = Tl::kStages;
  constexpr int kBChunks = kLayout == BLayout::kNK ? 8 : Tl::kBN / 8;  // 16-byte chunks per row
  constexpr int kARows = kThreads / 8;                                 // A rows one pass copies
  constexpr int kBRows = kThreads / kBChunks;                          // B rows one pass copies
  constexpr int kAPasses = Tl::kBM / kARows;
  constexpr int kBPasses = (kLayout == BLayout::kNK ? Tl::kBN : kBK) / kBRows;
  static_assert(Tl::kBM % kARows == 0 && kThreads % kBChunks == 0, "whole copy passes");

  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t s_base = mma::smem_addr(smem);  // kStages x [(kBM, kBK) a | b tile]

  int tm, tn, kt_begin, k_tiles;
  GroupedTile<8>(static_cast<int>(blockIdx.x), (p.m + Tl::kBM - 1) / Tl::kBM,
                 (p.n + Tl::kBN - 1) / Tl::kBN, &tm, &tn);
  SplitRange((p.k + kBK - 1) / kBK, p.splits, static_cast<int>(blockIdx.y), &kt_begin, &k_tiles);
  const int m0 = tm * Tl::kBM, n0 = tn * Tl::kBN;
  const int k_end = min(p.k, (kt_begin + k_tiles) * kBK);

  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32, warp = tid / 32;
  const int wm = warp / Tl::kWarpsN, wn = warp % Tl::kWarpsN;

  // ---- this thread's copies: chunk column ac (bc) of rows tid / 8 + kARows * i (B likewise)
  const T* ga = static_cast<const T*>(p.a);
  const T* gb = static_cast<const T*>(p.b);
  const int ac = tid % 8, ar = tid / 8;
  const int bc = tid % kBChunks, br = tid / kBChunks;
  const T* a_src = ga + static_cast<int64_t>(m0 + ar) * p.lda + ac * 8 + kt_begin * kBK;
  uint32_t a_rows_ok = 0;  // bit i: row ar + kARows i is inside a
#pragma unroll
  for (int i = 0; i < kAPasses; ++i) a_rows_ok |= (m0 + ar + kARows * i < p.m) << i;
  const T* b_src;
  uint32_t b_ok = 0;  // kNK: bit i, row br + kBRows i inside b; kKN: bit 0, chunk column inside
  if constexpr (kLayout == BLayout::kNK) {
    b_src = gb + static_cast<int64_t>(n0 + br) * p.ldb + bc * 8 + kt_begin * kBK;
#pragma unroll
    for (int i = 0; i < kBPasses; ++i) b_ok |= (n0 + br + kBRows * i < p.n) << i;
  } else {
    b_src = gb + static_cast<int64_t>(kt_begin * kBK + br) * p.ldb + n0 + bc * 8;
    b_ok = n0 + bc * 8 < p.n;
  }

  // Copies k tile t (counted from the split's first) into ring slot t % kStages.
  auto load = [&](int t) {
    const uint32_t sa = s_base + static_cast<uint32_t>((t % kStages) * Tl::kStageBytes);
    const SwizzledTile<Tl::kBM, 8> ta{sa};
    const int k0 = (kt_begin + t) * kBK;
    const bool a_k_ok = k0 + ac * 8 < k_end;
#pragma unroll
    for (int i = 0; i < kAPasses; ++i) {
      const bool ok = a_k_ok && ((a_rows_ok >> i) & 1);
      const T* src = a_src + static_cast<int64_t>(kARows * i) * p.lda + t * kBK;
      pipeline::cp_async_16(ta.at(ar + kARows * i, ac), ok ? src : ga, ok);
    }
    if constexpr (kLayout == BLayout::kNK) {
      const SwizzledTile<Tl::kBN, 8> tb{sa + Tl::kABytes};
      const bool k_ok = k0 + bc * 8 < k_end;
#pragma unroll
      for (int i = 0; i < kBPasses; ++i) {
        const bool ok = k_ok && ((b_ok >> i) & 1);
        const T* src = b_src + static_cast<int64_t>(kBRows * i) * p.ldb + t * kBK;
        pipeline::cp_async_16(tb.at(br + kBRows * i, bc), ok ? src : gb, ok);
      }
    } else {
      const SwizzledTile<kBK, kBChunks> tb{sa + Tl::kABytes};
#pragma unroll
      for (int i = 0; i < kBPasses; ++i) {
        const bool ok = b_ok && k0 + br + kBRows * i < k_end;
        const T* src = b_src + static_cast<int64_t>(t * kBK + kBRows * i) * p.ldb;
        pipeline::cp_async_16(tb.at(br + kBRows * i, bc), ok ? src : gb, ok);
      }
    }
  };

  // ---- this lane's ldmatrix rows (swizzle.h's SwizzledLane: offsets of chunks 2j + b)
  // a: row lane % 16 of each 16-row fragment, chunks 2kk + lane / 16 (k 0-7 | 8-15)
  const SwizzledLane<8> a_lane(wm * Tl::kWM + lane % 16, lane / 16);
  // b [n][k]: rows n (lane % 8) + 8 (lane / 16), chunks 2kk + (lane / 8) % 2: matrices
  // (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7), (n 8-15, k 8-15) = b0, b1 of two n8 tiles.
  // b [k][n] (transposed): rows k (lane % 8) + 8 ((lane / 8) % 2), chunks n / 8 + lane / 16.
  const SwizzledLane<kBChunks> b_lane =
      kLayout == BLayout::kNK
          ? SwizzledLane<kBChunks>(wn * Tl::kWN + lane % 8 + 8 * (lane / 16), (lane / 8) % 2)
          : SwizzledLane<kBChunks>(lane % 8 + 8 * ((lane / 8) % 2), lane / 16);

  float acc[Tl::kMTiles][Tl::kNTiles][4] = {};  // (kWM / 16, kWN / 8, mma C fragment)
  // A and B fragments of one 16-deep k step, double buffered: step kk + 1's (or the next k tile's
  // first) ldmatrix issued before step kk's MMAs
  uint32_t af[2][Tl::kMTiles][4];  // (buffer, kWM / 16, A fragment)
  uint32_t bf[2][Tl::kNTiles][2];  // (buffer, kWN / 8, B fragment)
  auto fragments = [&](int t, int kk, int buf) {
    const uint32_t sa = s_base + static_cast<uint32_t>((t % kStages) * Tl::kStageBytes);
    const uint32_t sb = sa + Tl::kABytes;
#pragma unroll
    for (int i = 0; i < Tl::kMTiles; ++i) {
      mma::ldmatrix_x4(af[buf][i], sa + a_lane.at(16 * i, 2 * kk));
    }
#pragma unroll
    for (int j = 0; j < Tl::kNTiles / 2; ++j) {
      uint32_t r[4];
      if constexpr (kLayout == BLayout::kNK) {
        mma::ldmatrix_x4(r, sb + b_lane.at(16 * j, 2 * kk));
      } else {
        mma::ldmatrix_x4_trans(r, sb + b_lane.at(16 * kk, (wn * Tl::kWN + 16 * j) / 8));
      }
      bf[buf][2 * j][0] = r[0], bf[buf][2 * j][1] = r[1];
      bf[buf][2 * j + 1][0] = r[2], bf[buf][2 * j + 1][1] = r[3];
    }
  };
  constexpr int kSteps = kBK / 16;

  pdl_wait();
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < k_tiles) load(s);
    pipeline::commit();
  }
  pipeline::wait<kStages - 2>();
  __syncthreads();
  if (k_tiles > 0) fragments(0, 0, 0);
  for (int t = 0; t < k_tiles; ++t) {
    // tile t + kStages - 1 into the slot that tile t - 1 used (every warp read its last fragments
    // before the barrier of tile t - 1's last step)
    if (t + kStages - 1 < k_tiles) load(t + kStages - 1);
    pipeline::commit();
#pragma unroll
    for (int kk = 0; kk < kSteps; ++kk) {
      if (kk == kSteps - 1) {  // tile t + 1 landed and visible to all
        pipeline::wait<kStages - 2>();
        __syncthreads();
        if (t + 1 < k_tiles) fragments(t + 1, 0, (kk + 1) % 2);
      } else {
        fragments(t, kk + 1, (kk + 1) % 2);
      }
#pragma unroll
      for (int i = 0; i < Tl::kMTiles; ++i) {
#pragma unroll
        for (int j = 0; j < Tl::kNTiles; ++j) {
          mma::mma_m16n8k16<T>(acc[i][j], af[kk % 2][i], bf[kk % 2][j][0], bf[kk % 2][j][1]);
        }
      }
    }
  }
  pipeline::wait<0>();
  pdl_release();

  // ---- epilogue: lane holds (g, 2c..2c+1) and (g + 8, 2c..) of each 16 x 8 tile
  const int g = lane / 4, c = lane % 4;
  const int row_base = m0 + wm * Tl::kWM + g, col_base = n0 + wn * Tl::kWN + 2 * c;
  const bool partial = p.splits > 1 || p.partials_only;
#pragma unroll
  for (int j = 0; j < Tl::kNTiles; ++j) {
    const int col = col_base + 8 * j;
    if (col >= p.n) continue;
    float2 bias = make_float2(0.f, 0.f);
    if (!partial && p.bias != nullptr) bias = LoadBiasPair(p.bias, p.bias_type, col);
#pragma unroll
    for (int i = 0; i < Tl::kMTiles; ++i) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = row_base + 16 * i + 8 * h;
        if (row >= p.m) continue;
        const float x = acc[i][j][2 * h], y = acc[i][j][2 * h + 1];
        if (partial) {
          float* dst = p.workspace + (static_cast<int64_t>(blockIdx.y) * p.m + row) * p.n + col;
          *reinterpret_cast<float2*>(dst) = make_float2(x, y);
        } else {
          StorePair(static_cast<Out*>(p.out) + row * p.ldc + col, x + bias.x, y + bias.y);
        }
      }
    }
  }
}

// The kernel of a tile, its dynamic shared memory raised once per device.
template <class Tl, typename T, typename Out, BLayout kLayout>
cudaError_t PreparedSm80(void (**kernel)(Params)) {
  return SmemOptIn<Sm80Kernel<Tl, T, Out, kLayout>>(Tl::kSmemBytes, kernel);
}

template <class Tl, typename T, typename Out>
cudaError_t LaunchSm80(const Params& p, cudaStream_t stream, const DeviceProps& props) {
  if (Tl::kSmemBytes > props.smem_optin) return cudaErrorInvalidConfiguration;
  const int64_t tiles = static_cast<int64_t>(ceil_div(p.m, Tl::kBM)) * ceil_div(p.n, Tl::kBN);
  if (tiles > 0x7fffffff || p.splits < 1 || p.splits > 65535) {
    return cudaErrorInvalidConfiguration;
  }
  void (*kernel)(Params) = nullptr;
  if (p.b_layout == BLayout::kNK) {
    XK_CUDA_TRY((PreparedSm80<Tl, T, Out, BLayout::kNK>(&kernel)));
  } else {
    XK_CUDA_TRY((PreparedSm80<Tl, T, Out, BLayout::kKN>(&kernel)));
  }
  const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(p.splits));
  {
    const LaunchConfig lc(grid, dim3(Tl::kThreads), stream, 1, UsePDL(props), Tl::kSmemBytes);
    XK_CUDA_TRY(cudaLaunchKernelEx(&lc.cfg, kernel, p));
  }
  if (p.splits == 1 || p.partials_only) return cudaSuccess;
  return LaunchSplitKReduce<Out>(p, stream, props);
}

}  // namespace xkernels::gemm

#endif  // XKERNELS_GEMM_SM80_H_
