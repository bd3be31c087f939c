// Quantisation to e4m3 with scales (params.h, QuantParams): per tensor, per row, per 1 x 128 block
// of a row, per 128 x 128 block.
//
//   scale = amax / 448 over the group (1 where the group is all zeros, or amax / 448 underflows)
//   q     = x / scale rounded to float32, then to the nearest e4m3, saturating at +-448
//           (cvt.rn.satfinite): the bits of the host implementation and reference.py
//
// The quotient is x * (1 / scale) corrected by two FMAs (Divisor): exact, where a division per
// value added a range check, a slow-path branch and 3 more FMAs (SASS of the kBlock kernel, bf16:
// 600 instructions with the plain product, 664 corrected, 944 with div.rn), and the plain product
// x * (1 / scale) differs from the rounded quotient in about a quarter of the values (then, rarely,
// in q). NaNs are left out of the amax (fmaxf) and quantise to NaN.
//
// Memory-bound (a bf16 8192 x 8192 tensor moves 192 MiB: 64 us at the H100's ~3000 GB/s copy
// rate). Each thread owns chunks of 16 consecutive values of a row (16-bit x: two 16-byte loads,
// fp32: four; one 16-byte store of q), kept in registers in x's storage type between the amax and
// the quantisation, so that x is read from memory once:
//   kBlock    the 8 lanes of a 1 x 128 block reduce by shuffles; rows are split over blocks of
//             threads as the elementwise ops split them, two chunks per thread in flight
//   kRow      one row per block, held in registers (2 or 4 chunks a thread: 16-bit rows up to
//             65536 values, fp32 and unaligned rows up to 32768); lane groups of a warp for rows
//             of <= 512 values; longer rows read twice (the second pass mostly from L2)
//   kBlock2d  one 128 x 128 tile per block of 256 threads, 4 chunks a thread
//   kTensor   the amax of the whole tensor is needed before any value is quantised, and it must
//             stay graph-capturable with no host copy: a memset of the scale, a persistent kernel
//             whose blocks each atomicMax amax / 448 into it as the float's bits (non-negative
//             floats order as their bits, and rounding is monotone, so the max of the blocks'
//             amax / 448 is the tensor's amax / 448), then the kBlock kernel with that one scale,
//             over the rows in reverse order: it starts on the rows the first kernel read last,
//             which the L2 (50 MB on the H100) may still hold. x is read twice.
// Any rows and cols: 16-byte loads where x's rows are 16-byte aligned and cols is a
// multiple of 16 bytes of x (q's rows aligned to as many bytes as that is values), else one value
// at a time. A 1 x 128 block or tile that overhangs the row or the matrix takes the amax of the
// values inside it.
#ifndef XKERNELS_GEMM_QUANT_H_
#define XKERNELS_GEMM_QUANT_H_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cfloat>
#include <cstdint>
#include <type_traits>

#include "xkernels/common.h"
#include "xkernels/gemm/params.h"
#include "xkernels/reduce.h"
#include "xkernels/vec.h"

