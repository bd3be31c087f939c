// Exported softmax over the last dimension: validate -> device guard -> stream -> dispatch and
// launch (or the host implementation).
#include "common.h"

#ifndef XKERNELS_HOST_ONLY
#include "xkernels/softmax.h"
#endif

namespace xkernels::bind {
namespace {

void SoftmaxOp(TensorView out, TensorView input, double scale) {
  constexpr const char* op = "softmax";
  const host::DType dt = CheckRowOp(op, out, input);
  if (!std::isfinite(scale)) TVM_FFI_THROW(ValueError) << op << ": scale must be finite, got " << scale;
  const int64_t rows = Rows(input), cols = input.size(-1);
  const RowStride out_rs = RowsOf(op, "out", out), in_rs = RowsOf(op, "input", input);
  if (rows * cols == 0) return;
  XK_ON_DEVICE(op, input,
               DispatchFloat(dt,
                             [&](auto t) {
                               using T = decltype(t);
                               return Softmax<T>(static_cast<T*>(Ptr(out)),
                                                 static_cast<const T*>(Ptr(input)), rows,
                                                 static_cast<int>(cols), out_rs, in_rs,
                                                 static_cast<float>(scale), stream);
                             }),
               host::Softmax(MatOf(out, dt, out_rs), MatOf(input, dt, in_rs), rows, cols,
                             static_cast<float>(scale)));
}

}  // namespace
}  // namespace xkernels::bind

TVM_FFI_DLL_EXPORT_TYPED_FUNC(softmax, xkernels::bind::SoftmaxOp);
