// Host implementations: correct and short, not tuned. Rows are read into floats and written back
// rounded to the dtype (one dtype switch per row); arithmetic is float, as on the GPU.
#include "host/ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace xkernels::host {
namespace {

float BitsToFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint32_t FloatToBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

float Bf16ToFloat(uint16_t h) { return BitsToFloat(static_cast<uint32_t>(h) << 16); }
uint16_t FloatToBf16(float f) {  // round to nearest even; NaN stays NaN
  const uint32_t u = FloatToBits(f);
  if (std::isnan(f)) return static_cast<uint16_t>((u >> 16) | 0x40);
  return static_cast<uint16_t>((u + 0x7fff + ((u >> 16) & 1)) >> 16);
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
void ReadRow(const Mat& m, int64_t r, int64_t c0, int64_t cols, float* dst) {
  const char* p = Addr(m, r, c0);
  uint16_t h;
  switch (m.dtype) {
    case DType::kF32:
      std::memcpy(dst, p, 4 * cols);
      return;
    case DType::kBF16:
      for (int64_t c = 0; c < cols; ++c) std::memcpy(&h, p + 2 * c, 2), dst[c] = Bf16ToFloat(h);
      return;
    case DType::kF16:
      for (int64_t c = 0; c < cols; ++c) std::memcpy(&h, p + 2 * c, 2), dst[c] = F16ToFloat(h);
      return;
  }
}

// Rounds v to the storage type of row r and stores it; v is left holding the stored values.
void WriteRow(const Mat& m, int64_t r, std::vector<float>& v) {
  char* p = Addr(m, r, 0);
  const int64_t n = static_cast<int64_t>(v.size());
  uint16_t h;
  switch (m.dtype) {
    case DType::kF32:
      std::memcpy(p, v.data(), 4 * n);
      return;
    case DType::kBF16:
      for (int64_t c = 0; c < n; ++c)
        h = FloatToBf16(v[c]), std::memcpy(p + 2 * c, &h, 2), v[c] = Bf16ToFloat(h);
      return;
    case DType::kF16:
      for (int64_t c = 0; c < n; ++c)
        h = FloatToF16(v[c]), std::memcpy(p + 2 * c, &h, 2), v[c] = F16ToFloat(h);
      return;
  }
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

// Reads a row into floats first, so that outputs may alias inputs.
std::vector<float> Row(const Mat& m, int64_t r, int64_t cols, int64_t c0 = 0) {
  std::vector<float> v(cols);
  ReadRow(m, r, c0, cols, v.data());
  return v;
}

// A [cols] weight or bias as floats (`fill` where there is none).
std::vector<float> Column(const Mat& m, int64_t cols, float fill = 0.f) {
  return m.data ? Row(m, 0, cols) : std::vector<float>(cols, fill);
}

void RMSNormRow(const Mat& out, std::vector<float>& x, const std::vector<float>& w, int64_t r,
                float eps, float offset) {
  float ss = 0.f;
  for (float v : x) ss += v * v;
  const float inv = 1.f / std::sqrt(ss / static_cast<float>(x.size()) + eps);
  for (size_t c = 0; c < x.size(); ++c) x[c] = x[c] * inv * (offset + w[c]);
  WriteRow(out, r, x);
}

}  // namespace

void RMSNorm(Mat out, Mat in, Mat weight, int64_t rows, int64_t cols, float eps,
             float weight_offset) {
  const std::vector<float> w = Column(weight, cols);
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<float> x = Row(in, r, cols);
    RMSNormRow(out, x, w, r, eps, weight_offset);
  }
}

void FusedAddRMSNorm(Mat out, Mat residual_out, Mat in, Mat residual, Mat weight, int64_t rows,
                     int64_t cols, float eps, float weight_offset) {
  const std::vector<float> w = Column(weight, cols);
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<float> x = Row(in, r, cols);
    const std::vector<float> res = Row(residual, r, cols);
    for (int64_t c = 0; c < cols; ++c) x[c] += res[c];
    WriteRow(residual_out, r, x);  // x now holds the rounded sum
    RMSNormRow(out, x, w, r, eps, weight_offset);
  }
}

void LayerNorm(Mat out, Mat in, Mat weight, Mat bias, int64_t rows, int64_t cols, float eps) {
  const std::vector<float> w = Column(weight, cols), b = Column(bias, cols);
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<float> x = Row(in, r, cols);
    float mean = 0.f, var = 0.f;
    for (float v : x) mean += v;
    mean /= static_cast<float>(cols);
    for (float v : x) var += (v - mean) * (v - mean);
    const float inv = 1.f / std::sqrt(var / static_cast<float>(cols) + eps);
    for (int64_t c = 0; c < cols; ++c) x[c] = (x[c] - mean) * inv * w[c] + b[c];
    WriteRow(out, r, x);
  }
}

void Softmax(Mat out, Mat in, int64_t rows, int64_t cols, float scale) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<float> x = Row(in, r, cols);
    float m = kNegInf, s = 0.f;
    for (float& v : x) m = std::max(m, v *= scale);
    if (m == kNegInf) {  // a row of -inf has no mass: zeros, as on the GPU
      std::fill(x.begin(), x.end(), 0.f);
    } else {
      for (float& v : x) s += (v = std::exp(v - m));
      for (float& v : x) v /= s;
    }
    WriteRow(out, r, x);
  }
}

void ActAndMul(Mat out, Mat in, int64_t rows, int64_t d, Act act) {
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<float> x = Row(in, r, d);
    const std::vector<float> y = Row(in, r, d, d);
    for (int64_t c = 0; c < d; ++c) x[c] = Activate(x[c], act) * y[c];
    WriteRow(out, r, x);
  }
}

void BiasAct(Mat out, Mat in, Mat bias, int64_t rows, int64_t cols, Act act) {
  const std::vector<float> b = Column(bias, cols);
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<float> x = Row(in, r, cols);
    for (int64_t c = 0; c < cols; ++c) x[c] = Activate(x[c] + b[c], act);
    WriteRow(out, r, x);
  }
}

void MulAdd(Mat out, Mat a, Mat b, Mat c, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<float> va = Row(a, r, cols);
    const std::vector<float> vb = Row(b, r, cols), vc = Row(c, r, cols);
    for (int64_t k = 0; k < cols; ++k) va[k] = std::fma(va[k], vb[k], vc[k]);
    WriteRow(out, r, va);
  }
}

}  // namespace xkernels::host
