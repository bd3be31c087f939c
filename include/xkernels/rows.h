// Row addressing for [..., cols] tensors whose last dimension is contiguous.
// Plain C++ (no CUDA) so that host code and device code share it.
#ifndef XKERNELS_ROWS_H_
#define XKERNELS_ROWS_H_

#include <cstdint>

#if defined(__CUDACC__)
#define XK_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define XK_HOST_DEVICE inline
#endif

namespace xkernels {

// Element offset of row r of a tensor whose leading dimensions collapse into at most two
// strided groups: r = outer * inner_count + inner. A plain 2-D tensor (or any tensor whose
// leading dimensions collapse into one) has inner_count == 1 and only `outer` matters, so a
// plain integer row stride converts implicitly. The two-group form covers per-head views such
// as q = qkv[:, :q_size].view(tokens, heads, head_dim), whose token stride is not heads * dim.
// A stride of 0 broadcasts one row to every row (a bias).
struct RowStride {
  int64_t outer = 0;        // elements between consecutive outer rows
  int64_t inner = 0;        // elements between consecutive inner rows
  int64_t inner_count = 1;  // inner rows per outer row

  RowStride() = default;
  XK_HOST_DEVICE RowStride(int64_t row_stride) : outer(row_stride) {}  // NOLINT: implicit on purpose
  XK_HOST_DEVICE RowStride(int64_t outer_stride, int64_t inner_stride, int64_t count)
      : outer(outer_stride), inner(inner_stride), inner_count(count) {}

  XK_HOST_DEVICE int64_t offset(int64_t row) const {
    if (inner_count == 1) return row * outer;
    return (row / inner_count) * outer + (row % inner_count) * inner;
  }
  // True when every row starts at a multiple of `elems` elements from the base pointer.
  XK_HOST_DEVICE bool divisible_by(int64_t elems) const {
    return outer % elems == 0 && (inner_count == 1 || inner % elems == 0);
  }
};

}  // namespace xkernels

#endif  // XKERNELS_ROWS_H_
