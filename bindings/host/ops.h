// Host (CPU) implementations of every op: plain C++ with float accumulation. The reference and
// fallback behind the same exported functions when tensors live in host memory; no CUDA here.
#ifndef XKERNELS_BINDINGS_HOST_OPS_H_
#define XKERNELS_BINDINGS_HOST_OPS_H_

#include <cstdint>

#include "xkernels/rows.h"

namespace xkernels::host {

enum class DType : int { kF16, kBF16, kF32 };
enum class Act : int { kSilu = 0, kGelu = 1, kGeluTanh = 2 };  // as xkernels::math::Act

// A [rows, cols] view: base pointer, element type, row addressing (last dim contiguous).
struct Mat {
  void* data;
  DType dtype;
  RowStride rs;
};

void RMSNorm(Mat out, Mat in, Mat weight, int64_t rows, int64_t cols, float eps,
             float weight_offset);
void FusedAddRMSNorm(Mat out, Mat residual_out, Mat in, Mat residual, Mat weight, int64_t rows,
                     int64_t cols, float eps, float weight_offset);
void LayerNorm(Mat out, Mat in, Mat weight, Mat bias, int64_t rows, int64_t cols, float eps);
void Softmax(Mat out, Mat in, int64_t rows, int64_t cols, float scale);
void ActAndMul(Mat out, Mat in, int64_t rows, int64_t d, Act act);
// bias.data may be null (plain activation); a bias has row stride 0.
void BiasAct(Mat out, Mat in, Mat bias, int64_t rows, int64_t cols, Act act);
void MulAdd(Mat out, Mat a, Mat b, Mat c, int64_t rows, int64_t cols);

}  // namespace xkernels::host

#endif  // XKERNELS_BINDINGS_HOST_OPS_H_
