// Host GEMM and e4m3 quantisation (gemm/params.h): plain C++, float arithmetic.
//
// Gemm converts a once to floats (e4m3 values times their scales). The columns of out are cut
// into panels of kTileCols; a thread takes a panel, converts those rows of b to floats, and
// computes the panel for every row of a, kTileRows rows at a time. Each output's sum runs in one
// order whatever rows and columns it is computed with and whichever thread: the same bits for any
// thread count (a row's own bits depend on whether m reaches kPackRows). No float copy of the whole
// of b is made (before, a 1 x 4096 x 4096 call spent 30 of its 40 ms converting 64 MB of b up
// front; now 1.7 ms, torch 1.2).
// - m >= kPackRows: the panel is packed k-major (bp [k][kTileCols], converted 16 x 16 at a time)
//   and an outer-product micro-kernel keeps kMr x kNr sums in registers, each value of b loaded
//   serving kMr rows and each of a kNr columns (fma, in k order from zero: the same bits in every
//   tile shape and clone). 2-CPU Xeon (AVX-512) KVM guest, bf16, ms, dot products -> packed:
//   96 x 256 x 384 1.05 -> 0.37, 300 x 520 x 1000 10.7 -> 2.8, 512 x 2048 x 2048 140 -> 26-30,
//   64 x 4096 x 4096 76 -> 31.
// - m < kPackRows (decode rows): dot products of blocks of rows x columns over kLanes partial sums
//   each (the rows of b read as stored, no transposed copy), added pairwise at the end, the sums
//   held in vectors of the CPU's register width (vectors.h; the same bits at every width); packing
//   b costs more than it saves there. Xeon, float arrays -> vectors (AVX-512 clone), ms: 16 x 4096
//   x 4096 20.6 -> 8.4 (torch's oneDNN on AMX: 1.6), 31 x 520 x 1000 1.2 -> 0.63, 7 x 1000 x 1000
//   0.74 -> 0.46; 1 x 4096 x 4096 4.7 either way (converting b's rows: torch 1.75).
// Panels go to the host pool's threads (parallel.h), which run Panel, cloned (before, workers ran
// a lambda compiled for the baseline target, SSE2 without FMA, whatever the CPU); their buffers
// are kept between calls (up to k 4096). Against std::threads started per call above 1e7
// multiply-adds: 96 x 256 x 384 0.34 -> 0.20 ms (now on two threads), 1 x 4096 x 4096 5.1 -> 3.0,
// 16 x 4096 x 4096 9.8 -> 7.2; 512 x 2048 x 2048 and 64 x 4096 x 4096 the same within the noise.
#include "host/gemm.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <vector>

#include "host/convert.h"
#include "host/parallel.h"
#include "host/vectors.h"

