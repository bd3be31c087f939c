// Decode GEMM of one row of a (kGemvMaxRows): out [1, n] = a [1, k] @ b [n, k]^T, 16-bit a and b,
// with no tensor cores. The product is a pass over b (n x k x 2 bytes), the mma tiles' 64 rows
// are all padding but one, and what bounds it is how fast b streams from memory.
//
// One block per output column (a row of b): its threads load consecutive 16-byte vectors of the
// row, 4 each in flight (b streamed past L1: ld.global.cs), the matching vectors of a's rows
// through L1 (every block reads them), fp32 products summed along the row, then across the block. A
// gated product (act >= 0) takes the gate's and the up's rows j and n + j in the same warp and
// stores act(gate) * up. Bias, fp32 or the input's type out, as the other kernels.
//
// Measured on the H100 (gemm_probe, bf16): 1 x 8192 x 8192 44.3 us against the 64-row wgmma
// tiles' 52.2 (cuBLAS 47.5 and torch.compile's Triton kernel 43.7 in the bench), 1 x 8192 x 28672
// 151.0 against 160.0.
#ifndef XKERNELS_GEMM_GEMV_H_
#define XKERNELS_GEMM_GEMV_H_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "xkernels/common.h"
#include "xkernels/gemm/epilogue.h"
#include "xkernels/gemm/params.h"
#include "xkernels/math.h"

namespace xkernels::gemm {

// m = 1 only: at m = 4 the kernel ran 55.8 us against the wgmma tiles' 51.0 at 4 x 8192 x 8192
// (187.5 against 164.6 at k 28672): every row of a costs its own conversions and FMAs per vector
// of b, and the issue rate, not the memory, bounds it; m = 2 and 3 were not measured.
constexpr int kGemvMaxRows = 1;
constexpr int kGemvWarps = 8;   // columns per block
constexpr int kGemvUnroll = 4;  // 16-byte vectors of b in flight per lane

// Whether p takes the GEMV kernel on a device of compute capability major `cc_major`: a's rows
// few enough, 16-bit operands, b as [n, k], and the kernel left to the dispatcher.
inline bool UseGemv(const Params& p, int cc_major) {
  return cc_major >= 8 && p.path == Path::kAuto && p.splits <= 1 && p.m >= 1 &&
         p.m <= kGemvMaxRows && p.in_type != Elem::kE4M3 && p.b_layout == BLayout::kNK && p.k > 0;
}

namespace detail {

// sum over the 8 pairs of x and y (8 16-bit values each) into acc
template <typename T>
XK_DEVICE float Dot8(const uint4& x, const uint4& y, float acc) {
  const uint32_t xs[4] = {x.x, x.y, x.z, x.w}, ys[4] = {y.x, y.y, y.z, y.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    float2 u, v;
    if constexpr (std::is_same_v<T, __nv_bfloat16>) {
      u = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&xs[i]));
      v = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&ys[i]));
    } else {
      u = __half22float2(*reinterpret_cast<const __half2*>(&xs[i]));
      v = __half22float2(*reinterpret_cast<const __half2*>(&ys[i]));
    }
    acc = fmaf(u.x, v.x, acc);
    acc = fmaf(u.y, v.y, acc);
  }
  return acc;
}

