// The attention tile kernel (FlashAttention-2 style), for prefill and, with a decode-shaped tile
// (attention/decode.h), for decode: one thread block computes a tile of query rows of one
// (request, kv head) over a range of that request's keys.
//
// - Rows. The query heads of a kv head are packed into the rows (row R -> token R / group, head
//   kv_head * group + R % group), so one pass over a key tile serves the whole GQA group.
// - Q is loaded once (cp.async into a swizzled tile) and held in registers as mma A fragments.
// - Keys and values stream through a ring of kStages shared-memory stages filled by cp.async (one
//   commit group per tile; pipeline.h; the prefill tiles: one for K and one for V, Tile's
//   kPipelinedKv): S = Q K^T and O += P V run on tensor cores (mma.h) while the next tiles load.
// - Online softmax in registers: running max and sum per row, O rescaled when the max moves; one
//   normalisation at the end. Logits are scaled by sm_scale * log2(e) so that exp is ex2.approx.
// - Causal and windowed tiles past the diagonal or before the window are skipped (the key range is
//   cut before the loop); only tiles that straddle a boundary are masked.
// - Split-KV: with num_splits > 1, blockIdx.z takes a share of the key tiles and writes its
//   normalised partial output and log2-sum-exp to the workspace (merge.h combines them).
// Warps are laid out kWarpsQ (query rows) x kWarpsKv (each a slice of every key tile); with
// kWarpsKv > 1 the warps' states are merged through shared memory at the end.
#ifndef XKERNELS_ATTENTION_PREFILL_H_
#define XKERNELS_ATTENTION_PREFILL_H_

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "xkernels/attention/params.h"
#include "xkernels/common.h"
#include "xkernels/math.h"
#include "xkernels/mma.h"
#include "xkernels/pipeline.h"
#include "xkernels/swizzle.h"

namespace xkernels::attention {

// A tile shape. kWarpRows query rows per warp (16 or 32: one or two m16 fragments), kWarpsQ x
// kWarpsKv warps, kTileKv keys per stage (kTileKv / kWarpsKv per warp, processed kKvStep at a
// time: the registers of S), kStages stages, Q in registers or in shared memory.
template <int kHeadDim_, int kWarpRows_, int kWarpsQ_, int kWarpsKv_, int kTileKv_, int kStages_,
          int kKvStep_, bool kQInRegs_, bool kRowSumMma_ = false, bool kPipelinedKv_ = false,
          bool kPadRows_ = false>
struct Tile {
  static constexpr int kHeadDim = kHeadDim_, kWarpRows = kWarpRows_, kWarpsQ = kWarpsQ_;
  static constexpr int kWarpsKv = kWarpsKv_, kTileKv = kTileKv_, kStages = kStages_;
  static constexpr int kKvStep = kKvStep_;
  // Q's A fragments held in registers for the whole loop, or read from shared memory for each
  // product (32 rows x 128 head dims: Q's 64 registers, O's 128 and S's do not fit in 255).
  static constexpr bool kQInRegs = kQInRegs_;
  // The softmax's row sums as P x ones on the tensor cores (the sum of the 16-bit P that the
  // P V product uses) instead of FADDs on every element: one mma chain per key step.
  static constexpr bool kRowSumMma = kRowSumMma_;
  // The prefill loop (v4): a tile's K and V in separate commit groups (S = Q K^T waits for K
  // only, P V for V; the next tile's K and V, issued after the softmax, load under P V and the
  // next S), copies predicated rather than branched around (zero-filled past the last tile), O
  // rescaled at every tile, and the tiles that need no mask run a body compiled without it: no
  // branch inside a tile's body.
  // Two stages. With Q read from shared memory (head_dim 128: 255 registers), the ldmatrix lanes
  // take one register each (SwizzledLane1). Few values live across the tiles (no spills in the
  // loop): the unmasked tiles in a loop of their own, K / V source pointers carried and stepped,
  // one limit for the zero fill, the stage toggled by XOR, the row sums' chain from C = l.
  // Unmasked tile, sm_90a SASS: d 128 911 -> 838 instructions (13 -> 0 LDL), d 64 643 -> 608
  // (2 -> 0; with kPadRows). H100 bf16 TFLOP/s non-causal / causal: s 8192 32 x d 128 354.6 /
  // 321.3 -> 371.4 / 329.3, s 4096 GQA 32/8 d 128 346.2 / 293.8 -> 350.6 / 304.8 (bit-identical).
  static constexpr bool kPipelinedKv = kPipelinedKv_;
  static constexpr bool kCompactLanes = kPipelinedKv && !kQInRegs;
  // Rows of Q, K and V in shared memory padded by 16 bytes instead of XOR-swizzled (swizzle.h):
  // consecutive rows start 4 banks apart, so the 8 rows an ldmatrix reads (and the chunks of a
  // cp.async) still fall in distinct banks, and with no XOR every ldmatrix address of a thread is
  // one register plus an immediate (no per-lane chunk offsets).
  static constexpr bool kPadRows = kPadRows_;
  static constexpr int kThreads = 32 * kWarpsQ * kWarpsKv;
  static constexpr int kRows = kWarpRows * kWarpsQ;   // query rows of the block
  static constexpr int kMmaM = kWarpRows / 16;        // m16 fragments per warp
  static constexpr int kWarpKv = kTileKv / kWarpsKv;  // keys per warp per tile
  static constexpr int kChunks = kHeadDim / 8;        // 16-byte chunks per row
  static constexpr int kRowBytes = kChunks * 16 + (kPadRows ? 16 : 0);
  static constexpr int kRowStep = kThreads / kChunks;  // rows between a thread's cp.async chunks
  static constexpr int kQBytes = kRows * kRowBytes;
  static constexpr int kKvBytes = kTileKv * kRowBytes;  // K (or V) of one stage
  // States of kWarpsKv warps, merged at the end: o [kWarpsKv][kRows][kHeadDim] and (m, l).
  static constexpr int kMergeBytes = kWarpsKv > 1 ? kWarpsKv * kRows * (kHeadDim + 2) * 4 : 0;
  static constexpr int kPipeBytes = kQBytes + 2 * kStages * kKvBytes;
  static constexpr int kSmemBytes = kPipeBytes > kMergeBytes ? kPipeBytes : kMergeBytes;

