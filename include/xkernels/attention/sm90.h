// Attention prefill for sm_90a, the Hopper path: TMA loads into 128-byte-swizzled shared memory,
// S = Q K^T and O += P V on warpgroup MMAs (wgmma) with the accumulators in registers, and warp
// specialisation.
//
// A block takes 128 query tokens of one query head of one request (no GQA packing: kv head
// h / group, whose tiles the other heads of the group read again from L2).
// - Warpgroup 0 is the producer: one thread loads Q once, then keeps a ring of kStages stages of
//   K and V (128 keys each) full with TMA, K and V on barriers of their own so that S = Q K^T can
//   start before V lands. The tensors are 4-D tensor maps [batch, tokens, heads, head_dim], boxes
//   of 128 tokens x 64 head dims (one 128-byte swizzled row per token): strided Q/K/V (views of a
//   packed QKV) need no copy, and tokens past a tensor's end arrive as zeros.
// - Warpgroups 1 and 2 own 64 query rows each. Per key tile: S (64 x 128, fp32, registers) =
//   Q K^T over head_dim / 16 wgmmas with both operands in shared memory; soft cap and mask; the
//   online softmax of prefill.h (running max and sum, O rescaled when a max moved, exponentials
//   in base 2); P to 16-bit in registers, already in the A-fragment layout of a register-sourced
//   wgmma; O (64 x head_dim) += P V over 128 / 16 wgmmas with V read N-major (transposed) from its
//   swizzled tile; the stage released to the producer.
// - Causal and windowed tiles past the diagonal or before the window are skipped, not masked.
// What the call computes: params.h. The dispatcher (attention.h) sends here the prefill shapes
// this path covers (head_dim 64 or 128, dense or ragged keys, no split) on sm_90 devices.
#ifndef XKERNELS_ATTENTION_SM90_H_
#define XKERNELS_ATTENTION_SM90_H_

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "xkernels/attention/params.h"
#include "xkernels/attention/prefill.h"
#include "xkernels/common.h"
#include "xkernels/math.h"
#include "xkernels/mma.h"
#include "xkernels/tma.h"
#include "xkernels/wgmma.h"

