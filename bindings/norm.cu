// Exported norms: rmsnorm, gemma_rmsnorm, fused_add_rmsnorm, gemma_fused_add_rmsnorm, layernorm.
// Each: validate -> device guard -> stream -> dispatch and launch (or the host implementation).
#include "common.h"

#ifndef XKERNELS_HOST_ONLY
#include "xkernels/norm.h"
#endif

namespace xkernels::bind {
namespace {

void CheckEps(const char* op, double eps) {
  if (!(eps >= 0.0)) TVM_FFI_THROW(ValueError) << op << ": eps must be >= 0, got " << eps;
}

void RMSNormImpl(const char* op, TensorView out, TensorView input, TensorView weight, double eps,
                 float offset) {
  const host::DType dt = CheckRowOp(op, out, input);
  const int64_t rows = Rows(input), cols = input.size(-1);
  const host::DType wt = CheckColumnVector(op, "weight", weight, input, cols);
  CheckEps(op, eps);
  const RowStride out_rs = RowsOf(op, "out", out), in_rs = RowsOf(op, "input", input);
  if (rows * cols == 0) return;
  XK_ON_DEVICE(op, input,
               DispatchFloatWeight(dt, wt,
                                   [&](auto t, auto w) {
                                     using T = decltype(t);
                                     using W = decltype(w);
                                     return RMSNorm<T, W>(
                                         static_cast<T*>(Ptr(out)), static_cast<const T*>(Ptr(input)),
                                         static_cast<const W*>(Ptr(weight)), rows,
                                         static_cast<int>(cols), out_rs, in_rs,
                                         static_cast<float>(eps), stream, offset != 0.f);
                                   }),
               host::RMSNorm(MatOf(out, dt, out_rs), MatOf(input, dt, in_rs),
                             MatOf(weight, wt, 0), rows, cols, static_cast<float>(eps), offset));
}

void FusedAddRMSNormImpl(const char* op, TensorView out, TensorView residual_out,
                         TensorView input, TensorView residual, TensorView weight, double eps,
                         float offset) {
  const host::DType dt = CheckRowOp(op, out, input);
  CheckDevice(op, "residual", residual, "input", input);
  CheckDevice(op, "residual_out", residual_out, "input", input);
  CheckSameDType(op, "residual", residual, "input", input);
  CheckSameDType(op, "residual_out", residual_out, "input", input);
  CheckShape(op, "residual", residual, ShapeOf(input), "(input's shape)");
  CheckShape(op, "residual_out", residual_out, ShapeOf(input), "(input's shape)");
  const int64_t rows = Rows(input), cols = input.size(-1);
  const host::DType wt = CheckColumnVector(op, "weight", weight, input, cols);
  CheckEps(op, eps);
  const RowStride out_rs = RowsOf(op, "out", out), res_out_rs = RowsOf(op, "residual_out", residual_out),
                  in_rs = RowsOf(op, "input", input), res_rs = RowsOf(op, "residual", residual);
  if (rows * cols == 0) return;
  XK_ON_DEVICE(
      op, input,
      DispatchFloatWeight(dt, wt,
                          [&](auto t, auto w) {
                            using T = decltype(t);
                            using W = decltype(w);
                            return FusedAddRMSNorm<T, W>(
                                static_cast<T*>(Ptr(out)), static_cast<T*>(Ptr(residual_out)),
                                static_cast<const T*>(Ptr(input)),
                                static_cast<const T*>(Ptr(residual)),
                                static_cast<const W*>(Ptr(weight)), rows, static_cast<int>(cols),
                                out_rs, res_out_rs, in_rs, res_rs, static_cast<float>(eps), stream,
                                offset != 0.f);
                          }),
      host::FusedAddRMSNorm(MatOf(out, dt, out_rs), MatOf(residual_out, dt, res_out_rs),
                            MatOf(input, dt, in_rs), MatOf(residual, dt, res_rs),
                            MatOf(weight, wt, 0), rows, cols, static_cast<float>(eps), offset));
}

void RMSNormOp(TensorView out, TensorView input, TensorView weight, double eps) {
  RMSNormImpl("rmsnorm", out, input, weight, eps, 0.f);
}
void GemmaRMSNormOp(TensorView out, TensorView input, TensorView weight, double eps) {
  RMSNormImpl("gemma_rmsnorm", out, input, weight, eps, 1.f);
}
void FusedAddRMSNormOp(TensorView out, TensorView residual_out, TensorView input,
                       TensorView residual, TensorView weight, double eps) {
  FusedAddRMSNormImpl("fused_add_rmsnorm", out, residual_out, input, residual, weight, eps, 0.f);
}
void GemmaFusedAddRMSNormOp(TensorView out, TensorView residual_out, TensorView input,
                            TensorView residual, TensorView weight, double eps) {
  FusedAddRMSNormImpl("gemma_fused_add_rmsnorm", out, residual_out, input, residual, weight, eps,
                      1.f);
}

void LayerNormOp(TensorView out, TensorView input, TensorView weight, TensorView bias,
                 double eps) {
  constexpr const char* op = "layernorm";
  const host::DType dt = CheckRowOp(op, out, input);
  const int64_t rows = Rows(input), cols = input.size(-1);
  const host::DType wt = CheckColumnVector(op, "weight", weight, input, cols);
  const host::DType bt = CheckColumnVector(op, "bias", bias, input, cols);
  CheckSameDType(op, "bias", bias, "weight", weight);
  CheckEps(op, eps);
  const RowStride out_rs = RowsOf(op, "out", out), in_rs = RowsOf(op, "input", input);
  if (rows * cols == 0) return;
  XK_ON_DEVICE(op, input,
               DispatchFloatWeight(dt, wt,
                                   [&](auto t, auto w) {
                                     using T = decltype(t);
                                     using W = decltype(w);
                                     return LayerNorm<T, W>(
                                         static_cast<T*>(Ptr(out)), static_cast<const T*>(Ptr(input)),
                                         static_cast<const W*>(Ptr(weight)),
                                         static_cast<const W*>(Ptr(bias)), rows,
                                         static_cast<int>(cols), out_rs, in_rs,
                                         static_cast<float>(eps), stream);
                                   }),
               host::LayerNorm(MatOf(out, dt, out_rs), MatOf(input, dt, in_rs),
                               MatOf(weight, wt, 0), MatOf(bias, bt, 0), rows, cols,
                               static_cast<float>(eps)));
}

}  // namespace
}  // namespace xkernels::bind

TVM_FFI_DLL_EXPORT_TYPED_FUNC(rmsnorm, xkernels::bind::RMSNormOp);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(gemma_rmsnorm, xkernels::bind::GemmaRMSNormOp);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(fused_add_rmsnorm, xkernels::bind::FusedAddRMSNormOp);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(gemma_fused_add_rmsnorm, xkernels::bind::GemmaFusedAddRMSNormOp);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(layernorm, xkernels::bind::LayerNormOp);
