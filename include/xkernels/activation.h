// Elementwise ops of an MLP layer over [rows, cols] with strided rows: gated activations
// (act(x) * y over [..., 2d] -> [..., d]), plain activations, bias + activation, a * b + c.
// Each thread moves U vectors of V elements per operand, issuing every load before computing.
#ifndef XKERNELS_ACTIVATION_H_
#define XKERNELS_ACTIVATION_H_

#include <algorithm>
#include <initializer_list>
#include <type_traits>

#include "xkernels/math.h"
#include "xkernels/vec.h"

namespace xkernels {
namespace elementwise {

constexpr int64_t kMaxGridY = 65535;

// How a throughput grid runs an op: U vectors per thread per operand, blocks of at most kThreads
// threads, and rows addressed in the plain form where the launch's strides allow (else strided).
// Chosen per op from measurements on the H100 (bf16, CUDA graphs, inputs rotating over 3x the
// L2, us; U x threads, P plain / S strided rows):
//   silu_and_mul 8192x28672       U2x128 S 231.0, P 230.8; U1x128 P 230.9, U1x256 P 230.9,
//                                 U1x256 S 227.9, U1x512 P 230.8 (4096 rows alike: 0.990 of U2)
//   gelu_tanh_and_mul 8192x28672  U2x128 S 231.0; U1x256 S 228.0 (4096 rows: 0.987)
//   gelu_and_mul 8192x28672       U2x128 S 229.4; U1x128 P 228.5, U1x256 P 228.9, U1x256 S 239.6
//   silu 8192x14336               U2x128 S 157.5, P 192.3; U1x512 S 155.7, P 155.6
//   add_bias_gelu 131072x4096     U2x128 S 709.5, P 823.0; U1x512 P 709.9, U1x128 P 713.1
//   mul_add 2^28                  U2x128 S 687.9, P 691.3; U1x512 S 686.3, P 686.8
// (an earlier kernel form: gelu_and_mul 8192x28672 U4x128 2987 GB/s, U2 3065, U1 2978).
// The spread follows each kernel's code and registers more than any rule we found: ops not
// measured keep U2x128 S.
// kW: grids of up to kW waves of one vector per thread slot take the latency form (see Tiling).
template <int kU, int kT, bool kP, int kW = 1>
struct Throughput {
  static constexpr int kUnroll = kU, kThreads = kT, kLatencyWaves = kW;
  static constexpr bool kPlain = kP;
};
using DefaultThroughput = Throughput<2, 128, false>;

// How a launch covers [rows, n vectors]: each thread moves U vectors per operand; a row is
// split over `blocks_per_row` blocks of at most `max_threads` threads, sized so that they divide
// the row about evenly. Grids with fewer vectors than the GPU has thread slots (a few rows) are
// latency-bound: they take U = 1 in blocks of at most 128 threads, to spread their loads over
// more SMs (silu_and_mul 1x28672 on the H100: U = 4 2.13 us, U = 1 1.48), and their kernels take
// one row per blockIdx.y (rows <= kMaxGridY, no row loop), 2-D row strides and 32-bit vector
// indices, which shortens the chain from the kernel's parameters to its first load. Measured on
// the H100, bf16 silu_and_mul 1x28672 in CUDA graphs, against the general form: no loop 1.44 ->
// 1.42 us, 2-D strides 1.38, 32-bit indices 1.45, all three 1.30. Their activations take the
// forms with the shorter chains (math::gelu's kShort).
constexpr int kLatencyThreads = 128;

struct Tiling {
  int threads;
  bool latency;  // the latency-bound form (U = 1, one row per blockIdx.y)
  int64_t blocks_per_row;
  dim3 grid(int64_t rows) const {
    return dim3(static_cast<unsigned>(blocks_per_row),
                static_cast<unsigned>(std::min(rows, kMaxGridY)));
  }
};

// `plain`: every row stride of the launch is 2-D (RowStride::inner_count == 1), as U = 1 needs.
// unroll, max_threads and latency_waves: the op's throughput shape (Throughput).
inline Tiling Tile(int64_t rows, int64_t n, int sm_count, bool plain, int unroll,
                   int max_threads, int latency_waves = 1) {
  Tiling t;
  t.latency = rows * n < int64_t{sm_count} * 2048 * latency_waves && rows <= kMaxGridY && plain;
  const int u = t.latency ? 1 : unroll;
  const int most = t.latency ? kLatencyThreads : max_threads;
  t.blocks_per_row = ceil_div<int64_t>(n, int64_t{u} * most);
  t.threads = static_cast<int>((ceil_div<int64_t>(n, u * t.blocks_per_row) + 31) / 32 * 32);
  return t;
}

// How a kernel addresses its rows:
//   kStrided  any RowStride (per-head views: two strided groups)
//   kPlain    2-D strides (RowStride::inner_count == 1): a row's offset is one multiply
//   kLatency  2-D strides, U = 1, one row per blockIdx.y and 32-bit vector indices (see Tiling)
enum class Form { kStrided, kPlain, kLatency };

// Vector index of this thread's u-th vector in its row.
template <int U, Form F>
XK_DEVICE int64_t vec_index(int u) {
  static_assert(F != Form::kLatency || U == 1, "the latency form moves one vector per thread");
  if constexpr (F == Form::kLatency) return static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  return (static_cast<int64_t>(blockIdx.x) * U + u) * blockDim.x + threadIdx.x;
}

// Element offset of row r.
template <Form F>
XK_DEVICE int64_t row_offset(const RowStride& rs, int64_t r) {
  return F == Form::kStrided ? rs.offset(r) : r * rs.outer;
}

// out[r, c] = act(in[r, c]) * in[r, d + c]
template <math::Act A, typename T, int V, int U, Form F>
__global__ void ActAndMulKernel(T* out, RowStride out_rs, const T* in, RowStride in_rs,
                                int64_t rows, int64_t d) {
  constexpr bool kFast = DTypeTraits<T>::kLowPrecision;
  const int64_t n = d / V;
  pdl_wait();
  pdl_release();
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const T* x = in + row_offset<F>(in_rs, r);
    T* o = out + row_offset<F>(out_rs, r);
    Vec<T, V> a[U], b[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t i = vec_index<U, F>(u);
      if (i < n) {
        a[u].load(x + i * V);
        b[u].load(x + d + i * V);
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t i = vec_index<U, F>(u);
      if (i >= n) continue;
      float y[V];
#pragma unroll
      for (int k = 0; k < V; ++k)
        y[k] = math::activate<A, kFast, kFast>(to_float(a[u][k])) * to_float(b[u][k]);
      Vec<T, V>::cast_store(o + i * V, y);
    }
    if constexpr (F == Form::kLatency) break;  // one row per blockIdx.y (see Tiling)
  }
}

// out = act(in + bias), bias broadcast over rows (B = void: no bias). kShort: the activation's
// shorter form (math::activate) in every form of the kernel, not only the latency form.
template <math::Act A, typename T, typename B, int V, int U, Form F, bool kShort = false>
__global__ void BiasActKernel(T* out, RowStride out_rs, const T* in, RowStride in_rs,
                              const B* bias, int64_t rows, int64_t cols) {
  constexpr bool kFast = DTypeTraits<T>::kLowPrecision;
  constexpr bool kBias = !std::is_void_v<B>;
  using BT = std::conditional_t<kBias, B, T>;
  const int64_t n = cols / V;
  pdl_wait();
  pdl_release();
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const T* x = in + row_offset<F>(in_rs, r);
    T* o = out + row_offset<F>(out_rs, r);
    Vec<T, V> a[U];
    float b[U][V];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t i = vec_index<U, F>(u);
      if (i < n) {
        a[u].load(x + i * V);
        if constexpr (kBias) Vec<BT, V>::cast_load(b[u], reinterpret_cast<const BT*>(bias) + i * V);
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t i = vec_index<U, F>(u);
      if (i >= n) continue;
      float y[V];
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const float v = to_float(a[u][k]) + (kBias ? b[u][k] : 0.f);
        y[k] = math::activate<A, kFast, kShort || F == Form::kLatency>(v);
      }
      Vec<T, V>::cast_store(o + i * V, y);
    }
    if constexpr (F == Form::kLatency) break;  // one row per blockIdx.y (see Tiling)
  }
}

