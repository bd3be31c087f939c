// What one attention call computes and where its tensors live: shared by the CUDA kernels
// (attention/prefill.h, decode.h, merge.h) and the host implementation. Plain C++, no CUDA.
//
// Semantics, for request b, query token t (of n = q_len(b)) and query head h, kv head
// hk = h / (num_qo_heads / num_kv_heads), over the request's keys p = 0 .. kv_len(b) - 1:
//   s(p)   = q . k(p) * sm_scale, then cap * tanh(s / cap) when logits_soft_cap = cap > 0
//   visible: p <= t + kv_len - n when causal (aligned to the bottom right);
//            p >= t + kv_len - n - window_left when window_left >= 0
//   out    = sum_p softmax(s)(p) v(p) over the visible keys; 0 when none is visible
//   lse    = log(sum_p exp(s(p))) (natural log) over the visible keys; -inf when none is
// Every tensor's head dimension (head_dim elements) is contiguous; other strides are in elements.
#ifndef XKERNELS_ATTENTION_PARAMS_H_
#define XKERNELS_ATTENTION_PARAMS_H_

#include <cstdint>

#include "xkernels/rows.h"

namespace xkernels::attention {

// How keys and values are addressed (see Params).
enum class KvMode : int32_t { kDense = 0, kRagged = 1, kPaged = 2 };

// Which kernel runs a call (CUDA only): chosen for the device and shapes, or one by name.
enum class Kernel : int32_t {
  kAuto = 0,
  kSm80 = 1,  // cp.async + mma.sync tiles (prefill.h, decode.h): every shape, sm_80+
  kSm90 = 2,  // TMA + wgmma prefill (sm90.h): sm_90 GPUs, the shapes Sm90Unsupported allows
};

// Division by a runtime divisor d >= 1 of numbers below 2^31 with a multiply-high, an add and a
// shift (Granlund-Montgomery): n / d = (umulhi(n, mul) + n) >> shift, for the page lookups of
// every key a kernel loads. Built on the host (the bindings set Params::page_div).
struct FastDiv {
  uint32_t d = 1, mul = 0, shift = 0;

  FastDiv() = default;
  explicit FastDiv(uint32_t divisor) : d(divisor) {
    while ((1u << shift) < d) ++shift;  // shift = ceil(log2(d))
    // mul = floor(2^32 * (2^shift - d) / d) + 1: exact for every n < 2^31
    mul = static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << shift) - d)) / d + 1);
  }

  XK_HOST_DEVICE uint32_t div(uint32_t n) const {
#if defined(__CUDA_ARCH__)
    return (__umulhi(n, mul) + n) >> shift;
#else
    return static_cast<uint32_t>((((uint64_t{n} * mul) >> 32) + n) >> shift);
#endif
  }
};

struct Params {
  // Queries. Token t of request b, query head h, at
  //   q + b * q_stride_b + (q_begin(b) + t) * q_stride_t + h * q_stride_h,
  // q_begin(b) = qo_indptr[b] and q_len(b) = qo_indptr[b + 1] - qo_indptr[b] when qo_indptr is
  // given (ragged: q_stride_b is 0), else q_begin(b) = 0 and q_len(b) = q_len. `out` is
  // addressed the same way; `lse` (float, may be null) with its own strides and head stride 1.
  const void* q = nullptr;
  int64_t q_stride_b = 0, q_stride_t = 0, q_stride_h = 0;
  void* out = nullptr;
  int64_t out_stride_b = 0, out_stride_t = 0, out_stride_h = 0;
  float* lse = nullptr;
  int64_t lse_stride_b = 0, lse_stride_t = 0;
  const int32_t* qo_indptr = nullptr;  // [batch + 1], or null
  int64_t q_len = 0;                   // tokens per request when qo_indptr is null
  // Rows of the queries' token dimension over the batch: batch * q_len, or q.shape[0] for a
  // ragged batch (qo_indptr[batch] <= total_q). Sizes the split-KV workspace.
  int64_t total_q = 0;

