// RoPE's problem description and frequencies. Plain C++ (no CUDA): the CUDA launcher (rope.h),
// the host implementation and the bindings share it.
#ifndef XKERNELS_ROPE_PARAMS_H_
#define XKERNELS_ROPE_PARAMS_H_

#include <cmath>
#include <cstdint>

#include "xkernels/rows.h"

namespace xkernels::rope {

// The most frequencies a head has: head_dim up to 512.
constexpr int kMaxHeadDim = 512;
constexpr int kMaxFreqs = kMaxHeadDim / 2;

struct Config {
  double theta = 10000.0;
  bool interleaved = false;  // pairs (2i, 2i + 1) (GPT-J); else (i, i + rotary_dim / 2) (NeoX)
  int rotary_dim = 0;        // even, 0 < rotary_dim <= head_dim (the caller resolves 0)
  // Llama 3's scaling of the frequencies (Hugging Face's _compute_llama3_parameters); none when
  // rope_scale == 1.
  double rope_scale = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  double original_max_position = 8192.0;
};

// Frequency i (0 <= i < rotary_dim / 2) in radians per position: theta^(-2i / rotary_dim),
// scaled as Llama 3 does when rope_scale != 1. In double: callers round it once.
inline double InvFreq(const Config& c, int i) {
  const double inv = std::pow(c.theta, -2.0 * i / c.rotary_dim);
  if (c.rope_scale == 1.0) return inv;
  constexpr double kTwoPi = 6.283185307179586476925286766559;
  const double wavelen = kTwoPi / inv;
  const double low_wavelen = c.original_max_position / c.low_freq_factor;
  const double high_wavelen = c.original_max_position / c.high_freq_factor;
  if (wavelen > low_wavelen) return inv / c.rope_scale;  // low frequencies: scaled
  if (wavelen < high_wavelen) return inv;                // high frequencies: kept
  const double smooth = (c.original_max_position / wavelen - c.low_freq_factor) /
                        (c.high_freq_factor - c.low_freq_factor);
  return (1.0 - smooth) * inv / c.rope_scale + smooth * inv;
}

// q [tokens, num_qo_heads, head_dim] and k [tokens, num_kv_heads, head_dim] (the tokens being
// any leading dimensions, addressed by RowStrides; heads by a stride; head_dim contiguous), and
// their outputs (the inputs themselves in place). One int32 position per token. With q_weight and
// k_weight ([head_dim], contiguous, of T or float), each head is first RMS-normalised:
// x / sqrt(mean(x^2) + eps) * weight (Qwen3's and Gemma 3's QK norm).
struct Problem {
  void* q_out = nullptr;
  void* k_out = nullptr;
  const void* q = nullptr;
  const void* k = nullptr;
  const int32_t* positions = nullptr;
  const void* q_weight = nullptr;  // both or neither
  const void* k_weight = nullptr;
  int64_t tokens = 0;
  int num_qo_heads = 0, num_kv_heads = 0, head_dim = 0;
  RowStride q_rows, k_rows, q_out_rows, k_out_rows, pos_rows;  // per token, in elements
  int64_t q_stride_h = 0, k_stride_h = 0, q_out_stride_h = 0, k_out_stride_h = 0;
  float eps = 1e-6f;
  Config rope;
};

}  // namespace xkernels::rope

#endif  // XKERNELS_ROPE_PARAMS_H_
