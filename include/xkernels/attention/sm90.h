// Attention prefill for sm_90a, the Hopper path: TMA loads into 128-byte-swizzled shared memory,
// S = Q K^T and O += P V on warpgroup MMAs (wgmma) with the accumulators in registers, and warp
// specialisation.
//
// A block takes 64 x kConsumers query tokens (128, or 192 at head_dim 64 in v7) of one query
// head of one request (no GQA packing: kv head h / group, whose tiles the other heads of the group
// read again from L2).
// - Warpgroup 0 is the producer: one thread loads Q once, then keeps a ring of kStages stages of
//   K and V (kKeys keys each: 128, or 176 in v5) full with TMA, K and V on barriers of their own
//   so that S = Q K^T can start before V lands. The tensors are 4-D tensor maps [batch, tokens,
//   heads, head_dim], boxes of 128 (Q) or kKeys tokens x 64 head dims (one 128-byte swizzled row
//   per token): strided Q/K/V (views of a packed QKV) need no copy, and tokens past a tensor's end
//   arrive as zeros.
// - Warpgroups 1 .. kConsumers own 64 query rows each. Per key tile: S (64 x kKeys, fp32,
//   registers) = Q K^T over head_dim / 16 wgmmas with both operands in shared memory; soft cap
//   and mask; the online softmax of prefill.h (running max and sum, O rescaled when a max
//   moved, exponentials in base 2); P to 16-bit in registers, already in the A-fragment layout
//   of a register-sourced wgmma; O (64 x head_dim) += P V over kKeys / 16 wgmmas with V read
//   N-major (transposed) from its swizzled tile; the stage released to the producer.
// - Causal and windowed tiles past the diagonal or before the window are skipped, not masked.
// - v3, persistent (Sm90Grid says when): a dense batch's (query tile, request, head) work items on
//   one block per SM, longest first (every request's last tiles, which under a causal mask see the
//   most keys, before the tiles ahead of them), in rounds of one item per block taken in zigzag
//   order. The producer loads the next item's Q once the consumers' last S = Q K^T of this one is
//   done, and its K and V as stages free up: the block's launch and set-up are paid once per SM,
//   and one item's output is written while the next one's tiles land. A template argument, so
//   that the one-block-per-tile kernel compiles to the code it had without it.
// - v4 (kSched, kEarlyK): the two consumer groups take turns to issue each step's S = Q K^T and
//   P V (named barriers, FlashAttention-3's warp scheduler barrier), so that one group's softmax
//   runs under the other's products; K has an empty barrier of its own, given back once S is done,
//   so that two stages keep the overlapped loop fed.
// - v5 (kKeys 176, Sm90LongKeysTile): stages of 176 keys for dense requests of 4096 keys or more.
// - v6 (kChunkMiB): a dense batch's one-block-per-tile grid walks the requests in turn and each
//   request's query heads in chunks whose keys and values fit in L2, the chunk's tiles longest
//   first, so that blocks in flight share keys in L2 (sm90_block_item).
// - v7 (kConsumers 3, head_dim 64): three consumer groups (192 query rows) take turns on v4's
//   loop; every version's tiles end at the request's last query (sm90_item).
// - v8 (head_dim 128): the output in 16-byte stores, after an exchange within each quad of
//   threads (the epilogue, kWideStores).
// What the call computes: params.h. The dispatcher (attention.h) sends here the prefill shapes
// this path covers (head_dim 64 or 128, dense or ragged keys, no split) on sm_90 devices.
#ifndef XKERNELS_ATTENTION_SM90_H_
#define XKERNELS_ATTENTION_SM90_H_

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "xkernels/attention/params.h"
#include "xkernels/attention/prefill.h"
#include "xkernels/common.h"
#include "xkernels/math.h"
#include "xkernels/mma.h"
#include "xkernels/tma.h"
#include "xkernels/wgmma.h"

