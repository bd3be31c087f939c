// gemm::GemmTiles for float8_e4m3fn inputs (bindings/gemm_tiles.h says why it is a unit of its
// own).
#include "gemm_tiles.h"

#ifndef XKERNELS_HOST_ONLY
XK_GEMM_TILES(__nv_fp8_e4m3, __half);
XK_GEMM_TILES(__nv_fp8_e4m3, __nv_bfloat16);
XK_GEMM_TILES(__nv_fp8_e4m3, float);
#endif