  static_assert(kWarpRows == 16 || kWarpRows == 32, "one or two m16 fragments per warp");
  static_assert(kHeadDim % 64 == 0, "head_dim a multiple of 64 (rows of 8+ chunks)");
  static_assert(kWarpKv % kKvStep == 0 && kKvStep % 16 == 0, "key steps of 16");
  static_assert(kThreads % kChunks == 0, "a thread loads one chunk column of every tile");
  static_assert((kRows * kChunks) % kThreads == 0 && (kTileKv * kChunks) % kThreads == 0,
                "tiles split evenly over the threads");
  static_assert(kStages >= 2, "at least double buffering");
  static_assert(!kPipelinedKv || kStages == 2, "the pipelined K / V groups assume two stages");
};

namespace detail {

XK_HOST_DEVICE int32_t clamp32(int64_t x, int64_t lo, int64_t hi) {
  return static_cast<int32_t>(x < lo ? lo : (x > hi ? hi : x));
}

// Where one request's keys and values start, and how many it has (indices from device memory are
// clamped to the tensors' extents, so that bad ones cannot cause out-of-bounds accesses).
struct KvRange {
  int64_t k_base, v_base;  // element offsets of token 0 of this kv head (dense, ragged)
  int32_t page_begin;      // kPaged: first entry of kv_indices
  int32_t len;
};

XK_DEVICE KvRange kv_range(const Params& p, int b, int kv_head) {
  KvRange r{kv_head * p.k_stride_h, kv_head * p.v_stride_h, 0, 0};
  switch (p.kv_mode) {
    case KvMode::kDense:
      r.k_base += b * p.k_stride_b;
      r.v_base += b * p.v_stride_b;
      r.len = static_cast<int32_t>(p.kv_len);
      break;
    case KvMode::kRagged: {
      const int32_t lo = clamp32(p.kv_indptr[b], 0, p.kv_len);
      const int32_t hi = clamp32(p.kv_indptr[b + 1], lo, p.kv_len);
      r.k_base += lo * p.k_stride_t;
      r.v_base += lo * p.v_stride_t;
      r.len = hi - lo;
      break;
    }
    case KvMode::kPaged: {
      const int32_t lo = clamp32(p.kv_indptr[b], 0, p.kv_indices_len);
      const int32_t pages = clamp32(p.kv_indptr[b + 1], lo, p.kv_indices_len) - lo;
      const int32_t last = clamp32(p.kv_last_page_len[b], 0, p.page_size);
      r.page_begin = lo;
      r.len = pages ? (pages - 1) * p.page_size + last : 0;
      break;
    }
  }
  return r;
}

// Element offset of key position `pos` (< len) from k (or v, with its strides) in a paged cache.
XK_DEVICE int64_t paged_offset(const Params& p, const KvRange& r, int32_t pos, int64_t stride_page,
                               int64_t stride_token) {
  const uint32_t page_no = p.page_div.div(static_cast<uint32_t>(pos));
  const int32_t page = clamp32(p.kv_indices[r.page_begin + page_no], 0, p.kv_len - 1);
  return page * stride_page + (pos - static_cast<int32_t>(page_no) * p.page_size) * stride_token;
}

XK_DEVICE float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
XK_DEVICE float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// The offsets one thread's ldmatrix rows take in a tile of padded rows (Tile::kPadRows): its row
// `row` at chunk b, everything else an immediate (SwizzledLane's interface).
template <int kRowBytes>
struct PaddedLane {
  uint32_t off;  // bytes from the tile's base: chunk b of the thread's row

