// The gemm module's tile launches (gemm::GemmTiles<In, Out>, include/xkernels/gemm/gemm.h) as
// explicit instantiations, so that they compile in translation units of their own, in parallel:
// bindings/gemm.cu declares them extern, bindings/gemm_tiles_<in>.cu define them. (One unit for
// all of them took 172 s on the H100 machine's 16 cores.)
#ifndef XKERNELS_BINDINGS_GEMM_TILES_H_
#define XKERNELS_BINDINGS_GEMM_TILES_H_

#ifndef XKERNELS_HOST_ONLY
#include "xkernels/gemm/gemm.h"

// `extern XK_GEMM_TILES(in, out);` declares one, `XK_GEMM_TILES(in, out);` defines it
#define XK_GEMM_TILES(In, Out)                                                          \
  template cudaError_t xkernels::gemm::GemmTiles<In, Out>(const xkernels::gemm::Params&, \
                                                          cudaStream_t,                  \
                                                          const xkernels::DeviceProps&)

// every pair a kernel takes (the others return cudaErrorInvalidValue where gemm.cu uses them)
extern XK_GEMM_TILES(__half, __half);
extern XK_GEMM_TILES(__half, float);
extern XK_GEMM_TILES(__nv_bfloat16, __nv_bfloat16);
extern XK_GEMM_TILES(__nv_bfloat16, float);
extern XK_GEMM_TILES(__nv_fp8_e4m3, __half);
extern XK_GEMM_TILES(__nv_fp8_e4m3, __nv_bfloat16);
extern XK_GEMM_TILES(__nv_fp8_e4m3, float);
#endif

#endif  // XKERNELS_BINDINGS_GEMM_TILES_H_