// out = a * b + c, in float with one rounding at the end.
template <typename T, int V, int U, Form F>
__global__ void MulAddKernel(T* out, RowStride out_rs, const T* pa, RowStride a_rs, const T* pb,
                             RowStride b_rs, const T* pc, RowStride c_rs, int64_t rows,
                             int64_t cols) {
  const int64_t n = cols / V;
  pdl_wait();
  pdl_release();
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const T* xa = pa + row_offset<F>(a_rs, r);
    const T* xb = pb + row_offset<F>(b_rs, r);
    const T* xc = pc + row_offset<F>(c_rs, r);
    T* o = out + row_offset<F>(out_rs, r);
    Vec<T, V> a[U], b[U], c[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t i = vec_index<U, F>(u);
      if (i < n) {
        a[u].load(xa + i * V);
        b[u].load(xb + i * V);
        c[u].load(xc + i * V);
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t i = vec_index<U, F>(u);
      if (i >= n) continue;
      float y[V];
#pragma unroll
      for (int k = 0; k < V; ++k) {
        y[k] = fmaf(to_float(a[u][k]), to_float(b[u][k]), to_float(c[u][k]));
      }
      Vec<T, V>::cast_store(o + i * V, y);
    }
    if constexpr (F == Form::kLatency) break;  // one row per blockIdx.y (see Tiling)
  }
}

