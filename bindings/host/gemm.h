// Host (CPU) implementations of GEMM and e4m3 quantisation (xkernels/gemm/params.h): plain C++,
// float accumulation, behind the same exported functions as the CUDA kernels (bindings/gemm.cu
// validates before calling them).
#ifndef XKERNELS_BINDINGS_HOST_GEMM_H_
#define XKERNELS_BINDINGS_HOST_GEMM_H_

#include "xkernels/gemm/params.h"

namespace xkernels::host {

// gemm::Params over host memory: out = (a * sa) @ (b * sb)^T (+ bias), each output a float dot
// product over k of the operands converted (and scaled) to float. splits, workspace and path are
// ignored: every output is computed whole, the same way whatever they say.
void Gemm(const gemm::Params& p);

// gemm::QuantParams over host memory: scale = amax / 448 per group (1 for a group of zeros, or
// where amax / 448 underflows), q = x / scale in float, rounded to the nearest e4m3 (ties to even),
// saturating at +-448.
void QuantizeFp8(const gemm::QuantParams& p);

}  // namespace xkernels::host

#endif  // XKERNELS_BINDINGS_HOST_GEMM_H_
