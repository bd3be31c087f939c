// Host implementations: short and plain C++. Rows are read into floats and written back rounded to
// the dtype (one dtype switch per row); arithmetic is float, as on the GPU.
//
// Fast the way CPU libraries are (built with -O3 -fno-trapping-math -ffp-contract=off, jit.py):
// - Threads (parallel.h): rows, or for the elementwise ops (row, column chunk) items, split over
//   the CPUs the process may use. Each item is computed alone, so the bits do not depend on the
//   split or the thread count; calls below ~64K elements per thread stay on the caller's thread.
// - Vectorized loops: per-element work runs over blocks of kLanes elements (a fixed trip count)
//   and then a scalar tail, through __restrict pointers; sums and maxima keep kLanes partial
//   results, combined pairwise at the end. The fp16/bf16 conversions (convert.h), exp and the
//   normal CDF (vmath.h) are branch-free, so they vectorize with the rest: no libm call and no
//   double per element.
// - ISA clones: with GCC on x86-64 glibc every entry point and range of rows also gets x86-64-v3
//   (AVX2, FMA) and x86-64-v4 (AVX-512) clones, picked at load time (XK_HOST_CLONES): the same
//   arithmetic in the same order, so the same results.
// - No allocation per call: rows and columns go through per-thread buffers that are kept; the
//   elementwise ops work in blocks of kBlock floats on the stack.
#include "host/ops.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "host/convert.h"
#include "host/parallel.h"
#include "host/vmath.h"

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && \
    !defined(XKERNELS_HOST_NO_CLONES)
#include <immintrin.h>
#define XK_HOST_AVX512_MUL_ADD 1
#endif