  XK_DEVICE PaddedLane(int row, int b) : off(static_cast<uint32_t>(row * kRowBytes + b * 16)) {}
  XK_DEVICE uint32_t at(int rows_down, int chunk) const {
    return off + static_cast<uint32_t>(rows_down * kRowBytes + chunk * 16);
  }
};

// Finds this block's (request, query tile) among a ragged batch: the blocks of request b are its
// ceil(q_len(b) * group / kRows) tiles, in order over the batch. Warp 0 scans qo_indptr 32
// requests at a time. Returns false for blocks past the last tile.
template <int kRows>
XK_DEVICE bool find_ragged_tile(const Params& p, int group, int block, int& b, int& tile,
                                int* shared) {
  if (threadIdx.x < 32) {
    const int lane = threadIdx.x;
    int left = block, found_b = -1, found_tile = 0;
    for (int base = 0; base < p.batch && found_b < 0; base += 32) {
      const int bb = base + lane;
      int n = 0;
      if (bb < p.batch) {
        const int32_t lo = clamp32(p.qo_indptr[bb], 0, p.total_q);
        const int32_t hi = clamp32(p.qo_indptr[bb + 1], lo, p.total_q);
        n = static_cast<int>((static_cast<int64_t>(hi - lo) * group + kRows - 1) / kRows);
      }
      int incl = n;
#pragma unroll
      for (int d = 1; d < 32; d *= 2) {
        const int y = __shfl_up_sync(0xffffffffu, incl, d);
        if (lane >= d) incl += y;
      }
      const int total = __shfl_sync(0xffffffffu, incl, 31);
      if (left < total) {
        const unsigned hit = __ballot_sync(0xffffffffu, left < incl);
        const int first = __ffs(hit) - 1;
        found_b = base + first;
        found_tile =
            left - (__shfl_sync(0xffffffffu, incl, first) - __shfl_sync(0xffffffffu, n, first));
        // tiles of a request run last first: under a causal mask they have the most keys
        found_tile = __shfl_sync(0xffffffffu, n, first) - 1 - found_tile;
      }
      left -= total;
    }
    if (lane == 0) {
      shared[0] = found_b;
      shared[1] = found_tile;
    }
  }
  __syncthreads();
  b = shared[0];
  tile = shared[1];
  return b >= 0;
}

}  // namespace detail

// kGeneric: the KV layout (dense / ragged or paged) and the soft cap are read from p at run time;
// false compiles a dense or ragged KV without soft cap only (the pipelined tiles' common case;
// DenseKernelRuns).
template <class Tl, typename T, bool kGeneric = true>
__global__ void __launch_bounds__(Tl::kThreads, 1)
    AttentionKernel(const __grid_constant__ Params p) {
  constexpr int kD = Tl::kHeadDim, kMmaM = Tl::kMmaM, kChunks = Tl::kChunks;
  constexpr int kStages = Tl::kStages, kTileKv = Tl::kTileKv, kStep = Tl::kKvStep;
  constexpr int kDTiles = kD / 8;  // n8 fragments of a row of O
  constexpr bool kPipe = Tl::kPipelinedKv;
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ int tile_of_block[2];

  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int wq = warp % Tl::kWarpsQ, wk = warp / Tl::kWarpsQ;
  const int g = lane / 4, c = lane % 4;
  const int kv_head = blockIdx.y, split = blockIdx.z;
  const int group = p.num_qo_heads / p.num_kv_heads;

  pdl_wait();  // everything below may read what the previous kernel wrote

  // ---- which request and query tile
  int b, tile;
  if (p.qo_indptr == nullptr) {
    const int tiles = static_cast<int>((p.q_len * group + Tl::kRows - 1) / Tl::kRows);
    b = blockIdx.x / tiles;
    tile = tiles - 1 - static_cast<int>(blockIdx.x % tiles);
  } else if (!detail::find_ragged_tile<Tl::kRows>(p, group, blockIdx.x, b, tile, tile_of_block)) {
    return;
  }
  int64_t q_begin = 0;
  int32_t q_len = static_cast<int32_t>(p.q_len);
  if (p.qo_indptr != nullptr) {
    q_begin = detail::clamp32(p.qo_indptr[b], 0, p.total_q);
    q_len = detail::clamp32(p.qo_indptr[b + 1], q_begin, p.total_q) - static_cast<int32_t>(q_begin);
  }
  const int64_t row0 = static_cast<int64_t>(tile) * Tl::kRows;  // first packed row of the tile
  const int32_t t_first = static_cast<int32_t>(row0 / group);
  const int32_t t_last =
      static_cast<int32_t>(min(static_cast<int64_t>(q_len) - 1, (row0 + Tl::kRows - 1) / group));
  const detail::KvRange kv = detail::kv_range(p, b, kv_head);

  // ---- the keys this block attends to: [kv_lo, kv_hi) cut by the mask, then this split's share
  const int32_t diag = kv.len - q_len;  // query t sees keys <= t + diag (causal)
  int32_t kv_lo = 0, kv_hi = kv.len;
  if (p.causal) kv_hi = max(0, min(kv_hi, t_last + diag + 1));
  if (p.window_left >= 0) kv_lo = max(0, t_first + diag - p.window_left);
  int j_begin = kv_lo / kTileKv, j_end = kv_hi > kv_lo ? (kv_hi + kTileKv - 1) / kTileKv : j_begin;
  if (p.num_splits > 1) {
    const int per = (j_end - j_begin + p.num_splits - 1) / p.num_splits;
    j_begin = min(j_end, j_begin + split * per);
    j_end = min(j_end, j_begin + per);
  }
  // Keys every row of the tile sees: tiles inside [full_lo, full_hi) need no mask.
  int32_t full_lo = 0, full_hi = kv.len;
  if (p.causal) full_hi = max(0, min(full_hi, t_first + diag + 1));
  if (p.window_left >= 0) full_lo = t_last + diag - p.window_left;

  // ---- shared memory: Q, then kStages stages of K and V (a stage: K, then V), rows of kRowBytes
  // (XOR-swizzled, or padded: Tl::kPadRows)
  constexpr int kRowBytes = Tl::kRowBytes, kKvBytes = Tl::kKvBytes;
  constexpr uint32_t kStageBytes = 2 * kKvBytes;
  auto row_at = [](int row, int ch) -> uint32_t {  // bytes of logical chunk ch of a tile's row
    if constexpr (Tl::kPadRows) return static_cast<uint32_t>(row * kRowBytes + ch * 16);
    return SwizzledTile<kTileKv, kChunks>{0}.at(row, ch);
  };
  const uint32_t s_base = mma::smem_addr(smem), s_kv = s_base + Tl::kQBytes;
  const T* q = static_cast<const T*>(p.q);
  const T* k = static_cast<const T*>(p.k);
  const T* v = static_cast<const T*>(p.v);
  const int chunk = tid % kChunks;  // the 16-byte column this thread loads in every tile
  const int first_row = tid / kChunks;
  constexpr int kRowStep = Tl::kRowStep, kLoadRows = kTileKv / kRowStep;

  // Q rows: packed row R -> token R / group, head kv_head * group + R % group (zero past q_len)
#pragma unroll
  for (int n = 0; n < Tl::kRows / kRowStep; ++n) {
    const int r = first_row + n * kRowStep;
    const int64_t R = row0 + r;
    const int32_t t = static_cast<int32_t>(R / group);
    const int h = kv_head * group + static_cast<int>(R % group);
    const bool valid = t < q_len;
    const T* src = q + b * p.q_stride_b + (q_begin + (valid ? t : 0)) * p.q_stride_t +
                   h * p.q_stride_h + chunk * 8;
    pipeline::cp_async_16(s_base + row_at(r, chunk), valid ? src : q, valid);
  }
  pipeline::commit();

  // K and V: the thread's rows first_row + n * kRowStep (n < kLoadRows) of every tile, at
  // stage_row(n) in a stage (rows 8k apart share their swizzle: one offset plus an immediate).
  auto stage_row = [&](int n) -> uint32_t {
    if constexpr (Tl::kPadRows || kRowStep % 8 == 0) {
      return row_at(first_row, chunk) + n * kRowStep * kRowBytes;
    }
    return row_at(first_row + n * kRowStep, chunk);
  };
  // Positions >= lim are zero-filled: past the request's keys, and all of a tile >= j_end.
  const int32_t lim = min(kv.len, j_end * kTileKv);
  // Dense, ragged: kp / vp at the thread's first row of the next tile to issue (tiles are issued
  // in order; each issue steps them past its tile), kRowStep rows a step of k_step / v_step
  // bytes: 32 bits in the dense kernel (one IMAD.WIDE a row; larger strides run on the generic
  // one, DenseKernelRuns).
  using Step = std::conditional_t<kGeneric, uint64_t, uint32_t>;
  const Step k_step = static_cast<Step>(kRowStep * p.k_stride_t * sizeof(T));
  const Step v_step = static_cast<Step>(kRowStep * p.v_stride_t * sizeof(T));
  auto step_rows = [](const T* ptr, Step step, int n) {
    return reinterpret_cast<const T*>(reinterpret_cast<uint64_t>(ptr) +
                                      static_cast<uint64_t>(step) * n);
  };
  const T* k_row0 = k + kv.k_base + chunk * 8;  // key 0 of this thread's column (paged: page 0)
  const T* v_row0 = v + kv.v_base + chunk * 8;
  const T* kp = k_row0 + static_cast<int64_t>(j_begin * kTileKv + first_row) * p.k_stride_t;
  const T* vp = v_row0 + static_cast<int64_t>(j_begin * kTileKv + first_row) * p.v_stride_t;
  const bool paged = kGeneric && p.kv_mode == KvMode::kPaged;
  // Tile j's keys (load_k) and values (load_v) into the stage `stage` bytes past the first.
  auto issue = [&](int j, uint32_t stage, bool load_k, bool load_v) {
    const uint32_t dk = s_kv + stage, dv = dk + kKvBytes;
    const int32_t rem = lim - (j * kTileKv + first_row);  // row n valid while n * kRowStep < rem
    if (paged) {
#pragma unroll
      for (int n = 0; n < kLoadRows; ++n) {
        const bool valid = n * kRowStep < rem;
        const int32_t at = valid ? j * kTileKv + first_row + n * kRowStep : 0;  // (kv.len > 0)
        if (load_k) {
          pipeline::cp_async_16(
              dk + stage_row(n),
              k_row0 + detail::paged_offset(p, kv, at, p.k_stride_b, p.k_stride_t), valid);
        }
        if (load_v) {
          pipeline::cp_async_16(
              dv + stage_row(n),
              v_row0 + detail::paged_offset(p, kv, at, p.v_stride_b, p.v_stride_t), valid);
        }
      }
    } else {
#pragma unroll
      for (int n = 0; n < kLoadRows; ++n) {
        const bool valid = n * kRowStep < rem;
        if (load_k) pipeline::cp_async_16(dk + stage_row(n), step_rows(kp, k_step, n), valid);
        if (load_v) pipeline::cp_async_16(dv + stage_row(n), step_rows(vp, v_step, n), valid);
      }
      if (load_k) kp = step_rows(kp, k_step, kLoadRows);
      if (load_v) vp = step_rows(vp, v_step, kLoadRows);
    }
  };
  if constexpr (kPipe) {  // K of the first tile, then its V: two groups
    if (j_begin < j_end) issue(j_begin, 0, true, false);
    pipeline::commit();
    if (j_begin < j_end) issue(j_begin, 0, false, true);
    pipeline::commit();
  } else {
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
      if (j_begin + s < j_end) issue(j_begin + s, s * kStageBytes, true, true);
      pipeline::commit();
    }
  }

