// gemm::GemmTiles for float16 inputs (bindings/gemm_tiles.h says why it is a unit of its own).
#include "gemm_tiles.h"

#ifndef XKERNELS_HOST_ONLY
XK_GEMM_TILES(__half, __half);
XK_GEMM_TILES(__half, float);
#endif
