// Host attention and attention-state merging (attention/params.h): plain C++, float arithmetic.
//
// Attention runs over work items of one request, one kv head and up to kChunkRows query rows (a
// chunk of tokens x the kv head's query heads). An item walks its keys in tiles of kTile, as the
// kernels do: each tile's keys and values are converted to float once, and then serve every row
// of the item, which keeps an online softmax (running max, sum and unnormalised output). Keys go
// in blocks of W keys, dimension-major (k[block][d][lane]), values key-major (v[key][d]), W the
// floats of the CPU's vector registers (16 AVX-512, 8 AVX2, 4 SSE or NEON). Rows go R at a time,
// and both products keep R x NB vectors of W partial results in registers: S = Q K^T as one vector
// of W scores per (row, key block), each key block loaded serving R rows; O += P V as one vector of
// W output dims per (row, dim block), each value vector serving R rows. Every score and output is
// one sum in d or key order whatever W, R and NB: the same bits on every CPU. Items of at most
// kDotRows rows (decode: one token's query heads) take their scores as dot products over keys as
// stored (DotScores: kLanes partial sums, the same bits at every W), which saves kb's transposed
// copy: decode of one token over 300 keys, 8/2, 0.12 -> 0.07-0.085 ms; over 4096, 32/8, 4.1 -> 2.5.
// 2-CPU Xeon KVM guest, bf16, 2 threads, ms, float-array loops before -> vectors (AVX-512 / AVX2 /
// SSE2 builds): s 1024, GQA 8/2, d 128, causal 336 -> 23 / 35 / 131 (torch's CPU SDPA, oneDNN on
// AMX: 4-7); s 256, 4/2, d 64 12.5 -> 0.9 / 1.9 / 6.7; one token over 4096 keys, GQA 32/8, 13.2
// -> 2.7 / 4.1 / 6.7. Calls spread their items over the host pool (parallel.h); an item's
// arithmetic does not depend on the thread that runs it. Chunks bound an item's buffers to the
// cache, and convert each key once per chunk (next to the chunk's 4 * kChunkRows * head_dim flops
// per key).
#include "host/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "host/convert.h"
#include "host/parallel.h"
#include "host/vectors.h"
#include "host/vmath.h"