namespace xkernels::gemm {
namespace quant {

constexpr int kChunk = 16;                         // values of a row per thread
constexpr int kBlockLanes = kScaleBlock / kChunk;  // lanes of a 1 x 128 block
constexpr int kChunkThreads = 256;                 // BlockKernel, TensorAmaxKernel: most threads
constexpr int kLatencyThreads = 64;                // BlockKernel in grids of a few chunks per SM
constexpr int kGroupThreads = 256;                 // RowGroupKernel
constexpr int kRowThreads = 1024;                  // RowKernel: most threads
constexpr int kLongThreads = 512;                  // RowLongKernel (1024 spilled, scalar path)
constexpr int kTileThreads = 256;                  // Block2dKernel
constexpr int kAmaxThreadsPerSm = 2048;            // TensorAmaxKernel: one wave (32 registers)
constexpr int64_t kMaxGridY = 65535;
static_assert(kScaleBlock % kChunk == 0 && 32 % kBlockLanes == 0,
              "the lanes of a 1 x 128 block are an aligned group of one warp");

// 1 x 128 blocks (or 128 x 128 tiles) along n values (ceil_div is host-only without
// --expt-relaxed-constexpr, and the header compiles without it).
XK_DEVICE int64_t ScaleBlocks(int64_t n) { return (n + kScaleBlock - 1) / kScaleBlock; }

struct Max {
  XK_DEVICE float operator()(float a, float b) const { return fmaxf(a, b); }
};

// A group's scale from its amax: divided by 448 (not multiplied by a rounded 1 / 448); 1 for an
// all-zero group, and where amax / 448 underflows.
XK_DEVICE float ScaleOf(float amax) {
  const float s = __fdiv_rn(amax, kE4M3Max);
  return s == 0.f ? 1.f : s;
}

// x / scale rounded to float32, for many x of one group. Markstein's correction: with inv the
// rounded reciprocal, y = x * inv is within an ulp of x / scale, r = x - y * scale is exact (an
// FMA), and y + r * inv rounds to the rounded quotient (checked against exact rational arithmetic
// over 240,000 quotients, hard divisors included). Exact for normal scales; where the scale is
// denormal (amax < 448 * 2^-126) the last bit of a quotient may differ, which moves q only at an
// e4m3 rounding boundary. inv is kept finite: a denormal scale's reciprocal overflows, and 0 * inf
// would turn the group's zeros into NaNs. An infinite scale (x holds an infinity) corrects by 0,
// so that finite values quantise to 0 as x / inf does, not to NaN (0 * inf).
XK_DEVICE float FiniteReciprocal(float x) { return fminf(__frcp_rn(x), FLT_MAX); }

struct Divisor {
  float s, inv;
  XK_DEVICE explicit Divisor(float scale)
      : s(scale <= FLT_MAX ? scale : 0.f), inv(FiniteReciprocal(scale)) {}
  XK_DEVICE float operator()(float x) const {
    const float y = x * inv;
    // the sign of x: the correction's sum turns a quotient of -0 into +0 (seen on the H100 with
    // float16 -0.0 inputs: e4m3 0x00 where x / scale gives 0x80)
    return copysignf(fmaf(fmaf(-y, s, x), inv, y), x);
  }
};

// One thread's kChunk consecutive values of a row, in x's storage type (half the registers of
// floats for 16-bit x). kVec: loads of 16 bytes, which needs x's rows 16-byte aligned and cols a
// multiple of kV (so each load is whole inside the row or whole outside it), and q's rows
// kV-byte aligned; else one value at a time.
template <typename T, bool kVec>
struct Chunk {
  static constexpr int kV = kVec ? vec16<T>() : 1;  // values per load
  static constexpr int kLoads = kChunk / kV;
  Vec<T, kV> v[kLoads];  // (kLoads, kV)

  XK_DEVICE float at(int k) const {
    if constexpr (kVec && std::is_same_v<T, __nv_bfloat16>) {
      // From the bits of the 32-bit word that holds it: cuda_bf16's conversion is inline asm on
      // a 16-bit register, and with it the words were split in two registers each right at the
      // loads (RowKernel<bf16, 4 chunks> spilled at 64 registers, Block2dKernel<bf16> took 105;
      // from the words, 60 and 63, as fp16's 56 and 55).
      uint32_t w;
      memcpy(&w, &v[k / kV][(k % kV) & ~1], 4);
      return __uint_as_float(k % 2 ? w & 0xffff0000u : w << 16);
    } else {
      return to_float(v[k / kV][k % kV]);
    }
  }

  // Values [c, c + kChunk) of the row at x; those at or past cols, and all of them when !ok, read
  // as zeros (x is not touched then).
  XK_DEVICE void load(const T* x, int64_t c, int64_t cols, bool ok) {
#pragma unroll
    for (int i = 0; i < kLoads; ++i) {
      if (ok && c + i * kV < cols) {
        v[i].load(x + c + i * kV);
      } else {
#pragma unroll
        for (int k = 0; k < kV; ++k) v[i][k] = from_float<T>(0.f);
      }
    }
  }

