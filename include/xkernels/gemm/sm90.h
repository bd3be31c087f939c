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
// into the next unit while the consumers store one, so loads overlap the epilogue. A 16-bit
// output leaves by TMA stores of 64 x 64 boxes out of each group's own slots of the C buffer; a
// slot is rewritten only once the store that last read it is done, so no group waits for the
// other or for its own last stores before its next unit's products.
//
// e4m3 scales: per tensor and per row they are linear in the output and applied to the
// accumulators after the main loop; per block (1 x 128 of a, 128 x 128 of b; kBK is exactly one
// scale block) the 128 x 128 tiles take each k block's product into a second set of accumulators
// and add it to the result times its two scales in fp32 (DeepSeek-V3's promotion), the two
// consumer groups issuing their k blocks in turn (kOrdered) so that one promotes while the other
// multiplies; the 128 x 256 tiles keep each 128-column half of the accumulators divided by its
// current scales, so that the wgmmas accumulate into it directly, and rescale one half while the
// other half's product runs (a unit with a scale out of that form's range promotes instead).
//
// The last row of tiles, where m is not a multiple of kBM, loads its a box at row m - kBM (in
// bounds) and writes only the rows the tile above does not (Unit). Swapped tiles (kSwap)
// compute out^T = b a^T, the output's columns on the wgmma's m side, and store the transpose.
// Clusters of 2 share b (vertically adjacent tiles, each block loading half of b for both) or,
// with kShareA, a (horizontally adjacent tiles: the swapped tiles' weights).
//
// Split-K: a unit with splits > 1 writes its fp32 partial tile (scaled, without bias) to the
// workspace; SplitKReduce sums them.
//
// Stream-K (unsplit calls whose last round would leave SMs idle long enough; StreamKUnits): the
// last round of units and the rest have their k blocks shared evenly by all the grid's slots;
// a piece that does not end its tile leaves an fp32 partial tile in the slot's workspace area and
// raises the slot's flag (this call's nonce), and the piece that ends the tile waits for the
// flags of the lower slots holding the tile's earlier k blocks, adds their partials (resetting
// the flags) and runs the epilogue. Work<Tl> says which block runs what.
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

#include <atomic>
#include <chrono>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "xkernels/common.h"
#include "xkernels/dtypes.h"
#include "xkernels/gemm/epilogue.h"
#include "xkernels/gemm/params.h"
#include "xkernels/reduce.h"
#include "xkernels/tma.h"
#include "xkernels/wgmma.h"