namespace xkernels::host {
namespace {

using gemm::BLayout;
using gemm::Elem;
using gemm::Granularity;
using gemm::Params;
using gemm::QuantParams;
using gemm::Scale;

constexpr int64_t kTileRows = 32;  // rows of a converted at a time
constexpr int64_t kTileCols = 64;  // columns of out (rows of the float b) per tile
constexpr int64_t kKeptPanelFloats = int64_t{1} << 18;  // 1 MB a thread: a panel of k <= 4096
constexpr int64_t kPackRows = 32;     // rows of a from which the panel is packed k-major
constexpr int64_t kMr = 8, kNr = 32;  // the micro-kernel's rows and columns (16 AVX-512 sums)
constexpr int64_t kBlock = gemm::kScaleBlock;

int64_t ElemSize(Elem t) { return t == Elem::kF32 ? 4 : t == Elem::kE4M3 ? 1 : 2; }

DType HostType(Elem t) {
  return t == Elem::kF16 ? DType::kF16 : t == Elem::kBF16 ? DType::kBF16 : DType::kF32;
}

const char* At(const void* base, Elem t, int64_t row, int64_t ld, int64_t col = 0) {
  return static_cast<const char*>(base) + (row * ld + col) * ElemSize(t);
}

// Every e4m3 value as a float (E4M3ToFloat's branches per element cost 3 ns: 96 x 256 x 384
// e4m3 took 3 times bf16's time).
struct E4M3Table {
  float v[256];
  E4M3Table() {
    for (int i = 0; i < 256; ++i) v[i] = E4M3ToFloat(static_cast<uint8_t>(i));
  }
};
const E4M3Table kE4M3;

// n contiguous elements of type t at p, as floats.
void Load(const char* p, Elem t, int64_t n, float* __restrict dst) {
  if (t == Elem::kE4M3) {
    const uint8_t* q = reinterpret_cast<const uint8_t*>(p);
    for (int64_t i = 0; i < n; ++i) dst[i] = kE4M3.v[q[i]];
    return;
  }
  LoadFloats(p, HostType(t), n, dst);
}

// Multiplies v[0, n), values k0 .. k0 + n of row `row` of an e4m3 operand, by their scales: one per
// tensor, one per row, or one per 128 values of k from row `block_row` of the scale matrix (a: the
// row; b: row / 128).
void ApplyScales(float* __restrict v, int64_t n, const float* s, Scale kind, int64_t ld,
                 int64_t row, int64_t block_row, int64_t k0 = 0) {
  if (kind == Scale::kNone) return;
  for (int64_t c0 = 0; c0 < n;) {
    const int64_t kb = (k0 + c0) / kBlock, c1 = std::min(n, (kb + 1) * kBlock - k0);
    const float f = kind == Scale::kTensor ? s[0]
                    : kind == Scale::kRow  ? s[row]
                                           : s[block_row * ld + kb];
    for (int64_t c = c0; c < c1; ++c) v[c] *= f;
    c0 = c1;
  }
}

// out[r * ldo + q] = sum over c of a[r * lda + c] * b[q * ldb + c], for R rows and C columns of
// b (each as stored): kLanes partial sums per output (lane j takes c = j mod kLanes, in c order),
// held in kLanes / W vectors of W floats, each vector of b loaded serving R rows and each of a C
// columns; then the last k % kLanes products into lanes 0.., and the lanes added pairwise. Each
// output's sum is the same whatever W, R and C: the same bits on every CPU and in every block.
template <int64_t W, int64_t R, int64_t C>
inline void Dots(const float* __restrict a, int64_t lda, const float* __restrict b, int64_t ldb,
                 int64_t k, float* __restrict out, int64_t ldo) {
  constexpr int64_t H = kLanes / W;
  Vec<W> acc[R][C][H] = {};
  int64_t c = 0;
  for (; c + kLanes <= k; c += kLanes) {
    for (int64_t h = 0; h < H; ++h) {
      Vec<W> bv[C];
      for (int64_t q = 0; q < C; ++q) bv[q] = LoadV<W>(b + q * ldb + c + h * W);
      for (int64_t r = 0; r < R; ++r) {
        const Vec<W> av = LoadV<W>(a + r * lda + c + h * W);
        for (int64_t q = 0; q < C; ++q) acc[r][q][h] += av * bv[q];
      }
    }
  }
  for (int64_t r = 0; r < R; ++r) {
    for (int64_t q = 0; q < C; ++q) {
      float part[kLanes];
      for (int64_t h = 0; h < H; ++h) StoreV(part + h * W, acc[r][q][h]);
      for (int64_t i = c, j = 0; i < k; ++i, ++j) part[j] += a[r * lda + i] * b[q * ldb + i];
      out[r * ldo + q] = AddLanes(part);
    }
  }
}

// out[r][j] = sum over c of a[r * k + c] * bp[c * ldb + j], for R rows and C columns of a k-major
// panel, by fma in c order from zero.
template <int64_t R, int64_t C>
inline void Micro(const float* __restrict a, int64_t k, const float* __restrict bp, int64_t ldb,
                  float* __restrict out, int64_t ldo) {
  float acc[R][C] = {};
  for (int64_t c = 0; c < k; ++c) {
    const float* b = bp + c * ldb;
#pragma GCC unroll 8  // kMr
    for (int64_t r = 0; r < R; ++r) {
      const float av = a[r * k + c];
#pragma GCC unroll 32  // kNr
      for (int64_t j = 0; j < C; ++j) acc[r][j] = __builtin_fmaf(av, b[j], acc[r][j]);
    }
  }
  for (int64_t r = 0; r < R; ++r)
    for (int64_t j = 0; j < C; ++j) out[r * ldo + j] = acc[r][j];
}

// Micro<R, C> for R < kMr rows: one row at a time (the same sums).
template <int64_t C>
inline void MicroRows(const float* a, int64_t k, const float* bp, int64_t ldb, int64_t rows,
                      float* out, int64_t ldo) {
  if (rows == kMr) return Micro<kMr, C>(a, k, bp, ldb, out, ldo);
  for (int64_t r = 0; r < rows; ++r) Micro<1, C>(a + r * k, k, bp, ldb, out + r * ldo, ldo);
}

// Rows [r0, r0 + rows) of the output against a packed panel bp [k][kTileCols] of `cols` columns,
// into res (kTileRows, kTileCols).
void PackedBlock(const Params& p, const float* af, const float* bp, int64_t r0, int64_t rows,
                 int64_t cols, float* __restrict res) {
  const int64_t k = p.k;
  for (int64_t r = 0; r < rows; r += kMr) {
    const int64_t rr = std::min(kMr, rows - r);
    const float* a = af + (r0 + r) * k;
    float* o = res + r * kTileCols;
    int64_t j = 0;
    for (; j + kNr <= cols; j += kNr) MicroRows<kNr>(a, k, bp + j, kTileCols, rr, o + j, kTileCols);
    for (; j + 8 <= cols; j += 8) MicroRows<8>(a, k, bp + j, kTileCols, rr, o + j, kTileCols);
    for (; j < cols; ++j) MicroRows<1>(a, k, bp + j, kTileCols, rr, o + j, kTileCols);
  }
}

// The output block of rows [r0, r0 + rows) and the panel's columns [c0, c0 + cols): af holds a's
// rows as scaled floats (row r at af + r * k), bt the panel's rows of b (column c0 + j of out at
// bt + j * k), res (kTileRows, kTileCols) the dot products before the bias and rounding. Blocks of
// R rows x C columns (W = 16: 4 x 4 vectors of sums; 8: 2 x 2 x 2; 4: 1 x 2 x 4), then the rest
// of the rows one at a time, then the rest of the columns one at a time.
template <int64_t W, int64_t R, int64_t C>
void BlockOf(const Params& p, const float* af, const float* bt, int64_t r0, int64_t rows,
             int64_t cols, float* __restrict res) {
  const int64_t k = p.k;
  auto dots = [&](auto r_, auto c_, int64_t r, int64_t j) {
    Dots<W, decltype(r_)::value, decltype(c_)::value>(af + (r0 + r) * k, k, bt + j * k, k, k,
                                                      res + r * kTileCols + j, kTileCols);
  };
  using One = std::integral_constant<int64_t, 1>;
  int64_t j = 0;
  for (; j + C <= cols; j += C) {
    int64_t r = 0;
    for (; r + R <= rows; r += R)
      dots(std::integral_constant<int64_t, R>{}, std::integral_constant<int64_t, C>{}, r, j);
    for (; r < rows; ++r) dots(One{}, std::integral_constant<int64_t, C>{}, r, j);
  }
  for (; j < cols; ++j)
    for (int64_t r = 0; r < rows; ++r) dots(One{}, One{}, r, j);
}

void Block(const Params& p, const float* af, const float* bt, int64_t r0, int64_t rows,
           int64_t cols, float* __restrict res) {
  switch (VectorLanes()) {
    case 16:
      return BlockOf<16, 4, 4>(p, af, bt, r0, rows, cols, res);
    case 8:
      return BlockOf<8, 2, 2>(p, af, bt, r0, rows, cols, res);
    default:
      return BlockOf<4, 1, 2>(p, af, bt, r0, rows, cols, res);
  }
}

// Rows [r0, r0 + rows) of res (kTileRows, kTileCols) plus the bias, rounded into out at column c0.
void StoreBlock(const Params& p, const float* res, const float* bias, int64_t r0, int64_t rows,
                int64_t c0, int64_t cols) {
  const int64_t osize = ElemSize(p.out_type);
  for (int64_t r = 0; r < rows; ++r) {
    char* dst = static_cast<char*>(p.out) + ((r0 + r) * p.ldc + c0) * osize;
    const float* v = res + r * kTileCols;
    StoreFloats(dst, HostType(p.out_type), cols,
                [v, bias, c0](int64_t i) { return v[i] + bias[c0 + i]; });
  }
}

// Rows [c0, c0 + cols) of b as floats (b [k, n]: its columns), scaled: the panel's operand, as
// bt [cols][k], or packed k-major as bp [k][kTileCols].
void LoadPanel(const Params& p, int64_t c0, int64_t cols, bool packed, float* __restrict bt,
               std::vector<float>& row) {
  const int64_t k = p.k;
  const Elem in = p.in_type;
  if (packed) {
    if (p.b_layout == BLayout::kNK) {  // 16 x 16 blocks of b as floats, transposed
      constexpr int64_t kT = 16;
      row.resize(kT * kT);
      float* blk = row.data();
      for (int64_t cb = 0; cb < k; cb += kT) {
        const int64_t kc = std::min(kT, k - cb);
        for (int64_t j0 = 0; j0 < cols; j0 += kT) {
          const int64_t jn = std::min(kT, cols - j0);
          for (int64_t j = 0; j < jn; ++j) {
            const int64_t col = c0 + j0 + j;
            Load(At(p.b, in, col, p.ldb, cb), in, kc, blk + j * kT);
            ApplyScales(blk + j * kT, kc, p.b_scale, p.b_scale_kind, p.b_scale_ld, col,
                        col / kBlock, cb);
          }
          for (int64_t c = 0; c < kc; ++c)
            for (int64_t j = 0; j < jn; ++j) bt[(cb + c) * kTileCols + j0 + j] = blk[j * kT + c];
        }
      }
    } else {  // b [k, n] (16-bit, no scales): the panel's rows are slices of b's rows
      for (int64_t c = 0; c < k; ++c) Load(At(p.b, in, c, p.ldb, c0), in, cols, bt + c * kTileCols);
    }
    return;
  }
  if (p.b_layout == BLayout::kNK) {
    for (int64_t j = 0; j < cols; ++j) {
      float* dst = bt + j * k;
      Load(At(p.b, in, c0 + j, p.ldb), in, k, dst);
      ApplyScales(dst, k, p.b_scale, p.b_scale_kind, p.b_scale_ld, c0 + j, (c0 + j) / kBlock);
    }
  } else {  // b [k, n] (16-bit only, no scales): row c of b holds column c of every panel row
    row.resize(cols);
    for (int64_t c = 0; c < k; ++c) {
      Load(At(p.b, in, c, p.ldb, c0), in, cols, row.data());
      for (int64_t j = 0; j < cols; ++j) bt[j * k + c] = row[j];
    }
  }
}

// Panel t of out (columns t * kTileCols ..) for every row: its own clones, since the pool's threads
// call it from outside Gemm (a lambda is compiled for the baseline target only).
XK_HOST_CLONES
void Panel(const Params& p, const float* af, const float* bias, bool packed, int64_t t, float* bt,
           float* res, std::vector<float>& row) {
  const int64_t c0 = t * kTileCols, cols = std::min(kTileCols, p.n - c0);
  LoadPanel(p, c0, cols, packed, bt, row);
  for (int64_t r0 = 0; r0 < p.m; r0 += kTileRows) {
    const int64_t rows = std::min(kTileRows, p.m - r0);
    if (packed) {
      PackedBlock(p, af, bt, r0, rows, cols, res);
    } else {
      Block(p, af, bt, r0, rows, cols, res);
    }
    StoreBlock(p, res, bias, r0, rows, c0, cols);
  }
}

}  // namespace

XK_HOST_CLONES
void Gemm(const Params& p) {
  const int64_t m = p.m, n = p.n, k = p.k;
  if (m <= 0 || n <= 0) return;
  std::vector<float> af(m * k);
  for (int64_t r = 0; r < m; ++r) {
    Load(At(p.a, p.in_type, r, p.lda), p.in_type, k, af.data() + r * k);
    ApplyScales(af.data() + r * k, k, p.a_scale, p.a_scale_kind, p.a_scale_ld, r, r);
  }
  std::vector<float> bias(n, 0.f);
  if (p.bias != nullptr) Load(static_cast<const char*>(p.bias), p.bias_type, n, bias.data());

  const int64_t panels = (n + kTileCols - 1) / kTileCols;
  const bool packed = m >= kPackRows;
  // the pool's threads (parallel.h), each with its own buffers, kept between calls
  const int64_t per_panel = m * std::min(kTileCols, int64_t{n}) * k / kMacsPerElement;
  // A panel of b as floats: a buffer each thread keeps between calls up to kKeptPanelFloats;
  // a larger one (k > 4096) from this call's slots, one per thread that may run at once (the pool's
  // and the caller), freed when the call returns.
  const bool big = kTileCols * k > kKeptPanelFloats;
  const int64_t slots = big ? HostThreads() : 0;
  std::vector<std::vector<float>> panel(slots);
  std::unique_ptr<std::atomic<bool>[]> taken(new std::atomic<bool>[slots]());
  ParallelFor(panels, per_panel, [&](int64_t t0, int64_t t1) {
    thread_local std::vector<float> kept, res, row;
    int64_t slot = 0;
    if (big)
      while (taken[slot].exchange(true)) slot = (slot + 1) % slots;
    std::vector<float>& bt = big ? panel[slot] : kept;
    if (static_cast<int64_t>(bt.size()) < kTileCols * k) bt.resize(kTileCols * k);
    if (static_cast<int64_t>(res.size()) < kTileRows * kTileCols) res.resize(kTileRows * kTileCols);
    for (int64_t t = t0; t < t1; ++t)
      Panel(p, af.data(), bias.data(), packed, t, bt.data(), res.data(), row);
    if (big) taken[slot] = false;
  });
}

XK_HOST_CLONES
void QuantizeFp8(const QuantParams& p) {
  const int64_t rows = p.rows, cols = p.cols;
  const Elem xt = p.x_type;
  std::vector<float> x(cols);
  float* __restrict v = x.data();
  auto load = [&](int64_t r) { Load(At(p.x, xt, r, p.ldx), xt, cols, v); };
  auto amax = [v](int64_t c0, int64_t c1) {  // NaNs are passed over
    float mx = 0.f;
    for (int64_t c = c0; c < c1; ++c) mx = std::max(mx, std::fabs(v[c]));
    return mx;
  };
  auto scale_of = [](float mx) {  // 1 for a group of zeros, or where amax / 448 underflows
    const float s = mx / gemm::kE4M3Max;
    return s > 0.f ? s : 1.f;
  };
  auto store = [&](int64_t r, int64_t c0, int64_t c1, float s) {
    uint8_t* q = static_cast<uint8_t*>(p.q) + r * p.ldq;
    for (int64_t c = c0; c < c1; ++c) q[c] = FloatToE4M3(v[c] / s);
  };
  const int64_t blocks = (cols + kBlock - 1) / kBlock;
  switch (p.granularity) {
    case Granularity::kTensor: {
      float mx = 0.f;
      for (int64_t r = 0; r < rows; ++r) load(r), mx = std::max(mx, amax(0, cols));
      const float s = p.scale[0] = scale_of(mx);
      for (int64_t r = 0; r < rows; ++r) load(r), store(r, 0, cols, s);
      return;
    }
    case Granularity::kRow:
      for (int64_t r = 0; r < rows; ++r) {
        load(r);
        store(r, 0, cols, p.scale[r] = scale_of(amax(0, cols)));
      }
      return;
    case Granularity::kBlock:
      for (int64_t r = 0; r < rows; ++r) {
        load(r);
        for (int64_t b = 0; b < blocks; ++b) {
          const int64_t c0 = b * kBlock, c1 = std::min(cols, c0 + kBlock);
          store(r, c0, c1, p.scale[r * p.scale_ld + b] = scale_of(amax(c0, c1)));
        }
      }
      return;
    case Granularity::kBlock2d: {
      std::vector<float> mx(blocks);
      for (int64_t r0 = 0; r0 < rows; r0 += kBlock) {
        const int64_t r1 = std::min(rows, r0 + kBlock);
        float* s = p.scale + r0 / kBlock * p.scale_ld;
        std::fill(mx.begin(), mx.end(), 0.f);
        for (int64_t r = r0; r < r1; ++r) {
          load(r);
          for (int64_t b = 0; b < blocks; ++b)
            mx[b] = std::max(mx[b], amax(b * kBlock, std::min(cols, b * kBlock + kBlock)));
        }
        for (int64_t b = 0; b < blocks; ++b) s[b] = scale_of(mx[b]);
        for (int64_t r = r0; r < r1; ++r) {
          load(r);
          for (int64_t b = 0; b < blocks; ++b)
            store(r, b * kBlock, std::min(cols, b * kBlock + kBlock), s[b]);
        }
      }
      return;
    }
  }
}

}  // namespace xkernels::host