  XK_DEVICE float amax() const {
    if constexpr (kVec && sizeof(T) == 2) {
      // On packed pairs in the storage type (exact: a max picks one of its inputs; NaNs lose,
      // as in fmaxf): 8 instructions instead of 16 conversions and 16 maxima.
      using T2 = std::conditional_t<std::is_same_v<T, __half>, __half2, __nv_bfloat162>;
      T2 m = __habs2(*reinterpret_cast<const T2*>(&v[0][0]));
#pragma unroll
      for (int k = 1; k < kChunk / 2; ++k) {
        m = __hmax2(m, __habs2(*reinterpret_cast<const T2*>(&v[2 * k / kV][2 * k % kV])));
      }
      return fmaxf(to_float(m.x), to_float(m.y));
    } else {
      float m = 0.f;
#pragma unroll
      for (int k = 0; k < kChunk; ++k) m = fmaxf(m, fabsf(at(k)));
      return m;
    }
  }

  // q[c, c + kChunk) (those < cols) = e4m3(value / scale), with c < cols: in one 16-byte store
  // where the chunk is whole and q + c is 16-byte aligned, else in kV-byte pieces (kVec), else by
  // byte.
  XK_DEVICE void store(uint8_t* q, int64_t c, int64_t cols, const Divisor& d) const {
    uint32_t w[kChunk / 4];  // e4m3 bytes, value k in byte k % 4 of word k / 4 (little endian)
#pragma unroll
    for (int i = 0; i < kChunk / 4; ++i) {
      const uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2(d(at(4 * i)), d(at(4 * i + 1))),
                                                   __NV_SATFINITE, __NV_E4M3);
      const uint32_t hi = __nv_cvt_float2_to_fp8x2(make_float2(d(at(4 * i + 2)), d(at(4 * i + 3))),
                                                   __NV_SATFINITE, __NV_E4M3);
      w[i] = lo | (hi << 16);
    }
    uint8_t* dst = q + c;
    if constexpr (kVec) {
      if (c + kChunk <= cols && reinterpret_cast<uintptr_t>(dst) % 16 == 0) {
        *reinterpret_cast<uint4*>(dst) = make_uint4(w[0], w[1], w[2], w[3]);
      } else if constexpr (kV == 8) {
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          if (c + 8 * i < cols) {
            *reinterpret_cast<uint2*>(dst + 8 * i) = make_uint2(w[2 * i], w[2 * i + 1]);
          }
        }
      } else {
        static_assert(kV == 4, "16-bit or fp32 x");
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          if (c + 4 * i < cols) *reinterpret_cast<uint32_t*>(dst + 4 * i) = w[i];
        }
      }
    } else {
#pragma unroll
      for (int k = 0; k < kChunk; ++k) {
        if (c + k < cols) dst[k] = static_cast<uint8_t>(w[k / 4] >> (8 * (k % 4)));
      }
    }
  }
};

template <typename T>
XK_DEVICE const T* XRow(const QuantParams& p, int64_t r) {
  return static_cast<const T*>(p.x) + r * p.ldx;
}
XK_DEVICE uint8_t* QRow(const QuantParams& p, int64_t r) {
  return static_cast<uint8_t*>(p.q) + r * p.ldq;
}

// Column of this thread's u-th chunk of a row split over gridDim.x blocks, kU chunks a thread
// (each u a contiguous span of the block's chunks, so every load instruction is coalesced).
template <int kU>
XK_DEVICE int64_t ChunkColumn(int u) {
  return ((static_cast<int64_t>(blockIdx.x) * kU + u) * blockDim.x + threadIdx.x) * kChunk;
}