namespace xkernels::attention {

template <int kHeadDim_, int kStages_, bool kOverlap_>
struct Sm90AttnTile {
  static constexpr int kHeadDim = kHeadDim_, kStages = kStages_;
  // v2: the next tile's S = Q K^T and this tile's P V in flight together (see the kernel)
  static constexpr bool kOverlap = kOverlap_;
  static constexpr int kRows = 128;                  // query tokens of a block: 64 per consumer
  static constexpr int kKeys = 128;                  // keys per stage
  static constexpr int kThreads = 384;               // producer + two consumer warpgroups
  static constexpr int kChunks = kHeadDim / 64;      // 128-byte column chunks of a row
  static constexpr int kQChunkBytes = kRows * 128;   // (kRows, 64) of Q
  static constexpr int kKvChunkBytes = kKeys * 128;  // (kKeys, 64) of K or V
  static constexpr int kQBytes = kChunks * kQChunkBytes;
  static constexpr int kKvBytes = kChunks * kKvChunkBytes;  // K (or V) of one stage
  // barriers: Q, K full x kStages, V full x kStages, empty x kStages
  static constexpr int kBarBytes = 8 * (1 + 3 * kStages);
  // slack to align to 1024 (the swizzle's period), Q, the stages, the barriers
  static constexpr int kSmemBytes = 1024 + kQBytes + 2 * kStages * kKvBytes + kBarBytes;
  static_assert(kHeadDim == 64 || kHeadDim == 128, "head_dim 64 or 128");
};

// The versions the dispatcher takes, measured on an H100 (bf16, benchmarks/attention_probe.cu,
// TFLOP/s non-causal / causal at s 8192, 32 heads of 128 | s 4096, GQA 32/8 | s 8192, 16 heads of
// 64): v1, 2 stages (4 at d 64): 580 / 565 | 496 / 483 | 432 / 416; v2, 2 stages: 450 / 446 |
// 477 / 447 | 394 / 379; v2, 3 stages (6 at d 64): 586 / 573 | 595 / 530 | 392 / 378. v2 needs
// the third stage (tile j + 1's K is read while tile j's V still is); at head_dim 64 the
// softmax is as long as the two products and the overlap does not pay.
template <int D>
using Sm90PrefillTile =
    std::conditional_t<D == 64, Sm90AttnTile<64, 4, false>, Sm90AttnTile<128, 3, true>>;

template <class Tl, typename T>
__global__ void __launch_bounds__(Tl::kThreads, 1)
    Sm90AttentionKernel(const __grid_constant__ CUtensorMap map_q,
                        const __grid_constant__ CUtensorMap map_k,
                        const __grid_constant__ CUtensorMap map_v,
                        const __grid_constant__ Params p) {
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __trap();  // wgmma and setmaxnreg exist on sm_90a only; the dispatcher never launches this
#else
  constexpr int kD = Tl::kHeadDim, kKeys = Tl::kKeys, kStages = Tl::kStages;
  constexpr int kChunks = Tl::kChunks;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  __shared__ int tile_of_block[2];
  const uint32_t s_base = (mma::smem_addr(smem_raw) + 1023) & ~1023u;
  const uint32_t s_q = s_base;  // chunk c: (kRows, 64) at s_q + c * kQChunkBytes
  auto s_k = [&](int st) { return s_base + Tl::kQBytes + st * 2 * Tl::kKvBytes; };
  auto s_v = [&](int st) { return s_k(st) + Tl::kKvBytes; };
  const uint32_t bar_q = s_base + Tl::kQBytes + 2 * kStages * Tl::kKvBytes;
  auto bar_k = [&](int st) { return bar_q + 8 * (1 + st); };
  auto bar_v = [&](int st) { return bar_q + 8 * (1 + kStages + st); };
  auto bar_empty = [&](int st) { return bar_q + 8 * (1 + 2 * kStages + st); };

  const int h = static_cast<int>(blockIdx.x);  // query head
  const int group = p.num_qo_heads / p.num_kv_heads;
  const int kv_head = h / group;
  const int wg = static_cast<int>(threadIdx.x) / 128;

  if (threadIdx.x == 0) {
    tma::prefetch_map(&map_q);
    tma::prefetch_map(&map_k);
    tma::prefetch_map(&map_v);
    tma::mbar_init(bar_q, 1);
    for (int s = 0; s < kStages; ++s) {
      tma::mbar_init(bar_k(s), 1);  // the producer's expect_tx
      tma::mbar_init(bar_v(s), 1);
      tma::mbar_init(bar_empty(s), 8);  // one arrival per consumer warp
    }
    tma::mbar_fence_init();
  }
  __syncthreads();
  pdl_wait();  // everything below may read what the previous kernel wrote

  // ---- which request and query tile (the last tiles of a request first: under a causal mask
  // they have the most keys)
  int b, tile;
  if (p.qo_indptr == nullptr) {
    const int tiles = static_cast<int>((p.q_len + Tl::kRows - 1) / Tl::kRows);
    b = static_cast<int>(blockIdx.y) / tiles;
    tile = tiles - 1 - static_cast<int>(blockIdx.y) % tiles;
  } else if (!detail::find_ragged_tile<Tl::kRows>(p, 1, static_cast<int>(blockIdx.y), b, tile,
                                                  tile_of_block)) {
    return;
  }
  int32_t q_begin = 0, q_len = static_cast<int32_t>(p.q_len);
  if (p.qo_indptr != nullptr) {
    q_begin = detail::clamp32(p.qo_indptr[b], 0, p.total_q);
    q_len = detail::clamp32(p.qo_indptr[b + 1], q_begin, p.total_q) - q_begin;
  }
  const int32_t t_first = tile * Tl::kRows;  // first query token of the tile
  const int32_t t_last = min(q_len - 1, t_first + Tl::kRows - 1);
  int32_t kv_begin = 0, kv_len = static_cast<int32_t>(p.kv_len);
  if (p.kv_mode == KvMode::kRagged) {
    kv_begin = detail::clamp32(p.kv_indptr[b], 0, p.kv_len);
    kv_len = detail::clamp32(p.kv_indptr[b + 1], kv_begin, p.kv_len) - kv_begin;
  }
  // tensor-map coordinates of token 0: (token, batch)
  const int32_t q_tok0 = q_begin, q_b = p.qo_indptr == nullptr ? b : 0;
  const bool ragged_kv = p.kv_mode == KvMode::kRagged;
  const int32_t kv_tok0 = kv_begin, kv_b = ragged_kv ? 0 : b;

  // ---- the keys this block attends to, and the ones every row of it sees (no mask)
  const int32_t diag = kv_len - q_len;  // query t sees keys <= t + diag (causal)
  int32_t kv_lo = 0, kv_hi = kv_len;
  if (p.causal) kv_hi = max(0, min(kv_hi, t_last + diag + 1));
  if (p.window_left >= 0) kv_lo = max(0, t_first + diag - p.window_left);
  const int j_begin = kv_lo / kKeys;
  const int j_end = kv_hi > kv_lo ? (kv_hi + kKeys - 1) / kKeys : j_begin;
  int32_t full_lo = 0, full_hi = kv_len;
  if (p.causal) full_hi = max(0, min(full_hi, t_first + diag + 1));
  if (p.window_left >= 0) full_lo = t_last + diag - p.window_left;

  if (wg == 0) {  // ---- producer
    wgmma::setmaxnreg_dec<40>();
    if (threadIdx.x == 0) {
      tma::mbar_arrive_expect_tx(bar_q, Tl::kQBytes);
#pragma unroll
      for (int c = 0; c < kChunks; ++c) {
        tma::load_4d(s_q + c * Tl::kQChunkBytes, &map_q, bar_q, 64 * c, h, q_tok0 + t_first, q_b);
      }
      int st = 0;
      uint32_t phase = 0;
      for (int j = j_begin; j < j_end; ++j) {
        tma::mbar_wait(bar_empty(st), phase ^ 1);  // a fresh barrier passes parity 1
        const int32_t tok = kv_tok0 + j * kKeys;
        tma::mbar_arrive_expect_tx(bar_k(st), Tl::kKvBytes);
#pragma unroll
        for (int c = 0; c < kChunks; ++c) {
          tma::load_4d(s_k(st) + c * Tl::kKvChunkBytes, &map_k, bar_k(st), 64 * c, kv_head, tok,
                       kv_b);
        }
        tma::mbar_arrive_expect_tx(bar_v(st), Tl::kKvBytes);
#pragma unroll
        for (int c = 0; c < kChunks; ++c) {
          tma::load_4d(s_v(st) + c * Tl::kKvChunkBytes, &map_v, bar_v(st), 64 * c, kv_head, tok,
                       kv_b);
        }
        if (++st == kStages) st = 0, phase ^= 1;
      }
    }
    pdl_release();
    return;
  }

  // ---- consumers: warpgroup cw owns rows 64 cw .. 64 cw + 63 of the tile
  wgmma::setmaxnreg_inc<232>();
  const int cw = wg - 1;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int warp = (static_cast<int>(threadIdx.x) / 32) % 4;
  const int g = lane / 4, c = lane % 4;
  const int r_lo = 64 * cw + 16 * warp + g;  // this thread's rows: r_lo and r_lo + 8
  // accumulator element (n8 block j, e): row r_lo + 8 (e / 2), column 8 j + 2 c + e % 2
  float o[kD / 2];
#pragma unroll
  for (int i = 0; i < kD / 2; ++i) o[i] = 0.f;
  float m[2] = {-math::kInf, -math::kInf}, l[2] = {0.f, 0.f};
  const float cap = p.logits_soft_cap;
  const float scale2 = (cap > 0.f ? 1.f : p.sm_scale) * math::kLog2e;  // logits -> log2 units
  const float cap_in = cap > 0.f ? p.sm_scale / cap : 0.f;
  const uint32_t q_rows = s_q + cw * 64 * 128;  // this group's 64 rows in each chunk

  // S = Q K^T of tile j in stage st, issued (head_dim / 16 steps of 32 bytes along each
  // 128-byte row) and committed; the caller waits for it
  auto issue_s = [&](float (&s)[kKeys / 2], int st) {
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk) {
      const uint32_t off = 32 * (kk % 4);
      wgmma::mma<kKeys, T>(s, wgmma::desc_sw128(q_rows + (kk / 4) * Tl::kQChunkBytes + off),
                           wgmma::desc_sw128(s_k(st) + (kk / 4) * Tl::kKvChunkBytes + off),
                           kk > 0 ? 1u : 0u);
    }
    wgmma::commit();
  };
  // Soft cap, mask, online softmax of tile j's S: updates m and l, returns in alpha what O must
  // be multiplied by before P V is added (and whether any row of the warp needs it), and leaves
  // P = 2^(s * scale2 - max) in s.
  auto softmax = [&](float (&s)[kKeys / 2], int j, float (&alpha)[2]) -> bool {
    if (cap > 0.f) {
#pragma unroll
      for (int i = 0; i < kKeys / 2; ++i) s[i] = cap * math::tanh_approx(s[i] * cap_in);
    }
    if (j * kKeys < full_lo || (j + 1) * kKeys > full_hi) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int32_t t = t_first + r_lo + 8 * half;
        int32_t lo = 0, hi = kv_len;
        if (p.causal) hi = min(hi, t + diag + 1);
        if (p.window_left >= 0) lo = t + diag - p.window_left;
#pragma unroll
        for (int n = 0; n < kKeys / 8; ++n) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int32_t pos = j * kKeys + 8 * n + 2 * c + e;
            if (pos < lo || pos >= hi) s[4 * n + 2 * half + e] = -math::kInf;
          }
        }
      }
    }
    bool moved = false;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float mx = m[half];
