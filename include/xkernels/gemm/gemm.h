// GEMM launchers over raw pointers (params.h says what they compute): the kernel version the
// device and shapes call for (sm80.h: cp.async + mma.sync; sm90.h: TMA + wgmma), then, when k was
// split, the sum of the partial tiles.
//
//   gemm::Params p;  ...pointers, pitches, sizes, types...
//   if (const char* why = gemm::Unsupported(p, cc)) ...refuse, naming why...
//   gemm::PlanSplits(p, &p.splits);          // from shapes and the device only (graph-safe)
//   gemm::Gemm(p, stream);                   // p.splits > 1 needs p.workspace (WorkspaceElems)
#ifndef XKERNELS_GEMM_GEMM_H_
#define XKERNELS_GEMM_GEMM_H_

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "xkernels/common.h"
#include "xkernels/gemm/epilogue.h"
#include "xkernels/gemm/gemv.h"
#include "xkernels/gemm/params.h"
#include "xkernels/gemm/sm80.h"
#include "xkernels/gemm/sm90.h"

namespace xkernels::gemm {

// Why p cannot run on a device of compute capability cc (e.g. 90), or nullptr when it can. Shapes
// and alignment are the caller's to check (bindings/gemm.cu); this covers types, layouts and
// paths.
inline const char* Unsupported(const Params& p, int cc) {
  const bool fp8 = p.in_type == Elem::kE4M3;
  if (fp8 && p.b_layout != BLayout::kNK) return "e4m3 GEMM needs b as [n, k]";
  if (fp8 && cc != 90) return "e4m3 GEMM needs an sm_90 GPU (H100, H200)";
  if (p.path == Path::kSm90 && cc != 90) return "the sm90 kernel needs an sm_90 GPU (H100, H200)";
  if (p.path == Path::kSm90 && p.b_layout != BLayout::kNK) {
    return "the sm90 kernel takes b as [n, k] only";
  }
  if (p.path == Path::kSm80 && fp8) return "the sm80 kernel takes 16-bit inputs only";
  if (p.act >= 0 && (fp8 || p.b_layout != BLayout::kNK)) {
    return "a gated GEMM takes 16-bit a and b, b as [2n, k]";
  }
  if (cc < 80) return "GEMM needs an sm_80 or newer GPU";
  return nullptr;
}

// ---- the tiles

//                       block m, n, warps m x n, stages
using Sm80Large = Sm80Tile<128, 256, 2, 4, 4>;  // 8 warps of 64 x 64
using Sm80Mid = Sm80Tile<64, 128, 2, 2, 4>;     // m <= 64
using Sm80Small = Sm80Tile<16, 128, 1, 4, 4>;   // m <= 16: decode

//                                 consumers (64 rows each), n, stages, block scales
// 16-bit inputs take them in clusters of 2 (b multicast: each block loads half of the b tile the
// two share). Measured on the H100, gemm_probe, 100 calls back to back (the card at its power
// limit), TFLOP/s, 1 -> clusters of 2: bf16 8192^3 645-665 -> 687-691, 4096^3 591-642 -> 639-676,
// 16384x8192x2048 613-621 -> 617-650; e4m3 (per tensor 1393-1402 -> 1264-1338, per row
// 1216-1293 -> 1251-1293, block 887-902 -> 871-876) keeps single blocks.
template <typename T>
using Sm90Large = Sm90Tile<T, 2, 256, 4, false, sizeof(T) == 2 ? 2 : 1>;
// 64 < m <= 128 where no decode rule below takes it (SwapOne, NarrowN, PairSplits, SwapHalfPlan),
// and m of 129-256 at long k where MidPair takes it (split in two), or where TileGrid does: 128 x
// 128 tiles, twice Sm90Large's count, so that a batch of decode tokens
// spreads the weight reads over more SMs with fewer k splits (H100, m 128, Llama 3 8B's layer:
// 128 x 256 tiles took 213 us over its four GEMMs, cuBLAS 177)
template <typename T>
using Sm90Mid = Sm90Tile<T, 2, 128, 6, false>;
// 16-bit m > 128 where a grid of 128 x 192 tiles fits the SMs better than either (TileGrid):
// 5 stages of 40 KB and a 24 KB C buffer, in clusters of 2 as Sm90Large
template <typename T>
using Sm90Wide192 = Sm90Tile<T, 2, 192, 5, false, 2>;
// 16-bit m > 128 whose grid of 128 x 144 tiles is one round of 96-100% of the SMs (TileGrid):
// unclustered, 6 stages of 34 KB, element stores (144 columns are no whole number of 64-column
// boxes). cuBLAS runs 128 x 144 tiles at 384 x 6144 x 4096 (43 x 3 of them).
template <typename T>
using Sm90Wide144 = Sm90Tile<T, 2, 144, 6, false>;
// m <= 64 (decode), and 16-bit m of 65-128 where PairSplits takes two rows of them: one consumer
// group, many k blocks in flight; e4m3 rows are half as long, so its tiles are half as wide to
// give as many blocks
template <typename T>
using Sm90Small = std::conditional_t<sizeof(T) == 1, Sm90Tile<T, 1, 64, 12, false>,
                                     Sm90Tile<T, 1, 128, 8, false>>;
// 16-bit m > 128 whose last row of 128-row tiles would be at most half used (m % 128 in 1..64):
// tiles of 64 rows (one consumer group), 64 x 256 in 4 stages, where their one round is shorter
// than the others' (TileGrid; H100, bf16, .dev probe, us: m 320 x 6144 x 4096 33.4, 128 x 128
// tiles 47.9, cuBLAS 37.8).
template <typename T>
using Sm90Slim = Sm90Tile<T, 1, 256, 4, false>;
// 16-bit m > 128, not gated: operands swapped (sm90.h, kSwap), the output's columns on the wgmma's
// m side (128 a tile: two consumer groups) and its rows on the n side (192 a tile), for m just
// under a multiple of 192, where 128-row tiles would pad a row of tiles or need more rounds. H100,
// bf16, .dev probe (7 x 12 calls over 3 rotating weights, us, the dispatch before -> swapped):
// m 176, n x k 28672 x 4096 123.8 -> 93.8 (cuBLAS 93.5); m 384, 8192 x 8192 99.4 -> 76.2 (76.4),
// 4096 x 14336 86.3 -> 76.5 (83.5); m 576, 28672 x 4096 246.5 -> 212.6 (235.7).
template <typename T>
using Sm90Swap192 = Sm90Tile<T, 2, 192, 5, false, 1, false, true>;
// m of 129-576 whose weights span few 128-row tiles (n 4096: 32; 16-bit, or e4m3 with per-tensor
// or per-row scales, which swap with their operands): operands swapped as Sm90Swap192, a's rows
// cut into an even count of tiles of kN (the wgmma's n, 48-160) so that the grid fills the SMs in
// one round, in clusters of 2 on the same weight rows, each block loading half of that 128-row
// weight tile for both (the weights' L2 reads halved; SwapSizedN below says where, with what it
// measured). Without the clusters the same tiles were L2-bound (H100, ncu: 320 x 4096 x 14336 read
// 830 MB of L2 at 86% of its peak in 85 us, cuBLAS's 128 x 80 tiles in clusters of 2 517 MB in 62
// us; in clusters ours ran 78 us), and keeping a second k block of wgmmas in flight ran 10-25%
// slower in clusters (gemm_ab AB_SET=mid, GPU-43053a31).
constexpr int SwapSizedStages(int n) { return n <= 48 ? 9 : n <= 80 ? 8 : n <= 112 ? 7 : 6; }
// The a-tile rows Sm90SwapSized is built for, smallest first (SwapSizedN takes the first that
// covers m; LaunchSwapSizedN instantiates each).
using SwapSizes = std::integer_sequence<int, 48, 64, 80, 96, 112, 128, 144, 160>;
template <int... kN>
constexpr std::array<int, sizeof...(kN)> SizeList(std::integer_sequence<int, kN...>) {
  return {kN...};
}
template <typename T, int kN>
using Sm90SwapSized = Sm90Tile<T, 2, kN, SwapSizedStages(kN), false, 2, false, true, true>;
// 16-bit or e4m3 (per-tensor or per-row scales, 16-bit out) m > 64 whose weights span at most
// sms / 2 tiles of 64 rows (n up to 4224 on the H100):
// Sm90SwapSized with one consumer group, a tile of 64 weight rows by kN (48-192) rows of a in
// clusters of 2 on the same weight rows, so that a grid of twice as many blocks fills the SMs
// in one round where 128-row weight tiles filled half of them or needed 4 thin a-tiles (cuBLAS
// runs 64 x 80 .. 64 x 104 tiles at m 160-200, n 4096). As many stages as fit, at most 12.
// SwapHalfPlan says where, with what it measured.
constexpr int SwapHalfStages(int n) {
  const int c = n % 64 != 0 ? 0 : (n * 128 > 8192 ? n * 128 : 8192);  // (Sm90Tile's kCBytes)
  const int s = (232448 - 1024 - c - 256) / (8192 + n * 128);
  return s < 12 ? s : 12;
}
using SwapHalfSizes = std::integer_sequence<int, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192>;
// (e4m3 has no wgmma of n 176)
using SwapHalfSizes8 = std::integer_sequence<int, 48, 64, 80, 96, 112, 128, 144, 160, 192>;
template <typename T, int kN>
using Sm90SwapHalf = Sm90Tile<T, 1, kN, SwapHalfStages(kN), false, 2, false, true, true>;
// 16-bit m of 65-128 (outputs of the inputs' type, not gated, k under 192 blocks) where 128 x 128
// tiles fill few SMs in one round: plain 128 x kN tiles (two consumer groups, unclustered, 8
// stages), kN the widest of 96, 64 and 48 whose grid is one round of at least 80% of the SMs (90%
// for 48). NarrowN says where, with what it measured.
using NarrowSizes = std::integer_sequence<int, 96, 64, 48>;
template <typename T, int kN>
using Sm90Narrow = Sm90Tile<T, 2, kN, 8, false, 1>;
// 16-bit m of 65-128 (outputs of the inputs' type, not gated) whose weights span about one round
// of 64-row tiles: operands swapped, one consumer group, 64 weight rows by 128 rows of a,
// unclustered (Sm90SwapHalf's 128-row tile without the cluster), stream-K over a grid a little
// past the SMs. SwapOne says where, with what it measured.
template <typename T>
using Sm90SwapOne = Sm90Tile<T, 1, 128, SwapHalfStages(128), false, 1, false, true>;
// block scales, m > 128: 128 x 256 tiles whose accumulators stay divided by the current k
// block's scales, the wgmmas adding each block's product to them directly and one 128-column half
// rescaled while the other half's product runs (sm90.h; H100, same-process A/B: 8192^3 898 ->
// 989-1018 TFLOP/s against the 128 x 128 tiles, 4096^3 -> 946-966, 4096 x 7168 x 7168 -> 1014-
// 1040; v6, promoting two 64 x 128 products per k block, ran 931-960). Where the 128 x 256 grid's
// last round would leave many SMs idle and stream-K does not take it, and for 64 < m <= 128,
// 128 x 128 tiles whose groups issue their k blocks in turn, so that one group's promotion runs
// under the other's products (.dev A/B, with stream-K: 8192^3 1359 -> 1283 us, 4096^3 179 -> 171;
// 16-bit and per-tensor / per-row e4m3 tiles gained nothing from turns).
using Sm90Block = Sm90Tile<__nv_fp8_e4m3, 2, 256, 4, true>;
using Sm90BlockMid = Sm90Tile<__nv_fp8_e4m3, 2, 128, 6, true, 1, true>;
using Sm90BlockSmall = Sm90Tile<__nv_fp8_e4m3, 1, 128, 8, true>;

enum class Kernel {
  kSm80Large,
  kSm80Mid,
  kSm80Small,
  kSm90Large,
  kSm90Mid,
  kSm90Small,
  kSm90Wide192,
  kSm90Slim,
  kSm90Swap192,
  kSm90SwapSized,
  kSm90SwapHalf,
  kSm90Wide144,
  kSm90Narrow,
  kSm90SwapOne
};

// The rows of a per tile of Sm90SwapSized for p on `sms` SMs, or 0 where those tiles are not
// taken: 16-bit outputs (of the inputs' type, or of e4m3 without block scales), not gated, m
// 129-576 (m <= 256 only with k <= 8192), and an even count t <= 4 of a-tiles per 128 weight rows
// whose grid keeps at least 90% of the SMs busy in one round of clusters (the smallest n of 48,
// 64, ..., 160 with t n >= m; at most sms / 2 - 2 clusters, which the H100's GPCs hold at once),
// padding m by at most an eighth. Fitted on the H100 (gemm_ab AB_SET=mid, same process, us, the
// dispatch before -> these tiles; GPU-546af405 and GPU-45ce7111): t = 4 (n 4096) wins for m 192
// and 256-576 (576 x 4096 x 4096 42.1 -> 35.0, 576 x 4096 x 14336 133.8 -> 101.5), t = 2 (n 8192)
// for m 192-320 (320 x 8192 x 8192 94.7 -> 73.9); they lose where the last tile is a fifth or more
// empty (160 x 4096 x 4096 20.7 -> 23.2, 200 x 4096 x 14336 55.0 -> 76.8), at m <= 256 with k past
// 8192, where the split 128 x 192 tiles are better (192 x 4096 x 14336 54.1-57.1 -> 62.9-68.8), at
// t = 8 (n 2048: 384 / 512 x 2048 x 4096 22.2 / 19.4 -> 22.8 / 20.1), and at t = 2 with 96 tiles
// (n 6144, 73% of the SMs). e4m3 row-wise (AB_SET=mid8, GPU-a51b8d36; 128 x 256 tiles before):
// 320 x 4096 x 4096 23.9 -> 14.2, 576 x 4096 x 14336 79.0 -> 59.0, 256 x 8192 x 8192 49.6 -> 34.1.
inline int SwapSizedN(const Params& p, int sms) {
  const bool e4m3 = p.in_type == Elem::kE4M3;
  if (p.act >= 0 || p.m <= 128 || p.m > 576 || (p.m <= 256 && p.k > 8192) ||
      (e4m3 ? p.a_scale_kind == Scale::kBlock || p.out_type == Elem::kF32
            : p.out_type != p.in_type)) {
    return 0;
  }
  const int64_t w = ceil_div<int64_t>(p.n, 128);  // weight tiles
  int64_t t = std::min<int64_t>(4, sms / w);
  t -= t % 2;
  if (t < 2) return 0;
  for (const int n : SizeList(SwapSizes{})) {
    if (n * t < p.m) continue;
    const int64_t tiles = ceil_div<int64_t>(p.m, n);  // a-tiles holding rows
    const bool busy = w * tiles * 10 >= int64_t{sms} * 9, full = int64_t{p.m} * 9 >= tiles * n * 8;
    return busy && full && w * ceil_div<int64_t>(tiles, 2) <= sms / 2 - 2 ? n : 0;
  }
  return 0;
}

// Sm90SwapHalf's plan for p on `sms` SMs: rows of a per tile (0 where those tiles are not taken)
// and k splits. Taken for 16-bit inputs and outputs of their type, or e4m3 with per-tensor or
// per-row scales and 16-bit outputs (as the sized tiles), not gated, m > 64: t a-tiles per 64
// weight rows, t the smallest even count of at most 96 rows each (fewer, thicker tiles ran faster
// than 48-row ones, but 128-row ones lost to twice as many), or more of at least 64 rows where that
// grid leaves SMs idle, at most the largest even count the SMs hold in one round and at most 8;
// each tile the smallest of 48, 64, ..., 192 rows with t of them covering m; split in two where the
// grid fills at most half the SMs; taken where the grid then keeps at least 90% of them busy.
// Fitted on the H100 (gemm_ab AB_SET=gap, gap2 and gap3, weights rotating, two runs each; us, the
// dispatch before -> these tiles, cuBLAS; GPU-093a0e85, GPU-1d6cc733, GPU-097de660): n 4096 (t = 2)
// at m 96 / 128 / 160 / 224 / 288 / 384 19.7 / 20.2 / 21.1 / 22.7 / 25.5 / 27.8 -> 16.7 / 16.5 /
// 17.7 / 19.0 / 22.5 / 25.0 (cuBLAS 15.9 / 16.2 / 16.3 / 18.6 / 21.5 / 23.1), k 14336 at m 128 /
// 160 / 256 / 384 51.8 / 54.0 / 57.3 / 77.1 -> 46.7 / 49.0 / 57.9 / 73.0 (52.8 / 53.8 / 60.0 /
// 75.4); n 2048 at m 128 (t = 2, split) 14.1 -> 12.9 and 256 / 384 / 512 / 640 (t = 4) 21.1 /
// 20.0 / 19.4 / 24.2 -> 13.7 / 16.6 / 17.1 / 20.6 (cuBLAS 11.8, 14.3 / 14.8 / 18.8 / 19.9); n 1024
// at m 256 (t = 4, split) 16.3 -> 12.4, 512 / 1024 (t = 8) 17.3 / 19.5 -> 13.7 / 17.6 (13.3 /
// 17.1). Not taken: n 1024 at m <= 128 (32 tiles, 64 blocks split: 10.9 against the 128 x 128
// tiles' 10.2), n 6144 and more (96 or more weight tiles: 128-row weight tiles). e4m3 row-wise
// (gemm_ab AB_SET=gap8, GPU-277bb222, the dispatch -> these tiles): 128 x 4096 x 4096 13.1 -> 10.1,
// 128 / 192 / 256 / 320 / 384 x 4096 x 14336 31.0 / 40.5 / 43.3 / 41.2 / 48.1 -> 26.5 / 28.5 /
// 31.2 / 36.9 / 44.4, 256 / 512 x 2048 x 4096 20.1 / 21.2 -> 9.8 / 11.3, 320 x 4096 x 4096 level
// (14.6).
struct HalfPlan {
  int rows = 0, splits = 1;
};
inline HalfPlan SwapHalfPlan(const Params& p, int sms) {
  HalfPlan h;
  const bool e4m3 = p.in_type == Elem::kE4M3;
  if (p.act >= 0 || p.m <= 64 ||
      (e4m3 ? p.a_scale_kind == Scale::kBlock || p.out_type == Elem::kF32
            : p.out_type != p.in_type)) {
    return h;
  }
  const int64_t w = ceil_div<int64_t>(p.n, 64);  // weight tiles
  int64_t most = std::min<int64_t>(8, sms / w);
  most -= most % 2;
  const int64_t t0 = std::min(most, 2 * ceil_div<int64_t>(p.m, 2 * 96));
  for (int64_t t = t0; t >= 2 && t <= most; t += 2) {
    for (const int n : SizeList(SwapHalfSizes{})) {
      if (n * t < p.m || (e4m3 && n == 176)) continue;
      if (t > t0 && n < 64) return h;  // (m 128 x n 1024 in 48-row tiles, split: 12.5 vs 10.3 us)
      const int64_t tiles = ceil_div<int64_t>(p.m, n), blocks = w * (tiles + tiles % 2);
      const int s = 2 * blocks <= int64_t{sms} ? 2 : 1;
      if (blocks * s * 10 >= int64_t{sms} * 9) {
        h.rows = n, h.splits = s;
        return h;
      }
      break;
    }
  }
  return h;
}
inline int SwapHalfN(const Params& p, int sms) { return SwapHalfPlan(p, sms).rows; }

// Decode batches of 65-128 rows, 16-bit inputs and outputs of their type, not gated, on `sms` SMs,
// where the one-group swapped tiles (SwapHalfPlan) and 128 x 128 tiles leave SMs idle. Fitted on
// the H200 (132 SMs; gemm_ab AB_SET=gap11 and gap12, weights rotating, two runs; us, the dispatch
// before -> the rule, cuBLAS; GPU-ff4dd829, GPU-e06891ba), not measured on the H100:
// - SwapOne: Sm90SwapOne where the weights' 64-row tiles number 90-110% of the SMs (n about 8192
//   on 132): gemm_ab AB_SET=gap16 and gap17 (with sm90.h's short boxes; GPU-91cfa4ff, two runs),
//   the dispatch -> these tiles, cuBLAS: 128 x 8192 x 4096 23.6 -> 22.4 (22.3), 128 / 100 / 72 x
//   8192 x 8192 46.6 / 45.4 / 54.0 -> 42.9 / 40.7 / 38.4 (41.1 / 41.2 / 37.0), 128 / 100 x 8192 x
//   14336 74.5 / 71.5 -> 69.1 / 65.7 (66.8 / 72.7), 100 / 72 x 8192 x 28672 130.2 / 125.0 ->
//   124.8 / 120.4 (132.5 / 138.7), 128 / 100 x 9216 x 4096 (144 tiles, stream-K) 33.4 / 32.7 ->
//   27.8 / 26.6 (24.5 / 25.6). Not taken: 80-112 tiles (n 5120-7168: 128 x 7168 x 4096 22.4 ->
//   24.1, 128 x 5120 x 8192 32.3 -> 34.0) and 160 or more (128 x 10240 x 8192 57.7 -> 60.1).
// - NarrowN: Sm90Narrow's width (0: not taken) for k under 192 blocks: 128 x 6144 x 4096 24.6 ->
//   19.6 (128 x 48; cuBLAS 17.8), 128 x 8192 x 4096 27.4 -> 23.0 (128 x 64, until SwapOne took n
//   8192; 22.1), x 8192 x 8192 55.6 -> 44.1 (39.5), 128 x 12288 x 4096 36.4 -> 32.9 (128 x 96;
//   31.0), 128 x 10240 x 8192 (81% of the SMs) 64.6 -> 56.9 (50.4). At first m 97-128 only: at m 96
//   the tiles ran a quarter slower than at 128 (96 x 6144 x 4096 26.9 against 19.6), which was
//   their a box reaching past a's end; with short boxes the same tiles run 72 x 6144 x 4096 at 19.3
//   where the dispatch took 24.1 (cuBLAS 17.2; gap17), so m 65-96 takes them too. Not taken: k of
//   192 blocks or more (128 x 8192 x 28672 137.3 -> 145.9), 128 x 48 tiles on 81% (128 x 5120 x
//   4096 20.0 -> 20.8).
// - PairSplits: Sm90Small's 64 x 128 tiles (two rows of them) split s = 2-4 ways, where the
//   tiles t fit one round s times over (s the most, at most 4) on at least 70% of the SMs, with k
//   of 192 blocks or more or where SwapHalfPlan does not take the shape (0: not taken): 96 / 128 x
//   4096 x 14336 44.3 / 46.2 -> 37.1 / 38.3 (s 2; cuBLAS 39.2 / 39.0), 96 / 128 x 2048 x 14336
//   24.4 / 25.2 -> 22.9 / 23.5 (s 4; 22.4 / 23.1), 96 / 128 x 3072 x 4096 16.1 / 16.5 -> 13.1 /
//   13.4 (s 2; 13.1 / 11.4). Not taken: 4096 x 8192 (level: 25.2 / 25.6 -> 24.9 / 25.4) and x 4096
//   (128 x 4096 x 4096 14.1 -> 15.4), where the swapped tiles run; t past half the SMs (96 x 5120
//   x 4096 19.4 -> 22.6 unsplit).
// 16-bit inputs, outputs of their type, not gated: what the H200-fitted rules below take.
inline bool PlainSixteenBit(const Params& p) {
  return p.act < 0 && p.in_type != Elem::kE4M3 && p.out_type == p.in_type;
}
inline bool DecodeRule(const Params& p) { return PlainSixteenBit(p) && p.m > 64 && p.m <= 128; }
inline bool SwapOne(const Params& p, int sms) {
  const int64_t tiles = ceil_div<int64_t>(p.n, 64);
  return DecodeRule(p) && 10 * tiles >= int64_t{sms} * 9 && 10 * tiles <= int64_t{sms} * 11;
}
inline int NarrowN(const Params& p, int sms) {
  if (!DecodeRule(p) || ceil_div<int64_t>(p.k, 64) >= 192) return 0;
  for (const int n : SizeList(NarrowSizes{})) {
    const int64_t tiles = ceil_div<int64_t>(p.n, n);
    if (tiles <= sms && tiles * 10 >= int64_t{sms} * (n == 48 ? 9 : 8)) return n;
  }
  return 0;
}
inline int PairSplits(const Params& p, int sms) {
  if (!DecodeRule(p) || sms < 1) return 0;
  const int64_t t = ceil_div<int64_t>(p.m, 64) * ceil_div<int64_t>(p.n, 128);
  const int64_t s = std::min<int64_t>(4, sms / t);
  if (s < 2 || t * s * 10 < int64_t{sms} * 7) return 0;
  if (ceil_div<int64_t>(p.k, 64) < 192 && SwapHalfN(p, sms) > 0) return 0;
  return static_cast<int>(s);
}

// Whether 16-bit p of m 129-256 (outputs of the inputs' type, not gated) with k of 192 blocks or
// more takes 128 x 128 tiles split in two (PlanSplits) where the split grid is one round of at
// least 90% of the SMs (n about 4096: a decode batch's down projection), not the one-group swapped
// tiles SwapHalfPlan would give. H200, gemm_ab AB_SET=gap14 and gap10 (two runs each, GPU-9ae4f5bf
// and GPU-ee720c78; us, the swapped tiles -> these, cuBLAS): 256 x 4096 x 14336 59.1 -> 52.8
// (55.0) and 52.1 -> 48.9 (48.6), 192 x 4096 x 14336 52.8 -> 50.2 (48.0); at k 8192 level (256 x
// 4096 x 8192 34.7 / 34.2), at n 2048 (a grid of 64 blocks) slower (256 x 2048 x 8192 24.0 ->
// 26.3). With the rule, on another H200 (GPU-6a0fa5dd, one run): 256 x 4096 x 14336 48.2 (cuBLAS
// 50.0), 192 x 4096 x 14336 51.0 (48.2). On the H100 the two were level at 256 x 4096 x 14336
// (57.3 -> 57.9 the other way).
inline bool MidPair(const Params& p, int sms) {
  if (!PlainSixteenBit(p) || p.m <= 128 || p.m > 256 || ceil_div<int64_t>(p.k, 64) < 192) {
    return false;
  }
  const int64_t t = ceil_div<int64_t>(p.m, 128) * ceil_div<int64_t>(p.n, 128);
  return 2 * t <= sms && 20 * t >= int64_t{sms} * 9;
}

// Splits of the swapped tiles' `tiles` on `sms` SMs (k in kb 64-wide blocks): to fill the SMs when
// the tiles fill at most half of them, at most 4 and each split at least 8 k blocks long; else 1
// (stream-K then spreads a short last round).
inline int64_t SwapSplits(int64_t tiles, int64_t kb, int sms) {
  int64_t s = 1;
  if (2 * tiles > sms) return 1;
  while (s < 4 && tiles * (s + 1) <= sms && kb / (s + 1) >= 8) ++s;
  return s;
}

// The tile of 16-bit p (m > 128, sm90) on `sms` SMs: the grid whose rounds take least time, in
// units of a round of Sm90Large's 128 x 256 clusters (whole rounds, or where stream-K spreads a
// last round after full ones, their fraction and a quarter round for the partial tiles):
// - Sm90Wide192's 128 x 192 clusters (not gated: a gated tile's halves would be 96 columns): 0.77
//   of a 256-wide round (3/4 of the product at 97% of the rate);
// - Sm90Mid's 128 x 128 tiles: 0.57 (half the product at 88% of the rate), with stream-K where it
//   spreads a last round after full ones, or split in two (PlanSplits) where two splits fit one
//   round, half a round plus half again for the fp32 partials and their reduce;
// - Sm90Swap192's swapped 128 x 192 tiles (not gated): 0.85, split to fill the SMs where they fill
//   at most half (only where m spans two or more of their 192 rows: for fewer, the 128 x 128 tiles'
//   split in two won at every shape measured), else with stream-K;
// - Sm90Slim's 64 x 256 tiles where m % 128 is 1..64: 0.65;
// then Sm90Wide144's 128 x 144 tiles (not gated) over the choice where they make one round of
// 96-100% of the SMs, unless the choice is the swapped 128 x 192 tiles (not measured against
// them) or 64 x 256 tiles that pad m by less than 32 rows. Fitted on the H100 (gemm_ab
// AB_SET=gap7, weights rotating, two runs, GPU-4cd5c8ab; us, the choice before -> 128 x 144,
// cuBLAS): 384 x 6144 x 4096 40.8 -> 35.2 (31.1; 128 x 128 tiles with stream-K), 384 x 6144 x
// 14336 135.7 -> 113.2 (105.8; 128 x 192), 200 / 256 x 9216 x 4096 42.8 / 49.4 -> 39.1 / 44.0
// (37.1 / 38.1), 512 x 4608 x 3584 35.8 -> 30.9 (27.6), 768 x 3072 x 3072 31.9 -> 28.9 (22.9),
// 1024 x 2304 x 2304 25.8 -> 21.7 (17.9); over 64 x 256 tiles padding m by 48 rows, 272 x 6144 x
// 4096 37.2 -> 33.4 (27.3) and 400 x 4608 x 3584 32.6 -> 30.2 (28.3); against unpadded ones they
// tied or lost: 320 x 6144 x 4096 34.7 / 34.4, 448 x 4608 x 3584 29.4 / 29.8, 704 x 3072 x 3072
// 24.1 / 28.9. Where the grid fills less of the SMs they lost (192 / 256 x 6144 x 4096, 86
// tiles: 28.4 / 28.8 -> 36.5 / 37.5), and in clusters of 2 (sharing a or b) they ran no faster
// (AB_SET=gap6, GPU-6befdf08).
// Ties go to the wider. A few rounds of a mid-sized m are where it matters: 256 x 4096 x 4096 is 32
// wide tiles or 64 narrow ones, one round either way; 768 x 4096 x 4096 is 48 clusters of 128 x 256
// on 66 slots, or 66 of 128 x 192. The factors were fitted to a .dev probe of 93 shapes, m 129 to
// 768 (5 projections of Llama 3 8B / 70B at 18 m, and 3 odd shapes): H100, bf16, summed us, the
// rule before (no swapped tiles, 64-row tiles at 0.56 / 0.45, 128 x 128 tiles at 0.59 and unsplit
// by stream-K) 7178, this rule 6842, the best tile per shape 6764, cuBLAS 6429.
inline Kernel TileGrid(const Params& p, int sms) {
  const int slots = sms / 2;  // clusters of two wide tiles
  if (slots < 1) return Kernel::kSm90Large;
  const bool gated = p.act >= 0;
  const int64_t kb = ceil_div<int64_t>(p.k, 64);
  const int64_t rows = ceil_div(p.m, 128), bn = gated ? 2 * int64_t{p.n} : p.n;
  const int64_t pairs = ceil_div<int64_t>(rows, 2);
  const int64_t units = pairs * ceil_div<int64_t>(bn, 256);
  const bool spread = units >= slots && StreamKUnits(units, slots, kb, 128 * 256) > 0;
  const double wide = spread ? static_cast<double>(units) / slots + 0.25
                             : static_cast<double>(ceil_div<int64_t>(units, slots));
  const double w192 =
      gated ? 1e30 : 0.77 * ceil_div<int64_t>(pairs * ceil_div<int64_t>(bn, 192), slots);
  const int64_t nt = rows * ceil_div<int64_t>(bn, 128);
  double narrow = 0.57 * ceil_div<int64_t>(nt, sms);
  if (nt >= sms && StreamKUnits(nt, sms, kb, 128 * 128) > 0) {
    narrow = 0.57 * (static_cast<double>(nt) / sms + 0.25);
  } else if (2 * nt <= sms) {
    narrow = 0.57 * 0.5 * 1.5 * ceil_div<int64_t>(2 * nt, sms);
  }
  double swap = 1e30;
  const int64_t tx = ceil_div<int64_t>(p.n, 128) * ceil_div<int64_t>(p.m, 192);
  if (!gated && (2 * tx > sms || p.m > 192)) {
    const int64_t s = SwapSplits(tx, kb, sms);
    if (s > 1) {
      swap = 0.85 * 1.5 * static_cast<double>(ceil_div<int64_t>(tx * s, sms)) / s;
    } else if (StreamKUnits(tx, sms, kb, 128 * 192) > 0) {
      swap = 0.85 * (static_cast<double>(tx) / sms + 0.25);
    } else {
      swap = 0.85 * ceil_div<int64_t>(tx, sms);
    }
  }
  double slim = 1e30;
  if (p.m % 128 != 0 && p.m % 128 <= 64) {
    slim = 0.65 * ceil_div<int64_t>(ceil_div<int64_t>(p.m, 64) * ceil_div<int64_t>(bn, 256), sms);
  }
  Kernel best = Kernel::kSm90Large;
  double t = wide;
  const std::pair<double, Kernel> others[] = {{w192, Kernel::kSm90Wide192},
                                              {narrow, Kernel::kSm90Mid},
                                              {swap, Kernel::kSm90Swap192},
                                              {slim, Kernel::kSm90Slim}};
  for (const auto& [cost, kernel] : others) {
    if (cost < t) t = cost, best = kernel;
  }
  const int64_t t144 = rows * ceil_div<int64_t>(p.n, 144);
  if (!gated && t144 <= sms && t144 * 25 >= int64_t{sms} * 24 && best != Kernel::kSm90Swap192 &&
      !(best == Kernel::kSm90Slim && ceil_div(p.m, 64) * 64 - p.m < 32)) {
    return Kernel::kSm90Wide144;
  }
  return best;
}

// The kernel version and tile for p on a device of compute capability major `cc_major` with
// `sms` SMs.
inline Kernel Choose(const Params& p, int cc_major, int sms) {
  const bool sm90 = p.path == Path::kSm90 ||
                    (p.path == Path::kAuto && cc_major == 9 && p.b_layout == BLayout::kNK) ||
                    p.in_type == Elem::kE4M3;
  if (sm90) {
    if (p.m <= 64) return Kernel::kSm90Small;
    if (SwapOne(p, sms)) return Kernel::kSm90SwapOne;
    if (NarrowN(p, sms) > 0) return Kernel::kSm90Narrow;
    if (PairSplits(p, sms) > 0) return Kernel::kSm90Small;
    if (MidPair(p, sms)) return Kernel::kSm90Mid;
    if (SwapHalfN(p, sms) > 0) return Kernel::kSm90SwapHalf;
    if (p.m <= 128) return Kernel::kSm90Mid;
    if (SwapSizedN(p, sms) > 0) return Kernel::kSm90SwapSized;
    return p.in_type == Elem::kE4M3 ? Kernel::kSm90Large : TileGrid(p, sms);
  }
  if (p.m <= 16) return Kernel::kSm80Small;
  return p.m <= 64 ? Kernel::kSm80Mid : Kernel::kSm80Large;
}

// Whether block-scaled p (m > 128) takes Sm90Block's 128 x 256 tiles on `sms` SMs (else
// Sm90BlockMid's 128 x 128): unless their last round leaves more than a tenth of the grid idle
// and stream-K (StreamKUnits) would not spread it.
inline bool BlockWide(const Params& p, int sms) {
  const int64_t units = static_cast<int64_t>(ceil_div(p.m, 128)) * ceil_div(p.n, 256);
  if (sms < 1 || StreamKUnits(units, sms, ceil_div<int64_t>(p.k, 128), 128 * 256) > 0) return true;
  return units * 10 >= ceil_div<int64_t>(units, sms) * sms * 9;
}

// Output tiles (block m, block n) of a kernel choice on a device of `sms` SMs.
inline void TileDims(const Params& p, Kernel k, int sms, int* bm, int* bn) {
  switch (k) {
    case Kernel::kSm80Large:
      *bm = Sm80Large::kBM, *bn = Sm80Large::kBN;
      return;
    case Kernel::kSm80Mid:
      *bm = Sm80Mid::kBM, *bn = Sm80Mid::kBN;
      return;
    case Kernel::kSm80Small:
      *bm = Sm80Small::kBM, *bn = Sm80Small::kBN;
      return;
    case Kernel::kSm90Large:
      *bm = 128, *bn = p.a_scale_kind == Scale::kBlock && !BlockWide(p, sms) ? 128 : 256;
      return;
    case Kernel::kSm90Mid:
      *bm = 128, *bn = 128;
      return;
    case Kernel::kSm90Wide192:
      *bm = 128, *bn = 192;
      return;
    case Kernel::kSm90Slim:
      *bm = 64, *bn = 256;
      return;
    case Kernel::kSm90Wide144:
      *bm = 128, *bn = 144;
      return;
    case Kernel::kSm90Narrow:
      *bm = 128, *bn = NarrowN(p, sms);
      return;
    case Kernel::kSm90SwapOne:
      *bm = 128, *bn = 64;
      return;
    case Kernel::kSm90Swap192:  // (the output's rows x columns; the kernel's are swapped)
      *bm = 192, *bn = 128;
      return;
    case Kernel::kSm90SwapSized:
      *bm = SwapSizedN(p, sms), *bn = 128;
      return;
    case Kernel::kSm90SwapHalf:
      *bm = SwapHalfN(p, sms), *bn = 64;
      return;
    case Kernel::kSm90Small:
      *bm = 64, *bn = p.in_type == Elem::kE4M3 && p.a_scale_kind != Scale::kBlock ? 64 : 128;
      return;
  }
}

// The split count for p on the current device (p.splits ignored), each split at least 4 k blocks
// long. The decode tiles (m <= 128: one group of 64 rows, or 128 x 128) stream b through deep
// pipelines, and a third of the SMs already read at the copy rate, so they split only to keep a
// third of the SMs busy, or in two when k is long (>= 192 k blocks; m > 128, which takes 128 x 128
// tiles only where they run few rounds: any k) and the halves still fit one wave (a split costs a
// pass over fp32 partials and a launch, which long k repays). The 128 x 256
// tiles (and the sm80 ones) split to fill one wave; the one-group swapped tiles as SwapHalfPlan
// says, the 64-row tiles of m 65-128 as PairSplits does. Measured on the H100 over Llama 3 8B's and
// 70B's projections, m 1 to 256 (benchmarks/README.md, GEMM kernel versions). Shapes and device
// properties only, no device memory (graph-safe).
inline cudaError_t PlanSplits(const Params& p, int32_t* splits) {
  *splits = 1;
  if (p.m <= 0 || p.n <= 0 || p.k <= 0) return cudaSuccess;
  DeviceProps props;
  XK_CUDA_TRY(GetDeviceProps(&props));
  Params one = p;
  one.splits = 1;
  if (UseAnyGemv(one, props.cc_major, props.sm_count)) return cudaSuccess;  // no split
  const Kernel kernel = Choose(p, props.cc_major, props.sm_count);
  // the 64-row tiles of m > 128, the sized swapped ones, the 128 x 144 ones, the narrow ones and
  // the unclustered swapped ones are chosen for their rounds unsplit
  if (kernel == Kernel::kSm90Slim || kernel == Kernel::kSm90SwapSized ||
      kernel == Kernel::kSm90Wide144 || kernel == Kernel::kSm90Narrow ||
      kernel == Kernel::kSm90SwapOne) {
    return cudaSuccess;
  }
  if (kernel == Kernel::kSm90Small && p.m > 64) {  // (Choose took it for PairSplits)
    *splits = static_cast<int32_t>(std::min<int64_t>(
        PairSplits(p, props.sm_count), std::max<int64_t>(1, ceil_div<int64_t>(p.k, 64) / 4)));
    return cudaSuccess;
  }
  if (kernel == Kernel::kSm90SwapHalf) {
    *splits = SwapHalfPlan(p, props.sm_count).splits;
    return cudaSuccess;
  }
  int bm = 0, bn = 0;
  TileDims(p, kernel, props.sm_count, &bm, &bn);
  if (p.act >= 0) bn /= 2;  // a gated tile's product spans twice its output columns
  const int64_t tiles = static_cast<int64_t>(ceil_div(p.m, bm)) * ceil_div(p.n, bn);
  const int64_t bk = p.in_type == Elem::kE4M3 ? 128 : 64;
  if (kernel == Kernel::kSm90Swap192) {  // as TileGrid priced them
    *splits = static_cast<int32_t>(SwapSplits(tiles, ceil_div<int64_t>(p.k, bk), props.sm_count));
    return cudaSuccess;
  }
  const int64_t max_splits = std::max<int64_t>(1, ceil_div<int64_t>(p.k, bk) / 4);
  int64_t s = 1;
  if (kernel == Kernel::kSm90Small || kernel == Kernel::kSm90Mid) {
    const int64_t busy = ceil_div<int64_t>(props.sm_count, 3);
    if (tiles < busy) s = ceil_div<int64_t>(busy, tiles);
    // (m > 128: 192 x 4096 x 4096 in 64 tiles, 31.6 -> 23.2 us split in two)
    if ((ceil_div<int64_t>(p.k, bk) >= 192 || p.m > 128) && 2 * tiles <= props.sm_count)
      s = std::max<int64_t>(s, 2);
  } else {
    if (2 * tiles > props.sm_count) return cudaSuccess;
    s = props.sm_count / tiles;
  }
  s = std::min<int64_t>({s, max_splits, 64});
  *splits = static_cast<int32_t>(std::max<int64_t>(1, s));
  return cudaSuccess;
}

// Runs p on Tile<T, n> (the swapped tiles of n rows of a: Sm90SwapSized or Sm90SwapHalf; or
// Sm90Narrow's tiles of n weight rows), n one of the sizes kN; 16-bit outputs: the inputs' type,
// or bf16 / fp16 for e4m3; else cudaErrorInvalidValue.
template <template <typename, int> class Tile, typename T, typename Out, int... kN>
cudaError_t LaunchRowsOf(int n, const Params& p, cudaStream_t stream, const DeviceProps& props,
                         std::integer_sequence<int, kN...>) {
  cudaError_t r = cudaErrorInvalidValue;
  if constexpr (sizeof(Out) == 2 && (sizeof(T) == 1 || std::is_same_v<T, Out>)) {
    (void)((n == kN && ((r = LaunchSm90<Tile<T, kN>, Out>(p, stream, props)), true)) || ...);
  }
  return r;
}
template <typename T, typename Out>
cudaError_t LaunchSwapSizedN(int n, const Params& p, cudaStream_t stream,
                             const DeviceProps& props) {
  return LaunchRowsOf<Sm90SwapSized, T, Out>(n, p, stream, props, SwapSizes{});
}
template <typename T, typename Out>
cudaError_t LaunchSwapHalfN(int n, const Params& p, cudaStream_t stream,
                            const DeviceProps& props) {
  if constexpr (sizeof(T) == 1) {
    return LaunchRowsOf<Sm90SwapHalf, T, Out>(n, p, stream, props, SwapHalfSizes8{});
  } else {
    return LaunchRowsOf<Sm90SwapHalf, T, Out>(n, p, stream, props, SwapHalfSizes{});
  }
}
// The tiles SwapSizedN(p) gives (Choose takes them only where it gives a size).
template <typename T, typename Out>
cudaError_t LaunchSwapSized(const Params& p, cudaStream_t stream, const DeviceProps& props) {
  return LaunchSwapSizedN<T, Out>(SwapSizedN(p, props.sm_count), p, stream, props);
}

inline bool IsSm80(Kernel k) {
  return k == Kernel::kSm80Large || k == Kernel::kSm80Mid || k == Kernel::kSm80Small;
}

// Whether p is a gated product that the chosen kernel takes whole (2n columns) into the workspace,
// gated by the reduce: the sm80 kernel, and float32 outputs (the sm90 kernel gates 16-bit ones in
// its epilogue).
inline bool GatedWhole(const Params& p, Kernel kernel) {
  return p.act >= 0 && (IsSm80(kernel) || p.out_type == Elem::kF32);
}

// Floats of the stream-K area that an unsplit call of the 128-row sm90 tiles (128 x 256, 128 x 128
// for m > 128, swapped 128 x 192, SwapOne's swapped 64 x 128) takes on a device of `sms` SMs, or
// 0: a partial tile's slot per block (the tile's floats) and a 64-bit ready flag per block after
// them. The launcher decides per call whether the last units are spread (sm90.h, StreamKUnits);
// the plan reserves the area whenever it may.
inline int64_t StreamKElems(const Params& p, Kernel kernel, int sms) {
  // 128 x 128 tiles for m > 128 only where they run more than one round (spreading all of one
  // round lost: H100, bf16, 129 x 6144 x 4096 26.8 -> 31.9 us), decode sizes never
  const bool mid = kernel == Kernel::kSm90Mid && p.m > 128;
  if ((kernel != Kernel::kSm90Large && kernel != Kernel::kSm90Swap192 &&
       kernel != Kernel::kSm90SwapOne && !mid) ||
      p.splits != 1 || p.partials_only || p.k <= 0 || GatedWhole(p, kernel)) {
    return 0;
  }
  int bm = 0, bn = 0;
  TileDims(p, kernel, sms, &bm, &bn);
  const int64_t cols = p.act >= 0 ? 2 * int64_t{p.n} : p.n;
  if (mid && ceil_div<int64_t>(p.m, bm) * ceil_div<int64_t>(cols, bn) < sms) return 0;
  return static_cast<int64_t>(sms) * (static_cast<int64_t>(bm) * bn + 2);
}

// Floats of workspace p needs on a device of compute capability major `cc_major` with `sms` SMs
// (p.splits set): split-K's partial tiles, a gated product's where GatedWhole, or stream-K's.
inline int64_t WorkspaceElems(const Params& p, int cc_major, int sms) {
  if (UseAnyGemv(p, cc_major, sms)) return 0;
  const Kernel kernel = Choose(p, cc_major, sms);
  return std::max(WorkspaceElems(p, GatedWhole(p, kernel)), StreamKElems(p, kernel, sms));
}

// The tile launch of p (k > 0, no GEMV) with In inputs (__half, __nv_bfloat16 or __nv_fp8_e4m3,
// as p.in_type) and Out outputs, the kernel as Choose gives it; cudaErrorInvalidValue for a pair
// no kernel takes (16-bit inputs give their own type or float). Not inline: a program may declare
// explicit instantiations of it extern and compile them in other translation units
// (bindings/gemm_tiles_*.cu do, so that the gemm module's tiles build in parallel).
template <typename In, typename Out>
cudaError_t GemmTiles(const Params& p, cudaStream_t stream, const DeviceProps& props) {
  const Kernel kernel = Choose(p, props.cc_major, props.sm_count);
  if constexpr (std::is_same_v<In, __nv_fp8_e4m3>) {
    using F8 = __nv_fp8_e4m3;
    if (p.in_type != Elem::kE4M3) return cudaErrorInvalidValue;
    const bool block = p.a_scale_kind == Scale::kBlock;
    if (kernel == Kernel::kSm90SwapSized) return LaunchSwapSized<F8, Out>(p, stream, props);
    if (kernel == Kernel::kSm90SwapHalf) {
      return LaunchSwapHalfN<F8, Out>(SwapHalfN(p, props.sm_count), p, stream, props);
    }
    if (kernel == Kernel::kSm90Small) {
      return block ? LaunchSm90<Sm90BlockSmall, Out>(p, stream, props)
                   : LaunchSm90<Sm90Small<F8>, Out>(p, stream, props);
    }
    if (kernel == Kernel::kSm90Mid) {
      return block ? LaunchSm90<Sm90BlockMid, Out>(p, stream, props)
                   : LaunchSm90<Sm90Mid<F8>, Out>(p, stream, props);
    }
    if (block) {
      return BlockWide(p, props.sm_count) ? LaunchSm90<Sm90Block, Out>(p, stream, props)
                                          : LaunchSm90<Sm90BlockMid, Out>(p, stream, props);
    }
    return LaunchSm90<Sm90Large<F8>, Out>(p, stream, props);
  } else if constexpr (std::is_same_v<Out, float> || std::is_same_v<Out, In>) {
    using T = In;
    // a gated product taken whole: its 2n columns into the workspace as a plain product, then
    // the reduce sums and gates them
    const bool whole = GatedWhole(p, kernel);
    Params wp = p;
    if (whole) wp.n = 2 * p.n, wp.act = -1, wp.bias = nullptr, wp.partials_only = true;
    const Params& q = whole ? wp : p;
    switch (kernel) {
      case Kernel::kSm90Large:
        XK_CUDA_TRY((LaunchSm90<Sm90Large<T>, Out>(q, stream, props)));
        break;
      case Kernel::kSm90Mid:
        XK_CUDA_TRY((LaunchSm90<Sm90Mid<T>, Out>(q, stream, props)));
        break;
      case Kernel::kSm90Wide192:
        XK_CUDA_TRY((LaunchSm90<Sm90Wide192<T>, Out>(q, stream, props)));
        break;
      case Kernel::kSm90Slim:
        XK_CUDA_TRY((LaunchSm90<Sm90Slim<T>, Out>(q, stream, props)));
        break;
      case Kernel::kSm90Wide144:
        XK_CUDA_TRY((LaunchSm90<Sm90Wide144<T>, Out>(q, stream, props)));
        break;
      case Kernel::kSm90Swap192:
        XK_CUDA_TRY((LaunchSm90<Sm90Swap192<T>, Out>(q, stream, props)));
        break;
      case Kernel::kSm90SwapSized:
        XK_CUDA_TRY((LaunchSwapSized<T, Out>(q, stream, props)));
        break;
      case Kernel::kSm90SwapHalf:
        XK_CUDA_TRY((LaunchSwapHalfN<T, Out>(SwapHalfN(q, props.sm_count), q, stream, props)));
        break;
      case Kernel::kSm90Narrow:
        XK_CUDA_TRY((LaunchRowsOf<Sm90Narrow, T, Out>(NarrowN(q, props.sm_count), q, stream,
                                                      props, NarrowSizes{})));
        break;
      case Kernel::kSm90SwapOne:  // (16-bit outputs of the inputs' type only: DecodeRule)
        if constexpr (std::is_same_v<Out, T>) {
          XK_CUDA_TRY((LaunchSm90<Sm90SwapOne<T>, Out>(q, stream, props)));
        } else {
          return cudaErrorInvalidValue;
        }
        break;
      case Kernel::kSm90Small:
        XK_CUDA_TRY((LaunchSm90<Sm90Small<T>, Out>(q, stream, props)));
        break;
      case Kernel::kSm80Large:
        XK_CUDA_TRY((LaunchSm80<Sm80Large, T, Out>(q, stream, props)));
        break;
      case Kernel::kSm80Mid:
        XK_CUDA_TRY((LaunchSm80<Sm80Mid, T, Out>(q, stream, props)));
        break;
      case Kernel::kSm80Small:
        XK_CUDA_TRY((LaunchSm80<Sm80Small, T, Out>(q, stream, props)));
        break;
    }
    return whole ? LaunchSplitKReduce<Out>(p, stream, props) : cudaSuccess;
  } else {
    return cudaErrorInvalidValue;  // 16-bit inputs give their own type or float
  }
}

// Runs p on `stream` (needs p.workspace of WorkspaceElems(p, cc_major, sms) floats where that is
// > 0).
inline cudaError_t Gemm(const Params& p_in, cudaStream_t stream) {
  if (p_in.m == 0 || p_in.n == 0) return cudaSuccess;
  if (p_in.m < 0 || p_in.n < 0 || p_in.k < 0 || p_in.splits < 1 ||
      (p_in.splits > 1 && p_in.workspace == nullptr)) {
    return cudaErrorInvalidValue;
  }
  DeviceProps props;
  XK_CUDA_TRY(GetDeviceProps(&props));
  Params p = p_in;
  p.stream_k = p.workspace != nullptr &&
               StreamKElems(p, Choose(p, props.cc_major, props.sm_count), props.sm_count) > 0;
  return DispatchOut(p.out_type, [&](auto out) -> cudaError_t {
    using Out = decltype(out);
    if (p.k == 0) return LaunchFillBias<Out>(p, stream, props);
    if (UseGemv(p, props.cc_major)) return LaunchGemv<Out>(p, stream, props);
    if (UseGemvBulk(p, props.cc_major, props.sm_count)) {
      return LaunchGemvBulk<Out>(p, stream, props);
    }
    switch (p.in_type) {
      case Elem::kE4M3:
        return GemmTiles<__nv_fp8_e4m3, Out>(p, stream, props);
      case Elem::kF16:
        return GemmTiles<__half, Out>(p, stream, props);
      case Elem::kBF16:
        return GemmTiles<__nv_bfloat16, Out>(p, stream, props);
      default:
        return cudaErrorInvalidValue;
    }
  });
}

}  // namespace xkernels::gemm

#endif  // XKERNELS_GEMM_GEMM_H_