// kBlock (kTensorScale false): every 1 x 128 block of a row scaled by its own amax, reduced over
// its 8 lanes. kTensor's second pass (kTensorScale): every value by the scale TensorAmaxKernel left
// in scale[0] (0 there means an all-zero tensor: scale 1, written back by one thread; the others
// read 0 or 1 and quantise alike), rows in reverse order (see the top of this file).
// Grid: (blocks per row, rows up to kMaxGridY); blockDim a multiple of 32.
template <typename T, bool kVec, bool kTensorScale>
__global__ void __launch_bounds__(kChunkThreads) BlockKernel(const QuantParams p) {
  constexpr int kU = 2;
  const int64_t rows = p.rows, cols = p.cols;
  const int64_t scale_ld = p.scale_ld > 0 ? p.scale_ld : ScaleBlocks(cols);
  pdl_wait();
  pdl_release();
  float tensor_scale = 1.f;
  if constexpr (kTensorScale) {
    const float s = *reinterpret_cast<const volatile float*>(p.scale);
    if (s == 0.f && blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) {
      atomicCAS(reinterpret_cast<unsigned*>(p.scale), 0u, __float_as_uint(1.f));
    }
    tensor_scale = s == 0.f ? 1.f : s;
  }
  const Divisor tensor_div(tensor_scale);
  for (int64_t i = blockIdx.y; i < rows; i += gridDim.y) {
    const int64_t r = kTensorScale ? rows - 1 - i : i;
    const T* x = XRow<T>(p, r);
    uint8_t* q = QRow(p, r);
    Chunk<T, kVec> ch[kU];
    int64_t c[kU];
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      c[u] = ChunkColumn<kU>(u);
      ch[u].load(x, c[u], cols, c[u] < cols);
    }
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      Divisor d = tensor_div;
      if constexpr (!kTensorScale) {
        // every lane shuffles, those past the row with zeros
        const float s = ScaleOf(reduce::warp_all_reduce(ch[u].amax(), Max{}, kBlockLanes));
        d = Divisor(s);
        if (c[u] < cols && threadIdx.x % kBlockLanes == 0) {
          p.scale[r * scale_ld + c[u] / kScaleBlock] = s;
        }
      }
      if (c[u] < cols) ch[u].store(q, c[u], cols, d);
    }
  }
}

// kTensor's first pass: each block's amax over the rows it visits (a persistent grid, so that the
// atomics are a few per SM), atomicMax-ed as amax / 448 into scale[0], which the launcher zeroed.
template <typename T, bool kVec>
__global__ void __launch_bounds__(kChunkThreads) TensorAmaxKernel(const QuantParams p) {
  constexpr int kU = 4;  // 128 bytes of 16-bit x in flight per thread
  __shared__ float red[32];
  const int64_t rows = p.rows, cols = p.cols;
  pdl_wait();
  pdl_release();
  float m = 0.f;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const T* x = XRow<T>(p, r);
    Chunk<T, kVec> ch[kU];
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int64_t c = ChunkColumn<kU>(u);
      ch[u].load(x, c, cols, c < cols);
    }
#pragma unroll
    for (int u = 0; u < kU; ++u) m = fmaxf(m, ch[u].amax());
  }
  m = reduce::BlockReducer<>{red}(m, Max{});
  if (threadIdx.x == 0 && m > 0.f) {
    atomicMax(reinterpret_cast<unsigned*>(p.scale), __float_as_uint(__fdiv_rn(m, kE4M3Max)));
  }
}

// kRow, rows of 33 chunks or more: one row per block, kC chunks a thread held in registers.
template <typename T, bool kVec, int kC>
__global__ void __launch_bounds__(kRowThreads) RowKernel(const QuantParams p) {
  __shared__ float red[32];
  const int64_t rows = p.rows, cols = p.cols;
  pdl_wait();
  pdl_release();
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* x = XRow<T>(p, r);
    Chunk<T, kVec> ch[kC];
    int64_t c[kC];
    float m = 0.f;
#pragma unroll
    for (int j = 0; j < kC; ++j) {
      c[j] = (static_cast<int64_t>(j) * blockDim.x + threadIdx.x) * kChunk;
      ch[j].load(x, c[j], cols, c[j] < cols);
    }
#pragma unroll
    for (int j = 0; j < kC; ++j) m = fmaxf(m, ch[j].amax());
    const float s = ScaleOf(reduce::BlockReducer<>{red}(m, Max{}));  // ends with a barrier
    const Divisor d(s);
    if (threadIdx.x == 0) p.scale[r] = s;
    uint8_t* q = QRow(p, r);
#pragma unroll
    for (int j = 0; j < kC; ++j) {
      if (c[j] < cols) ch[j].store(q, c[j], cols, d);
    }
  }
}