namespace xkernels::host {
namespace {

// Floats per block of the elementwise ops (on the stack; a multiple of kLanes).
constexpr int64_t kBlock = 1024;
// Columns per item of the elementwise ops: long rows are cut into chunks of this many, so that a
// few rows (or one flat tensor) still fill the threads.
constexpr int64_t kChunk = 4 * kBlock;

char* Addr(const Mat& m, int64_t r, int64_t c) {
  return static_cast<char*>(m.data) +
         (m.rs.offset(r) + c) * static_cast<int64_t>(DTypeSize(m.dtype));
}

// Row r's `cols` values from column c0, as floats.
void ReadRow(const Mat& m, int64_t r, int64_t c0, int64_t cols, float* __restrict dst) {
  LoadFloats(Addr(m, r, c0), m.dtype, cols, dst);
}

// Stores f(0), ..., f(n - 1) to row r from column c0, each rounded to the row's dtype.
template <class F>
void StoreRow(const Mat& m, int64_t r, int64_t c0, int64_t n, F f) {
  StoreFloats(Addr(m, r, c0), m.dtype, n, f);
}

// Rounds v[0, n) to the storage type of row r and stores it. With `keep`, v is then overwritten
// with the stored values (what a later read of the row gives).
void WriteRow(const Mat& m, int64_t r, float* __restrict v, int64_t n, bool keep = false) {
  StoreRow(m, r, 0, n, [v](int64_t i) { return v[i]; });
  if (keep && m.dtype != DType::kF32) ReadRow(m, r, 0, n, v);
}

// Lane-wise partial results of f(i) over [0, n), combined by op pairwise at the end.
template <class F, class Op>
inline float Reduce(int64_t n, float init, F f, Op op) {
  float acc[kLanes];
  for (int64_t j = 0; j < kLanes; ++j) acc[j] = init;
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    // Not unrolled: GCC then vectorizes this loop over acc (in registers) for max as for sum;
    // unrolled, acc becomes kLanes scalars, and only a sum is put back into vectors.
#pragma GCC unroll 1
    for (int64_t j = 0; j < kLanes; ++j) acc[j] = op(acc[j], f(i + j));
  }
  for (int64_t j = 0; i < n; ++i, ++j) acc[j] = op(acc[j], f(i));
  for (int64_t w = kLanes / 2; w > 0; w /= 2)
    for (int64_t j = 0; j < w; ++j) acc[j] = op(acc[j], acc[j + w]);
  return acc[0];
}

template <class F>
inline float Sum(int64_t n, F f) {
  return Reduce(n, 0.f, f, [](float a, float b) { return a + b; });
}

// NaNs are passed over (as std::max(acc, v) does).
template <class F>
inline float Max(int64_t n, F f) {
  return Reduce(n, -std::numeric_limits<float>::infinity(), f,
                [](float a, float b) { return a < b ? b : a; });
}

float SumOfSquares(const float* __restrict x, int64_t n) {
  return Sum(n, [x](int64_t i) { return x[i] * x[i]; });
}

// The activations as x times a gate: silu x / (1 + e^-x); gelu_tanh's 0.5 x (1 + tanh(u)) as
// x / (1 + e^(-2u)) (the same function, without tanh's cancellation for x < 0); gelu x Phi(x).
// Where e^-x overflows (x < -88.7) the gates give -0 for values below 1e-37. kFast (16-bit
// outputs): vmath's shorter polynomials.
template <Act A, bool kFast>
inline float Activate(float x) {
  if constexpr (A == Act::kSilu) return x / (1.f + vmath::Exp<kFast>(-x));
  if constexpr (A == Act::kGelu) return x * vmath::NormalCdf<kFast>(x);
  // 2u = 2 sqrt(2 / pi) (x + 0.044715 x^3)
  return x / (1.f + vmath::Exp<kFast>(-x * (1.5957691216057308f + 0.0713548162726009f * (x * x))));
}

// Per-thread float buffers, grown as needed and kept: rows are read into one first (so that outputs
// may alias inputs), and columns converted into one, at no allocation per call (a fresh buffer of
// more than 128 KiB is an mmap and its page faults on every call: a 1x57344 layernorm took 0.16 ms,
// 0.04 with a kept buffer). Slots 0 and 1 hold rows, 2 and 3 the caller's columns, which the
// workers read while the caller runs ranges too.
enum Slot { kRow, kRow2, kColumn, kColumn2, kSlots };
float* Buffer(Slot slot, int64_t n) {
  thread_local std::vector<float> buffers[kSlots];
  std::vector<float>& b = buffers[slot];
  if (static_cast<int64_t>(b.size()) < n) b.resize(static_cast<size_t>(n));
  return b.data();
}

// A [cols] weight or bias as floats (`fill` where there is none).
const float* Column(const Mat& m, int64_t cols, Slot slot, float fill = 0.f) {
  float* v = Buffer(slot, cols);
  if (m.data) {
    ReadRow(m, 0, 0, cols, v);
  } else {
    std::fill(v, v + cols, fill);
  }
  return v;
}

// Row r of out <- x * rsqrt(mean(x^2) + eps) * (offset + w).
void RMSNormRow(const Mat& out, const float* __restrict x, const float* __restrict w, int64_t r,
                int64_t cols, float eps, float offset) {
  const float inv = 1.f / std::sqrt(SumOfSquares(x, cols) / static_cast<float>(cols) + eps);
  StoreRow(out, r, 0, cols, [=](int64_t c) { return x[c] * inv * (offset + w[c]); });
}

// Row r of out <- (x - mean) * rsqrt(var + eps) * w + b.
void LayerNormRow(const Mat& out, const float* __restrict x, const float* __restrict w,
                  const float* __restrict b, int64_t r, int64_t cols, float eps) {
  const float mean = Sum(cols, [x](int64_t i) { return x[i]; }) / static_cast<float>(cols);
  const float var = Sum(cols, [x, mean](int64_t i) { return (x[i] - mean) * (x[i] - mean); });
  const float inv = 1.f / std::sqrt(var / static_cast<float>(cols) + eps);
  StoreRow(out, r, 0, cols, [=](int64_t c) { return (x[c] - mean) * inv * w[c] + b[c]; });
}

// What a range of rows (or items) needs: the op's arguments, its columns as floats.
struct RowJob {
  Mat out, out2, in, in2, in3;
  const float* w = nullptr;
  const float* b = nullptr;
  int64_t cols = 0;
  float eps = 0.f, offset = 0.f, scale = 1.f;
  Act act = Act::kSilu;
};

// The elementwise ops' items: row r's columns [c0, c1).
struct Item {
  int64_t r, c0, c1;
};
Item ItemOf(int64_t i, int64_t cols) {
  const int64_t chunks = (cols + kChunk - 1) / kChunk;
  const int64_t c0 = i % chunks * kChunk;
  return {i / chunks, c0, std::min(cols, c0 + kChunk)};
}
int64_t Items(int64_t rows, int64_t cols) { return rows * ((cols + kChunk - 1) / kChunk); }

// The elementwise ops' rows of items from ParallelFor: items cost about kChunk * `per_elem`.
template <class F>
void ForItems(int64_t rows, int64_t cols, int64_t per_elem, const F& f) {
  const int64_t items = Items(rows, cols);
  ParallelFor(items, std::min(cols, kChunk) * per_elem, f);
}

// Work per element, in units of a plain read or write (parallel.h's kMinWorkPerThread): a
// transcendental gate costs about as much as 4 of them vectorized.
constexpr int64_t kGateCost = 4;

template <Act A, bool kFast>
struct ActAndMulItem {
  static void Run(const RowJob& j, const Item& it) {
    const int64_t d = j.cols;
    float x[kBlock], y[kBlock];
    for (int64_t c = it.c0; c < it.c1; c += kBlock) {
      const int64_t n = std::min(kBlock, it.c1 - c);
      ReadRow(j.in, it.r, c, n, x);
      ReadRow(j.in, it.r, d + c, n, y);
      StoreRow(j.out, it.r, c, n, [&x, &y](int64_t k) { return Activate<A, kFast>(x[k]) * y[k]; });
    }
  }
};

template <Act A, bool kFast>
struct BiasActItem {
  static void Run(const RowJob& j, const Item& it) {
    float x[kBlock];
    for (int64_t c = it.c0; c < it.c1; c += kBlock) {
      const int64_t n = std::min(kBlock, it.c1 - c);
      ReadRow(j.in, it.r, c, n, x);
      if (j.b) {
        const float* __restrict b = j.b + c;
        StoreRow(j.out, it.r, c, n, [&x, b](int64_t k) { return Activate<A, kFast>(x[k] + b[k]); });
      } else {
        StoreRow(j.out, it.r, c, n, [&x](int64_t k) { return Activate<A, kFast>(x[k]); });
      }
    }
  }
};

// Row r of out <- softmax(scale * x), x read into a buffer; kFast for 16-bit outputs.
template <bool kFast>
void SoftmaxRow(const RowJob& j, float* __restrict x, int64_t r) {
  const int64_t cols = j.cols;
  const float scale = j.scale;
  ReadRow(j.in, r, 0, cols, x);
  const float m = Max(cols, [x, scale](int64_t c) { return x[c] *= scale; });
  if (m == -std::numeric_limits<float>::infinity()) {  // a row of -inf has no mass: zeros, as on
    StoreRow(j.out, r, 0, cols, [](int64_t) { return 0.f; });  // the GPU
    return;
  }
  const float s = Sum(cols, [x, m](int64_t c) { return x[c] = vmath::Exp<kFast>(x[c] - m); });
  const float inv = 1.f / s;
  StoreRow(j.out, r, 0, cols, [x, inv](int64_t c) { return x[c] * inv; });
}

// Item<A, kFast>(j, it) for the job's activation, kFast for 16-bit outputs.
template <template <Act, bool> class Item_>
inline void ForAct(const RowJob& j, const Item& it) {
  const bool fast = j.out.dtype != DType::kF32;
  switch (j.act) {
    case Act::kSilu:
      return fast ? Item_<Act::kSilu, true>::Run(j, it) : Item_<Act::kSilu, false>::Run(j, it);
    case Act::kGelu:
      return fast ? Item_<Act::kGelu, true>::Run(j, it) : Item_<Act::kGelu, false>::Run(j, it);
    case Act::kGeluTanh:
      return fast ? Item_<Act::kGeluTanh, true>::Run(j, it)
                  : Item_<Act::kGeluTanh, false>::Run(j, it);
  }
}

}  // namespace

