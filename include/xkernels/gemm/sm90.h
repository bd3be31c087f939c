// GEMM for sm_90a, the Hopper path: TMA loads into 128-byte-swizzled shared memory, wgmma with the
// accumulators in registers, warp specialisation and a persistent tile loop.
//
// A block of 1 + kConsumers warpgroups stays on its SM for the whole call and takes work units
// (output tile, k split) gridDim.x apart, in grouped tile order (epilogue.h). Warpgroup 0 is the
// producer: one thread keeps a ring of kStages shared-memory stages full, each stage a k block
// of a (kBM rows) and b (kBN rows) of 128 bytes per row (64 16-bit values, 128 e4m3), loaded by
// TMA and completed on the stage's `full` mbarrier. Each consumer warpgroup owns 64 rows of the
// tile: it waits on `full`, issues the k block's wgmmas (64 x kBN x 128 bytes of k), keeps one
// batch in flight and releases the previous stage on its `empty` mbarrier. The producer runs ahead
// into the next unit while the consumers store one, so loads overlap the epilogue.
//
// e4m3 scales: per tensor and per row they are linear in the output and applied in the epilogue;
// per block (1 x 128 of a, 128 x 128 of b) each k block's product is taken into a second set of
// accumulators and added to the result times its two scales in fp32 (DeepSeek-V3's promotion;
// kBK is exactly one scale block).
//
// Split-K: a unit with splits > 1 writes its fp32 partial tile (scaled, without bias) to the
// workspace; SplitKReduce sums them.
//
// Gated (kAct >= 0, the activation; params.h): a tile's b rows are kBN / 2 gate rows and the
// kBN / 2 up rows of the same output columns (in a cluster of 2 each block loads one half for
// both); a consumer thread holds gate and up of an output pair in n8 blocks j and j + kBN / 16,
// so the epilogue stores act(gate) * up: a 128 x 128 output tile from a 128 x 256 product.
#ifndef XKERNELS_GEMM_SM90_H_
#define XKERNELS_GEMM_SM90_H_

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "xkernels/common.h"
#include "xkernels/gemm/epilogue.h"
#include "xkernels/gemm/params.h"
#include "xkernels/reduce.h"
#include "xkernels/tma.h"
#include "xkernels/wgmma.h"