namespace xkernels::attention {

template <int kHeadDim_, int kStages_, bool kOverlap_, int kKeys_ = 128, bool kSched_ = false,
          bool kEarlyK_ = false, int kChunkMiB_ = 0, int kConsumers_ = 2>
struct Sm90AttnTile {
  static constexpr int kHeadDim = kHeadDim_, kStages = kStages_;
  // v2: the next tile's S = Q K^T and this tile's P V in flight together (see the kernel)
  static constexpr bool kOverlap = kOverlap_;
  // v4: the consumer groups issue each step's products in turn (named barriers), so that one
  // group's softmax runs under the others' products (v2's loop only)
  static constexpr bool kSched = kSched_ && kOverlap_;
  // v4: a stage's K is given back once its S = Q K^T is done and its V once P V is, on barriers
  // of their own, so that two stages keep v2's loop fed
  static constexpr bool kEarlyK = kEarlyK_;
  // v6: a dense batch's one-block-per-tile grid takes the query heads in chunks whose keys and
  // values fit kChunkMiB MiB (the heads of a kv group together), so that the blocks in flight
  // read keys from L2 rather than from memory (0: one chunk of every head)
  static constexpr int kChunkMiB = kChunkMiB_;
  // v7: consumer warpgroups of 64 query rows each, 2 or 3 (FlashAttention-3's head_dim 64 tile)
  static constexpr int kConsumers = kConsumers_;
  static constexpr int kRows = 64 * kConsumers;            // query tokens of a block
  static constexpr int kKeys = kKeys_;                     // keys per stage
  static constexpr int kThreads = 128 * (1 + kConsumers);  // producer + consumer warpgroups
  // registers per thread of the producer and of the consumers after setmaxnreg (ptxas allocates
  // the consumers' code up to it): 176-key tiles hold 88 floats of S, 64 of O and 44 words of P;
  // three groups share the 65536 registers as 32 + 3 x 160
  static constexpr int kProducerRegs = kConsumers == 3 ? 32 : kKeys_ == 176 ? 24 : 40;
  static constexpr int kConsumerRegs = kConsumers == 3 ? 160 : kKeys_ == 176 ? 240 : 232;
  static constexpr int kChunks = kHeadDim / 64;      // 128-byte column chunks of a row
  static constexpr int kQChunkBytes = kRows * 128;   // (kRows, 64) of Q
  static constexpr int kKvChunkBytes = kKeys * 128;  // (kKeys, 64) of K or V
  static constexpr int kQBytes = kChunks * kQChunkBytes;
  static constexpr int kKvBytes = kChunks * kKvChunkBytes;  // K (or V) of one stage
  // barriers: Q full, K full x kStages, V full x kStages, empty (K's with kEarlyK) x kStages,
  // Q empty (persistent), V empty x kStages (kEarlyK)
  static constexpr int kBarBytes = 8 * (2 + (kEarlyK ? 4 : 3) * kStages);
  // slack to align to 1024 (the swizzle's period), Q, the stages, the barriers
  static constexpr int kSmemBytes = 1024 + kQBytes + 2 * kStages * kKvBytes + kBarBytes;
  static_assert(kHeadDim == 64 || kHeadDim == 128, "head_dim 64 or 128");
  static_assert(kKeys == 128 || (kKeys == 176 && kHeadDim == 128),
                "128 keys per stage, or 176 at head_dim 128");
  static_assert(kConsumers == 2 || (kConsumers == 3 && kHeadDim == 64),
                "two consumer groups, or three at head_dim 64");
};

// The versions the dispatcher takes, measured on an H100 (bf16, benchmarks/attention_probe.cu,
// TFLOP/s non-causal / causal at s 8192, 32 heads of 128 | s 4096, GQA 32/8 | s 8192, 16 heads of
// 64): v1, 2 stages (4 at d 64): 580 / 565 | 496 / 483 | 432 / 416; v2, 2 stages: 450 / 446 |
// 477 / 447 | 394 / 379; v2, 3 stages (6 at d 64): 586 / 573 | 595 / 530 | 392 / 378. v2 needs
// the third stage (tile j + 1's K is read while tile j's V still is); at head_dim 64 the
// softmax is as long as the two products and the overlap does not pay. v4 (head_dim 128): v2's
// loop with the groups' products issued in turn and K given back on its own barrier, in 2
// stages: 1-7% faster than v2 on the batches and long sequences of the probe (benchmarks/README.md,
// sm90 versions); with the turns at head_dim 64, 2-5% slower.
// v6 (both head_dim 128 tiles): the one-block-per-tile grid in chunks of heads whose keys and
// values fit 16 MiB per request, so that the keys come from L2 rather than from memory (ncu, s
// 8192, 32 heads of 128, v5: 52% of the memory's bandwidth and 85% of L2's in use where
// FlashInfer's fa3 uses 5% and 32%, at 1.60 against 1.70 GHz): s 8192 32 heads v5 578 -> 591 /
// causal 552 -> 551, s 16384 GQA 598 -> 609 / 584 -> 594, b 4 x s 8192 GQA 591 -> 599 / 556 -> 561
// (chunks of 32 MiB: 573-604; benchmarks/README.md, sm90 versions).
// v7 (head_dim 64): three consumer groups of 64 query rows (192-row tiles) on v4's loop in 2
// stages of 128 keys (FlashAttention-3's head_dim 64 shape; at head_dim 128 three groups' 160
// registers cannot hold S, P and O), and every sm90 tile ending at its request's last query (the
// part-filled tile first, where a causal mask leaves it the fewest keys). Probe GPU-35c80822,
// TFLOP/s non-causal / causal, v1 on 128 rows -> v7: s 8192 16 x 64 388 / 382 -> 439 / 468,
// s 16384 387 / 386 -> 474 / 480, b 4 x 2048 GQA 32/8 370 / 330 -> 462 / 370, b 8 x 1024 359 /
// 290 -> 390 / 292, b 8 x 1000 333 / 264 -> 366 / 274, b 16 x 500 300 / 196 -> 314 / 190. Tried
// on the way (GPU-a332ba40): v1's loop on 192 rows (s 8192 429 / 441), 192 keys per stage (433 /
// 435), 4 stages (level on long requests, 5-10% slower on requests of 500-1000 tokens), and tiles
// from token 0 (b 8 x 1024 causal 293 -> 271: the last tile a third full, and it saw every key).
// v8 (head_dim 128, both tiles): out written in 16-byte stores (the epilogue). Probe GPU-085c63f6,
// HEAD and v8 as two binaries alternated twice, TFLOP/s non-causal / causal: b 8 x 1024 GQA 32/8
// 473 / 387 -> 517 / 406, b 16 x 1024 475 / 394 -> 507 / 412, b 8 x 1024 32 heads 438 / 317 ->
// 459 / 341, b 2 x 2048 564 / 479 -> 581 / 491, b 8 x 1000 467 / 371 -> 470 / 384; single
// requests of 4096-16384 tokens level (-1.6% to +2.9%).
template <int D>
using Sm90PrefillTile =
    std::conditional_t<D == 64, Sm90AttnTile<64, 2, true, 128, true, true, 0, 3>,
                       Sm90AttnTile<128, 2, true, 128, true, true, 16>>;
// v5: v4 with 176 keys per stage (FlashAttention-3's non-causal tile at head_dim 128), for dense
// requests of at least kSm90LongKeys keys without a window: 1-5% faster than v4 there, causal or
// not (s 4096 GQA 32/8 573 -> 588 / 551 -> 566 TFLOP/s, s 16384 575 -> 602 / 579 -> 599), and up
// to 12% slower on requests of 1024 keys (a sixth of the last tile empty, and under a causal mask
// a wider diagonal band).
using Sm90LongKeysTile = Sm90AttnTile<128, 2, true, 176, true, true, 16>;
constexpr int64_t kSm90LongKeys = 4096;
inline bool Sm90LongKeys(const Params& p) {
  return p.head_dim == 128 && p.qo_indptr == nullptr && p.kv_len >= kSm90LongKeys &&
         p.window_left < 0;
}

namespace detail {

// One work item of the sm90 kernel, query tile `tile` of request b for query head h: where its
// rows and keys are, the key tiles it attends to and the keys that every row of it sees (no mask).
struct Sm90Item {
  int b, tile, h;
  // The request's tiles end at its last query, so that the part-filled one is the first: row r
  // of them is query token q_begin + r (of the tensor), and its rows r < pad come before the
  // request. Rows r, not tokens, below.
  int32_t q_begin, pad;
  int32_t t_first, t_last;   // the tile's first and last row
  int32_t kv_begin, kv_len;  // the request's keys
  int32_t q_b, kv_b;         // the tensor maps' batch coordinates of q and of k, v
  int32_t diag;              // row t sees keys <= t + diag (causal)
  int j_begin, j_end;        // key tiles j_begin .. j_end - 1
  int32_t full_lo, full_hi;  // keys full_lo .. full_hi - 1 need no mask
};

// The rest of w from w.b and w.tile.
template <int kRows, int kKeys>
XK_HOST_DEVICE void sm90_item(const Params& p, Sm90Item& w) {
  int32_t q_len = static_cast<int32_t>(p.q_len);
  w.q_begin = 0;
  if (p.qo_indptr != nullptr) {
    w.q_begin = clamp32(p.qo_indptr[w.b], 0, p.total_q);
    q_len = clamp32(p.qo_indptr[w.b + 1], w.q_begin, p.total_q) - w.q_begin;
  }
  // The part-filled tile first, where a causal mask leaves it the fewest keys: its rows before
  // the request are computed on whatever Q holds there (zeros before the tensor's start) and not
  // written. (Rows, not tokens, keep the tile arithmetic of tiles that start at token 0; with
  // the tokens themselves ptxas spilled in the persistent kernels' loops.)
  w.pad = (kRows - q_len % kRows) % kRows;
  w.q_begin -= w.pad;
  w.t_first = w.tile * kRows;
  w.t_last = w.t_first + kRows - 1;
  w.kv_begin = 0, w.kv_len = static_cast<int32_t>(p.kv_len);
  if (p.kv_mode == KvMode::kRagged) {
    w.kv_begin = clamp32(p.kv_indptr[w.b], 0, p.kv_len);
    w.kv_len = clamp32(p.kv_indptr[w.b + 1], w.kv_begin, p.kv_len) - w.kv_begin;
  }
  w.q_b = p.qo_indptr == nullptr ? w.b : 0;
  w.kv_b = p.kv_mode == KvMode::kRagged ? 0 : w.b;
  w.diag = w.kv_len - q_len - w.pad;  // row r sees keys <= r + diag under a causal mask
  int32_t kv_lo = 0, kv_hi = w.kv_len;
  if (p.causal) kv_hi = max(0, min(kv_hi, w.t_last + w.diag + 1));
  if (p.window_left >= 0) kv_lo = max(0, w.t_first + w.diag - p.window_left);
  w.j_begin = kv_lo / kKeys;
  w.j_end = kv_hi > kv_lo ? (kv_hi + kKeys - 1) / kKeys : w.j_begin;
  w.full_lo = 0, w.full_hi = w.kv_len;
  if (p.causal) w.full_hi = max(0, min(w.full_hi, w.t_first + w.diag + 1));
  if (p.window_left >= 0) w.full_lo = w.t_last + w.diag - p.window_left;
}

// Query heads per chunk of the one-block-per-tile grid of a dense batch: as many kv groups as
// fit chunk_bytes of one request's keys and values (at least one group; all heads when
// chunk_bytes is 0).
inline __host__ __device__ int sm90_head_chunk(const Params& p, int64_t chunk_bytes) {
  const int group = p.num_qo_heads / p.num_kv_heads;
  const int64_t per_kv_head = int64_t{4} * p.kv_len * p.head_dim;  // 16-bit K and V
  if (chunk_bytes <= 0 || per_kv_head <= 0) return p.num_qo_heads;
  const int64_t kv_heads = chunk_bytes / per_kv_head > 1 ? chunk_bytes / per_kv_head : 1;
  return kv_heads * group < p.num_qo_heads ? static_cast<int>(kv_heads * group) : p.num_qo_heads;
}

// Block blk of the one-block-per-tile grid of a dense batch (tiles query tiles per request) -> its
// request, query tile and head: request after request, each request's heads in chunks of hc
// (sm90_head_chunk) one chunk after the other, and a chunk's query tiles longest first (back
// from the request's last, which under a causal mask sees the most keys), the chunk's heads side
// by side.
XK_DEVICE void sm90_block_item(const Params& p, int tiles, int hc, int blk, Sm90Item& w) {
  const int per_request = tiles * p.num_qo_heads;
  w.b = blk / per_request;
  const int r = blk - w.b * per_request;
  const int chunk = r / (hc * tiles);
  const int h0 = chunk * hc, r2 = r - chunk * hc * tiles;
  const int nh = min(hc, p.num_qo_heads - h0);  // (the last chunk's heads)
  const int rank = r2 / nh;
  w.h = h0 + (r2 - rank * nh);
  w.tile = tiles - 1 - rank;
}

// Item k of a persistent block of a dense batch: round k gives the grid items k grid .. (k + 1)
// grid - 1, block blk the blk-th of an even round and the blk-th from the end of an odd one
// (zigzag: the blocks that took the longer items of a round take the shorter of the next). Items
// are counted longest first: query tiles back from each request's last (under a causal mask the
// last sees the most keys), then requests, then query heads (those of a kv head side by side,
// reading its keys from L2 together). False once the block has no item left.
template <int kRows, int kKeys>
XK_DEVICE bool sm90_persistent_item(const Params& p, int k, Sm90Item& w) {
  const int tiles = static_cast<int>((p.q_len + kRows - 1) / kRows);
  const int items = tiles * p.batch * p.num_qo_heads;  // < 2^30: the launcher checks
  const int grid = static_cast<int>(gridDim.x), blk = static_cast<int>(blockIdx.x);
  const int i = k * grid + (k % 2 == 0 ? blk : grid - 1 - blk);
  if (i >= items) return false;  // then there is no round k + 1 either
  const int y = i / p.num_qo_heads;
  w.h = i - y * p.num_qo_heads;
  const int rank = y / p.batch;  // query tiles back from the request's last
  w.b = y - rank * p.batch;
  w.tile = tiles - 1 - rank;
  sm90_item<kRows, kKeys>(p, w);
  return true;
}

}  // namespace detail

template <class Tl, typename T, bool kPersistent>
__global__ void __launch_bounds__(Tl::kThreads, 1)
    Sm90AttentionKernel(const __grid_constant__ CUtensorMap map_q,
                        const __grid_constant__ CUtensorMap map_k,
                        const __grid_constant__ CUtensorMap map_v,
                        const __grid_constant__ Params p) {
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __trap();  // wgmma and setmaxnreg exist on sm_90a only; the dispatcher never launches this
#else
  constexpr int kD = Tl::kHeadDim, kKeys = Tl::kKeys, kStages = Tl::kStages;
  constexpr int kChunks = Tl::kChunks;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  __shared__ int tile_of_block[2];
  const uint32_t s_base = (mma::smem_addr(smem_raw) + 1023) & ~1023u;
  const uint32_t s_q = s_base;  // chunk c: (kRows, 64) at s_q + c * kQChunkBytes
  auto s_k = [&](int st) { return s_base + Tl::kQBytes + st * 2 * Tl::kKvBytes; };
  auto s_v = [&](int st) { return s_k(st) + Tl::kKvBytes; };
  const uint32_t bar_q = s_base + Tl::kQBytes + 2 * kStages * Tl::kKvBytes;
  auto bar_k = [&](int st) { return bar_q + 8 * (1 + st); };
  auto bar_v = [&](int st) { return bar_q + 8 * (1 + kStages + st); };
  auto bar_empty = [&](int st) { return bar_q + 8 * (1 + 2 * kStages + st); };

  const uint32_t bar_q_empty = bar_q + 8 * (1 + 3 * kStages);  // persistent: Q free again
  auto bar_empty_v = [&](int st) { return bar_q + 8 * (2 + 3 * kStages + st); };  // kEarlyK

  const int group = p.num_qo_heads / p.num_kv_heads;
  const int wg = static_cast<int>(threadIdx.x) / 128;

  if (threadIdx.x == 0) {
    tma::prefetch_map(&map_q);
    tma::prefetch_map(&map_k);
    tma::prefetch_map(&map_v);
    tma::mbar_init(bar_q, 1);
    for (int s = 0; s < kStages; ++s) {
      tma::mbar_init(bar_k(s), 1);  // the producer's expect_tx
      tma::mbar_init(bar_v(s), 1);
      tma::mbar_init(bar_empty(s), 4 * Tl::kConsumers);  // one arrival per consumer warp
      if constexpr (Tl::kEarlyK) tma::mbar_init(bar_empty_v(s), 4 * Tl::kConsumers);
    }
    if constexpr (kPersistent) {  // likewise, after an item's last S
      tma::mbar_init(bar_q_empty, 4 * Tl::kConsumers);
    }
    tma::mbar_fence_init();
  }
  __syncthreads();
  pdl_wait();  // everything below may read what the previous kernel wrote

  // ---- the item in hand: the block's own (dense: blockIdx.x, sm90_block_item; ragged: query head
  // blockIdx.x, and request and query tile from blockIdx.y), or each of a persistent block's in
  // turn
  detail::Sm90Item w{};
  if constexpr (!kPersistent) {
    if (p.qo_indptr == nullptr) {
      const int tiles = static_cast<int>((p.q_len + Tl::kRows - 1) / Tl::kRows);
      detail::sm90_block_item(p, tiles, detail::sm90_head_chunk(p, int64_t{Tl::kChunkMiB} << 20),
                              static_cast<int>(blockIdx.x), w);
    } else {
      w.h = static_cast<int>(blockIdx.x);
      if (!detail::find_ragged_tile<Tl::kRows>(p, 1, static_cast<int>(blockIdx.y), w.b, w.tile,
                                               tile_of_block)) {
        return;
      }
    }
    detail::sm90_item<Tl::kRows, kKeys>(p, w);
  }
  const bool ragged_kv = p.kv_mode == KvMode::kRagged;

  if (wg == 0) {  // ---- producer
    wgmma::setmaxnreg_dec<Tl::kProducerRegs>();
    if (threadIdx.x == 0) {
      int st = 0;
      uint32_t phase = 0;
      // Q of item w, then its K and V tiles through the stages (tensor-map coordinates: token,
      // batch)
      auto load_item = [&] {
        const int kv_h = w.h / group;
        tma::mbar_arrive_expect_tx(bar_q, Tl::kQBytes);
#pragma unroll
        for (int c = 0; c < kChunks; ++c) {
          tma::load_4d(s_q + c * Tl::kQChunkBytes, &map_q, bar_q, 64 * c, w.h,
                       w.q_begin + w.t_first, w.q_b);
        }
        for (int j = w.j_begin; j < w.j_end; ++j) {
          tma::mbar_wait(bar_empty(st), phase ^ 1);  // a fresh barrier passes parity 1
          const int32_t tok = w.kv_begin + j * kKeys;
          tma::mbar_arrive_expect_tx(bar_k(st), Tl::kKvBytes);
#pragma unroll
          for (int c = 0; c < kChunks; ++c) {
            tma::load_4d(s_k(st) + c * Tl::kKvChunkBytes, &map_k, bar_k(st), 64 * c, kv_h, tok,
                         w.kv_b);
          }
          if constexpr (Tl::kEarlyK) tma::mbar_wait(bar_empty_v(st), phase ^ 1);
          tma::mbar_arrive_expect_tx(bar_v(st), Tl::kKvBytes);
#pragma unroll
          for (int c = 0; c < kChunks; ++c) {
            tma::load_4d(s_v(st) + c * Tl::kKvChunkBytes, &map_v, bar_v(st), 64 * c, kv_h, tok,
                         w.kv_b);
          }
          if (++st == kStages) st = 0, phase ^= 1;
        }
      };
      if constexpr (!kPersistent) {
        load_item();
      } else {
        uint32_t q_phase = 0;
        for (int k = 0; detail::sm90_persistent_item<Tl::kRows, kKeys>(p, k, w); ++k) {
          if (w.j_begin == w.j_end) continue;  // no keys: the consumers write zeros, without Q
          tma::mbar_wait(bar_q_empty, q_phase ^ 1);  // the last item done with Q
          q_phase ^= 1;
          load_item();
        }
      }
    }
    pdl_release();
    return;
  }

  // ---- consumers: warpgroup cw owns rows 64 cw .. 64 cw + 63 of the tile
  wgmma::setmaxnreg_inc<Tl::kConsumerRegs>();
  const int cw = wg - 1;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int warp = (static_cast<int>(threadIdx.x) / 32) % 4;
  const int g = lane / 4, c = lane % 4;
  const int r_lo = 64 * cw + 16 * warp + g;  // this thread's rows: r_lo and r_lo + 8
  // accumulator element (n8 block j, e): row r_lo + 8 (e / 2), column 8 j + 2 c + e % 2
  float o[kD / 2];
#pragma unroll
  for (int i = 0; i < kD / 2; ++i) o[i] = 0.f;
  float m[2] = {-math::kInf, -math::kInf}, l[2] = {0.f, 0.f};
  const float cap = p.logits_soft_cap;
  const float scale2 = (cap > 0.f ? 1.f : p.sm_scale) * math::kLog2e;  // logits -> log2 units
  const float cap_in = cap > 0.f ? p.sm_scale / cap : 0.f;
  const uint32_t q_rows = s_q + cw * 64 * 128;  // this group's 64 rows in each chunk

  // S = Q K^T of tile j in stage st, issued (head_dim / 16 steps of 32 bytes along each
  // 128-byte row) and committed; the caller waits for it
  auto issue_s = [&](float (&s)[kKeys / 2], int st) {
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk) {
      const uint32_t off = 32 * (kk % 4);
      wgmma::mma<kKeys, T>(s, wgmma::desc_sw128(q_rows + (kk / 4) * Tl::kQChunkBytes + off),
                           wgmma::desc_sw128(s_k(st) + (kk / 4) * Tl::kKvChunkBytes + off),
                           kk > 0 ? 1u : 0u);
    }
    wgmma::commit();
  };
  // Soft cap, mask, online softmax of tile j's S: updates m and l, returns in alpha what O must
  // be multiplied by before P V is added (and whether any row of the warp needs it), and leaves
  // P = 2^(s * scale2 - max) in s.
  auto softmax = [&](float (&s)[kKeys / 2], int j, float (&alpha)[2]) -> bool {
    if (cap > 0.f) {
#pragma unroll
      for (int i = 0; i < kKeys / 2; ++i) s[i] = cap * math::tanh_approx(s[i] * cap_in);
    }
    if (j * kKeys < w.full_lo || (j + 1) * kKeys > w.full_hi) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int32_t t = w.t_first + r_lo + 8 * half;
        int32_t lo = 0, hi = w.kv_len;
        if (p.causal) hi = min(hi, t + w.diag + 1);
        if (p.window_left >= 0) lo = t + w.diag - p.window_left;
#pragma unroll
        for (int n = 0; n < kKeys / 8; ++n) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int32_t pos = j * kKeys + 8 * n + 2 * c + e;
            if (pos < lo || pos >= hi) s[4 * n + 2 * half + e] = -math::kInf;
          }
        }
      }
    }
    bool moved = false;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float mx = m[half];