// The ranges ParallelFor hands out: [r0, r1) rows, or [i0, i1) items. Cloned (not the lambdas
// that call them), so that every thread runs the clone of the CPU.
XK_HOST_CLONES
void RMSNormRows(const RowJob& j, int64_t r0, int64_t r1) {
  float* x = Buffer(kRow, j.cols);
  for (int64_t r = r0; r < r1; ++r) {
    ReadRow(j.in, r, 0, j.cols, x);
    RMSNormRow(j.out, x, j.w, r, j.cols, j.eps, j.offset);
  }
}

XK_HOST_CLONES
void FusedAddRMSNormRows(const RowJob& j, int64_t r0, int64_t r1) {
  const int64_t cols = j.cols;
  float* __restrict x = Buffer(kRow, cols);
  float* __restrict rv = Buffer(kRow2, cols);
  for (int64_t r = r0; r < r1; ++r) {
    ReadRow(j.in, r, 0, cols, x);
    ReadRow(j.in2, r, 0, cols, rv);
    int64_t c = 0;
    for (; c + kLanes <= cols; c += kLanes)
      for (int64_t k = 0; k < kLanes; ++k) x[c + k] += rv[c + k];
    for (; c < cols; ++c) x[c] += rv[c];
    WriteRow(j.out2, r, x, cols, /*keep=*/true);  // x now holds the rounded sum
    RMSNormRow(j.out, x, j.w, r, cols, j.eps, j.offset);
  }
}