#pragma unroll
      for (int n = 0; n < kKeys / 8; ++n) {
        mx = fmaxf(mx, fmaxf(s[4 * n + 2 * half], s[4 * n + 2 * half + 1]));
      }
      mx = detail::quad_max(mx);
      const float m_use = mx == -math::kInf ? 0.f : mx * scale2;
      alpha[half] = math::ex2_approx(m[half] * scale2 - m_use);
      moved |= alpha[half] != 1.f;
      m[half] = mx;
      float sum = 0.f;
#pragma unroll
      for (int n = 0; n < kKeys / 8; ++n) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float pv = math::ex2_approx(fmaf(s[4 * n + 2 * half + e], scale2, -m_use));
          s[4 * n + 2 * half + e] = pv;
          sum += pv;
        }
      }
      l[half] = l[half] * alpha[half] + sum;
    }
    return __any_sync(0xffffffffu, moved);
  };
  // P (in s) in 16 bits as the A fragments of k steps of 16 keys (n8 blocks 2 ks and 2 ks + 1)
  auto to_a = [&](const float (&s)[kKeys / 2], uint32_t (&pa)[kKeys / 16][4]) {
#pragma unroll
    for (int ks = 0; ks < kKeys / 16; ++ks) {
      pa[ks][0] = mma::pack2<T>(s[8 * ks + 0], s[8 * ks + 1]);
      pa[ks][1] = mma::pack2<T>(s[8 * ks + 2], s[8 * ks + 3]);
      pa[ks][2] = mma::pack2<T>(s[8 * ks + 4], s[8 * ks + 5]);
      pa[ks][3] = mma::pack2<T>(s[8 * ks + 6], s[8 * ks + 7]);
    }
  };
  auto rescale = [&](const float (&alpha)[2]) {  // exact when skipped: ex2(0) = 1
#pragma unroll
    for (int n = 0; n < kD / 8; ++n) {
      o[4 * n + 0] *= alpha[0];
      o[4 * n + 1] *= alpha[0];
      o[4 * n + 2] *= alpha[1];
      o[4 * n + 3] *= alpha[1];
    }
  };
  // Waits for tile j's V (stage st) and clears its rows past a ragged request's keys. Called
  // outside any wgmma batch: ptxas serialises the wgmmas of a batch with such code inside.
  auto ready_v = [&](int j, int st, uint32_t phase) {
    tma::mbar_wait(bar_v(st), phase);
    if (ragged_kv && (j + 1) * kKeys > kv_len) {
      // The tile's rows past this request's keys hold the next request's values (or whatever
      // follows the last one): P is 0 there, but 0 x inf or nan is not, so the two consumer
      // groups zero those rows first (whole 128-byte rows: the swizzle stays inside a row).
      const int first = kv_len - j * kKeys;
      const int n16 = (kKeys - first) * kChunks * 8;  // 16-byte pieces to clear
      for (int i = static_cast<int>(threadIdx.x) - 128; i < n16; i += 256) {
        const int r = first + i / (kChunks * 8), ch = (i / 8) % kChunks, x = i % 8;
        const uint32_t dst = s_v(st) + ch * Tl::kKvChunkBytes + r * 128 + x * 16;
        asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};" ::"r"(dst), "r"(0u) : "memory");
      }
      tma::fence_async_shared();  // the zeros visible to the wgmmas (async proxy)
      tma::named_sync(1, 256);    // both consumer groups done clearing
    }
  };
  // O += P V of a tile in stage st (its V ready), issued and committed: V's (kKeys, 64) chunks
  // read N-major, 16 keys (2048 bytes) per step
  auto issue_pv = [&](const uint32_t (&pa)[kKeys / 16][4], int st) {
    wgmma::fence_operands(o);
    wgmma::fence();
#pragma unroll
    for (int ks = 0; ks < kKeys / 16; ++ks) {
      wgmma::mma_rs_tb<kD, T>(o, pa[ks],
                              wgmma::desc_sw128_mn(s_v(st) + ks * 16 * 128, Tl::kKvChunkBytes), 1u);
    }
    wgmma::commit();
  };
  // S of tile j (stage st) once its K has landed, computed and waited for
  auto compute_s = [&](float (&s)[kKeys / 2], int st, uint32_t phase) {
    tma::mbar_wait(bar_k(st), phase);
    issue_s(s, st);
    wgmma::wait<0>();
    wgmma::fence_operands(s);
  };
  // Waits for every wgmma of this group (the last P V of stage st among them) and gives the stage
  // back to the producer.
  auto finish_pv = [&](uint32_t (&pa)[kKeys / 16][4], int st) {
    wgmma::wait<0>();
    wgmma::fence_operands(o);
#pragma unroll
    for (int ks = 0; ks < kKeys / 16; ++ks) wgmma::fence_operands(pa[ks]);
    if (lane == 0) tma::mbar_arrive(bar_empty(st));
  };

  tma::mbar_wait(bar_q, 0);
  int st = 0;
  uint32_t phase = 0;
  if constexpr (!Tl::kOverlap) {
    // v1: each tile's S, softmax and P V in turn (the other consumer group fills the gaps)
    for (int j = j_begin; j < j_end; ++j) {
      float s[kKeys / 2];
      compute_s(s, st, phase);
      uint32_t pa[kKeys / 16][4];
      float alpha[2];
      if (softmax(s, j, alpha)) rescale(alpha);
      to_a(s, pa);
      ready_v(j, st, phase);
      issue_pv(pa, st);
      finish_pv(pa, st);
      if (++st == kStages) st = 0, phase ^= 1;
    }
  } else if (j_begin < j_end) {
    // v2: tile j + 1's S = Q K^T is issued before tile j's P V, and its softmax (in fp32, in
    // place) runs while that P V is on the tensor cores; P's 16-bit A fragments are written
    // only once P V j is done (ptxas serialises wgmmas whose operand registers other code
    // writes while they may be in flight).
    uint32_t pa[kKeys / 16][4];
    float alpha[2];
    bool moved;
    {
      float s[kKeys / 2];
      compute_s(s, st, phase);
      moved = softmax(s, j_begin, alpha);  // O is 0: its rescale is moot
      to_a(s, pa);
    }
    moved = false;
    for (int j = j_begin; j + 1 < j_end; ++j) {  // every tile but the last: a next one
      const int st1 = st + 1 == kStages ? 0 : st + 1;
      const uint32_t phase1 = st + 1 == kStages ? phase ^ 1 : phase;
      float s[kKeys / 2];
      ready_v(j, st, phase);
      tma::mbar_wait(bar_k(st1), phase1);
      issue_s(s, st1);
      if (moved) rescale(alpha);  // tile j's, before its P V
      issue_pv(pa, st);
      wgmma::wait<1>();  // S of tile j + 1 done; P V j may still run
      wgmma::fence_operands(s);
      moved = softmax(s, j + 1, alpha);
      finish_pv(pa, st);
      to_a(s, pa);
      st = st1, phase = phase1;
    }
    ready_v(j_end - 1, st, phase);  // the last tile's P V
    if (moved) rescale(alpha);
    issue_pv(pa, st);
    finish_pv(pa, st);
  }
  pdl_release();

  // ---- out and lse of this thread's two rows
  T* out = static_cast<T*>(p.out);
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const float sum = detail::quad_sum(l[half]);
    const int32_t t = t_first + r_lo + 8 * half;
    if (t >= q_len) continue;
    const float inv = sum > 0.f ? 1.f / sum : 0.f;
    T* dst = out + b * p.out_stride_b + (static_cast<int64_t>(q_begin) + t) * p.out_stride_t +
             h * p.out_stride_h;
