// One kernel skeleton for every "reduce a row, then rewrite it" op (norms, softmax).
//
// A row of `cols` elements is split into vectors of V elements (16 bytes when pointers, strides
// and cols allow, else 1); each thread holds VPT vectors in registers as floats, so the row is read
// from memory once. The row's statistics are all-reduced across the threads that hold it, which
// is one of three scopes, chosen by row length:
//   kGroup   `group` (<= 32) lanes of a warp per row, several rows per block (short rows, QK-norm)
//   kBlock   one block per row
//   kCluster a thread-block cluster of up to 8 blocks per row (sm_90), through distributed
//            shared memory: rows up to 8 * 512 * 4 vectors (131072 bf16) stay in registers;
//            clusters are persistent (each takes many rows) once the grid exceeds a wave
// RowKernelSmem holds rows in shared memory instead, over clusters of up to 8 blocks of 128 KB
// (rows up to 1 MB): rows past the registers' reach, and for ops without weights, rows of 64 KB
// or more in grids past a wave.
// Rows longer than that, or not in 16-byte vectors, take RowKernelLong: two passes over memory,
// one block per row.
//
// An Op supplies:
//   Stats, Attr (scalars), Param (per-row result of the reduction)
//   kWeight, kBias, kFusedAdd
//   kNoL1: rows are loaded without allocating in L1, which keeps the columns there (except in
//       grids of a few blocks: see Launch)
//   kStaged: persistent clusters stage the next row in shared memory (RowKernelStaged)
//   prep(x, attr) -> the value reduced and applied    (softmax scales; norms keep x)
//   stats<VPT, V>(get, ok, reduce, attr, shift, count) -> Stats of the values get(j, k) (vectors
//       j with ok[j]) held by all the threads that share `reduce`, an all-reducer: reduce(v,
//       merge); `count` is how many values those threads hold together (known without reducing)
//   kShift: stats gets `shift`, the row's first input value (else 0), a common reference point
//       that every thread of the row can read without communicating
//   identity() -> Stats;  Merge{}(a, b) -> Stats     (combines the Stats of disjoint parts of a
//       row: across the blocks of a cluster, the chunks of a long row; commutative)
//   finalize(stats, cols, attr) -> Param
//   apply(v, w, b, param, attr) -> output value
// With kFusedAdd the kept value is round_to_T(input + residual), which is also written to
// residual_out; outputs may alias their inputs exactly (in-place), never partially.
#ifndef XKERNELS_ROW_KERNEL_H_
#define XKERNELS_ROW_KERNEL_H_

#include <cooperative_groups.h>

#include <algorithm>
#include <type_traits>

#include "xkernels/common.h"
#include "xkernels/reduce.h"
#include "xkernels/vec.h"

namespace xkernels::rowwise {

enum class Scope { kGroup, kBlock, kCluster };

template <typename T, typename W>
struct RowArgs {
  T* out = nullptr;
  RowStride out_rs;
  T* res_out = nullptr;  // kFusedAdd only
  RowStride res_out_rs;
  const T* in = nullptr;
  RowStride in_rs;
  const T* res = nullptr;  // kFusedAdd only
  RowStride res_rs;
  const W* weight = nullptr;  // [cols], kWeight only
  const W* bias = nullptr;    // [cols], kBias only
  int64_t rows = 0;
  int cols = 0;
  int group = 32;  // lanes per row in Scope::kGroup
};

// Where one row starts in each tensor of RowArgs, in elements (0 for a row past the end, so that
// no address is formed outside the tensors): RowAt computes each offset where it is used,
// RowOffsets holds them computed ahead (RowKernel's latency grids: see there).
template <typename T, typename W>
struct RowAt {
  const RowArgs<T, W>& a;
  int64_t row;
  bool ok;
  XK_DEVICE int64_t in() const { return ok ? a.in_rs.offset(row) : 0; }
  XK_DEVICE int64_t res() const { return ok ? a.res_rs.offset(row) : 0; }
  XK_DEVICE int64_t out() const { return ok ? a.out_rs.offset(row) : 0; }
  XK_DEVICE int64_t res_out() const { return ok ? a.res_out_rs.offset(row) : 0; }
};

struct RowOffsets {
  int64_t in_ = 0, res_ = 0, out_ = 0, res_out_ = 0;

  template <class Op, typename T, typename W>
  XK_DEVICE static RowOffsets of(const RowAt<T, W>& at) {
    RowOffsets o;
    o.in_ = at.in();
    o.out_ = at.out();
    if constexpr (Op::kFusedAdd) o.res_ = at.res(), o.res_out_ = at.res_out();
    return o;
  }
  XK_DEVICE int64_t in() const { return in_; }
  XK_DEVICE int64_t res() const { return res_; }
  XK_DEVICE int64_t out() const { return out_; }
  XK_DEVICE int64_t res_out() const { return res_out_; }
  // Computed here, before whatever follows (a compiler barrier on each offset).
  template <class Op>
  XK_DEVICE void pin() {
    asm volatile("" : "+l"(in_), "+l"(out_));
    if constexpr (Op::kFusedAdd) asm volatile("" : "+l"(res_), "+l"(res_out_));
  }
};

// Load this thread's VPT vectors of one row (vector indices first + j * stride) and, with
// kFusedAdd, the residual's into r; the row without allocating in L1 where kNoL1. They stay in
// registers in their storage type (half the registers of floats for 16-bit types) and are
// converted again where used. Nothing waits for them here: callers issue their other loads
// before the first use.
template <class Op, typename T, typename W, int V, int VPT, bool kNoL1 = Op::kNoL1, class At>
XK_DEVICE void load_row(const RowArgs<T, W>& a, const At& at, bool row_ok, int64_t first,
                        int stride, int n, Vec<T, V> (&x)[VPT], Vec<T, V> (&r)[VPT],
                        bool (&ok)[VPT]) {
  const T* px = a.in + at.in();
  const T* pr = Op::kFusedAdd ? a.res + at.res() : nullptr;
#pragma unroll
  for (int j = 0; j < VPT; ++j) {
    const int64_t i = first + static_cast<int64_t>(j) * stride;
    ok[j] = row_ok && i < n;
    if (ok[j]) {
      if constexpr (kNoL1) {
        x[j].load_no_l1(px + i * V);
      } else {
        x[j].load(px + i * V);
      }
      if constexpr (Op::kFusedAdd) r[j].load(pr + i * V);
    } else {
#pragma unroll
      for (int k = 0; k < V; ++k) x[j][k] = from_float<T>(0.f);
    }
  }
}

// kFusedAdd: the kept vector becomes round(input + residual), which is written to residual_out.
template <class Op, typename T, typename W, int V, int VPT, class At>
XK_DEVICE void add_residual(const RowArgs<T, W>& a, const At& at, int64_t first, int stride,
                            Vec<T, V> (&x)[VPT], const Vec<T, V> (&r)[VPT],
                            const bool (&ok)[VPT]) {
  if constexpr (Op::kFusedAdd) {
    T* po = a.res_out + at.res_out();
#pragma unroll
    for (int j = 0; j < VPT; ++j) {
      if (!ok[j]) continue;
#pragma unroll
      for (int k = 0; k < V; ++k) x[j][k] = from_float<T>(to_float(x[j][k]) + to_float(r[j][k]));
      x[j].store(po + (first + static_cast<int64_t>(j) * stride) * V);
    }
  }
}

// Statistics of the kept values of all the threads that share `reduce` (vectors that are not ok
// hold zeros and are skipped).
template <class Op, typename T, int V, int VPT, class Reducer>
XK_DEVICE typename Op::Stats row_stats(const Vec<T, V> (&x)[VPT], const bool (&ok)[VPT],
                                       const Reducer& reduce, const typename Op::Attr& attr,
                                       float shift, int count) {
  return Op::template stats<VPT, V>(
      [&](int j, int k) { return Op::prep(to_float(x[j][k]), attr); }, ok, reduce, attr, shift,
      count);
}

// The row's first value, for ops with kShift (not fused-add ops: their kept value is computed).
template <class Op, typename T, typename W, class At>
XK_DEVICE float row_shift(const RowArgs<T, W>& a, const At& at, bool row_ok) {
  if constexpr (Op::kShift) {
    static_assert(!Op::kFusedAdd, "shifted statistics read the input row");
    return row_ok ? to_float(a.in[at.in()]) : 0.f;
  } else {
    return 0.f;
  }
}

// Weights and biases of this thread's vectors. With kEarly (grids of about one wave, where each
// row's latency is the kernel's time) they are loaded before the reduction, where registers
// allow, so that their latency overlaps it. Measured on the H100, bf16: rmsnorm 1x4096 2.2 ->
// 1.8 us; but with many rows the registers cost occupancy (layernorm 32768x8192 2628 -> 1382
// GB/s), so larger grids load them after the reduction.
template <class Op, typename T, typename W, int V, int VPT, bool kEarly>
struct Columns {
  static constexpr int kBytes = VPT * V * static_cast<int>(sizeof(W)) * (Op::kWeight + Op::kBias);
  static constexpr bool kAhead = kEarly && kBytes > 0 && kBytes <= (Op::kFusedAdd ? 64 : 128);
  Vec<W, V> w[kAhead && Op::kWeight ? VPT : 1], b[kAhead && Op::kBias ? VPT : 1];

  XK_DEVICE void load(const RowArgs<T, W>& a, int64_t first, int stride, const bool (&ok)[VPT]) {
    if constexpr (kAhead) {
#pragma unroll
      for (int j = 0; j < VPT; ++j) {
        if (!ok[j]) continue;
        const int64_t i = first + static_cast<int64_t>(j) * stride;
        if constexpr (Op::kWeight) w[j].load(a.weight + i * V);
        if constexpr (Op::kBias) b[j].load(a.bias + i * V);
      }
    }
  }
  // Vector j (index i) as floats, from registers or from memory.
  XK_DEVICE void get(const RowArgs<T, W>& a, int j, int64_t i, float (&fw)[V], float (&fb)[V]) const {
#pragma unroll
    for (int k = 0; k < V; ++k) fw[k] = 1.f, fb[k] = 0.f;
    if constexpr (kAhead) {
#pragma unroll
      for (int k = 0; k < V; ++k) {
        if constexpr (Op::kWeight) fw[k] = to_float(w[j][k]);
        if constexpr (Op::kBias) fb[k] = to_float(b[j][k]);
      }
    } else {
      if constexpr (Op::kWeight) Vec<W, V>::cast_load(fw, a.weight + i * V);
      if constexpr (Op::kBias) Vec<W, V>::cast_load(fb, a.bias + i * V);
    }
  }
  XK_DEVICE void ready() const {}  // before the first get: nothing to wait for
};

// RowKernelFlat's columns in shared memory: each thread copies its own column vectors there
// (cp.async, no registers held) as the row is loaded, and reads them back after the reduction.
// 16-byte column vectors; VPT x (weight, bias) x kThreads of them per block.
template <class Op, typename T, typename W, int V, int VPT, int kThreads>
struct SharedColumns {
  static_assert(sizeof(W) * V == 16, "16-byte column vectors");
  static constexpr int kPerVec = Op::kWeight + Op::kBias;
  Vec<W, V>* s = storage();  // [VPT][kPerVec][kThreads]

