// Attention launchers over raw pointers (params.h says what they compute): the tile kernel of
// the shape the call's rows call for (decode.h), then, when its keys were split, the merge of the
// partial states (merge.h).
//
//   attention::Params p;  ...pointers, strides, sizes...
//   attention::Attention<__nv_bfloat16>(p, stream);   // p.num_splits > 1 needs p.workspace of
//                                                       // WorkspaceElems(...) floats
//   attention::PlanSplits(geometry, &p.num_splits);    // a split count that fills the GPU
#ifndef XKERNELS_ATTENTION_ATTENTION_H_
#define XKERNELS_ATTENTION_ATTENTION_H_

#include <cuda_runtime.h>

#include "xkernels/attention/decode.h"
#include "xkernels/attention/merge.h"
#include "xkernels/attention/params.h"
#include "xkernels/attention/prefill.h"
#include "xkernels/attention/sm90.h"
#include "xkernels/common.h"

namespace xkernels::attention {

// The query tiles of `rows` packed rows in a call: the launch's grid x. Dense queries: every
// request has the same tiles. Ragged: an upper bound on the tiles of the whole batch (sum of
// ceil(q_len(b) * group / rows) <= total_q * group / rows + batch); the blocks find their request
// on the GPU and the ones past the last tile return.
inline int64_t QueryTiles(const Params& p, int64_t rows) {
  const int64_t group = p.num_qo_heads / p.num_kv_heads;
  return p.qo_indptr == nullptr ? (p.q_len * group + rows - 1) / rows * p.batch
                                : (p.total_q * group + rows - 1) / rows + p.batch;
}

template <class Tl, typename T>
cudaError_t LaunchTile(const Params& p, cudaStream_t stream, const DeviceProps& props) {
  if (Tl::kSmemBytes > props.smem_optin) return cudaErrorInvalidConfiguration;
  const int64_t blocks = QueryTiles(p, Tl::kRows);
  if (blocks == 0) return cudaSuccess;
  if (blocks > 0x7fffffff) return cudaErrorInvalidConfiguration;
  void (*kernel)(Params) = nullptr;
  if constexpr (Tl::kPipelinedKv) {  // a dense or ragged KV without soft cap: the kernel for it
    if (DenseKernelRuns<Tl, T>(p)) {
      XK_CUDA_TRY((PreparedKernel<Tl, T, false>(&kernel)));
    }
  }
  if (kernel == nullptr) XK_CUDA_TRY((PreparedKernel<Tl, T, true>(&kernel)));
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(p.num_kv_heads),
                  static_cast<unsigned>(p.num_splits));
  const LaunchConfig lc(grid, dim3(Tl::kThreads), stream, 1, UsePDL(props), Tl::kSmemBytes);
  return cudaLaunchKernelEx(&lc.cfg, kernel, p);
}

// The second kernel of split-KV: merges the p.num_splits partial states in p.workspace into
// p.out and p.lse.
template <typename T>
cudaError_t MergeSplits(const Params& p, cudaStream_t stream) {
  // The partial states: [split][row][head][d] and [split][row][head] (params.h).
  const int64_t hd = static_cast<int64_t>(p.num_qo_heads) * p.head_dim;
  MergeParams m;
  m.rows = p.total_q;
  m.heads = p.num_qo_heads;
  m.head_dim = p.head_dim;
  m.num_states = p.num_splits;
  m.v = p.workspace;
  m.v_rows = RowStride(hd);
  m.v_stride_k = p.total_q * hd;
  m.v_stride_h = p.head_dim;
  m.s = p.workspace + p.num_splits * p.total_q * hd;
  m.s_rows = RowStride(p.num_qo_heads);
  m.s_stride_k = p.total_q * p.num_qo_heads;
  m.s_stride_h = 1;
  m.log2_in = true;
  m.out = p.out;
  m.out_stride_h = p.out_stride_h;
  m.lse = p.lse;
  m.lse_stride_h = 1;
  if (p.qo_indptr == nullptr) {  // row b * q_len + t
    m.out_rows = RowStride(p.out_stride_b, p.out_stride_t, p.q_len);
    m.lse_rows = RowStride(p.lse_stride_b, p.lse_stride_t, p.q_len);
  } else {  // row q_begin(b) + t
    m.out_rows = RowStride(p.out_stride_t);
    m.lse_rows = RowStride(p.lse_stride_t);
    m.valid_indptr = p.qo_indptr;
    m.valid_batch = p.batch;
  }
  return MergeStates<float, T>(m, stream);
}

// Whether p runs on the sm90 kernel: asked for by name (the bindings check that it can), or
// chosen on an sm_90 device for prefill (a mean of 64 or more query tokens per request).
inline bool UseSm90(const Params& p, const DeviceProps& props) {
  if (p.kernel == Kernel::kSm90) return true;
  if (p.kernel != Kernel::kAuto || props.cc_major != 9 || Sm90Unsupported(p) != nullptr) {
    return false;
  }
  return RowsPerRequest(p.total_q, p.batch, 1) >= 64;
}

// Runs p on `stream`: T is __half or __nv_bfloat16 (q, k, v and out).
template <typename T>
cudaError_t Attention(const Params& p, cudaStream_t stream) {
  if (p.batch == 0 || p.total_q == 0 || p.num_qo_heads == 0) return cudaSuccess;
  if (p.num_kv_heads <= 0 || p.num_qo_heads % p.num_kv_heads != 0 || p.num_splits < 1 ||
      (p.num_splits > 1 && p.workspace == nullptr)) {
    return cudaErrorInvalidValue;
  }
  DeviceProps props;
  XK_CUDA_TRY(GetDeviceProps(&props));
  if (UseSm90(p, props)) {
    const cudaError_t err =
        p.head_dim == 64  ? LaunchSm90Attention<Sm90PrefillTile<64>, T>(p, stream, props)
        : Sm90LongKeys(p) ? LaunchSm90Attention<Sm90LongKeysTile, T>(p, stream, props)
                          : LaunchSm90Attention<Sm90PrefillTile<128>, T>(p, stream, props);
    if (err != cudaErrorNotSupported || p.kernel == Kernel::kSm90) return err;
  }
  const int64_t group = p.num_qo_heads / p.num_kv_heads;
  TileShape shape = ChooseShape(p.head_dim, RowsPerRequest(p.total_q, p.batch, group));
  if (WideDecode(p.head_dim, shape,
                 QueryTiles(p, DecodeTile<128>::kRows) * p.num_kv_heads * p.num_splits, props)) {
    shape = TileShape::kDecodeWide;  // one wave of blocks
  }
  XK_CUDA_TRY(DispatchTile(p.head_dim, shape, [&](auto tile) {
    return LaunchTile<decltype(tile), T>(p, stream, props);
  }));
  return p.num_splits == 1 ? cudaSuccess : MergeSplits<T>(p, stream);
}

}  // namespace xkernels::attention

#endif  // XKERNELS_ATTENTION_ATTENTION_H_