  // Keys and values. Token p of request b, kv head h:
  //   kDense:  k + b * k_stride_b + p * k_stride_t + h * k_stride_h,     kv_len(b) = kv_len
  //   kRagged: k + (kv_indptr[b] + p) * k_stride_t + h * k_stride_h,     kv_len(b) from kv_indptr
  //   kPaged:  k + kv_indices[kv_indptr[b] + p / page_size] * k_stride_b
  //              + (p % page_size) * k_stride_t + h * k_stride_h,
  //            kv_len(b) = (pages - 1) * page_size + kv_last_page_len[b], pages from kv_indptr
  //            (0 when the request has no page)
  // (v likewise, with its own strides).
  KvMode kv_mode = KvMode::kDense;
  const void* k = nullptr;
  const void* v = nullptr;
  int64_t k_stride_b = 0, k_stride_t = 0, k_stride_h = 0;
  int64_t v_stride_b = 0, v_stride_t = 0, v_stride_h = 0;
  const int32_t* kv_indptr = nullptr;
  const int32_t* kv_indices = nullptr;
  const int32_t* kv_last_page_len = nullptr;
  // kDense: keys per request. kRagged: rows of k and v, kPaged: pages of the caches (the extents
  // that the CUDA kernels clamp the indices they read to).
  int64_t kv_len = 0;
  int64_t kv_indices_len = 0;  // kPaged: entries of kv_indices
  int32_t page_size = 1;       // kPaged
  FastDiv page_div;            // kPaged: division by page_size (the launcher sets it)

  int32_t batch = 0, num_qo_heads = 0, num_kv_heads = 0, head_dim = 0;
  float sm_scale = 1.f;         // > 0
  float logits_soft_cap = 0.f;  // 0: off
  int32_t window_left = -1;     // -1: no window
  bool causal = false;
  Kernel kernel = Kernel::kAuto;

  // Split-KV (CUDA only; the host path computes each row whole). With num_splits > 1 the keys
  // of every query tile are split over num_splits thread blocks, each writing its normalised
  // partial output and its log2-sum-exp to `workspace`, merged by a second kernel:
  //   out  [s][row][h][d]: workspace + ((s * total_q + row) * num_qo_heads + h) * head_dim + d
  //   lse2 [s][row][h]:    workspace + num_splits * total_q * num_qo_heads * head_dim
  //                                  + (s * total_q + row) * num_qo_heads + h
  // where row = q_begin(b) + t (ragged) or b * q_len + t (dense).
  int32_t num_splits = 1;
  float* workspace = nullptr;
};

// Float elements of the split-KV workspace.
inline int64_t WorkspaceElems(int64_t num_splits, int64_t total_q, int64_t num_qo_heads,
                              int64_t head_dim) {
  return num_splits > 1 ? num_splits * total_q * num_qo_heads * (head_dim + 1) : 0;
}

// Merging attention states: for each row r and head h, num_states states (v_i, s_i), v_i a
// head_dim vector normalised by its own softmax denominator and s_i its log-sum-exp, into
//   out = sum_i w_i v_i / sum_i w_i,  lse = m + log(sum_i w_i),  w_i = exp(s_i - m), m = max_i s_i
// (0 and -inf when every s_i is -inf). The exported merge_state / merge_states, and split-KV's
// second kernel (over the workspace, with log2 LSEs).
struct MergeParams {
  int64_t rows = 0;
  int32_t heads = 0, head_dim = 0, num_states = 0;
  // State i (i < num_states, or i < num_states - 1 when v1 is given) of row r and head h:
  //   v + v_rows.offset(r) + i * v_stride_k + h * v_stride_h
  //   s + s_rows.offset(r) + i * s_stride_k + h * s_stride_h
  const void* v = nullptr;
  RowStride v_rows;
  int64_t v_stride_k = 0, v_stride_h = 0;
  const float* s = nullptr;
  RowStride s_rows;
  int64_t s_stride_k = 0, s_stride_h = 0;
  // When not null, the last state (merge_state's b) is in tensors of its own.
  const void* v1 = nullptr;
  RowStride v1_rows;
  int64_t v1_stride_h = 0;
  const float* s1 = nullptr;
  RowStride s1_rows;
  int64_t s1_stride_h = 0;
  void* out = nullptr;
  RowStride out_rows;
  int64_t out_stride_h = 0;
  float* lse = nullptr;  // may be null
  RowStride lse_rows;
  int64_t lse_stride_h = 0;
  bool log2_in = false;  // the s are log2-sum-exps (split-KV partials); lse is natural log always
  // Split-KV over a ragged batch: only rows valid_indptr[0] .. valid_indptr[valid_batch] exist
  // (the others were not computed, and their outputs are left alone). Null: every row.
  const int32_t* valid_indptr = nullptr;
  int32_t valid_batch = 0;
};

}  // namespace xkernels::attention

#endif  // XKERNELS_ATTENTION_PARAMS_H_
