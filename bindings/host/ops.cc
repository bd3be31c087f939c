// Host implementations: short and plain C++. Rows are read into floats and written back rounded to
// the dtype (one dtype switch per row); arithmetic is float, as on the GPU.
//
// Fast at the -O2 the modules are built with: per-element loops run over blocks of kLanes elements
// (a fixed trip count, which GCC vectorizes at -O2) and then a scalar tail, through __restrict
// pointers (our float buffers never alias a tensor); sums keep kLanes partial sums, added pairwise
// at the end (no chain of dependent adds); the conversions (convert.h) are branch-free for
// bfloat16. With GCC on x86-64 glibc every entry point also gets an AVX2 clone (XK_HOST_CLONES, no
// FMA), picked at load time: the same arithmetic in the same order, so the same results (a NaN's
// sign aside).
#include "host/ops.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>

#include "host/convert.h"

namespace xkernels::host {
namespace {

char* Addr(const Mat& m, int64_t r, int64_t c) {
  return static_cast<char*>(m.data) +
         (m.rs.offset(r) + c) * static_cast<int64_t>(DTypeSize(m.dtype));
}

// Row r's `cols` values from column c0, as floats.
void ReadRow(const Mat& m, int64_t r, int64_t c0, int64_t cols, float* __restrict dst) {
  LoadFloats(Addr(m, r, c0), m.dtype, cols, dst);
}

// Stores f(0), ..., f(n - 1) to row r, each rounded to the row's dtype.
template <class F>
void StoreRow(const Mat& m, int64_t r, int64_t n, F f) {
  StoreFloats(Addr(m, r, 0), m.dtype, n, f);
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
