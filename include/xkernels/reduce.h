// Warp, block and cluster all-reductions of an arbitrary statistics type under a merge functor.
// Every thread ends with the same bits: merges run in a fixed order, and butterfly partners
// combine the same operands (merge functors must be commutative, as all of ours are).
#ifndef XKERNELS_REDUCE_H_
#define XKERNELS_REDUCE_H_

#include <cooperative_groups.h>

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

// All-reduce within aligned groups of `width` lanes (a power of two <= 32). Every lane of the
// warp must call it.
template <typename S, typename Merge>
XK_DEVICE S warp_all_reduce(S s, Merge merge, int width = 32) {
  for (int offset = width >> 1; offset > 0; offset >>= 1) s = merge(s, shfl_xor(s, offset));
  return s;
}

// All-reduce over the block. `smem` holds one S per warp (32). Every thread of the block must
// call it; blockDim.x is a multiple of 32. Ends with a barrier so `smem` may be reused.
template <typename S, typename Merge>
XK_DEVICE S block_all_reduce(S s, Merge merge, S* smem) {
  s = warp_all_reduce(s, merge);
  const int warp = threadIdx.x >> 5, num_warps = blockDim.x >> 5;
  if ((threadIdx.x & 31) == 0) smem[warp] = s;
  __syncthreads();
  S total = smem[0];
  for (int i = 1; i < num_warps; ++i) total = merge(total, smem[i]);
  __syncthreads();
  return total;
}

// All-reduce over a thread-block cluster (sm_90): block_all_reduce, then every block reads each
// block's partial from distributed shared memory in rank order. `slot` is a __shared__ S.
template <typename S, typename Merge>
XK_DEVICE S cluster_all_reduce(S s, Merge merge, S* smem, S* slot) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  s = block_all_reduce(s, merge, smem);
  if (threadIdx.x == 0) *slot = s;
  cluster.sync();
  S total = *cluster.map_shared_rank(slot, 0);
  for (unsigned r = 1; r < cluster.num_blocks(); ++r)
    total = merge(total, *cluster.map_shared_rank(slot, r));
  cluster.sync();  // partners may still be reading our slot
  return total;
#else
  __trap();  // launchers only pick cluster kernels on sm_90+
  return s;
#endif
}

}  // namespace xkernels::reduce

#endif  // XKERNELS_REDUCE_H_
