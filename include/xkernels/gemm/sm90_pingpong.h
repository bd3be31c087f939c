// GEMM for sm_90a with ping-pong consumers: the two consumer warpgroups of a block take the block's
// work units in turn, each a whole kBM x kBN output tile (128 rows: two m64 wgmmas per k step), so
// that one group's epilogue (scales, bias, rounding, stores) runs while the other group's
// products keep the tensor cores busy.
//
// The producer warp fills the ring of kStages stages in unit order, as in sm90.h; unit i of the
// block is consumer group i % 2's. A group waits for its turn (a named barrier the other group
// arrives on) before its unit's first k block, issues the unit's wgmmas, and hands the turn over
// once it has seen its last stage full, so the two groups' waits on the ring never overlap: a
// group then skips the other's k blocks in the ring and waits only on stages the other has
// already seen filled (a parity wait cannot tell phase n from n + 2; a version without the turn
// crashed there, benchmarks/README.md). A stage is released by the four warps of the group that
// read it.
//
// Scope: whole units (no split-K, no stream-K), not gated, not swapped, per-tensor and per-row e4m3
// scales or 16-bit operands; a 16-bit output by TMA stores of 64 x 64 boxes out of each group's own
// slots of the C buffer, any other output element by element.
#ifndef XKERNELS_GEMM_SM90_PINGPONG_H_
#define XKERNELS_GEMM_SM90_PINGPONG_H_

#include "xkernels/gemm/sm90.h"

