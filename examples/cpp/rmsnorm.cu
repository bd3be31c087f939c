// Calling an xkernels launcher from plain C++/CUDA: no Python, no framework, no TVM-FFI.
// Build (one line, from the repository root):
//   nvcc -std=c++17 -O2 -gencode=arch=compute_90a,code=sm_90a -I include examples/cpp/rmsnorm.cu -o rmsnorm_example
// Runs RMSNorm over bf16 rows on the GPU and checks it against a float64 CPU reference.
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "xkernels/norm.h"

#define CHECK(expr)                                                                    \
  do {                                                                                 \
    cudaError_t e = (expr);                                                            \
    if (e != cudaSuccess) {                                                            \
      std::printf("FAIL: %s: %s\n", #expr, cudaGetErrorString(e));                     \
      return 1;                                                                        \
    }                                                                                  \
  } while (0)

int main() {
  const int64_t rows = 33;
  const int cols = 4096;
  const float eps = 1e-6f;
  std::mt19937 rng(0);
  std::normal_distribution<float> normal;
  std::vector<__nv_bfloat16> x(rows * cols), w(cols), y(rows * cols);
  for (auto& v : x) v = __float2bfloat16(normal(rng));
  for (auto& v : w) v = __float2bfloat16(normal(rng));

  __nv_bfloat16 *dx, *dw, *dy;
  CHECK(cudaMalloc(&dx, x.size() * sizeof(x[0])));
  CHECK(cudaMalloc(&dw, w.size() * sizeof(w[0])));
  CHECK(cudaMalloc(&dy, y.size() * sizeof(y[0])));
  CHECK(cudaMemcpy(dx, x.data(), x.size() * sizeof(x[0]), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dw, w.data(), w.size() * sizeof(w[0]), cudaMemcpyHostToDevice));
  CHECK(cudaMemset(dy, 0xff, y.size() * sizeof(y[0])));  // NaN: every element must be written

  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  // Rows are contiguous: the row stride (in elements) is cols for both tensors.
  CHECK(xkernels::RMSNorm(dy, dx, dw, rows, cols, /*out_stride=*/cols, /*in_stride=*/cols, eps,
                          stream));
  CHECK(cudaStreamSynchronize(stream));
  CHECK(cudaMemcpy(y.data(), dy, y.size() * sizeof(y[0]), cudaMemcpyDeviceToHost));

  double max_err = 0.0;
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0.0;
    for (int c = 0; c < cols; ++c) ss += std::pow(__bfloat162float(x[r * cols + c]), 2);
    const double inv = 1.0 / std::sqrt(ss / cols + eps);
    for (int c = 0; c < cols; ++c) {
      const double ref = __bfloat162float(x[r * cols + c]) * inv * __bfloat162float(w[c]);
      const double got = __bfloat162float(y[r * cols + c]);
      const double err = std::fabs(got - ref) / (1.0 + std::fabs(ref));
      max_err = std::isnan(got) ? INFINITY : std::fmax(max_err, err);
    }
  }
  std::printf("rmsnorm %lldx%d bf16: max relative error %.3g\n", static_cast<long long>(rows), cols,
              max_err);
  std::printf("%s\n", max_err < 1e-2 ? "PASS" : "FAIL");
  cudaFree(dx);
  cudaFree(dw);
  cudaFree(dy);
  cudaStreamDestroy(stream);
  return max_err < 1e-2 ? 0 : 1;
}
