// Tile shapes of the attention kernel (prefill.h) and the split-KV plan: which shape a call
// takes, and over how many thread blocks each query tile's keys are split.
//
// A call's shape follows from its query rows per (request, kv head): q_len * group, the mean over
// a ragged batch. Decode (one to a few tokens per request, the GQA group packed into the rows)
// takes 16 rows and four warps that each take a quarter of every key tile, so the block streams
// keys at full width with little arithmetic per byte; mid-sized tiles take 16 rows per warp x 4;
// prefill takes 32 rows per warp x 4 (two m16 fragments per warp: half the shared-memory reads of
// K and V per flop of 16 rows).
#ifndef XKERNELS_ATTENTION_DECODE_H_
#define XKERNELS_ATTENTION_DECODE_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "xkernels/attention/prefill.h"
#include "xkernels/common.h"

namespace xkernels::attention {

enum class TileShape { kDecode, kDecodeWide, kMid, kPrefill };

//             head_dim, warp rows, warps q x kv, keys/stage, stages, keys/step, Q in registers
template <int D>
using DecodeTile = Tile<D, 16, 1, 4, 64, (D == 256 ? 2 : 3), 16, D <= 128>;
// When a call's blocks all fit in one wave (one per SM: split-KV, or a batch x kv heads of at most
// the SM count), each block streams its keys alone: 8 warps and 128-key stages keep twice the
// bytes in flight (head_dim 128; H100 bf16, GQA 32/8, page 16: batch 16 over 16384 keys 379.6 ->
// 357.2 us, batch 1 over 32768 in 16 splits 58.6 -> 56.8 us; batch 64, four blocks per SM, is
// better with DecodeTile: 361.7 against 365.4).
template <int D>
using DecodeWideTile = Tile<D, 16, 1, 8, 128, 3, 16, true>;
template <int D>
using MidTile = Tile<D, 16, 4, 1, 64, (D == 256 ? 2 : 3), (D == 256 ? 32 : 64), D <= 128>;
// The pipelined loop (prefill.h, kPipelinedKv; two stages): H100 bf16, TFLOP/s non-causal /
// causal, against the loop before it (d 64 in 3 stages): s 8192 32 x d 128 346 / 309 -> 356 / 324,
// s 4096 GQA 32/8 d 128 335 / 287 -> 353 / 292, s 8192 16 x d 64 314 / 258 -> 336 / 271.
// Rows padded at head_dim 64 (Tile::kPadRows; 55296 bytes of shared memory against 49152):
// s 8192 16 x d 64 328.9 / 274.3 swizzled -> 339.7 / 276.0 (at head_dim 128 the swizzle is faster:
// 371.4 / 329.3 against 359.6 / 327.7 padded).
template <int D>
using PrefillTile = Tile<D, 32, 4, 1, 64, 2, 64, D == 64, D == 128, true, D == 64>;

inline TileShape ChooseShape(int64_t head_dim, int64_t rows_per_request) {
  if (rows_per_request <= 16) return TileShape::kDecode;
  if (rows_per_request <= 64 || head_dim > 128) return TileShape::kMid;
  return TileShape::kPrefill;
}

// Query rows per (request, kv head), rounded up: the mean over the batch.
inline int64_t RowsPerRequest(int64_t total_q, int64_t batch, int64_t group) {
  return batch > 0 ? (total_q * group + batch - 1) / batch : 0;
}

// Calls f(Tile{}) with the tile type of (head_dim, shape); cudaErrorInvalidValue for a head_dim
// that was not compiled (the bindings refuse those first).
template <class F>
cudaError_t DispatchTile(int64_t head_dim, TileShape shape, F&& f) {
  auto by_shape = [&](auto d) -> cudaError_t {
    constexpr int D = decltype(d)::value;
    switch (shape) {
      case TileShape::kDecode:
        return f(DecodeTile<D>{});
      case TileShape::kDecodeWide:
        if constexpr (D == 128) return f(DecodeWideTile<D>{});
        return f(DecodeTile<D>{});
      case TileShape::kMid:
        return f(MidTile<D>{});
      case TileShape::kPrefill:
        if constexpr (D <= 128) return f(PrefillTile<D>{});
        return f(MidTile<D>{});
    }
    return cudaErrorInvalidValue;
  };
  switch (head_dim) {
    case 64:
      return by_shape(std::integral_constant<int, 64>{});
    case 128:
      return by_shape(std::integral_constant<int, 128>{});
    case 256:
      return by_shape(std::integral_constant<int, 256>{});
    default:
      return cudaErrorInvalidValue;
  }
}

// The kernel of a tile, its dynamic shared memory raised once per device (above 48 KB a block
// must opt in).
template <class Tl, typename T, bool kGeneric = true>
cudaError_t PreparedKernel(void (**kernel)(Params)) {
  return SmemOptIn<AttentionKernel<Tl, T, kGeneric>>(Tl::kSmemBytes, kernel);
}

// Whether a call of `shape` whose grid is `blocks` thread blocks (query tiles x kv heads x
// splits) takes the wide decode tile: head_dim 128, and one wave of one block per SM where that
// tile's shared memory fits (the dispatcher in attention.h, and PlanSplits below).
inline bool WideDecode(int64_t head_dim, TileShape shape, int64_t blocks,
                       const DeviceProps& props) {
  return shape == TileShape::kDecode && head_dim == 128 && blocks <= props.sm_count &&
         DecodeWideTile<128>::kSmemBytes <= props.smem_optin;
}

// What the split decision depends on, from shapes alone (so that it needs no device memory).
struct Geometry {
  int64_t batch, total_q, num_qo_heads, num_kv_heads, head_dim;
  int64_t kv_len;  // keys per request: exact for a dense batch, the mean otherwise
};

// The number of splits for a call on the current device: 1 when the query tiles alone give 90%
// of the SMs a block; otherwise enough that they do (at most one per key tile). Fewer,
// longer blocks beat more, shorter ones: H100, bf16 decode of batch 1 over 32768 keys (GQA 32/8,
// 8 query tiles): 16 splits (one block per SM) 58.2 us, 33 (two per SM) 62.5, 66 81.2, 132 113.0.
// Then, where that gives one wave of the wide tile (head_dim 128; Attention), twice the splits
// when each block keeps at least 2048 keys (4096 where the call was not split: the merge kernel
// it adds), so that the four-warp tile runs two blocks per SM (H200, benchmarks/decode_probe.cu
// PROBE_SET=wave, GPU-91cfa4ff, bf16 GQA 32/8, pages of 16, us, the wide tile -> twice the splits:
// batch 16 over 16384 keys 260.3 -> 250.3, 8 over 32768 263.7 -> 250.8, 4 over 32768 137.7 ->
// 130.6, 8 over 8192 73.8 -> 70.6; with fewer keys a block it did not pay: 16 over 4096 70.5 ->
// 70.7, 16 over 2048 38.4 -> 40.4, 1 over 8192 13.9 -> 14.5, 1 over 32768 41.3 -> 41.0).
inline cudaError_t PlanSplits(const Geometry& g, int32_t* splits) {
  *splits = 1;
  if (g.batch <= 0 || g.num_kv_heads <= 0 || g.total_q <= 0) return cudaSuccess;
  DeviceProps props;
  XK_CUDA_TRY(GetDeviceProps(&props));
  const int64_t group = g.num_qo_heads / g.num_kv_heads;
  const int64_t rows = RowsPerRequest(g.total_q, g.batch, group);
  return DispatchTile(g.head_dim, ChooseShape(g.head_dim, rows), [&](auto tile) -> cudaError_t {
    using Tl = decltype(tile);
    const int64_t want = (9 * static_cast<int64_t>(props.sm_count) + 9) / 10;
    const int64_t blocks = g.batch * ((rows + Tl::kRows - 1) / Tl::kRows) * g.num_kv_heads;
    const int64_t kv_tiles = std::max<int64_t>(1, (g.kv_len + Tl::kTileKv - 1) / Tl::kTileKv);
    int64_t s = 1;
    if (blocks < want) {
      // as many splits as keep every block in one wave (8 tiles: 16 splits, 128 blocks, not 15
      // and 120), else the fewest that reach 90%
      const int64_t fit = props.sm_count / blocks;
      s = std::min<int64_t>({blocks * fit >= want ? fit : (want + blocks - 1) / blocks, kv_tiles,
                             1024});
    }
    if (WideDecode(g.head_dim, ChooseShape(g.head_dim, rows), blocks * s, props) &&
        2 * blocks * s > props.sm_count && 2 * s <= std::min<int64_t>(kv_tiles, 1024) &&
        g.kv_len >= 2 * s * (s > 1 ? 2048 : 4096)) {
      s *= 2;
    }
    *splits = static_cast<int32_t>(s);
    return cudaSuccess;
  });
}

}  // namespace xkernels::attention

#endif  // XKERNELS_ATTENTION_DECODE_H_
