// Umbrella header: every launcher of the library. CUDA headers only.
#ifndef XKERNELS_XKERNELS_H_
#define XKERNELS_XKERNELS_H_

#include "xkernels/activation.h"
#include "xkernels/attention/attention.h"
#include "xkernels/norm.h"
#include "xkernels/softmax.h"

#endif  // XKERNELS_XKERNELS_H_