namespace xkernels::gemm {

template <typename T_, int kBN_, int kStages_, int kCluster_ = 1>
struct Sm90PingTile {
  using T = T_;  // __half, __nv_bfloat16 or __nv_fp8_e4m3
  static constexpr int kConsumers = 2, kBN = kBN_, kStages = kStages_;
  static constexpr bool kBlockScale = false, kOrdered = false, kSwap = false;
  // Clusters of kCluster blocks on vertically adjacent tiles: each loads its own a and
  // 1 / kCluster of the b tile they share, multicast to all
  static constexpr int kCluster = kCluster_;
  static constexpr bool kShareA = false;
  static constexpr int kBM = 128;  // a group's tile: rows 0 .. 63 and 64 .. 127 (two wgmmas)
  static constexpr int kBK = 128 / static_cast<int>(sizeof(T));
  static constexpr int kThreads = 128 * (1 + kConsumers);
  static constexpr int kAcc = kBM * kBN / 128;  // per consumer thread: two halves of kBN / 2
  static constexpr int kABytes = kBM * 128, kBBytes = kBN * 128;
  static constexpr int kStageBytes = kABytes + kBBytes;
  static constexpr int kCSlots = 2;  // 64 x 64 16-bit boxes (8 KB) per group
  static constexpr int kCBytes = kConsumers * kCSlots * 8192;
  static constexpr int kSmemBytes = 1024 + kStages * kStageBytes + kCBytes + 2 * kStages * 8;
  static_assert(kBN % 64 == 0 && kBN <= 256, "whole 64-column boxes, at most 256 rows of b");
  static_assert(kCluster == 1 || kCluster == 2, "single blocks or clusters of 2");
};

template <class Tl, typename Out>
__global__ void __launch_bounds__(Tl::kThreads, 1)
    Sm90PingKernel(const __grid_constant__ CUtensorMap map_a,
                   const __grid_constant__ CUtensorMap map_b,
                   const __grid_constant__ CUtensorMap map_c, const Params p,
                   const bool tma_store) {
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __trap();
#else
  using T = typename Tl::T;
  constexpr int kStages = Tl::kStages, kBN = Tl::kBN, kHalf = kBN / 2;  // floats per 64-row half
  constexpr int kSteps = Tl::kBK / wgmma::kK<T>;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  const uint32_t s_base = (mma::smem_addr(smem_raw) + 1023) & ~1023u;
  const uint32_t s_c = s_base + kStages * Tl::kStageBytes;
  const uint32_t full0 = s_c + Tl::kCBytes, empty0 = full0 + kStages * 8;
  const int wg = static_cast<int>(threadIdx.x) / 128;
  constexpr int kCluster = Tl::kCluster;
  const int rank = kCluster > 1 ? static_cast<int>(tma::cluster_rank()) : 0;

  if (threadIdx.x == 0) {
    tma::prefetch_map(&map_a);
    tma::prefetch_map(&map_b);
    for (int s = 0; s < kStages; ++s) {
      tma::mbar_init(full0 + 8 * s, 1);
      // the warps of the group that reads the stage, in every block of the cluster
      tma::mbar_init(empty0 + 8 * s, 4 * kCluster);
    }
    tma::mbar_fence_init();
  }
  if constexpr (kCluster > 1) {
    reduce::cluster_sync();
  } else {
    __syncthreads();
  }
  pdl_wait();

  if (wg == 0) {  // ---- producer: every unit of the block, in order
    wgmma::setmaxnreg_dec<40>();
    if (threadIdx.x == 0) {
      int stage = 0;
      uint32_t phase = 0;
      detail::Unit w;
      for (detail::Work<Tl> work(p); work.Next(p, rank, &w);) {
        for (int kb = 0; kb < w.kb_count; ++kb) {
          tma::mbar_wait(empty0 + 8 * stage, phase ^ 1);
          const uint32_t full = full0 + 8 * stage;
          const uint32_t sa = s_base + stage * Tl::kStageBytes;
          const int k0 = (w.kb_begin + kb) * Tl::kBK;
          tma::mbar_arrive_expect_tx(full, Tl::kStageBytes);
          tma::load_2d(sa, &map_a, full, k0, w.m0);
          if constexpr (kCluster > 1) {
            constexpr int kRows = kBN / kCluster;
            tma::load_2d_multicast(sa + Tl::kABytes + rank * kRows * 128, &map_b, full, k0,
                                   w.tn * kBN + rank * kRows, (1u << kCluster) - 1);
          } else {
            tma::load_2d(sa + Tl::kABytes, &map_b, full, k0, w.tn * kBN);
          }
          if (++stage == kStages) stage = 0, phase ^= 1;
        }
      }
    }
    pdl_release();
  } else {
    // ---- consumers: group cw takes the block's units cw, cw + 2, ...
    wgmma::setmaxnreg_inc<232>();
    const int cw = wg - 1;
    const int lane = static_cast<int>(threadIdx.x) % 32,
              warp = (static_cast<int>(threadIdx.x) / 32) % 4;
    const int g = lane / 4, c = lane % 4;
    const bool leader = threadIdx.x % 128 == 0;
    const uint32_t bar_group = detail::kBarGroup0 + cw;
    auto release = [&](int st) {
      if (lane == 0) {
        if constexpr (kCluster > 1) {
#pragma unroll
          for (int r = 0; r < kCluster; ++r) tma::mbar_arrive_cluster(empty0 + 8 * st, r);
        } else {
          tma::mbar_arrive(empty0 + 8 * st);
        }
      }
    };
    int stage = 0, idx = 0, done = 0;
    uint32_t phase = 0;
    float acc[Tl::kAcc];  // half hh (rows 64 hh ..): acc[kHalf hh + 4 j + 2 h + e]
    float (&h0)[kHalf] = *reinterpret_cast<float (*)[kHalf]>(acc);
    float (&h1)[kHalf] = *reinterpret_cast<float (*)[kHalf]>(acc + kHalf);
    constexpr bool kScales = sizeof(T) == 1;
    detail::Unit w;
    for (detail::Work<Tl> work(p); work.Next(p, rank, &w); ++idx) {
      if ((idx & 1) != cw) {  // the other group's unit: its stages come next in the ring
        const int s = stage + w.kb_count;
        phase ^= static_cast<uint32_t>(s / kStages) & 1u;
        stage = s % kStages;
        continue;
      }
      const int row0 = w.m0 + 16 * warp + g;  // + 64 hh + 8 h
#pragma unroll
      for (int i = 0; i < Tl::kAcc; ++i) acc[i] = 0.f;
      if (cw == 1 || idx > 0) tma::named_sync(detail::kBarTurn0 + cw, 256);  // this group's turn
      int prev = -1;
      for (int kb = 0; kb < w.kb_count; ++kb) {
        tma::mbar_wait(full0 + 8 * stage, phase);
        const uint32_t sa_ = s_base + stage * Tl::kStageBytes, sb_ = sa_ + Tl::kABytes;
        wgmma::fence_operands(acc);
        wgmma::fence();
#pragma unroll
        for (int s = 0; s < kSteps; ++s) {
          const uint64_t db = wgmma::desc_sw128(sb_ + 32 * s);
          wgmma::mma<kBN, T>(h0, wgmma::desc_sw128(sa_ + 32 * s), db, 1);
          wgmma::mma<kBN, T>(h1, wgmma::desc_sw128(sa_ + 64 * 128 + 32 * s), db, 1);
        }
        wgmma::commit();
        if (kb == w.kb_count - 1) tma::named_arrive(detail::kBarTurn0 + (1 - cw), 256);
        wgmma::wait<1>();
        wgmma::fence_operands(acc);
        if (prev >= 0) release(prev);
        prev = stage;
        if (++stage == kStages) stage = 0, phase ^= 1;
      }
      if (w.kb_count == 0) tma::named_arrive(detail::kBarTurn0 + (1 - cw), 256);
      wgmma::wait<0>();
      wgmma::fence_operands(acc);
      if (prev >= 0) release(prev);

      // e4m3 scales, read now: the other group's products hide their latency (held through the
      // main loop, b's 32 per thread spilled at ptxas's 168 registers)
      if constexpr (kScales) {
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          const float s0 = RowScale(p.a_scale, p.a_scale_kind, min(row0 + 64 * hh, p.m - 1));
          const float s1 = RowScale(p.a_scale, p.a_scale_kind, min(row0 + 64 * hh + 8, p.m - 1));
#pragma unroll
          for (int j = 0; j < kBN / 8; ++j) {
            const int col = min(w.tn * kBN + 8 * j + 2 * c, p.n - 2);
            const float b0 = RowScale(p.b_scale, p.b_scale_kind, col);
            const float b1 = RowScale(p.b_scale, p.b_scale_kind, col + 1);
            float* a4 = acc + kHalf * hh + 4 * j;
            a4[0] *= s0 * b0, a4[1] *= s0 * b1, a4[2] *= s1 * b0, a4[3] *= s1 * b1;
          }
        }
      }
      auto bias_at = [&](int col) {
        return p.bias != nullptr && col < p.n ? LoadBiasPair(p.bias, p.bias_type, col)
                                              : make_float2(0.f, 0.f);
      };

      // ---- epilogue, a 64-row half at a time: none to write (the tile above's or past m), TMA
      // boxes, or element stores where the half straddles the tile above's last rows
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int g_first = w.m0 + 64 * hh;
        if (g_first + 64 <= w.m_lo || g_first >= p.m) continue;
        const bool straddles = g_first < w.m_lo;
        if constexpr (sizeof(Out) == 2) {
          if (tma_store && !straddles) {
#pragma unroll
            for (int q = 0; q < kBN / 64; ++q) {
              const int box = hh * (kBN / 64) + q;
              const uint32_t slot = s_c + (cw * Tl::kCSlots + box % Tl::kCSlots) * 8192;
              if (leader) tma::bulk_wait_read<Tl::kCSlots - 1>();
              tma::named_sync(bar_group, 128);
#pragma unroll
              for (int jj = 0; jj < 8; ++jj) {
                const int j = 8 * q + jj;
                const float2 bv = bias_at(w.tn * kBN + 8 * j + 2 * c);
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                  const int r = 16 * warp + g + 8 * h;
                  const float* a2 = acc + kHalf * hh + 4 * j + 2 * h;
                  const uint32_t dst = slot + r * 128 + ((jj ^ (r % 8)) << 4) + 4 * c;
                  asm volatile("st.shared.b32 [%0], %1;" ::"r"(dst),
                               "r"(mma::pack2<Out>(a2[0] + bv.x, a2[1] + bv.y)));
                }
              }
              tma::fence_async_shared();
              tma::named_sync(bar_group, 128);
              if (leader) {
                tma::store_2d(&map_c, slot, w.tn * kBN + 64 * q, g_first);
                tma::bulk_commit();
              }
            }
            ++done;
            continue;
          }
        }
#pragma unroll
        for (int j = 0; j < kBN / 8; ++j) {
          const int col = w.tn * kBN + 8 * j + 2 * c;
          if (col >= p.n) continue;
          const float2 bv = bias_at(col);
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int row = row0 + 64 * hh + 8 * h;
            if (row >= p.m || row < w.m_lo) continue;
            const float* a2 = acc + kHalf * hh + 4 * j + 2 * h;
            StorePair(static_cast<Out*>(p.out) + row * p.ldc + col, a2[0] + bv.x, a2[1] + bv.y);
          }
        }
      }
    }
    // the turn the last unit handed over, taken so that every arrival is met
    if (idx > 0 && (idx & 1) == cw) tma::named_sync(detail::kBarTurn0 + cw, 256);
    if (leader && done > 0) tma::bulk_wait<0>();
    pdl_release();
  }  // consumers
  // a block leaves once its peer no longer writes into its shared memory or arrives on its barriers
  if constexpr (kCluster > 1) reduce::cluster_sync();