// True when every row stride is 2-D (one outer stride), as Tiling's U = 1 needs.
inline bool Plain(std::initializer_list<RowStride> strides) {
  for (const RowStride& rs : strides)
    if (rs.inner_count != 1) return false;
  return true;
}

// 16-byte vectors when every pointer, row stride and the row length allow, else scalars.
template <typename T>
bool CanVectorize(int64_t cols, std::initializer_list<std::pair<const void*, RowStride>> ptrs) {
  constexpr int kV = vec16<T>();
  if (cols % kV != 0) return false;
  for (const auto& [p, rs] : ptrs)
    if (!is_aligned(p, 16) || !rs.divisible_by(kV)) return false;
  return true;
}

}  // namespace elementwise

namespace elementwise {

// Grids this small (threads per SM, at one thread per vector) take narrower vectors: 4 bytes up
// to kNarrowest, 8 up to kNarrow. Latency-bound, they finish sooner spread over more threads,
// each with fewer elements to compute. Measured on the H100, bf16, CUDA graphs, us, vectors of
// 16 / 8 / 4 bytes: 1x28672 silu_and_mul 1.547 / 1.460 / 1.408, gelu_and_mul 1.571 / 1.483 /
// 1.421, gelu_tanh_and_mul 1.532 / 1.452 / -; 4x28672 silu_and_mul 1.569 / 1.542 / 1.534,
// gelu_and_mul 1.606 / 1.553 / 1.547.
constexpr int64_t kNarrowest = 256, kNarrow = 512;

// Launch K<V, U, Form> over [rows, cols] with the tiling above: the latency form, or the op's
// throughput shape P (Throughput), or narrower vectors (see kNarrow); `plain`: every row stride
// is 2-D.
template <int V, class P, template <int, int, Form> class K, typename... Args>
cudaError_t LaunchTiled(int64_t rows, int64_t cols, bool plain, cudaStream_t stream,
                        Args... args) {
  DeviceProps props;
  XK_CUDA_TRY(GetDeviceProps(&props));
  const auto tile = [&](int64_t n) {
    return Tile(rows, n, props.sm_count, plain, P::kUnroll, P::kThreads, P::kLatencyWaves);
  };
  // Narrower vectors, of W elements (their grids are below Tile's threshold: the latency form).
  const auto narrow = [&](auto w) {
    constexpr int W = decltype(w)::value;
    const Tiling t = tile(cols / W);
    return LaunchKernel(K<W, 1, Form::kLatency>::kernel, t.grid(rows), t.threads, stream, props,
                        1, args...);
  };
  if constexpr (V >= 4) {
    const int64_t vectors = rows * (cols / V);  // of V elements
    if (plain && rows <= kMaxGridY) {
      if (vectors * 4 <= kNarrowest * props.sm_count) {
        return narrow(std::integral_constant<int, V / 4>{});
      }
      if (vectors * 2 <= kNarrow * props.sm_count) {
        return narrow(std::integral_constant<int, V / 2>{});
      }
    }
  }
  const Tiling t = tile(cols / V);
  if (t.latency) {
    return LaunchSpread<K<V, 1, Form::kLatency>::kernel>(t.grid(rows), t.threads, stream, props,
                                                         args...);
  }
  constexpr int U = P::kUnroll;
  if constexpr (P::kPlain) {
    if (plain) {
      return LaunchKernel(K<V, U, Form::kPlain>::kernel, t.grid(rows), t.threads, stream, props,
                          1, args...);
    }
  }
  return LaunchKernel(K<V, U, Form::kStrided>::kernel, t.grid(rows), t.threads, stream, props, 1,
                      args...);
}

// Each op's kernel and throughput shape (see Throughput).
// Gated activations: grids of up to 2 waves (one vector per thread slot) take the latency form
// too (128 threads, one vector each, one row per blockIdx.y, 32-bit indices). Measured on H100s,
// bf16 [rows, d], U1x256 strided -> the latency form, as the ratio to the best peer in xkernels
// bench --sweep (the committed results; a run with the latency form up to 8 waves, on another
// card), waves in brackets: silu_and_mul 128 x 18432 1.153 -> 1.121 (1.1), x 18944 1.140 ->
// 1.120, x 25600 1.176 -> 1.165 (1.5), x 29568 1.184 -> 1.178 (1.75); gelu_tanh_and_mul 128 x
// 21504 1.076 -> 0.978 (1.3), x 36864 1.143 -> 1.138 (2.2); past 2 waves it lost: silu_and_mul
// 128 x 53248 1.108 -> 1.124 (3.2), 1024 x 11008 1.024 -> 1.054 (5.2), gelu_tanh_and_mul 1024 x
// 10240 1.007 -> 1.022 (4.9). In benchmarks/rows_probe.cu (CUDA graphs of 40 calls, one output
// buffer for every call) it gained there too (us: silu_and_mul 128 x 53248 13.62 -> 13.14, 1024
// x 8192 17.34 -> 16.80, 8192 x 1536 25.88 -> 24.96), and the probe timed our kernels 15-25%
// faster than the bench does: its conditions differ from the bench's somewhere (not found yet).
// Tried in the probe, none faster than the latency form by more than 1%: one flat index over
// rows x vectors, plain or persistent, U = 1-4, 128-512 threads; without PDL every form was
// 4-11% slower (silu_and_mul 128 x 14336 4.44 -> 4.95 us).
// Latency grids of more blocks than SMs spread their blocks evenly (LaunchSpread); gelu_and_mul
// takes the latency form up to 3 waves. Measured on the H100 in rows_probe (-DPART=3), bf16, us,
// before -> after: gelu_and_mul 128 x 9216 3.57 -> 3.20, x 10240 3.97 -> 3.57, x 14336 4.60 ->
// 4.38, x 36864 (2.2 waves, U1x128 plain before) 9.46 -> 8.79.
// On fast_memory (the H200), throughput grids of every gated op take the plain form (PFast; on
// the H100 silu and gelu_tanh keep the strided one, 1.3% ahead of plain there: see Throughput),
// and gelu the erfc-tail form everywhere (kShort, as latency grids did; see math.h): on the H200
// (4.8 TB/s), bf16 [rows, d] in rows_probe (-DPART=5, GPU-84208c05), us, the launcher -> the
// plain form (U1x256; U1x128 for gelu, its latency form's kShort):
//   silu_and_mul 4096 x 14336 87.44 -> 81.80, 8192 x 14336 172.94 -> 161.20
//   gelu_tanh_and_mul 8192 x 14336 173.50 -> 161.10
//   gelu_and_mul 8192 x 14336 203.78 -> 160.44 (erff in the plain form: 192.71)
// There the plain forms of 128-1024 threads (and the latency form) ran within 0.5% of each
// other, the strided ones 4% (128 threads) to 34% (1024) slower than plain (42 registers against
// 32). Why the strided form keeps up on the H100 and not here is not known.
template <math::Act A, typename T>
struct ActAndMulK {
  using P = std::conditional_t<A == math::Act::kGelu, Throughput<1, 128, true, 3>,
                               Throughput<1, 256, false, 2>>;
  using PFast = std::conditional_t<A == math::Act::kGelu, P, Throughput<1, 256, true, 2>>;
  template <int V, int U, Form F>
  struct K {
    static constexpr auto kernel = ActAndMulKernel<A, T, V, U, F>;
  };
};
// The plain gelu forms (no bias): grids of up to 5 waves take the latency form too, as the gated
// ops do. Measured on H100s with xkernels bench --sweep (bf16 gelu_tanh, one output reused, us,
// U2x128 -> the latency form; torch eager in the same runs 4.40 / 5.23-5.24 / 6.22-6.23):
// 128 x 18176 4.79 -> 3.62, x 24576 5.30 -> 4.59, x 32768 7.32 -> 5.59; an output per input set
// 5.03 / 5.88 / 7.84 -> 4.60 / 5.71 / 7.11. Up to 5 waves (from 2; 2026-11-27, GPU-f0fb4a37):
// 1024 x 10240 (4.9 waves) 14.99 -> 13.70 (torch 14.44); 1024 x 18176 and wider keep U2x128.
// On fast_memory (the H200) the plain gelu of 16-bit types takes the erfc-tail form in every grid
// (kShort: branchless, where erff's time depends on the data) and the plain form (FastGelu), and
// silu the plain form of 256 threads (FastSilu). Measured on the H200, rows_probe -DPART=8
// (GPU-51afd693), bf16, inputs uniform over [-6, 6], us, U2x128 strided erff (the H100's shape)
// -> U2x128 plain kShort: gelu 8192 x 32768 423.8 -> 263.1, 8192 x 3072 38.5 -> 26.9, 1024 x
// 18176 28.1 -> 20.1 (kShort strided: 286.1 / 27.9 / 20.8; U1x256 plain kShort 291.3 / 29.0 /
// 21.4). Over [-6, 6] most of erff's inputs take its slower branch: in the sweep (torch.randn
// inputs) the H100's shape ran 298.7 at 8192 x 32768 (torch 291.7). silu 8192 x 29568, U1x512
// strided -> U1x256 plain: 245.1 -> 228.8 (U1x512 plain 239.7; on the H100 the two tied, see
// Throughput).
template <math::Act A, typename T, typename B, bool kShort = false>
struct BiasActK {
  using Plain = std::conditional_t<A == math::Act::kSilu, Throughput<1, 512, false>,
                                   Throughput<2, 128, false, 5>>;
  using P = std::conditional_t<std::is_void_v<B>, Plain, DefaultThroughput>;
  using FastGelu = Throughput<2, 128, true, 5>;
  using FastSilu = Throughput<1, 256, true>;
  template <int V, int U, Form F>
  struct K {
    static constexpr auto kernel = BiasActKernel<A, T, B, V, U, F, kShort>;
  };
};
template <typename T>
struct MulAddK {
  using P = Throughput<1, 512, false>;
  template <int V, int U, Form F>
  struct K {
    static constexpr auto kernel = MulAddKernel<T, V, U, F>;
  };
};

}  // namespace elementwise

