// Host (CPU) implementation of RoPE and the fused QK norm + RoPE: plain C++, float arithmetic,
// behind the same exported functions as the CUDA kernel (bindings/rope.cu validates first).
#ifndef XKERNELS_BINDINGS_HOST_ROPE_H_
#define XKERNELS_BINDINGS_HOST_ROPE_H_

#include "host/ops.h"
#include "xkernels/rope_params.h"

namespace xkernels::host {

// rope::Problem over host memory: q, k and the outputs of `dtype`, the weights (if any) of
// `weight_dtype`. Angles in double (pos * inv_freq), cos and sin rounded to float.
void Rope(const rope::Problem& p, DType dtype, DType weight_dtype);

}  // namespace xkernels::host

#endif  // XKERNELS_BINDINGS_HOST_ROPE_H_