// kRow, rows of at most 32 chunks: `lanes` (a power of two <= 32, one chunk each) per row,
// kGroupThreads / lanes rows per block.
template <typename T, bool kVec>
__global__ void __launch_bounds__(kGroupThreads) RowGroupKernel(const QuantParams p, int lanes) {
  const int64_t rows = p.rows, cols = p.cols;
  const int per_block = kGroupThreads / lanes;
  const int64_t c = static_cast<int64_t>(threadIdx.x % lanes) * kChunk;
  pdl_wait();
  pdl_release();
  for (int64_t r0 = static_cast<int64_t>(blockIdx.x) * per_block; r0 < rows;
       r0 += static_cast<int64_t>(gridDim.x) * per_block) {  // the same trips for the whole block
    const int64_t r = r0 + threadIdx.x / lanes;
    const bool row_ok = r < rows;
    Chunk<T, kVec> ch;
    ch.load(XRow<T>(p, row_ok ? r : 0), c, cols, row_ok && c < cols);
    const float s = ScaleOf(reduce::warp_all_reduce(ch.amax(), Max{}, lanes));
    if (!row_ok) continue;
    if (threadIdx.x % lanes == 0) p.scale[r] = s;
    if (c < cols) ch.store(QRow(p, r), c, cols, Divisor(s));
  }
}

// kRow, rows longer than RowKernel holds: one row per block, read twice (amax, then quantise).
template <typename T, bool kVec>
__global__ void __launch_bounds__(kLongThreads) RowLongKernel(const QuantParams p) {
  constexpr int kU = 2;
  __shared__ float red[32];
  const int64_t rows = p.rows, cols = p.cols;
  const int64_t span = static_cast<int64_t>(blockDim.x) * kChunk;  // of one u
  pdl_wait();
  pdl_release();
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* x = XRow<T>(p, r);
    float m = 0.f;
    for (int64_t c0 = static_cast<int64_t>(threadIdx.x) * kChunk; c0 < cols; c0 += kU * span) {
      Chunk<T, kVec> ch[kU];
#pragma unroll
      for (int u = 0; u < kU; ++u) ch[u].load(x, c0 + u * span, cols, c0 + u * span < cols);
#pragma unroll
      for (int u = 0; u < kU; ++u) m = fmaxf(m, ch[u].amax());
    }
    const float s = ScaleOf(reduce::BlockReducer<>{red}(m, Max{}));
    const Divisor d(s);
    if (threadIdx.x == 0) p.scale[r] = s;
    uint8_t* q = QRow(p, r);
    for (int64_t c0 = static_cast<int64_t>(threadIdx.x) * kChunk; c0 < cols; c0 += kU * span) {
      Chunk<T, kVec> ch[kU];
#pragma unroll
      for (int u = 0; u < kU; ++u) ch[u].load(x, c0 + u * span, cols, c0 + u * span < cols);
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        if (c0 + u * span < cols) ch[u].store(q, c0 + u * span, cols, d);
      }
    }
  }
}

// kBlock2d: one 128 x 128 tile per block (blockIdx.x: tile column; blockIdx.y: tile row, looping
// past kMaxGridY); 8 lanes per tile row, each thread kSteps rows 32 apart, all in registers.
template <typename T, bool kVec>
__global__ void __launch_bounds__(kTileThreads) Block2dKernel(const QuantParams p) {
  constexpr int kLanesPerRow = kScaleBlock / kChunk;         // 8
  constexpr int kRowsPerStep = kTileThreads / kLanesPerRow;  // 32
  constexpr int kSteps = kScaleBlock / kRowsPerStep;         // 4
  static_assert(kScaleBlock % kRowsPerStep == 0, "whole steps per tile");
  __shared__ float red[32];
  const int64_t rows = p.rows, cols = p.cols;
  const int64_t tiles_m = ScaleBlocks(rows);
  const int64_t scale_ld = p.scale_ld > 0 ? p.scale_ld : ScaleBlocks(cols);
  const int64_t c =
      static_cast<int64_t>(blockIdx.x) * kScaleBlock + (threadIdx.x % kLanesPerRow) * kChunk;
  const int row_in_step = threadIdx.x / kLanesPerRow;
  pdl_wait();
  pdl_release();
  for (int64_t tm = blockIdx.y; tm < tiles_m; tm += gridDim.y) {
    Chunk<T, kVec> ch[kSteps];
    bool ok[kSteps];
    float m = 0.f;
#pragma unroll
    for (int j = 0; j < kSteps; ++j) {
      const int64_t r = tm * kScaleBlock + j * kRowsPerStep + row_in_step;
      ok[j] = r < rows && c < cols;
      ch[j].load(XRow<T>(p, ok[j] ? r : 0), c, cols, ok[j]);
    }
#pragma unroll
    for (int j = 0; j < kSteps; ++j) m = fmaxf(m, ch[j].amax());
    const float s = ScaleOf(reduce::BlockReducer<>{red}(m, Max{}));  // ends with a barrier
    const Divisor d(s);
    if (threadIdx.x == 0) p.scale[tm * scale_ld + blockIdx.x] = s;
#pragma unroll
    for (int j = 0; j < kSteps; ++j) {
      const int64_t r = tm * kScaleBlock + j * kRowsPerStep + row_in_step;
      if (ok[j]) ch[j].store(QRow(p, r), c, cols, d);
    }
  }
}