XK_HOST_CLONES
void LayerNormRows(const RowJob& j, int64_t r0, int64_t r1) {
  float* x = Buffer(kRow, j.cols);
  for (int64_t r = r0; r < r1; ++r) {
    ReadRow(j.in, r, 0, j.cols, x);
    LayerNormRow(j.out, x, j.w, j.b, r, j.cols, j.eps);
  }
}

XK_HOST_CLONES
void SoftmaxRows(const RowJob& j, int64_t r0, int64_t r1) {
  float* x = Buffer(kRow, j.cols);
  for (int64_t r = r0; r < r1; ++r) {
    if (j.out.dtype == DType::kF32) {
      SoftmaxRow<false>(j, x, r);
    } else {
      SoftmaxRow<true>(j, x, r);
    }
  }
}

XK_HOST_CLONES
void ActAndMulItems(const RowJob& j, int64_t i0, int64_t i1) {
  for (int64_t i = i0; i < i1; ++i) ForAct<ActAndMulItem>(j, ItemOf(i, j.cols));
}

XK_HOST_CLONES
void BiasActItems(const RowJob& j, int64_t i0, int64_t i1) {
  for (int64_t i = i0; i < i1; ++i) ForAct<BiasActItem>(j, ItemOf(i, j.cols));
}

// Element k of a contiguous run of 16- or 32-bit floats at p, as a float.
template <DType kT>
inline float LoadAt(const char* __restrict p, int64_t k) {
  if constexpr (kT == DType::kBF16) {
    return Bf16ToFloat(Load16(p + 2 * k));
  } else if constexpr (kT == DType::kF16) {
    return F16ToFloat(Load16(p + 2 * k));
  } else {
    float v;
    std::memcpy(&v, p + 4 * k, 4);
    return v;
  }
}