  XK_DEVICE static Vec<W, V>* storage() {
    __shared__ Vec<W, V> staged[VPT * kPerVec * kThreads];
    return staged;
  }
  XK_DEVICE void load(const RowArgs<T, W>& a, int first, int stride, const bool (&ok)[VPT]) {
    const int t = static_cast<int>(threadIdx.x);
#pragma unroll
    for (int j = 0; j < VPT; ++j) {
      if (!ok[j]) continue;
      const int i = first + j * stride;
      if constexpr (Op::kWeight) copy16(&s[(j * kPerVec) * kThreads + t], a.weight + i * V);
      if constexpr (Op::kBias) copy16(&s[(j * kPerVec + 1) * kThreads + t], a.bias + i * V);
    }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;" ::: "memory");
#endif
  }
  // This thread's copies have landed (it reads only its own).
  XK_DEVICE void ready() const {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_all;" ::: "memory");
#endif
  }
  XK_DEVICE void get(const RowArgs<T, W>&, int j, int64_t, float (&fw)[V], float (&fb)[V]) const {
    const int t = static_cast<int>(threadIdx.x);
#pragma unroll
    for (int k = 0; k < V; ++k) fw[k] = 1.f, fb[k] = 0.f;
    if constexpr (Op::kWeight) {
      const Vec<W, V> w = s[(j * kPerVec) * kThreads + t];
#pragma unroll
      for (int k = 0; k < V; ++k) fw[k] = to_float(w[k]);
    }
    if constexpr (Op::kBias) {
      const Vec<W, V> b = s[(j * kPerVec + 1) * kThreads + t];
#pragma unroll
      for (int k = 0; k < V; ++k) fb[k] = to_float(b[k]);
    }
  }

 private:
  XK_DEVICE static void copy16(Vec<W, V>* dst, const W* src) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(reduce::smem_addr(dst)),
                 "l"(src) : "memory");
#else
    *dst = *reinterpret_cast<const Vec<W, V>*>(src);
#endif
  }
};

// Write this thread's VPT vectors of one row through Op::apply.
template <class Op, typename T, typename W, int V, int VPT, class At, class Cols>
XK_DEVICE void store_row(const RowArgs<T, W>& a, const At& at, int64_t first, int stride,
                         const Vec<T, V> (&x)[VPT], const bool (&ok)[VPT], const Cols& cols,
                         const typename Op::Param& p, const typename Op::Attr& attr) {
  T* po = a.out + at.out();
#pragma unroll
  for (int j = 0; j < VPT; ++j) {
    if (!ok[j]) continue;
    const int64_t i = first + static_cast<int64_t>(j) * stride;
    float w[V], b[V], y[V];
    cols.get(a, j, i, w, b);
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const float v = Op::prep(to_float(x[j][k]), attr);
      y[k] = Op::apply(v, w[k], b[k], p, attr);
    }
    Vec<T, V>::cast_store(po + i * V, y);
  }
}

// store_row into shared memory: vector j (index first + j * stride of the row) to dst[j * stride].
// (Not store_row with a destination: its kernels' PTX would change, in instruction order only.)
template <class Op, typename T, typename W, int V, int VPT, class Cols>
XK_DEVICE void stage_row(const RowArgs<T, W>& a, Vec<T, V>* dst, int64_t first, int stride,
                         const Vec<T, V> (&x)[VPT], const bool (&ok)[VPT], const Cols& cols,
                         const typename Op::Param& p, const typename Op::Attr& attr) {
#pragma unroll
  for (int j = 0; j < VPT; ++j) {
    if (!ok[j]) continue;
    float w[V], b[V], y[V];
    cols.get(a, j, first + static_cast<int64_t>(j) * stride, w, b);
#pragma unroll
    for (int k = 0; k < V; ++k) {
      y[k] = Op::apply(Op::prep(to_float(x[j][k]), attr), w[k], b[k], p, attr);
    }
    Vec<T, V>::cast_store(reinterpret_cast<T*>(dst + j * stride), y);
  }
}

// At most 4 vectors per thread and 512 threads per block: every kernel fits in 128 registers
// without spilling.
constexpr int kMaxThreads = 512;

// Occupancy floors, where the kernel fits them without spilling (early columns and the fused add
// need more registers):
//  - one block per row, 16-bit, 2 vectors per thread: a full SM of 4 blocks of 512 threads (at
//    most 32 registers; 3 blocks and 40 with float weights, which spill at 32). Measured on the
//    H100: layernorm 32768x8192 bf16 at 44 registers (2 blocks) 2390 GB/s, at 32: 2778.
//  - clusters: 2 blocks of 512 threads per SM (at most 64 registers; softmax bf16 took 86,
//    so one block per SM).
template <class Op, typename T, typename W, int VPT, Scope S, bool kEarly>
constexpr int min_blocks() {
  if (kEarly || Op::kFusedAdd) return 1;
  if (S == Scope::kCluster) return 2;
  if (S != Scope::kBlock || sizeof(T) != 2 || VPT > 2) return 1;
  return sizeof(W) == 2 || !(Op::kWeight || Op::kBias) ? 4 : 3;
}

// kL1: rows allocate in L1 even where Op::kNoL1 (grids of a few blocks, see Launch).
template <class Op, typename T, typename W, int V, int VPT, Scope S, bool kEarly, bool kL1 = false>
__global__ void __launch_bounds__(kMaxThreads, min_blocks<Op, T, W, VPT, S, kEarly>())
    RowKernel(const RowArgs<T, W> a, const typename Op::Attr attr) {
  using Stats = typename Op::Stats;
  __shared__ uint4 smem[32];
  __shared__ reduce::ClusterExchange exchange;  // kCluster only
  const int n = a.cols / V;

  int64_t first;  // this thread's first vector index in its row
  int stride;     // distance between its vectors
  int64_t base, step;
  int rows_per_block = 1;
  if constexpr (S == Scope::kGroup) {
    rows_per_block = blockDim.x / a.group;
    first = threadIdx.x % a.group;
    stride = a.group;
    base = static_cast<int64_t>(blockIdx.x) * rows_per_block;
    step = static_cast<int64_t>(gridDim.x) * rows_per_block;
  } else if constexpr (S == Scope::kBlock) {
    first = threadIdx.x;
    stride = blockDim.x;
    base = blockIdx.x;
    step = gridDim.x;
  } else {
    const unsigned c = cooperative_groups::this_cluster().num_blocks();
    const unsigned rank = cooperative_groups::this_cluster().block_rank();
    first = static_cast<int64_t>(rank) * blockDim.x * VPT + threadIdx.x;
    stride = blockDim.x;
    base = blockIdx.x / c;
    step = gridDim.x / c;
  }

  // Values the reduction scope holds: the whole row, or this block's share of it.
  int count = a.cols;
  if constexpr (S == Scope::kCluster) {
    const int64_t share = static_cast<int64_t>(blockDim.x) * VPT;
    const int64_t left = n - (first - threadIdx.x);  // vectors from this block's first one
    count = static_cast<int>((left <= 0 ? 0 : left < share ? left : share) * V);
  }

  if constexpr (S == Scope::kCluster) reduce::cluster_exchange_init(&exchange);
  int64_t t = 0;  // rows done, for the cluster exchange
  // One row (one per group of lanes in kGroup), at offsets `at` (RowAt or RowOffsets).
  const auto pass = [&](int64_t row, bool row_ok, const auto& at) {
    // Every load is issued before the first wait: the row (and residual), the early columns,
    // then the shift. Read first, the shift's use waited before the row's loads were issued,
    // two latencies in a row. Measured on the H100, bf16 layernorm: 32768x8192 2887 -> 2980
    // GB/s, 8192x4096 2781 -> 2809, 128x4096 2.78 -> 2.50 us, 1x4096 2.24 -> 1.98 us. (The
    // early columns ahead of the fused add's store measured the same as after it.)
    Vec<T, V> x[VPT], r[VPT];
    bool ok[VPT];
    load_row<Op, T, W, V, VPT, Op::kNoL1 && !kL1>(a, at, row_ok, first, stride, n, x, r, ok);
    Columns<Op, T, W, V, VPT, kEarly> cols;
    cols.load(a, first, stride, ok);
    const float shift = row_shift<Op>(a, at, row_ok);
    add_residual<Op, T, W, V, VPT>(a, at, first, stride, x, r, ok);
    Stats s;
    if constexpr (S == Scope::kGroup) {
      s = row_stats<Op, T, V, VPT>(x, ok, reduce::GroupReducer{a.group}, attr, shift, count);
    } else {
      s = row_stats<Op, T, V, VPT>(x, ok, reduce::BlockReducer<kEarly>{smem}, attr, shift,
                                   count);
      if constexpr (S == Scope::kCluster) {
        s = reduce::cluster_all_reduce(s, typename Op::Merge{}, &exchange, t++, Op::identity());
      }
    }
    if (!row_ok) return;
    const typename Op::Param p = Op::finalize(s, a.cols, attr);
    store_row<Op>(a, at, first, stride, x, ok, cols, p, attr);
  };
  // Latency grids (kEarly) make one pass: Launch gives them a block, a group of lanes or a
  // cluster per row. Its offsets, and whether there is a row, are computed before pdl_wait(), so
  // that reading the kernel's parameters and the address arithmetic overlap the kernel before
  // (left to the compiler, both followed the wait, and layernorm's shift load was issued last,
  // after its own offset arithmetic). Measured on the H100, A/B harness, CUDA graphs of up to
  // 1000 calls, inputs rotating over 3x the L2, bf16, us, before -> after (fused_add_rmsnorm
  // with out=):
  //   1x4096    layernorm 1.839 -> 1.539, rmsnorm 1.385 -> 1.358, fused_add_rmsnorm 1.651 -> 1.391
  //   128x4096  layernorm 2.549 -> 2.370, rmsnorm 2.219 -> 1.990, fused_add_rmsnorm 2.791 -> 2.560
  //   32x128    layernorm 1.856 -> 1.377, rmsnorm 1.400 -> 1.316, fused_add_rmsnorm 1.670 -> 1.348
  // A kernel with no loop at all (the harness's) reached 1.360 for layernorm 1x4096: what is left
  // after the wait is the row check, the vector bounds and the loads. Keeping ptxas from sinking
  // the early columns' loads to the reduction (a never-taken branch after them) gained another
  // 1-2% there; not taken, as a trick that holds only as long as ptxas schedules that way.
  if constexpr (kEarly) {
    const int64_t row = S == Scope::kGroup ? base + threadIdx.x / a.group : base;
    const bool row_ok = row < a.rows;
    RowOffsets at = RowOffsets::of<Op>(RowAt<T, W>{a, row, row_ok});
    at.pin<Op>();
    int live = base < a.rows;
    asm volatile("" : "+r"(live));
    pdl_wait();
    pdl_release();
    if (live) pass(row, row_ok, at);
    base += step;  // past the last row, where the grid is Launch's: else the loop takes the rest
  } else {
    pdl_wait();
    pdl_release();
  }
  // `base` is uniform over the block (over the cluster), so every thread runs the same number
  // of iterations and reaches every shuffle, barrier and exchange.
  for (; base < a.rows; base += step) {
    const int64_t row = S == Scope::kGroup ? base + threadIdx.x / a.group : base;
    const bool row_ok = row < a.rows;
    pass(row, row_ok, RowAt<T, W>{a, row, row_ok});
  }
  // No partner writes to this block after its last exchange: each waited for all of them.
}

