// An XOR-swizzled shared-memory tile of rows of 16-byte chunks, with no bank conflicts for the
// accesses of tiled matrix code.
//
// Row r's logical chunk c lives at physical chunk c ^ (r % 8) of the row. ldmatrix reads one
// logical chunk of 8 consecutive rows per 8 x 8 matrix: the XOR puts those 8 chunks in 8 distinct
// 16-byte bank groups (a row of 8 or more chunks spans all 32 banks every 8 chunks), so the 8
// rows are read in one wavefront; and the lanes of a cp.async that write one row's chunks still
// write distinct chunks. No padding, so the tile stays a multiple of 128 bytes per row.
#ifndef XKERNELS_SWIZZLE_H_
#define XKERNELS_SWIZZLE_H_

#include <cstdint>

#include "xkernels/common.h"

namespace xkernels {

// kRows x kChunks 16-byte chunks (kChunks >= 8, a power of two); `base` a shared-window address.
template <int kRows, int kChunks>
struct SwizzledTile {
  static_assert(kChunks >= 8 && (kChunks & (kChunks - 1)) == 0, "rows of 8, 16, 32 ... chunks");
  static constexpr int kBytes = kRows * kChunks * 16;

  uint32_t base;

  // The shared-window address of logical chunk `chunk` of row `row`.
  XK_DEVICE uint32_t at(int row, int chunk) const {
    return base + static_cast<uint32_t>((row * kChunks + (chunk ^ (row & 7))) * 16);
  }
};

// The offsets one thread's ldmatrix rows take in a SwizzledTile: the thread's row `row` (and rows
// 8k below it) at logical chunks 2j + b (+ 8i), b in {0, 1} fixed per thread. The XOR touches
// only the low three bits of the chunk, so the physical chunk is 8i + (2j ^ ((row % 8) ^ b)):
// four per-thread offsets (j mod 4), everything else an immediate. Computing them once keeps the
// unrolled loops of tiled code to a few address registers.
template <int kChunks>
struct SwizzledLane {
  uint32_t off[4];  // bytes from the tile's base: chunks 2j + b of the thread's row, j < 4

  XK_DEVICE SwizzledLane(int row, int b) {
    const int y = (row & 7) ^ b;
#pragma unroll
    for (int j = 0; j < 4; ++j)
      off[j] = static_cast<uint32_t>((row * kChunks + ((2 * j) ^ y)) * 16);
  }
  // Logical chunk `chunk` + b (chunk even) of the row `rows_down` (a multiple of 8) below. In
  // unrolled loops both are constants: one register plus an immediate.
  XK_DEVICE uint32_t at(int rows_down, int chunk) const {
    return off[(chunk / 2) % 4] + static_cast<uint32_t>((rows_down * kChunks + chunk / 8 * 8) * 16);
  }
};

// SwizzledLane in one register: chunk 2j + b of the row sits at offset off0 ^ (j << 5), off0 that
// of chunk b (the row starts at a multiple of 128 bytes, and XOR-ing 2j into the chunk touches
// bits 5-6 of the byte offset only). One register where SwizzledLane holds four, for one LOP3 per
// address: for code short of registers.
template <int kChunks>
struct SwizzledLane1 {
  uint32_t off0;  // bytes from the tile's base: chunk b of the thread's row

  XK_DEVICE SwizzledLane1(int row, int b)
      : off0(static_cast<uint32_t>((row * kChunks + ((row & 7) ^ b)) * 16)) {}
  XK_DEVICE uint32_t at(int rows_down, int chunk) const {
    return (off0 ^ static_cast<uint32_t>(((chunk / 2) % 4) << 5)) +
           static_cast<uint32_t>((rows_down * kChunks + chunk / 8 * 8) * 16);
  }
};

}  // namespace xkernels

#endif  // XKERNELS_SWIZZLE_H_
