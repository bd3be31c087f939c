// What every exported function shares: argument validation with errors that name the argument,
// the device branch (host implementation, or device guard + caller's stream + launch), and the
// dtype dispatch. Exported functions follow the order outputs, inputs, scalars.
#ifndef XKERNELS_BINDINGS_COMMON_H_
#define XKERNELS_BINDINGS_COMMON_H_

#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/dtype.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/extra/c_env_api.h>
#include <tvm/ffi/function.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "host/ops.h"
#include "xkernels/rows.h"

#ifndef XKERNELS_HOST_ONLY
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <tvm/ffi/extra/cuda/device_guard.h>

#include "xkernels/common.h"
#endif

namespace xkernels::bind {

using tvm::ffi::TensorView;
using Shape = std::vector<int64_t>;

inline std::string ShapeStr(const Shape& s) {
  std::ostringstream os;
  os << "(";
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << (s.size() == 1 ? ",)" : ")");
  return os.str();
}
inline Shape ShapeOf(const TensorView& t) { return Shape(t.shape().begin(), t.shape().end()); }

inline std::string DTypeStr(DLDataType t) {
  if (t.lanes == 1 && t.code == kDLFloat && t.bits == 16) return "float16";
  if (t.lanes == 1 && t.code == kDLBfloat && t.bits == 16) return "bfloat16";
  if (t.lanes == 1 && t.code == kDLFloat && t.bits == 32) return "float32";
  return std::string(tvm::ffi::DLDataTypeToString(t));
}

inline std::string DeviceStr(DLDevice d) {
  switch (d.device_type) {
    case kDLCPU:
      return "cpu";
    case kDLCUDA:
      return "cuda:" + std::to_string(d.device_id);
    case kDLCUDAHost:
      return "cuda_host";
    case kDLCUDAManaged:
      return "cuda_managed:" + std::to_string(d.device_id);
    default:
      return "device_type " + std::to_string(d.device_type) + ":" + std::to_string(d.device_id);
  }
}

inline host::DType FloatType(const char* op, const char* arg, const TensorView& t) {
  const DLDataType d = t.dtype();
  if (d.lanes == 1 && d.code == kDLFloat && d.bits == 16) return host::DType::kF16;
  if (d.lanes == 1 && d.code == kDLBfloat && d.bits == 16) return host::DType::kBF16;
  if (d.lanes == 1 && d.code == kDLFloat && d.bits == 32) return host::DType::kF32;
  TVM_FFI_THROW(TypeError) << op << ": " << arg
                           << " must be float16, bfloat16 or float32, got " << DTypeStr(d);
  return host::DType::kF32;  // unreachable
}

// `arg` must have `ref`'s dtype.
inline void CheckSameDType(const char* op, const char* arg, const TensorView& t,
                           const char* ref_arg, const TensorView& ref) {
  if (t.dtype() != ref.dtype()) {
    TVM_FFI_THROW(TypeError) << op << ": " << arg << " must have " << ref_arg << "'s dtype "
                             << DTypeStr(ref.dtype()) << ", got " << DTypeStr(t.dtype());
  }
}

// A weight or bias: the input's dtype or float32. Returns its type.
inline host::DType WeightType(const char* op, const char* arg, const TensorView& w,
                              const TensorView& input) {
  if (w.dtype() != input.dtype() && !(w.dtype() == DLDataType{kDLFloat, 32, 1})) {
    TVM_FFI_THROW(TypeError) << op << ": " << arg << " must be " << DTypeStr(input.dtype())
                             << " (input's dtype) or float32, got " << DTypeStr(w.dtype());
  }
  return FloatType(op, arg, w);
}

inline void CheckDevice(const char* op, const char* arg, const TensorView& t, const char* ref_arg,
                        const TensorView& ref) {
  const DLDevice a = t.device(), b = ref.device();
  if (a.device_type != b.device_type || a.device_id != b.device_id) {
    TVM_FFI_THROW(ValueError) << op << ": " << arg << " must be on " << ref_arg << "'s device "
                              << DeviceStr(b) << ", got " << DeviceStr(a);
  }
}

inline void CheckShape(const char* op, const char* arg, const TensorView& t, const Shape& want,
                       const char* why) {
  if (ShapeOf(t) != want) {
    TVM_FFI_THROW(ValueError) << op << ": " << arg << " must have shape " << ShapeStr(want) << " "
                              << why << ", got " << ShapeStr(ShapeOf(t));
  }
}

inline void CheckMinDim(const char* op, const char* arg, const TensorView& t, int ndim) {
  if (t.ndim() < ndim) {
    TVM_FFI_THROW(ValueError) << op << ": " << arg << " must have at least " << ndim
                              << " dimension" << (ndim > 1 ? "s" : "") << ", got " << t.ndim();
  }
}

// Columns are indexed with 32-bit ints in the row kernels; refuse what does not fit.
inline int64_t Cols(const char* op, const char* arg, const TensorView& t) {
  const int64_t cols = t.ndim() ? t.size(-1) : 1;
  if (cols > std::numeric_limits<int32_t>::max()) {
    TVM_FFI_THROW(ValueError) << op << ": " << arg << "'s last dimension must be below 2^31, got "
                              << cols;
  }
  return cols;
}

// A per-column vector (weight, bias): shape (cols,), contiguous, on input's device.
inline host::DType CheckColumnVector(const char* op, const char* arg, const TensorView& v,
                                     const TensorView& input, int64_t cols) {
  CheckDevice(op, arg, v, "input", input);
  const host::DType wt = WeightType(op, arg, v, input);
  CheckShape(op, arg, v, {cols}, "to match input's last dim");
  if (cols > 1 && v.stride(0) != 1) {
    TVM_FFI_THROW(ValueError) << op << ": " << arg << " must be contiguous, got stride "
                              << v.stride(0);
  }
  return wt;
}

inline int64_t Rows(const TensorView& t) {
  int64_t r = 1;
  for (int i = 0; i + 1 < t.ndim(); ++i) r *= t.size(i);
  return r;
}

// Row addressing of the first `lead` dimensions of t: they must collapse into at most two
// strided groups (see xkernels::RowStride). `single` is the stride given when there is one row.
inline RowStride LeadingRows(const char* op, const char* arg, const TensorView& t, int lead,
                             int64_t single) {
  std::vector<std::pair<int64_t, int64_t>> groups;  // (size, stride), outermost first
  for (int i = 0; i < lead; ++i) {
    const int64_t size = t.size(i), stride = t.stride(i);
    if (size == 1) continue;
    if (!groups.empty() && groups.back().second == stride * size) {
      groups.back() = {groups.back().first * size, stride};
    } else {
      groups.push_back({size, stride});
    }
  }
  if (groups.empty()) return RowStride(single);
  if (groups.size() == 1) return RowStride(groups[0].second);
  if (groups.size() == 2) return RowStride(groups[0].second, groups[1].second, groups[1].first);
  std::ostringstream strides;
  for (int i = 0; i < t.ndim(); ++i) strides << (i ? ", " : "(") << t.stride(i);
  TVM_FFI_THROW(ValueError) << op << ": " << arg << " with shape " << ShapeStr(ShapeOf(t))
                            << " and strides " << strides.str()
                            << ") has leading dimensions that do not collapse into two row "
                               "strides; pass a contiguous copy";
  return RowStride();  // unreachable
}

// Row addressing of [..., cols]: the last dimension must be contiguous; the leading dimensions
// must collapse into at most two strided groups (see xkernels::RowStride).
inline RowStride RowsOf(const char* op, const char* arg, const TensorView& t) {
  if (t.ndim() >= 1 && t.size(-1) > 1 && t.stride(-1) != 1) {
    TVM_FFI_THROW(ValueError) << op << ": " << arg
                              << " must be contiguous in its last dimension, got stride "
                              << t.stride(-1);
  }
  return LeadingRows(op, arg, t, t.ndim() - 1, t.ndim() ? t.size(-1) : 1);
}

// True when every element is laid out back to back (a flat vector).
inline bool Dense(const TensorView& t) {
  int64_t expect = 1;
  for (int i = t.ndim() - 1; i >= 0; --i) {
    if (t.size(i) != 1 && t.stride(i) != expect) return false;
    expect *= t.size(i);
  }
  return true;
}

inline void* Ptr(const TensorView& t) {
  return static_cast<char*>(t.data_ptr()) + t.byte_offset();
}

inline host::Mat MatOf(const TensorView& t, host::DType dt, RowStride rs) {
  return host::Mat{Ptr(t), dt, rs};
}

inline void CheckDeviceType(const char* op, const char* arg, const TensorView& t) {
  const int type = t.device().device_type;
  if (type != kDLCPU && type != kDLCUDA) {
    TVM_FFI_THROW(ValueError) << op << ": " << arg << " must be on a CPU or CUDA device, got "
                              << DeviceStr(t.device());
  }
}

// A row op's out and input: one device, one float dtype, at least 1-D, the same shape, columns
// below 2^31. Returns input's dtype.
inline host::DType CheckRowOp(const char* op, const TensorView& out, const TensorView& input) {
  CheckDeviceType(op, "input", input);
  CheckDevice(op, "out", out, "input", input);
  const host::DType dt = FloatType(op, "input", input);
  CheckSameDType(op, "out", out, "input", input);
  CheckMinDim(op, "input", input, 1);
  CheckShape(op, "out", out, ShapeOf(input), "(input's shape)");
  Cols(op, "input", input);
  return dt;
}

#ifndef XKERNELS_HOST_ONLY
template <host::DType D>
struct CudaType;
template <>
struct CudaType<host::DType::kF16> {
  using type = __half;
};
template <>
struct CudaType<host::DType::kBF16> {
  using type = __nv_bfloat16;
};
template <>
struct CudaType<host::DType::kF32> {
  using type = float;
};

// Calls f(T{}) with the CUDA element type of dt.
template <class F>
cudaError_t DispatchFloat(host::DType dt, F&& f) {
  switch (dt) {
    case host::DType::kF16:
      return f(__half{});
    case host::DType::kBF16:
      return f(__nv_bfloat16{});
    case host::DType::kF32:
      return f(float{});
  }
  return cudaErrorInvalidValue;
}

// Calls f(T{}, W{}) where W is T or float (weights and biases).
template <class F>
cudaError_t DispatchFloatWeight(host::DType dt, host::DType wt, F&& f) {
  return DispatchFloat(dt, [&](auto t) {
    using T = decltype(t);
    return wt == dt ? f(T{}, T{}) : f(T{}, float{});
  });
}
#endif

// A `kernel` argument's name (0 'auto', 1 'sm80', 2 'sm90'), as the ops take it.
inline const char* PathStr(int64_t path) {
  return path == 1 ? "'sm80'" : path == 2 ? "'sm90'" : "'auto'";
}

#ifndef XKERNELS_HOST_ONLY
// read(dev), read once per device and kept (0: not read yet; neither attribute below reads 0
// on a working GPU).
template <int (*kRead)(int)>
inline int PerDevice(int dev) {
  static int cache[kMaxDevices] = {};
  if (dev < 0 || dev >= kMaxDevices) return 0;
  if (cache[dev] == 0) cache[dev] = kRead(dev);  // benign race: every thread writes the same value
  return cache[dev];
}

inline int ReadCc(int dev) {
  int major = 0, minor = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
  return 10 * major + minor;
}

inline int ReadSms(int dev) {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  return sms;
}

// Compute capability (10 major + minor) of a GPU, read once per device.
inline int DeviceCc(int dev) { return PerDevice<ReadCc>(dev); }

// Streaming multiprocessors of a GPU, read once per device.
inline int DeviceSms(int dev) { return PerDevice<ReadSms>(dev); }
#endif

// A module's dry-run flag (per thread): when set, exported functions validate their arguments
// and return before touching memory. The JAX adapter sets it to check a call's arguments when the
// call is traced (typed errors naming the argument) without running anything.
inline bool& DryRun() {
  static thread_local bool flag = false;
  return flag;
}
inline void SetDryRun(int64_t on) { DryRun() = on != 0; }
// Exports the module's dry-run switch as `_set_dry_run(int)`: once per module.
#define XK_EXPORT_DRY_RUN() \
  TVM_FFI_DLL_EXPORT_TYPED_FUNC(_set_dry_run, ::xkernels::bind::SetDryRun)

// Run the op on the tensors' device: the host implementation for CPU tensors, or the CUDA
// expression `launch` (which may use `stream`) under a device guard on the caller's stream.
// Nothing runs in a dry run.
#ifdef XKERNELS_HOST_ONLY
#define XK_ON_DEVICE(op, ref, launch, host_call)                                           \
  do {                                                                                    \
    if (::xkernels::bind::DryRun()) break;                                               \
    if ((ref).device().device_type == kDLCPU) {                                          \
      host_call;                                                                          \
    } else {                                                                              \
      TVM_FFI_THROW(RuntimeError) << op << ": this build of xkernels has no CUDA support " \
                                  << "(built without nvcc); only CPU tensors are accepted"; \
    }                                                                                     \
  } while (0)
#else
#define XK_ON_DEVICE(op, ref, launch, host_call)                                            \
  do {                                                                                     \
    if (::xkernels::bind::DryRun()) break;                                                 \
    const DLDevice xk_dev_ = (ref).device();                                               \
    if (xk_dev_.device_type == kDLCPU) {                                                   \
      host_call;                                                                           \
    } else {                                                                               \
      tvm::ffi::CUDADeviceGuard xk_guard_(xk_dev_.device_id);                              \
      cudaStream_t stream =                                                                \
          static_cast<cudaStream_t>(TVMFFIEnvGetStream(xk_dev_.device_type, xk_dev_.device_id)); \
      const cudaError_t xk_err_ = (launch);                                                \
      if (xk_err_ != cudaSuccess) {                                                        \
        TVM_FFI_THROW(RuntimeError) << op << ": CUDA error " << cudaGetErrorName(xk_err_)  \
                                    << ": " << cudaGetErrorString(xk_err_);                \
      }                                                                                    \
    }                                                                                      \
  } while (0)
#endif

}  // namespace xkernels::bind

#endif  // XKERNELS_BINDINGS_COMMON_H_