#pragma unroll
    for (int n = 0; n < kD / 8; ++n) {
      *reinterpret_cast<uint32_t*>(dst + 8 * n + 2 * c) =
          mma::pack2<T>(o[4 * n + 2 * half] * inv, o[4 * n + 2 * half + 1] * inv);
    }
    if (c == 0 && p.lse != nullptr) {
      const float lse2 = sum > 0.f ? m[half] * scale2 + math::lg2_approx(sum) : -math::kInf;
      p.lse[b * p.lse_stride_b + (static_cast<int64_t>(q_begin) + t) * p.lse_stride_t + h] =
          lse2 * math::kLn2;
    }
  }
#endif
}

// Why p cannot take the sm90 kernel, or nullptr when it can: head_dim 64 or 128, dense or ragged
// keys (not paged), no split, and what TMA needs (16-byte aligned q, k and v, strides of whole
// 16-byte chunks). The device (sm_90) is the dispatcher's to check.
inline const char* Sm90Unsupported(const Params& p) {
  if (p.head_dim != 64 && p.head_dim != 128) return "the sm90 kernel takes head_dim 64 or 128";
  if (p.kv_mode == KvMode::kPaged) return "the sm90 kernel takes dense or ragged keys, not pages";
  if ((p.qo_indptr == nullptr) != (p.kv_mode == KvMode::kDense)) {
    return "the sm90 kernel takes dense queries with dense keys or ragged with ragged";
  }
  if (p.num_splits != 1) return "the sm90 kernel does not split keys (num_splits must be 1)";
  for (const void* ptr : {p.q, p.k, p.v}) {
    if (!is_aligned(ptr, 16)) return "the sm90 kernel needs q, k and v 16-byte aligned";
  }
  // the strides the tensor maps use (a batch of one has no batch stride to speak of)
  const bool batched = p.qo_indptr == nullptr && p.batch > 1;
  for (int64_t s :
       {p.q_stride_t, p.q_stride_h, p.k_stride_t, p.k_stride_h, p.v_stride_t, p.v_stride_h,
        batched ? p.q_stride_b : 8, batched ? p.k_stride_b : 8, batched ? p.v_stride_b : 8}) {
    if (s % 8 != 0 || s <= 0) {
      return "the sm90 kernel needs q, k and v strides of whole 16-byte chunks (positive "
             "multiples of 8 elements)";
    }
  }
  if (p.total_q >= (int64_t{1} << 31) || p.kv_len >= (int64_t{1} << 31)) {
    return "the sm90 kernel takes fewer than 2^31 tokens";
  }
  const int64_t tiles =
      p.qo_indptr == nullptr ? (p.q_len + 127) / 128 * p.batch : (p.total_q + 127) / 128 + p.batch;
  if (tiles > 65535) return "the sm90 kernel takes at most 65535 query tiles of 128 per head";
  return nullptr;
}