  // ---- Q's A fragments of rows wq * kWarpRows .. + kWarpRows: into registers once, or from
  // shared memory at every product (q_at)
  using Lane = std::conditional_t<
      Tl::kPadRows, detail::PaddedLane<kRowBytes>,
      std::conditional_t<Tl::kCompactLanes, SwizzledLane1<kChunks>, SwizzledLane<kChunks>>>;
  const Lane q_lane(wq * Tl::kWarpRows + (lane % 8) + ((lane / 8) % 2) * 8, lane / 16);
  auto q_at = [&](int mi, int kk) { return s_base + q_lane.at(mi * 16, 2 * kk); };
  // the thread's ldmatrix rows of K (B operand: keys as n) and V (transposed B: keys as k)
  const Lane k_lane(wk * Tl::kWarpKv + (lane % 8) + (lane / 16) * 8, (lane / 8) % 2);
  const Lane v_lane(wk * Tl::kWarpKv + (lane % 8) + ((lane / 8) % 2) * 8, lane / 16);
  constexpr int kQRegSteps = Tl::kQInRegs ? kD / 16 : 1;
  uint32_t q_frag[kMmaM][kQRegSteps][4];      // (m16 fragment, k16 step, A registers)
  pipeline::wait<kPipe ? 2 : kStages - 1>();  // Q landed
  __syncthreads();
  if constexpr (Tl::kQInRegs) {
#pragma unroll
    for (int mi = 0; mi < kMmaM; ++mi) {
#pragma unroll
      for (int kk = 0; kk < kD / 16; ++kk) mma::ldmatrix_x4(q_frag[mi][kk], q_at(mi, kk));
    }
  }

