// What every GEMM kernel version shares: the order of output tiles over the grid, the scales of an
// output element, bias loads, the rounding stores of output pairs, split-K's work ranges and the
// kernel that sums split-K's partial tiles.
#ifndef XKERNELS_GEMM_EPILOGUE_H_
#define XKERNELS_GEMM_EPILOGUE_H_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "xkernels/common.h"
#include "xkernels/gemm/params.h"
#include "xkernels/math.h"
#include "xkernels/mma.h"

namespace xkernels::gemm {

// Output tile `t` (of tiles_m x tiles_n) in grouped order: groups of kGroup tile rows, column by
// column inside a group, so that the tiles running at one time share a's and b's k-slices in L2.
template <int kGroup>
XK_DEVICE void GroupedTile(int t, int tiles_m, int tiles_n, int* tm, int* tn) {
  const int per_group = kGroup * tiles_n;
  const int first = t / per_group * kGroup;
  const int rows = min(tiles_m - first, kGroup);
  const int in_group = t % per_group;
  *tm = first + in_group % rows;
  *tn = in_group / rows;
}

// The k blocks (of kb_all) of split `split` out of `splits`: [*begin, *begin + *count).
XK_DEVICE void SplitRange(int kb_all, int splits, int split, int* begin, int* count) {
  const int per = (kb_all + splits - 1) / splits;
  *begin = min(kb_all, split * per);
  *count = max(0, min(kb_all, *begin + per) - *begin);
}

// One output pair (columns col, col + 1 of a row), rounded to Out and stored.
template <typename Out>
XK_DEVICE void StorePair(Out* dst, float x, float y) {
  if constexpr (std::is_same_v<Out, float>) {
    *reinterpret_cast<float2*>(dst) = make_float2(x, y);
  } else {
    *reinterpret_cast<uint32_t*>(dst) = mma::pack2<Out>(x, y);
  }
}

// bias[col] as a float (bias of type `type`: kF16, kBF16 or kF32).
XK_DEVICE float LoadBias(const void* bias, Elem type, int col) {
  switch (type) {
    case Elem::kF32:
      return static_cast<const float*>(bias)[col];
    case Elem::kF16:
      return __half2float(static_cast<const __half*>(bias)[col]);
    default:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(bias)[col]);
  }
}

// bias[col], bias[col + 1] as floats (bias of type `type`: kF16, kBF16 or kF32).
XK_DEVICE float2 LoadBiasPair(const void* bias, Elem type, int col) {
  switch (type) {
    case Elem::kF32:
      return *reinterpret_cast<const float2*>(static_cast<const float*>(bias) + col);
    case Elem::kF16:
      return __half22float2(
          *reinterpret_cast<const __half2*>(static_cast<const __half*>(bias) + col));
    default:
      return __bfloat1622float2(
          *reinterpret_cast<const __nv_bfloat162*>(static_cast<const __nv_bfloat16*>(bias) + col));
  }
}

// The per-tensor or per-row scale of an e4m3 operand at row `row` (1 for 16-bit operands).
// Block scales are applied in the main loop instead.
XK_DEVICE float RowScale(const float* scale, Scale kind, int row) {
  if (kind == Scale::kTensor) return __ldg(scale);
  if (kind == Scale::kRow) return __ldg(scale + row);
  return 1.f;
}

// A gated output: act(gate) * up, act a math::Act code (uniform over the grid). kFast: 16-bit
// outputs (the activation kernels' choice).
template <bool kFast>
XK_DEVICE float Gated(int act, float gate, float up) {
  switch (act) {
    case static_cast<int>(math::Act::kSilu):
      return math::activate<math::Act::kSilu, kFast>(gate) * up;
    case static_cast<int>(math::Act::kGelu):
      return math::activate<math::Act::kGelu, kFast>(gate) * up;
    default:
      return math::activate<math::Act::kGeluTanh, kFast>(gate) * up;
  }
}

// out = the sum of the splits' partial tiles (+ bias), four columns per thread (n % 4 == 0).
// kGated: the partial tiles span 2n columns (gate, then up), and out [m, n] = act(gate sum + bias)
// * (up sum + bias).
template <typename Out, bool kGated>
__global__ void SplitKReduce(const Params p) {
  pdl_wait();
  constexpr int kParts = kGated ? 2 : 1;  // column ranges of n: the sum, or gate and up
  const int64_t quads = p.n / 4;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= static_cast<int64_t>(p.m) * quads) return;
  const int64_t row = idx / quads;
  const int col = static_cast<int>(idx % quads) * 4;
  const int64_t width = kParts * static_cast<int64_t>(p.n);  // columns of a partial tile
  const int64_t plane = static_cast<int64_t>(p.m) * width;
  const float* src = p.workspace + row * width + col;
  float4 s[kParts];
