// Host implementations: correct and short, not fast. Values are read and written one element at
// a time through the dtype; arithmetic is float, as on the GPU.
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

float Get(const Mat& m, int64_t r, int64_t c) {
  const char* p = Addr(m, r, c);
  uint16_t h;
  switch (m.dtype) {
    case DType::kF32: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    case DType::kBF16:
      std::memcpy(&h, p, 2);
      return Bf16ToFloat(h);
    case DType::kF16:
      std::memcpy(&h, p, 2);
      return F16ToFloat(h);
  }
  return 0.f;
}

// Rounds to the storage type and returns the stored value as float.
float Set(const Mat& m, int64_t r, int64_t c, float v) {
  char* p = Addr(m, r, c);
  uint16_t h;
  switch (m.dtype) {
    case DType::kF32:
      std::memcpy(p, &v, 4);
      return v;
    case DType::kBF16:
      h = FloatToBf16(v);
      std::memcpy(p, &h, 2);
      return Bf16ToFloat(h);
    case DType::kF16:
      h = FloatToF16(v);
      std::memcpy(p, &h, 2);
      return F16ToFloat(h);
  }
  return v;
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
  for (int64_t c = 0; c < cols; ++c) v[c] = Get(m, r, c0 + c);
  return v;
}

void RMSNormRow(const Mat& out, const std::vector<float>& x, const Mat& w, int64_t r, float eps,
                float offset) {
  float ss = 0.f;
  for (float v : x) ss += v * v;
  const float inv = 1.f / std::sqrt(ss / static_cast<float>(x.size()) + eps);
  for (size_t c = 0; c < x.size(); ++c) Set(out, r, c, x[c] * inv * (offset + Get(w, 0, c)));
}

}  // namespace

void RMSNorm(Mat out, Mat in, Mat weight, int64_t rows, int64_t cols, float eps,
             float weight_offset) {
  for (int64_t r = 0; r < rows; ++r) RMSNormRow(out, Row(in, r, cols), weight, r, eps, weight_offset);
}

void FusedAddRMSNorm(Mat out, Mat residual_out, Mat in, Mat residual, Mat weight, int64_t rows,
                     int64_t cols, float eps, float weight_offset) {
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<float> x = Row(in, r, cols);
    const std::vector<float> res = Row(residual, r, cols);
    for (int64_t c = 0; c < cols; ++c) x[c] = Set(residual_out, r, c, x[c] + res[c]);
    RMSNormRow(out, x, weight, r, eps, weight_offset);
  }
}

void LayerNorm(Mat out, Mat in, Mat weight, Mat bias, int64_t rows, int64_t cols, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const std::vector<float> x = Row(in, r, cols);
    float mean = 0.f, var = 0.f;
    for (float v : x) mean += v;
    mean /= static_cast<float>(cols);
    for (float v : x) var += (v - mean) * (v - mean);
    const float inv = 1.f / std::sqrt(var / static_cast<float>(cols) + eps);
    for (int64_t c = 0; c < cols; ++c)
      Set(out, r, c, (x[c] - mean) * inv * Get(weight, 0, c) + Get(bias, 0, c));
  }
}

void Softmax(Mat out, Mat in, int64_t rows, int64_t cols, float scale) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<float> x = Row(in, r, cols);
    float m = kNegInf, s = 0.f;
    for (float& v : x) m = std::max(m, v *= scale);
    if (m == kNegInf) {  // a row of -inf has no mass: zeros, as on the GPU
      for (int64_t c = 0; c < cols; ++c) Set(out, r, c, 0.f);
      continue;
    }
    for (float& v : x) s += (v = std::exp(v - m));
    for (int64_t c = 0; c < cols; ++c) Set(out, r, c, x[c] / s);
  }
}

void ActAndMul(Mat out, Mat in, int64_t rows, int64_t d, Act act) {
  for (int64_t r = 0; r < rows; ++r) {
    const std::vector<float> x = Row(in, r, d), y = Row(in, r, d, d);
    for (int64_t c = 0; c < d; ++c) Set(out, r, c, Activate(x[c], act) * y[c]);
  }
}

void BiasAct(Mat out, Mat in, Mat bias, int64_t rows, int64_t cols, Act act) {
  for (int64_t r = 0; r < rows; ++r) {
    const std::vector<float> x = Row(in, r, cols);
    for (int64_t c = 0; c < cols; ++c)
      Set(out, r, c, Activate(x[c] + (bias.data ? Get(bias, 0, c) : 0.f), act));
  }
}

void MulAdd(Mat out, Mat a, Mat b, Mat c, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    const std::vector<float> va = Row(a, r, cols), vb = Row(b, r, cols), vc = Row(c, r, cols);
    for (int64_t k = 0; k < cols; ++k) Set(out, r, k, std::fma(va[k], vb[k], vc[k]));
  }
}

}  // namespace xkernels::host
