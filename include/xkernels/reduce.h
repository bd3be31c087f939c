// Warp, block and cluster all-reductions of an arbitrary statistics type under a merge functor.
// Every thread ends with the same bits: merges run in a fixed order, and butterfly partners
// combine the same operands (merge functors must be commutative, as all of ours are).
#ifndef XKERNELS_REDUCE_H_
#define XKERNELS_REDUCE_H_

#include <cooperative_groups.h>

#include <type_traits>
#include <utility>

#include "xkernels/common.h"

namespace xkernels::reduce {

// Shuffle any trivially copyable value made of 4-byte words.
template <typename S>
XK_DEVICE S shfl_xor(const S& s, int lane_mask) {
  static_assert(sizeof(S) % 4 == 0, "statistics must be made of 4-byte words");
  constexpr int kWords = sizeof(S) / 4;
  int w[kWords];
  memcpy(w, &s, sizeof(S));
#pragma unroll
  for (int i = 0; i < kWords; ++i) w[i] = __shfl_xor_sync(0xffffffffu, w[i], lane_mask);
  S out;
  memcpy(&out, w, sizeof(S));
  return out;
}

// A merge functor may bring its own all-reduce over aligned lane groups, a static
// `lanes(value, width)`, and an `identity()`: softmax reduces its (max, sum) pairs as a max
// butterfly, one rescale and a sum butterfly instead of 2 ex2 per pairwise merge.
template <class Merge, class S, class = void>
struct HasLanes : std::false_type {};
template <class Merge, class S>
struct HasLanes<Merge, S, std::void_t<decltype(Merge::lanes(std::declval<S>(), 32))>>
    : std::true_type {};

// All-reduce within aligned groups of `width` lanes (a power of two <= 32). Every lane of the
// warp must call it.
template <typename S, typename Merge>
XK_DEVICE S warp_all_reduce(S s, Merge merge, int width = 32) {
  if constexpr (HasLanes<Merge, S>::value) {
    return Merge::lanes(s, width);
  } else {
    for (int offset = width >> 1; offset > 0; offset >>= 1) s = merge(s, shfl_xor(s, offset));
    return s;
  }
}

struct Sum {
  template <typename T>
  XK_DEVICE T operator()(T a, T b) const {
    return a + b;
  }
};

// The statistics of one thread's own values: an all-reducer over a scope of one thread.
struct ThreadReducer {
  template <typename T, typename Merge>
  XK_DEVICE T operator()(T v, Merge) const {
    return v;
  }
};

// All-reduce among the `width` lanes (<= 32, a power of two) that share a row.
struct GroupReducer {
  int width;
  template <typename T, typename Merge>
  XK_DEVICE T operator()(T v, Merge merge) const {
    return warp_all_reduce(v, merge, width);
  }
};

// All-reduce over the block: butterfly in each warp, then every thread merges the per-warp
// partials in warp order (broadcast reads of shared memory). Measured on the H100, this short
// chain beat a second butterfly over the partials (rmsnorm 32768x8192 bf16: 2987 vs 2777 GB/s):
// each row's reduction sits on its critical path. With kLowLatency (grids of about one wave,
// where a row's latency is the kernel's time) the loop is unrolled so that all the partials'
// loads are in flight at once; otherwise it is rolled: unrolled, the hoisted loads cost
// registers, hence occupancy (fused_add_rmsnorm bf16 57 -> 86); unrolled for one wave: rmsnorm
// 1x4096 1.88 -> 1.71 us, fused_add_rmsnorm 128x4096 3.61 -> 3.28. Merges with their own `lanes`
// reduce the partials with it instead (one partial per lane). `smem` holds 32 values of up to 16
// bytes. Ends with a barrier, so calls may follow each other.
// With kWarps > 0 (the block's count of warps), for a block's only reduction (kernels of one row
// per block): no trailing barrier, as nothing reuses the scratch, and scalar partials merged in
// an unrolled chain. Wider ones keep the rolled loop: unrolled, layernorm's pairs took registers
// (bf16 512 x 2, columns in shared memory: 32 -> 58, so 2 blocks per SM instead of 4; H100,
// 32768x8192: 354.5 -> 406.6 us). Used by RowKernelFlat; measured there on the H100, bf16, us,
// against the general form (A/B harness, peers in the same rounds): 200x8192 rmsnorm 4.48 ->
// 4.14, layernorm 4.57 -> 4.49, fused_add_rmsnorm 6.23 -> 6.03; 8192x4096 the same within 0.15;
// 32768x8192 layernorm 354.5 -> 354.5, rmsnorm 353.2 -> 353.7 (353.0 -> 353.7 in another run;
// still under Liger and torch.compile in the bench).
template <bool kLowLatency = false, int kWarps = 0>
struct BlockReducer {
  static_assert(kWarps >= 0 && kWarps <= 32, "at most 32 warps");
  void* smem;
  template <typename T, typename Merge>
  XK_DEVICE T operator()(T v, Merge merge) const {
    static_assert(sizeof(T) <= 16, "the block reducer's scratch holds 16-byte values");
    T* s = static_cast<T*>(smem);
    const int warps = kWarps > 0 ? kWarps : static_cast<int>(blockDim.x >> 5);
    const int lane = threadIdx.x & 31;
    v = warp_all_reduce(v, merge);
    if (lane == 0) s[threadIdx.x >> 5] = v;
    __syncthreads();
    T total;
    if constexpr (HasLanes<Merge, T>::value) {
      total = Merge::lanes(lane < warps ? s[lane] : Merge::identity(), 32);
      if constexpr (kWarps > 0) return total;
    } else if constexpr (kWarps > 0) {
      total = s[0];
      if constexpr (sizeof(T) <= 4) {
#pragma unroll
        for (int i = 1; i < kWarps; ++i) total = merge(total, s[i]);
      } else {
#pragma unroll 1
        for (int i = 1; i < kWarps; ++i) total = merge(total, s[i]);
      }
      return total;
    } else if constexpr (kLowLatency) {
      constexpr int kMaxWarps = 32;
      total = s[0];
#pragma unroll
      for (int i = 1; i < kMaxWarps; ++i) {
        if (i < warps) total = merge(total, s[i]);
      }
    } else {
      total = s[0];
      for (int i = 1; i < warps; ++i) total = merge(total, s[i]);
    }
    __syncthreads();
    return total;
  }
};

// Cluster barrier (sm_90): every thread of every block of the cluster arrives (releasing its
// writes) and waits (acquiring the others').
XK_DEVICE void cluster_sync() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
  asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
#endif
}

