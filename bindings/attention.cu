// Exported attention: attention (dense batch), attention_varlen (ragged, cu_seqlens),
// attention_paged (ragged queries over a paged KV cache), decode_paged, merge_state, merge_states;
// and the planners attention_plan, attention_varlen_plan, attention_paged_plan, decode_paged_plan.
//
// Each op: validate -> device guard -> stream -> dispatch and launch (or the host implementation).
// Arguments: outputs (out, lse), the workspace, inputs, then scalars. lse is a zero-size tensor
// when return_lse is 0; the workspace (float32) holds num_splits * total_q * num_qo_heads *
// (head_dim + 1) floats when num_splits > 1 on a GPU, and may be empty otherwise.
//
// A planner takes the device (-1: host), the shapes of the op's inputs and its scalars, and
// returns (num_splits, workspace floats): num_splits as asked, or, for 0, chosen from the shapes
// and the GPU (attention/plan.h). The adapters call it (cached per shapes) to size the workspace,
// which they allocate from the framework's caching allocator, so a call never allocates and can be
// captured in a CUDA graph. Nothing here reads device memory: index tensors on the GPU are not
// checked (that would need a copy to the host); the kernels clamp what they read from them so that
// bad indices cannot make them access memory out of bounds. Index tensors in host memory are
// checked.
#include <tvm/ffi/container/array.h>

#include <algorithm>
#include <string>

#include "common.h"
#include "host/attention.h"
#include "xkernels/attention/params.h"

#ifndef XKERNELS_HOST_ONLY
#include "xkernels/attention/attention.h"
#endif

