// Host implementations: short and plain C++. Rows are read into floats and written back rounded to
// the dtype (one dtype switch per row); arithmetic is float, as on the GPU.
//
// Fast at the -O2 the modules are built with: per-element loops run over blocks of kLanes elements
// (a fixed trip count, which GCC vectorizes at -O2) and then a scalar tail, through __restrict
// pointers (our float buffers never alias a tensor); sums keep kLanes partial sums, added pairwise
// at the end (no chain of dependent adds); the bfloat16 conversions are branch-free. With GCC on
// x86-64 glibc every entry point also gets an AVX2 clone (no FMA), picked at load time: the same
// arithmetic in the same order, so the same results (a NaN's sign aside).
#include "host/ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>

namespace xkernels::host {
namespace {

constexpr int64_t kLanes = 16;

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__GLIBC__) && \
    !defined(XKERNELS_HOST_NO_CLONES)
#define XK_HOST_CLONES __attribute__((target_clones("avx2", "default"), flatten))
#else
#define XK_HOST_CLONES
#endif

inline float BitsToFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint32_t FloatToBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline uint16_t Load16(const char* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return h;
}
inline void Store16(char* p, uint16_t h) { std::memcpy(p, &h, 2); }

inline float Bf16ToFloat(uint16_t h) { return BitsToFloat(static_cast<uint32_t>(h) << 16); }
inline uint16_t FloatToBf16(float f) {  // round to nearest even; NaN stays NaN (quiet)
  const uint32_t u = FloatToBits(f);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t quiet = (u >> 16) | 0x40u;
  return static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? quiet : rounded);
}

float F16ToFloat(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  if (exp == 0x1f) return BitsToFloat(sign | 0x7f800000u | (man << 13));  // inf, NaN
  if (exp == 0) {  // zero, subnormal: man * 2^-24
    const float v = std::ldexp(static_cast<float>(man), -24);
    return sign ? -v : v;
  }
  return BitsToFloat(sign | ((exp + 112) << 23) | (man << 13));
}
uint16_t FloatToF16(float f) {  // round to nearest even
  const uint32_t u = FloatToBits(f), sign = (u >> 16) & 0x8000u;
  const float a = std::fabs(f);
  if (std::isnan(f)) return static_cast<uint16_t>(sign | 0x7e00);
  if (a >= 65520.f) return static_cast<uint16_t>(sign | 0x7c00);  // overflows to inf
  if (a < 6.103515625e-05f) {  // subnormal range: multiples of 2^-24
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(a * 16777216.f)));
  }
  const uint32_t ua = FloatToBits(a);
  const uint32_t rounded = ua + 0xfff + ((ua >> 13) & 1);
  return static_cast<uint16_t>(sign | (((rounded >> 23) - 112) << 10) | ((rounded >> 13) & 0x3ff));
}

size_t Size(DType t) { return t == DType::kF32 ? 4 : 2; }

char* Addr(const Mat& m, int64_t r, int64_t c) {
  return static_cast<char*>(m.data) + (m.rs.offset(r) + c) * static_cast<int64_t>(Size(m.dtype));
}

// Row r's `cols` values from column c0, as floats: one dtype switch per row.
void ReadRow(const Mat& m, int64_t r, int64_t c0, int64_t cols, float* __restrict dst) {
  const char* __restrict p = Addr(m, r, c0);
  int64_t c = 0;
  switch (m.dtype) {
    case DType::kF32:
      std::memcpy(dst, p, 4 * cols);
      return;
    case DType::kBF16:
      for (; c + kLanes <= cols; c += kLanes)
        for (int64_t j = 0; j < kLanes; ++j) dst[c + j] = Bf16ToFloat(Load16(p + 2 * (c + j)));
      for (; c < cols; ++c) dst[c] = Bf16ToFloat(Load16(p + 2 * c));
      return;
    case DType::kF16:
      for (; c < cols; ++c) dst[c] = F16ToFloat(Load16(p + 2 * c));
      return;
  }
}