// One block of kThreads per row, VPT 16-byte vectors per thread at compile-time distances, rows
// of more than (VPT - 1) * kThreads vectors (only a thread's last vector may fall past the row),
// in grids past early_columns: RowKernel's runtime strides, persistent loop and per-vector bounds
// cost registers, hence rows in flight per SM (bf16 fused_add_rmsnorm, 2 vectors x 256 threads:
// 56 registers, 4 rows per SM; here 4 x 128 threads: 56 registers, 9 rows; layernorm 4 x 256:
// 71 -> 48 registers, 3 -> 5 rows). Rows load through L1. The columns are read from memory
// after the reduction (kMemory), or loaded with the row: into registers (kRegisters, Liger's
// shape for rmsnorm, with kMinBlocks blocks per SM), or copied into shared memory (kShared).
// kReread: the row is read twice, Inductor's looped reduction in one block: kept in L2 (and L1)
// by an evict_last policy for the reduction, then read again (evict_first) and written, with the
// columns loaded into registers after the reduction (kCols = kRegisters). The row's registers
// are free during the reduction, so the whole row is in flight at more rows per SM.
// Measured: see LaunchRowsV.
enum class ColumnsIn { kMemory, kRegisters, kShared };
template <class Op, typename T, typename W, int kThreads, int VPT,
          ColumnsIn kCols = ColumnsIn::kMemory, int kMinBlocks = 0, bool kReread = false>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    RowKernelFlat(const RowArgs<T, W> a, const typename Op::Attr attr) {
  static_assert(!kReread || (kCols != ColumnsIn::kShared && !Op::kFusedAdd),
                "a re-read row takes its columns from memory after the reduction, and has no "
                "residual");
  constexpr int V = static_cast<int>(16 / sizeof(T));
  __shared__ uint4 smem[32];
  const int n = a.cols / V;
  const int64_t row = blockIdx.x;
  pdl_wait();
  pdl_release();
  const T* px = a.in + a.in_rs.offset(row);
  const T* pr = Op::kFusedAdd ? a.res + a.res_rs.offset(row) : nullptr;
  // Not load_row: its 64-bit indices and a bound per vector cost the registers this kernel is
  // for (bf16 fused_add_rmsnorm 128 x 4: 56 -> 72, layernorm 256 x 4: 48 -> 56).
  Vec<T, V> x[VPT], r[VPT];
  bool ok[VPT];
  [[maybe_unused]] const uint64_t keep = kReread ? l2_policy<Evict::kLast>() : 0;
#pragma unroll
  for (int j = 0; j < VPT; ++j) {
    const int i = static_cast<int>(threadIdx.x) + j * kThreads;
    ok[j] = j + 1 < VPT || i < n;
    if (ok[j]) {
      if constexpr (kReread) {
        x[j].template load_evict<Evict::kLast>(px + i * V, keep);
      } else {
        x[j].load(px + i * V);
      }
      if constexpr (Op::kFusedAdd) r[j].load(pr + i * V);
    } else {
#pragma unroll
      for (int k = 0; k < V; ++k) x[j][k] = from_float<T>(0.f);
    }
  }
  std::conditional_t<kCols == ColumnsIn::kShared, SharedColumns<Op, T, W, V, VPT, kThreads>,
                     Columns<Op, T, W, V, VPT, kCols == ColumnsIn::kRegisters>>
      cols;
  if constexpr (!kReread) cols.load(a, threadIdx.x, kThreads, ok);  // a no-op for kMemory
  const RowAt<T, W> at{a, row, true};
  const float shift = row_shift<Op>(a, at, true);
  add_residual<Op, T, W, V, VPT>(a, at, threadIdx.x, kThreads, x, r, ok);
  const typename Op::Stats s =
      row_stats<Op, T, V, VPT>(x, ok, reduce::BlockReducer<false, kThreads / 32>{smem}, attr,
                               shift, a.cols);
  if constexpr (kReread) {
    const uint64_t drop = l2_policy<Evict::kFirst>();
#pragma unroll
    for (int j = 0; j < VPT; ++j) {
      const int i = static_cast<int>(threadIdx.x) + j * kThreads;
      if (ok[j]) x[j].template load_evict<Evict::kFirst>(px + i * V, drop);
    }
    cols.load(a, threadIdx.x, kThreads, ok);  // a no-op for kMemory
  }
  cols.ready();
  store_row<Op>(a, at, threadIdx.x, kThreads, x, ok, cols, Op::finalize(s, a.cols, attr), attr);
}

// Persistent blocks of kThreads, VPT vectors per thread, each taking rows blockIdx.x, + gridDim.x,
// ...: the next row's loads are issued before this row is reduced and stored, so that a block
// keeps loads in flight through its reduction and stores, and the columns are loaded once per
// block (into registers where Columns fits them). The block reduction alternates between two
// halves of its scratch, so that it needs no trailing barrier. Measured: see LaunchOneWave.
template <class Op, typename T, typename W, int kThreads, int VPT>
__global__ void __launch_bounds__(kThreads)
    RowKernelPipe(const RowArgs<T, W> a, const typename Op::Attr attr) {
  constexpr int V = static_cast<int>(16 / sizeof(T));
  static_assert(kThreads <= 512, "two halves of at most 16 warp partials");
  __shared__ uint4 smem[32];
  const int n = a.cols / V;
  const int64_t step = gridDim.x;
  int64_t row = blockIdx.x;  // < a.rows: the grid has at most one block per row
  Vec<T, V> x[VPT], r[VPT];
  bool ok[VPT];
  pdl_wait();
  pdl_release();
  load_row<Op, T, W, V, VPT, false>(a, RowAt<T, W>{a, row, true}, true, threadIdx.x, kThreads, n,
                                    x, r, ok);
  Columns<Op, T, W, V, VPT, true> cols;
  cols.load(a, threadIdx.x, kThreads, ok);
  float shift = row_shift<Op>(a, RowAt<T, W>{a, row, true}, true);
  for (int t = 0; row < a.rows; row += step, ++t) {
    const int64_t next = row + step;
    const bool more = next < a.rows;  // uniform over the block
    Vec<T, V> nx[VPT], nr[VPT];
    bool nok[VPT];
    load_row<Op, T, W, V, VPT, false>(a, RowAt<T, W>{a, next, more}, more, threadIdx.x, kThreads,
                                      n, nx, nr, nok);
    const float next_shift = row_shift<Op>(a, RowAt<T, W>{a, next, more}, more);
    const RowAt<T, W> at{a, row, true};
    add_residual<Op, T, W, V, VPT>(a, at, threadIdx.x, kThreads, x, r, ok);
    const typename Op::Stats s = row_stats<Op, T, V, VPT>(
        x, ok, reduce::BlockReducer<false, kThreads / 32>{smem + (t & 1) * 16}, attr, shift,
        a.cols);
    store_row<Op>(a, at, threadIdx.x, kThreads, x, ok, cols, Op::finalize(s, a.cols, attr), attr);
#pragma unroll
    for (int j = 0; j < VPT; ++j) x[j] = nx[j], r[j] = nr[j];
    shift = next_shift;
  }
}

// Persistent cluster rows, staged: while a block works on one row, its share of the next row is
// already on its way into shared memory (one bulk copy, issued by one thread, counted on an
// mbarrier), so each block keeps a load in flight through its reductions, exchange and stores.
// 16-byte vectors, VPT of them per thread, ops with kStaged (fused-add ops, two inputs, keep
// RowKernel). Measured on the H100 against RowKernel's persistent clusters, bf16 4096x131072:
// rmsnorm 2407 -> 2563 GB/s, layernorm 2189 -> 2467; softmax lost (2620 -> 2259; its long rows
// now take RowKernelSmem).
template <class Op, typename T, typename W, int V, int VPT>
__global__ void __launch_bounds__(kMaxThreads, 2)
    RowKernelStaged(const RowArgs<T, W> a, const typename Op::Attr attr) {
  static_assert(sizeof(T) * V == 16 && Op::kStaged && !Op::kFusedAdd,
                "16-byte vectors of one input");
  __shared__ uint4 smem[32];
  __shared__ reduce::ClusterExchange exchange;
  __shared__ alignas(128) Vec<T, V> stage[kMaxThreads * VPT];  // (blockDim.x * VPT) vectors
  __shared__ uint64_t full;                                     // counts the stage's bytes
  const unsigned c = cooperative_groups::this_cluster().num_blocks();
  const unsigned rank = cooperative_groups::this_cluster().block_rank();
  const int n = a.cols / V;
  const int64_t block_first = static_cast<int64_t>(rank) * blockDim.x * VPT;
  const int64_t first = block_first + threadIdx.x;  // this thread's first vector in its row
  const int stride = blockDim.x;
  const int64_t left = n - block_first;
  const int64_t most = static_cast<int64_t>(blockDim.x) * VPT;
  const int share = static_cast<int>(left <= 0 ? 0 : left < most ? left : most);
  const int count = share * V;
  int64_t base = blockIdx.x / c;
  const int64_t step = gridDim.x / c;

  if (threadIdx.x == 0) {
    reduce::mbarrier_init(&full, 1);
  }
  reduce::cluster_exchange_init(&exchange);  // its cluster barrier also publishes `full`
  pdl_wait();
  pdl_release();
  const auto fetch = [&](int64_t row) {  // thread 0: this block's share of `row` into the stage
    if (threadIdx.x == 0 && share > 0) {
      reduce::bulk_load(stage, a.in + a.in_rs.offset(row) + block_first * V,
                        static_cast<unsigned>(share) * 16u, &full);
    }
  };
  // The shift (kShift ops) is read a row ahead too: read when needed, its latency would follow
  // the stage's.
  float next_shift = 0.f;
  if (base < a.rows) {
    fetch(base);
    next_shift = row_shift<Op>(a, RowAt<T, W>{a, base, true}, true);
  }
  for (int64_t t = 0; base < a.rows; base += step, ++t) {
    const int64_t row = base;
    const float shift = next_shift;
    Vec<T, V> x[VPT];
    bool ok[VPT];
    if (share > 0) reduce::mbarrier_wait(&full, static_cast<unsigned>(t & 1));
#pragma unroll
    for (int j = 0; j < VPT; ++j) {
      ok[j] = first + static_cast<int64_t>(j) * stride < n && threadIdx.x + j * stride < share;
      if (ok[j]) {
        x[j] = stage[threadIdx.x + j * stride];
      } else {
#pragma unroll
        for (int k = 0; k < V; ++k) x[j][k] = from_float<T>(0.f);
      }
    }
    __syncthreads();  // every thread holds its values: the stage may be refilled
    if (base + step < a.rows) {
      fetch(base + step);
      next_shift = row_shift<Op>(a, RowAt<T, W>{a, base + step, true}, true);
    }
    Columns<Op, T, W, V, VPT, false> cols;
    typename Op::Stats s =
        row_stats<Op, T, V, VPT>(x, ok, reduce::BlockReducer<>{smem}, attr, shift, count);
    s = reduce::cluster_all_reduce(s, typename Op::Merge{}, &exchange, t, Op::identity());
    store_row<Op>(a, RowAt<T, W>{a, row, true}, first, stride, x, ok, cols,
                  Op::finalize(s, a.cols, attr), attr);
  }
  // No partner writes to this block after its last exchange (each waited for all of them), and
  // no bulk copy is left in flight (each one issued was waited for).
}