#ifdef XK_HOST_AVX512_MUL_ADD
// bf16 out[k] = a[k] * b[k] + c[k] over a contiguous run, 16 values per step in AVX-512 registers:
// the portable loop's arithmetic (one fma, FloatToBf16's round to nearest even, NaN made quiet),
// so the same bits. GCC vectorized that loop for the x86-64-v4 clone in 256-bit halves, with its
// constants re-broadcast in the loop. bf16 [1048576] on a Sapphire Rapids guest (2 CPUs), ms:
// 1 thread 0.48 -> 0.32 (torch.addcmul 0.37), 2 threads 0.29-0.49 -> 0.16-0.17 (0.19-0.25).
__attribute__((target("avx512f,avx512bw"), always_inline)) inline __m512 LoadBf16x16(
    const char* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));  // bits << 16
}

// Returns the values done: n rounded down to a multiple of 16 (the caller's loop takes the rest).
__attribute__((target("avx512f,avx512bw"), noinline)) int64_t
MulAddBf16Avx512(const char* __restrict pa, const char* __restrict pb, const char* __restrict pc,
                 char* __restrict po, int64_t n) {
  const __m512i round = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1);
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
  const __m512i quiet = _mm512_set1_epi32(0x40);
  int64_t k = 0;
  for (; k + 16 <= n; k += 16) {
    const __m512i u = _mm512_castps_si512(
        _mm512_fmadd_ps(LoadBf16x16(pa + 2 * k), LoadBf16x16(pb + 2 * k), LoadBf16x16(pc + 2 * k)));
    const __m512i high = _mm512_srli_epi32(u, 16);
    const __m512i rounded = _mm512_srli_epi32(
        _mm512_add_epi32(_mm512_add_epi32(u, round), _mm512_and_si512(high, one)), 16);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, abs_mask), inf);
    const __m512i bits = _mm512_mask_mov_epi32(rounded, nan, _mm512_or_si512(high, quiet));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(po + 2 * k), _mm512_cvtepi32_epi16(bits));
  }
  return k;
}

bool HasAvx512() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
  return has;
}
#endif

// mul_add over an item whose four tensors share one dtype: one pass, each element converted in
// registers (bf16 [1048576] on the CI machine, 2 threads: 1.21x -> 1.16x torch.addcmul),
// instead of three staged conversions into float blocks and a fourth pass.
template <DType kT>
void MulAddSameType(const RowJob& j, const Item& it) {
  int64_t c0 = it.c0;  // the first column left to the portable loop
#ifdef XK_HOST_AVX512_MUL_ADD
  if (kT == DType::kBF16 && HasAvx512()) {
    c0 += MulAddBf16Avx512(Addr(j.in, it.r, c0), Addr(j.in2, it.r, c0), Addr(j.in3, it.r, c0),
                           Addr(j.out, it.r, c0), it.c1 - c0);
  }
#endif
  const char* pa = Addr(j.in, it.r, c0);
  const char* pb = Addr(j.in2, it.r, c0);
  const char* pc = Addr(j.in3, it.r, c0);
  StoreRow(j.out, it.r, c0, it.c1 - c0, [=](int64_t k) {
    return std::fma(LoadAt<kT>(pa, k), LoadAt<kT>(pb, k), LoadAt<kT>(pc, k));
  });
}