namespace xkernels::host {
namespace {

using attention::KvMode;
using attention::MergeParams;
using attention::Params;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr int64_t kElem = 2;         // bytes of an element of q, k, v and out (16-bit floats)
constexpr int64_t kRows = 4;         // query rows per product pass
constexpr int64_t kChunkRows = 256;  // query rows per work item, to share out long prefills
constexpr int64_t kDotRows = 8;      // items of at most this many rows take DotScores
constexpr int64_t kTile = 64;        // keys converted at a time: a tile stays in cache

int64_t RoundUp(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

struct Range {  // keys [lo, hi); empty when hi <= lo
  int64_t lo, hi;
};

struct Request {
  int64_t q_begin, q_len, kv_len;
};

Request RequestOf(const Params& p, int64_t b) {
  Request r{0, p.q_len, p.kv_len};
  if (p.qo_indptr != nullptr) r.q_begin = p.qo_indptr[b], r.q_len = p.qo_indptr[b + 1] - r.q_begin;
  if (p.kv_mode == KvMode::kRagged) r.kv_len = p.kv_indptr[b + 1] - p.kv_indptr[b];
  if (p.kv_mode == KvMode::kPaged) {
    const int64_t pages = p.kv_indptr[b + 1] - p.kv_indptr[b];
    r.kv_len = pages > 0 ? (pages - 1) * p.page_size + p.kv_last_page_len[b] : 0;
  }
  return r;
}

// The keys that query token t sees (causal masks align to the bottom right).
Range Visible(const Params& p, const Request& r, int64_t t) {
  const int64_t diag = t + r.kv_len - r.q_len;
  return {p.window_left >= 0 ? std::max<int64_t>(0, diag - p.window_left) : 0,
          p.causal ? std::min(r.kv_len, diag + 1) : r.kv_len};
}

// Element offset of token t of request b, kv head h, in a key or value tensor of these strides.
int64_t KvOffset(const Params& p, int64_t b, int64_t t, int64_t h, int64_t sb, int64_t st,
                 int64_t sh) {
  switch (p.kv_mode) {
    case KvMode::kDense:
      return b * sb + t * st + h * sh;
    case KvMode::kRagged:
      return (p.kv_indptr[b] + t) * st + h * sh;
    case KvMode::kPaged:
      return int64_t{p.kv_indices[p.kv_indptr[b] + t / p.page_size]} * sb + (t % p.page_size) * st +
             h * sh;
  }
  return 0;
}

// Query tokens [t0, t1) of request b, with the query heads of kv head hk.
struct Item {
  int64_t b, hk, t0, t1;
};

// One worker's float buffers.
struct Scratch {
  std::vector<float> k, v, s, row;  // one key tile
  std::vector<float> q, o, m, l;    // the item's rows
  std::vector<Range> rng;
};

// s[r][(b0 + b) * W ..] = sm_scale * (q[r] . k) for R rows and key blocks [b0, b0 + NB) of
// kb[kTile / W][d][W]: every key block loaded serves R rows and every q[r][d] NB blocks; each
// score summed over d in order.
template <int64_t W, int64_t R, int64_t NB>
inline void Scores(const float* __restrict q, int64_t d_len, const float* __restrict kb, int64_t b0,
                   float sm_scale, float* __restrict s) {
  using V = Vec<W>;
  V acc[R][NB] = {};
  const float* __restrict k = kb + b0 * d_len * W;
  for (int64_t d = 0; d < d_len; ++d) {
    V kv[NB];
    for (int64_t b = 0; b < NB; ++b) kv[b] = LoadV<W>(k + (b * d_len + d) * W);
    for (int64_t r = 0; r < R; ++r) {
      const V qd = V{} + q[r * d_len + d];
      for (int64_t b = 0; b < NB; ++b) acc[r][b] += qd * kv[b];
    }
  }
  for (int64_t r = 0; r < R; ++r)
    for (int64_t b = 0; b < NB; ++b) StoreV(s + r * kTile + (b0 + b) * W, acc[r][b] * sm_scale);
}

// The same scores for R rows over keys [lo, hi) of kr[kTile][d] (keys as stored, for items of
// few rows, which would spend more on kb's transposed copy than on their products): per (row, key)
// kLanes partial sums over d (lane j takes d = j mod kLanes) in kLanes / W vectors, added pairwise:
// the same bits at every W. d_len a multiple of kLanes.
template <int64_t W, int64_t R>
inline void DotScores(const float* __restrict q, int64_t d_len, const float* __restrict kr,
                      int64_t lo, int64_t hi, float sm_scale, float* __restrict s) {
  constexpr int64_t H = kLanes / W;
  for (int64_t t = lo; t < hi; ++t) {
    Vec<W> acc[R][H] = {};
    const float* __restrict k = kr + t * d_len;
    for (int64_t c = 0; c < d_len; c += kLanes) {
      for (int64_t h = 0; h < H; ++h) {
        const Vec<W> kv = LoadV<W>(k + c + h * W);
        for (int64_t r = 0; r < R; ++r) acc[r][h] += LoadV<W>(q + r * d_len + c + h * W) * kv;
      }
    }
    for (int64_t r = 0; r < R; ++r) {
      float part[kLanes];
      for (int64_t h = 0; h < H; ++h) StoreV(part + h * W, acc[r][h]);
      s[r * kTile + t] = AddLanes(part) * sm_scale;
    }
  }
}

// o[r][(c0 + c) * W ..] = o * scale[r] + the sum over keys [lo, hi) of s[r][t] v[t], for R rows
// and output blocks [c0, c0 + NC) of W dims of vb[kTile][dp]; each sum in key order.
template <int64_t W, int64_t R, int64_t NC>
inline void AddValues(const float* __restrict s, int64_t lo, int64_t hi, const float* __restrict vb,
                      int64_t dp, int64_t c0, const float* scale, float* __restrict o) {
  using V = Vec<W>;
  V acc[R][NC];
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < NC; ++c) acc[r][c] = LoadV<W>(o + r * dp + (c0 + c) * W) * scale[r];
  for (int64_t t = lo; t < hi; ++t) {
    V vv[NC];
    for (int64_t c = 0; c < NC; ++c) vv[c] = LoadV<W>(vb + t * dp + (c0 + c) * W);
    for (int64_t r = 0; r < R; ++r) {
      const V w = V{} + s[r * kTile + t];
      for (int64_t c = 0; c < NC; ++c) acc[r][c] += w * vv[c];
    }
  }
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < NC; ++c) StoreV(o + r * dp + (c0 + c) * W, acc[r][c]);
}

// One key tile for R query rows q[R][d]: keys own[r] (tile-relative) of row r, from
// kb[kTile / W][d][W] (kDot: kr[kTile][d]) and vb[kTile][dp], NB blocks of W keys or output dims
// per product pass.
// Updates each row's online softmax: m the max score so far, l the sum of exp(score - m), o[dp]
// the sum of exp(score - m) v. (Each score and output is one sum in key or d order whatever R and
// NB: the same bits from every blocking.)
template <int64_t W, int64_t R, int64_t NB, bool kDot>
void TileRows(const Params& p, const float* __restrict q, const Range* own,
              const float* __restrict kb, const float* __restrict vb, float* __restrict s,
              float* __restrict o, float* __restrict m, float* __restrict l) {
  const int64_t d_len = p.head_dim, dp = RoundUp(d_len, kLanes);
  Range all{kTile, 0};
  for (int64_t r = 0; r < R; ++r) {
    if (own[r].lo < own[r].hi) all = {std::min(all.lo, own[r].lo), std::max(all.hi, own[r].hi)};
  }
  if (all.hi <= all.lo) return;
  const int64_t lo = all.lo, hi = all.hi;
  // s = q . k * sm_scale: by dot products (kDot), or over whole key blocks, NB at a time
  if constexpr (kDot) {
    DotScores<W, R>(q, d_len, kb, lo, hi, p.sm_scale, s);
  } else {
    for (int64_t b0 = lo / W, b1 = (hi + W - 1) / W; b0 < b1; b0 += NB) {
      switch (std::min(NB, b1 - b0)) {
        case 1:
          Scores<W, R, 1>(q, d_len, kb, b0, p.sm_scale, s);
          break;
        case 2:
          Scores<W, R, 2 <= NB ? 2 : 1>(q, d_len, kb, b0, p.sm_scale, s);
          break;
        case 3:
          Scores<W, R, 3 <= NB ? 3 : 1>(q, d_len, kb, b0, p.sm_scale, s);
          break;
        default:
          Scores<W, R, NB>(q, d_len, kb, b0, p.sm_scale, s);
          break;
      }
    }
  }
  const float cap = p.logits_soft_cap;
  float scale[R];                    // of the row's earlier o and l, to its new max
  for (int64_t r = 0; r < R; ++r) {  // s <- exp(s - max) over the row's keys, 0 over the others
    float* __restrict x = s + r * kTile;
    const Range mine = own[r].lo < own[r].hi ? own[r] : Range{lo, lo};
    const int64_t a = mine.lo, e = mine.hi;
    std::fill(x + lo, x + a, 0.f);
    std::fill(x + e, x + hi, 0.f);
    scale[r] = 1.f;
    if (a == e) continue;
    if (cap > 0.f)
      for (int64_t i = a; i < e; ++i) x[i] = cap * std::tanh(x[i] / cap);
    float mx = m[r];
    for (int64_t i = a; i < e; ++i) mx = std::max(mx, x[i]);
    for (int64_t i = a; i < e; ++i) x[i] = vmath::Exp(x[i] - mx);
    float part[kLanes] = {};  // lane-wise partial sums, added pairwise
    int64_t i = a;
    for (; i + kLanes <= e; i += kLanes)
      for (int64_t j = 0; j < kLanes; ++j) part[j] += x[i + j];
    for (int64_t j = 0; i < e; ++i, ++j) part[j] += x[i];
    scale[r] = vmath::Exp(m[r] - mx);  // 0 for the row's first keys (m = -inf)
    l[r] = l[r] * scale[r] + AddLanes(part), m[r] = mx;
  }
  // o = o * scale + sum over the tile's keys of exp(s - max) v
  const int64_t blocks = dp / W;
  int64_t c0 = 0;
  for (; c0 + NB <= blocks; c0 += NB) AddValues<W, R, NB>(s, lo, hi, vb, dp, c0, scale, o);
  for (; c0 < blocks; ++c0) AddValues<W, R, 1>(s, lo, hi, vb, dp, c0, scale, o);
}

// Starts loading `bytes` from p into the cache: one kv head's keys are rows far apart, which the
// hardware prefetchers follow late or not at all.
inline void Prefetch(const char* p, int64_t bytes) {
#if defined(__GNUC__)
  for (int64_t c = 0; c < bytes; c += 64) __builtin_prefetch(p + c);
#endif
}

// Converts keys and values [t0, t0 + n) of request b, kv head h to kb and vb (TileRows' layouts
// for blocks of w keys; `dot`: kb as kr, the keys as stored), with zeros for the keys of the last
// block of kLanes past n (their scores are ignored, their weights 0).
void LoadTile(const Params& p, DType dt, int64_t b, int64_t h, int64_t t0, int64_t n, int64_t w,
              bool dot, float* __restrict kb, float* __restrict vb, float* __restrict row) {
  constexpr int64_t kAhead = 4;  // keys prefetched ahead
  const int64_t d_len = p.head_dim, dp = RoundUp(d_len, kLanes);
  auto key = [&](int64_t t) {
    return static_cast<const char*>(p.k) +
           kElem * KvOffset(p, b, t, h, p.k_stride_b, p.k_stride_t, p.k_stride_h);
  };
  auto value = [&](int64_t t) {
    return static_cast<const char*>(p.v) +
           kElem * KvOffset(p, b, t, h, p.v_stride_b, p.v_stride_t, p.v_stride_h);
  };
  std::fill(row, row + dp, 0.f);  // zero past head_dim
  for (int64_t i = 0; i < RoundUp(n, kLanes); ++i) {
    const int64_t blk = i / w, j = i % w;
    if (i + kAhead < n) {
      Prefetch(key(t0 + i + kAhead), kElem * d_len);
      Prefetch(value(t0 + i + kAhead), kElem * d_len);
    }
    if (i < n) {
      LoadFloats(key(t0 + i), dt, d_len, row);
    } else {
      std::fill(row, row + d_len, 0.f);
    }
    if (dot) {
      std::copy(row, row + d_len, kb + i * d_len);
    } else {
      for (int64_t d = 0; d < d_len; ++d) kb[(blk * d_len + d) * w + j] = row[d];
    }
    if (i < n) LoadFloats(value(t0 + i), dt, d_len, row);
    std::copy(row, row + dp, vb + i * dp);
  }
}

XK_HOST_CLONES
void RunItem(const Params& p, DType dt, const Item& it, Scratch& w) {
  const Request rq = RequestOf(p, it.b);
  const int64_t d_len = p.head_dim, dp = RoundUp(d_len, kLanes);
  const int64_t group = p.num_qo_heads / p.num_kv_heads;
  // Rows i = token-major, head-minor (the rows of one token share their keys).
  const int64_t rows = (it.t1 - it.t0) * group;
  const bool dot = rows <= kDotRows && d_len % kLanes == 0;  // few rows: DotScores
  auto token = [&](int64_t i) { return it.t0 + i / group; };
  auto head = [&](int64_t i) { return it.hk * group + i % group; };
  for (int64_t i = 0; i < rows; ++i) {
    w.rng[i] = Visible(p, rq, token(i));
    LoadFloats(static_cast<const char*>(p.q) +
                   kElem * (it.b * p.q_stride_b + (rq.q_begin + token(i)) * p.q_stride_t +
                            head(i) * p.q_stride_h),
               dt, d_len, w.q.data() + i * d_len);
  }
  std::fill(w.o.begin(), w.o.begin() + rows * dp, 0.f);
  std::fill(w.m.begin(), w.m.begin() + rows, -kInf);
  std::fill(w.l.begin(), w.l.begin() + rows, 0.f);
  // The keys the item's tokens see: both ends of the range move right with t.
  const int64_t base = Visible(p, rq, it.t0).lo;
  const int64_t end = Visible(p, rq, it.t1 - 1).hi;
  const int64_t lanes = VectorLanes();
  for (int64_t t0 = base; t0 < end; t0 += kTile) {
    const int64_t n = std::min(kTile, end - t0);
    LoadTile(p, dt, it.b, it.hk, t0, n, lanes, dot, w.k.data(), w.v.data(), w.row.data());
    // rows R at a time (the rest one by one), R x NB vectors of W floats of partial results
    auto tile_rows = [&](auto w_, auto r_, auto nb_, auto dot_) {
      constexpr int64_t W = decltype(w_)::value, R = decltype(r_)::value;
      constexpr int64_t NB = decltype(nb_)::value;
      constexpr bool kDot = decltype(dot_)::value;
      for (int64_t i0 = 0; i0 < rows; i0 += R) {
        const int64_t nr = std::min(R, rows - i0);
        Range own[R];
        for (int64_t r = 0; r < nr; ++r) {
          own[r] = {std::max(w.rng[i0 + r].lo, t0) - t0, std::min(w.rng[i0 + r].hi, t0 + n) - t0};
        }
        float* q = w.q.data() + i0 * d_len;
        float* o = w.o.data() + i0 * dp;
        if (nr == R) {
          TileRows<W, R, NB, kDot>(p, q, own, w.k.data(), w.v.data(), w.s.data(), o, &w.m[i0],
                                   &w.l[i0]);
        } else {
          for (int64_t r = 0; r < nr; ++r)
            TileRows<W, 1, NB, kDot>(p, q + r * d_len, own + r, w.k.data(), w.v.data(), w.s.data(),
                                     o + r * dp, &w.m[i0 + r], &w.l[i0 + r]);
        }
      }
    };
    // registers: 32 of 16 floats (AVX-512): 4 x 4 sums, 4 loads and a broadcast; 16 of 8 (AVX2)
    // or of 4 (SSE; NEON has 32): 4 x 2 sums
    using I2 = std::integral_constant<int64_t, 2>;
    using I4 = std::integral_constant<int64_t, 4>;
    auto widths = [&](auto dot_rows) {
      if (lanes == 16) {
        tile_rows(std::integral_constant<int64_t, 16>{}, I4{}, I4{}, dot_rows);
      } else if (lanes == 8) {
        tile_rows(std::integral_constant<int64_t, 8>{}, I4{}, I2{}, dot_rows);
      } else {
        tile_rows(I4{}, I4{}, I2{}, dot_rows);
      }
    };
    if (dot) {
      widths(std::true_type{});
    } else {
      widths(std::false_type{});
    }
  }
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t t = rq.q_begin + token(i), h = head(i);
    const float* __restrict o = w.o.data() + i * dp;
    const float l = w.l[i], inv = l > 0.f ? 1.f / l : 0.f;
    StoreFloats(static_cast<char*>(p.out) +
                    kElem * (it.b * p.out_stride_b + t * p.out_stride_t + h * p.out_stride_h),
                dt, d_len, [o, inv](int64_t d) { return o[d] * inv; });
    if (p.lse != nullptr) {
      p.lse[it.b * p.lse_stride_b + t * p.lse_stride_t + h] =
          l > 0.f ? w.m[i] + std::log(l) : -kInf;
    }
  }
}

}  // namespace