// Persistent cluster rows held in shared memory instead of registers. Each block's share of a
// row (at most `share_max` vectors) is cut into chunks of blockDim.x * kVPC vectors, which
// stream through a ring of kSlots chunk-sized slots of dynamic shared memory: each chunk
// arrives by one bulk copy (issued by one thread) counted on its slot's mbarrier. The statistics
// are reduced chunk by chunk as the chunks land; after the exchange the output pass rewrites the
// row chunk by chunk. Without kBulkStore each thread stores its vectors, and once every thread
// has read a slot, the chunk kSlots ahead is on its way into it. With kBulkStore each chunk is
// rewritten in its slot and sent out by one bulk store; once a chunk's store has read its slot
// (checked a chunk later, after this thread has rewritten the next one, so that the wait is
// rarely felt), the chunk kSlots after it is on its way into that slot. With more slots than a
// share has chunks, the next row is already arriving while this one is reduced and exchanged.
// Registers hold one chunk at a time, so a share is bounded by shared memory, not registers: a
// 256 KB row takes 2 blocks (one per SM, which pack the GPCs fully) instead of 8.
template <class Op, typename T, typename W, int V, int kVPC, int kSlots, bool kBulkStore>
__global__ void __launch_bounds__(1024)
    RowKernelSmem(const RowArgs<T, W> a, const typename Op::Attr attr, int share_max, int c) {
  static_assert(sizeof(T) * V == 16 && !Op::kFusedAdd, "16-byte vectors of one input");
  using Stats = typename Op::Stats;
  using Merge = typename Op::Merge;
  extern __shared__ uint4 dyn[];
  Vec<T, V>* ring = reinterpret_cast<Vec<T, V>*>(dyn);  // (kSlots, chunk) vectors
  __shared__ uint4 smem[32];
  __shared__ reduce::ClusterExchange exchange;
  __shared__ uint64_t full[kSlots];  // one mbarrier per slot
  // c blocks per row: a cluster of them, or one block launched without clusters.
  const unsigned rank = c > 1 ? cooperative_groups::this_cluster().block_rank() : 0u;
  const int n = a.cols / V;
  const int64_t block_first = static_cast<int64_t>(rank) * share_max;
  const int64_t left = n - block_first;
  const int share = static_cast<int>(left <= 0 ? 0 : left < share_max ? left : share_max);
  const int chunk = blockDim.x * kVPC;
  const int chunks = (share + chunk - 1) / chunk;  // per row, at most kSlots
  const int64_t base = blockIdx.x / c, step = gridDim.x / c;

  if (threadIdx.x == 0) {
    for (int k = 0; k < kSlots; ++k) reduce::mbarrier_init(&full[k], 1);
  }
  if (c > 1) {
    reduce::cluster_exchange_init(&exchange);  // its cluster barrier also publishes `full`
  } else {
    __syncthreads();
  }
  pdl_wait();
  pdl_release();
  // Thread 0: chunk k of the row `ahead` rows after `row` into `slot`, where that row exists.
  const auto fetch = [&](int64_t row, int ahead, int k, int slot) {
    row += ahead * step;
    if (row >= a.rows) return;
    const int m = min(chunk, share - k * chunk);
    reduce::bulk_load(ring + slot * chunk,
                      a.in + a.in_rs.offset(row) + (block_first + k * chunk) * V,
                      static_cast<unsigned>(m) * 16u, &full[slot]);
  };
  // kBulkStore: thread 0 fetches the block's chunks in sequence, each into the next slot round
  // the ring: chunk fk of the row frow into slot fslot.
  int64_t frow = base;
  int fk = 0, fslot = 0;
  const auto fetch_next = [&]() {
    fetch(frow, 0, fk, fslot);
    if (++fk == chunks) fk = 0, frow += step;
    if (++fslot == kSlots) fslot = 0;
  };
  // This thread's vectors j of chunk k, from `slot` once its fill of `parity` has landed:
  // indices threadIdx.x + j * blockDim.x of the slot, where below the share.
  const auto read = [&](int k, int slot, unsigned parity, Vec<T, V>(&x)[kVPC], bool(&ok)[kVPC]) {
    reduce::mbarrier_wait(&full[slot], parity);
    const Vec<T, V>* src = ring + slot * chunk;
#pragma unroll
    for (int j = 0; j < kVPC; ++j) {
      const int i = static_cast<int>(threadIdx.x) + j * static_cast<int>(blockDim.x);
      ok[j] = k * chunk + i < share;
      if (ok[j]) {
        x[j] = src[i];
      } else {
#pragma unroll
        for (int e = 0; e < V; ++e) x[j][e] = from_float<T>(0.f);
      }
    }
  };
  // Chunks fill the slots in sequence, round after round: chunk k of the row after row r sits
  // `chunks` slots after chunk k of row r; each round flips the fill's parity.
  if (chunks > 0 && threadIdx.x == 0) {
    for (int g = 0; g < kSlots; ++g) {
      if constexpr (kBulkStore) {
        fetch_next();
      } else {
        fetch(base, g / chunks, g % chunks, g);
      }
    }
  }
  int slot0 = 0;         // slot of the row's first chunk
  unsigned parity0 = 0;  // parity of its fill
  // kShift: a row ahead
  float next_shift = base < a.rows ? row_shift<Op>(a, RowAt<T, W>{a, base, true}, true) : 0.f;
  for (int64_t t = 0, row = base; row < a.rows; ++t, row += step) {
    const float shift = next_shift;
    if (row + step < a.rows) {
      next_shift = row_shift<Op>(a, RowAt<T, W>{a, row + step, true}, true);
    }
    Stats s = Op::identity();
    for (int k = 0, slot = slot0, parity = parity0; k < chunks; ++k) {
      Vec<T, V> x[kVPC];
      bool ok[kVPC];
      read(k, slot, parity, x, ok);
      int count = 0;
#pragma unroll
      for (int j = 0; j < kVPC; ++j) count += ok[j] ? V : 0;
      s = Merge{}(s, row_stats<Op, T, V, kVPC>(x, ok, reduce::ThreadReducer{}, attr, shift, count));
      if (++slot == kSlots) slot = 0, parity ^= 1;
    }
    s = reduce::BlockReducer<>{smem}(s, Merge{});
    if (c > 1) s = reduce::cluster_all_reduce(s, Merge{}, &exchange, t, Op::identity());
    const typename Op::Param p = Op::finalize(s, a.cols, attr);
    Columns<Op, T, W, V, kVPC, false> cols;
    T* po = a.out + a.out_rs.offset(row);
    for (int k = 0; k < chunks; ++k) {
      Vec<T, V> x[kVPC];
      bool ok[kVPC];
      read(k, slot0, parity0, x, ok);  // landed: no wait
      const int64_t first = block_first + k * chunk;
      if constexpr (kBulkStore) {
        Vec<T, V>* slot = ring + slot0 * chunk;
        stage_row<Op>(a, slot + threadIdx.x, first + threadIdx.x, blockDim.x, x, ok, cols, p, attr);
        reduce::fence_proxy_async();
        if (threadIdx.x == 0 && (t > 0 || k > 0)) {
          reduce::bulk_store_wait<0, true>();  // the block's chunk before this one
          fetch_next();
        }
        __syncthreads();  // the chunk is rewritten
        if (threadIdx.x == 0) {
          reduce::bulk_store(po + first * V, slot,
                             static_cast<unsigned>(min(chunk, share - k * chunk)) * 16u);
        }
      } else {
        store_row<Op>(a, RowAt<T, W>{a, row, true}, first + threadIdx.x, blockDim.x, x, ok, cols,
                      p, attr);
        __syncthreads();  // every thread has read the slot: the chunk kSlots later may fill it
        if (threadIdx.x == 0) fetch(row, (k + kSlots) / chunks, (k + kSlots) % chunks, slot0);
      }
      if (++slot0 == kSlots) slot0 = 0, parity0 ^= 1;
    }
  }
  // No partner writes to this block after its last exchange (each waited for all of them), and
  // no bulk copy is left in flight: each load issued was for a row this block then waited for,
  // and each block waits for its stores (the newest still reads its slot).
  if constexpr (kBulkStore) {
    if (threadIdx.x == 0) reduce::bulk_store_wait<0, false>();
  }
}

// Rows too long for registers: pass 1 reduces chunk by chunk, merging the chunks' statistics (and,
// fused, writes residual_out), pass 2 re-reads (the new residual, when fused) and writes. One
// block per row.
template <class Op, typename T, typename W, int V, int VPT>
__global__ void __launch_bounds__(kMaxThreads)
    RowKernelLong(const RowArgs<T, W> a, const typename Op::Attr attr) {
  using Stats = typename Op::Stats;
  __shared__ uint4 smem[32];
  const int n = a.cols / V;
  const int chunk = blockDim.x * VPT;
  typename Op::Merge merge;
  const reduce::BlockReducer<> block{smem};
  pdl_wait();
  pdl_release();
  for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
    Stats acc = Op::identity();
    const RowAt<T, W> at{a, row, true};
    const float shift = row_shift<Op>(a, at, true);
    for (int64_t c = 0; c < n; c += chunk) {
      Vec<T, V> x[VPT], r[VPT];
      bool ok[VPT];
      load_row<Op, T, W, V, VPT>(a, at, true, c + threadIdx.x, blockDim.x, n, x, r, ok);
      add_residual<Op, T, W, V, VPT>(a, at, c + threadIdx.x, blockDim.x, x, r, ok);
      const int count = static_cast<int>((n - c < chunk ? n - c : chunk) * V);
      acc = merge(acc, row_stats<Op, T, V, VPT>(x, ok, block, attr, shift, count));  // uniform
    }
    const typename Op::Param p = Op::finalize(acc, a.cols, attr);
    for (int64_t c = 0; c < n; c += chunk) {
      Vec<T, V> x[VPT], r[VPT];
      bool ok[VPT];
      if constexpr (Op::kFusedAdd) {
        // Re-read the rounded sum this same thread wrote in pass 1.
        RowArgs<T, W> b = a;
        b.in = a.res_out;
        b.in_rs = a.res_out_rs;
        load_row<typename Op::Unfused, T, W, V, VPT>(b, RowAt<T, W>{b, row, true}, true,
                                                     c + threadIdx.x, blockDim.x, n, x, r, ok);
      } else {
        load_row<Op, T, W, V, VPT>(a, at, true, c + threadIdx.x, blockDim.x, n, x, r, ok);
      }
      Columns<Op, T, W, V, VPT, false> cols;
      store_row<Op>(a, at, c + threadIdx.x, blockDim.x, x, ok, cols, p, attr);
    }
  }
}

inline int pow2_ceil(int x) {
  int p = 1;
  while (p < x) p <<= 1;
  return p;
}

inline int round_up32(int64_t x) { return static_cast<int>((x + 31) / 32 * 32); }

constexpr int64_t kMaxGrid = (1ll << 31) - 1;
constexpr int kMaxCluster = 8;  // portable cluster size
// Softmax rows of 2049-4096 vectors in grids of up to this many rows take pairs of blocks (see
// LaunchRowsV); past it RowKernelSmem and wider clusters, as measured at 8192-16384 rows.
constexpr int64_t kPairRows = 2048;

// Grids of about one wave load weights early (see Columns).
inline bool early_columns(int64_t blocks, int sm_count) { return blocks <= 2 * sm_count; }

// Layernorm and rmsnorm grids of at least this many rows of 769-1024 vectors take RowKernelFlat
// 512 x 2 (see LaunchRowsV); on fast_memory, 16-bit ones with columns of their type take the
// re-read kernels from kRereadRows rows.
constexpr int64_t kManyRows = 24576, kRereadRows = 8192;