#pragma unroll
  for (int h = 0; h < kParts; ++h) s[h] = *reinterpret_cast<const float4*>(src + h * p.n);
  for (int z = 1; z < p.splits; ++z) {
#pragma unroll
    for (int h = 0; h < kParts; ++h) {
      const float4 v = *reinterpret_cast<const float4*>(src + z * plane + h * p.n);
      s[h].x += v.x, s[h].y += v.y, s[h].z += v.z, s[h].w += v.w;
    }
  }
  pdl_release();
  if (p.bias != nullptr) {
#pragma unroll
    for (int h = 0; h < kParts; ++h) {
      const float2 b0 = LoadBiasPair(p.bias, p.bias_type, h * p.n + col);
      const float2 b1 = LoadBiasPair(p.bias, p.bias_type, h * p.n + col + 2);
      s[h].x += b0.x, s[h].y += b0.y, s[h].z += b1.x, s[h].w += b1.y;
    }
  }
  Out* dst = static_cast<Out*>(p.out) + row * p.ldc + col;
  if constexpr (kGated) {
    constexpr bool kFast = sizeof(Out) == 2;
    const float4 g = s[0], u = s[1];
    StorePair(dst, Gated<kFast>(p.act, g.x, u.x), Gated<kFast>(p.act, g.y, u.y));
    StorePair(dst + 2, Gated<kFast>(p.act, g.z, u.z), Gated<kFast>(p.act, g.w, u.w));
  } else {
    StorePair(dst, s[0].x, s[0].y);
    StorePair(dst + 2, s[0].z, s[0].w);
  }
}

// The sum of split-K's partial tiles (a gated product's too) into out.
template <typename Out>
cudaError_t LaunchSplitKReduce(const Params& p, cudaStream_t stream, const DeviceProps& props) {
  constexpr int kBlock = 256;
  const int64_t threads = static_cast<int64_t>(p.m) * (p.n / 4);
  return LaunchKernel(p.act >= 0 ? SplitKReduce<Out, true> : SplitKReduce<Out, false>,
                      dim3(static_cast<unsigned>(ceil_div<int64_t>(threads, kBlock))), dim3(kBlock),
                      stream, props, 1, p);
}

// out = bias (or zeros): the product of an empty k range (gated: act(gate bias) * up bias). Two
// columns per thread.
template <typename Out>
__global__ void FillBias(const Params p) {
  pdl_wait();
  const int64_t pairs = p.n / 2;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= static_cast<int64_t>(p.m) * pairs) return;
  const int64_t row = idx / pairs;
  const int col = static_cast<int>(idx % pairs) * 2;
  float2 b = p.bias != nullptr ? LoadBiasPair(p.bias, p.bias_type, col) : make_float2(0, 0);
  if (p.act >= 0) {
    const float2 u =
        p.bias != nullptr ? LoadBiasPair(p.bias, p.bias_type, p.n + col) : make_float2(0, 0);
    b = make_float2(Gated<false>(p.act, b.x, u.x), Gated<false>(p.act, b.y, u.y));
  }
  StorePair(static_cast<Out*>(p.out) + row * p.ldc + col, b.x, b.y);
}

template <typename Out>
cudaError_t LaunchFillBias(const Params& p, cudaStream_t stream, const DeviceProps& props) {
  constexpr int kBlock = 256;
  const int64_t threads = static_cast<int64_t>(p.m) * (p.n / 2);
  return LaunchKernel(FillBias<Out>,
                      dim3(static_cast<unsigned>(ceil_div<int64_t>(threads, kBlock))), dim3(kBlock),
                      stream, props, 1, p);
}

// Calls f(Out{}) with the output's element type.
template <class F>
cudaError_t DispatchOut(Elem out, F&& f) {
  switch (out) {
    case Elem::kF16:
      return f(__half{});
    case Elem::kBF16:
      return f(__nv_bfloat16{});
    case Elem::kF32:
      return f(float{});
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace xkernels::gemm

#endif  // XKERNELS_GEMM_EPILOGUE_H_