// Blocks of `threads` (a multiple of 32) x kU chunks covering a row of `chunks` chunks about
// evenly, blocks_per_row of them (as elementwise::Tile splits rows).
struct RowTiling {
  int threads;
  int64_t blocks_per_row;
};
inline RowTiling TileRow(int64_t chunks, int unroll, int max_threads) {
  RowTiling t;
  t.blocks_per_row = ceil_div<int64_t>(chunks, int64_t{unroll} * max_threads);
  const int64_t per_block = ceil_div<int64_t>(chunks, unroll * t.blocks_per_row);
  t.threads = static_cast<int>((per_block + 31) / 32 * 32);
  return t;
}

// BlockKernel's launch: blocks of up to kChunkThreads threads, or of kLatencyThreads in grids of
// fewer than 256 chunks per SM (latency-bound: their loads spread over more SMs).
template <typename T, bool kVec, bool kTensorScale>
cudaError_t LaunchBlocks(const QuantParams& p, const DeviceProps& props, cudaStream_t stream) {
  const int64_t chunks = std::max<int64_t>(ceil_div<int64_t>(p.cols, kChunk), 1);
  const bool latency = int64_t{p.rows} * chunks < int64_t{props.sm_count} * 256;
  const RowTiling t = TileRow(chunks, 2, latency ? kLatencyThreads : kChunkThreads);
  const dim3 grid(static_cast<unsigned>(t.blocks_per_row),
                  static_cast<unsigned>(std::clamp<int64_t>(p.rows, 1, kMaxGridY)));
  return LaunchKernel(BlockKernel<T, kVec, kTensorScale>, grid, t.threads, stream, props, 1, p);
}

template <typename T, bool kVec>
cudaError_t LaunchRows(const QuantParams& p, const DeviceProps& props, cudaStream_t stream) {
  const int64_t rows = p.rows, chunks = ceil_div<int64_t>(p.cols, kChunk);
  const dim3 grid(static_cast<unsigned>(rows));  // rows <= INT32_MAX, the grid's x limit
  if (chunks <= 32) {
    int lanes = 1;
    while (lanes < chunks) lanes *= 2;
    const int64_t blocks = ceil_div<int64_t>(rows, kGroupThreads / lanes);
    return LaunchKernel(RowGroupKernel<T, kVec>, dim3(static_cast<unsigned>(blocks)), kGroupThreads,
                        stream, props, 1, p, lanes);
  }
  const auto held = [&](auto kc) {
    constexpr int kC = decltype(kc)::value;
    const int threads = static_cast<int>((ceil_div<int64_t>(chunks, kC) + 31) / 32 * 32);
    return LaunchKernel(RowKernel<T, kVec, kC>, grid, threads, stream, props, 1, p);
  };
  // At most 32 registers of x per thread (2 chunks of fp32, 4 of packed 16-bit values), so that
  // 1024 threads fit the register file; 2 chunks up to 512 threads, where there are rows of both.
  // The scalar path holds 2 (with 4, 16-bit rows spilled 72 bytes at 64 registers).
  if (chunks <= 2 * 512) return held(std::integral_constant<int, 2>{});
  if constexpr (sizeof(T) == 2 && kVec) {
    if (chunks <= 4 * kRowThreads) return held(std::integral_constant<int, 4>{});
  }
  if (chunks <= 2 * kRowThreads) return held(std::integral_constant<int, 2>{});
  return LaunchKernel(RowLongKernel<T, kVec>, grid, kLongThreads, stream, props, 1, p);
}