// Ops with kNoL1 load rows of grids of at most kFewBlocks blocks of one row each, 2 vectors per
// thread, through L1 after all: there no other row would evict the columns, and the allocating
// load came back sooner. Measured on the H100, bf16 layernorm: 1x4096 1.85 -> 1.73 us, 2x4096
// 1.96 -> 1.90, 4x4096 2.10 -> 2.04, 1x2048 1.65 -> 1.52; 16 and 32 rows the same; 64x4096 2.38
// -> 2.41, 128x4096 2.74 -> 2.78, 1x16384 (4 vectors per thread) 3.50 -> 3.53 (so not there).
constexpr int64_t kFewBlocks = 4;

// `blocks` in all; clusters of `cluster` blocks for Scope::kCluster.
template <class Op, typename T, typename W, int V, int VPT, Scope S>
cudaError_t Launch(const RowArgs<T, W>& a, const typename Op::Attr& attr, int64_t blocks,
                   int threads, const DeviceProps& props, cudaStream_t stream, int cluster = 1) {
  const dim3 grid(static_cast<unsigned>(blocks));
  if constexpr (Op::kNoL1 && S == Scope::kBlock && VPT == 2) {
    if (blocks <= kFewBlocks) {
      return LaunchKernel(RowKernel<Op, T, W, V, VPT, S, true, true>, grid, threads, stream,
                          props, cluster, a, attr);
    }
  }
  return early_columns(blocks, props.sm_count)
             ? LaunchKernel(RowKernel<Op, T, W, V, VPT, S, true>, grid, threads, stream, props,
                            cluster, a, attr)
             : LaunchKernel(RowKernel<Op, T, W, V, VPT, S, false>, grid, threads, stream, props,
                            cluster, a, attr);
}

// The kernel of persistent clusters: staged where the op asks for it and vectors are 16 bytes.
template <class Op, typename T, typename W, int V>
constexpr auto PersistentClusterKernel() {
  if constexpr (sizeof(T) * V == 16 && Op::kStaged && !Op::kFusedAdd) {
    return RowKernelStaged<Op, T, W, V, 4>;
  } else {
    return RowKernel<Op, T, W, V, 4, Scope::kCluster, false>;
  }
}

// Rows split over clusters of c blocks of `threads`, for grids larger than a wave: persistent,
// twice as many clusters as fit on the device at once (at most one per row), each taking every
// step-th row, so that the exchange's setup (one cluster barrier) is paid once per cluster, not
// per row. Measured on the H100, bf16, with the st.async exchange: softmax 4096x131072 2265 ->
// 2625 GB/s (2618 with one cluster per slot), rmsnorm 4096x131072 2088 -> 2566, layernorm 1938
// -> 2394.
template <class Op, typename T, typename W, int V>
cudaError_t LaunchPersistentClusters(const RowArgs<T, W>& a, const typename Op::Attr& attr, int c,
                                     int threads, const DeviceProps& props, cudaStream_t stream) {
  constexpr auto kernel = PersistentClusterKernel<Op, T, W, V>();
  int clusters = 0;
  const int shape = c * (kMaxThreads + 1) + threads;  // (c, threads), threads <= kMaxThreads
  XK_CUDA_TRY(CachedFit<kernel>(shape, &clusters, [&](int* fit) {
    const LaunchConfig one(dim3(static_cast<unsigned>(c)), threads, stream, c, false);
    return cudaOccupancyMaxActiveClusters(fit, kernel, &one.cfg);
  }));
  const int64_t blocks = std::min<int64_t>(a.rows, 2 * int64_t{clusters}) * c;
  return LaunchKernel(kernel, dim3(static_cast<unsigned>(blocks)), threads, stream, props, c, a,
                      attr);
}

// RowKernelSmem's shape: one block of 1024 threads per SM, 2 vectors per thread in a chunk of 32
// KB, a ring of 6 chunks (192 KB); shares of at most 64 KB where one or two blocks hold the row
// (the ring holds three rows' shares, so two are arriving while one is reduced), else of at most
// 128 KB (160 KB since: SmemClusterSize). Measured on the H100, softmax bf16, GB/s:
//   4096x131072  2780-2826  (RowKernel's persistent clusters of 8 blocks: 2612; now with bulk
//                stores, 2851-2873: see LaunchSmemClusters)
//   2048x262144  2757-2771  (RowKernelLong: 775)
//   16384x32768  2928  (RowKernel: 2783);  8192x65536: 2795 (2770)
// and rejected: shares of 64 KB for 256 KB rows (clusters of 4) 2532; 512 threads x 4 vectors
// 2768; 16 KB chunks 2700; a ring of 4 or 7 chunks 2602, 2595; 256 threads 1584; bulk (TMA)
// stores from the slots, each waited for right after it is issued, 2656; 2 blocks per SM of 64
// KB shares 2566. Ops with weights lose here (rmsnorm 4096x131072: 2278 vs RowKernelStaged's
// 2611): with shared memory full there is no L1 left to keep the weights, which every row
// re-reads from L2.
constexpr int kSmemThreads = 1024, kSmemVPC = 2, kSmemSlots = 6;
constexpr int64_t kSmemShare = 8192, kSmemSmallShare = 4096;  // vectors of 16 bytes
// Shares of rows too long for two small ones: at most 5 of the ring's 6 chunks (160 KB).
constexpr int64_t kSmemLargeShare = (kSmemSlots - 1) * kSmemThreads * kSmemVPC;
constexpr size_t kSmemBytes = size_t{kSmemSlots} * kSmemThreads * kSmemVPC * 16;  // the ring

// Blocks per row for RowKernelSmem (a cluster of them), or 0 where rows of n vectors are too long
// (more than kMaxCluster shares of kSmemShare) or the device's blocks cannot have the ring (its
// static shared memory is under 2 KB). Rows longer than two small shares take 2, 4 or 8 blocks of
// at most kSmemLargeShare (no clusters of 3 or 5-7: they ran at 2100-2400 GB/s whatever the row).
// Measured on the H100, bf16 softmax (xkernels bench --sweep), GB/s at 1024 rows, shares of at most
// 128 KB -> 160 KB: 151936 over 3 blocks 2135 -> over 2 2548, 262208 over 5 2127 -> over 4 2311
// (256000, over 4 either way: 2631).
inline int SmemClusterSize(int64_t n, const DeviceProps& props) {
  if (static_cast<size_t>(props.smem_optin) < kSmemBytes + 2048) return 0;
  if (n > kMaxCluster * kSmemShare) return 0;
  if (n <= 2 * kSmemSmallShare) return static_cast<int>(ceil_div(n, kSmemSmallShare));
  const int64_t c = ceil_div(n, kSmemLargeShare);
  return c <= 2 ? 2 : c <= 4 ? 4 : kMaxCluster;
}

// The launch of RowKernelSmem with shares of `share` vectors, its ring kSlots chunks of kVPC
// vectors per thread (the same bytes as kSmemBytes).
template <class Op, typename T, typename W, int V, bool kBulkStore, int kVPC = kSmemVPC,
          int kSlots = kSmemSlots>
cudaError_t LaunchSmemClusters(const RowArgs<T, W>& a, const typename Op::Attr& attr, int c,
                               int share, const DeviceProps& props, cudaStream_t stream) {
  static_assert(size_t{kSlots} * kSmemThreads * kVPC * 16 == kSmemBytes, "the ring's bytes");
  constexpr auto kernel = RowKernelSmem<Op, T, W, V, kVPC, kSlots, kBulkStore>;
  int clusters = 0;
  XK_CUDA_TRY(CachedFit<kernel>(c, &clusters, [&](int* fit) {
    XK_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(kSmemBytes)));
    if (c > 1) {
      const LaunchConfig one(dim3(static_cast<unsigned>(c)), kSmemThreads, stream, c, false,
                             kSmemBytes);
      return cudaOccupancyMaxActiveClusters(fit, kernel, &one.cfg);
    }
    XK_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(fit, kernel, kSmemThreads,
                                                              kSmemBytes));
    *fit *= props.sm_count;
    return cudaSuccess;
  }));
  const int64_t blocks = std::min<int64_t>(a.rows, clusters) * c;
  const LaunchConfig lc(dim3(static_cast<unsigned>(blocks)), kSmemThreads, stream, c,
                        UsePDL(props), kSmemBytes);
  return cudaLaunchKernelEx(&lc.cfg, kernel, a, attr, share, c);
}

// Rows over persistent clusters of c = SmemClusterSize(n, props) blocks of RowKernelSmem, as many
// as fit at once (at most one per row). Rows split in two shares of more than kSmemSmallShare
// vectors (129-256 KB: vocabulary-sized rows of 16-bit logits) are written by bulk stores.
// Measured on the H100, bf16, us, thread stores -> bulk stores (old/new A/B, CUDA graphs,
// inputs rotating over 3x the L2): softmax 4096x131072 765.3 -> 747.5 (2806 -> 2873 GB/s;
// another run 766.1 -> 753.2). Thread stores are what limit this kernel there: from its
// 1024-thread blocks they write 1440 GB/s when nothing is read, bulk stores 3135 (diagnostic
// variants that skip the loads). Rejected: the wait for the store before and the refill issued
// right after the chunk's own store, 750-758; a refill lag of 2 chunks 747 (1 chunk: 736 in that
// run); a ring of 7 slots 846; 16 KB chunks 852-860. One variant measured 736 in the A/B harness
// where this kernel measured 751 (the same steps; its thread 0 computed the refill's place with
// 64-bit divisions, where this one advances a cursor); moved here, it measured 750. Why it was
// faster there is not known. Elsewhere bulk stores lost or tied: rows of 262144 and 524288 (4
// and 8 blocks) 774.1 -> 786.9 and 775.8 -> 788.8 (rmsnorm 2048x262144 gained, 1019.1 ->
// 1006.9); shares of 64 KB, where the refill's lag behind the store is a third of a share,
// 8192x65536 768 -> 779-784, 16384x32768 733.5 -> 739.9.
// On fast_memory (the H200) thread stores everywhere, and shares of 8193-9216 vectors (4 chunks
// and a few vectors: 5 of the ring's 6 slots, 1 left for the next row) in 3 chunks of 3 vectors
// per thread (4 slots, 1 left). Measured on the H200, rows_probe -DPART=9 (GPU-72eb4372), bf16
// softmax, us: bulk -> thread stores, 1024 x 151936 229.1 -> 222.9, 4096 x 131072 709.5 -> 694.7
// (PART 7, GPU-f47b768f: 1024 x 128256 188.8 -> 184.6); 1024 x 262208 (4 shares of 8200) 456.9 ->
// 419.3 (a ring of 7 slots 463.4, of 12-13 chunks of 1 vector 486-488). Shares of 4 whole chunks
// lost with 3 vectors (1024 x 256000 389.7 -> 410.1, 2048 x 262144 766.7 -> 805.4), and shares
// of 9217-10240 vectors with them fill the 4 slots (1024 x 151936 222.9 -> 253.3). Ops with
// columns (rmsnorm's rows past 32768 vectors) keep chunks of 2 vectors: not measured with 3.
template <class Op, typename T, typename W, int V>
cudaError_t LaunchSmemClusters(const RowArgs<T, W>& a, const typename Op::Attr& attr, int c,
                               const DeviceProps& props, cudaStream_t stream) {
  // Shares rounded to 8 vectors (128 bytes), so that every block's copies start 128-byte aligned
  // where the row does.
  const int share = static_cast<int>(ceil_div<int64_t>(ceil_div<int64_t>(a.cols / V, c), 8) * 8);
  if (fast_memory(props)) {
    constexpr int kChunk = kSmemThreads * kSmemVPC, kChunk3 = kSmemThreads * 3;
    if (!Op::kWeight && !Op::kBias && share > 4 * kChunk && share <= 3 * kChunk3) {
      return LaunchSmemClusters<Op, T, W, V, false, 3, 4>(a, attr, c, share, props, stream);
    }
    return LaunchSmemClusters<Op, T, W, V, false>(a, attr, c, share, props, stream);
  }
  return c == 2 && share > kSmemSmallShare
             ? LaunchSmemClusters<Op, T, W, V, true>(a, attr, c, share, props, stream)
             : LaunchSmemClusters<Op, T, W, V, false>(a, attr, c, share, props, stream);
}