// Stores f(0), ..., f(n - 1) to row r, each rounded to the row's dtype.
template <class F>
void StoreRow(const Mat& m, int64_t r, int64_t n, F f) {
  char* __restrict p = Addr(m, r, 0);
  int64_t c = 0;
  switch (m.dtype) {
    case DType::kF32:
      for (; c + kLanes <= n; c += kLanes) {
        for (int64_t j = 0; j < kLanes; ++j) {
          const float v = f(c + j);
          std::memcpy(p + 4 * (c + j), &v, 4);
        }
      }
      for (; c < n; ++c) {
        const float v = f(c);
        std::memcpy(p + 4 * c, &v, 4);
      }
      return;
    case DType::kBF16:
      for (; c + kLanes <= n; c += kLanes)
        for (int64_t j = 0; j < kLanes; ++j) Store16(p + 2 * (c + j), FloatToBf16(f(c + j)));
      for (; c < n; ++c) Store16(p + 2 * c, FloatToBf16(f(c)));
      return;
    case DType::kF16:
      for (; c < n; ++c) Store16(p + 2 * c, FloatToF16(f(c)));
      return;
  }
}

// Rounds v[0, n) to the storage type of row r and stores it. With `keep`, v is then overwritten
// with the stored values (what a later read of the row gives).
void WriteRow(const Mat& m, int64_t r, float* __restrict v, int64_t n, bool keep = false) {
  StoreRow(m, r, n, [v](int64_t i) { return v[i]; });
  if (keep && m.dtype != DType::kF32) ReadRow(m, r, 0, n, v);
}

// Lane-wise partial sums of f(i) over [0, n), added pairwise at the end.
template <class F>
inline float Sum(int64_t n, F f) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
#pragma GCC unroll 16  // kLanes: acc then lives in registers
    for (int64_t j = 0; j < kLanes; ++j) acc[j] += f(i + j);
  }
  for (int64_t j = 0; i < n; ++i, ++j) acc[j] += f(i);
  for (int64_t w = kLanes / 2; w > 0; w /= 2)
    for (int64_t j = 0; j < w; ++j) acc[j] += acc[j + w];
  return acc[0];
}

float SumOfSquares(const float* __restrict x, int64_t n) {
  return Sum(n, [x](int64_t i) { return x[i] * x[i]; });
}

float Activate(float x, Act act) {
  switch (act) {
    case Act::kSilu:
      return x / (1.f + std::exp(-x));
    case Act::kGelu:
      return 0.5f * x * (1.f + std::erf(x * 0.70710678118654752f));
    case Act::kGeluTanh:
      return 0.5f * x * (1.f + std::tanh(0.79788456080286536f * (x + 0.044715f * x * x * x)));
  }
  return x;
}

// A row's floats, uninitialised: rows are read into one first, so that outputs may alias inputs.
class Floats {
 public:
  explicit Floats(int64_t n) : p_(new float[static_cast<size_t>(n)]) {}
  float* data() { return p_.get(); }
  const float* data() const { return p_.get(); }
  float& operator[](int64_t i) { return p_[i]; }
  float operator[](int64_t i) const { return p_[i]; }

 private:
  std::unique_ptr<float[]> p_;
};

// A [cols] weight or bias as floats (`fill` where there is none).
Floats Column(const Mat& m, int64_t cols, float fill = 0.f) {
  Floats v(cols);
  if (m.data) {
    ReadRow(m, 0, 0, cols, v.data());
  } else {
    std::fill(v.data(), v.data() + cols, fill);
  }
  return v;
}

// Row r of out <- x * rsqrt(mean(x^2) + eps) * (offset + w).
void RMSNormRow(const Mat& out, const float* __restrict x, const float* __restrict w, int64_t r,
                int64_t cols, float eps, float offset) {
  const float inv = 1.f / std::sqrt(SumOfSquares(x, cols) / static_cast<float>(cols) + eps);
  StoreRow(out, r, cols, [=](int64_t c) { return x[c] * inv * (offset + w[c]); });
}

}  // namespace

XK_HOST_CLONES
void RMSNorm(Mat out, Mat in, Mat weight, int64_t rows, int64_t cols, float eps,
             float weight_offset) {
  const Floats w = Column(weight, cols);
  Floats x(cols);
  for (int64_t r = 0; r < rows; ++r) {
    ReadRow(in, r, 0, cols, x.data());
    RMSNormRow(out, x.data(), w.data(), r, cols, eps, weight_offset);
  }
}