  // ---- the running state of this thread's rows: (mi, half) -> row g + 8 * half of fragment mi
  float o[kMmaM][kDTiles][4];  // (m16 fragment, n8 of head_dim, C registers)
  float m[kMmaM][2], l[kMmaM][2];
#pragma unroll
  for (int mi = 0; mi < kMmaM; ++mi) {
#pragma unroll
    for (int dn = 0; dn < kDTiles; ++dn)
      o[mi][dn][0] = o[mi][dn][1] = o[mi][dn][2] = o[mi][dn][3] = 0.f;
    m[mi][0] = m[mi][1] = -math::kInf;
    l[mi][0] = l[mi][1] = 0.f;
  }
  const float cap = kGeneric ? p.logits_soft_cap : 0.f;
  const float scale2 = (cap > 0.f ? 1.f : p.sm_scale) * math::kLog2e;  // logits -> log2 units
  const float cap_in = cap > 0.f ? p.sm_scale / cap : 0.f;

  // ---- the key tiles: tile j's body, its mask kMask (kNoMask, kMasked, or kCheck: decided per
  // tile at run time). Tile j's stage is `stage` bytes past the first, carried from tile to tile.
  enum { kNoMask, kMasked, kCheck };
  uint32_t stage = 0;
  auto advance = [](uint32_t st, int n) -> uint32_t {  // the stage of the tile n after st's
    if constexpr (kStages == 2) return n % 2 ? st ^ kStageBytes : st;  // the other one: XOR
    const uint32_t x = st + n * kStageBytes;
    return x >= kStages * kStageBytes ? x - kStages * kStageBytes : x;
  };
  auto tile_body = [&](int j, auto mask_kind) {
    constexpr int kMask = decltype(mask_kind)::value;
    const uint32_t stage_next = advance(stage, 1);
    if constexpr (kPipe) {
      pipeline::wait<1>();  // tile j's K landed (its V may still be in flight)
      __syncthreads();      // ... for every warp; and every warp is done with tile j - 1's slots
    } else {
      pipeline::wait<kStages - 2>();
      __syncthreads();  // tile j visible to all; every warp done with tile j - 1's slot
      if (j + kStages - 1 < j_end) issue(j + kStages - 1, advance(stage, kStages - 1), true, true);
      pipeline::commit();
    }
    const uint32_t tk = s_kv + stage, tv = tk + kKvBytes;
    const bool masked =
        kMask == kCheck ? j * kTileKv < full_lo || (j + 1) * kTileKv > full_hi : kMask == kMasked;

#pragma unroll
    for (int step = 0; step < Tl::kWarpKv / kStep; ++step) {
      const int col0 = wk * Tl::kWarpKv + step * kStep;  // first key of this step, in the tile
      float s[kMmaM][kStep / 8][4];                      // (m16, n8 of keys, C registers)
#pragma unroll
      for (int mi = 0; mi < kMmaM; ++mi) {
#pragma unroll
        for (int n = 0; n < kStep / 8; ++n)
          s[mi][n][0] = s[mi][n][1] = s[mi][n][2] = s[mi][n][3] = 0.f;
      }
      // S = Q K^T
#pragma unroll
      for (int kk = 0; kk < kD / 16; ++kk) {
        constexpr int kQ = 0;
        if constexpr (!Tl::kQInRegs) {
#pragma unroll
          for (int mi = 0; mi < kMmaM; ++mi) mma::ldmatrix_x4(q_frag[mi][kQ], q_at(mi, kk));
        }
        const int qk = Tl::kQInRegs ? kk : kQ;
#pragma unroll
        for (int n2 = 0; n2 < kStep / 16; ++n2) {
          uint32_t kb[4];
          mma::ldmatrix_x4(kb, tk + k_lane.at(step * kStep + n2 * 16, 2 * kk));
#pragma unroll
          for (int mi = 0; mi < kMmaM; ++mi) {
            mma::mma_m16n8k16<T>(s[mi][2 * n2], q_frag[mi][qk], kb[0], kb[1]);
            mma::mma_m16n8k16<T>(s[mi][2 * n2 + 1], q_frag[mi][qk], kb[2], kb[3]);
          }
        }
      }
      // soft cap, then the mask on boundary tiles
      if (kGeneric && cap > 0.f) {
#pragma unroll
        for (int mi = 0; mi < kMmaM; ++mi)
#pragma unroll
          for (int n = 0; n < kStep / 8; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) s[mi][n][e] = cap * math::tanh_approx(s[mi][n][e] * cap_in);
      }
      if (masked) {
#pragma unroll
        for (int mi = 0; mi < kMmaM; ++mi) {
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            const int32_t t =
                static_cast<int32_t>((row0 + wq * Tl::kWarpRows + mi * 16 + g + 8 * half) / group);
            int32_t lo = 0, hi = kv.len;
            if (p.causal) hi = min(hi, t + diag + 1);
            if (p.window_left >= 0) lo = t + diag - p.window_left;
#pragma unroll
            for (int n = 0; n < kStep / 8; ++n) {
#pragma unroll
              for (int e = 0; e < 2; ++e) {
                const int32_t pos = j * kTileKv + col0 + n * 8 + 2 * c + e;
                if (pos < lo || pos >= hi) s[mi][n][2 * half + e] = -math::kInf;
              }
            }
          }
        }
      }
      // online softmax: new max per row, rescale the sum and O, P = 2^(s * scale2 - max)
      float alpha[kMmaM][2];
      bool moved = false;
#pragma unroll
      for (int mi = 0; mi < kMmaM; ++mi) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          float mx = m[mi][half];
#pragma unroll
          for (int n = 0; n < kStep / 8; ++n) {
            mx = fmaxf(mx, fmaxf(s[mi][n][2 * half], s[mi][n][2 * half + 1]));
          }
          mx = detail::quad_max(mx);
          const float m_use = mx == -math::kInf ? 0.f : mx * scale2;
          alpha[mi][half] = math::ex2_approx(m[mi][half] * scale2 - m_use);
          moved |= alpha[mi][half] != 1.f;
          m[mi][half] = mx;
          float sum = 0.f;
#pragma unroll
          for (int n = 0; n < kStep / 8; ++n) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const float pv = math::ex2_approx(fmaf(s[mi][n][2 * half + e], scale2, -m_use));
              s[mi][n][2 * half + e] = pv;
              if constexpr (!Tl::kRowSumMma) sum += pv;
            }
          }
          l[mi][half] = l[mi][half] * alpha[mi][half] + sum;
        }
      }
      // O's rescale: at every tile in the pipelined loop (no branch), else only when a row's max
      // moved somewhere in the warp (rare after the first tiles; exact, since ex2(0) = 1)
      if (kPipe || __any_sync(0xffffffffu, moved)) {
#pragma unroll
        for (int mi = 0; mi < kMmaM; ++mi) {
#pragma unroll
          for (int dn = 0; dn < kDTiles; ++dn) {
            o[mi][dn][0] *= alpha[mi][0];
            o[mi][dn][1] *= alpha[mi][0];
            o[mi][dn][2] *= alpha[mi][1];
            o[mi][dn][3] *= alpha[mi][1];
          }
        }
      }
      if constexpr (kPipe) {
        if (step == 0) {
          // tile j + 1's K and V into tile j - 1's slots (free since the barrier at the top),
          // issued here, where the tensor cores have the other warps' products to run, rather
          // than before S = Q K^T (H100, probe, two runs: head_dim 64 batches of 500-2048-token
          // requests 1.5-4% faster, head_dim 128 level; zeros past j_end)
          issue(j + 1, stage_next, true, false);
          pipeline::commit();
          issue(j + 1, stage_next, false, true);
          pipeline::commit();
          pipeline::wait<2>();  // tile j's V landed (tile j + 1's K and V may be in flight)
          __syncthreads();
        }
      }
      // O += P V; kRowSumMma: l += P x ones on the tensor cores, one mma chain per step from
      // C = l (rs: (m16, C registers); l = rs[0], rs[2] after the step)
      [[maybe_unused]] float rs[kMmaM][4];