namespace xkernels::gemm {

template <typename T_, int kConsumers_, int kBN_, int kStages_, bool kBlockScale_,
          int kCluster_ = 1, bool kOrdered_ = false, bool kSwap_ = false, bool kShareA_ = false>
struct Sm90Tile {
  using T = T_;  // __half, __nv_bfloat16 or __nv_fp8_e4m3
  static constexpr int kConsumers = kConsumers_, kBN = kBN_, kStages = kStages_;
  static constexpr bool kBlockScale = kBlockScale_;
  // Two consumer groups issue their k blocks' wgmmas in turn (0, 1, 0, 1, ...: named barriers),
  // so that with block scales one group's promotion runs under the other's products.
  static constexpr bool kOrdered = kOrdered_ && kConsumers_ == 2;
  // Clusters of kCluster blocks on vertically adjacent tiles (the same columns of the output):
  // each block loads its own a and 1 / kCluster of the b tile they share, multicast to all.
  static constexpr int kCluster = kCluster_;
  // kShareA: the cluster's blocks are horizontally adjacent instead (the same rows of the output,
  // consecutive kBN columns), each loading its own b and 1 / kCluster of the a tile they share
  static constexpr bool kShareA = kShareA_ && kCluster_ > 1;
  // Operands swapped (not gated, no block scales): the tile computes out^T = b a^T, b's rows (the
  // output's columns) on the wgmma's m side, 64 per consumer group, and a's rows (the output's
  // rows) on its n side, kBN of them; the epilogue writes the transpose (bias per accumulator row).
  // For m just under a multiple of kBN (gemm.h, TileGrid), where 128-row tiles would pad a row of
  // tiles.
  static constexpr bool kSwap = kSwap_;
  static constexpr int kBM = 64 * kConsumers;
  static constexpr int kBK = 128 / static_cast<int>(sizeof(T));  // one 128-byte row
  static constexpr int kThreads = 128 * (1 + kConsumers);
  static constexpr int kAcc = kBN / 2;  // accumulator floats per thread (64 x kBN per group)
  static constexpr int kABytes = kBM * 128, kBBytes = kBN * 128;
  static constexpr int kStageBytes = kABytes + kBBytes;
  // A 16-bit output leaves through shared memory as TMA boxes of 64 x 64 (128-byte swizzled rows,
  // 8 KB): kCSlots box slots per consumer group, 64 x kBN of 16-bit values in all.
  // (none where kBN is not a whole number of boxes: element stores)
  static constexpr int kCBytes =
      kBN % 64 != 0 ? 0 : (64 * kBN * 2 > kConsumers * 8192 ? 64 * kBN * 2 : kConsumers * 8192);
  static constexpr int kCSlots = kCBytes / 8192 / kConsumers > 0 ? kCBytes / 8192 / kConsumers : 1;
  // slack to align, the stages and the C buffer (1024-byte aligned: the swizzle's period), the
  // barriers
  static constexpr int kSmemBytes = 1024 + kStages * kStageBytes + kCBytes + 2 * kStages * 8;
  static_assert(!kBlockScale || (sizeof(T) == 1 && kBN % 128 == 0),
                "block scales: e4m3, whole 128-column scale blocks per tile");
  static_assert(kBN <= 256 && kBM <= 256, "TMA boxes of at most 256 rows");
  static_assert(kCluster == 1 || (kCluster == 2 && kBN % 16 == 0),
                "clusters of 2, each b share a whole number of 8-row swizzle periods");
  static_assert(!kShareA || !kBlockScale, "clusters sharing a: plain tiles");
  static_assert(kCBytes == 0 || kCSlots * kConsumers * 8192 <= kCBytes,
                "a box slot per consumer group");
  static_assert(!kSwap || !kBlockScale, "swapped operands: no block scales");
};

namespace detail {

// Named barriers (0 is __syncthreads): one per consumer group, each group's turn to issue
// (kOrdered), both groups (stream-K), each group's vote on its unit's block scales.
constexpr uint32_t kBarGroup0 = 1, kBarTurn0 = 5, kBarConsumers = 7, kBarVote0 = 8;

// Block scales the rescaled accumulators of the 128 x 256 block tiles take (Sm90Kernel): within
// 2^-22 .. 2^22 in magnitude, so that the ratio of two blocks' scale products stays within 2^88
// and the accumulators (the sum divided by the current block's scales) within fp32's range.
XK_DEVICE bool RescalableScale(float s) {
  const float a = fabsf(s);
  return a >= 0x1p-22f && a <= 0x1p22f;
}

// Output columns of a tile: kBN, or half of it for a gated product.
template <class Tl>
XK_HOST_DEVICE int TileCols(const Params& p) {
  return p.act >= 0 ? Tl::kBN / 2 : Tl::kBN;
}

// Rows of tiles in steps of kCluster: a cluster's blocks take the tiles (kCluster tm2 + rank, tn);
// with kShareA columns of tiles in steps of kCluster instead, (tm, kCluster tn2 + rank).
template <class Tl>
XK_HOST_DEVICE int TileRows(const Params& p) {
  const int tiles_m = (p.m + Tl::kBM - 1) / Tl::kBM;
  return Tl::kShareA ? tiles_m : (tiles_m + Tl::kCluster - 1) / Tl::kCluster;
}
template <class Tl>
XK_HOST_DEVICE int TileColumns(const Params& p) {
  const int cols = TileCols<Tl>(p), tiles_n = (p.n + cols - 1) / cols;
  return Tl::kShareA ? (tiles_n + Tl::kCluster - 1) / Tl::kCluster : tiles_n;
}

// Work unit u (of a block of cluster rank `rank`) -> its output tile (tm, tn) and k blocks. A
// cluster's blocks take the same unit. The last row of tiles, where m is not a multiple of kBM
// (and m >= kBM), has its a box end at row m instead of past it: it multiplies rows m0 = m - kBM
// .. m - 1 and writes only those from m_lo = tm kBM on (the rows before are the tile above's); a
// cluster's block past the last row of tiles loads the same in-bounds box and writes nothing (for
// m < kBM it loads zeros: TMA fills rows outside the tensor).
// A box mostly past m ran as long as a whole one and then some (H100, bf16, 128 x 128 tiles,
// n x k 8192 x 8192: m 129 95.5 us, m 192 82.2, m 256 59.2).
struct Unit {
  int tm, tn, split, kb_begin, kb_count;
  int m0, m_lo;  // the tile's first row of a (its accumulators' row 0), its first row written
};
template <class Tl>
XK_DEVICE Unit UnitOf(const Params& p, int u, int rank) {
  const int tiles_m = TileRows<Tl>(p), tiles_n = TileColumns<Tl>(p);
  const int tiles = tiles_m * tiles_n;
  Unit w;
  w.split = u / tiles;
  GroupedTile<16>(u % tiles, tiles_m, tiles_n, &w.tm, &w.tn);
  if constexpr (Tl::kShareA) {
    // (a block past the last column of tiles loads zeros and writes nothing)
    w.tn = w.tn * Tl::kCluster + rank;
  } else {
    w.tm = w.tm * Tl::kCluster + rank;
  }
  w.m_lo = w.tm * Tl::kBM;
  w.m0 = p.shift_last_rows && p.m >= Tl::kBM ? min(w.m_lo, p.m - Tl::kBM) : w.m_lo;
  SplitRange((p.k + Tl::kBK - 1) / Tl::kBK, p.splits, w.split, &w.kb_begin, &w.kb_count);
  return w;
}

}  // namespace detail

// Work units of a call: output tiles (of clusters) x splits.
template <class Tl>
XK_HOST_DEVICE int64_t Sm90Units(const Params& p) {
  return static_cast<int64_t>(detail::TileRows<Tl>(p)) * detail::TileColumns<Tl>(p) * p.splits;
}

namespace detail {

// The work of cluster slot Slot() of Slots() (the grid's clusters), in order: whole units Slot(),
// Slot() + Slots(), ... below units - p.sk_units; then (stream-K) its even share of the k blocks of
// the last p.sk_units units, [lo, hi) of their kb_tile * sk_units, cut at tile edges and taken
// last piece first. What becomes of a unit's product follows from its k blocks (Mode): a piece
// that ends its tile after other pieces is the tile's fixup, which adds those pieces, the
// partials of lower slots (each wrote its one partial as its first stream-K piece, so the wait is
// short, and a block only waits on lower slots: started before it); a piece that does not end its
// tile is the slot's one partial. Only the next unit and hi live in registers across the main
// loop (the consumers' accumulators leave few); the rest is read again from the parameters.
enum ItemMode { kWhole = 0, kPartial = 1, kFixup = 2 };
template <class Tl>
struct Work {
  int u, hi;  // the next whole unit; the stream-K k blocks left end at hi
  XK_DEVICE static int Slot() { return static_cast<int>(blockIdx.x) / Tl::kCluster; }
  XK_DEVICE static int Slots() { return static_cast<int>(gridDim.x) / Tl::kCluster; }
  XK_DEVICE static int KbTile(const Params& p) { return (p.k + Tl::kBK - 1) / Tl::kBK; }
  // (the launcher keeps sk_units * kb_tile below 2^31)
  XK_DEVICE static int64_t Total(const Params& p) {
    return static_cast<int64_t>(p.sk_units) * KbTile(p);
  }
  XK_DEVICE static int Lo(const Params& p) { return static_cast<int>(Total(p) * Slot() / Slots()); }
  XK_DEVICE explicit Work(const Params& p) {
    u = Slot();
    hi = static_cast<int>(Total(p) * (Slot() + 1) / Slots());
  }
  XK_DEVICE bool Next(const Params& p, int rank, Unit* w) {
    const int dp_end = static_cast<int>(Sm90Units<Tl>(p)) - p.sk_units;
    if (u < dp_end) {
      *w = UnitOf<Tl>(p, u, rank);
      u += Slots();
      return true;
    }
    const int lo = Lo(p);
    if (hi <= lo) return false;
    const int kb_tile = KbTile(p);
    const int t = (hi - 1) / kb_tile;
    const int t0 = t * kb_tile;
    const int f_lo = lo > t0 ? lo : t0;
    *w = UnitOf<Tl>(p, dp_end + t, rank);
    w->kb_begin = f_lo - t0;
    w->kb_count = hi - f_lo;
    hi = f_lo;
    return true;
  }
  XK_DEVICE static int Mode(const Params& p, const Unit& w) {
    if (p.sk_units == 0) return kWhole;  // (split-K's ranges are not pieces)
    const int end = w.kb_begin + w.kb_count;
    if (end < KbTile(p)) return kPartial;
    return w.kb_begin > 0 ? kFixup : kWhole;
  }
  // A fixup's first slot: the one holding its tile's first k block (hi: the fixup's first)
  XK_DEVICE int FixupFrom(const Params& p, const Unit& w) const {
    const int64_t t0 = hi - w.kb_begin;
    return static_cast<int>(((t0 + 1) * Slots() - 1) / Total(p));
  }
};

XK_DEVICE uint64_t LoadAcquire(const uint64_t* ptr) {
  uint64_t v;
  asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(ptr) : "memory");
  return v;
}
XK_DEVICE void StoreRelease(uint64_t* ptr, uint64_t v) {
  asm volatile("st.release.gpu.global.u64 [%0], %1;" ::"l"(ptr), "l"(v) : "memory");
}

}  // namespace detail

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
  // kSwap: p is the swapped product (m: the output's columns, n: its rows; LaunchSm90)
  constexpr bool kSwap = Tl::kSwap;
  static_assert(!(kSwap && kGated), "swapped operands: not gated");
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  // stage s: a (kBM, 128 bytes) at s_base + s * kStageBytes, b (kBN, 128 bytes) after it
  const uint32_t s_raw = mma::smem_addr(smem_raw);
  const uint32_t s_base = (s_raw + 1023) & ~1023u;
  const uint32_t s_c = s_base + kStages * Tl::kStageBytes;  // (64, kBN) of one group
  const uint32_t full0 = s_c + Tl::kCBytes;                 // kStages mbarriers, 8 bytes each
  const uint32_t empty0 = full0 + kStages * 8;

  constexpr int kCluster = Tl::kCluster;
  const int wg = static_cast<int>(threadIdx.x) / 128;
  const int rank = kCluster > 1 ? static_cast<int>(tma::cluster_rank()) : 0;

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
      detail::Unit w;
      for (detail::Work<Tl> work(p); work.Next(p, rank, &w);) {
        for (int kb = 0; kb < w.kb_count; ++kb) {
          tma::mbar_wait(empty0 + 8 * stage, phase ^ 1);  // a fresh barrier passes parity 1
          const uint32_t full = full0 + 8 * stage;
          const uint32_t sa = s_base + stage * Tl::kStageBytes;
          const int k0 = (w.kb_begin + kb) * Tl::kBK;
          tma::mbar_arrive_expect_tx(full, p.stage_tx);
          if constexpr (Tl::kShareA) {
            // this block's share of a: rows rank * kBM / kCluster .. of the tile, into every block
            constexpr int kRows = Tl::kBM / kCluster;
            tma::load_2d_multicast(sa + rank * kRows * 128, &map_a, full, k0, w.m0 + rank * kRows,
                                   (1u << kCluster) - 1);
          } else {
            tma::load_2d(sa, &map_a, full, k0, w.m0);
          }
          if constexpr (kGated && kCluster > 1) {
            // this block's half of b (rank 0 the gate's rows, 1 the up's), into both blocks
            tma::load_2d_multicast(sa + Tl::kABytes + rank * kCols * 128, &map_b, full, k0,
                                   rank * p.n + w.tn * kCols, (1u << kCluster) - 1);
          } else if constexpr (kGated) {
            tma::load_2d(sa + Tl::kABytes, &map_b, full, k0, w.tn * kCols);
            tma::load_2d(sa + Tl::kABytes + kCols * 128, &map_b, full, k0, p.n + w.tn * kCols);
          } else if constexpr (kCluster > 1 && !Tl::kShareA) {
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
    // kOrdered: each group waits for its turn before it issues a k block's wgmmas and hands the
    // turn over after; group 0 takes the first turn without waiting (and the last hand-over back
    // after the loop, so that every arrival is met)
    bool issued = false;
    auto take_turn = [&] {
      if constexpr (Tl::kOrdered) {
        if (cw == 1 || issued) tma::named_sync(detail::kBarTurn0 + cw, 256);
        issued = true;
      }
    };
    auto pass_turn = [&] {
      if constexpr (Tl::kOrdered) tma::named_arrive(detail::kBarTurn0 + (1 - cw), 256);
    };
    // stream-K: the partial-tile slot of cluster slot s (kAcc floats per consumer thread, as
    // float4 runs thread-interleaved) and its ready flag, after the grid's slots in the workspace
    constexpr int kSlotFloats = Tl::kBM * kBN;
    auto slot_of = [&](int s) {
      return p.workspace + static_cast<int64_t>(s * kCluster + rank) * kSlotFloats;
    };
    auto flag_of = [&](int s) {
      return reinterpret_cast<uint64_t*>(p.workspace +
                                         static_cast<int64_t>(gridDim.x) * kSlotFloats) +
             s * kCluster + rank;
    };

    detail::Unit w;
    for (detail::Work<Tl> work(p); work.Next(p, rank, &w);) {
      const int row0 = w.m0 + 64 * cw + 16 * warp + g;  // and row0 + 8
      // The plain tiles' first wgmma of a unit starts from zero (scale-d 0) rather than from
      // zeroed accumulators: 128 register writes fewer per unit and thread (gemm_ab, GPU-eeb37818:
      // 0.4-4.8% off the 128 x 256 tiles at 8192^3 .. 16384 x 8192 x 2048). Block tiles and
      // empty k ranges (split-K) still zero them.
      if (Tl::kBlockScale || w.kb_count == 0) {
#pragma unroll
        for (int i = 0; i < kAcc; ++i) acc[i] = 0.f;
      }
      // e4m3 per-tensor / per-row scales of this thread's rows and columns, loaded now so that
      // the epilogue does not wait for them (1 for 16-bit operands and block scales; loaded in
      // the epilogue, behind its stores, they cost e4m3 8192^3 12-15%). A per-tensor b scale
      // joins a's: one load and 128 fewer products. (RowScale per column, a branch on the kind
      // around each of 64 loads, cost e4m3 8192^3 4% per tensor and 3% per row, 4096^3 per row
      // 4.5%: GEMM v10, benchmarks/README.md.)
      constexpr bool kEpilogueScales = sizeof(T) == 1 && !Tl::kBlockScale;
      const bool b_rows = p.b_scale_kind == Scale::kRow;
      float sa0 = 1.f, sa1 = 1.f;
      float sbv[kEpilogueScales ? kBN / 4 : 1];  // (n8 block j, column 2c + e; b_rows only)
      if constexpr (kEpilogueScales) {
        sa0 = RowScale(p.a_scale, p.a_scale_kind, min(row0, p.m - 1));
        sa1 = RowScale(p.a_scale, p.a_scale_kind, min(row0 + 8, p.m - 1));
        if (b_rows) {
#pragma unroll
          for (int j = 0; j < kBN / 8; ++j) {
            const int col = min(w.tn * kBN + 8 * j + 2 * c, p.n - 2);
            sbv[2 * j] = __ldg(p.b_scale + col);
            sbv[2 * j + 1] = __ldg(p.b_scale + col + 1);
          }
        } else {
          const float sb = RowScale(p.b_scale, p.b_scale_kind, 0);
          sa0 *= sb, sa1 *= sb;
        }
      }

      if constexpr (!Tl::kBlockScale) {
        int prev = -1;
        for (int kb = 0; kb < w.kb_count; ++kb) {
          tma::mbar_wait(full0 + 8 * stage, phase);
          const uint32_t sa = s_base + stage * Tl::kStageBytes + cw * 64 * 128;
          const uint32_t sb = s_base + stage * Tl::kStageBytes + Tl::kABytes;
          take_turn();
          wgmma::fence_operands(acc);
          wgmma::fence();
#pragma unroll
          for (int s = 0; s < kSteps; ++s) {  // 32 bytes of k per step
            wgmma::mma<kBN, T>(acc, wgmma::desc_sw128(sa + 32 * s), wgmma::desc_sw128(sb + 32 * s),
                               (s == 0 && kb == 0) ? 0u : 1u);
          }
          wgmma::commit();
          pass_turn();
          wgmma::wait<1>();  // the previous k block's batch is done: its stage is free
          wgmma::fence_operands(acc);
          if (prev >= 0) release(prev);
          prev = stage;
          if (++stage == kStages) stage = 0, phase ^= 1;
        }
        wgmma::wait<0>();
        wgmma::fence_operands(acc);
        if (prev >= 0) release(prev);
      } else if constexpr (kBN == 128) {
        // one scale block of b per tile; a's scales per row and k block
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
          take_turn();
          wgmma::fence_operands(part);
          wgmma::fence();
#pragma unroll
          for (int s = 0; s < kSteps; ++s) {
            wgmma::mma<kBN, T>(part, wgmma::desc_sw128(sa + 32 * s),
                               wgmma::desc_sw128(sbm + 32 * s), s > 0 ? 1u : 0u);
          }
          wgmma::commit();
          pass_turn();
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
      } else {
        // 128 x 256 tiles (Sm90Block): wave v (0, 1) of a group's k block is its 64 x 128 product
        // with b's scale block v; its half h_v of the accumulators holds the sum divided by the
        // current block's scales (a's per row, b's of the wave), so that a block's product adds
        // to it in the wgmma itself, and a half is rescaled to the next block's scales while the
        // other half's product runs. Per k block: W0 (h0 ready), rescale h1, W1, wait for W0,
        // rescale h0, wait for W1: nothing is in flight at an iteration's top (ptxas cannot follow
        // a product in flight across the loop's back edge and then serialises every wgmma,
        // C7514 / C7517 / C7518). A unit with a scale outside RescalableScale (zero, denormal,
        // inf, NaN, or far off) takes the promotion instead (64-column products added times their
        // scales), decided by one vote of the group before its first block; a promotion with a
        // 64-float product here (128 x 256 tiles: 192 floats live) cost the rescaled loop its
        // gain (H100, .dev probe, 8192^3: 989-992 TFLOP/s with this fallback, 1004-1018 with none,
        // 922-936 with the 64-float one).
        static_assert(kBN == 256 && !Tl::kOrdered, "rescaled block tiles: 128 x 256, no turns");
        const uint32_t oa0 = static_cast<uint32_t>(min(row0, p.m - 1) * p.a_scale_ld);
        const uint32_t oa1 = static_cast<uint32_t>(min(row0 + 8, p.m - 1) * p.a_scale_ld);
        uint32_t ob[2];  // (the last scale block for a wave past n)
#pragma unroll
        for (int v = 0; v < 2; ++v) {
          ob[v] = static_cast<uint32_t>(min(w.tn * 2 + v, (p.n - 1) / 128) * p.b_scale_ld);
        }
        // the unit's vote: each warp reads its own 16 rows' a scales along k (a load: 32
        // consecutive scales of a row, 64 k blocks per round) and the unit's two rows of b
        // scales. (Each thread reading half of one row's scales, 32 rows per load, cost e4m3
        // 8192^3 about 7%: two rounds of 512 scattered sectors per warp at every unit's start,
        // with the tensor cores idle.)
        bool bad = false;
        {
          const int r0 = w.m0 + 64 * cw + 16 * warp;
          for (int jc = 0; jc < w.kb_count; jc += 64) {
            float v[36];
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const int j = jc + 32 * h + lane;
              const bool in = j < w.kb_count;
              const int jj = w.kb_begin + (in ? j : 0);
#pragma unroll
              for (int r = 0; r < 16; ++r) {
                const int row = min(r0 + r, p.m - 1);
                const float* at = p.a_scale + static_cast<uint32_t>(row * p.a_scale_ld);
                v[18 * h + r] = in ? __ldg(at + jj) : 1.f;
              }
              v[18 * h + 16] = in ? __ldg(p.b_scale + ob[0] + jj) : 1.f;
              v[18 * h + 17] = in ? __ldg(p.b_scale + ob[1] + jj) : 1.f;
            }
#pragma unroll
            for (int i = 0; i < 36; ++i) bad |= !detail::RescalableScale(v[i]);
          }
        }
        if (!tma::named_any(detail::kBarVote0 + cw, 128, bad)) {
          float (&h0)[64] = *reinterpret_cast<float (*)[64]>(acc);
          float (&h1)[64] = *reinterpret_cast<float (*)[64]>(acc + 64);
          auto issue = [&](float (&h)[64], uint32_t sa, uint32_t sb) {
            wgmma::fence_operands(h);
            wgmma::fence();
#pragma unroll
            for (int st = 0; st < kSteps; ++st) {
              wgmma::mma<128, T>(h, wgmma::desc_sw128(sa + 32 * st),
                                 wgmma::desc_sw128(sb + 32 * st), 1u);
            }
            wgmma::commit();
          };
          auto rescale = [](float (&h)[64], float r0, float r1) {
#pragma unroll
            for (int j = 0; j < 16; ++j) {
              h[4 * j + 0] *= r0, h[4 * j + 1] *= r0, h[4 * j + 2] *= r1, h[4 * j + 3] *= r1;
            }
          };
          // block kb's scales (x), kb + 1's (y, loaded in the iteration before: loaded in its own
          // iteration, ptxas put the load's latency in front of W1's last wgmma), h0's divisors
          // (d), h1's (e); a ratio of two blocks' scale products as one division. With the vote
          // along k: e4m3 8192^3 7.5% and 4096^3 4% faster than before (benchmarks/README.md).
          float x0 = 1.f, x1 = 1.f, xb0 = 1.f, xb1 = 1.f;
          float y0 = 1.f, y1 = 1.f, yb0 = 1.f, yb1 = 1.f;
          if (w.kb_count > 0) {
            x0 = __ldg(p.a_scale + oa0 + w.kb_begin), x1 = __ldg(p.a_scale + oa1 + w.kb_begin);
            xb0 = __ldg(p.b_scale + ob[0] + w.kb_begin);
            xb1 = __ldg(p.b_scale + ob[1] + w.kb_begin);
            const int k1 = w.kb_begin + min(1, w.kb_count - 1);
            y0 = __ldg(p.a_scale + oa0 + k1), y1 = __ldg(p.a_scale + oa1 + k1);
            yb0 = __ldg(p.b_scale + ob[0] + k1), yb1 = __ldg(p.b_scale + ob[1] + k1);
          }
          // (the products stay within 2^-44 .. 2^44: RescalableScale)
          auto ratio = [](float num_a, float num_b, float den_a, float den_b) {
            return __fdividef(num_a * num_b, den_a * den_b);
          };
          float d0 = x0, d1 = x1, db0 = xb0, e0 = x0, e1 = x1, db1 = xb1;
          for (int kb = 0; kb < w.kb_count; ++kb) {
            const int kz = w.kb_begin + min(kb + 2, w.kb_count - 1);  // (past the last: it)
            const float z0 = __ldg(p.a_scale + oa0 + kz), z1 = __ldg(p.a_scale + oa1 + kz);
            const float zb0 = __ldg(p.b_scale + ob[0] + kz), zb1 = __ldg(p.b_scale + ob[1] + kz);
            const uint32_t sa = s_base + stage * Tl::kStageBytes + cw * 64 * 128;
            const uint32_t sbm = s_base + stage * Tl::kStageBytes + Tl::kABytes;
            tma::mbar_wait(full0 + 8 * stage, phase);
            wgmma::wait<0>();  // (nothing is in flight: tells ptxas that h1 is settled)
            wgmma::fence_operands(acc);
            issue(h0, sa, sbm);
            rescale(h1, ratio(e0, db1, x0, xb1), ratio(e1, db1, x1, xb1));
            e0 = x0, e1 = x1, db1 = xb1;
            issue(h1, sa, sbm + 128 * 128);
            wgmma::wait<1>();  // W0 done
            wgmma::fence_operands(h0);
            rescale(h0, ratio(d0, db0, y0, yb0), ratio(d1, db0, y1, yb0));
            d0 = y0, d1 = y1, db0 = yb0;
            wgmma::wait<0>();  // W1 done
            wgmma::fence_operands(h1);
            release(stage);
            if (++stage == kStages) stage = 0, phase ^= 1;
            x0 = y0, x1 = y1, xb0 = yb0, xb1 = yb1;
            y0 = z0, y1 = z1, yb0 = zb0, yb1 = zb1;
          }
          wgmma::wait<0>();
          wgmma::fence_operands(acc);
          rescale(h0, d0 * db0, d1 * db0);  // the sums themselves
          rescale(h1, e0 * db1, e1 * db1);
        } else {
          float part[32];
          for (int kb = 0; kb < w.kb_count; ++kb) {
            const int kk = w.kb_begin + kb;
            const float c0 = __ldg(p.a_scale + oa0 + kk), c1 = __ldg(p.a_scale + oa1 + kk);
            tma::mbar_wait(full0 + 8 * stage, phase);
            const uint32_t sa = s_base + stage * Tl::kStageBytes + cw * 64 * 128;
            const uint32_t sbm = s_base + stage * Tl::kStageBytes + Tl::kABytes;
#pragma unroll
            for (int v = 0; v < kBN / 64; ++v) {
              wgmma::fence_operands(part);
              wgmma::fence();
#pragma unroll
              for (int st = 0; st < kSteps; ++st) {
                wgmma::mma<64, T>(part, wgmma::desc_sw128(sa + 32 * st),
                                  wgmma::desc_sw128(sbm + v * 64 * 128 + 32 * st),
                                  st > 0 ? 1u : 0u);
              }
              wgmma::commit();
              wgmma::wait<0>();
              wgmma::fence_operands(part);
              const float cb = __ldg(p.b_scale + ob[v / 2] + kk);
              const float f0 = c0 * cb, f1 = c1 * cb;
#pragma unroll
              for (int j = 0; j < 8; ++j) {
                float* a4 = acc + 32 * v + 4 * j;
                a4[0] = fmaf(part[4 * j + 0], f0, a4[0]);
                a4[1] = fmaf(part[4 * j + 1], f0, a4[1]);
                a4[2] = fmaf(part[4 * j + 2], f1, a4[2]);
                a4[3] = fmaf(part[4 * j + 3], f1, a4[3]);
              }
            }
            release(stage);
            if (++stage == kStages) stage = 0, phase ^= 1;
          }
        }
      }

      // e4m3 per-tensor / per-row scales applied now (linear in the product: stream-K's pieces
      // are summed scaled), so that b's 64 are not held through the epilogue
      if constexpr (kEpilogueScales) {
        if (b_rows) {
#pragma unroll
          for (int j = 0; j < kAcc / 4; ++j) {
            acc[4 * j + 0] *= sa0 * sbv[2 * j];
            acc[4 * j + 1] *= sa0 * sbv[2 * j + 1];
            acc[4 * j + 2] *= sa1 * sbv[2 * j];
            acc[4 * j + 3] *= sa1 * sbv[2 * j + 1];
          }
        } else {
#pragma unroll
          for (int j = 0; j < kAcc / 4; ++j) {
            acc[4 * j + 0] *= sa0, acc[4 * j + 1] *= sa0;
            acc[4 * j + 2] *= sa1, acc[4 * j + 3] *= sa1;
          }
        }
      }

      // ---- stream-K: a partial tile into this block's slot, its flag raised once every consumer
      // thread's stores are done; or the lower slots' partial tiles added once theirs are
      const int ct = static_cast<int>(threadIdx.x) - 128;  // 0 .. 128 kConsumers - 1
      const int mode = detail::Work<Tl>::Mode(p, w);
      if (mode == detail::kPartial) {
        const int slot = detail::Work<Tl>::Slot();
        float* dst = slot_of(slot);
#pragma unroll
        for (int q = 0; q < kAcc / 4; ++q) {
          __stcg(reinterpret_cast<float4*>(dst) + q * 128 * Tl::kConsumers + ct,
                 make_float4(acc[4 * q], acc[4 * q + 1], acc[4 * q + 2], acc[4 * q + 3]));
        }
        tma::named_sync(detail::kBarConsumers, 128 * Tl::kConsumers);
        if (ct == 0) {
          __threadfence();
          detail::StoreRelease(flag_of(slot), p.sk_nonce);
        }
        continue;
      }
      if (mode == detail::kFixup) {
        const int slot = detail::Work<Tl>::Slot(), from = work.FixupFrom(p, w);
        if (ct == 0) {
          for (int s = from; s < slot; ++s) {
            uint64_t* f = flag_of(s);
            while (detail::LoadAcquire(f) != p.sk_nonce) __nanosleep(64);
            *f = 0;  // read once, by this block: ready for the next call
          }
        }
        tma::named_sync(detail::kBarConsumers, 128 * Tl::kConsumers);
        for (int s = from; s < slot; ++s) {
          const float* src = slot_of(s);
#pragma unroll
          for (int q = 0; q < kAcc / 4; ++q) {
            const float4 v =
                __ldcg(reinterpret_cast<const float4*>(src) + q * 128 * Tl::kConsumers + ct);
            acc[4 * q] += v.x, acc[4 * q + 1] += v.y, acc[4 * q + 2] += v.z, acc[4 * q + 3] += v.w;
          }
        }
      }

      // ---- epilogue: bias, rounding; or the fp32 partial tile
      const bool partial = p.splits > 1 || p.partials_only;
      // kSwap: the bias of the output's columns row0, row0 + 8 (this thread's accumulator rows)
      float brow[2] = {0.f, 0.f};
      if constexpr (kSwap) {
        if (!partial && p.bias != nullptr) {
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            if (row0 + 8 * h < p.m) brow[h] = LoadBias(p.bias, p.bias_type, row0 + 8 * h);
          }
        }
      }
      // the value of accumulator pair (j, h) with scales and bias
      auto value = [&](int j, int h, float2 bias) {
        if constexpr (kSwap) bias = make_float2(brow[h], brow[h]);
        return make_float2(acc[4 * j + 2 * h] + bias.x, acc[4 * j + 2 * h + 1] + bias.y);
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
        if (kSwap || !load || p.bias == nullptr) return;  // (kSwap: brow)
        *bg = LoadBiasPair(p.bias, p.bias_type, col);
        if constexpr (kGated) *bu = LoadBiasPair(p.bias, p.bias_type, p.n + col);
      };
      // this group's 64 rows: none to write (all the tile above's, or past m), or the first of
      // them the tile above's (the last row of tiles; element stores from m_lo on)
      const int g_first = w.m0 + 64 * cw;
      if (g_first + 64 <= w.m_lo || g_first >= p.m) continue;
      const bool straddles = g_first < w.m_lo;
      if constexpr (sizeof(Out) == 2) {
        if (tma_store && !partial && !straddles) {
          // Box q of the group's 64 x kCols goes through slot q % kCSlots of its own: the leader
          // waits until the store that last read the slot (kCSlots boxes before, or a previous
          // unit's) has read it, then the group writes the box, and the leader stores it. The
          // last stores stay in flight into the next unit. (One C buffer handed from group to
          // group, each store read out before the hand-over, kept the tensor cores idle through
          // both groups' stores: H100, fp16 4096^3 214 -> 203 us, 16384 x 8192 x 2048 976 -> 895.)
          const uint32_t bar_group = detail::kBarGroup0 + cw;
          const bool leader = threadIdx.x % 128 == 0;
#pragma unroll
          for (int q = 0; q < kCols / 64; ++q) {
            const uint32_t slot = s_c + (cw * Tl::kCSlots + q % Tl::kCSlots) * 8192;
            if (leader) tma::bulk_wait_read<Tl::kCSlots - 1>();
            tma::named_sync(bar_group, 128);
#pragma unroll
            for (int jj = 0; jj < 8; ++jj) {
              const int j = 8 * q + jj;
              const int col = w.tn * kCols + 8 * j + 2 * c;
              float2 bg, bu;
              bias_at(col < p.n, col, &bg, &bu);
#pragma unroll
              for (int h = 0; h < 2; ++h) {
                const int r = 16 * warp + g + 8 * h;
                const float2 v = result(j, h, bg, bu);
                if constexpr (kSwap) {
                  // the box transposed: its row 8 jj + 2c + e (an output row) holds this thread's
                  // accumulator rows as columns, 16-byte chunk r / 8 swizzled with the box row
                  const uint32_t packed = mma::pack2<Out>(v.x, v.y);
#pragma unroll
                  for (int e = 0; e < 2; ++e) {
                    const int br = 8 * jj + 2 * c + e;
                    const uint32_t dst =
                        slot + br * 128 + (((r / 8) ^ (br % 8)) << 4) + 2 * (r % 8);
                    asm volatile("st.shared.b16 [%0], %1;" ::"r"(dst),
                                 "h"(static_cast<uint16_t>(packed >> (16 * e))));
                  }
                } else {
                  // row r of the box, its 16-byte chunk jj swizzled with the row
                  const uint32_t dst = slot + r * 128 + ((jj ^ (r % 8)) << 4) + 4 * c;
                  asm volatile("st.shared.b32 [%0], %1;" ::"r"(dst),
                               "r"(mma::pack2<Out>(v.x, v.y)));
                }
              }
            }
            tma::fence_async_shared();
            tma::named_sync(bar_group, 128);
            if (leader) {
              const int x = w.tn * kCols + 64 * q, y = g_first;
              tma::store_2d(&map_c, slot, kSwap ? y : x, kSwap ? x : y);
              tma::bulk_commit();
            }
          }
          ++done;
          continue;
        }
      }
      if constexpr (kSwap) {
        // the transpose: accumulator (row, col) is the output's (col, row), element by element
        // (the output's rows, p.n here, need not come in pairs)
#pragma unroll
        for (int j = 0; j < kJ; ++j) {
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int row = row0 + 8 * h;  // the output's column
            if (row >= p.m || row < w.m_lo) continue;
            const float2 v = value(j, h, make_float2(0.f, 0.f));
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int col = w.tn * kCols + 8 * j + 2 * c + e;  // the output's row
              if (col >= p.n) continue;
              const float x = e ? v.y : v.x;
              if (partial) {
                p.workspace[(static_cast<int64_t>(w.split) * p.n + col) * p.m + row] = x;
              } else {
                static_cast<Out*>(p.out)[static_cast<int64_t>(col) * p.ldc + row] =
                    from_float<Out>(x);
              }
            }
          }
        }
        continue;
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
          if (row >= p.m || row < w.m_lo) continue;
          if (partial) {
            float* dst =
                p.workspace + (static_cast<int64_t>(w.split) * p.m + row) * kWidth * p.n + col;
            *reinterpret_cast<float2*>(dst) = value(j, h, bg);
            if constexpr (kGated) *reinterpret_cast<float2*>(dst + p.n) = value(j + kUp, h, bu);
          } else {
            const float2 v = result(j, h, bg, bu);
            StorePair(static_cast<Out*>(p.out) + row * p.ldc + col, v.x, v.y);
          }
        }
      }
    }
    if constexpr (Tl::kOrdered) {
      if (cw == 0 && issued) tma::named_sync(detail::kBarTurn0, 256);  // group 1's last hand-over
    }
    // the last stores out of the C buffer
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

