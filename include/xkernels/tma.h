// Hopper's bulk tensor copies (TMA) and the mbarriers they complete on (sm_90+), and the host side:
// 2-D tensor maps encoded through the driver entry point (no -lcuda needed).
//
// A stage of a pipeline: the producer thread arms the stage's `full` barrier with the bytes it
// expects (arrive_expect_tx), issues the copies, which complete that many bytes on it; consumers
// wait on `full` with the stage's phase parity, and, done with the stage, arrive on its `empty`
// barrier, which the producer waits on before refilling the slot.
#ifndef XKERNELS_TMA_H_
#define XKERNELS_TMA_H_

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "xkernels/common.h"

namespace xkernels::tma {

// ---- mbarrier (shared-window addresses)
XK_DEVICE void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
// Makes the barriers' initialisation visible to the async proxy (TMA) and the other threads.
XK_DEVICE void mbar_fence_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
XK_DEVICE void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
               : "memory");
}
XK_DEVICE void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
// Arrives on the barrier at `bar`'s offset in block `cta` of this block's cluster, with the
// default .release.cta semantics (as CUTLASS's ClusterBarrier does): .release.cluster compiles to
// a MEMBAR.ALL.GPU per arrival, which halved the GEMM's speed where each consumer warp arrived on
// both blocks of a cluster of 2 once per k block (bf16 8192^3 328 against 773 TFLOP/s).
XK_DEVICE void mbar_arrive_cluster(uint32_t bar, uint32_t cta) {
  asm volatile(
      "{\n"
      ".reg .b32 remote;\n"
      "mapa.shared::cluster.u32 remote, %0, %1;\n"
      "mbarrier.arrive.shared::cluster.b64 _, [remote];\n"
      "}\n" ::"r"(bar),
      "r"(cta)
      : "memory");
}
// This block's rank in its cluster.
XK_DEVICE uint32_t cluster_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
// Waits until the barrier's phase of parity `parity` has completed.
XK_DEVICE void mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n"
      "}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}

// ---- bulk copy: `bytes` contiguous bytes (a multiple of 16, both addresses 16-byte aligned) from
// global memory at `src` into shared memory at `dst`, completing them on `bar`.
XK_DEVICE void load_1d(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
          "r"(dst),
      "l"(src), "r"(bytes), "r"(bar)
      : "memory");
}

// ---- bulk tensor copy: the box at coordinates (x inner, y outer) of a 2-D tensor map into shared
// memory at `dst`, completing its bytes on `bar`. Out-of-bounds elements are filled with zeros
// and still counted in the bytes.
XK_DEVICE void load_2d(uint32_t dst, const CUtensorMap* map, uint32_t bar, int32_t x, int32_t y) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4}], [%2];" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(x), "r"(y)
      : "memory");
}
// load_2d's box written to the same shared-memory offset of every block of the cluster in
// `cta_mask`, completing its bytes on the barrier at `bar`'s offset in each of them.
XK_DEVICE void load_2d_multicast(uint32_t dst, const CUtensorMap* map, uint32_t bar, int32_t x,
                                 int32_t y, uint16_t cta_mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      ".multicast::cluster [%0], [%1, {%3, %4}], [%2], %5;" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(x), "r"(y), "h"(cta_mask)
      : "memory");
}
// The box at coordinates (x, y, z, w), innermost first, of a 4-D tensor map into shared memory at
// `dst`, completing its bytes on `bar` (zeros outside the tensor, counted in the bytes).
XK_DEVICE void load_4d(uint32_t dst, const CUtensorMap* map, uint32_t bar, int32_t x, int32_t y,
                       int32_t z, int32_t w) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5, %6}], [%2];" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(x), "r"(y), "r"(z), "r"(w)
      : "memory");
}
// The box at (x, y) of a 2-D tensor map from shared memory at `src` (rows outside the tensor are
// not written), as part of this thread's current bulk group.
XK_DEVICE void store_2d(const CUtensorMap* map, uint32_t src, int32_t x, int32_t y) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];" ::"l"(
                   reinterpret_cast<uint64_t>(map)),
               "r"(src), "r"(x), "r"(y)
               : "memory");
}
XK_DEVICE void bulk_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
// Waits until at most kPending of this thread's bulk groups are still reading shared memory.
template <int kPending>
XK_DEVICE void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(kPending) : "memory");
}
// Waits until at most kPending of this thread's bulk groups are still in flight (writes done).
template <int kPending>
XK_DEVICE void bulk_wait() {
  asm volatile("cp.async.bulk.wait_group %0;" ::"n"(kPending) : "memory");
}
// Orders this thread's ordinary shared-memory writes before the async proxy's reads (TMA store).
XK_DEVICE void fence_async_shared() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
// Named barriers among `count` threads (a multiple of 32): sync waits, arrive does not.
XK_DEVICE void named_sync(uint32_t id, uint32_t count) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(count) : "memory");
}
XK_DEVICE void named_arrive(uint32_t id, uint32_t count) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(count) : "memory");
}
// named_sync that also tells every thread whether `pred` held in any of the `count` threads.
XK_DEVICE bool named_any(uint32_t id, uint32_t count, bool pred) {
  uint32_t r;
  asm volatile(
      "{\n"
      ".reg .pred p, q;\n"
      "setp.ne.u32 p, %1, 0;\n"
      "bar.red.or.pred q, %2, %3, p;\n"
      "selp.u32 %0, 1, 0, q;\n"
      "}\n"
      : "=r"(r)
      : "r"(static_cast<uint32_t>(pred)), "r"(id), "r"(count)
      : "memory");
  return r != 0;
}

