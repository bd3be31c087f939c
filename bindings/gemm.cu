// Exported GEMM: gemm (float16 / bfloat16 a and b), gemm_fp8 (float8_e4m3fn a and b with float32
// scales), quantize_fp8; and the planners gemm_plan, gemm_fp8_plan.
//
// Each op: validate -> device guard -> stream -> launch (or the host implementation). Arguments:
// outputs, the workspace, inputs, then scalars, as the op table's encodings:
//
//   gemm(out, workspace, a, b, bias, out_dtype, b_layout, num_splits, kernel)
//   gemm_gated(out, workspace, a, b, bias, act, out_dtype, num_splits, kernel)
//   gemm_fp8(out, workspace, a, b, a_scale, b_scale, bias, out_dtype, num_splits, kernel)
//   quantize_fp8(q, scale, x, granularity)
//   gemm_plan(device_id, a_shape, b_shape, bias_shape, out_dtype, b_layout, num_splits, kernel)
//   gemm_gated_plan(device_id, a_shape, b_shape, bias_shape, act, out_dtype, num_splits, kernel)
//   gemm_fp8_plan(device_id, a_shape, b_shape, a_scale_shape, b_scale_shape, bias_shape,
//                 out_dtype, num_splits, kernel)                  -> (num_splits, workspace floats)
//
// out_dtype is an Elem code (gemm/params.h; -1: a's dtype), b_layout a BLayout, kernel a Path,
// granularity a Granularity. bias is a tensor with no element when absent (its dtype and device
// then do not matter: it is never read). num_splits 0 is taken as 1 here: the adapters resolve it
// with the planner, which also sizes the float32 workspace (WorkspaceElems) that they allocate from
// the framework's caching allocator, so a call never allocates and can be captured in a CUDA graph.
// a's leading dimensions are its rows, at one row pitch (nn.Linear inputs); every tensor's last
// dimension is contiguous. On a GPU the operands move in 16-byte chunks (cp.async, TMA): data
// pointers 16-byte aligned, row pitches in multiples of 16 bytes; the host path takes any.
#include <tvm/ffi/container/array.h>

#include <algorithm>
#include <string>
#include <vector>

#include "common.h"
#include "host/gemm.h"
#include "host/ops.h"
#include "xkernels/gemm/params.h"

#ifndef XKERNELS_HOST_ONLY
#include "gemm_tiles.h"  // (the tile launches: compiled in bindings/gemm_tiles_*.cu)
#include "xkernels/gemm/gemm.h"
#include "xkernels/gemm/quant.h"
#endif