// Merge one value per block across a thread-block cluster (sm_90) without cluster barriers: each
// block sends its value to every block's shared memory with st.async, which counts the bytes on
// the receiver's mbarrier; a block waits on its own mbarrier, then every block runs the same
// butterfly over the same values (the same bits everywhere). Two buffers alternate by exchange,
// so a block may run one exchange ahead of its slowest partner, never two: it needs that
// partner's value of the one before. Measured on the H100 against a slot per block read through
// DSMEM between two cluster barriers per row: softmax 4096x131072 bf16 2023 -> 2263 GB/s,
// 1x131072 5.7 -> 4.1 us. Per block, in shared memory:
struct ClusterExchange {
  static constexpr int kMax = 8;  // portable cluster size
  uint4 values[2][kMax];          // (buffer, sender's rank), 16 bytes each
  uint64_t bar[2];                // one mbarrier per buffer
};

XK_DEVICE unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// Initialise the mbarrier `bar` for `count` arrivals per phase (one thread; publish it with a
// barrier and, for other blocks of the cluster, fence.mbarrier_init).
XK_DEVICE void mbarrier_init(uint64_t* bar, unsigned count) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count)
               : "memory");
#endif
}

// Order this thread's generic-proxy accesses to shared memory before later bulk copies' (async
// proxy) accesses.
XK_DEVICE void fence_proxy_async() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}