XK_DEVICE void prefetch_map(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

// ---- host: cuTensorMapEncodeTiled through the runtime's driver entry point.
using EncodeTiledFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                                   const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                                   const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                   CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
inline cudaError_t EncodeTiled(EncodeTiledFn* out) {
  static EncodeTiledFn encode = nullptr;
  if (encode == nullptr) {  // benign race: every thread finds the same entry point
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found;
    XK_CUDA_TRY(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000,
                                                 cudaEnableDefault, &found));
    if (found != cudaDriverEntryPointSuccess || fn == nullptr) return cudaErrorNotSupported;
    encode = reinterpret_cast<EncodeTiledFn>(fn);
  }
  *out = encode;
  return cudaSuccess;
}

// A 2-D tensor map over `rows` x `cols` elements of `bytes_per_elem` (row pitch `ld` elements,
// 16-byte aligned base and pitch), boxes of box_rows x box_cols, 128-byte swizzle (box_cols *
// bytes_per_elem must be 128).
inline cudaError_t EncodeTensorMap2d(CUtensorMap* map, const void* base, CUtensorMapDataType type,
                                     int bytes_per_elem, int64_t rows, int64_t cols, int64_t ld,
                                     int box_rows, int box_cols) {
  EncodeTiledFn encode = nullptr;
  XK_CUDA_TRY(EncodeTiled(&encode));
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(ld * bytes_per_elem)};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(box_cols), static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t elem_strides[2] = {1, 1};
  const CUresult r = encode(map, type, 2, const_cast<void*>(base), dims, strides, box, elem_strides,
                            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

// A 4-D tensor map of dims[0] (contiguous) x dims[1] x dims[2] x dims[3] elements, strides of
// dims 1..3 in elements (multiples of 16 bytes), boxes of box[0..3] elements, 128-byte swizzle
// (box[0] * bytes_per_elem must be 128).
inline cudaError_t EncodeTensorMap4d(CUtensorMap* map, const void* base, CUtensorMapDataType type,
                                     int bytes_per_elem, const int64_t (&dims)[4],
                                     const int64_t (&strides)[3], const int (&box)[4]) {
  EncodeTiledFn encode = nullptr;
  XK_CUDA_TRY(EncodeTiled(&encode));
  cuuint64_t d[4], st[3];
  cuuint32_t bx[4];
  const cuuint32_t elem_strides[4] = {1, 1, 1, 1};
  for (int i = 0; i < 4; ++i) {
    d[i] = static_cast<cuuint64_t>(dims[i]);
    bx[i] = static_cast<cuuint32_t>(box[i]);
  }
  for (int i = 0; i < 3; ++i) st[i] = static_cast<cuuint64_t>(strides[i] * bytes_per_elem);
  const CUresult r = encode(map, type, 4, const_cast<void*>(base), d, st, bx, elem_strides,
                            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

}  // namespace xkernels::tma

#endif  // XKERNELS_TMA_H_