// Grids of a few rows per SM: more than early_columns, at most kWaveRows rows per SM, which
// blocks of 256 threads (at most 8 per SM) run in one wave. Measured: see LaunchOneWave.
constexpr int kWaveRows = 8;
inline bool one_wave(int64_t blocks, int sm_count) {
  return !early_columns(blocks, sm_count) && blocks <= int64_t{kWaveRows} * sm_count;
}

// Rows of 129-2048 16-byte vectors in one_wave grids, ops with columns. The launches these grids
// took before were shaped for more rows: RowKernel or RowKernelFlat of 64-192 threads, of which
// 9-16 blocks fit per SM where the grid needs 8. With PDL the next kernel's blocks take the slots
// this one leaves free, and when this one ends its remaining blocks start wherever a slot frees
// first, some SMs then holding 12 rows and others 4: rmsnorm 1024x4096 (RowKernelFlat 128 x 4,
// 12 blocks per SM) 7.90 us with PDL, 6.56 without, 6.19 with PDL and its blocks capped at 8 per
// SM by dynamic shared memory. Here: RowKernelFlat of 256 threads x ceil(n / 256) vectors (128 x
// 3 for 257-384, fewer idle threads), the columns loaded with the row (into registers where
// Columns fits them), at most 8 blocks per SM; rmsnorm's rows of 769-1024 vectors (16-bit
// weights) over one wave of persistent RowKernelPipe blocks (512 x 2, two per SM), which load the
// weights once and the next row during this one; rows of 1025-2048 vectors RowKernelFlat 512 x
// 3 (columns from memory) or x 4 (columns loaded with the row).
// Measured on the H100 (benchmarks/rows_probe.cu: CUDA graphs of 40 calls, inputs rotating over
// 3x the L2, PDL; bf16, us; its copy kernel 2830-2880 GB/s), before -> after (another shape
// tried):
//   rmsnorm 1024 x 2048 4.47 -> 3.46, x 3072 5.70 -> 4.80 (256 x 2 4.68-4.90), x 4096 7.90 ->
//   5.46 (128 x 4 5.73), x 5120 7.95 -> 6.91, x 7168 10.01 -> 8.97 (RowKernelFlat 256 x 4 9.25),
//   x 8192 11.62 -> 10.13 (256 x 4 10.76, 512 x 2 10.47), x 12288 18.41 -> 17.38; 600 x 4096
//   4.61 -> 4.12, 600 x 8192 8.02 -> 6.90; gemma_rmsnorm 1024 x 3584 7.12 -> 5.29 (128 x 4
//   5.19), x 3840 7.57 -> 5.42, x 5376 7.83 -> 7.22; fused_add_rmsnorm (out=) 1024 x 2048 6.38
//   -> 5.47, x 3584 9.96 -> 9.06 (128 x 4 8.93), x 4096 11.52 -> 10.41 (512 x 1 10.09), x 12288
//   38.53 -> 35.42, x 16384 48.98 -> 47.38; layernorm 1024 x 2560 5.77 -> 4.66 (256 x 2 5.40).
// In xkernels bench --sweep (ratio to the best peer, committed results -> this rule, another
// H100): rmsnorm 1024 x 2048 1.229 -> 1.020, x 3584 1.243 -> 0.985, x 4096 1.309 -> 1.048, x
// 5120 1.212 -> 1.093, x 7168 1.219 -> 1.150, x 8192 1.155 -> 1.087; gemma_rmsnorm 1024 x 3840
// 1.258 -> 1.030, x 5376 1.153 -> 1.086; fused_add_rmsnorm 1024 x 2048 (out=) 1.075 -> 0.911,
// x 12288 1.041 -> 0.955; layernorm 1024 x 2560 1.062 -> 0.879. There the bench timed these
// kernels 15-25% slower than the probe did (rmsnorm 1024 x 4096 6.80 against 5.44 us).
// Not taken (not measured): rows of 769-1024 vectors of the fused ops and layernorm. Not taken
// yet: grids of 2-4 waves, where the same kernels gained too (rmsnorm 2048 x 4096 RowKernelFlat
// 128 x 4 11.70, 256 x 2 with the weights in registers 9.79; 4096 x 2048 RowKernel 128 x 2
// 11.35, RowKernelFlat 128 x 2 9.79), though not at 8192 x 4096 (45.8 either way).
template <class Op, typename T, typename W>
cudaError_t LaunchOneWave(const RowArgs<T, W>& a, const typename Op::Attr& attr, int64_t n,
                          const DeviceProps& props, cudaStream_t stream) {
  constexpr ColumnsIn kReg = ColumnsIn::kRegisters;
  const dim3 grid(static_cast<unsigned>(a.rows));
  const auto flat = [&](auto kernel, int threads) {
    return LaunchKernel(kernel, grid, threads, stream, props, 1, a, attr);
  };
  if (n <= 256) return flat(RowKernelFlat<Op, T, W, 256, 1, kReg>, 256);
  if (n <= 384) return flat(RowKernelFlat<Op, T, W, 128, 3, kReg>, 128);
  if (n <= 512) return flat(RowKernelFlat<Op, T, W, 256, 2, kReg>, 256);
  if (n <= 768) return flat(RowKernelFlat<Op, T, W, 256, 3, kReg>, 256);
  if (n <= 1024) {
    constexpr auto kernel = RowKernelPipe<Op, T, W, 512, 2>;
    int fit = 0;
    XK_CUDA_TRY(CachedFit<kernel>(512, &fit, [&](int* f) {
      XK_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(f, kernel, 512, 0));
      *f *= props.sm_count;
      return cudaSuccess;
    }));
    const int64_t blocks = std::min<int64_t>(a.rows, fit);
    return LaunchKernel(kernel, dim3(static_cast<unsigned>(blocks)), 512, stream, props, 1, a,
                        attr);
  }
  if (n <= 1536) return flat(RowKernelFlat<Op, T, W, 512, 3>, 512);
  return flat(RowKernelFlat<Op, T, W, 512, 4, kReg>, 512);
}