// One thread's bulk copy (sm_90 TMA, no tensor map) of `bytes` (a multiple of 16, both
// addresses 16-byte aligned) from global to this block's shared memory, counted on the mbarrier
// `bar`, which the same thread arms for those bytes first. Where the block read `dst` before,
// call it after a barrier: the proxy fence then orders those reads before the copy's writes.
XK_DEVICE void bulk_load(void* dst, const void* src, unsigned bytes, uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  fence_proxy_async();
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)),
               "r"(bytes) : "memory");
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
      ::"r"(smem_addr(dst)), "l"(src), "r"(bytes), "r"(smem_addr(bar)) : "memory");
#endif
}

// One thread's bulk store (sm_90 TMA, no tensor map) of `bytes` (a multiple of 16, both addresses
// 16-byte aligned) from this block's shared memory to global, as one bulk group. The block's
// writes to `src` must be before it: each writer's fence_proxy_async, then a barrier.
XK_DEVICE void bulk_store(void* dst, const void* src, unsigned bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst),
               "r"(smem_addr(src)), "r"(bytes) : "memory");
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
#endif
}

// Wait (the thread that issued them) until all but the newest N bulk stores have read their
// shared memory (kRead), or have completed.
template <int N, bool kRead>
XK_DEVICE void bulk_store_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if constexpr (kRead) {
    asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
  } else {
    asm volatile("cp.async.bulk.wait_group %0;" ::"n"(N) : "memory");
  }
#endif
}

// Wait until the mbarrier `bar` completes the phase of the given parity.
XK_DEVICE void mbarrier_wait(uint64_t* bar, unsigned parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "{\n\t.reg .pred p;\n\t"
      "WAIT:\n\t"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n\t"
      "@!p bra WAIT;\n\t}" ::"r"(smem_addr(bar)), "r"(parity) : "memory");
#endif
}

// Before the first exchange: the mbarriers of every block are initialised before any partner
// sends. Every thread of every block of the cluster calls it.
XK_DEVICE void cluster_exchange_init(ClusterExchange* x) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (threadIdx.x == 0) {
    for (int b = 0; b < 2; ++b) mbarrier_init(&x->bar[b], 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  cluster_sync();
#endif
}

// The all-reduce of the t-th exchange (t = 0, 1, ... on every block of the cluster, in step).
// `s` must be the same on every thread of the block.
template <typename S, typename Merge>
XK_DEVICE S cluster_all_reduce(S s, Merge merge, ClusterExchange* x, int64_t t, S identity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  static_assert(sizeof(S) <= 16, "exchanged values are at most 16 bytes");
  constexpr int kMax = ClusterExchange::kMax;
  cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
  const int c = static_cast<int>(cluster.num_blocks());
  const int b = static_cast<int>(t & 1);
  const unsigned parity = static_cast<unsigned>((t >> 1) & 1);
  const unsigned bar = smem_addr(&x->bar[b]);
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar),
                 "r"(c * 16) : "memory");
  }
  if (static_cast<int>(threadIdx.x) < c) {  // thread r sends to rank r
    uint4 v = {0u, 0u, 0u, 0u};
    memcpy(&v, &s, sizeof(S));
    unsigned dst, dst_bar;
    const unsigned src = smem_addr(&x->values[b][cluster.block_rank()]);
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(dst) : "r"(src), "r"(threadIdx.x));
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(dst_bar) : "r"(bar), "r"(threadIdx.x));
    asm volatile(
        "st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, %4}, [%5];"
        ::"r"(dst), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w), "r"(dst_bar) : "memory");
  }
  mbarrier_wait(&x->bar[b], parity);
  const int r = threadIdx.x & (kMax - 1);
  S mine = identity;
  if (r < c) memcpy(&mine, &x->values[b][r], sizeof(S));
  return warp_all_reduce(mine, merge, kMax);
#else
  __trap();  // launchers pick cluster kernels on sm_90+ only
  return s;
#endif
}

}  // namespace xkernels::reduce

#endif  // XKERNELS_REDUCE_H_
