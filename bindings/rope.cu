// Exported RoPE: apply_rope (q and k rotated in one pass) and qk_norm_rope (an RMSNorm of each
// head first). Each: validate -> device guard -> stream -> dispatch and launch (or the host
// implementation). Arguments: outputs (q_out, k_out: q and k themselves in place), inputs (q, k,
// [q_weight, k_weight,] positions), then scalars. q [..., tokens, num_qo_heads, head_dim], k
// [..., tokens, num_kv_heads, head_dim], positions int32 [..., tokens]; only head_dim must be
// contiguous.
#include <string>

#include "common.h"
#include "host/rope.h"
#include "xkernels/rope_params.h"

#ifndef XKERNELS_HOST_ONLY
#include "xkernels/rope.h"
#endif

namespace xkernels::bind {
namespace {

using rope::Problem;

void CheckLastDimContiguous(const char* op, const char* arg, const TensorView& t) {
  if (t.size(-1) > 1 && t.stride(-1) != 1) {
    TVM_FFI_THROW(ValueError) << op << ": " << arg
                              << " must be contiguous in its last dimension (head_dim), got "
                                 "stride "
                              << t.stride(-1);
  }
}

// q or k (or an output): [..., tokens, heads, head_dim] on q's device, q's dtype.
void CheckHeadsTensor(const char* op, const char* arg, const TensorView& t, const TensorView& q) {
  CheckDevice(op, arg, t, "q", q);
  CheckSameDType(op, arg, t, "q", q);
  if (t.ndim() < 3) {
    TVM_FFI_THROW(ValueError) << op << ": " << arg
                              << " must be at least 3-D [..., tokens, heads, head_dim], got shape "
                              << ShapeStr(ShapeOf(t));
  }
  CheckLastDimContiguous(op, arg, t);
}

// A QK-norm weight: [head_dim], contiguous, on q's device, q's dtype or float32.
host::DType CheckNormWeight(const char* op, const char* arg, const TensorView& w,
                            const TensorView& q) {
  CheckDevice(op, arg, w, "q", q);
  if (w.dtype() != q.dtype() && !(w.dtype() == DLDataType{kDLFloat, 32, 1})) {
    TVM_FFI_THROW(TypeError) << op << ": " << arg << " must be " << DTypeStr(q.dtype())
                             << " (q's dtype) or float32, got " << DTypeStr(w.dtype());
  }
  CheckShape(op, arg, w, {q.size(-1)}, "(head_dim)");
  if (w.size(0) > 1 && w.stride(0) != 1) {
    TVM_FFI_THROW(ValueError) << op << ": " << arg << " must be contiguous, got stride "
                              << w.stride(0);
  }
  return FloatType(op, arg, w);
}

// Validates everything but the weights and fills the problem (pointers, shapes, strides, config).
host::DType Prepare(const char* op, Problem& p, const TensorView& q_out, const TensorView& k_out,
                    const TensorView& q, const TensorView& k, const TensorView& positions,
                    double theta, int64_t interleaved, int64_t rotary_dim, double rope_scale,
                    double low_freq_factor, double high_freq_factor,
                    int64_t original_max_position) {
  CheckDeviceType(op, "q", q);
  const host::DType dt = FloatType(op, "q", q);
  CheckHeadsTensor(op, "q", q, q);
  CheckHeadsTensor(op, "k", k, q);
  CheckHeadsTensor(op, "q_out", q_out, q);
  CheckHeadsTensor(op, "k_out", k_out, q);
  const Shape qs = ShapeOf(q), ks = ShapeOf(k);
  const Shape lead(qs.begin(), qs.end() - 2);
  if (Shape(ks.begin(), ks.end() - 2) != lead || ks.back() != qs.back()) {
    TVM_FFI_THROW(ValueError) << op << ": k must have q's leading dimensions and head_dim, "
                              << "[..., tokens, num_kv_heads, " << qs.back() << "] with [..., "
                              << "tokens] = " << ShapeStr(lead) << ", got shape " << ShapeStr(ks);
  }
  CheckShape(op, "q_out", q_out, qs, "(q's shape)");
  CheckShape(op, "k_out", k_out, ks, "(k's shape)");
  CheckDevice(op, "positions", positions, "q", q);
  if (!(positions.dtype() == DLDataType{kDLInt, 32, 1})) {
    TVM_FFI_THROW(TypeError) << op << ": positions must be int32, got "
                             << DTypeStr(positions.dtype());
  }
  if (ShapeOf(positions) != lead) {
    TVM_FFI_THROW(ValueError) << op << ": positions must have shape " << ShapeStr(lead)
                              << " (one per token: q's shape without its last two dimensions), "
                              << "got " << ShapeStr(ShapeOf(positions));
  }
  const int64_t head_dim = qs.back();
  if (head_dim % 2 != 0 || head_dim < 2 || head_dim > rope::kMaxHeadDim) {
    TVM_FFI_THROW(ValueError) << op << ": head_dim (q's last dimension) must be even, from 2 to "
                              << rope::kMaxHeadDim << ", got " << head_dim;
  }
  if (rotary_dim == 0) rotary_dim = head_dim;
  if (rotary_dim < 0 || rotary_dim % 2 != 0 || rotary_dim > head_dim) {
    TVM_FFI_THROW(ValueError) << op << ": rotary_dim must be even and at most head_dim ("
                              << head_dim << "), or 0 for head_dim; got " << rotary_dim;
  }
  if (interleaved != 0 && interleaved != 1) {
    TVM_FFI_THROW(ValueError) << op << ": interleaved must be 0 or 1, got " << interleaved;
  }
  if (!(theta > 0.0) || !std::isfinite(theta)) {
    TVM_FFI_THROW(ValueError) << op << ": theta must be > 0 and finite, got " << theta;
  }
  if (!(rope_scale > 0.0) || !std::isfinite(rope_scale)) {
    TVM_FFI_THROW(ValueError) << op << ": rope_scale must be > 0 and finite (1: no scaling), got "
                              << rope_scale;
  }
  if (rope_scale != 1.0) {
    if (!(low_freq_factor > 0.0) || !(high_freq_factor > low_freq_factor) ||
        !std::isfinite(high_freq_factor)) {
      TVM_FFI_THROW(ValueError) << op << ": with rope_scale != 1, low_freq_factor must be > 0 and "
                                << "high_freq_factor finite and above it, got " << low_freq_factor
                                << " and " << high_freq_factor;
    }
    if (original_max_position <= 0) {
      TVM_FFI_THROW(ValueError) << op << ": original_max_position must be > 0, got "
                                << original_max_position;
    }
  }
  const int64_t hq = qs[qs.size() - 2], hk = ks[ks.size() - 2];
  if (hq + hk > std::numeric_limits<int32_t>::max()) {
    TVM_FFI_THROW(ValueError) << op << ": num_qo_heads + num_kv_heads must be below 2^31, got "
                              << hq + hk;
  }
  const int lead_dims = static_cast<int>(lead.size());
  p.q_out = Ptr(q_out), p.k_out = Ptr(k_out), p.q = Ptr(q), p.k = Ptr(k);
  p.positions = static_cast<const int32_t*>(Ptr(positions));
  p.tokens = 1;
  for (int64_t d : lead) p.tokens *= d;
  p.num_qo_heads = static_cast<int>(hq), p.num_kv_heads = static_cast<int>(hk);
  p.head_dim = static_cast<int>(head_dim);
  p.q_rows = LeadingRows(op, "q", q, lead_dims, 0);
  p.k_rows = LeadingRows(op, "k", k, lead_dims, 0);
  p.q_out_rows = LeadingRows(op, "q_out", q_out, lead_dims, 0);
  p.k_out_rows = LeadingRows(op, "k_out", k_out, lead_dims, 0);
  p.pos_rows = LeadingRows(op, "positions", positions, lead_dims, 0);
  p.q_stride_h = q.stride(-2), p.k_stride_h = k.stride(-2);
  p.q_out_stride_h = q_out.stride(-2), p.k_out_stride_h = k_out.stride(-2);
  p.rope.theta = theta;
  p.rope.interleaved = interleaved != 0;
  p.rope.rotary_dim = static_cast<int>(rotary_dim);
  p.rope.rope_scale = rope_scale;
  p.rope.low_freq_factor = low_freq_factor;
  p.rope.high_freq_factor = high_freq_factor;
  p.rope.original_max_position = static_cast<double>(original_max_position);
  return dt;
}

void Run(const char* op, const Problem& p, host::DType dt, host::DType wt, const TensorView& q) {
  if (p.tokens == 0 || p.num_qo_heads + p.num_kv_heads == 0) return;
  XK_ON_DEVICE(op, q,
               DispatchFloatWeight(dt, wt,
                                   [&](auto t, auto w) {
                                     using T = decltype(t);
                                     using W = decltype(w);
                                     return ApplyRope<T, W>(p, stream);
                                   }),
               host::Rope(p, dt, wt));
}

void ApplyRopeOp(TensorView q_out, TensorView k_out, TensorView q, TensorView k,
                 TensorView positions, double theta, int64_t interleaved, int64_t rotary_dim,
                 double rope_scale, double low_freq_factor, double high_freq_factor,
                 int64_t original_max_position) {
  constexpr const char* op = "apply_rope";
  Problem p;
  const host::DType dt =
      Prepare(op, p, q_out, k_out, q, k, positions, theta, interleaved, rotary_dim, rope_scale,
              low_freq_factor, high_freq_factor, original_max_position);
  Run(op, p, dt, dt, q);
}

void QkNormRopeOp(TensorView q_out, TensorView k_out, TensorView q, TensorView k,
                  TensorView q_weight, TensorView k_weight, TensorView positions, double eps,
                  double theta, int64_t interleaved, int64_t rotary_dim, double rope_scale,
                  double low_freq_factor, double high_freq_factor, int64_t original_max_position) {
  constexpr const char* op = "qk_norm_rope";
  Problem p;
  const host::DType dt =
      Prepare(op, p, q_out, k_out, q, k, positions, theta, interleaved, rotary_dim, rope_scale,
              low_freq_factor, high_freq_factor, original_max_position);
  const host::DType wt = CheckNormWeight(op, "q_weight", q_weight, q);
  CheckNormWeight(op, "k_weight", k_weight, q);
  CheckSameDType(op, "k_weight", k_weight, "q_weight", q_weight);
  if (!(eps >= 0.0)) TVM_FFI_THROW(ValueError) << op << ": eps must be >= 0, got " << eps;
  p.q_weight = Ptr(q_weight), p.k_weight = Ptr(k_weight);
  p.eps = static_cast<float>(eps);
  Run(op, p, dt, wt, q);
}

}  // namespace
}  // namespace xkernels::bind

TVM_FFI_DLL_EXPORT_TYPED_FUNC(apply_rope, xkernels::bind::ApplyRopeOp);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(qk_norm_rope, xkernels::bind::QkNormRopeOp);
XK_EXPORT_DRY_RUN();