#pragma unroll
      for (int ks = 0; ks < kStep / 16; ++ks) {
        uint32_t pa[kMmaM][4];
#pragma unroll
        for (int mi = 0; mi < kMmaM; ++mi) {
          mma::c_to_a<T>(pa[mi], s[mi][2 * ks], s[mi][2 * ks + 1]);
          if constexpr (Tl::kRowSumMma) {
            if (ks == 0) {
              mma::rowsum_m16k16<T, true>(rs[mi], pa[mi], l[mi][0], l[mi][1]);
            } else {
              mma::rowsum_m16k16<T, false>(rs[mi], pa[mi], 0.f, 0.f);
            }
          }
        }
#pragma unroll
        for (int dn2 = 0; dn2 < kD / 16; ++dn2) {
          uint32_t vb[4];
          mma::ldmatrix_x4_trans(vb, tv + v_lane.at(step * kStep + ks * 16, 2 * dn2));
#pragma unroll
          for (int mi = 0; mi < kMmaM; ++mi) {
            mma::mma_m16n8k16<T>(o[mi][2 * dn2], pa[mi], vb[0], vb[1]);
            mma::mma_m16n8k16<T>(o[mi][2 * dn2 + 1], pa[mi], vb[2], vb[3]);
          }
        }
      }
      if constexpr (Tl::kRowSumMma) {
#pragma unroll
        for (int mi = 0; mi < kMmaM; ++mi) {
          l[mi][0] = rs[mi][0];
          l[mi][1] = rs[mi][2];
        }
      }
    }
    stage = stage_next;
  };
  if constexpr (kPipe) {  // the tiles inside [u0, u1) need no mask: a loop of their own
    const int u0 = min(j_end, max(j_begin, full_lo > 0 ? (full_lo + kTileKv - 1) / kTileKv : 0));
    const int u1 = max(u0, min(j_end, max(0, full_hi) / kTileKv));
    for (int j = j_begin; j < j_end;) {
      if (j >= u0 && j < u1) {
        for (; j < u1; ++j) tile_body(j, std::integral_constant<int, kNoMask>{});
      } else {
        tile_body(j++, std::integral_constant<int, kMasked>{});
      }
    }
  } else {
    for (int j = j_begin; j < j_end; ++j) tile_body(j, std::integral_constant<int, kCheck>{});
  }
  pipeline::wait<0>();
  pdl_release();

  // ---- finish: the rows' sums over the quad; merge the kv warps; write out and lse
  if constexpr (!Tl::kRowSumMma) {  // per-thread partial sums of the row's columns
#pragma unroll
    for (int mi = 0; mi < kMmaM; ++mi) {
      l[mi][0] = detail::quad_sum(l[mi][0]);
      l[mi][1] = detail::quad_sum(l[mi][1]);
    }
  }
  const bool partial = p.num_splits > 1;
  T* out = static_cast<T*>(p.out);
  const int64_t ws_head = p.head_dim;  // workspace strides (params.h)
  const int64_t ws_row = static_cast<int64_t>(p.num_qo_heads) * p.head_dim;
  const int64_t ws_split = p.total_q * ws_row;
  float* ws_lse = p.workspace + p.num_splits * ws_split;
  // Writes row `r` (packed, in the tile) of the result: `get(d)` gives o (unnormalised) at d.
  auto row_dest = [&](int r, int32_t& t, int& h, int64_t& grow) {
    const int64_t R = row0 + r;
    t = static_cast<int32_t>(R / group);
    h = kv_head * group + static_cast<int>(R % group);
    grow = (p.qo_indptr != nullptr ? q_begin : static_cast<int64_t>(b) * p.q_len) + t;
  };

  if constexpr (Tl::kWarpsKv == 1) {
#pragma unroll
    for (int mi = 0; mi < kMmaM; ++mi) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int r = wq * Tl::kWarpRows + mi * 16 + g + 8 * half;
        int32_t t;
        int h;
        int64_t grow;
        row_dest(r, t, h, grow);
        if (t >= q_len) continue;
        const float sum = l[mi][half];
        const float inv = sum > 0.f ? 1.f / sum : 0.f;
        const float lse2 = sum > 0.f ? m[mi][half] * scale2 + math::lg2_approx(sum) : -math::kInf;
        if (partial) {
          float* dst = p.workspace + split * ws_split + grow * ws_row + h * ws_head;
#pragma unroll
          for (int dn = 0; dn < kDTiles; ++dn) {
            *reinterpret_cast<float2*>(dst + dn * 8 + 2 * c) =
                make_float2(o[mi][dn][2 * half] * inv, o[mi][dn][2 * half + 1] * inv);
          }
          if (c == 0) ws_lse[split * p.total_q * p.num_qo_heads + grow * p.num_qo_heads + h] = lse2;
        } else {
          T* dst = out + b * p.out_stride_b + (q_begin + t) * p.out_stride_t + h * p.out_stride_h;
#pragma unroll
          for (int dn = 0; dn < kDTiles; ++dn) {
            *reinterpret_cast<uint32_t*>(dst + dn * 8 + 2 * c) =
                mma::pack2<T>(o[mi][dn][2 * half] * inv, o[mi][dn][2 * half + 1] * inv);
          }
          if (c == 0 && p.lse != nullptr) {
            p.lse[b * p.lse_stride_b + (q_begin + t) * p.lse_stride_t + h] = lse2 * math::kLn2;
          }
        }
      }
    }
  } else {
    // The kv warps hold states of the same rows over different keys: each writes (o, m, l) of
    // its rows to shared memory (the stages are free now), then every thread merges some rows.
    __syncthreads();
    float* so = reinterpret_cast<float*>(smem);       // [kWarpsKv][kRows][kD]
    float* sml = so + Tl::kWarpsKv * Tl::kRows * kD;  // [kWarpsKv][kRows][2]
#pragma unroll
    for (int mi = 0; mi < kMmaM; ++mi) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int r = wq * Tl::kWarpRows + mi * 16 + g + 8 * half;
        float* dst = so + (wk * Tl::kRows + r) * kD;
#pragma unroll
        for (int dn = 0; dn < kDTiles; ++dn) {
          *reinterpret_cast<float2*>(dst + dn * 8 + 2 * c) =
              make_float2(o[mi][dn][2 * half], o[mi][dn][2 * half + 1]);
        }
        if (c == 0) {
          sml[(wk * Tl::kRows + r) * 2] =
              m[mi][half] == -math::kInf ? -math::kInf : m[mi][half] * scale2;
          sml[(wk * Tl::kRows + r) * 2 + 1] = l[mi][half];
        }
      }
    }
    __syncthreads();
    constexpr int kVecs = kD / 4;  // float4 columns of a row
    for (int i = tid; i < Tl::kRows * kVecs; i += Tl::kThreads) {
      const int r = i / kVecs, d = (i % kVecs) * 4;
      int32_t t;
      int h;
      int64_t grow;
      row_dest(r, t, h, grow);
      if (t >= q_len) continue;
      float mx = -math::kInf;
#pragma unroll
      for (int w = 0; w < Tl::kWarpsKv; ++w) mx = fmaxf(mx, sml[(w * Tl::kRows + r) * 2]);
      const float m_use = mx == -math::kInf ? 0.f : mx;
      float sum = 0.f;
      float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
      for (int w = 0; w < Tl::kWarpsKv; ++w) {
        const float wgt = math::ex2_approx(sml[(w * Tl::kRows + r) * 2] - m_use);
        sum += wgt * sml[(w * Tl::kRows + r) * 2 + 1];
        const float4 x = *reinterpret_cast<const float4*>(so + (w * Tl::kRows + r) * kD + d);
        acc.x += wgt * x.x, acc.y += wgt * x.y, acc.z += wgt * x.z, acc.w += wgt * x.w;
      }
      const float inv = sum > 0.f ? 1.f / sum : 0.f;
      const float lse2 = sum > 0.f ? m_use + math::lg2_approx(sum) : -math::kInf;
      if (partial) {
        float* dst = p.workspace + split * ws_split + grow * ws_row + h * ws_head + d;
        *reinterpret_cast<float4*>(dst) =
            make_float4(acc.x * inv, acc.y * inv, acc.z * inv, acc.w * inv);
        if (d == 0) ws_lse[split * p.total_q * p.num_qo_heads + grow * p.num_qo_heads + h] = lse2;
      } else {
        T* dst = out + b * p.out_stride_b + (q_begin + t) * p.out_stride_t + h * p.out_stride_h + d;
        uint2 packed;
        packed.x = mma::pack2<T>(acc.x * inv, acc.y * inv);
        packed.y = mma::pack2<T>(acc.z * inv, acc.w * inv);
        *reinterpret_cast<uint2*>(dst) = packed;
        if (d == 0 && p.lse != nullptr) {
          p.lse[b * p.lse_stride_b + (q_begin + t) * p.lse_stride_t + h] = lse2 * math::kLn2;
        }
      }
    }
  }
}

// Whether AttentionKernel<Tl, T, false> runs p: a dense or ragged KV without soft cap, whose
// byte steps of Tl::kRowStep rows fit its 32-bit steps.
template <class Tl, typename T>
inline bool DenseKernelRuns(const Params& p) {
  constexpr int64_t kMaxStride = (int64_t{1} << 32) / (Tl::kRowStep * sizeof(T));
  auto fits = [](int64_t stride) { return stride >= 0 && stride < kMaxStride; };
  return p.kv_mode != KvMode::kPaged && !(p.logits_soft_cap > 0.f) && fits(p.k_stride_t) &&
         fits(p.v_stride_t);
}

}  // namespace xkernels::attention

#endif  // XKERNELS_ATTENTION_PREFILL_H_
