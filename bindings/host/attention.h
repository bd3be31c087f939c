// Host (CPU) implementations of the attention ops: plain C++, float accumulation, behind the same
// exported functions as the CUDA kernels (bindings/attention.cu validates before calling them).
#ifndef XKERNELS_BINDINGS_HOST_ATTENTION_H_
#define XKERNELS_BINDINGS_HOST_ATTENTION_H_

#include "host/ops.h"
#include "xkernels/attention/params.h"

namespace xkernels::host {

// attention::Params over host memory; q, k, v and out of `dtype` (kF16 or kBF16). Every row is
// computed whole: num_splits and workspace are ignored.
void Attention(const attention::Params& p, DType dtype);

// attention::MergeParams over host memory: v (and v1) of `v_dtype`, out of `out_dtype`.
void MergeStates(const attention::MergeParams& p, DType v_dtype, DType out_dtype);

}  // namespace xkernels::host

#endif  // XKERNELS_BINDINGS_HOST_ATTENTION_H_