// Stream-K's units for `units` work units of kb_tile k blocks on `slots` clusters, with partial
// tiles of tile_floats: 0 (whole tiles only), or the last full round and the rest (all units
// when under one round), whose k blocks the slots then share evenly. Whole tiles leave the last
// round's idle slots idle, (1 - rest / slots) x kb_tile k blocks of time; stream-K costs every slot
// a partial tile written and read back (128 KB for 128 x 256 tiles, all slots at once, with the
// pieces' loads spread over more of k than the L2 holds for whole tiles). Measured on the H100
// (.dev A/B, bf16 and e4m3): the idle time has to pass about 34 k blocks for 128 x 256 tiles
// (~30 us) before stream-K wins (bf16 8192^3 -2%, 62 k blocks idle; 4096^3 +5%, 8; 8192 x 4096 x
// 4096 +0.3%, 16; 16384 x 8192 x 2048 0%, 31; e4m3 per row 8192^3 0%, 31), and about half as many
// for the block-scaled 128 x 128 tiles (8192^3 -3%, 62; 4096^3 +1%, 8). Long k loses anyway
// (bf16 8192 x 4096 x 14336 +1.6% with 54 k blocks idle: the slots' pieces start at scattered
// k, so the tiles running at once no longer share their k-slices in the L2), so tiles of more
// than 128 k blocks keep whole units.
inline int32_t StreamKUnits(int64_t units, int slots, int64_t kb_tile, int64_t tile_floats) {
  if (slots < 2 || units < 2 || kb_tile > 128) return 0;
  const int64_t rounds = units / slots, rest = units % slots;
  if (rest == 0) return 0;
  const double idle_kb = (1.0 - static_cast<double>(rest) / slots) * static_cast<double>(kb_tile);
  if (idle_kb < 34.0 * static_cast<double>(tile_floats) / (128 * 256)) return 0;
  const int64_t sk = rounds >= 1 ? slots + rest : units;
  if (sk * kb_tile < 2 * static_cast<int64_t>(slots)) return 0;  // at least 2 k blocks a slot
  if (sk * kb_tile >= (int64_t{1} << 31)) return 0;              // int k-block indices
  return static_cast<int32_t>(sk);
}