namespace xkernels::bind {
namespace {

using attention::KvMode;
using attention::MergeParams;
using attention::Params;
using tvm::ffi::Array;

constexpr int kHeadDims[] = {64, 128, 256};

// ------------------------------------------------------------------------------------- checks

host::DType AttnType(const char* op, const char* arg, const TensorView& t) {
  const DLDataType d = t.dtype();
  if (d.lanes == 1 && d.code == kDLFloat && d.bits == 16) return host::DType::kF16;
  if (d.lanes == 1 && d.code == kDLBfloat && d.bits == 16) return host::DType::kBF16;
  TVM_FFI_THROW(TypeError) << op << ": " << arg << " must be float16 or bfloat16, got "
                           << DTypeStr(d);
  return host::DType::kF16;  // unreachable
}

void CheckNdim(const char* op, const char* arg, const TensorView& t, int ndim, const char* what) {
  if (t.ndim() != ndim) {
    TVM_FFI_THROW(ValueError) << op << ": " << arg << " must be " << ndim << "-D " << what
                              << ", got shape " << ShapeStr(ShapeOf(t));
  }
}

void CheckHeadDim(const char* op, const char* arg, int64_t d) {
  for (int h : kHeadDims) {
    if (d == h) return;
  }
  TVM_FFI_THROW(ValueError) << op << ": head_dim (" << arg
                            << "'s last dimension) must be one of 64, 128, 256, got " << d;
}

void CheckLastContiguous(const char* op, const char* arg, const TensorView& t) {
  if (t.ndim() && t.size(-1) > 1 && t.stride(-1) != 1) {
    TVM_FFI_THROW(ValueError) << op << ": " << arg
                              << " must be contiguous in its last dimension, got stride "
                              << t.stride(-1);
  }
}

// The kernels move 16-byte chunks: a CUDA tensor's data pointer must be 16-byte aligned and its
// strides (but the last) multiples of 8 elements.
void CheckAligned(const char* op, const char* arg, const TensorView& t) {
  if (t.device().device_type != kDLCUDA) return;
  bool ok = reinterpret_cast<uintptr_t>(Ptr(t)) % 16 == 0;
  for (int i = 0; i + 1 < t.ndim(); ++i) ok = ok && (t.size(i) == 1 || t.stride(i) % 8 == 0);
  if (!ok) {
    std::ostringstream strides;
    for (int i = 0; i < t.ndim(); ++i) strides << (i ? ", " : "(") << t.stride(i);
    TVM_FFI_THROW(ValueError) << op << ": " << arg
                              << " must be 16-byte aligned (data pointer, and strides in "
                                 "multiples of 8 elements), got strides "
                              << strides.str() << ") and address offset "
                              << (reinterpret_cast<uintptr_t>(Ptr(t)) % 16);
  }
}

// q, k, v (or the caches) and out: one device, one 16-bit dtype, the last dim contiguous, aligned.
host::DType CheckQkv(const char* op, const TensorView& q, const char* k_arg, const TensorView& k,
                     const char* v_arg, const TensorView& v, const TensorView& out) {
  CheckDeviceType(op, "q", q);
  const host::DType dt = AttnType(op, "q", q);
  CheckDevice(op, k_arg, k, "q", q);
  CheckDevice(op, v_arg, v, "q", q);
  CheckDevice(op, "out", out, "q", q);
  CheckSameDType(op, k_arg, k, "q", q);
  CheckSameDType(op, v_arg, v, "q", q);
  CheckSameDType(op, "out", out, "q", q);
  return dt;
}

void CheckLayout(const char* op,
                 std::initializer_list<std::pair<const char*, const TensorView*>> ts) {
  for (const auto& [arg, t] : ts) {
    CheckLastContiguous(op, arg, *t);
    CheckAligned(op, arg, *t);
  }
}

// num_qo_heads a multiple of num_kv_heads; head_dim supported and the same for q, k and v.
void CheckHeads(const char* op, int64_t hq, int64_t hkv, const char* k_arg) {
  if (hkv < 1 || hq % hkv != 0) {
    TVM_FFI_THROW(ValueError) << op << ": num_qo_heads (" << hq
                              << ", q) must be a multiple of num_kv_heads (" << hkv << ", " << k_arg
                              << ")";
  }
}

void CheckSameShape(const char* op, const char* arg, const TensorView& t, const char* ref_arg,
                    const TensorView& ref) {
  if (ShapeOf(t) != ShapeOf(ref)) {
    TVM_FFI_THROW(ValueError) << op << ": " << arg << " must have " << ref_arg << "'s shape "
                              << ShapeStr(ShapeOf(ref)) << ", got " << ShapeStr(ShapeOf(t));
  }
}

// An int32 index tensor: 1-D, contiguous, on q's device, `len` entries (-1: any).
void CheckIndex(const char* op, const char* arg, const TensorView& t, const TensorView& q,
                int64_t len, const char* what) {
  CheckDevice(op, arg, t, "q", q);
  if (!(t.dtype() == DLDataType{kDLInt, 32, 1})) {
    TVM_FFI_THROW(TypeError) << op << ": " << arg << " must be int32, got " << DTypeStr(t.dtype());
  }
  if (t.ndim() != 1) {
    TVM_FFI_THROW(ValueError) << op << ": " << arg << " must be 1-D, got shape "
                              << ShapeStr(ShapeOf(t));
  }
  if (len >= 0 && t.size(0) != len) {
    TVM_FFI_THROW(ValueError) << op << ": " << arg << " must have " << len << " entries (" << what
                              << "), got " << t.size(0);
  }
  if (t.size(0) > 1 && t.stride(0) != 1) {
    TVM_FFI_THROW(ValueError) << op << ": " << arg << " must be contiguous, got stride "
                              << t.stride(0);
  }
}

// An index pointer's values (host memory only): non-decreasing, from >= 0 to <= extent.
void CheckIndptrValues(const char* op, const char* arg, const TensorView& t, int64_t extent,
                       const char* what) {
  if (t.device().device_type != kDLCPU) return;
  const int32_t* p = static_cast<const int32_t*>(Ptr(t));
  const int64_t n = t.size(0);
  for (int64_t i = 0; i < n; ++i) {
    const bool bad = p[i] < 0 || p[i] > extent || (i > 0 && p[i] < p[i - 1]);
    if (bad) {
      TVM_FFI_THROW(ValueError) << op << ": " << arg << " must be non-decreasing, from 0 up to "
                                << extent << " (" << what << "), got " << p[i] << " at index " << i
                                << (i > 0 ? " after " + std::to_string(p[i - 1]) : "");
    }
  }
}

void CheckRangeValues(const char* op, const char* arg, const TensorView& t, int64_t lo, int64_t hi,
                      const char* what) {
  if (t.device().device_type != kDLCPU) return;
  const int32_t* p = static_cast<const int32_t*>(Ptr(t));
  for (int64_t i = 0; i < t.size(0); ++i) {
    if (p[i] < lo || p[i] > hi) {
      TVM_FFI_THROW(ValueError) << op << ": " << arg << " values must be in [" << lo << ", " << hi
                                << "] (" << what << "), got " << p[i] << " at index " << i;
    }
  }
}

// The scalars shared by every attention op; returns the resolved sm_scale.
float CheckScalars(const char* op, int64_t causal, int64_t window_left, double softcap,
                   double sm_scale, int64_t return_lse, int64_t num_splits, int64_t head_dim) {
  if (causal != 0 && causal != 1) {
    TVM_FFI_THROW(ValueError) << op << ": causal must be 0 or 1, got " << causal;
  }
  if (return_lse != 0 && return_lse != 1) {
    TVM_FFI_THROW(ValueError) << op << ": return_lse must be 0 or 1, got " << return_lse;
  }
  if (window_left < -1 || window_left > std::numeric_limits<int32_t>::max()) {
    TVM_FFI_THROW(ValueError) << op << ": window_left must be -1 (no window) or >= 0, got "
                              << window_left;
  }
  if (!(softcap >= 0.0) || !std::isfinite(softcap)) {
    TVM_FFI_THROW(ValueError) << op << ": logits_soft_cap must be >= 0 and finite (0: off), got "
                              << softcap;
  }
  if (std::isnan(sm_scale)) sm_scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  if (!(sm_scale > 0.0) || !std::isfinite(sm_scale)) {
    TVM_FFI_THROW(ValueError) << op
                              << ": sm_scale must be > 0 and finite (None: 1/sqrt(head_dim)), "
                              << "got " << sm_scale;
  }
  if (num_splits < 0 || num_splits > 65535) {
    TVM_FFI_THROW(ValueError) << op << ": num_splits must be in [0, 65535] (0: chosen), got "
                              << num_splits;
  }
  return static_cast<float>(sm_scale);
}

// kernel: 0 'auto', 1 'sm80' (cp.async + mma.sync), 2 'sm90' (TMA + wgmma): attention::Kernel.
void CheckKernel(const char* op, int64_t kernel) {
  if (kernel < 0 || kernel > 2) {
    TVM_FFI_THROW(ValueError) << op << ": kernel must be 0 ('auto'), 1 ('sm80') or 2 ('sm90'), "
                              << "got " << kernel;
  }
}

// lse: float32, q's shape without its last dimension, contiguous over heads, on q's device; or
// empty.
void CheckLse(const char* op, const TensorView& lse, const TensorView& q, int64_t return_lse) {
  CheckDevice(op, "lse", lse, "q", q);
  if (!return_lse) {
    if (lse.numel() != 0) {
      TVM_FFI_THROW(ValueError) << op << ": lse must be empty when return_lse is 0, got shape "
                                << ShapeStr(ShapeOf(lse));
    }
    return;
  }
  if (!(lse.dtype() == DLDataType{kDLFloat, 32, 1})) {
    TVM_FFI_THROW(TypeError) << op << ": lse must be float32, got " << DTypeStr(lse.dtype());
  }
  Shape want = ShapeOf(q);
  want.pop_back();
  CheckShape(op, "lse", lse, want, "(q's shape without head_dim)");
  if (lse.size(-1) > 1 && lse.stride(-1) != 1) {
    TVM_FFI_THROW(ValueError) << op << ": lse must be contiguous in its last dimension (heads), "
                              << "got stride " << lse.stride(-1);
  }
}

// The workspace: float32, contiguous, on q's device, at least `need` floats on a GPU.
void CheckWorkspace(const char* op, const TensorView& ws, const TensorView& q, int64_t need) {
  if (q.device().device_type != kDLCUDA || need == 0) return;
  CheckDevice(op, "workspace", ws, "q", q);
  if (!(ws.dtype() == DLDataType{kDLFloat, 32, 1}) || !Dense(ws) || ws.numel() < need) {
    TVM_FFI_THROW(ValueError) << op << ": workspace must be a contiguous float32 tensor of at "
                              << "least " << need << " elements for num_splits > 1 (see " << op
                              << "_plan), got " << DTypeStr(ws.dtype()) << " of " << ws.numel();
  }
}

// ------------------------------------------------------------------------------------- planning

// What the split decision depends on, from the inputs' shapes alone.
struct Geometry {
  int64_t batch = 0, total_q = 0, num_qo_heads = 0, num_kv_heads = 1, head_dim = 0;
  int64_t kv_len = 0;  // per request: exact when dense, the mean otherwise
  bool valid = false;  // false: shapes the op will refuse; the planner answers (1, 0)
};

Array<int64_t> PlanOf(const char* op, const Geometry& g, int64_t device_id, int64_t num_splits,
                      int64_t kernel = 0) {
  if (num_splits < 0 || num_splits > 65535) {  // as the op itself would say
    TVM_FFI_THROW(ValueError) << op << ": num_splits must be in [0, 65535] (0: chosen), got "
                              << num_splits;
  }
  CheckKernel(op, kernel);
  if (kernel == 2 && num_splits == 0) num_splits = 1;  // the sm90 kernel does not split
  if (device_id < 0 || !g.valid || g.batch * g.total_q == 0) return Array<int64_t>({1, 0});
#ifdef XKERNELS_HOST_ONLY
  (void)num_splits;
  return Array<int64_t>({1, 0});
#else
  int64_t splits = std::max<int64_t>(num_splits, 1);
  if (num_splits == 0) {
    tvm::ffi::CUDADeviceGuard guard(static_cast<int>(device_id));
    attention::Geometry ag{g.batch,        g.total_q,  g.num_qo_heads,
                           g.num_kv_heads, g.head_dim, g.kv_len};
    int32_t chosen = 1;
    const cudaError_t err = attention::PlanSplits(ag, &chosen);
    if (err != cudaSuccess) {
      TVM_FFI_THROW(RuntimeError) << "attention planning: CUDA error " << cudaGetErrorName(err)
                                  << ": " << cudaGetErrorString(err);
    }
    splits = chosen;
  }
  return Array<int64_t>(
      {splits, attention::WorkspaceElems(splits, g.total_q, g.num_qo_heads, g.head_dim)});
#endif
}

int64_t Dim(const Array<int64_t>& s, int i) {
  const int64_t n = static_cast<int64_t>(s.size());
  return s[static_cast<size_t>(i < 0 ? n + i : i)];
}

bool HeadsOk(int64_t hq, int64_t hkv, int64_t d) {
  return hkv >= 1 && hq % hkv == 0 && (d == 64 || d == 128 || d == 256);
}

Array<int64_t> AttentionPlan(int64_t device_id, Array<int64_t> q, Array<int64_t> k, Array<int64_t>,
                             int64_t, int64_t, double, double, int64_t, int64_t num_splits,
                             int64_t kernel) {
  Geometry g;
  if (q.size() == 4 && k.size() == 4) {
    g = {Dim(q, 0), Dim(q, 0) * Dim(q, 1), Dim(q, 2), Dim(k, 2), Dim(q, 3), Dim(k, 1), false};
    g.valid = HeadsOk(g.num_qo_heads, g.num_kv_heads, g.head_dim);
  }
  return PlanOf("attention", g, device_id, num_splits, kernel);
}

Array<int64_t> VarlenPlan(int64_t device_id, Array<int64_t> q, Array<int64_t> k, Array<int64_t>,
                          Array<int64_t> cu_q, Array<int64_t>, int64_t, int64_t, double, double,
                          int64_t, int64_t num_splits, int64_t kernel) {
  Geometry g;
  if (q.size() == 3 && k.size() == 3 && cu_q.size() == 1 && Dim(cu_q, 0) >= 2) {
    const int64_t batch = Dim(cu_q, 0) - 1;
    g = {batch, Dim(q, 0), Dim(q, 1), Dim(k, 1), Dim(q, 2), Dim(k, 0) / batch, false};
    g.valid = HeadsOk(g.num_qo_heads, g.num_kv_heads, g.head_dim);
  }
  return PlanOf("attention_varlen", g, device_id, num_splits, kernel);
}

// A paged cache's (page_size, num_kv_heads) from its shape and layout (0: NHD, 1: HND).
std::pair<int64_t, int64_t> PageDims(const Array<int64_t>& cache, int64_t layout) {
  return layout == 1 ? std::pair{Dim(cache, 2), Dim(cache, 1)}
                     : std::pair{Dim(cache, 1), Dim(cache, 2)};
}

Array<int64_t> PagedPlan(int64_t device_id, Array<int64_t> q, Array<int64_t> k_cache,
                         Array<int64_t>, Array<int64_t> qo_indptr, Array<int64_t>,
                         Array<int64_t> kv_indices, Array<int64_t>, int64_t kv_layout, int64_t,
                         int64_t, double, double, int64_t, int64_t num_splits) {
  Geometry g;
  if (q.size() == 3 && k_cache.size() == 4 && qo_indptr.size() == 1 && Dim(qo_indptr, 0) >= 2 &&
      kv_indices.size() == 1) {
    const int64_t batch = Dim(qo_indptr, 0) - 1;
    const auto [page_size, hkv] = PageDims(k_cache, kv_layout);
    g = {batch, Dim(q, 0), Dim(q, 1), hkv, Dim(q, 2), Dim(kv_indices, 0) * page_size / batch,
         false};
    g.valid = HeadsOk(g.num_qo_heads, g.num_kv_heads, g.head_dim);
  }
  return PlanOf("attention_paged", g, device_id, num_splits);
}

Array<int64_t> DecodePlan(int64_t device_id, Array<int64_t> q, Array<int64_t> k_cache,
                          Array<int64_t>, Array<int64_t>, Array<int64_t> kv_indices, Array<int64_t>,
                          int64_t kv_layout, int64_t, int64_t, double, double, int64_t,
                          int64_t num_splits) {
  Geometry g;
  if ((q.size() == 3 || q.size() == 4) && k_cache.size() == 4 && kv_indices.size() == 1 &&
      Dim(q, 0) >= 1) {
    const int64_t batch = Dim(q, 0), tokens = q.size() == 4 ? Dim(q, 1) : 1;
    const auto [page_size, hkv] = PageDims(k_cache, kv_layout);
    g = {batch, batch * tokens, Dim(q, -2), hkv, Dim(q, -1), Dim(kv_indices, 0) * page_size / batch,
         false};
    g.valid = HeadsOk(g.num_qo_heads, g.num_kv_heads, g.head_dim);
  }
  return PlanOf("decode_paged", g, device_id, num_splits);
}

// ------------------------------------------------------------------------------------- running

// Fills what every op shares, checks lse and the workspace, and runs the params on q's device.
void Run(const char* op, Params& p, host::DType dt, TensorView out, TensorView lse,
         TensorView workspace, const TensorView& q, int64_t causal, int64_t window_left,
         double softcap, float sm_scale, int64_t return_lse, int64_t num_splits,
         int64_t kernel = 0) {
  CheckLse(op, lse, q, return_lse);
  p.out = Ptr(out);
  p.lse = return_lse ? static_cast<float*>(Ptr(lse)) : nullptr;
  if (return_lse) {  // lse is q's shape without head_dim: [batch, q_len, h], [total_q, h], [batch,
                     // h]
    if (p.qo_indptr != nullptr) {
      p.lse_stride_b = 0, p.lse_stride_t = lse.stride(0);
    } else {
      p.lse_stride_b = lse.stride(0), p.lse_stride_t = lse.ndim() == 3 ? lse.stride(1) : 0;
    }
  }
  p.sm_scale = sm_scale;
  p.logits_soft_cap = static_cast<float>(softcap);
  p.window_left = static_cast<int32_t>(window_left);
  p.causal = causal != 0;
  p.num_splits = static_cast<int32_t>(std::max<int64_t>(num_splits, 1));
  const bool gpu = q.device().device_type == kDLCUDA;
  const int64_t need =
      gpu ? attention::WorkspaceElems(p.num_splits, p.total_q, p.num_qo_heads, p.head_dim) : 0;
  CheckWorkspace(op, workspace, q, need);
  if (!gpu) p.num_splits = 1;
  p.workspace = need ? static_cast<float*>(Ptr(workspace)) : nullptr;
  CheckKernel(op, kernel);
  p.kernel = static_cast<attention::Kernel>(kernel);
#ifndef XKERNELS_HOST_ONLY
  if (gpu && p.kernel == attention::Kernel::kSm90 && !DryRun()) {
    const int cc = DeviceCc(q.device().device_id);
    const char* why = cc / 10 != 9 ? "the sm90 kernel needs an sm_90 GPU (H100, H200)"
                                   : attention::Sm90Unsupported(p);
    if (why != nullptr) {
      TVM_FFI_THROW(ValueError) << op << ": " << why << "; asked: kernel='sm90' on "
                                << DeviceStr(q.device()) << " (sm_" << cc << ")";
    }
  }
#endif
  if (p.batch == 0 || p.total_q == 0 || p.num_qo_heads == 0) return;
  XK_ON_DEVICE(op, q,
               DispatchFloat(dt,
                             [&](auto t) -> cudaError_t {
                               using T = decltype(t);
                               if constexpr (std::is_same_v<T, float>) {
                                 return cudaErrorInvalidValue;  // refused by AttnType
                               } else {
                                 return attention::Attention<T>(p, stream);
                               }
                             }),
               host::Attention(p, dt));
}

void AttentionOp(TensorView out, TensorView lse, TensorView workspace, TensorView q, TensorView k,
                 TensorView v, int64_t causal, int64_t window_left, double softcap, double sm_scale,
                 int64_t return_lse, int64_t num_splits, int64_t kernel) {
  constexpr const char* op = "attention";
  const host::DType dt = CheckQkv(op, q, "k", k, "v", v, out);
  CheckNdim(op, "q", q, 4, "[batch, q_len, num_qo_heads, head_dim]");
  CheckNdim(op, "k", k, 4, "[batch, kv_len, num_kv_heads, head_dim]");
  CheckSameShape(op, "v", v, "k", k);
  CheckShape(op, "out", out, ShapeOf(q), "(q's shape)");
  if (k.size(0) != q.size(0)) {
    TVM_FFI_THROW(ValueError) << op << ": k's batch (" << k.size(0) << ") must be q's ("
                              << q.size(0) << ")";
  }
  CheckHeadDim(op, "q", q.size(3));
  if (k.size(3) != q.size(3)) {
    TVM_FFI_THROW(ValueError) << op << ": k's head_dim (" << k.size(3) << ") must be q's ("
                              << q.size(3) << ")";
  }
  CheckHeads(op, q.size(2), k.size(2), "k");
  CheckLayout(op, {{"q", &q}, {"k", &k}, {"v", &v}, {"out", &out}});
  const float scale =
      CheckScalars(op, causal, window_left, softcap, sm_scale, return_lse, num_splits, q.size(3));
  Params p;
  p.q = Ptr(q);
  p.q_stride_b = q.stride(0), p.q_stride_t = q.stride(1), p.q_stride_h = q.stride(2);
  p.out_stride_b = out.stride(0), p.out_stride_t = out.stride(1), p.out_stride_h = out.stride(2);
  p.q_len = q.size(1);
  p.total_q = q.size(0) * q.size(1);
  p.kv_mode = KvMode::kDense;
  p.k = Ptr(k), p.v = Ptr(v);
  p.k_stride_b = k.stride(0), p.k_stride_t = k.stride(1), p.k_stride_h = k.stride(2);
  p.v_stride_b = v.stride(0), p.v_stride_t = v.stride(1), p.v_stride_h = v.stride(2);
  p.kv_len = k.size(1);
  p.batch = static_cast<int32_t>(q.size(0));
  p.num_qo_heads = static_cast<int32_t>(q.size(2));
  p.num_kv_heads = static_cast<int32_t>(k.size(2));
  p.head_dim = static_cast<int32_t>(q.size(3));
  Run(op, p, dt, out, lse, workspace, q, causal, window_left, softcap, scale, return_lse,
      num_splits, kernel);
}

// q [total_q, num_qo_heads, head_dim] packed along tokens with qo_indptr: the query half of
// attention_varlen and attention_paged.
void RaggedQuery(const char* op, Params& p, const TensorView& q, const TensorView& out,
                 const char* indptr_arg, const TensorView& indptr) {
  CheckNdim(op, "q", q, 3, "[total_q, num_qo_heads, head_dim]");
  CheckShape(op, "out", out, ShapeOf(q), "(q's shape)");
  CheckHeadDim(op, "q", q.size(2));
  CheckIndex(op, indptr_arg, indptr, q, -1, "batch + 1");
  if (indptr.size(0) < 1) {
    TVM_FFI_THROW(ValueError) << op << ": " << indptr_arg << " must have batch + 1 >= 1 entries, "
                              << "got 0";
  }
  CheckIndptrValues(op, indptr_arg, indptr, q.size(0), "q's tokens");
  p.q = Ptr(q);
  p.q_stride_t = q.stride(0), p.q_stride_h = q.stride(1);
  p.out_stride_t = out.stride(0), p.out_stride_h = out.stride(1);
  p.qo_indptr = static_cast<const int32_t*>(Ptr(indptr));
  p.total_q = q.size(0);
  p.batch = static_cast<int32_t>(indptr.size(0) - 1);
  p.num_qo_heads = static_cast<int32_t>(q.size(1));
  p.head_dim = static_cast<int32_t>(q.size(2));
}

void VarlenOp(TensorView out, TensorView lse, TensorView workspace, TensorView q, TensorView k,
              TensorView v, TensorView cu_seqlens_q, TensorView cu_seqlens_k, int64_t causal,
              int64_t window_left, double softcap, double sm_scale, int64_t return_lse,
              int64_t num_splits, int64_t kernel) {
  constexpr const char* op = "attention_varlen";
  const host::DType dt = CheckQkv(op, q, "k", k, "v", v, out);
  Params p;
  RaggedQuery(op, p, q, out, "cu_seqlens_q", cu_seqlens_q);
  CheckNdim(op, "k", k, 3, "[total_k, num_kv_heads, head_dim]");
  CheckSameShape(op, "v", v, "k", k);
  if (k.size(2) != q.size(2)) {
    TVM_FFI_THROW(ValueError) << op << ": k's head_dim (" << k.size(2) << ") must be q's ("
                              << q.size(2) << ")";
  }
  CheckHeads(op, q.size(1), k.size(1), "k");
  CheckIndex(op, "cu_seqlens_k", cu_seqlens_k, q, cu_seqlens_q.size(0),
             "cu_seqlens_q's length, batch + 1");
  CheckIndptrValues(op, "cu_seqlens_k", cu_seqlens_k, k.size(0), "k's tokens");
  CheckLayout(op, {{"q", &q}, {"k", &k}, {"v", &v}, {"out", &out}});
  const float scale =
      CheckScalars(op, causal, window_left, softcap, sm_scale, return_lse, num_splits, q.size(2));
  p.kv_mode = KvMode::kRagged;
  p.k = Ptr(k), p.v = Ptr(v);
  p.k_stride_t = k.stride(0), p.k_stride_h = k.stride(1);
  p.v_stride_t = v.stride(0), p.v_stride_h = v.stride(1);
  p.kv_indptr = static_cast<const int32_t*>(Ptr(cu_seqlens_k));
  p.kv_len = k.size(0);  // the extent the kernels clamp indices to
  p.num_kv_heads = static_cast<int32_t>(k.size(1));
  Run(op, p, dt, out, lse, workspace, q, causal, window_left, softcap, scale, return_lse,
      num_splits, kernel);
}

// The paged cache and its page table: the key half of attention_paged and decode_paged.
void PagedKv(const char* op, Params& p, const TensorView& q, int64_t head_dim,
             const TensorView& k_cache, const TensorView& v_cache, const TensorView& kv_indptr,
             const TensorView& kv_indices, const TensorView& kv_last_page_len, int64_t kv_layout) {
  if (kv_layout != 0 && kv_layout != 1) {
    TVM_FFI_THROW(ValueError) << op << ": kv_layout must be 0 (NHD) or 1 (HND), got " << kv_layout;
  }
  const bool hnd = kv_layout == 1;
  CheckNdim(op, "k_cache", k_cache, 4,
            hnd ? "[num_pages, num_kv_heads, page_size, head_dim] (HND)"
                : "[num_pages, page_size, num_kv_heads, head_dim] (NHD)");
  CheckSameShape(op, "v_cache", v_cache, "k_cache", k_cache);
  if (k_cache.size(3) != head_dim) {
    TVM_FFI_THROW(ValueError) << op << ": k_cache's head_dim (" << k_cache.size(3)
                              << ") must be q's (" << head_dim << ")";
  }
  const int64_t page_size = hnd ? k_cache.size(2) : k_cache.size(1);
  const int64_t hkv = hnd ? k_cache.size(1) : k_cache.size(2);
  if (page_size < 1 || page_size > std::numeric_limits<int32_t>::max()) {
    TVM_FFI_THROW(ValueError) << op << ": page_size (k_cache's dimension " << (hnd ? 2 : 1)
                              << ") must be >= 1, got " << page_size;
  }
  CheckHeads(op, p.num_qo_heads, hkv, "k_cache");
  CheckIndex(op, "kv_indptr", kv_indptr, q, p.batch + 1, "batch + 1");
  CheckIndex(op, "kv_indices", kv_indices, q, -1, "");
  CheckIndex(op, "kv_last_page_len", kv_last_page_len, q, p.batch, "batch");
  CheckIndptrValues(op, "kv_indptr", kv_indptr, kv_indices.size(0), "kv_indices' length");
  CheckRangeValues(op, "kv_indices", kv_indices, 0, k_cache.size(0) - 1, "pages of k_cache");
  CheckRangeValues(op, "kv_last_page_len", kv_last_page_len, 0, page_size, "tokens of a page");
  p.kv_mode = KvMode::kPaged;
  p.k = Ptr(k_cache), p.v = Ptr(v_cache);
  p.k_stride_b = k_cache.stride(0), p.v_stride_b = v_cache.stride(0);
  p.k_stride_t = k_cache.stride(hnd ? 2 : 1), p.v_stride_t = v_cache.stride(hnd ? 2 : 1);
  p.k_stride_h = k_cache.stride(hnd ? 1 : 2), p.v_stride_h = v_cache.stride(hnd ? 1 : 2);
  p.kv_indptr = static_cast<const int32_t*>(Ptr(kv_indptr));
  p.kv_indices = static_cast<const int32_t*>(Ptr(kv_indices));
  p.kv_last_page_len = static_cast<const int32_t*>(Ptr(kv_last_page_len));
  p.kv_len = k_cache.size(0);  // pages: the extent the kernels clamp page ids to
  p.kv_indices_len = kv_indices.size(0);
  p.page_size = static_cast<int32_t>(page_size);
  p.page_div = attention::FastDiv(static_cast<uint32_t>(page_size));
  p.num_kv_heads = static_cast<int32_t>(hkv);
}

void PagedOp(TensorView out, TensorView lse, TensorView workspace, TensorView q, TensorView k_cache,
             TensorView v_cache, TensorView qo_indptr, TensorView kv_indptr, TensorView kv_indices,
             TensorView kv_last_page_len, int64_t kv_layout, int64_t causal, int64_t window_left,
             double softcap, double sm_scale, int64_t return_lse, int64_t num_splits) {
  constexpr const char* op = "attention_paged";
  const host::DType dt = CheckQkv(op, q, "k_cache", k_cache, "v_cache", v_cache, out);
  Params p;
  RaggedQuery(op, p, q, out, "qo_indptr", qo_indptr);
  PagedKv(op, p, q, q.size(2), k_cache, v_cache, kv_indptr, kv_indices, kv_last_page_len,
          kv_layout);
  CheckLayout(op, {{"q", &q}, {"k_cache", &k_cache}, {"v_cache", &v_cache}, {"out", &out}});
  const float scale =
      CheckScalars(op, causal, window_left, softcap, sm_scale, return_lse, num_splits, q.size(2));
  Run(op, p, dt, out, lse, workspace, q, causal, window_left, softcap, scale, return_lse,
      num_splits);
}

void DecodeOp(TensorView out, TensorView lse, TensorView workspace, TensorView q,
              TensorView k_cache, TensorView v_cache, TensorView kv_indptr, TensorView kv_indices,
              TensorView kv_last_page_len, int64_t kv_layout, int64_t causal, int64_t window_left,
              double softcap, double sm_scale, int64_t return_lse, int64_t num_splits) {
  constexpr const char* op = "decode_paged";
  const host::DType dt = CheckQkv(op, q, "k_cache", k_cache, "v_cache", v_cache, out);
  if (q.ndim() != 3 && q.ndim() != 4) {
    TVM_FFI_THROW(ValueError) << op << ": q must be 3-D [batch, num_qo_heads, head_dim] or 4-D "
                              << "[batch, q_len, num_qo_heads, head_dim], got shape "
                              << ShapeStr(ShapeOf(q));
  }
  CheckShape(op, "out", out, ShapeOf(q), "(q's shape)");
  CheckHeadDim(op, "q", q.size(-1));
  const bool one = q.ndim() == 3;
  Params p;
  p.q = Ptr(q);
  p.q_stride_b = q.stride(0), p.q_stride_t = one ? 0 : q.stride(1), p.q_stride_h = q.stride(-2);
  p.out_stride_b = out.stride(0), p.out_stride_t = one ? 0 : out.stride(1);
  p.out_stride_h = out.stride(-2);
  p.q_len = one ? 1 : q.size(1);
  p.total_q = q.size(0) * p.q_len;
  p.batch = static_cast<int32_t>(q.size(0));
  p.num_qo_heads = static_cast<int32_t>(q.size(-2));
  p.head_dim = static_cast<int32_t>(q.size(-1));
  PagedKv(op, p, q, q.size(-1), k_cache, v_cache, kv_indptr, kv_indices, kv_last_page_len,
          kv_layout);
  CheckLayout(op, {{"q", &q}, {"k_cache", &k_cache}, {"v_cache", &v_cache}, {"out", &out}});
  const float scale =
      CheckScalars(op, causal, window_left, softcap, sm_scale, return_lse, num_splits, q.size(-1));
  Run(op, p, dt, out, lse, workspace, q, causal, window_left, softcap, scale, return_lse,
      num_splits);
}

// ------------------------------------------------------------------------------------- merging

// v [..., heads, head_dim] and s [..., heads]: the row addressing of the dimensions before the
// last `keep`.
RowStride RowsBefore(const char* op, const char* arg, const TensorView& t, int keep) {
  return LeadingRows(op, arg, t, t.ndim() - keep, 0);
}

host::DType MergeType(const char* op, const char* arg, const TensorView& v) {
  return FloatType(op, arg, v);
}

void CheckLseInput(const char* op, const char* arg, const TensorView& s, const TensorView& ref) {
  CheckDevice(op, arg, s, "v", ref);
  if (!(s.dtype() == DLDataType{kDLFloat, 32, 1})) {
    TVM_FFI_THROW(TypeError) << op << ": " << arg << " must be float32, got "
                             << DTypeStr(s.dtype());
  }
}

void RunMerge(const char* op, MergeParams& mp, host::DType vt, const TensorView& ref) {
  if (mp.rows * mp.heads == 0) return;
  XK_ON_DEVICE(op, ref,
               DispatchFloat(vt,
                             [&](auto t) -> cudaError_t {
                               using T = decltype(t);
                               return attention::MergeStates<T, T>(mp, stream);
                             }),
               host::MergeStates(mp, vt, vt));
}

void MergeStateOp(TensorView out, TensorView lse, TensorView v_a, TensorView s_a, TensorView v_b,
                  TensorView s_b) {
  constexpr const char* op = "merge_state";
  CheckDeviceType(op, "v_a", v_a);
  const host::DType vt = MergeType(op, "v_a", v_a);
  if (v_a.ndim() < 2) {
    TVM_FFI_THROW(ValueError) << op << ": v_a must be at least 2-D [..., heads, head_dim], got "
                              << "shape " << ShapeStr(ShapeOf(v_a));
  }
  CheckDevice(op, "v_b", v_b, "v_a", v_a);
  CheckDevice(op, "out", out, "v_a", v_a);
  CheckSameDType(op, "v_b", v_b, "v_a", v_a);
  CheckSameDType(op, "out", out, "v_a", v_a);
  CheckSameShape(op, "v_b", v_b, "v_a", v_a);
  CheckShape(op, "out", out, ShapeOf(v_a), "(v_a's shape)");
  Shape sshape = ShapeOf(v_a);
  sshape.pop_back();
  for (auto [arg, s] : {std::pair{"s_a", &s_a}, std::pair{"s_b", &s_b}, std::pair{"lse", &lse}}) {
    CheckLseInput(op, arg, *s, v_a);
    CheckShape(op, arg, *s, sshape, "(v_a's shape without head_dim)");
  }
  for (auto [arg, t] : {std::pair{"v_a", &v_a}, std::pair{"v_b", &v_b}, std::pair{"out", &out},
                        std::pair{"s_a", &s_a}, std::pair{"s_b", &s_b}, std::pair{"lse", &lse}}) {
    CheckLastContiguous(op, arg, *t);
  }
  MergeParams mp;
  mp.heads = static_cast<int32_t>(v_a.size(-2));
  mp.head_dim = static_cast<int32_t>(v_a.size(-1));
  mp.rows = mp.heads ? Rows(v_a) / mp.heads : 0;
  mp.num_states = 2;
  mp.v = Ptr(v_a), mp.v_rows = RowsBefore(op, "v_a", v_a, 2), mp.v_stride_h = v_a.stride(-2);
  mp.s = static_cast<const float*>(Ptr(s_a)), mp.s_rows = RowsBefore(op, "s_a", s_a, 1);
  mp.s_stride_h = s_a.stride(-1);
  mp.v1 = Ptr(v_b), mp.v1_rows = RowsBefore(op, "v_b", v_b, 2), mp.v1_stride_h = v_b.stride(-2);
  mp.s1 = static_cast<const float*>(Ptr(s_b)), mp.s1_rows = RowsBefore(op, "s_b", s_b, 1);
  mp.s1_stride_h = s_b.stride(-1);
  mp.out = Ptr(out), mp.out_rows = RowsBefore(op, "out", out, 2), mp.out_stride_h = out.stride(-2);
  mp.lse = static_cast<float*>(Ptr(lse)), mp.lse_rows = RowsBefore(op, "lse", lse, 1);
  mp.lse_stride_h = lse.stride(-1);
  RunMerge(op, mp, vt, v_a);
}

void MergeStatesOp(TensorView out, TensorView lse, TensorView v, TensorView s) {
  constexpr const char* op = "merge_states";
  CheckDeviceType(op, "v", v);
  const host::DType vt = MergeType(op, "v", v);
  if (v.ndim() < 3) {
    TVM_FFI_THROW(ValueError) << op << ": v must be at least 3-D [..., num_states, heads, "
                              << "head_dim], got shape " << ShapeStr(ShapeOf(v));
  }
  CheckDevice(op, "out", out, "v", v);
  CheckSameDType(op, "out", out, "v", v);
  Shape sshape = ShapeOf(v), oshape = ShapeOf(v), lshape;
  sshape.pop_back();
  oshape.erase(oshape.end() - 3);
  lshape = oshape;
  lshape.pop_back();
  CheckLseInput(op, "s", s, v);
  CheckShape(op, "s", s, sshape, "(v's shape without head_dim)");
  CheckShape(op, "out", out, oshape, "(v's shape without num_states)");
  CheckLseInput(op, "lse", lse, v);
  CheckShape(op, "lse", lse, lshape, "(s's shape without num_states)");
  for (auto [arg, t] :
       {std::pair{"v", &v}, std::pair{"out", &out}, std::pair{"s", &s}, std::pair{"lse", &lse}}) {
    CheckLastContiguous(op, arg, *t);
  }
  MergeParams mp;
  mp.heads = static_cast<int32_t>(v.size(-2));
  mp.head_dim = static_cast<int32_t>(v.size(-1));
  mp.num_states = static_cast<int32_t>(v.size(-3));
  mp.rows = mp.heads && mp.num_states ? Rows(v) / (mp.heads * mp.num_states) : Rows(out);
  mp.v = Ptr(v), mp.v_rows = RowsBefore(op, "v", v, 3);
  mp.v_stride_k = v.stride(-3), mp.v_stride_h = v.stride(-2);
  mp.s = static_cast<const float*>(Ptr(s)), mp.s_rows = RowsBefore(op, "s", s, 2);
  mp.s_stride_k = s.stride(-2), mp.s_stride_h = s.stride(-1);
  mp.out = Ptr(out), mp.out_rows = RowsBefore(op, "out", out, 2), mp.out_stride_h = out.stride(-2);
  mp.lse = static_cast<float*>(Ptr(lse)), mp.lse_rows = RowsBefore(op, "lse", lse, 1);
  mp.lse_stride_h = lse.stride(-1);
  RunMerge(op, mp, vt, v);
}

}  // namespace
}  // namespace xkernels::bind

TVM_FFI_DLL_EXPORT_TYPED_FUNC(attention, xkernels::bind::AttentionOp);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(attention_varlen, xkernels::bind::VarlenOp);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(attention_paged, xkernels::bind::PagedOp);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(decode_paged, xkernels::bind::DecodeOp);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(merge_state, xkernels::bind::MergeStateOp);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(merge_states, xkernels::bind::MergeStatesOp);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(attention_plan, xkernels::bind::AttentionPlan);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(attention_varlen_plan, xkernels::bind::VarlenPlan);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(attention_paged_plan, xkernels::bind::PagedPlan);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(decode_paged_plan, xkernels::bind::DecodePlan);
XK_EXPORT_DRY_RUN();