XK_DEVICE uint4 LoadStream(const void* p) {
  uint4 v;
  asm volatile("ld.global.cs.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// acc[r] (r < m) += a row r . b row `row`, over the 16-byte vectors t, t + kThreads, ... of the
// row (this thread's share), kGemvUnroll of b's in flight
template <typename T, int kM, int kThreads>
XK_DEVICE void DotRows(const Params& p, int64_t row, int t, float (&acc)[kM]) {
  const T* a = static_cast<const T*>(p.a);
  const T* b = static_cast<const T*>(p.b) + row * p.ldb;
  const int vecs = p.k / 8;
  int v = t;
  for (; v + kThreads * (kGemvUnroll - 1) < vecs; v += kThreads * kGemvUnroll) {
    uint4 bv[kGemvUnroll];
#pragma unroll
    for (int u = 0; u < kGemvUnroll; ++u) bv[u] = LoadStream(b + 8 * (v + kThreads * u));
#pragma unroll
    for (int r = 0; r < kM; ++r) {
      if (r < p.m) {
#pragma unroll
        for (int u = 0; u < kGemvUnroll; ++u) {
          const uint4 av =
              __ldg(reinterpret_cast<const uint4*>(a + r * p.lda + 8 * (v + kThreads * u)));
          acc[r] = Dot8<T>(av, bv[u], acc[r]);
        }
      }
    }
  }
  for (; v < vecs; v += kThreads) {
    const uint4 bv = LoadStream(b + 8 * v);
#pragma unroll
    for (int r = 0; r < kM; ++r) {
      if (r < p.m) {
        acc[r] = Dot8<T>(__ldg(reinterpret_cast<const uint4*>(a + r * p.lda + 8 * v)), bv, acc[r]);
      }
    }
  }
}

// The sums of acc[r] over the block (in thread 0), through shared memory red[kGemvWarps][kM].
template <int kM>
XK_DEVICE void BlockSum(float (&acc)[kM], float (*red)[kM]) {
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
#pragma unroll
  for (int r = 0; r < kM; ++r) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], o);
    if (lane == 0) red[warp][r] = acc[r];
  }
  __syncthreads();
  if (threadIdx.x == 0) {
#pragma unroll
    for (int r = 0; r < kM; ++r) {
      float s = 0.f;
#pragma unroll
      for (int w = 0; w < kGemvWarps; ++w) s += red[w][r];
      acc[r] = s;
    }
  }
}

// One block per output column: its kGemvWarps warps share the row's k (consecutive 16-byte
// vectors across the block, 4 KB a step), so a column is a short piece of work and the grid has
// n of them (one warp per column, whole rows each, left the last of 2.6 waves a third full at
// n 8192: 1 x 8192 x 28672 173.7 us, against 161 with the wgmma tiles).
template <typename T, typename Out, int kM>
__global__ void __launch_bounds__(32 * kGemvWarps) GemvKernel(const Params p) {
  constexpr int kThreads = 32 * kGemvWarps;
  __shared__ float red[kGemvWarps][kM], red_up[kGemvWarps][kM];
  pdl_wait();
  const int col = static_cast<int>(blockIdx.x);
  const int t = static_cast<int>(threadIdx.x);
  float acc[kM] = {}, up[kM] = {};
  DotRows<T, kM, kThreads>(p, col, t, acc);
  if (p.act >= 0) DotRows<T, kM, kThreads>(p, static_cast<int64_t>(p.n) + col, t, up);
  BlockSum<kM>(acc, red);
  if (p.act >= 0) BlockSum<kM>(up, red_up);
  pdl_release();
  if (t == 0) {
    float bias = 0.f, bias_up = 0.f;
    if (p.bias != nullptr) {
      bias = LoadBias(p.bias, p.bias_type, col);
      if (p.act >= 0) bias_up = LoadBias(p.bias, p.bias_type, p.n + col);
    }
#pragma unroll
    for (int r = 0; r < kM; ++r) {
      if (r < p.m) {
        float v = acc[r] + bias;
        if (p.act >= 0) v = Gated<sizeof(Out) == 2>(p.act, v, up[r] + bias_up);
        static_cast<Out*>(p.out)[r * p.ldc + col] = static_cast<Out>(v);
      }
    }
  }
}

}  // namespace detail

// Runs p (UseGemv) on `stream`.
template <typename Out>
cudaError_t LaunchGemv(const Params& p, cudaStream_t stream, const DeviceProps& props) {
  static_assert(kGemvMaxRows == 1, "GemvKernel<.., kM> for more rows");
  const dim3 grid(static_cast<unsigned>(p.n));
  auto launch = [&](auto t) -> cudaError_t {
    using T = decltype(t);
    return LaunchKernel(detail::GemvKernel<T, Out, 1>, grid, 32 * kGemvWarps, stream, props, 1, p);
  };
  if constexpr (std::is_same_v<Out, float>) {
    return p.in_type == Elem::kF16 ? launch(__half{}) : launch(__nv_bfloat16{});
  } else {
    return launch(Out{});  // 16-bit outputs: the inputs' type
  }
}

}  // namespace xkernels::gemm

#endif  // XKERNELS_GEMM_GEMV_H_