namespace xkernels::gemm {

template <typename T_, int kConsumers_, int kBN_, int kStages_, bool kBlockScale_,
          int kCluster_ = 1>
struct Sm90Tile {
  using T = T_;  // __half, __nv_bfloat16 or __nv_fp8_e4m3
  static constexpr int kConsumers = kConsumers_, kBN = kBN_, kStages = kStages_;
  static constexpr bool kBlockScale = kBlockScale_;
  // Clusters of kCluster blocks on vertically adjacent tiles (the same columns of the output):
  // each block loads its own a and 1 / kCluster of the b tile they share, multicast to all.
  static constexpr int kCluster = kCluster_;
  static constexpr int kBM = 64 * kConsumers;
  static constexpr int kBK = 128 / static_cast<int>(sizeof(T));  // one 128-byte row
  static constexpr int kThreads = 128 * (1 + kConsumers);
  static constexpr int kAcc = kBN / 2;  // accumulator floats per thread (64 x kBN per group)
  static constexpr int kABytes = kBM * 128, kBBytes = kBN * 128;
  static constexpr int kStageBytes = kABytes + kBBytes;
  // A 16-bit output leaves through shared memory: 64 rows x kBN of one consumer at a time, as
  // kBN / 64 TMA boxes of 64 x 64 (128-byte swizzled rows), stored while the next tile runs.
  static constexpr int kCBytes = 64 * kBN * 2;
  // slack to align, the stages and the C buffer (1024-byte aligned: the swizzle's period), the
  // barriers
  static constexpr int kSmemBytes = 1024 + kStages * kStageBytes + kCBytes + 2 * kStages * 8;
  static_assert(!kBlockScale || (sizeof(T) == 1 && kBN == 128),
                "block scales: e4m3, one 128-column scale block per tile");
  static_assert(kBN <= 256 && kBM <= 256, "TMA boxes of at most 256 rows");
  static_assert(kCluster == 1 || (kCluster == 2 && kBN % 16 == 0),
                "clusters of 2, each b share a whole number of 8-row swizzle periods");
};

namespace detail {

// Named barriers of the epilogue (0 is __syncthreads): one per consumer group, and the C buffer's
// hand-over from one group to the other.
constexpr uint32_t kBarGroup0 = 1, kBarFreeFor0 = 3;

// Output columns of a tile: kBN, or half of it for a gated product.
template <class Tl>
XK_HOST_DEVICE int TileCols(const Params& p) {
  return p.act >= 0 ? Tl::kBN / 2 : Tl::kBN;
}

// Rows of tiles in steps of kCluster: a cluster's blocks take the tiles (kCluster tm2 + rank, tn).
template <class Tl>
XK_HOST_DEVICE int TileRows(const Params& p) {
  const int tiles_m = (p.m + Tl::kBM - 1) / Tl::kBM;
  return (tiles_m + Tl::kCluster - 1) / Tl::kCluster;
}

// Work unit u (of a block of cluster rank `rank`) -> its output tile (tm, tn) and k blocks. A
// cluster's blocks take the same unit; a block past the last row of tiles loads zeros (TMA fills
// rows outside the tensor) and stores nothing.
struct Unit {
  int tm, tn, split, kb_begin, kb_count;
};
template <class Tl>
XK_DEVICE Unit UnitOf(const Params& p, int u, int rank) {
  const int cols = TileCols<Tl>(p);
  const int tiles_m = TileRows<Tl>(p), tiles_n = (p.n + cols - 1) / cols;
  const int tiles = tiles_m * tiles_n;
  Unit w;
  w.split = u / tiles;
  GroupedTile<16>(u % tiles, tiles_m, tiles_n, &w.tm, &w.tn);
  w.tm = w.tm * Tl::kCluster + rank;
  SplitRange((p.k + Tl::kBK - 1) / Tl::kBK, p.splits, w.split, &w.kb_begin, &w.kb_count);
  return w;
}

}  // namespace detail

// Work units of a call: output tiles (of clusters) x splits.
template <class Tl>
XK_HOST_DEVICE int64_t Sm90Units(const Params& p) {
  const int cols = detail::TileCols<Tl>(p);
  return static_cast<int64_t>(detail::TileRows<Tl>(p)) * ((p.n + cols - 1) / cols) * p.splits;
}

template <class Tl, typename Out, int kAct>
__global__ void __launch_bounds__(Tl::kThreads, 1)
    Sm90Kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
               const __grid_constant__ CUtensorMap map_c, const Params p, const bool tma_store) {
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __trap();  // wgmma and setmaxnreg exist on sm_90a only; the dispatcher never launches this
#else
  using T = typename Tl::T;
  constexpr int kStages = Tl::kStages, kBN = Tl::kBN, kAcc = Tl::kAcc;
  constexpr int kSteps = Tl::kBK / wgmma::kK<T>;  // wgmmas per k block (4)
  // kAct >= 0: gated (a math::Act); output columns and n8 blocks of a tile; a gated tile's up
  // values are kBN / 16 blocks on
  constexpr bool kGated = kAct >= 0;
  constexpr int kCols = kGated ? kBN / 2 : kBN, kJ = kCols / 8, kUp = kBN / 16;
  static_assert(!kGated || (std::is_same_v<T, Out> && kBN >= 128 && Tl::kCluster <= 2),
                "gated: 16-bit tiles of at least 128 columns with 16-bit outputs, a cluster's "
                "share one half");
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  // stage s: a (kBM, 128 bytes) at s_base + s * kStageBytes, b (kBN, 128 bytes) after it
  const uint32_t s_raw = mma::smem_addr(smem_raw);
  const uint32_t s_base = (s_raw + 1023) & ~1023u;
  const uint32_t s_c = s_base + kStages * Tl::kStageBytes;  // (64, kBN) of one group
  const uint32_t full0 = s_c + Tl::kCBytes;                 // kStages mbarriers, 8 bytes each
  const uint32_t empty0 = full0 + kStages * 8;

  constexpr int kCluster = Tl::kCluster;
  const int wg = static_cast<int>(threadIdx.x) / 128;
  const int units = Sm90Units<Tl>(p);
  const int rank = kCluster > 1 ? static_cast<int>(tma::cluster_rank()) : 0;
  const int u_first = static_cast<int>(blockIdx.x) / kCluster,
            u_step = static_cast<int>(gridDim.x) / kCluster;

  if (threadIdx.x == 0) {
    tma::prefetch_map(&map_a);
    tma::prefetch_map(&map_b);
    for (int s = 0; s < kStages; ++s) {
      tma::mbar_init(full0 + 8 * s, 1);  // the producer's expect_tx
      // one arrival per consumer warp of every block of the cluster (each writes b into all)
      tma::mbar_init(empty0 + 8 * s, 4 * Tl::kConsumers * kCluster);
    }
    tma::mbar_fence_init();
  }
  if constexpr (kCluster > 1) {
    reduce::cluster_sync();  // the peers' barriers are initialised before anyone arrives on them
  } else {
    __syncthreads();
  }
  pdl_wait();

  if (wg == 0) {  // ---- producer
    if constexpr (Tl::kConsumers > 1) wgmma::setmaxnreg_dec<40>();
    if (threadIdx.x == 0) {
      int stage = 0;
      uint32_t phase = 0;
      for (int u = u_first; u < units; u += u_step) {
        const detail::Unit w = detail::UnitOf<Tl>(p, u, rank);
        for (int kb = 0; kb < w.kb_count; ++kb) {
          tma::mbar_wait(empty0 + 8 * stage, phase ^ 1);  // a fresh barrier passes parity 1
          const uint32_t full = full0 + 8 * stage;
          const uint32_t sa = s_base + stage * Tl::kStageBytes;
          const int k0 = (w.kb_begin + kb) * Tl::kBK;
          tma::mbar_arrive_expect_tx(full, Tl::kStageBytes);
          tma::load_2d(sa, &map_a, full, k0, w.tm * Tl::kBM);
          if constexpr (kGated && kCluster > 1) {
            // this block's half of b (rank 0 the gate's rows, 1 the up's), into both blocks
            tma::load_2d_multicast(sa + Tl::kABytes + rank * kCols * 128, &map_b, full, k0,
                                   rank * p.n + w.tn * kCols, (1u << kCluster) - 1);
          } else if constexpr (kGated) {
            tma::load_2d(sa + Tl::kABytes, &map_b, full, k0, w.tn * kCols);
            tma::load_2d(sa + Tl::kABytes + kCols * 128, &map_b, full, k0, p.n + w.tn * kCols);
          } else if constexpr (kCluster > 1) {
            // this block's share of b: rows rank * kBN / kCluster .. of the tile, into every block
            constexpr int kRows = kBN / kCluster;
            tma::load_2d_multicast(sa + Tl::kABytes + rank * kRows * 128, &map_b, full, k0,
                                   w.tn * kBN + rank * kRows, (1u << kCluster) - 1);
          } else {
            tma::load_2d(sa + Tl::kABytes, &map_b, full, k0, w.tn * kBN);
          }
          if (++stage == kStages) stage = 0, phase ^= 1;
        }
      }
    }
    pdl_release();
  } else {
    // ---- consumers: warpgroup wg - 1 owns rows 64 (wg - 1) .. + 63 of each tile
    if constexpr (Tl::kConsumers > 1) wgmma::setmaxnreg_inc<232>();
    // a stage's release: one arrival per warp on its empty barrier, in every block of the
    // cluster (the next fill of the stage writes b into all of them)
    auto release = [&](int st) {
      if (static_cast<int>(threadIdx.x) % 32 == 0) {
        if constexpr (kCluster > 1) {
#pragma unroll
          for (int r = 0; r < kCluster; ++r) tma::mbar_arrive_cluster(empty0 + 8 * st, r);
        } else {
          tma::mbar_arrive(empty0 + 8 * st);
        }
      }
    };
    const int cw = wg - 1;
    const int lane = static_cast<int>(threadIdx.x) % 32,
              warp = (static_cast<int>(threadIdx.x) / 32) % 4;
    const int g = lane / 4, c = lane % 4;
    int stage = 0, done = 0;  // done: tiles stored through the C buffer
    uint32_t phase = 0;
    float acc[kAcc];  // (n8 block j: rows g, g + 8 x columns 2c, 2c + 1)

    for (int u = u_first; u < units; u += u_step) {
      const detail::Unit w = detail::UnitOf<Tl>(p, u, rank);
      const int row0 = w.tm * Tl::kBM + 64 * cw + 16 * warp + g;  // and row0 + 8
#pragma unroll
      for (int i = 0; i < kAcc; ++i) acc[i] = 0.f;
      // e4m3 per-tensor / per-row scales of this thread's rows and columns, loaded now so that
      // the epilogue does not wait for them (1 for 16-bit operands and block scales)
      constexpr bool kEpilogueScales = sizeof(T) == 1 && !Tl::kBlockScale;
      float sa0 = 1.f, sa1 = 1.f;
      float sbv[kEpilogueScales ? kBN / 4 : 1];  // (n8 block j, column 2c + e)
      if constexpr (kEpilogueScales) {
        sa0 = RowScale(p.a_scale, p.a_scale_kind, min(row0, p.m - 1));
        sa1 = RowScale(p.a_scale, p.a_scale_kind, min(row0 + 8, p.m - 1));
#pragma unroll
        for (int j = 0; j < kBN / 8; ++j) {
          const int col = min(w.tn * kBN + 8 * j + 2 * c, p.n - 2);
          sbv[2 * j] = RowScale(p.b_scale, p.b_scale_kind, col);
          sbv[2 * j + 1] = RowScale(p.b_scale, p.b_scale_kind, col + 1);
        }
      }

      if constexpr (!Tl::kBlockScale) {
        int prev = -1;
        for (int kb = 0; kb < w.kb_count; ++kb) {
          tma::mbar_wait(full0 + 8 * stage, phase);
          const uint32_t sa = s_base + stage * Tl::kStageBytes + cw * 64 * 128;
          const uint32_t sb = s_base + stage * Tl::kStageBytes + Tl::kABytes;
          wgmma::fence_operands(acc);
          wgmma::fence();
#pragma unroll
          for (int s = 0; s < kSteps; ++s) {  // 32 bytes of k per step
            wgmma::mma<kBN, T>(acc, wgmma::desc_sw128(sa + 32 * s), wgmma::desc_sw128(sb + 32 * s),
                               1);
          }
          wgmma::commit();
          wgmma::wait<1>();  // the previous k block's batch is done: its stage is free
          wgmma::fence_operands(acc);
          if (prev >= 0) release(prev);
          prev = stage;
          if (++stage == kStages) stage = 0, phase ^= 1;
        }
        wgmma::wait<0>();
        wgmma::fence_operands(acc);
        if (prev >= 0) release(prev);
      } else {
        // one scale block of b per tile (kBN = 128); a's scales per row and k block
        const float* sa_row0 = p.a_scale + static_cast<int64_t>(min(row0, p.m - 1)) * p.a_scale_ld;
        const float* sa_row1 =
            p.a_scale + static_cast<int64_t>(min(row0 + 8, p.m - 1)) * p.a_scale_ld;
        const float* sb_row = p.b_scale + static_cast<int64_t>(w.tn) * p.b_scale_ld;
        float part[kAcc];
        // the next k block's scales load while this one multiplies
        float s0 = 0.f, s1 = 0.f, sb = 0.f;
        if (w.kb_count > 0) {
          s0 = __ldg(sa_row0 + w.kb_begin), s1 = __ldg(sa_row1 + w.kb_begin);
          sb = __ldg(sb_row + w.kb_begin);
        }
        for (int kb = 0; kb < w.kb_count; ++kb) {
          const int kn = w.kb_begin + min(kb + 1, w.kb_count - 1);
          const float n0 = __ldg(sa_row0 + kn), n1 = __ldg(sa_row1 + kn), nb = __ldg(sb_row + kn);
          tma::mbar_wait(full0 + 8 * stage, phase);
          const uint32_t sa = s_base + stage * Tl::kStageBytes + cw * 64 * 128;
          const uint32_t sbm = s_base + stage * Tl::kStageBytes + Tl::kABytes;
          wgmma::fence_operands(part);
          wgmma::fence();
#pragma unroll
          for (int s = 0; s < kSteps; ++s) {
            wgmma::mma<kBN, T>(part, wgmma::desc_sw128(sa + 32 * s),
                               wgmma::desc_sw128(sbm + 32 * s), s > 0 ? 1u : 0u);
          }
          wgmma::commit();
          wgmma::wait<0>();
          wgmma::fence_operands(part);
          release(stage);
          if (++stage == kStages) stage = 0, phase ^= 1;
          const float f0 = s0 * sb, f1 = s1 * sb;
#pragma unroll
          for (int j = 0; j < kAcc / 4; ++j) {
            acc[4 * j + 0] = fmaf(part[4 * j + 0], f0, acc[4 * j + 0]);
            acc[4 * j + 1] = fmaf(part[4 * j + 1], f0, acc[4 * j + 1]);
            acc[4 * j + 2] = fmaf(part[4 * j + 2], f1, acc[4 * j + 2]);
            acc[4 * j + 3] = fmaf(part[4 * j + 3], f1, acc[4 * j + 3]);
          }
          s0 = n0, s1 = n1, sb = nb;
        }
      }

      // ---- epilogue: scales (per tensor / row), bias, rounding; or the fp32 partial tile
      const bool partial = p.splits > 1 || p.partials_only;
      // the value of accumulator pair (j, h) with scales and bias
      auto value = [&](int j, int h, float2 bias) {
        const float f = h ? sa1 : sa0;
        float sb0 = 1.f, sb1 = 1.f;
        if constexpr (kEpilogueScales) sb0 = sbv[2 * j], sb1 = sbv[2 * j + 1];
        return make_float2(acc[4 * j + 2 * h] * (f * sb0) + bias.x,
                           acc[4 * j + 2 * h + 1] * (f * sb1) + bias.y);
      };
      // the output pair (j, h) of a tile: value, or act(gate) * up with the biases bg and bu
      auto result = [&](int j, int h, float2 bg, float2 bu) {
        if constexpr (kGated) {
          // the activation a template argument: a switch on p.act per output cost 20% of the
          // 8192 x 28672 x 4096 gate_up product (2.73 -> 3.25 ms)
          constexpr math::Act kA = static_cast<math::Act>(kAct < 0 ? 0 : kAct);
          const float2 gv = value(j, h, bg), uv = value(j + kUp, h, bu);
          return make_float2(math::activate<kA, true>(gv.x) * uv.x,
                             math::activate<kA, true>(gv.y) * uv.y);
        } else {
          return value(j, h, bg);
        }
      };
      // the bias pairs of column col (gated: the gate's and the up's)
      auto bias_at = [&](bool load, int col, float2* bg, float2* bu) {
        *bg = *bu = make_float2(0.f, 0.f);
        if (!load || p.bias == nullptr) return;
        *bg = LoadBiasPair(p.bias, p.bias_type, col);
        if constexpr (kGated) *bu = LoadBiasPair(p.bias, p.bias_type, p.n + col);
      };
      if constexpr (sizeof(Out) == 2) {
        if (tma_store && !partial) {
          // The C buffer passes from group 0 to group 1 and back once its TMA store has read it.
          const uint32_t bar_group = detail::kBarGroup0 + cw;
          const bool leader = threadIdx.x % 128 == 0;
          if constexpr (Tl::kConsumers == 2) {
            if (cw == 1 || done > 0) tma::named_sync(detail::kBarFreeFor0 + cw, 160);
          } else {
            if (leader) tma::bulk_wait_read<0>();
            tma::named_sync(bar_group, 128);
          }
#pragma unroll
          for (int j = 0; j < kJ; ++j) {
            const int col = w.tn * kCols + 8 * j + 2 * c;
            float2 bg, bu;
            bias_at(col < p.n, col, &bg, &bu);
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              // box j / 8 of (64, 64), row r, 16-byte chunk j % 8 swizzled with the row
              const int r = 16 * warp + g + 8 * h;
              const float2 v = result(j, h, bg, bu);
              const uint32_t dst =
                  s_c + (j / 8) * 8192 + r * 128 + (((j % 8) ^ (r % 8)) << 4) + 4 * c;
              asm volatile("st.shared.b32 [%0], %1;" ::"r"(dst), "r"(mma::pack2<Out>(v.x, v.y)));
            }
          }
          tma::fence_async_shared();
          tma::named_sync(bar_group, 128);
          if (leader) {
#pragma unroll
            for (int q = 0; q < kCols / 64; ++q) {
              tma::store_2d(&map_c, s_c + q * 8192, w.tn * kCols + 64 * q,
                            w.tm * Tl::kBM + 64 * cw);
            }
            tma::bulk_commit();
          }
          if constexpr (Tl::kConsumers == 2) {
            if (warp == 0) {
              if (leader) tma::bulk_wait_read<0>();
              __syncwarp();
              tma::named_arrive(detail::kBarFreeFor0 + (1 - cw), 160);
            }
          }
          ++done;
          continue;
        }
      }
      // partial tiles: [splits, m, n] floats, a gated product's [splits, m, 2n] (gate, up)
      constexpr int kWidth = kGated ? 2 : 1;
#pragma unroll
      for (int j = 0; j < kJ; ++j) {
        const int col = w.tn * kCols + 8 * j + 2 * c;
        if (col >= p.n) continue;
        float2 bg, bu;
        bias_at(!partial, col, &bg, &bu);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int row = row0 + 8 * h;
          if (row >= p.m) continue;
          if (partial) {
            float* dst = p.workspace +
                         (static_cast<int64_t>(w.split) * p.m + row) * kWidth * p.n + col;
            *reinterpret_cast<float2*>(dst) = value(j, h, bg);
            if constexpr (kGated) *reinterpret_cast<float2*>(dst + p.n) = value(j + kUp, h, bu);
          } else {
            const float2 v = result(j, h, bg, bu);
            StorePair(static_cast<Out*>(p.out) + row * p.ldc + col, v.x, v.y);
          }
        }
      }
    }
    // the last hand-over of the C buffer, and the last stores out of it
    if constexpr (Tl::kConsumers == 2) {
      if (cw == 0 && done > 0) tma::named_sync(detail::kBarFreeFor0, 160);
    }
    if (threadIdx.x % 128 == 0 && done > 0) tma::bulk_wait<0>();
    pdl_release();
  }  // consumers
  // a block leaves once its peers no longer write into its shared memory or arrive on its barriers
  if constexpr (kCluster > 1) reduce::cluster_sync();