#pragma unroll
      for (int n = 0; n < kKeys / 8; ++n) {
        mx = fmaxf(mx, fmaxf(s[4 * n + 2 * half], s[4 * n + 2 * half + 1]));
      }
      mx = detail::quad_max(mx);
      const float m_use = mx == -math::kInf ? 0.f : mx * scale2;
      alpha[half] = math::ex2_approx(m[half] * scale2 - m_use);
      moved |= alpha[half] != 1.f;
      m[half] = mx;
      float sum = 0.f;
#pragma unroll
      for (int n = 0; n < kKeys / 8; ++n) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float pv = math::ex2_approx(fmaf(s[4 * n + 2 * half + e], scale2, -m_use));
          s[4 * n + 2 * half + e] = pv;
          sum += pv;
        }
      }
      l[half] = l[half] * alpha[half] + sum;
    }
    return __any_sync(0xffffffffu, moved);
  };
  // P (in s) in 16 bits as the A fragments of k steps of 16 keys (n8 blocks 2 ks and 2 ks + 1)
  auto to_a = [&](const float (&s)[kKeys / 2], uint32_t (&pa)[kKeys / 16][4]) {
#pragma unroll
    for (int ks = 0; ks < kKeys / 16; ++ks) {
      pa[ks][0] = mma::pack2<T>(s[8 * ks + 0], s[8 * ks + 1]);
      pa[ks][1] = mma::pack2<T>(s[8 * ks + 2], s[8 * ks + 3]);
      pa[ks][2] = mma::pack2<T>(s[8 * ks + 4], s[8 * ks + 5]);
      pa[ks][3] = mma::pack2<T>(s[8 * ks + 6], s[8 * ks + 7]);
    }
  };
  auto rescale = [&](const float (&alpha)[2]) {  // exact when skipped: ex2(0) = 1
#pragma unroll
    for (int n = 0; n < kD / 8; ++n) {
      o[4 * n + 0] *= alpha[0];
      o[4 * n + 1] *= alpha[0];
      o[4 * n + 2] *= alpha[1];
      o[4 * n + 3] *= alpha[1];
    }
  };
  // Waits for tile j's V (stage st) and clears its rows past a ragged request's keys. Called
  // outside any wgmma batch: ptxas serialises the wgmmas of a batch with such code inside.
  auto ready_v = [&](int j, int st, uint32_t phase) {
    tma::mbar_wait(bar_v(st), phase);
    if (ragged_kv && (j + 1) * kKeys > w.kv_len) {
      // The tile's rows past this request's keys hold the next request's values (or whatever
      // follows the last one): P is 0 there, but 0 x inf or nan is not, so the consumer groups
      // zero those rows first (whole 128-byte rows: the swizzle stays inside a row).
      const int first = w.kv_len - j * kKeys;
      const int n16 = (kKeys - first) * kChunks * 8;  // 16-byte pieces to clear
      for (int i = static_cast<int>(threadIdx.x) - 128; i < n16; i += 128 * Tl::kConsumers) {
        const int r = first + i / (kChunks * 8), ch = (i / 8) % kChunks, x = i % 8;
        const uint32_t dst = s_v(st) + ch * Tl::kKvChunkBytes + r * 128 + x * 16;
        asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};" ::"r"(dst), "r"(0u) : "memory");
      }
      tma::fence_async_shared();  // the zeros visible to the wgmmas (async proxy)
      // every consumer group done clearing
      tma::named_sync(1, 128 * Tl::kConsumers);
    }
  };
  // O += P V of a tile in stage st (its V ready), issued and committed: V's (kKeys, 64) chunks
  // read N-major, 16 keys (2048 bytes) per step
  auto issue_pv = [&](const uint32_t (&pa)[kKeys / 16][4], int st) {
    wgmma::fence_operands(o);
    wgmma::fence();
#pragma unroll
    for (int ks = 0; ks < kKeys / 16; ++ks) {
      wgmma::mma_rs_tb<kD, T>(o, pa[ks],
                              wgmma::desc_sw128_mn(s_v(st) + ks * 16 * 128, Tl::kKvChunkBytes), 1u);
    }
    wgmma::commit();
  };
  // kEarlyK: stage st's K given back to the producer (its S = Q K^T done)
  auto release_k = [&](int st) {
    if constexpr (Tl::kEarlyK) {
      if (lane == 0) tma::mbar_arrive(bar_empty(st));
    }
  };
  // S of tile j (stage st) once its K has landed, computed and waited for
  auto compute_s = [&](float (&s)[kKeys / 2], int st, uint32_t phase) {
    tma::mbar_wait(bar_k(st), phase);
    issue_s(s, st);
    wgmma::wait<0>();
    wgmma::fence_operands(s);
    release_k(st);
  };
  // Waits for every wgmma of this group (the last P V of stage st among them) and gives the stage
  // back to the producer.
  auto finish_pv = [&](uint32_t (&pa)[kKeys / 16][4], int st) {
    wgmma::wait<0>();
    wgmma::fence_operands(o);
#pragma unroll
    for (int ks = 0; ks < kKeys / 16; ++ks) wgmma::fence_operands(pa[ks]);
    if (lane == 0) tma::mbar_arrive(Tl::kEarlyK ? bar_empty_v(st) : bar_empty(st));
  };
  // kSched: group cw's turn to issue (named barrier kBarSched0 + cw), and the hand-over to the
  // next group after; group 0 is let through its first turn at the start, and the last
  // hand-over of the kernel is left unmet (as FlashAttention-3's warp scheduler barrier leaves it)
  constexpr uint32_t kBarSched0 = 2;
  auto take_turn = [&] {
    if constexpr (Tl::kSched) tma::named_sync(kBarSched0 + cw, 256);
  };
  auto pass_turn = [&] {
    if constexpr (Tl::kSched) {
      tma::named_arrive(kBarSched0 + (cw + 1 == Tl::kConsumers ? 0 : cw + 1), 256);
    }
  };
  if constexpr (Tl::kSched) {
    if (cw == 0) tma::named_arrive(kBarSched0, 256);
  }

  // Q given back to the producer (for the next item) once the item's last S is done
  auto release_q = [&](bool last) {
    if constexpr (kPersistent) {
      if (last && lane == 0) tma::mbar_arrive(bar_q_empty);
    }
  };

  int st = 0;
  uint32_t phase = 0, q_phase = 0;
  for (int k = 0;; ++k) {  // the block's item, or each of a persistent block's
    if constexpr (!kPersistent) {
      tma::mbar_wait(bar_q, 0);
    } else {
      if (!detail::sm90_persistent_item<Tl::kRows, kKeys>(p, k, w)) break;
#pragma unroll
      for (int i = 0; i < kD / 2; ++i) o[i] = 0.f;
      m[0] = m[1] = -math::kInf;
      l[0] = l[1] = 0.f;
      if (w.j_begin < w.j_end) {  // else no Q was loaded: zeros
        tma::mbar_wait(bar_q, q_phase);
        q_phase ^= 1;
      }
    }
    const int j_begin = w.j_begin, j_end = w.j_end;
    if constexpr (!Tl::kOverlap) {
      // v1: each tile's S, softmax and P V in turn (the other consumer group fills the gaps)
      for (int j = j_begin; j < j_end; ++j) {
        float s[kKeys / 2];
        compute_s(s, st, phase);
        release_q(j + 1 == j_end);
        uint32_t pa[kKeys / 16][4];
        float alpha[2];
        if (softmax(s, j, alpha)) rescale(alpha);
        to_a(s, pa);
        ready_v(j, st, phase);
        issue_pv(pa, st);
        finish_pv(pa, st);
        if (++st == kStages) st = 0, phase ^= 1;
      }
    } else if (j_begin < j_end) {
      // v2: tile j + 1's S = Q K^T is issued before tile j's P V, and its softmax (in fp32, in
      // place) runs while that P V is on the tensor cores; P's 16-bit A fragments are written
      // only once P V j is done (ptxas serialises wgmmas whose operand registers other code
      // writes while they may be in flight).
      uint32_t pa[kKeys / 16][4];
      float alpha[2];
      bool moved;
      {
        float s[kKeys / 2];
        compute_s(s, st, phase);
        release_q(j_begin + 1 == j_end);
        moved = softmax(s, j_begin, alpha);  // O is 0: its rescale is moot
        to_a(s, pa);
      }
      moved = false;
      for (int j = j_begin; j + 1 < j_end; ++j) {  // every tile but the last: a next one
        const int st1 = st + 1 == kStages ? 0 : st + 1;
        const uint32_t phase1 = st + 1 == kStages ? phase ^ 1 : phase;
        float s[kKeys / 2];
        ready_v(j, st, phase);
        tma::mbar_wait(bar_k(st1), phase1);
        take_turn();
        issue_s(s, st1);
        if (!Tl::kSched && moved) rescale(alpha);  // tile j's, before its P V
        issue_pv(pa, st);
        pass_turn();
        wgmma::wait<1>();  // S of tile j + 1 done; P V j may still run
        wgmma::fence_operands(s);
        release_k(st1);
        release_q(j + 2 == j_end);
        moved = softmax(s, j + 1, alpha);
        finish_pv(pa, st);
        to_a(s, pa);
        if (Tl::kSched && moved) rescale(alpha);  // tile j + 1's, outside the turn
        st = st1, phase = phase1;
      }
      ready_v(j_end - 1, st, phase);  // the last tile's P V
      if (!Tl::kSched && moved) rescale(alpha);
      issue_pv(pa, st);
      finish_pv(pa, st);
      if constexpr (kPersistent) {  // the next item's first tile: the next stage
        if (++st == kStages) st = 0, phase ^= 1;
      }
    }
    if (!kPersistent || k == 0) pdl_release();

    // ---- out and lse of this thread's two rows (0 and -inf for a row that sees no key). The four
    // threads of a row (c = 0..3) hold columns 2 c, 2 c + 1 of every n8 block. At head_dim 128
    // (kWideStores) a 4 x 4 exchange of their packed words in each group of four blocks (shuffles
    // with lanes c ^ 2, then c ^ 1) leaves thread c the 8 columns of block c of the group, written
    // as one 16-byte store (out's rows are 16-byte aligned: Sm90Unsupported): a warp's store covers
    // 64 contiguous bytes of each of its 8 rows where a 4-byte store covered 16, in a quarter of
    // the store instructions and half the L2 sectors. Probe (benchmarks/README.md, sm90 versions):
    // batches of 1024-token requests 3-9% faster, long ones level; head_dim 64 (three groups at
    // 160 registers) lost 1-4% with it, and keeps the 4-byte stores.
    constexpr bool kWideStores = kD == 128;
    T* out = static_cast<T*>(p.out);
    const bool c_hi = (c & 2) != 0, c_lo = (c & 1) != 0;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const float sum = detail::quad_sum(l[half]);
      const int32_t t = w.t_first + r_lo + 8 * half;
      if constexpr (!kWideStores) {
        if (t < w.pad) continue;  // before the request
      }
      const float inv = sum > 0.f ? 1.f / sum : 0.f;
      T* dst = out + w.b * p.out_stride_b + (static_cast<int64_t>(w.q_begin) + t) * p.out_stride_t +
               w.h * p.out_stride_h;
      if constexpr (kWideStores) {
#pragma unroll
        for (int g4 = 0; g4 < kD / 32; ++g4) {
          uint32_t a[4];  // this thread's columns of blocks 4 g4 .. 4 g4 + 3
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            const int n = 4 * g4 + j;
            a[j] = mma::pack2<T>(o[4 * n + 2 * half] * inv, o[4 * n + 2 * half + 1] * inv);
          }
          // with c ^ 2: keep blocks 2 c_hi, 2 c_hi + 1, give the other two
          const uint32_t k0 = c_hi ? a[2] : a[0], k1 = c_hi ? a[3] : a[1];
          const uint32_t r0 = __shfl_xor_sync(0xffffffffu, c_hi ? a[0] : a[2], 2);
          const uint32_t r1 = __shfl_xor_sync(0xffffffffu, c_hi ? a[1] : a[3], 2);
          // with c ^ 1: keep block 2 c_hi + c_lo (this thread's and c ^ 2's columns of it)
          const uint32_t m0 = c_lo ? k1 : k0, m2 = c_lo ? r1 : r0;
          const uint32_t m1 = __shfl_xor_sync(0xffffffffu, c_lo ? k0 : k1, 1);
          const uint32_t m3 = __shfl_xor_sync(0xffffffffu, c_lo ? r0 : r1, 1);
          // m_x holds thread c ^ x's columns, which go to word c ^ x
          const uint32_t e0 = c_lo ? m1 : m0, e1 = c_lo ? m0 : m1;  // words 2 c_hi, 2 c_hi + 1
          const uint32_t e2 = c_lo ? m3 : m2, e3 = c_lo ? m2 : m3;  // the other two
          if (t >= w.pad) {  // (rows before the request are not written)
            const uint4 v = c_hi ? make_uint4(e2, e3, e0, e1) : make_uint4(e0, e1, e2, e3);
            *reinterpret_cast<uint4*>(dst + 8 * (4 * g4 + c)) = v;
          }
        }
      } else {
#pragma unroll
        for (int n = 0; n < kD / 8; ++n) {
          *reinterpret_cast<uint32_t*>(dst + 8 * n + 2 * c) =
              mma::pack2<T>(o[4 * n + 2 * half] * inv, o[4 * n + 2 * half + 1] * inv);
        }
      }
      if (t < w.pad) continue;  // (kWideStores: after the shuffles, which every lane takes)
      if (c == 0 && p.lse != nullptr) {
        const float lse2 = sum > 0.f ? m[half] * scale2 + math::lg2_approx(sum) : -math::kInf;
        p.lse[w.b * p.lse_stride_b + (static_cast<int64_t>(w.q_begin) + t) * p.lse_stride_t + w.h] =
            lse2 * math::kLn2;
      }
    }
    if constexpr (!kPersistent) break;
  }