// Launch with a fixed vector width V: pick the scope and vectors per thread from the row length.
template <class Op, typename T, typename W, int V>
cudaError_t LaunchRowsV(RowArgs<T, W> a, const typename Op::Attr& attr, cudaStream_t stream) {
  const int64_t n = a.cols / V;  // vectors per row
  DeviceProps props;
  XK_CUDA_TRY(GetDeviceProps(&props));
  if (n <= 128) {
    // Short rows (QK-norm: 128 bf16 = 16 vectors): a few lanes per row, 2-4 vectors per lane
    // so that each thread keeps 32-64 bytes in flight; blocks of 256 threads, many rows each.
    // On fast_memory, rows of up to 64 vectors (2 per lane) take blocks of 128 threads: on the
    // H200 256 lost 3-7% there (rmsnorm bf16, rows_probe -DPART=5, GPU-84208c05, us, 256 -> 128
    // threads: 65536 x 128 9.85 -> 9.48, 262144 x 128 36.84 -> 35.56, 1048576 x 128 139.90 ->
    // 135.72, 1048576 x 64 76.99 -> 71.98; 512 threads, or 4 vectors per lane, no faster). Rows
    // of 65-128 vectors were not measured, nor 128 threads on the H100.
    const bool two = n <= 64;
    const int threads = two && fast_memory(props) ? 128 : 256;
    a.group = two ? pow2_ceil(static_cast<int>(ceil_div<int64_t>(n, 2))) : 32;
    const int64_t blocks = std::min(ceil_div<int64_t>(a.rows, threads / a.group), kMaxGrid);
    return two ? Launch<Op, T, W, V, 2, Scope::kGroup>(a, attr, blocks, threads, props, stream)
               : Launch<Op, T, W, V, 4, Scope::kGroup>(a, attr, blocks, threads, props, stream);
  }
  const int64_t blocks = std::min(a.rows, kMaxGrid);
  if constexpr (sizeof(T) * V == 16) {
    // Grids past early_columns, rows of 385-512 vectors, and for fused-add ops and layernorm
    // (which RowKernel cannot fit in 4 blocks of 512 threads), of 769-1024: RowKernelFlat, 4
    // vectors per thread. Measured on the H100, bf16, us, against RowKernel (A/B harness, CUDA
    // graphs, inputs rotating over 3x the L2):
    //   8192x4096   rmsnorm 46.33 -> 46.05, layernorm 46.56 -> 45.96, softmax 46.48 -> 46.29,
    //               fused_add_rmsnorm 91.77 -> 90.88
    //   600x4096    rmsnorm 5.62 -> 5.33, layernorm 6.08 -> 5.46, softmax 6.09 -> 5.44,
    //               fused_add_rmsnorm 9.01 -> 9.05
    //   32768x8192  layernorm 358.5 -> 356.5, fused_add_rmsnorm 720.4 -> 716.2; but rmsnorm
    //               355.7 -> 356.5 and softmax 360.5 -> 386.8, which keep RowKernel there.
    // Grids of a wave or less lose with it (the early columns are what they need): 1x4096 and
    // 128x4096, rmsnorm 1.43 -> 2.04 and 2.42 -> 3.09 us, fused_add_rmsnorm 3.34 -> 3.99.
    // Layernorm grids of kManyRows rows or more take 512 threads x 2 vectors (40 registers, 3
    // rows per SM) instead of 256 x 4 (48 registers, 5 rows). Measured on the H100, bf16 x 8192,
    // us, 256 x 4 -> 512 x 2 (A/B harness, torch.compile in the same rounds):
    //   8192 rows 90.72 -> 91.23, 12288 135.04 -> 135.42, 16384 179.23 -> 179.34
    //   24576 268.54 -> 267.50, 32768 356.94 -> 355.69 (another run 356.49 -> 355.00), 49152
    //   534.80 -> 532.33 (torch.compile 267.93, 355.79, 532.41)
    // Why fewer rows in flight win only past ~400 MB is not known (DRAM pages or TLB reach are
    // guesses). The fused op keeps 256 x 4 (512 x 2: 1.001 of it at 32768 rows). RMSNorm (weights
    // in the input's 16-bit type) takes Liger's shape there: 512 threads x 2 vectors, the
    // weights loaded with the row, 3 blocks per SM (39 registers) instead of RowKernel's 4 (32,
    // weights after the reduction). Measured on the H100, bf16 32768x8192, us (A/B harness,
    // Liger and torch.compile in the same rounds): 355.8 -> 353.6 (Liger 355.6, torch.compile
    // 355.2); with 1 or 2 blocks per SM 382.2, 406.8. (The same for layernorm: 2 blocks, 406.8;
    // 3 spill, 527.9. The fused op's 256 x 4 with its weights first: 715.0, as without.)
    // Layernorm with 16-bit columns there copies them into shared memory (cp.async) as it loads
    // the row, and reads them back after the reduction: no registers held for them, so 32
    // registers and 4 rows per SM (ptxas's own count: bounded to 4 blocks, it spilled 8 bytes).
    // Measured on the H100, bf16 32768x8192, us, through the bench's own run_case (same sets,
    // balanced orders), with x and out allocated 0 / 2 / 514 MiB apart:
    // 356.8 / 357.6 / 356.4 -> 354.9 / 354.8 / 354.2 (torch.compile 355.1 / 355.2 / 355.4). The
    // same copy with 3 rows per SM: 356.0 / 356.6 / 355.8. Rejected there: the rows loaded with
    // L1::evict_first (also 32 registers) 360.0 / 360.8 / 359.4; prefetch.global.L1 or .L2 of the
    // columns with the row, 362.6-369.3. (These stay for float32 layernorm; for 16-bit rows,
    // they are what the re-read kernels replaced.)
    // 16-bit RMSNorm and LayerNorm there (weights in the row's type) read the row twice
    // (kReread): the one-pass kernels, ours, Liger's and FlashInfer's, lost 1.5-3% on some
    // H100s where torch.compile's two-pass kernel held (benchmarks/README.md, Machines). RMSNorm
    // 512 x 2, columns into registers after the reduction, 3 blocks per SM (40 registers);
    // LayerNorm 512 x 2, columns from memory, 4 blocks (32). Measured on H100s, bf16 32768x8192,
    // us, through the bench's own run_case (three sets, torch.compile in the same rounds), one
    // pass -> re-read: rmsnorm 353.6-354.1 -> 352.2-352.5, layernorm 354.0-354.4 -> 353.4-353.6
    // (torch.compile 354.8-355.1, 355.0-355.4). Prototypes on a card where the one-pass kernels
    // lost (GPU-595f11c2, copy 2993 GB/s): one pass rmsnorm 359.6, layernorm 360.3; re-read
    // 256 x 4, whole row in flight, 4 rows per SM: rmsnorm 354.6; layernorm 256 x 1 x 5 rows
    // 356.5 (torch.compile 355.8, 355.6). Rejected on the other cards: one vector per thread in
    // flight (256 threads, 6 rows per SM) rmsnorm 363.0 with L1 and L2 hints, 385.1 with the L2
    // hint only, 409.8 without; 256 x 4 layernorm with its columns in registers (64 registers,
    // spilling 6 bytes) 397.3, from memory at 4-6 blocks per SM 355.6-358.0; 512 x 4 8-byte
    // loads (Triton's layernorm shape; ours spilled 8-48 bytes) 357.3-521.5.
    // Fused-add ops there take 1024 x 1 (FlashInfer's shape, 2 rows per SM), columns in memory,
    // with BlockReducer's one-row form (30 registers; with its
    // general form's two barriers and rolled chain, 38). Measured on the H100, bf16 32768x8192 in
    // place, us, through the bench's own run_case (FlashInfer in the same rounds), x and the
    // residual in the bench's own allocations, then carved from one allocation 0 / 2 / 6 / 14 MiB
    // apart: 256 x 4 714.2 / 714.2 / 714.8 / 715.1 / 714.9 -> 713.8 / 715.4 / 714.5 / 712.4 /
    // 715.1 (FlashInfer 714.2 / 716.6 / 714.7 / 712.3 / 715.4 in the same run): 256 x 4 holds
    // in every layout, 1024 x 1 gains where the layout lets FlashInfer gain (benchmarks/README.md,
    // Memory layout), and is never behind it by more than 0.1. With out= (Liger's form):
    // 713.2 / 713.6 / 713.7 / 712.9 / 714.4 -> 711.3 / 710.6 / 712.5 / 709.8 / 710.2. Rejected
    // there: RowKernelFlat 1024 x 1 with BlockReducer 712.9-717.4 (FlashInfer 712.2-717.1);
    // persistent blocks fed whole rows (x and residual) by bulk copies into a ring of 3-6 rows
    // of shared memory, with bulk or thread stores, 737-748; the columns in shared memory
    // 715.3-718.4; 512 x 2 at 3 blocks per SM 715.2-715.8, at 4 (spilling 24 bytes) 884-886, at 2
    // 743-748; rows loaded L1::evict_first 721.8, prefetch.global.L1 of the weights 715.8;
    // griddepcontrol.launch_dependents after the stores 714.7-715.0 (even); 256 x 4 with all of
    // x loaded before the residual, or the residual first: no change.
    // Grids of one to two waves (more rows than SMs, at most early_columns) of 769-1024
    // vectors: RowKernel's latency kernel takes 512 threads of 72-102 registers, one row per SM,
    // so it ran them in two waves; RowKernelFlat with the columns loaded with the row fits 3-5
    // rows per SM. Measured on the H100, bf16 x 8192, us, RowKernel -> RowKernelFlat, 140 / 200
    // / 264 rows (A/B harness, CUDA graphs, inputs rotating over 3x the L2; Liger in the same
    // rounds; the fused op with out=):
    //   rmsnorm, 512 x 2, weights in registers, 3 per SM: 3.94 / 4.26 / 4.66 -> 3.14 / 3.94 /
    //     4.29 (Liger 3.60 / 4.01 / 4.57; 2 per SM 3.45 / 3.67 / 4.10)
    //   layernorm, 256 x 4, columns in shared memory: 4.81 / 5.10 / 5.50 -> 3.61 / 4.02 / 4.59
    //     (Liger 4.01 / 4.36 / 4.85; 512 x 2, columns in shared memory, 3.82 / 4.15 / 4.56)
    //   fused_add_rmsnorm, the same: 5.35 / 5.95 / 7.05 -> 4.29 / 5.08 / 5.91 (Liger 4.65 / 5.34
    //     / 6.09; columns in memory 4.55 / 5.37 / 6.20)
    // At 100 rows (one wave either way) RowKernel keeps rmsnorm (2.58 against 2.67) and
    // layernorm (3.09 against 3.01-3.10).
    // On the H200 (4.8 TB/s; the rules above were measured on H100s, 3.35 TB/s), rows_probe
    // (-DPART=4 and 5, bf16, us; GPU-d052abc0, GPU-84208c05) moved three of them, 769-1024 vectors
    // past early_columns; devices with memory as fast (fast_memory) take these, the others the
    // H100's rules, unchanged (the H100 lost with two of them, below; the others were not run
    // there):
    //   softmax: RowKernelFlat 256 x 4 (5 rows per SM) instead of RowKernel 512 x 2: 1024 x 8192
    //     10.84 -> 9.27, 2048 rows 20.87 -> 18.24, 4096 39.34 -> 34.48, 8192 75.49 -> 66.84,
    //     16384 148.3 -> 131.3, 32768 293.4 -> 261.4 (512 x 2 flat 260.7). On the H100,
    //     RowKernelFlat 256 x 4 lost at 32768 rows (360.5 -> 386.8, the note above).
    //   rmsnorm (16-bit weights): the re-read 512 x 2 with its weights from memory after the
    //     reduction, 4 rows per SM, from kRereadRows (8192) rows: 8192 x 8192 68.74 -> 64.56,
    //     16384 134.3 -> 126.4, 32768 (the re-read, weights in registers, 3 per SM) 270.7 ->
    //     249.6 (torch.compile in the bench 249.5).
    //   layernorm (16-bit columns): the re-read 256 x 4, columns from memory, 4 per SM, from
    //     kRereadRows: 8192 x 8192 67.08 -> 65.3, 16384 131.6 -> 127.3, 32768 (512 x 2) 295.7 ->
    //     251.1. On H100s this shape ran 355.6-358.0 against 512 x 2's 353.4-353.6 (above).
    // RMSNorm with weights in the input's 16-bit type (weights in registers: Liger's shape), and
    // the ops with 16-byte column vectors that may go to shared memory.
    constexpr bool kRmsColumns = Op::kWeight && !Op::kBias && !Op::kFusedAdd && sizeof(T) == 2 &&
                                 std::is_same_v<T, W>;
    constexpr bool kSharedColumns = (Op::kFusedAdd || Op::kBias) && sizeof(W) * V == 16;
    const dim3 grid(static_cast<unsigned>(blocks));
    const bool n1024 = n > 768 && n <= 1024;
    if constexpr (Op::kWeight) {
      if (one_wave(blocks, props.sm_count) && (!n1024 || kRmsColumns) && n <= 2048) {
        return LaunchOneWave<Op, T, W>(a, attr, n, props, stream);
      }
    }
    if (n1024 && blocks > props.sm_count && early_columns(blocks, props.sm_count)) {
      if constexpr (kRmsColumns) {
        return LaunchKernel(RowKernelFlat<Op, T, W, 512, 2, ColumnsIn::kRegisters, 3>, grid, 512,
                            stream, props, 1, a, attr);
      }
      if constexpr (kSharedColumns) {
        return LaunchKernel(RowKernelFlat<Op, T, W, 256, 4, ColumnsIn::kShared>, grid, 256, stream,
                            props, 1, a, attr);
      }
    }
    if (!early_columns(blocks, props.sm_count)) {
      if (n > 384 && n <= 512) {
        return LaunchKernel(RowKernelFlat<Op, T, W, 128, 4>, grid, 128, stream, props, 1, a, attr);
      }
      if constexpr (Op::kFusedAdd && sizeof(T) == 2) {
        // 16-bit fused-add rows of 1025-1536 vectors (Mistral Large 2's 12288 values) in grids
        // past one wave: RowKernelFlat 512 x 3, columns from memory. Measured on the H100,
        // fused_add_rmsnorm bf16 8192 x 12288, us: rows_probe, RowKernel 384 x 4 277.8 -> 269.1
        // (1024 x 2 270.8-271.0, RowKernelPipe 512 x 3 273.7-277.2); the sweep, 278.5 -> 271.0
        // (FlashInfer 272.8, Liger 270.9 in the same run).
        if (n > 1024 && n <= 1536) {
          return LaunchKernel(RowKernelFlat<Op, T, W, 512, 3>, grid, 512, stream, props, 1, a,
                              attr);
        }
      }
      // Fast memory (fast_memory: the H200's 4.8 TB/s) takes the rules measured there (see the
      // H200 paragraph above); the H100's follow.
      if (fast_memory(props)) {
        if constexpr (Op::kFusedAdd && sizeof(T) == 2) {
          // 1537-2048 vectors (16384 values): RowKernelFlat 512 x 4, not RowKernel's 512 x 4.
          // Measured on the H200, rows_probe -DPART=6 (GPU-5764e202), fused_add_rmsnorm bf16
          // 8192 x 16384, us: 274.3 -> 258.0 (the xkernels bench --sweep before: 277.7, Liger
          // 262.1).
          if (n > 1536 && n <= 2048) {
            return LaunchKernel(RowKernelFlat<Op, T, W, 512, 4>, grid, 512, stream, props, 1, a,
                                attr);
          }
        }
        if constexpr (kRmsColumns) {
          // 1537-2048 vectors from kRereadRows rows: the re-read 512 x 4, weights from memory, 2
          // rows per SM. Measured on the H200 (the same run), rmsnorm bf16 8192 x 16384, us:
          // RowKernel 512 x 4 138.2 -> 126.7 (RowKernelFlat 512 x 4, one pass, 129.7; the sweep
          // before: 139.8, torch.compile 131.3).
          if (n > 1536 && n <= 2048 && blocks >= kRereadRows) {
            return LaunchKernel(RowKernelFlat<Op, T, W, 512, 4, ColumnsIn::kMemory, 2, true>,
                                grid, 512, stream, props, 1, a, attr);
          }
          if (n1024 && blocks >= kRereadRows) {
            return LaunchKernel(RowKernelFlat<Op, T, W, 512, 2, ColumnsIn::kMemory, 4, true>,
                                grid, 512, stream, props, 1, a, attr);
          }
        }
        if constexpr (Op::kBias && sizeof(T) == 2 && std::is_same_v<T, W>) {
          if (n1024 && blocks >= kRereadRows) {
            return LaunchKernel(RowKernelFlat<Op, T, W, 256, 4, ColumnsIn::kMemory, 4, true>,
                                grid, 256, stream, props, 1, a, attr);
          }
        }
        if constexpr (!Op::kWeight && !Op::kBias && !Op::kFusedAdd && sizeof(T) == 2) {
          if (n1024) {  // softmax
            return LaunchKernel(RowKernelFlat<Op, T, W, 256, 4>, grid, 256, stream, props, 1, a,
                                attr);
          }
        }
      }
      if constexpr (kRmsColumns) {
        if (n1024 && blocks >= kManyRows) {
          return LaunchKernel(RowKernelFlat<Op, T, W, 512, 2, ColumnsIn::kRegisters, 3, true>,
                              grid, 512, stream, props, 1, a, attr);
        }
      }
      if constexpr (Op::kFusedAdd || Op::kBias) {  // the others never launch these kernels
        if (n1024 && blocks >= kManyRows) {
          if constexpr (Op::kBias && sizeof(T) == 2 && std::is_same_v<T, W>) {
            return LaunchKernel(RowKernelFlat<Op, T, W, 512, 2, ColumnsIn::kMemory, 4, true>, grid,
                                512, stream, props, 1, a, attr);
          } else if constexpr (Op::kFusedAdd) {
            return LaunchKernel(RowKernelFlat<Op, T, W, 1024, 1>, grid, 1024, stream, props, 1, a,
                                attr);
          } else if constexpr (kSharedColumns) {
            return LaunchKernel(RowKernelFlat<Op, T, W, 512, 2, ColumnsIn::kShared>, grid, 512,
                                stream, props, 1, a, attr);
          } else {
            return LaunchKernel(RowKernelFlat<Op, T, W, 512, 2>, grid, 512, stream, props, 1, a,
                                attr);
          }
        }
        if (n1024) {
          return LaunchKernel(RowKernelFlat<Op, T, W, 256, 4>, grid, 256, stream, props, 1, a,
                              attr);
        }
      }
    }
  }
  if constexpr (Op::kNoL1 && sizeof(T) * V == 16) {
    // Ops with kNoL1, rows of 512-1024 vectors in grids past early_columns: 4 vectors per thread
    // (blocks of 128-256 threads), rows loaded through L1 after all. Measured on the H100, bf16
    // layernorm, us, against 2 vectors per thread without L1 (A/B harness, CUDA graphs of 10-60
    // calls, inputs rotating over 3x the L2):
    //   8192x4096   47.8-48.0 -> 46.9-47.0  (4 per thread without L1: 47.5; 2 with L1: 56.4)
    //   32768x8192  360.4-361.0 -> 358.8-359.8  (2 with L1: 436-441)
    // Rejected there: persistent blocks fed by a ring of 2-4 rows in shared memory through bulk
    // copies (TMA), weights in registers: rmsnorm 8192x4096 46.4 -> 50.5-51.8 us, layernorm 47.8
    // -> 52.1-56.4, fused_add_rmsnorm 91.7 -> 97.2-99.3, 32768x8192 5-15% slower too; for the
    // fused op, 512 threads x 1 vector (FlashInfer's shape) 92.3, 6 blocks of 256 per SM at 40
    // registers 96.8, PDL's trigger at the end of the kernel 92.1.
    if (n >= 512 && n <= 2 * kMaxThreads && !early_columns(blocks, props.sm_count)) {
      return LaunchKernel(RowKernel<Op, T, W, V, 4, Scope::kBlock, false, true>,
                          dim3(static_cast<unsigned>(blocks)), round_up32(ceil_div<int64_t>(n, 4)),
                          stream, props, 1, a, attr);
    }
  }
  if (n <= 2 * kMaxThreads) {
    return Launch<Op, T, W, V, 2, Scope::kBlock>(a, attr, blocks, round_up32(ceil_div<int64_t>(n, 2)),
                                                 props, stream);
  }
  if (n <= 4 * kMaxThreads) {
    return Launch<Op, T, W, V, 4, Scope::kBlock>(a, attr, blocks, round_up32(ceil_div<int64_t>(n, 4)),
                                                 props, stream);
  }
  if (props.cc_major >= 9 && a.rows * kMaxCluster <= kMaxGrid) {
    const bool in_registers = n <= int64_t{kMaxCluster} * kMaxThreads * 4;
    // Split the row over a cluster of c blocks of about 256 threads, 4 vectors each.
    const int c = static_cast<int>(std::min<int64_t>(kMaxCluster, ceil_div<int64_t>(n, 4 * 256)));
    const int threads = round_up32(ceil_div<int64_t>(n, int64_t{c} * 4));
    const bool persistent = !early_columns(a.rows * c, props.sm_count);
    constexpr bool kColumns = Op::kWeight || Op::kBias;
    if constexpr (sizeof(T) * V == 16 && !Op::kFusedAdd && !kColumns) {
      // Rows of 2049-4096 vectors (vocabulary-sized softmax rows of 32-64 KB) in grids of
      // persistent clusters (past early_columns) of up to kPairRows rows: persistent pairs of
      // blocks of up to 512 threads, 4 vectors each. Measured on the H100, bf16 softmax, us (a
      // probe: CUDA graphs of 40 calls, inputs rotating over 3x the L2), before (persistent
      // clusters of 4 x 256, or RowKernelSmem at 4096 vectors) -> after: 128 x 32000 9.10 ->
      // 8.18, 128 x 32768 9.45 -> 8.25, 1024 x 32000 52.84 -> 50.55, 1024 x 32768 56.38 ->
      // 52.42 (xkernels bench --sweep: 8.93 / 9.50 / 52.29 / 56.33 -> 8.09 / 8.20 / 49.93 /
      // 51.04); rejected: one block of 512 x 8 (8.16 at 128 rows, 64.3 at 1024), the kEarly
      // cluster form of 2 x 512 (10.1), clusters of 8 x 256 (8.6, 56.6). Latency grids (1-66
      // rows) keep the kEarly clusters of 4 x 256: pairs took 1 x 32768 from 2.61 to 3.77.
      // On fast_memory the pairs take every row count past a wave, RowKernelSmem none. Measured
      // on the H200, rows_probe -DPART=7 (GPU-f47b768f), bf16, us, RowKernelSmem (one block per
      // row) -> pairs: 4096 x 32768 186.3 -> 165.4, 8192 x 32768 363.8 -> 324.8, 16384 x 32768
      // 724.6 -> 644.2, 8192 x 32000 333.0 -> 322.2 (RowKernelFlat 1024 x 4, Liger's shape,
      // 167.1 / 327.9 / 652.6 / 323.7; the sweep's Liger at 8192 x 32768: 329.6).
      if (n <= 8 * kMaxThreads && persistent && (a.rows <= kPairRows || fast_memory(props))) {
        return LaunchPersistentClusters<Op, T, W, V>(
            a, attr, 2, round_up32(ceil_div<int64_t>(n, 8)), props, stream);
      }
      // On fast_memory, rows of 4097-8192 vectors (64-128 KB) past a wave take persistent
      // clusters of 8 blocks, not RowKernelSmem's pairs. Measured on the H200, rows_probe
      // -DPART=7 and 8 (GPU-f47b768f, GPU-51afd693), bf16 softmax, us, RowKernelSmem over 2
      // blocks (1 block) -> clusters of 8: x 65536, 256 rows 30.0 (28.0) -> 27.2, 1024 103.2
      // (95.1) -> 94.2, 2048 198.3 (179.6) -> 174.2, 4096 386.7 (340.4) -> 343.4, 8192 763.6
      // (669.1) -> 681.2; 4096 x 50304 373.3 (326.2) -> 302.2 (a share of 3.07 chunks).
      if (fast_memory(props) && n > 8 * kMaxThreads && n <= 16 * kMaxThreads && persistent) {
        return LaunchPersistentClusters<Op, T, W, V>(
            a, attr, kMaxCluster, round_up32(ceil_div<int64_t>(n, 4 * kMaxCluster)), props,
            stream);
      }
    }
    if constexpr (sizeof(T) * V == 16 && !Op::kFusedAdd) {
      // Rows in shared memory (RowKernelSmem): those too long for registers, and for ops without
      // weights, rows of 64 KB or more in grids of more than a wave (shorter rows lost: 16384x20000
      // 2641 -> 1968 GB/s, 32768x16392 2606 -> 1627, with a block's fixed costs per row).
      int cs = SmemClusterSize(n, props);
      if (cs > 0 && (!in_registers || (!kColumns && persistent && n >= kSmemSmallShare))) {
        // Grids of a block per two SMs or fewer (a few rows, latency-bound) split each row over
        // as many blocks as shares of at most kSmemSmallShare vectors take (up to kMaxCluster).
        // Measured on the H100, bf16 softmax (xkernels bench --sweep), us: 1 x 256000 12.09 ->
        // 7.68, 1 x 152064 11.54 -> 7.47, 1 x 262208 11.66 -> 9.47; at a block per SM it lost
        // (16 x 262208 13.65 -> 19.00, 16 x 256000 13.72 -> 15.15: not every cluster of 8 was
        // resident at once).
        const int wide =
            static_cast<int>(std::min<int64_t>(kMaxCluster, ceil_div<int64_t>(n, kSmemSmallShare)));
        if (wide > cs && 2 * a.rows * wide <= props.sm_count) cs = wide;
        return LaunchSmemClusters<Op, T, W, V>(a, attr, cs, props, stream);
      }
    }
    if (in_registers) {
      if (persistent) {
        return LaunchPersistentClusters<Op, T, W, V>(a, attr, c, threads, props, stream);
      }
      return Launch<Op, T, W, V, 4, Scope::kCluster>(a, attr, a.rows * c, threads, props, stream,
                                                     c);
    }
  }
  return LaunchKernel(RowKernelLong<Op, T, W, V, 4>,
                      dim3(static_cast<unsigned>(std::min<int64_t>(a.rows, props.sm_count * 2))),
                      kMaxThreads, stream, props, 1, a, attr);
}