template <typename T, bool kVec>
cudaError_t Launch(const QuantParams& p, cudaStream_t stream) {
  DeviceProps props;
  XK_CUDA_TRY(GetDeviceProps(&props));
  const int64_t rows = p.rows;
  switch (p.granularity) {
    case Granularity::kTensor: {
      XK_CUDA_TRY(cudaMemsetAsync(p.scale, 0, sizeof(float), stream));
      if (rows > 0 && p.cols > 0) {
        const RowTiling t = TileRow(ceil_div<int64_t>(p.cols, kChunk), 4, kChunkThreads);
        const int64_t per_sm = kAmaxThreadsPerSm / t.threads;  // blocks
        const int64_t gy =
            std::clamp<int64_t>(ceil_div<int64_t>(per_sm * props.sm_count, t.blocks_per_row), 1,
                                std::min<int64_t>(rows, kMaxGridY));
        const dim3 grid(static_cast<unsigned>(t.blocks_per_row), static_cast<unsigned>(gy));
        XK_CUDA_TRY(LaunchKernel(TensorAmaxKernel<T, kVec>, grid, t.threads, stream, props, 1, p));
      }
      return LaunchBlocks<T, kVec, true>(p, props, stream);  // also for no values: scale 1
    }
    case Granularity::kRow:
      return rows == 0 ? cudaSuccess : LaunchRows<T, kVec>(p, props, stream);
    case Granularity::kBlock:
      return rows == 0 || p.cols == 0 ? cudaSuccess
                                      : LaunchBlocks<T, kVec, false>(p, props, stream);
    case Granularity::kBlock2d: {
      if (rows == 0 || p.cols == 0) return cudaSuccess;
      const dim3 grid(static_cast<unsigned>(ceil_div<int64_t>(p.cols, kScaleBlock)),
                      static_cast<unsigned>(
                          std::min<int64_t>(ceil_div<int64_t>(rows, kScaleBlock), kMaxGridY)));
      return LaunchKernel(Block2dKernel<T, kVec>, grid, kTileThreads, stream, props, 1, p);
    }
  }
  return cudaErrorInvalidValue;
}

// 16-byte loads of x and kV-byte pieces of q (see Chunk) for every row.
template <typename T>
bool CanVectorize(const QuantParams& p) {
  constexpr int kV = vec16<T>();
  const bool pitches = p.rows <= 1 || (p.ldx % kV == 0 && p.ldq % kV == 0);
  return p.cols % kV == 0 && pitches && is_aligned(p.x, 16) && is_aligned(p.q, kV);
}

template <typename T>
cudaError_t LaunchFor(const QuantParams& p, cudaStream_t stream) {
  return CanVectorize<T>(p) ? Launch<T, true>(p, stream) : Launch<T, false>(p, stream);
}

}  // namespace quant

// Quantises p.x into p.q and p.scale (params.h) on `stream`: graph-capturable, no allocation, no
// host copy. kTensor writes scale[0] with a memset and two kernels; the others launch one.
// scale_ld <= 0 means contiguous scale rows (kBlock, kBlock2d). rows and cols >= 0 (rows of no
// values: per-tensor and per-row scales of 1, no block scales).
inline cudaError_t QuantizeFp8(const QuantParams& p, cudaStream_t stream) {
  if (p.rows < 0 || p.cols < 0) return cudaErrorInvalidValue;
  switch (p.x_type) {
    case Elem::kF16:
      return quant::LaunchFor<__half>(p, stream);
    case Elem::kBF16:
      return quant::LaunchFor<__nv_bfloat16>(p, stream);
    case Elem::kF32:
      return quant::LaunchFor<float>(p, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace xkernels::gemm

#endif  // XKERNELS_GEMM_QUANT_H_
