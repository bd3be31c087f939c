// Host RoPE: each token's cos and sin once (double angles, rounded to float), then every head of q
// and k read into floats, normalised (QK norm), rotated and stored; rows are read whole before
// they are written, so outputs may alias inputs.
#include "host/rope.h"

#include <cmath>
#include <vector>

#include "host/convert.h"

namespace xkernels::host {
namespace {

// One head: x [head_dim] in floats -> out, rotated by (c, s) [half]; with w, normalised first.
void RopeHead(float* __restrict x, const float* __restrict c, const float* __restrict s,
              const float* w, int head_dim, int half, bool interleaved, float eps) {
  if (w != nullptr) {
    float ss = 0.f;
    for (int i = 0; i < head_dim; ++i) ss += x[i] * x[i];
    const float inv = 1.f / std::sqrt(ss / static_cast<float>(head_dim) + eps);
    for (int i = 0; i < head_dim; ++i) x[i] = x[i] * inv * w[i];
  }
  for (int i = 0; i < half; ++i) {
    const int ia = interleaved ? 2 * i : i, ib = interleaved ? 2 * i + 1 : i + half;
    const float a = x[ia], b = x[ib];
    x[ia] = a * c[i] - b * s[i];
    x[ib] = b * c[i] + a * s[i];
  }
}

}  // namespace

XK_HOST_CLONES
void Rope(const rope::Problem& p, DType dtype, DType weight_dtype) {
  const int d = p.head_dim, half = p.rope.rotary_dim / 2;
  const size_t es = DTypeSize(dtype);
  std::vector<double> inv_freq(half);
  for (int i = 0; i < half; ++i) inv_freq[i] = rope::InvFreq(p.rope, i);
  std::vector<float> c(half), s(half), x(d), wq, wk;
  if (p.q_weight != nullptr) {
    wq.resize(d);
    wk.resize(d);
    LoadFloats(static_cast<const char*>(p.q_weight), weight_dtype, d, wq.data());
    LoadFloats(static_cast<const char*>(p.k_weight), weight_dtype, d, wk.data());
  }
  struct Side {
    const void* in;
    void* out;
    RowStride rows, out_rows;
    int64_t stride_h, out_stride_h;
    int heads;
    const float* w;
  };
  const Side sides[2] = {{p.q, p.q_out, p.q_rows, p.q_out_rows, p.q_stride_h, p.q_out_stride_h,
                          p.num_qo_heads, wq.empty() ? nullptr : wq.data()},
                         {p.k, p.k_out, p.k_rows, p.k_out_rows, p.k_stride_h, p.k_out_stride_h,
                          p.num_kv_heads, wk.empty() ? nullptr : wk.data()}};
  for (int64_t t = 0; t < p.tokens; ++t) {
    const double pos = static_cast<double>(p.positions[p.pos_rows.offset(t)]);
    for (int i = 0; i < half; ++i) {
      const double a = pos * inv_freq[i];
      c[i] = static_cast<float>(std::cos(a));
      s[i] = static_cast<float>(std::sin(a));
    }
    for (const Side& sd : sides) {
      for (int h = 0; h < sd.heads; ++h) {
        const int64_t in_off = sd.rows.offset(t) + h * sd.stride_h;
        const int64_t out_off = sd.out_rows.offset(t) + h * sd.out_stride_h;
        LoadFloats(static_cast<const char*>(sd.in) + in_off * static_cast<int64_t>(es), dtype, d,
                   x.data());
        RopeHead(x.data(), c.data(), s.data(), sd.w, d, half, p.rope.interleaved, p.eps);
        const float* xv = x.data();
        StoreFloats(static_cast<char*>(sd.out) + out_off * static_cast<int64_t>(es), dtype, d,
                    [xv](int64_t i) { return xv[i]; });
      }
    }
  }
}

}  // namespace xkernels::host