XK_HOST_CLONES
void FusedAddRMSNorm(Mat out, Mat residual_out, Mat in, Mat residual, Mat weight, int64_t rows,
                     int64_t cols, float eps, float weight_offset) {
  const Floats w = Column(weight, cols);
  Floats xs(cols), res(cols);
  float* __restrict x = xs.data();
  float* __restrict rv = res.data();
  for (int64_t r = 0; r < rows; ++r) {
    ReadRow(in, r, 0, cols, x);
    ReadRow(residual, r, 0, cols, rv);
    int64_t c = 0;
    for (; c + kLanes <= cols; c += kLanes)
      for (int64_t j = 0; j < kLanes; ++j) x[c + j] += rv[c + j];
    for (; c < cols; ++c) x[c] += rv[c];
    WriteRow(residual_out, r, x, cols, /*keep=*/true);  // x now holds the rounded sum
    RMSNormRow(out, x, w.data(), r, cols, eps, weight_offset);
  }
}

XK_HOST_CLONES
void LayerNorm(Mat out, Mat in, Mat weight, Mat bias, int64_t rows, int64_t cols, float eps) {
  const Floats w = Column(weight, cols), b = Column(bias, cols);
  Floats xs(cols);
  float* __restrict x = xs.data();
  for (int64_t r = 0; r < rows; ++r) {
    ReadRow(in, r, 0, cols, x);
    const float mean = Sum(cols, [x](int64_t i) { return x[i]; }) / static_cast<float>(cols);
    const float var = Sum(cols, [x, mean](int64_t i) { return (x[i] - mean) * (x[i] - mean); });
    const float inv = 1.f / std::sqrt(var / static_cast<float>(cols) + eps);
    const float* __restrict wv = w.data();
    const float* __restrict bv = b.data();
    StoreRow(out, r, cols, [=](int64_t c) { return (x[c] - mean) * inv * wv[c] + bv[c]; });
  }
}

XK_HOST_CLONES
void Softmax(Mat out, Mat in, int64_t rows, int64_t cols, float scale) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  Floats xs(cols);
  float* const x = xs.data();
  for (int64_t r = 0; r < rows; ++r) {
    ReadRow(in, r, 0, cols, x);
    float m = kNegInf, s = 0.f;
    for (int64_t c = 0; c < cols; ++c) m = std::max(m, x[c] *= scale);
    if (m == kNegInf) {  // a row of -inf has no mass: zeros, as on the GPU
      std::fill(x, x + cols, 0.f);
    } else {
      for (int64_t c = 0; c < cols; ++c) s += (x[c] = std::exp(x[c] - m));
      for (int64_t c = 0; c < cols; ++c) x[c] /= s;
    }
    WriteRow(out, r, x, cols);
  }
}

XK_HOST_CLONES
void ActAndMul(Mat out, Mat in, int64_t rows, int64_t d, Act act) {
  Floats x(d), y(d);
  for (int64_t r = 0; r < rows; ++r) {
    ReadRow(in, r, 0, d, x.data());
    ReadRow(in, r, d, d, y.data());
    for (int64_t c = 0; c < d; ++c) x[c] = Activate(x[c], act) * y[c];
    WriteRow(out, r, x.data(), d);
  }
}

XK_HOST_CLONES
void BiasAct(Mat out, Mat in, Mat bias, int64_t rows, int64_t cols, Act act) {
  const Floats b = Column(bias, cols);
  Floats x(cols);
  for (int64_t r = 0; r < rows; ++r) {
    ReadRow(in, r, 0, cols, x.data());
    for (int64_t c = 0; c < cols; ++c) x[c] = Activate(x[c] + b[c], act);
    WriteRow(out, r, x.data(), cols);
  }
}

XK_HOST_CLONES
void MulAdd(Mat out, Mat a, Mat b, Mat c, int64_t rows, int64_t cols) {
  Floats va(cols), vb(cols), vc(cols);
  for (int64_t r = 0; r < rows; ++r) {
    ReadRow(a, r, 0, cols, va.data());
    ReadRow(b, r, 0, cols, vb.data());
    ReadRow(c, r, 0, cols, vc.data());
    for (int64_t k = 0; k < cols; ++k) va[k] = std::fma(va[k], vb[k], vc[k]);
    WriteRow(out, r, va.data(), cols);
  }
}

}  // namespace xkernels::host
