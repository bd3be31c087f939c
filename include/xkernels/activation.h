// Elementwise ops of an MLP layer over [rows, cols] with strided rows: gated activations
// (act(x) * y over [..., 2d] -> [..., d]), plain activations, bias + activation, a * b + c.
// Each thread moves U vectors of V elements per operand, issuing every load before computing.
#ifndef XKERNELS_ACTIVATION_H_
#define XKERNELS_ACTIVATION_H_

#include <algorithm>

#include "xkernels/math.h"
#include "xkernels/vec.h"

namespace xkernels {
namespace elementwise {

constexpr int kThreads = 128;
constexpr int kUnroll = 4;
constexpr int64_t kMaxGridY = 65535;

inline dim3 Grid(int64_t rows, int64_t vecs_per_row) {
  return dim3(static_cast<unsigned>(ceil_div<int64_t>(vecs_per_row, kThreads * kUnroll)),
              static_cast<unsigned>(std::min(rows, kMaxGridY)));
}

// Vector index of this thread's u-th vector in its row.
XK_DEVICE int64_t vec_index(int u) {
  return (static_cast<int64_t>(blockIdx.x) * kUnroll + u) * kThreads + threadIdx.x;
}

// out[r, c] = act(in[r, c]) * in[r, d + c]
template <math::Act A, typename T, int V>
__global__ void ActAndMulKernel(T* out, RowStride out_rs, const T* in, RowStride in_rs,
                                int64_t rows, int64_t d) {
  constexpr bool kFast = DTypeTraits<T>::kLowPrecision;
  const int64_t n = d / V;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const T* x = in + in_rs.offset(r);
    T* o = out + out_rs.offset(r);
    Vec<T, V> a[kUnroll], b[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t i = vec_index(u);
      if (i < n) {
        a[u].load(x + i * V);
        b[u].load(x + d + i * V);
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t i = vec_index(u);
      if (i >= n) continue;
      float y[V];
#pragma unroll
      for (int k = 0; k < V; ++k)
        y[k] = math::activate<A, kFast>(to_float(a[u][k])) * to_float(b[u][k]);
      Vec<T, V>::cast_store(o + i * V, y);
    }
  }
}

// out = act(in + bias), bias broadcast over rows (B = void: no bias).
template <math::Act A, typename T, typename B, int V>
__global__ void BiasActKernel(T* out, RowStride out_rs, const T* in, RowStride in_rs,
                              const B* bias, int64_t rows, int64_t cols) {
  constexpr bool kFast = DTypeTraits<T>::kLowPrecision;
  constexpr bool kBias = !std::is_void_v<B>;
  using BT = std::conditional_t<kBias, B, T>;
  const int64_t n = cols / V;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const T* x = in + in_rs.offset(r);
    T* o = out + out_rs.offset(r);
    Vec<T, V> a[kUnroll];
    float b[kUnroll][V];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t i = vec_index(u);
      if (i < n) {
        a[u].load(x + i * V);
        if constexpr (kBias) Vec<BT, V>::cast_load(b[u], reinterpret_cast<const BT*>(bias) + i * V);
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t i = vec_index(u);
      if (i >= n) continue;
      float y[V];
#pragma unroll
      for (int k = 0; k < V; ++k)
        y[k] = math::activate<A, kFast>(to_float(a[u][k]) + (kBias ? b[u][k] : 0.f));
      Vec<T, V>::cast_store(o + i * V, y);
    }
  }
}

// out = a * b + c, in float with one rounding at the end.
template <typename T, int V>
__global__ void MulAddKernel(T* out, RowStride out_rs, const T* pa, RowStride a_rs, const T* pb,
                             RowStride b_rs, const T* pc, RowStride c_rs, int64_t rows,
                             int64_t cols) {
  const int64_t n = cols / V;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const T* xa = pa + a_rs.offset(r);
    const T* xb = pb + b_rs.offset(r);
    const T* xc = pc + c_rs.offset(r);
    T* o = out + out_rs.offset(r);
    Vec<T, V> a[kUnroll], b[kUnroll], c[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t i = vec_index(u);
      if (i < n) {
        a[u].load(xa + i * V);
        b[u].load(xb + i * V);
        c[u].load(xc + i * V);
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t i = vec_index(u);
      if (i >= n) continue;
      float y[V];
#pragma unroll
      for (int k = 0; k < V; ++k) y[k] = fmaf(to_float(a[u][k]), to_float(b[u][k]), to_float(c[u][k]));
      Vec<T, V>::cast_store(o + i * V, y);
    }
  }
}

// 16-byte vectors when every pointer, row stride and the row length allow, else scalars.
template <typename T>
bool CanVectorize(int64_t cols, std::initializer_list<std::pair<const void*, RowStride>> ptrs) {
  constexpr int kV = vec16<T>();
  if (cols % kV != 0) return false;
  for (const auto& [p, rs] : ptrs)
    if (!is_aligned(p, 16) || !rs.divisible_by(kV)) return false;
  return true;
}

}  // namespace elementwise