namespace xkernels::bind {
namespace {

using gemm::BLayout;
using gemm::Elem;
using gemm::Granularity;
using gemm::Params;
using gemm::Path;
using gemm::QuantParams;
using gemm::Scale;
using tvm::ffi::Array;

constexpr DLDataType kE4M3Type{kDLFloat8_e4m3fn, 8, 1};
constexpr DLDataType kF32Type{kDLFloat, 32, 1};
constexpr int64_t kMaxSplits = 65535;  // a grid dimension
constexpr int64_t kBlock = gemm::kScaleBlock;

const char* ElemStr(Elem e) {
  switch (e) {
    case Elem::kF16:
      return "float16";
    case Elem::kBF16:
      return "bfloat16";
    case Elem::kF32:
      return "float32";
    case Elem::kE4M3:
      return "float8_e4m3fn";
  }
  return "?";
}

int64_t CeilBlocks(int64_t n) { return (n + kBlock - 1) / kBlock; }

// ------------------------------------------------------------------------------------- checks

// The DLPack dtype of an element type.
DLDataType TypeOf(Elem e) {
  switch (e) {
    case Elem::kF16:
      return DLDataType{kDLFloat, 16, 1};
    case Elem::kBF16:
      return DLDataType{kDLBfloat, 16, 1};
    case Elem::kF32:
      return kF32Type;
    case Elem::kE4M3:
      return kE4M3Type;
  }
  return kF32Type;
}

// a (and b): float16 or bfloat16; e4m3 points to gemm_fp8.
Elem Type16(const char* op, const char* arg, const TensorView& t) {
  const DLDataType d = t.dtype();
  const bool f16 = d.lanes == 1 && d.code == kDLFloat && d.bits == 16;
  const bool bf16 = d.lanes == 1 && d.code == kDLBfloat && d.bits == 16;
  if (!f16 && !bf16) {
    TVM_FFI_THROW(TypeError) << op << ": " << arg << " must be float16 or bfloat16, got "
                             << DTypeStr(d)
                             << (d == kE4M3Type ? " (float8_e4m3fn operands: gemm_fp8)" : "");
  }
  return f16 ? Elem::kF16 : Elem::kBF16;
}

void CheckE4M3(const char* op, const char* arg, const TensorView& t) {
  if (t.dtype() != kE4M3Type) {
    TVM_FFI_THROW(TypeError) << op << ": " << arg << " must be float8_e4m3fn, got "
                             << DTypeStr(t.dtype());
  }
}

void CheckF32(const char* op, const char* arg, const TensorView& t) {
  if (t.dtype() != kF32Type) {
    TVM_FFI_THROW(TypeError) << op << ": " << arg << " must be float32, got "
                             << DTypeStr(t.dtype());
  }
}

void CheckNdim(const char* op, const char* arg, const TensorView& t, int ndim, const char* what) {
  if (t.ndim() != ndim) {
    TVM_FFI_THROW(ValueError) << op << ": " << arg << " must be " << ndim << "-D " << what
                              << ", got shape " << ShapeStr(ShapeOf(t));
  }
}

void CheckMultiple(const char* op, const char* what, int64_t v, int64_t of) {
  if (v % of != 0) {
    TVM_FFI_THROW(ValueError) << op << ": " << what << " must be a multiple of " << of << ", got "
                              << v;
  }
}

void CheckBelow2e31(const char* op, const char* what, int64_t v) {
  if (v > std::numeric_limits<int32_t>::max()) {
    TVM_FFI_THROW(ValueError) << op << ": " << what << " must be below 2^31, got " << v;
  }
}

std::string StridesStr(const TensorView& t) {
  std::ostringstream s;
  s << "(";
  for (int i = 0; i < t.ndim(); ++i) s << (i ? ", " : "") << t.stride(i);
  s << (t.ndim() == 1 ? ",)" : ")");
  return s.str();
}

// The row pitch of a [..., cols] matrix: the last dimension contiguous, the leading ones collapsing
// into one stride (rows at one pitch, as nn.Linear's inputs: a view of a wider tensor's columns is
// fine, a permuted batch is not). One row (or none): the row length.
int64_t RowPitch(const char* op, const char* arg, const TensorView& t) {
  const RowStride rs = RowsOf(op, arg, t);
  if (rs.inner_count != 1) {
    TVM_FFI_THROW(ValueError) << op << ": " << arg << " with shape " << ShapeStr(ShapeOf(t))
                              << " and strides " << StridesStr(t)
                              << " has leading dimensions that do not collapse into one row "
                                 "pitch; pass a contiguous copy";
  }
  return rs.outer;
}

// Every element back to back. Not checked in the dry run: the JAX adapter's host arrays have zero
// strides on their leading dimensions (XLA's own buffers are dense).
void CheckDense(const char* op, const char* arg, const TensorView& t) {
  if (!DryRun() && !Dense(t)) {
    TVM_FFI_THROW(ValueError) << op << ": " << arg << " must be contiguous, got shape "
                              << ShapeStr(ShapeOf(t)) << " and strides " << StridesStr(t);
  }
}

// On a GPU: the data pointer 16-byte aligned and, for a matrix (`elems` > 1), the row pitch a
// multiple of 16 bytes (`elems` elements), as the kernels' 16-byte copies and TMA need.
void CheckAligned(const char* op, const char* arg, const TensorView& t, int64_t pitch,
                  int64_t elems) {
  if (t.device().device_type != kDLCUDA || t.numel() == 0) return;  // nothing is read
  const uintptr_t offset = reinterpret_cast<uintptr_t>(Ptr(t)) % 16;
  if (offset == 0 && pitch % elems == 0) return;
  std::ostringstream what;
  what << op << ": " << arg << " on a GPU must be 16-byte aligned";
  if (elems > 1) what << ", with a row pitch in multiples of " << elems << " elements,";
  what << " got address offset " << offset;
  if (elems > 1) what << " and row pitch " << pitch << " (strides " << StridesStr(t) << ")";
  TVM_FFI_THROW(ValueError) << what.str();
}

// bias: absent (no element), or [n], contiguous, on a's device, of type `want` or float32.
const void* CheckBias(const char* op, const TensorView& bias, const TensorView& a, int64_t n,
                      Elem want, const char* want_why, Elem* type) {
  if (bias.numel() == 0) return nullptr;
  CheckDevice(op, "bias", bias, "a", a);
  if (bias.dtype() != TypeOf(want) && bias.dtype() != kF32Type) {
    TVM_FFI_THROW(TypeError) << op << ": bias must be " << ElemStr(want) << " (" << want_why << ")"
                             << (want == Elem::kF32 ? "" : " or float32") << ", got "
                             << DTypeStr(bias.dtype());
  }
  CheckShape(op, "bias", bias, {n}, "(n, out's last dimension)");
  if (n > 1 && bias.stride(0) != 1) {
    TVM_FFI_THROW(ValueError) << op << ": bias must be contiguous, got stride " << bias.stride(0);
  }
  CheckAligned(op, "bias", bias, 0, 1);
  *type = bias.dtype() == kF32Type ? Elem::kF32 : want;
  return Ptr(bias);
}

// out_dtype (an Elem code, -1: a's dtype) of a 16-bit GEMM: a's dtype or float32.
Elem OutType(const char* op, int64_t out_dtype, Elem in) {
  if (out_dtype == -1) return in;
  if (out_dtype == static_cast<int64_t>(Elem::kF32) || out_dtype == static_cast<int64_t>(in)) {
    return static_cast<Elem>(out_dtype);
  }
  const bool known = out_dtype >= 0 && out_dtype <= static_cast<int64_t>(Elem::kE4M3);
  TVM_FFI_THROW(ValueError) << op << ": out_dtype must be None or " << ElemStr(in)
                            << " (a's dtype), or float32, got "
                            << (known ? ElemStr(static_cast<Elem>(out_dtype))
                                      : std::to_string(out_dtype));
  return in;  // unreachable
}

// out: on a's device, of out_dtype's type, shaped a.shape[:-1] + (n,); returns its row pitch.
int64_t CheckOut(const char* op, const TensorView& out, const TensorView& a, int64_t n,
                 Elem out_type) {
  CheckDevice(op, "out", out, "a", a);
  if (out.dtype() != TypeOf(out_type)) {
    TVM_FFI_THROW(TypeError) << op << ": out must be " << ElemStr(out_type) << " (out_dtype), got "
                             << DTypeStr(out.dtype());
  }
  Shape want = ShapeOf(a);
  want.back() = n;
  CheckShape(op, "out", out, want, "(a's shape with n as its last dimension)");
  return RowPitch(op, "out", out);
}

void CheckScalars(const char* op, int64_t num_splits, int64_t kernel) {
  if (num_splits < 0 || num_splits > kMaxSplits) {
    TVM_FFI_THROW(ValueError) << op << ": num_splits must be in [0, " << kMaxSplits
                              << "] (0: chosen), got " << num_splits;
  }
  if (kernel < 0 || kernel > 2) {
    TVM_FFI_THROW(ValueError) << op << ": kernel must be 0 ('auto'), 1 ('sm80') or 2 ('sm90'), "
                              << "got " << kernel;
  }
}

// The workspace: float32, contiguous, on a's device, at least `need` floats (GPU: split-K's,
// stream-K's or a gated product's partial tiles).
void CheckWorkspace(const char* op, const TensorView& ws, const TensorView& a, int64_t need) {
  if (need == 0) return;
  CheckDevice(op, "workspace", ws, "a", a);
  if (ws.dtype() != kF32Type || !Dense(ws) || ws.numel() < need) {
    TVM_FFI_THROW(ValueError) << op << ": workspace must be a contiguous float32 tensor of at "
                              << "least " << need << " elements for these shapes and num_splits "
                              << "(see " << op << "_plan), got " << DTypeStr(ws.dtype()) << " of "
                              << ws.numel();
  }
  CheckAligned(op, "workspace", ws, 0, 1);
}

// ------------------------------------------------------------------------------------- running

// What no GPU of the tensors' device can run is refused before launch, with the reason.
void CheckSupported(const char* op, const Params& p, const TensorView& a) {
#ifndef XKERNELS_HOST_ONLY
  const DLDevice dev = a.device();
  if (dev.device_type != kDLCUDA || DryRun()) return;
  const int cc = DeviceCc(dev.device_id);
  if (const char* why = gemm::Unsupported(p, cc)) {
    TVM_FFI_THROW(ValueError) << op << ": " << why
                              << "; asked: kernel=" << PathStr(static_cast<int64_t>(p.path))
                              << ", a " << ElemStr(p.in_type) << ", b as "
                              << (p.b_layout == BLayout::kKN ? "[k, n]" : "[n, k]") << ", on "
                              << DeviceStr(dev) << " (sm_" << cc << ")";
  }
#else
  (void)op, (void)p, (void)a;
#endif
}

// Floats of workspace p needs on GPU device `dev` (p.splits set).
int64_t WorkspaceNeed(const Params& p, int dev) {
#ifndef XKERNELS_HOST_ONLY
  return gemm::WorkspaceElems(p, DeviceCc(dev) / 10, DeviceSms(dev));
#else
  (void)dev;
  return gemm::WorkspaceElems(p, false);
#endif
}

// The host's gated product: the whole [m, 2n] product in floats, then act(gate) * up.
void HostGated(const Params& p) {
  std::vector<float> whole(static_cast<size_t>(p.m) * 2 * p.n);
  Params q = p;
  q.act = -1, q.n = 2 * p.n, q.out = whole.data(), q.out_type = Elem::kF32, q.ldc = q.n;
  host::Gemm(q);
  const host::DType out_type = p.out_type == Elem::kF16    ? host::DType::kF16
                               : p.out_type == Elem::kBF16 ? host::DType::kBF16
                                                           : host::DType::kF32;
  const host::Mat out{p.out, out_type, RowStride(p.ldc)};
  const host::Mat in{whole.data(), host::DType::kF32, RowStride(q.n)};
  host::ActAndMul(out, in, p.m, p.n, static_cast<host::Act>(p.act));
}

// Sets the splits and workspace and runs p on a's device (the host ignores splits and path).
void RunGemm(const char* op, Params& p, const TensorView& workspace, const TensorView& a,
             int64_t num_splits) {
  const bool gpu = a.device().device_type == kDLCUDA;
  p.splits = gpu ? static_cast<int32_t>(std::max<int64_t>(num_splits, 1)) : 1;
  const int64_t need = gpu ? WorkspaceNeed(p, a.device().device_id) : 0;
  CheckWorkspace(op, workspace, a, need);
  p.workspace = need ? static_cast<float*>(Ptr(workspace)) : nullptr;
  CheckSupported(op, p, a);
  if (p.m == 0 || p.n == 0) return;
  XK_ON_DEVICE(op, a, gemm::Gemm(p, stream), p.act >= 0 ? HostGated(p) : host::Gemm(p));
}

// ------------------------------------------------------------------------------------- gemm

// The operands of a GEMM into p, checked: out [..., n] of out_type, bias [bias_n] (absent, of
// bias_type, named bias_what, or float32), row pitches, and on a GPU 16-byte aligned data with
// the pitches of a and b in multiples of 16 bytes (8 16-bit or 16 e4m3 elements) and out's in
// multiples of 8 elements; the sizes (m, n, k below 2^31) and types.
void SetOperands(const char* op, Params& p, const TensorView& out, const TensorView& a,
                 const TensorView& b, const TensorView& bias, int64_t m, int64_t n, int64_t k,
                 int64_t bias_n, Elem in, Elem out_type, Elem bias_type, const char* bias_what) {
  const int ab_align = in == Elem::kE4M3 ? 16 : 8;
  p.ldc = CheckOut(op, out, a, n, out_type);
  p.bias = CheckBias(op, bias, a, bias_n, bias_type, bias_what, &p.bias_type);
  p.lda = RowPitch(op, "a", a);
  p.ldb = RowPitch(op, "b", b);
  CheckAligned(op, "a", a, p.lda, ab_align);
  CheckAligned(op, "b", b, p.ldb, ab_align);
  CheckAligned(op, "out", out, p.ldc, 8);
  p.a = Ptr(a), p.b = Ptr(b), p.out = Ptr(out);
  p.m = static_cast<int32_t>(m), p.n = static_cast<int32_t>(n), p.k = static_cast<int32_t>(k);
  p.in_type = in, p.out_type = out_type;
}

void GemmOp(TensorView out, TensorView workspace, TensorView a, TensorView b, TensorView bias,
            int64_t out_dtype, int64_t b_layout, int64_t num_splits, int64_t kernel) {
  constexpr const char* op = "gemm";
  CheckDeviceType(op, "a", a);
  const Elem in = Type16(op, "a", a);
  CheckDevice(op, "b", b, "a", a);
  CheckSameDType(op, "b", b, "a", a);
  CheckMinDim(op, "a", a, 1);
  const bool kn = b_layout == 1;
  if (b_layout != 0 && !kn) {
    TVM_FFI_THROW(ValueError) << op << ": b_layout must be 0 ('NK') or 1 ('KN'), got " << b_layout;
  }
  CheckNdim(op, "b", b, 2, kn ? "[k, n] (b_layout 'KN')" : "[n, k] (b_layout 'NK')");
  const int64_t k = a.size(-1), n = b.size(kn ? 1 : 0);
  if (b.size(kn ? 0 : 1) != k) {
    TVM_FFI_THROW(ValueError) << op << ": b must be " << (kn ? "[k, n]" : "[n, k]")
                              << " (b_layout '" << (kn ? "KN" : "NK") << "') with k = " << k
                              << " (a's last dimension), got shape " << ShapeStr(ShapeOf(b));
  }
  CheckMultiple(op, "k (a's last dimension)", k, 8);
  CheckMultiple(op, kn ? "n (b's last dimension)" : "n (b's first dimension)", n, 8);
  const int64_t m = Rows(a);
  CheckBelow2e31(op, "m (a's rows)", m);
  CheckBelow2e31(op, "k", k);
  CheckBelow2e31(op, "n", n);
  const Elem out_type = OutType(op, out_dtype, in);
  CheckScalars(op, num_splits, kernel);
  Params p;
  SetOperands(op, p, out, a, b, bias, m, n, k, n, in, out_type, in, "a's dtype");
  p.b_layout = kn ? BLayout::kKN : BLayout::kNK;
  p.path = static_cast<Path>(kernel);
  RunGemm(op, p, workspace, a, num_splits);
}

// ------------------------------------------------------------------------------------- gemm_gated

// out [..., n] = act(a @ b[:n]^T + bias[:n]) * (a @ b[n:]^T + bias[n:]) for b [2n, k] (the gate's
// rows first): a gated MLP's gate and up projections and their act_and_mul in one GEMM.
void GemmGatedOp(TensorView out, TensorView workspace, TensorView a, TensorView b, TensorView bias,
                 int64_t act, int64_t out_dtype, int64_t num_splits, int64_t kernel) {
  constexpr const char* op = "gemm_gated";
  CheckDeviceType(op, "a", a);
  const Elem in = Type16(op, "a", a);
  CheckDevice(op, "b", b, "a", a);
  CheckSameDType(op, "b", b, "a", a);
  CheckMinDim(op, "a", a, 1);
  CheckNdim(op, "b", b, 2, "[2n, k] (the gate's n rows, then the up's)");
  const int64_t k = a.size(-1), rows = b.size(0), n = rows / 2;
  if (b.size(1) != k) {
    TVM_FFI_THROW(ValueError) << op << ": b must be [2n, k] with k = " << k
                              << " (a's last dimension), got shape " << ShapeStr(ShapeOf(b));
  }
  CheckMultiple(op, "k (a's last dimension)", k, 8);
  CheckMultiple(op, "2n (b's first dimension: gate and up rows)", rows, 16);
  if (act < 0 || act > 2) {
    TVM_FFI_THROW(ValueError) << op << ": act must be 0 ('silu'), 1 ('gelu') or 2 ('gelu_tanh'), "
                              << "got " << act;
  }
  const int64_t m = Rows(a);
  CheckBelow2e31(op, "m (a's rows)", m);
  CheckBelow2e31(op, "k", k);
  CheckBelow2e31(op, "2n", rows);
  const Elem out_type = OutType(op, out_dtype, in);
  CheckScalars(op, num_splits, kernel);
  Params p;
  SetOperands(op, p, out, a, b, bias, m, n, k, rows, in, out_type, in, "a's dtype");
  p.path = static_cast<Path>(kernel);
  p.act = static_cast<int32_t>(act);
  RunGemm(op, p, workspace, a, num_splits);
}

// ------------------------------------------------------------------------------------- gemm_fp8

// How an operand's scales are given, from their shape, by the rules in this order: one element
// per tensor; 1-D or a trailing 1 per row; otherwise per block.
Scale ScaleKindOf(const Shape& s) {
  int64_t numel = 1;
  for (int64_t d : s) numel *= d;
  if (numel == 1) return Scale::kTensor;
  if (s.size() == 1 || (!s.empty() && s.back() == 1)) return Scale::kRow;
  return Scale::kBlock;
}

// The shapes an operand's scales may have: a [..., k] (m rows) or b [n, k].
struct ScaleShapes {
  std::vector<Shape> row, block;
};

ScaleShapes AScaleShapes(const Shape& a, int64_t m, int64_t k) {
  Shape lead(a.begin(), a.end() - 1), lead1 = lead, lead_blocks = lead;
  lead1.push_back(1), lead_blocks.push_back(CeilBlocks(k));
  return {{{m}, {m, 1}, lead, lead1}, {{m, CeilBlocks(k)}, lead_blocks}};
}

ScaleShapes BScaleShapes(int64_t n, int64_t k) {
  return {{{n}, {n, 1}}, {{CeilBlocks(n), CeilBlocks(k)}}};
}

bool OneOf(const Shape& s, const std::vector<Shape>& shapes) {
  return std::find(shapes.begin(), shapes.end(), s) != shapes.end();
}

// The kinds a scale shape fits (one element: per tensor; one of the kind's shapes: per row, per
// block); several when small shapes coincide (m = 1, k <= 128, n <= 128).
struct Fits {
  bool tensor, row, block;
};

Fits FitsOf(const Shape& s, const ScaleShapes& shapes) {
  int64_t numel = 1;
  for (int64_t d : s) numel *= d;
  return {numel == 1, OneOf(s, shapes.row), OneOf(s, shapes.block)};
}

// The kind of a shape: the first it fits, by the rules' order (per tensor, per row, per block);
// one that fits none gets the rules' kind (whose shapes its error then lists).
Scale KindOf(const Shape& s, const Fits& f) {
  if (f.tensor) return Scale::kTensor;
  if (f.row) return Scale::kRow;
  return f.block ? Scale::kBlock : ScaleKindOf(s);
}

// The kinds of a_scale and b_scale: each the first its shape fits; then, when one is per block,
// the other per block too if its shape is also a block shape (quantize_fp8's block scales of m = 1
// or k <= 128 read as per tensor or per row as well). Returns false when a shape fits no kind.
bool ScaleKinds(const Shape& sa, const Shape& sb, const ScaleShapes& as, const ScaleShapes& bs,
                Scale* ka, Scale* kb) {
  const Fits fa = FitsOf(sa, as), fb = FitsOf(sb, bs);
  *ka = KindOf(sa, fa), *kb = KindOf(sb, fb);
  if ((*ka == Scale::kBlock || *kb == Scale::kBlock) && fa.block && fb.block) {
    *ka = *kb = Scale::kBlock;
  }
  return (fa.tensor || fa.row || fa.block) && (fb.tensor || fb.row || fb.block);
}

const char* ScaleStr(Scale s) {
  return s == Scale::kTensor ? "per tensor" : s == Scale::kRow ? "per row" : "per block";
}

std::string ShapesStr(const std::vector<Shape>& shapes) {
  std::vector<Shape> unique;
  for (const Shape& s : shapes) {
    if (!OneOf(s, unique)) unique.push_back(s);
  }
  std::string s;
  for (size_t i = 0; i < unique.size(); ++i) {
    s += (i == 0 ? "" : i + 1 == unique.size() ? " or " : ", ") + ShapeStr(unique[i]);
  }
  return s;
}

// One operand's scales: float32 on a's device, of a shape of its kind; sets the pointer and pitch.
void CheckScale(const char* op, const char* arg, const TensorView& s, Scale kind,
                const ScaleShapes& shapes, const char* rows, const TensorView& a, const float** ptr,
                int64_t* ld) {
  const Shape shape = ShapeOf(s);
  const bool fits =
      kind == Scale::kTensor || OneOf(shape, kind == Scale::kRow ? shapes.row : shapes.block);
  if (!fits) {
    TVM_FFI_THROW(ValueError) << op << ": " << arg << " must have shape () or (1,) (per tensor), "
                              << ShapesStr(shapes.row) << " (per row of " << rows << ") or "
                              << ShapesStr(shapes.block) << " (per 128-block of k"
                              << (std::string(arg) == "b_scale" ? " and n" : "") << "), got "
                              << ShapeStr(shape);
  }
  if (kind == Scale::kRow) CheckDense(op, arg, s);
  *ld = kind == Scale::kBlock ? RowPitch(op, arg, s) : 0;
  *ptr = static_cast<const float*>(Ptr(s));
}

void GemmFp8Op(TensorView out, TensorView workspace, TensorView a, TensorView b, TensorView a_scale,
               TensorView b_scale, TensorView bias, int64_t out_dtype, int64_t num_splits,
               int64_t kernel) {
  constexpr const char* op = "gemm_fp8";
  CheckDeviceType(op, "a", a);
  CheckE4M3(op, "a", a);
  CheckDevice(op, "b", b, "a", a);
  CheckE4M3(op, "b", b);
  CheckDevice(op, "a_scale", a_scale, "a", a);
  CheckDevice(op, "b_scale", b_scale, "a", a);
  CheckF32(op, "a_scale", a_scale);
  CheckF32(op, "b_scale", b_scale);
  CheckMinDim(op, "a", a, 1);
  CheckNdim(op, "b", b, 2, "[n, k] (e4m3 GEMM takes b as [n, k] only)");
  const int64_t k = a.size(-1), n = b.size(0), m = Rows(a);
  if (b.size(1) != k) {
    TVM_FFI_THROW(ValueError) << op << ": b must be [n, k] with k = " << k
                              << " (a's last dimension; e4m3 GEMM takes b as [n, k] only), got "
                              << "shape " << ShapeStr(ShapeOf(b));
  }
  CheckMultiple(op, "k (a's last dimension)", k, 16);
  CheckMultiple(op, "n (b's first dimension)", n, 16);
  CheckBelow2e31(op, "m (a's rows)", m);
  CheckBelow2e31(op, "k", k);
  CheckBelow2e31(op, "n", n);
  if (out_dtype < 0 || out_dtype > static_cast<int64_t>(Elem::kF32)) {
    TVM_FFI_THROW(ValueError) << op << ": out_dtype must be 0 (float16), 1 (bfloat16) or 2 "
                              << "(float32), got " << out_dtype;
  }
  const Elem out_type = static_cast<Elem>(out_dtype);
  CheckScalars(op, num_splits, kernel);
  Params p;
  const ScaleShapes as = AScaleShapes(ShapeOf(a), m, k), bs = BScaleShapes(n, k);
  ScaleKinds(ShapeOf(a_scale), ShapeOf(b_scale), as, bs, &p.a_scale_kind, &p.b_scale_kind);
  CheckScale(op, "a_scale", a_scale, p.a_scale_kind, as, "a", a, &p.a_scale, &p.a_scale_ld);
  CheckScale(op, "b_scale", b_scale, p.b_scale_kind, bs, "b", a, &p.b_scale, &p.b_scale_ld);
  if ((p.a_scale_kind == Scale::kBlock) != (p.b_scale_kind == Scale::kBlock)) {
    TVM_FFI_THROW(ValueError) << op << ": a_scale is " << ScaleStr(p.a_scale_kind) << " (shape "
                              << ShapeStr(ShapeOf(a_scale)) << ") and b_scale "
                              << ScaleStr(p.b_scale_kind) << " (shape "
                              << ShapeStr(ShapeOf(b_scale))
                              << "): block scales go with block scales only (per-tensor and "
                                 "per-row scales mix)";
  }
  SetOperands(op, p, out, a, b, bias, m, n, k, n, Elem::kE4M3, out_type, out_type, "out's dtype");
  p.b_layout = BLayout::kNK;
  p.path = static_cast<Path>(kernel);
  RunGemm(op, p, workspace, a, num_splits);
}

// ------------------------------------------------------------------------------------- quantize

void QuantizeFp8Op(TensorView q, TensorView scale, TensorView x, int64_t granularity) {
  constexpr const char* op = "quantize_fp8";
  CheckDeviceType(op, "x", x);
  const host::DType xt = FloatType(op, "x", x);
  CheckDevice(op, "q", q, "x", x);
  CheckDevice(op, "scale", scale, "x", x);
  CheckE4M3(op, "q", q);
  CheckF32(op, "scale", scale);
  CheckMinDim(op, "x", x, 1);
  if (granularity < 0 || granularity > 3) {
    TVM_FFI_THROW(ValueError) << op << ": granularity must be 0 ('tensor'), 1 ('row'), 2 "
                              << "('block') or 3 ('block2d'), got " << granularity;
  }
  const auto g = static_cast<Granularity>(granularity);
  if (g == Granularity::kBlock2d) CheckNdim(op, "x", x, 2, "[rows, cols] for 'block2d'");
  CheckShape(op, "q", q, ShapeOf(x), "(x's shape)");
  const int64_t rows = Rows(x), cols = x.size(-1);
  CheckBelow2e31(op, "x's rows", rows);
  CheckBelow2e31(op, "x's last dimension", cols);
  Shape want = ShapeOf(x);
  const char* why = "";
  switch (g) {
    case Granularity::kTensor:
      want = {1}, why = "(one scale, 'tensor')";
      break;
    case Granularity::kRow:
      want.back() = 1, why = "(x's shape with 1 as its last dimension, 'row')";
      break;
    case Granularity::kBlock:
      want.back() = CeilBlocks(cols), why = "(x's shape with ceil(cols / 128) last, 'block')";
      break;
    case Granularity::kBlock2d:
      want = {CeilBlocks(rows), CeilBlocks(cols)}, why = "(ceil(rows / 128), ceil(cols / 128))";
      break;
  }
  CheckShape(op, "scale", scale, want, why);
  QuantParams qp;
  qp.ldx = RowPitch(op, "x", x);
  qp.ldq = RowPitch(op, "q", q);
  if (g == Granularity::kRow) CheckDense(op, "scale", scale);
  qp.scale_ld =
      g == Granularity::kBlock || g == Granularity::kBlock2d ? RowPitch(op, "scale", scale) : 0;
  qp.x = Ptr(x), qp.q = Ptr(q), qp.scale = static_cast<float*>(Ptr(scale));
  qp.rows = static_cast<int32_t>(rows), qp.cols = static_cast<int32_t>(cols);
  qp.x_type = xt == host::DType::kF16    ? Elem::kF16
              : xt == host::DType::kBF16 ? Elem::kBF16
                                         : Elem::kF32;
  qp.granularity = g;
  XK_ON_DEVICE(op, x, gemm::QuantizeFp8(qp, stream), host::QuantizeFp8(qp));
}

// ------------------------------------------------------------------------------------- planning

int64_t Prod(const Array<int64_t>& s, size_t from, size_t to) {
  int64_t r = 1;
  for (size_t i = from; i < to; ++i) r *= s[i];
  return r;
}

Shape ShapeOfArray(const Array<int64_t>& s) { return Shape(s.begin(), s.end()); }

// (num_splits, workspace floats) of p on GPU device_id (-1: the host, never split): num_splits as
// asked, or, for 0, PlanSplits's choice. `valid` false: shapes the op refuses, answered (1, 0).
Array<int64_t> PlanOf(const char* op, Params& p, bool valid, int64_t device_id,
                      int64_t num_splits) {
  if (num_splits < 0 || num_splits > kMaxSplits) {  // as the op itself would say
    TVM_FFI_THROW(ValueError) << op << ": num_splits must be in [0, " << kMaxSplits
                              << "] (0: chosen), got " << num_splits;
  }
  if (device_id < 0 || !valid) return Array<int64_t>({1, 0});
#ifdef XKERNELS_HOST_ONLY
  (void)p;
  return Array<int64_t>({1, 0});
#else
  int64_t splits = std::max<int64_t>(num_splits, 1);
  if (num_splits == 0) {
    tvm::ffi::CUDADeviceGuard guard(static_cast<int>(device_id));
    int32_t chosen = 1;
    const cudaError_t err = gemm::PlanSplits(p, &chosen);
    if (err != cudaSuccess) {
      TVM_FFI_THROW(RuntimeError) << op << " planning: CUDA error " << cudaGetErrorName(err) << ": "
                                  << cudaGetErrorString(err);
    }
    splits = std::clamp<int64_t>(chosen, 1, kMaxSplits);
  }
  p.splits = static_cast<int32_t>(splits);
  return Array<int64_t>({splits, WorkspaceNeed(p, static_cast<int>(device_id))});
#endif
}

// m, n, k of shapes the op takes (and p's sizes set), or false.
bool Sizes(const Array<int64_t>& a, int64_t n, int64_t k_of_b, int64_t multiple, Params& p) {
  if (a.size() < 1) return false;
  const int64_t m = Prod(a, 0, a.size() - 1), k = a[a.size() - 1];
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  if (k != k_of_b || k % multiple || n % multiple || m > kMax || n > kMax || k > kMax) return false;
  p.m = static_cast<int32_t>(m), p.n = static_cast<int32_t>(n), p.k = static_cast<int32_t>(k);
  return true;
}

Array<int64_t> GemmPlan(int64_t device_id, Array<int64_t> a, Array<int64_t> b, Array<int64_t>,
                        int64_t out_dtype, int64_t b_layout, int64_t num_splits, int64_t kernel) {
  Params p;
  const bool kn = b_layout == 1;
  bool valid = b.size() == 2 && (b_layout == 0 || kn) && kernel >= 0 && kernel <= 2 &&
               Sizes(a, b[kn ? 1 : 0], b[kn ? 0 : 1], 8, p);
  if (valid) {
    p.in_type = Elem::kBF16;  // the tiles are the same for float16
    p.out_type = out_dtype == static_cast<int64_t>(Elem::kF32) ? Elem::kF32 : Elem::kBF16;
    p.b_layout = kn ? BLayout::kKN : BLayout::kNK;
    p.path = static_cast<Path>(kernel);
  }
  return PlanOf("gemm", p, valid, device_id, num_splits);
}

Array<int64_t> GemmGatedPlan(int64_t device_id, Array<int64_t> a, Array<int64_t> b, Array<int64_t>,
                             int64_t act, int64_t out_dtype, int64_t num_splits, int64_t kernel) {
  Params p;
  bool valid = b.size() == 2 && b[0] % 16 == 0 && act >= 0 && act <= 2 && kernel >= 0 &&
               kernel <= 2 && Sizes(a, b[0] / 2, b[1], 8, p);
  if (valid) {
    p.in_type = Elem::kBF16;  // the tiles are the same for float16
    p.out_type = out_dtype == static_cast<int64_t>(Elem::kF32) ? Elem::kF32 : Elem::kBF16;
    p.path = static_cast<Path>(kernel);
    p.act = static_cast<int32_t>(act);
  }
  return PlanOf("gemm_gated", p, valid, device_id, num_splits);
}

Array<int64_t> GemmFp8Plan(int64_t device_id, Array<int64_t> a, Array<int64_t> b,
                           Array<int64_t> a_scale, Array<int64_t> b_scale, Array<int64_t>,
                           int64_t out_dtype, int64_t num_splits, int64_t kernel) {
  Params p;
  bool valid = b.size() == 2 && kernel >= 0 && kernel <= 2 && out_dtype >= 0 &&
               out_dtype <= static_cast<int64_t>(Elem::kF32) && Sizes(a, b[0], b[1], 16, p);
  if (valid) {
    const ScaleShapes as = AScaleShapes(ShapeOfArray(a), p.m, p.k), bs = BScaleShapes(p.n, p.k);
    valid = ScaleKinds(ShapeOfArray(a_scale), ShapeOfArray(b_scale), as, bs, &p.a_scale_kind,
                       &p.b_scale_kind);
    p.in_type = Elem::kE4M3;
    p.out_type = static_cast<Elem>(out_dtype);
    p.path = static_cast<Path>(kernel);
  }
  return PlanOf("gemm_fp8", p, valid, device_id, num_splits);
}

}  // namespace
}  // namespace xkernels::bind

TVM_FFI_DLL_EXPORT_TYPED_FUNC(gemm, xkernels::bind::GemmOp);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(gemm_gated, xkernels::bind::GemmGatedOp);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(gemm_fp8, xkernels::bind::GemmFp8Op);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(quantize_fp8, xkernels::bind::QuantizeFp8Op);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(gemm_plan, xkernels::bind::GemmPlan);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(gemm_gated_plan, xkernels::bind::GemmGatedPlan);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(gemm_fp8_plan, xkernels::bind::GemmFp8Plan);
XK_EXPORT_DRY_RUN();