void Attention(const Params& p, DType dtype) {
  if (p.num_kv_heads <= 0 || p.num_qo_heads <= 0) return;
  const int64_t group = p.num_qo_heads / p.num_kv_heads;
  const int64_t chunk = std::max<int64_t>(1, kChunkRows / group);  // tokens per item
  std::vector<Item> items;
  double work = 0;
  for (int64_t b = 0; b < p.batch; ++b) {
    const Request rq = RequestOf(p, b);
    if (rq.q_len <= 0) continue;
    work += static_cast<double>(rq.q_len) * p.num_qo_heads * rq.kv_len * p.head_dim * 2;
    for (int64_t hk = 0; hk < p.num_kv_heads; ++hk)
      for (int64_t t0 = 0; t0 < rq.q_len; t0 += chunk)
        items.push_back({b, hk, t0, std::min(rq.q_len, t0 + chunk)});
  }
  if (items.empty()) return;
  const int64_t d_len = p.head_dim, dp = RoundUp(d_len, kLanes);
  const int64_t rows = chunk * group;
  const int64_t n = static_cast<int64_t>(items.size());
  // the pool's threads (parallel.h), each with its own buffers, kept between calls
  ParallelFor(n, static_cast<int64_t>(work / n / kMacsPerElement), [&](int64_t i0, int64_t i1) {
    thread_local Scratch w;
    const auto grow = [](auto& v, int64_t size) {
      if (static_cast<int64_t>(v.size()) < size) v.resize(static_cast<size_t>(size));
    };
    grow(w.k, kTile * d_len), grow(w.v, kTile * dp), grow(w.s, kRows * kTile), grow(w.row, dp);
    grow(w.q, rows * d_len), grow(w.o, rows * dp), grow(w.m, rows), grow(w.l, rows);
    grow(w.rng, rows);
    for (int64_t i = i0; i < i1; ++i) RunItem(p, dtype, items[i], w);
  });
}