// A fresh non-zero mark for a call's stream-K flags (a call's fixups reset every flag it raised,
// so a flag holding another value, or stale memory, never reads as ready).
inline uint64_t NextStreamKNonce() {
  static std::atomic<uint64_t> counter{
      static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count())};
  uint64_t z = counter.fetch_add(0x9E3779B97F4A7C15ull) + 0x9E3779B97F4A7C15ull;  // splitmix64
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return z != 0 ? z : 1;
}

namespace detail {

template <class Tl, typename Out, int kAct>
cudaError_t LaunchSm90(const Params& p_in, cudaStream_t stream, const DeviceProps& props) {
  constexpr bool kGated = kAct >= 0;
  using T = typename Tl::T;
  if (Tl::kSmemBytes > props.smem_optin) return cudaErrorInvalidConfiguration;
  Params p = p_in;
  p.sk_units = 0, p.sk_nonce = 0;
  if constexpr (Tl::kSwap) {  // the kernel computes out^T = b a^T (its epilogue transposes)
    std::swap(p.a, p.b), std::swap(p.lda, p.ldb), std::swap(p.m, p.n);
    // (e4m3 per-tensor and per-row scales follow their operands)
    std::swap(p.a_scale, p.b_scale), std::swap(p.a_scale_kind, p.b_scale_kind);
  }
  const int64_t units = Sm90Units<Tl>(p);
  if (units > 0x7fffffff || p.splits < 1 || p.splits > 65535) {
    return cudaErrorInvalidConfiguration;
  }
  if constexpr (Tl::kBlockScale) {  // the kernel's 32-bit scale offsets
    const int64_t kb = (p.k + 127) / 128, last_a = (p.m - 1) * p.a_scale_ld + kb;
    if (last_a >= (int64_t{1} << 32) ||
        ((p.n - 1) / 128) * p.b_scale_ld + kb >= (int64_t{1} << 32)) {
      return cudaErrorInvalidValue;
    }
  }
  const CUtensorMapDataType type = sizeof(T) == 1              ? CU_TENSOR_MAP_DATA_TYPE_UINT8
                                   : std::is_same_v<T, __half> ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                                               : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  constexpr int kElem = static_cast<int>(sizeof(T));
  CUtensorMap map_a, map_b, map_c;
  // The boxes: the rows one load brings (a multicast share, a gated tile's half of b), and where
  // a tensor has fewer rows than the tile and its box is not shared, only those rows (rounded up
  // to the swizzle's 8): a box reaching past the tensor's end ran slower than a whole one (H200,
  // gemm_ab AB_SET=gap16: m 100 on 128 x 64 tiles, 100 x 8192 x 8192, 56.5 us against 44.7 at m
  // 128). The rows past the box keep a previous stage's values: they only feed accumulator rows
  // (a) or columns (b) past the tensor, which no store writes.
  int a_box = Tl::kShareA ? Tl::kBM / Tl::kCluster : Tl::kBM;
  int b_box = kGated ? Tl::kBN / 2 : Tl::kShareA ? Tl::kBN : Tl::kBN / Tl::kCluster;
  int a_rows = Tl::kBM, b_rows = Tl::kBN;  // rows a stage receives
  if (p.short_boxes && !Tl::kShareA && p.m < Tl::kBM) a_box = a_rows = (p.m + 7) / 8 * 8;
  if (p.short_boxes && !kGated && (Tl::kShareA || Tl::kCluster == 1) && p.n < Tl::kBN) {
    b_box = b_rows = (p.n + 7) / 8 * 8;
  }
  p.stage_tx = (a_rows + b_rows) * 128;
  XK_CUDA_TRY(tma::EncodeTensorMap2d(&map_a, p.a, type, kElem, p.m, p.k, p.lda, a_box, Tl::kBK));
  XK_CUDA_TRY(tma::EncodeTensorMap2d(&map_b, p.b, type, kElem, kGated ? 2 * p.n : p.n, p.k, p.ldb,
                                     b_box, Tl::kBK));
  // 16-bit outputs leave by TMA where out's base and pitch allow it (16-byte aligned)
  bool tma_store = false;
  if constexpr (sizeof(Out) == 2) {
    tma_store = Tl::kCBytes > 0 && p.splits == 1 && !p.partials_only && is_aligned(p.out, 16) &&
                p.ldc % 8 == 0;
    if (tma_store) {
      XK_CUDA_TRY(tma::EncodeTensorMap2d(&map_c, p.out,
                                         std::is_same_v<Out, __half>
                                             ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                             : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
                                         2, p_in.m, p_in.n, p.ldc, 64, 64));
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
  // stream-K where the workspace allows it (16-byte aligned: float4 slots) and it pays
  if (p.stream_k && p.splits == 1 && !p.partials_only && is_aligned(p.workspace, 16)) {
    p.sk_units = StreamKUnits(units, slots, (p.k + Tl::kBK - 1) / Tl::kBK, Tl::kBM * Tl::kBN);
    if (p.sk_units > 0) p.sk_nonce = NextStreamKNonce();
  }
  const int64_t blocks = p.sk_units > 0 ? slots : (units < slots ? units : slots);
  const dim3 grid(static_cast<unsigned>(blocks * Tl::kCluster));
  {
    const LaunchConfig lc(grid, dim3(Tl::kThreads), stream, Tl::kCluster, UsePDL(props),
                          Tl::kSmemBytes);
    XK_CUDA_TRY(cudaLaunchKernelEx(&lc.cfg, kernel, map_a, map_b, map_c, p, tma_store));
  }
  if (p.splits == 1 || p.partials_only) return cudaSuccess;
  return LaunchSplitKReduce<Out>(p_in, stream, props);  // (the workspace holds [splits, m, n])
}

}  // namespace detail

// Runs p with tile Tl. A gated p: 16-bit operands and outputs (gemm.h's Gemm takes the others
// through the workspace).
template <class Tl, typename Out>
cudaError_t LaunchSm90(const Params& p, cudaStream_t stream, const DeviceProps& props) {
  // gated tiles: 16-bit, each half of b's tile whole 64-column output boxes
  if constexpr (std::is_same_v<typename Tl::T, Out> && Tl::kBN % 128 == 0 && !Tl::kSwap) {
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
