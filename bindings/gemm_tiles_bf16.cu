// gemm::GemmTiles for bfloat16 inputs (bindings/gemm_tiles.h says why it is a unit of its own).
#include "gemm_tiles.h"

#ifndef XKERNELS_HOST_ONLY
XK_GEMM_TILES(__nv_bfloat16, __nv_bfloat16);
XK_GEMM_TILES(__nv_bfloat16, float);
#endif