XK_HOST_CLONES
void MergeStates(const MergeParams& p, DType v_dtype, DType out_dtype) {
  const int64_t d_len = p.head_dim, states = p.num_states;
  const int64_t n_main = p.v1 != nullptr ? states - 1 : states;
  const float to_ln = p.log2_in ? 0.69314718055994531f : 1.f;  // ln(2): log2 -> natural log
  const int64_t v_size = DTypeSize(v_dtype), o_size = DTypeSize(out_dtype);
  std::vector<float> acc(d_len), x(d_len), wt(std::max<int64_t>(states, 1));
  int64_t r0 = 0, r1 = p.rows;
  if (p.valid_indptr != nullptr) {  // the other rows were not computed: leave their outputs
    r0 = std::max<int64_t>(r0, p.valid_indptr[0]);
    r1 = std::min<int64_t>(r1, p.valid_indptr[p.valid_batch]);
  }
  for (int64_t r = r0; r < r1; ++r) {
    for (int64_t h = 0; h < p.heads; ++h) {
      const float* s = p.s + p.s_rows.offset(r) + h * p.s_stride_h;
      float mx = -kInf;
      for (int64_t i = 0; i < states; ++i) {
        wt[i] = (i < n_main ? s[i * p.s_stride_k] : p.s1[p.s1_rows.offset(r) + h * p.s1_stride_h]) *
                to_ln;
        mx = std::max(mx, wt[i]);
      }
      float sum = 0.f;
      if (mx != -kInf)
        for (int64_t i = 0; i < states; ++i) sum += (wt[i] = std::exp(wt[i] - mx));
      const float inv = sum > 0.f ? 1.f / sum : 0.f;
      float* __restrict a = acc.data();
      std::fill(a, a + d_len, 0.f);
      for (int64_t i = 0; sum > 0.f && i < states; ++i) {
        if (wt[i] == 0.f) continue;  // an empty state's v may be anything
        const char* src =
            i < n_main ? static_cast<const char*>(p.v) +
                             (p.v_rows.offset(r) + i * p.v_stride_k + h * p.v_stride_h) * v_size
                       : static_cast<const char*>(p.v1) +
                             (p.v1_rows.offset(r) + h * p.v1_stride_h) * v_size;
        float* __restrict xv = x.data();
        LoadFloats(src, v_dtype, d_len, xv);
        const float wi = wt[i] * inv;
        int64_t d = 0;
        for (; d + kLanes <= d_len; d += kLanes)
          for (int64_t j = 0; j < kLanes; ++j) a[d + j] += wi * xv[d + j];
        for (; d < d_len; ++d) a[d] += wi * xv[d];
      }
      StoreFloats(static_cast<char*>(p.out) + (p.out_rows.offset(r) + h * p.out_stride_h) * o_size,
                  out_dtype, d_len, [a](int64_t d) { return a[d]; });
      if (p.lse != nullptr) {
        p.lse[p.lse_rows.offset(r) + h * p.lse_stride_h] = sum > 0.f ? mx + std::log(sum) : -kInf;
      }
    }
  }
}

}  // namespace xkernels::host