#endif
}

namespace detail {

// Runs p (unsplit, not gated, no block scales) on ping-pong tiles Tl: a persistent grid of one
// block per SM, at most the units.
template <class Tl, typename Out>
cudaError_t LaunchSm90Ping(const Params& p_in, cudaStream_t stream, const DeviceProps& props) {
  using T = typename Tl::T;
  if (Tl::kSmemBytes > props.smem_optin) return cudaErrorInvalidConfiguration;
  if (p_in.splits != 1 || p_in.partials_only || p_in.act >= 0 ||
      p_in.a_scale_kind == Scale::kBlock) {
    return cudaErrorInvalidValue;
  }
  Params p = p_in;
  p.sk_units = 0, p.sk_nonce = 0;
  const int64_t units = Sm90Units<Tl>(p);
  if (units > 0x7fffffff) return cudaErrorInvalidConfiguration;
  const CUtensorMapDataType type = sizeof(T) == 1              ? CU_TENSOR_MAP_DATA_TYPE_UINT8
                                   : std::is_same_v<T, __half> ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                                               : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  constexpr int kElem = static_cast<int>(sizeof(T));
  CUtensorMap map_a, map_b, map_c;
  XK_CUDA_TRY(tma::EncodeTensorMap2d(&map_a, p.a, type, kElem, p.m, p.k, p.lda, Tl::kBM, Tl::kBK));
  XK_CUDA_TRY(tma::EncodeTensorMap2d(&map_b, p.b, type, kElem, p.n, p.k, p.ldb,
                                     Tl::kBN / Tl::kCluster, Tl::kBK));
  bool tma_store = false;
  if constexpr (sizeof(Out) == 2) {
    tma_store = is_aligned(p.out, 16) && p.ldc % 8 == 0;
    if (tma_store) {
      XK_CUDA_TRY(tma::EncodeTensorMap2d(&map_c, p.out,
                                         std::is_same_v<Out, __half>
                                             ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                             : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
                                         2, p.m, p.n, p.ldc, 64, 64));
    }
  }
  if (!tma_store) map_c = map_a;  // unused
  void (*kernel)(CUtensorMap, CUtensorMap, CUtensorMap, Params, bool) = nullptr;
  XK_CUDA_TRY((SmemOptIn<Sm90PingKernel<Tl, Out>>(Tl::kSmemBytes, &kernel)));
  int slots = props.sm_count;
  if constexpr (Tl::kCluster > 1) {
    XK_CUDA_TRY((CachedFit<Sm90PingKernel<Tl, Out>>(0, &slots, [&](int* fit) {
      const LaunchConfig one(dim3(Tl::kCluster), dim3(Tl::kThreads), stream, Tl::kCluster, false,
                             Tl::kSmemBytes);
      return cudaOccupancyMaxActiveClusters(fit, kernel, &one.cfg);
    })));
  }
  const int64_t blocks = units < slots ? units : slots;
  const LaunchConfig lc(dim3(static_cast<unsigned>(blocks * Tl::kCluster)), dim3(Tl::kThreads),
                        stream, Tl::kCluster, UsePDL(props), Tl::kSmemBytes);
  return cudaLaunchKernelEx(&lc.cfg, kernel, map_a, map_b, map_c, p, tma_store);
}

}  // namespace detail
}  // namespace xkernels::gemm

#endif  // XKERNELS_GEMM_SM90_PINGPONG_H_
