// Exported elementwise ops: silu_and_mul, gelu_and_mul, gelu_tanh_and_mul, silu, gelu,
// add_bias_gelu, mul_add. Each: validate -> device guard -> stream -> dispatch and launch (or the
// host implementation). `approximate` is 0 ("none", erf) or 1 ("tanh").
#include "common.h"

#ifndef XKERNELS_HOST_ONLY
#include "xkernels/activation.h"
#endif

namespace xkernels::bind {
namespace {

// out and input on one device, of one float dtype, at least 1-D.
host::DType CheckPair(const char* op, const TensorView& out, const TensorView& input) {
  CheckDeviceType(op, "input", input);
  CheckDevice(op, "out", out, "input", input);
  const host::DType dt = FloatType(op, "input", input);
  CheckSameDType(op, "out", out, "input", input);
  CheckMinDim(op, "input", input, 1);
  return dt;
}

// Flat [1, numel] when every tensor is dense (any shape then vectorises as one long row),
// else [rows, cols] with each tensor's own row addressing.
struct Layout {
  int64_t rows, cols;
  std::vector<RowStride> rs;
};
Layout LayoutOf(const char* op, std::initializer_list<std::pair<const char*, const TensorView*>> ts) {
  const TensorView& first = *ts.begin()->second;
  bool dense = true;
  for (const auto& [name, t] : ts) dense = dense && Dense(*t);
  Layout l;
  if (dense) {
    l.rows = 1;
    l.cols = first.numel();
    for (size_t i = 0; i < ts.size(); ++i) l.rs.push_back(RowStride(0));
  } else {
    l.rows = Rows(first);
    l.cols = first.size(-1);
    for (const auto& [name, t] : ts) l.rs.push_back(RowsOf(op, name, *t));
  }
  return l;
}

#ifndef XKERNELS_HOST_ONLY
template <math::Act A>
cudaError_t LaunchActAndMul(host::DType dt, void* out, const void* in, int64_t rows, int64_t d,
                            RowStride out_rs, RowStride in_rs, cudaStream_t stream) {
  return DispatchFloat(dt, [&](auto t) {
    using T = decltype(t);
    return ActAndMul<A, T>(static_cast<T*>(out), static_cast<const T*>(in), rows, d, out_rs, in_rs,
                           stream);
  });
}
template <math::Act A>
cudaError_t LaunchBiasAct(host::DType dt, host::DType bt, void* out, const void* in,
                          const void* bias, int64_t rows, int64_t cols, RowStride out_rs,
                          RowStride in_rs, cudaStream_t stream) {
  if (bias == nullptr) {
    return DispatchFloat(dt, [&](auto t) {
      using T = decltype(t);
      return Activation<A, T>(static_cast<T*>(out), static_cast<const T*>(in), rows, cols, out_rs,
                              in_rs, stream);
    });
  }
  return DispatchFloatWeight(dt, bt, [&](auto t, auto b) {
    using T = decltype(t);
    using B = decltype(b);
    return BiasAct<A, T, B>(static_cast<T*>(out), static_cast<const T*>(in),
                            static_cast<const B*>(bias), rows, cols, out_rs, in_rs, stream);
  });
}
#endif

void ActAndMulImpl(const char* op, host::Act act, TensorView out, TensorView input) {
  const host::DType dt = CheckPair(op, out, input);
  const int64_t two_d = input.size(-1);
  if (two_d % 2 != 0) {
    TVM_FFI_THROW(ValueError) << op << ": input's last dimension must be even (2 * d), got "
                              << two_d;
  }
  Shape want = ShapeOf(input);
  want.back() = two_d / 2;
  CheckShape(op, "out", out, want, "(input's shape with the last dimension halved)");
  const RowStride out_rs = RowsOf(op, "out", out), in_rs = RowsOf(op, "input", input);
  const int64_t rows = Rows(input), d = two_d / 2;
  if (rows * d == 0) return;
  XK_ON_DEVICE(
      op, input,
      act == host::Act::kSilu
          ? LaunchActAndMul<math::Act::kSilu>(dt, Ptr(out), Ptr(input), rows, d, out_rs, in_rs, stream)
      : act == host::Act::kGelu
          ? LaunchActAndMul<math::Act::kGelu>(dt, Ptr(out), Ptr(input), rows, d, out_rs, in_rs, stream)
          : LaunchActAndMul<math::Act::kGeluTanh>(dt, Ptr(out), Ptr(input), rows, d, out_rs, in_rs,
                                                  stream),
      host::ActAndMul(MatOf(out, dt, out_rs), MatOf(input, dt, in_rs), rows, d, act));
}

host::Act GeluKind(const char* op, int64_t approximate) {
  if (approximate != 0 && approximate != 1) {
    TVM_FFI_THROW(ValueError) << op << ": approximate must be 0 ('none') or 1 ('tanh'), got "
                              << approximate;
  }
  return approximate == 0 ? host::Act::kGelu : host::Act::kGeluTanh;
}

// out = act(input [+ bias]); bias may be null.
void BiasActImpl(const char* op, host::Act act, TensorView out, TensorView input,
                 const TensorView* bias) {
  const host::DType dt = CheckPair(op, out, input);
  CheckShape(op, "out", out, ShapeOf(input), "(input's shape)");
  host::DType bt = dt;
  Layout l;
  if (bias) {
    bt = CheckColumnVector(op, "bias", *bias, input, input.size(-1));
    l = Layout{Rows(input), input.size(-1), {RowsOf(op, "out", out), RowsOf(op, "input", input)}};
  } else {
    l = LayoutOf(op, {{"out", &out}, {"input", &input}});
  }
  if (l.rows * l.cols == 0) return;
  const void* b = bias ? Ptr(*bias) : nullptr;
  XK_ON_DEVICE(
      op, input,
      act == host::Act::kSilu
          ? LaunchBiasAct<math::Act::kSilu>(dt, bt, Ptr(out), Ptr(input), b, l.rows, l.cols,
                                            l.rs[0], l.rs[1], stream)
      : act == host::Act::kGelu
          ? LaunchBiasAct<math::Act::kGelu>(dt, bt, Ptr(out), Ptr(input), b, l.rows, l.cols,
                                            l.rs[0], l.rs[1], stream)
          : LaunchBiasAct<math::Act::kGeluTanh>(dt, bt, Ptr(out), Ptr(input), b, l.rows, l.cols,
                                                l.rs[0], l.rs[1], stream),
      host::BiasAct(MatOf(out, dt, l.rs[0]), MatOf(input, dt, l.rs[1]),
                    host::Mat{const_cast<void*>(b), bt, RowStride(0)}, l.rows, l.cols, act));
}

void SiluAndMulOp(TensorView out, TensorView input) {
  ActAndMulImpl("silu_and_mul", host::Act::kSilu, out, input);
}
void GeluAndMulOp(TensorView out, TensorView input) {
  ActAndMulImpl("gelu_and_mul", host::Act::kGelu, out, input);
}
void GeluTanhAndMulOp(TensorView out, TensorView input) {
  ActAndMulImpl("gelu_tanh_and_mul", host::Act::kGeluTanh, out, input);
}
void SiluOp(TensorView out, TensorView input) {
  BiasActImpl("silu", host::Act::kSilu, out, input, nullptr);
}
void GeluOp(TensorView out, TensorView input, int64_t approximate) {
  BiasActImpl("gelu", GeluKind("gelu", approximate), out, input, nullptr);
}
void AddBiasGeluOp(TensorView out, TensorView input, TensorView bias, int64_t approximate) {
  BiasActImpl("add_bias_gelu", GeluKind("add_bias_gelu", approximate), out, input, &bias);
}

void MulAddOp(TensorView out, TensorView a, TensorView b, TensorView c) {
  constexpr const char* op = "mul_add";
  CheckDeviceType(op, "a", a);
  const host::DType dt = FloatType(op, "a", a);
  CheckMinDim(op, "a", a, 1);
  for (const auto& [name, t] : {std::pair<const char*, const TensorView*>{"b", &b}, {"c", &c}, {"out", &out}}) {
    CheckDevice(op, name, *t, "a", a);
    CheckSameDType(op, name, *t, "a", a);
    CheckShape(op, name, *t, ShapeOf(a), "(a's shape; no broadcasting)");
  }
  const Layout l = LayoutOf(op, {{"out", &out}, {"a", &a}, {"b", &b}, {"c", &c}});
  if (l.rows * l.cols == 0) return;
  XK_ON_DEVICE(op, a,
               DispatchFloat(dt,
                             [&](auto t) {
                               using T = decltype(t);
                               return MulAdd<T>(static_cast<T*>(Ptr(out)),
                                                static_cast<const T*>(Ptr(a)),
                                                static_cast<const T*>(Ptr(b)),
                                                static_cast<const T*>(Ptr(c)), l.rows, l.cols,
                                                l.rs[0], l.rs[1], l.rs[2], l.rs[3], stream);
                             }),
               host::MulAdd(MatOf(out, dt, l.rs[0]), MatOf(a, dt, l.rs[1]), MatOf(b, dt, l.rs[2]),
                            MatOf(c, dt, l.rs[3]), l.rows, l.cols));
}

}  // namespace
}  // namespace xkernels::bind

TVM_FFI_DLL_EXPORT_TYPED_FUNC(silu_and_mul, xkernels::bind::SiluAndMulOp);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(gelu_and_mul, xkernels::bind::GeluAndMulOp);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(gelu_tanh_and_mul, xkernels::bind::GeluTanhAndMulOp);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(silu, xkernels::bind::SiluOp);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(gelu, xkernels::bind::GeluOp);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(add_bias_gelu, xkernels::bind::AddBiasGeluOp);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(mul_add, xkernels::bind::MulAddOp);