/// out[r, :] = act(input[r, :d]) * input[r, d:2d] for input [rows, 2d], out [rows, d].
template <math::Act A, typename T>
cudaError_t ActAndMul(T* out, const T* input, int64_t rows, int64_t d, RowStride out_stride,
                      RowStride in_stride, cudaStream_t stream) {
  using namespace elementwise;
  if (rows <= 0 || d <= 0) return cudaSuccess;
  using K = ActAndMulK<A, T>;
  DeviceProps props;
  XK_CUDA_TRY(GetDeviceProps(&props));
  const bool plain = Plain({out_stride, in_stride});
  const bool vec = CanVectorize<T>(d, {{out, out_stride}, {input, in_stride}});
  const auto launch = [&](auto shape) {
    using P = decltype(shape);
    return vec ? LaunchTiled<vec16<T>(), P, K::template K>(rows, d, plain, stream, out, out_stride,
                                                            input, in_stride, rows, d)
               : LaunchTiled<1, P, K::template K>(rows, d, plain, stream, out, out_stride, input,
                                                  in_stride, rows, d);
  };
  return fast_memory(props) ? launch(typename K::PFast{}) : launch(typename K::P{});
}

/// out = act(input + bias) over [rows, cols]; bias: [cols] of T or float, or nullptr (B = void)
/// for the plain activation.
template <math::Act A, typename T, typename B = void>
cudaError_t BiasAct(T* out, const T* input, const B* bias, int64_t rows, int64_t cols,
                    RowStride out_stride, RowStride in_stride, cudaStream_t stream) {
  using namespace elementwise;
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  bool vec = CanVectorize<T>(cols, {{out, out_stride}, {input, in_stride}});
  if constexpr (!std::is_void_v<B>) vec = vec && is_aligned(bias, vec_align<B, vec16<T>()>());
  const bool plain = Plain({out_stride, in_stride});
  const auto launch = [&](auto k, auto shape) {
    using K = decltype(k);
    using P = decltype(shape);
    return vec ? LaunchTiled<vec16<T>(), P, K::template K>(rows, cols, plain, stream, out,
                                                            out_stride, input, in_stride, bias,
                                                            rows, cols)
               : LaunchTiled<1, P, K::template K>(rows, cols, plain, stream, out, out_stride,
                                                  input, in_stride, bias, rows, cols);
  };
  using K = BiasActK<A, T, B>;
  if constexpr (std::is_void_v<B> && (A == math::Act::kSilu ||
                                      (A == math::Act::kGelu && DTypeTraits<T>::kLowPrecision))) {
    DeviceProps props;
    XK_CUDA_TRY(GetDeviceProps(&props));
    if (fast_memory(props)) {
      if constexpr (A == math::Act::kSilu) return launch(K{}, typename K::FastSilu{});
      using KS = BiasActK<A, T, B, true>;
      return launch(KS{}, typename KS::FastGelu{});
    }
  }
  return launch(K{}, typename K::P{});
}