#endif
}

// Why p cannot take the sm90 kernel, or nullptr when it can: head_dim 64 or 128, dense or ragged
// keys (not paged), no split, and what TMA needs (16-byte aligned q, k and v, strides of whole
// 16-byte chunks). The device (sm_90) is the dispatcher's to check.
inline const char* Sm90Unsupported(const Params& p) {
  if (p.head_dim != 64 && p.head_dim != 128) return "the sm90 kernel takes head_dim 64 or 128";
  if (p.kv_mode == KvMode::kPaged) return "the sm90 kernel takes dense or ragged keys, not pages";
  if ((p.qo_indptr == nullptr) != (p.kv_mode == KvMode::kDense)) {
    return "the sm90 kernel takes dense queries with dense keys or ragged with ragged";
  }
  if (p.num_splits != 1) return "the sm90 kernel does not split keys (num_splits must be 1)";
  for (const void* ptr : {p.q, p.k, p.v}) {
    if (!is_aligned(ptr, 16)) return "the sm90 kernel needs q, k and v 16-byte aligned";
  }
  // its 16-byte stores of out's rows (as the bindings check out: strides of dimensions of one
  // element do not count; other callers may not check)
  const int64_t out_rows = p.qo_indptr == nullptr ? p.q_len : p.total_q;
  if (!is_aligned(p.out, 16) || (out_rows > 1 && p.out_stride_t % 8 != 0) ||
      (p.num_qo_heads > 1 && p.out_stride_h % 8 != 0) ||
      (p.qo_indptr == nullptr && p.batch > 1 && p.out_stride_b % 8 != 0)) {
    return "the sm90 kernel needs out 16-byte aligned, its strides multiples of 8 elements";
  }
  // the strides the tensor maps use (a batch of one has no batch stride to speak of)
  const bool batched = p.qo_indptr == nullptr && p.batch > 1;
  for (int64_t s :
       {p.q_stride_t, p.q_stride_h, p.k_stride_t, p.k_stride_h, p.v_stride_t, p.v_stride_h,
        batched ? p.q_stride_b : 8, batched ? p.k_stride_b : 8, batched ? p.v_stride_b : 8}) {
    if (s % 8 != 0 || s <= 0) {
      return "the sm90 kernel needs q, k and v strides of whole 16-byte chunks (positive "
             "multiples of 8 elements)";
    }
  }
  if (p.total_q >= (int64_t{1} << 31) || p.kv_len >= (int64_t{1} << 31)) {
    return "the sm90 kernel takes fewer than 2^31 tokens";
  }
  const int64_t tiles =
      p.qo_indptr == nullptr ? (p.q_len + 127) / 128 * p.batch : (p.total_q + 127) / 128 + p.batch;
  if (tiles > 65535) return "the sm90 kernel takes at most 65535 query tiles of 128 per head";
  return nullptr;
}