#endif
}

// The kernel of a tile, its dynamic shared memory raised once per device.
template <class Tl, typename Out, int kAct>
cudaError_t PreparedSm90(void (**kernel)(CUtensorMap, CUtensorMap, CUtensorMap, Params, bool)) {
  return SmemOptIn<Sm90Kernel<Tl, Out, kAct>>(Tl::kSmemBytes, kernel);
}

namespace detail {

template <class Tl, typename Out, int kAct>
cudaError_t LaunchSm90(const Params& p, cudaStream_t stream, const DeviceProps& props) {
  constexpr bool kGated = kAct >= 0;
  using T = typename Tl::T;
  if (Tl::kSmemBytes > props.smem_optin) return cudaErrorInvalidConfiguration;
  const int64_t units = Sm90Units<Tl>(p);
  if (units > 0x7fffffff || p.splits < 1 || p.splits > 65535) {
    return cudaErrorInvalidConfiguration;
  }
  const CUtensorMapDataType type = sizeof(T) == 1              ? CU_TENSOR_MAP_DATA_TYPE_UINT8
                                   : std::is_same_v<T, __half> ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                                               : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  constexpr int kElem = static_cast<int>(sizeof(T));
  CUtensorMap map_a, map_b, map_c;
  XK_CUDA_TRY(tma::EncodeTensorMap2d(&map_a, p.a, type, kElem, p.m, p.k, p.lda, Tl::kBM, Tl::kBK));
  // b's box: the rows one load brings (a gated tile loads its halves apart); a gated b has 2n rows
  XK_CUDA_TRY(tma::EncodeTensorMap2d(&map_b, p.b, type, kElem, kGated ? 2 * p.n : p.n, p.k, p.ldb,
                                     kGated ? Tl::kBN / 2 : Tl::kBN / Tl::kCluster, Tl::kBK));
  // 16-bit outputs leave by TMA where out's base and pitch allow it (16-byte aligned)
  bool tma_store = false;
  if constexpr (sizeof(Out) == 2) {
    tma_store = p.splits == 1 && !p.partials_only && is_aligned(p.out, 16) && p.ldc % 8 == 0;
    if (tma_store) {
      XK_CUDA_TRY(tma::EncodeTensorMap2d(&map_c, p.out,
                                         std::is_same_v<Out, __half>
                                             ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                             : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
                                         2, p.m, p.n, p.ldc, 64, 64));
    }
  }
  if (!tma_store) map_c = map_a;  // unused
  void (*kernel)(CUtensorMap, CUtensorMap, CUtensorMap, Params, bool) = nullptr;
  XK_CUDA_TRY((PreparedSm90<Tl, Out, kAct>(&kernel)));
  // a persistent grid: one block per SM (as many clusters as fit at once)
  int slots = props.sm_count;
  if constexpr (Tl::kCluster > 1) {
    XK_CUDA_TRY((CachedFit<Sm90Kernel<Tl, Out, kAct>>(0, &slots, [&](int* fit) {
      const LaunchConfig one(dim3(Tl::kCluster), dim3(Tl::kThreads), stream, Tl::kCluster, false,
                             Tl::kSmemBytes);
      return cudaOccupancyMaxActiveClusters(fit, kernel, &one.cfg);
    })));
  }
  const dim3 grid(static_cast<unsigned>((units < slots ? units : slots) * Tl::kCluster));
  {
    const LaunchConfig lc(grid, dim3(Tl::kThreads), stream, Tl::kCluster, UsePDL(props),
                          Tl::kSmemBytes);
    XK_CUDA_TRY(cudaLaunchKernelEx(&lc.cfg, kernel, map_a, map_b, map_c, p, tma_store));
  }
  if (p.splits == 1 || p.partials_only) return cudaSuccess;
  return LaunchSplitKReduce<Out>(p, stream, props);
}

}  // namespace detail

// Runs p with tile Tl. A gated p: 16-bit operands and outputs (gemm.h's Gemm takes the others
// through the workspace).
template <class Tl, typename Out>
cudaError_t LaunchSm90(const Params& p, cudaStream_t stream, const DeviceProps& props) {
  if constexpr (std::is_same_v<typename Tl::T, Out>) {
    switch (p.act) {
      case static_cast<int>(math::Act::kSilu):
        return detail::LaunchSm90<Tl, Out, 0>(p, stream, props);
      case static_cast<int>(math::Act::kGelu):
        return detail::LaunchSm90<Tl, Out, 1>(p, stream, props);
      case static_cast<int>(math::Act::kGeluTanh):
        return detail::LaunchSm90<Tl, Out, 2>(p, stream, props);
      default:
        break;
    }
  }
  if (p.act >= 0) return cudaErrorInvalidValue;
  return detail::LaunchSm90<Tl, Out, -1>(p, stream, props);
}

}  // namespace xkernels::gemm

#endif  // XKERNELS_GEMM_SM90_H_