/// out = act(input) over [rows, cols].
template <math::Act A, typename T>
cudaError_t Activation(T* out, const T* input, int64_t rows, int64_t cols, RowStride out_stride,
                       RowStride in_stride, cudaStream_t stream) {
  return BiasAct<A, T, void>(out, input, nullptr, rows, cols, out_stride, in_stride, stream);
}

/// out = a * b + c over [rows, cols] (fused multiply-add in float, rounded once).
template <typename T>
cudaError_t MulAdd(T* out, const T* a, const T* b, const T* c, int64_t rows, int64_t cols,
                   RowStride out_stride, RowStride a_stride, RowStride b_stride,
                   RowStride c_stride, cudaStream_t stream) {
  using namespace elementwise;
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  using K = MulAddK<T>;
  using P = typename K::P;
  const bool plain = Plain({out_stride, a_stride, b_stride, c_stride});
  return CanVectorize<T>(cols, {{out, out_stride}, {a, a_stride}, {b, b_stride}, {c, c_stride}})
             ? LaunchTiled<vec16<T>(), P, K::template K>(rows, cols, plain, stream, out,
                                                          out_stride, a, a_stride, b, b_stride, c,
                                                          c_stride, rows, cols)
             : LaunchTiled<1, P, K::template K>(rows, cols, plain, stream, out, out_stride, a,
                                                a_stride, b, b_stride, c, c_stride, rows, cols);
}

}  // namespace xkernels

#endif  // XKERNELS_ACTIVATION_H_