// How the sm90 kernel's blocks take a dense batch's work items (query tile, request, head): one
// block each (v1, v2: the hardware's block scheduler keeps a window of consecutive items in
// flight, request by request), or a persistent grid of one block per SM walking them longest first
// (v3). kAuto: persistent where Sm90PersistentPays. Ragged batches take one block per item.
enum class Sm90Grid { kAuto, kPersistent, kBlockPerTile };

// The persistent grid pays for a dense batch of more items than SMs whose keys and values are at
// most 64 MiB (the longest-first order reads every request's at once; H100 and H200 have 50 and
// 60 MB of L2). Measured on an H100, bf16, one block per tile -> persistent (benchmarks/README.md,
// sm90 versions): b 8 x s 1024 GQA 32/8 d 128 causal 217 -> 175 us, b 16 (64 MiB) 443 -> 350,
// d 64 b 8 149 -> 116, s 8192 16 heads of 64 (32 MiB) 349 -> 344; but MHA b 8 x s 1024 (128 MiB)
// 225 -> 261, and one item per SM gains nothing (b 1 x s 100, 4 heads: 5.8 -> 6.1).
constexpr int64_t kSm90PersistentKvBytes = int64_t{64} << 20;

template <typename T>
bool Sm90PersistentPays(const Params& p, int64_t items, int sm_count) {
  const int64_t kv_bytes =
      2 * p.batch * p.num_kv_heads * p.kv_len * p.head_dim * static_cast<int64_t>(sizeof(T));
  return p.qo_indptr == nullptr && items > sm_count && kv_bytes <= kSm90PersistentKvBytes;
}