// Launches p (Sm90Unsupported(p) == nullptr) on the sm90 kernel; cudaErrorNotSupported when the
// device has too little shared memory or the driver refuses the tensor maps (the dispatcher then
// takes the cp.async kernel).
template <class Tl, typename T>
cudaError_t LaunchSm90Attention(const Params& p, cudaStream_t stream, const DeviceProps& props) {
  if (Tl::kSmemBytes > props.smem_optin) return cudaErrorNotSupported;  // cp.async instead
  // blocks per head: every tile of a dense batch, or a bound on a ragged batch's (the blocks past
  // the last tile return)
  const int64_t tiles = p.qo_indptr == nullptr ? (p.q_len + Tl::kRows - 1) / Tl::kRows * p.batch
                                               : (p.total_q + Tl::kRows - 1) / Tl::kRows + p.batch;
  if (tiles == 0) return cudaSuccess;
  if (tiles > 65535) return cudaErrorNotSupported;
  const CUtensorMapDataType type = std::is_same_v<T, __half> ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                                             : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  // [batch, tokens, heads, head_dim] as 4-D maps (dense: batch x q_len or kv_len tokens; ragged:
  // one batch of every token)
  const bool ragged = p.qo_indptr != nullptr;
  const int64_t q_tokens = ragged ? p.total_q : p.q_len, q_batch = ragged ? 1 : p.batch;
  const int64_t kv_batch = ragged ? 1 : p.batch;
  CUtensorMap map_q, map_k, map_v;
  {
    const int64_t dims[4] = {p.head_dim, p.num_qo_heads, q_tokens, q_batch};
    const int64_t strides[3] = {p.q_stride_h, p.q_stride_t,
                                q_batch == 1 ? q_tokens * p.q_stride_t : p.q_stride_b};
    const int box[4] = {64, 1, Tl::kRows, 1};
    if (tma::EncodeTensorMap4d(&map_q, p.q, type, 2, dims, strides, box) != cudaSuccess) {
      return cudaErrorNotSupported;
    }
  }
  if (p.kv_len == 0) {  // no keys: nothing is loaded from k and v (their pointers may be null)
    map_k = map_v = map_q;
  } else {
    const int64_t dims[4] = {p.head_dim, p.num_kv_heads, p.kv_len, kv_batch};
    const int box[4] = {64, 1, Tl::kKeys, 1};
    const int64_t k_strides[3] = {p.k_stride_h, p.k_stride_t,
                                  kv_batch == 1 ? p.kv_len * p.k_stride_t : p.k_stride_b};
    const int64_t v_strides[3] = {p.v_stride_h, p.v_stride_t,
                                  kv_batch == 1 ? p.kv_len * p.v_stride_t : p.v_stride_b};
    if (tma::EncodeTensorMap4d(&map_k, p.k, type, 2, dims, k_strides, box) != cudaSuccess ||
        tma::EncodeTensorMap4d(&map_v, p.v, type, 2, dims, v_strides, box) != cudaSuccess) {
      return cudaErrorNotSupported;
    }
  }
  void (*kernel)(CUtensorMap, CUtensorMap, CUtensorMap, Params) = nullptr;
  XK_CUDA_TRY((SmemOptIn<Sm90AttentionKernel<Tl, T>>(Tl::kSmemBytes, &kernel)));
  const dim3 grid(static_cast<unsigned>(p.num_qo_heads), static_cast<unsigned>(tiles));
  const LaunchConfig lc(grid, dim3(Tl::kThreads), stream, 1, UsePDL(props), Tl::kSmemBytes);
  return cudaLaunchKernelEx(&lc.cfg, kernel, map_q, map_k, map_v, p);
}

}  // namespace xkernels::attention

#endif  // XKERNELS_ATTENTION_SM90_H_