// Launch, vectorising by 16 bytes when every pointer, row stride and the row length allow it.
template <class Op, typename T, typename W>
cudaError_t LaunchRows(const RowArgs<T, W>& a, const typename Op::Attr& attr,
                       cudaStream_t stream) {
  if (a.rows <= 0 || a.cols <= 0) return cudaSuccess;
  constexpr int kV = vec16<T>();
  bool vec = a.cols % kV == 0 && is_aligned(a.in, 16) && a.in_rs.divisible_by(kV) &&
             is_aligned(a.out, 16) && a.out_rs.divisible_by(kV);
  if constexpr (Op::kFusedAdd) {
    vec = vec && is_aligned(a.res, 16) && a.res_rs.divisible_by(kV) &&
          is_aligned(a.res_out, 16) && a.res_out_rs.divisible_by(kV);
  }
  if constexpr (Op::kWeight) vec = vec && is_aligned(a.weight, vec_align<W, kV>());
  if constexpr (Op::kBias) vec = vec && is_aligned(a.bias, vec_align<W, kV>());
  return vec ? LaunchRowsV<Op, T, W, kV>(a, attr, stream) : LaunchRowsV<Op, T, W, 1>(a, attr, stream);
}

}  // namespace xkernels::rowwise

#endif  // XKERNELS_ROW_KERNEL_H_