// Launches p (Sm90Unsupported(p) == nullptr) on the sm90 kernel; cudaErrorNotSupported when the
// device has too little shared memory or the driver refuses the tensor maps (the dispatcher then
// takes the cp.async kernel).
template <class Tl, typename T>
cudaError_t LaunchSm90Attention(const Params& p, cudaStream_t stream, const DeviceProps& props,
                                Sm90Grid how = Sm90Grid::kAuto) {
  if (Tl::kSmemBytes > props.smem_optin) return cudaErrorNotSupported;  // cp.async instead
  // blocks per head: every tile of a dense batch, or a bound on a ragged batch's (the blocks past
  // the last tile return)
  const int64_t tiles = p.qo_indptr == nullptr ? (p.q_len + Tl::kRows - 1) / Tl::kRows * p.batch
                                               : (p.total_q + Tl::kRows - 1) / Tl::kRows + p.batch;
  if (tiles == 0) return cudaSuccess;
  if (tiles > 65535) return cudaErrorNotSupported;
  const int64_t items = tiles * p.num_qo_heads;  // of a dense batch
  if (items >= (int64_t{1} << 31)) return cudaErrorNotSupported;
  const bool persistent =
      p.qo_indptr == nullptr && items < (int64_t{1} << 30) &&
      (how == Sm90Grid::kPersistent ||
       (how == Sm90Grid::kAuto && Sm90PersistentPays<T>(p, items, props.sm_count)));
  const CUtensorMapDataType type = std::is_same_v<T, __half> ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                                             : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  // [batch, tokens, heads, head_dim] as 4-D maps (dense: batch x q_len or kv_len tokens; ragged:
  // one batch of every token)
  const bool ragged = p.qo_indptr != nullptr;
  const int64_t q_tokens = ragged ? p.total_q : p.q_len, q_batch = ragged ? 1 : p.batch;
  const int64_t kv_batch = ragged ? 1 : p.batch;
  CUtensorMap map_q, map_k, map_v;
  {
    const int64_t dims[4] = {p.head_dim, p.num_qo_heads, q_tokens, q_batch};
    const int64_t strides[3] = {p.q_stride_h, p.q_stride_t,
                                q_batch == 1 ? q_tokens * p.q_stride_t : p.q_stride_b};
    const int box[4] = {64, 1, Tl::kRows, 1};
    if (tma::EncodeTensorMap4d(&map_q, p.q, type, 2, dims, strides, box) != cudaSuccess) {
      return cudaErrorNotSupported;
    }
  }
  if (p.kv_len == 0) {  // no keys: nothing is loaded from k and v (their pointers may be null)
    map_k = map_v = map_q;
  } else {
    const int64_t dims[4] = {p.head_dim, p.num_kv_heads, p.kv_len, kv_batch};
    const int box[4] = {64, 1, Tl::kKeys, 1};
    const int64_t k_strides[3] = {p.k_stride_h, p.k_stride_t,
                                  kv_batch == 1 ? p.kv_len * p.k_stride_t : p.k_stride_b};
    const int64_t v_strides[3] = {p.v_stride_h, p.v_stride_t,
                                  kv_batch == 1 ? p.kv_len * p.v_stride_t : p.v_stride_b};
    if (tma::EncodeTensorMap4d(&map_k, p.k, type, 2, dims, k_strides, box) != cudaSuccess ||
        tma::EncodeTensorMap4d(&map_v, p.v, type, 2, dims, v_strides, box) != cudaSuccess) {
      return cudaErrorNotSupported;
    }
  }
  void (*kernel)(CUtensorMap, CUtensorMap, CUtensorMap, Params) = nullptr;
  // ragged: (heads, tiles); dense: one block per item in a line (sm90_block_item)
  dim3 grid(static_cast<unsigned>(p.num_qo_heads), static_cast<unsigned>(tiles));
  if (!ragged) grid = dim3(static_cast<unsigned>(items));
  if (persistent) {
    XK_CUDA_TRY((SmemOptIn<Sm90AttentionKernel<Tl, T, true>>(Tl::kSmemBytes, &kernel)));
    grid = dim3(static_cast<unsigned>(std::min<int64_t>(items, props.sm_count)));
  } else {
    XK_CUDA_TRY((SmemOptIn<Sm90AttentionKernel<Tl, T, false>>(Tl::kSmemBytes, &kernel)));
  }
  const LaunchConfig lc(grid, dim3(Tl::kThreads), stream, 1, UsePDL(props), Tl::kSmemBytes);
  return cudaLaunchKernelEx(&lc.cfg, kernel, map_q, map_k, map_v, p);
}

}  // namespace xkernels::attention

#endif  // XKERNELS_ATTENTION_SM90_H_