XK_HOST_CLONES
void MulAddItems(const RowJob& j, int64_t i0, int64_t i1) {
  float a[kBlock], b[kBlock], c[kBlock];
  const DType t = j.out.dtype;
  const bool same = j.in.dtype == t && j.in2.dtype == t && j.in3.dtype == t;
  for (int64_t i = i0; i < i1; ++i) {
    const Item it = ItemOf(i, j.cols);
    if (same) {
      switch (t) {
        case DType::kBF16:
          MulAddSameType<DType::kBF16>(j, it);
          continue;
        case DType::kF16:
          MulAddSameType<DType::kF16>(j, it);
          continue;
        case DType::kF32:
          MulAddSameType<DType::kF32>(j, it);
          continue;
      }
    }
    for (int64_t c0 = it.c0; c0 < it.c1; c0 += kBlock) {
      const int64_t n = std::min(kBlock, it.c1 - c0);
      ReadRow(j.in, it.r, c0, n, a);
      ReadRow(j.in2, it.r, c0, n, b);
      ReadRow(j.in3, it.r, c0, n, c);
      StoreRow(j.out, it.r, c0, n, [&](int64_t k) { return std::fma(a[k], b[k], c[k]); });
    }
  }
}

XK_HOST_CLONES
void RMSNorm(Mat out, Mat in, Mat weight, int64_t rows, int64_t cols, float eps,
             float weight_offset) {
  const float* w = Column(weight, cols, kColumn);
  const RowJob j{out, {}, in, {}, {}, w, nullptr, cols, eps, weight_offset};
  ParallelFor(rows, 2 * cols, [&j](int64_t r0, int64_t r1) { RMSNormRows(j, r0, r1); });
}

XK_HOST_CLONES
void FusedAddRMSNorm(Mat out, Mat residual_out, Mat in, Mat residual, Mat weight, int64_t rows,
                     int64_t cols, float eps, float weight_offset) {
  const float* w = Column(weight, cols, kColumn);
  const RowJob j{out, residual_out, in, residual, {}, w, nullptr, cols, eps, weight_offset};
  ParallelFor(rows, 4 * cols, [&j](int64_t r0, int64_t r1) { FusedAddRMSNormRows(j, r0, r1); });
}

XK_HOST_CLONES
void LayerNorm(Mat out, Mat in, Mat weight, Mat bias, int64_t rows, int64_t cols, float eps) {
  const float* w = Column(weight, cols, kColumn);
  const float* b = Column(bias, cols, kColumn2);
  const RowJob j{out, {}, in, {}, {}, w, b, cols, eps};
  ParallelFor(rows, 2 * cols, [&j](int64_t r0, int64_t r1) { LayerNormRows(j, r0, r1); });
}

XK_HOST_CLONES
void Softmax(Mat out, Mat in, int64_t rows, int64_t cols, float scale) {
  const RowJob j{out, {}, in, {}, {}, nullptr, nullptr, cols, 0.f, 0.f, scale};
  ParallelFor(rows, (2 + kGateCost) * cols,
              [&j](int64_t r0, int64_t r1) { SoftmaxRows(j, r0, r1); });
}

XK_HOST_CLONES
void ActAndMul(Mat out, Mat in, int64_t rows, int64_t d, Act act) {
  const RowJob j{out, {}, in, {}, {}, nullptr, nullptr, d, 0.f, 0.f, 1.f, act};
  ForItems(rows, d, 3 + kGateCost, [&j](int64_t i0, int64_t i1) { ActAndMulItems(j, i0, i1); });
}

XK_HOST_CLONES
void BiasAct(Mat out, Mat in, Mat bias, int64_t rows, int64_t cols, Act act) {
  const float* b = bias.data ? Column(bias, cols, kColumn) : nullptr;
  const RowJob j{out, {}, in, {}, {}, nullptr, b, cols, 0.f, 0.f, 1.f, act};
  ForItems(rows, cols, 2 + kGateCost, [&j](int64_t i0, int64_t i1) { BiasActItems(j, i0, i1); });
}

XK_HOST_CLONES
void MulAdd(Mat out, Mat a, Mat b, Mat c, int64_t rows, int64_t cols) {
  const RowJob j{out, {}, a, b, c, nullptr, nullptr, cols};
  ForItems(rows, cols, 4, [&j](int64_t i0, int64_t i1) { MulAddItems(j, i0, i1); });
}

}  // namespace xkernels::host