/// out[r, :] = act(input[r, :d]) * input[r, d:2d] for input [rows, 2d], out [rows, d].
template <math::Act A, typename T>
cudaError_t ActAndMul(T* out, const T* input, int64_t rows, int64_t d, RowStride out_stride,
                      RowStride in_stride, cudaStream_t stream) {
  using namespace elementwise;
  if (rows <= 0 || d <= 0) return cudaSuccess;
  constexpr int kV = vec16<T>();
  if (CanVectorize<T>(d, {{out, out_stride}, {input, in_stride}})) {
    ActAndMulKernel<A, T, kV>
        <<<Grid(rows, d / kV), kThreads, 0, stream>>>(out, out_stride, input, in_stride, rows, d);
  } else {
    ActAndMulKernel<A, T, 1>
        <<<Grid(rows, d), kThreads, 0, stream>>>(out, out_stride, input, in_stride, rows, d);
  }
  return cudaGetLastError();
}

/// out = act(input + bias) over [rows, cols]; bias: [cols] of T or float, or nullptr (B = void)
/// for the plain activation.
template <math::Act A, typename T, typename B = void>
cudaError_t BiasAct(T* out, const T* input, const B* bias, int64_t rows, int64_t cols,
                    RowStride out_stride, RowStride in_stride, cudaStream_t stream) {
  using namespace elementwise;
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  constexpr int kV = vec16<T>();
  bool vec = CanVectorize<T>(cols, {{out, out_stride}, {input, in_stride}});
  if constexpr (!std::is_void_v<B>) vec = vec && is_aligned(bias, vec_align<B, kV>());
  if (vec) {
    BiasActKernel<A, T, B, kV><<<Grid(rows, cols / kV), kThreads, 0, stream>>>(
        out, out_stride, input, in_stride, bias, rows, cols);
  } else {
    BiasActKernel<A, T, B, 1><<<Grid(rows, cols), kThreads, 0, stream>>>(
        out, out_stride, input, in_stride, bias, rows, cols);
  }
  return cudaGetLastError();
}

/// out = act(input) over [rows, cols].
template <math::Act A, typename T>
cudaError_t Activation(T* out, const T* input, int64_t rows, int64_t cols, RowStride out_stride,
                       RowStride in_stride, cudaStream_t stream) {
  return BiasAct<A, T, void>(out, input, nullptr, rows, cols, out_stride, in_stride, stream);
}

/// out = a * b + c over [rows, cols] (fused multiply-add in float, rounded once).
template <typename T>
cudaError_t MulAdd(T* out, const T* a, const T* b, const T* c, int64_t rows, int64_t cols,
                   RowStride out_stride, RowStride a_stride, RowStride b_stride,
                   RowStride c_stride, cudaStream_t stream) {
  using namespace elementwise;
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  constexpr int kV = vec16<T>();
  if (CanVectorize<T>(cols, {{out, out_stride}, {a, a_stride}, {b, b_stride}, {c, c_stride}})) {
    MulAddKernel<T, kV><<<Grid(rows, cols / kV), kThreads, 0, stream>>>(
        out, out_stride, a, a_stride, b, b_stride, c, c_stride, rows, cols);
  } else {
    MulAddKernel<T, 1><<<Grid(rows, cols), kThreads, 0, stream>>>(
        out, out_stride, a, a_stride, b, b_stride, c, c_stride, rows, cols);
  }
  return cudaGetLastError();
}

}  // namespace xkernels

#endif  // XKERNELS_ACTIVATION_H_
