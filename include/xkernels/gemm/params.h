// What the GEMM and FP8-quantisation launchers take, over raw pointers with row pitches. Host code
// (bindings, the host implementation) and kernels share it; CUDA-free.
//
//   out [m, n] = (a [m, k] * sa) @ ((b * sb) [n, k])^T (+ bias [n])
//
// or, gated (act >= 0, 16-bit operands, b as [n, k]): b holds 2n rows, the gate's n first, and
//
//   out [m, n] = act(a @ b[0, n)^T + bias[0, n)) * (a @ b[n, 2n)^T + bias[n, 2n))
//
// (a gated MLP's gate and up projections with silu_and_mul, or the gelu forms, after them: one
// pass over a, and the [m, 2n] product never leaves the GPU's registers).
//
// a and b are 16-bit floats (sa = sb = 1) or e4m3 with scales (Scale): per tensor (one float),
// per row (a: one per row of a; b: one per row of b, i.e. per output column), or per block (a:
// one per 1 x 128 block along k, [m, ceil(k / 128)]; b: one per 128 x 128 block,
// [ceil(n / 128), ceil(k / 128)]; the DeepSeek-V3 recipe). Per-tensor and per-row scales may be
// mixed (a per row, b per tensor, ...); block scales go with block scales only.
#ifndef XKERNELS_GEMM_PARAMS_H_
#define XKERNELS_GEMM_PARAMS_H_

#include <cstdint>

namespace xkernels::gemm {

// b's layout: [n, k] (an nn.Linear weight: out = a @ b^T) or [k, n] (out = a @ b; 16-bit only).
enum class BLayout : int32_t { kNK = 0, kKN = 1 };

// Element types at the launchers' boundary. The codes are also what the exported functions take
// for out_dtype (pkg/xkernels/ops.py, DTYPES, lists them in this order).
enum class Elem : int32_t { kF16 = 0, kBF16 = 1, kF32 = 2, kE4M3 = 3 };

// How an e4m3 operand is scaled (kNone for 16-bit operands).
enum class Scale : int32_t { kNone = 0, kTensor = 1, kRow = 2, kBlock = 3 };

// Which kernel runs: chosen for the device and shapes, or one version by name (benchmarks, tests).
enum class Path : int32_t {
  kAuto = 0,
  kSm80 = 1,  // cp.async + ldmatrix + mma.sync (sm_80+; 16-bit only)
  kSm90 = 2   // TMA + wgmma, warp-specialised and persistent (sm_90a)
};

// Block scales cover this many values along k (and, for b, along n).
constexpr int kScaleBlock = 128;

// Alignment the kernels need (bindings/gemm.cu checks it): a, b and out 16-byte aligned with row
// pitches of whole 16 bytes (TMA), n and k multiples of 8 (16 for e4m3), bias 16-byte aligned.
struct Params {
  const void* a = nullptr;         // [m, k], row pitch lda elements
  const void* b = nullptr;         // [n, k] or [k, n] (b_layout), row pitch ldb; a's type
  const void* bias = nullptr;      // [n], contiguous, bias_type; or null
  void* out = nullptr;             // [m, n], row pitch ldc, out_type
  float* workspace = nullptr;      // [splits, m, n] fp32 partial sums when splits > 1
  const float* a_scale = nullptr;  // e4m3 only: see Scale; block scales row pitch a_scale_ld
  const float* b_scale = nullptr;
  int64_t lda = 0, ldb = 0, ldc = 0;
  int64_t a_scale_ld = 0, b_scale_ld = 0;  // kBlock: row pitches of the scale matrices
  int32_t m = 0, n = 0, k = 0;
  int32_t splits = 1;          // k split over this many thread blocks per output tile, summed after
  Elem in_type = Elem::kBF16;  // a and b: kF16, kBF16 or kE4M3
  Elem out_type = Elem::kBF16;  // kF16, kBF16 or kF32 (16-bit inputs: in_type or kF32)
  Elem bias_type = Elem::kF32;  // kF16 or kBF16 (a's type; out_type for e4m3) or kF32
  BLayout b_layout = BLayout::kNK;
  Scale a_scale_kind = Scale::kNone, b_scale_kind = Scale::kNone;
  Path path = Path::kAuto;
  int32_t act = -1;  // gated (see above): 0 silu, 1 gelu, 2 gelu_tanh (math::Act); -1 plain
  // The kernels' fp32 partial tiles into the workspace even unsplit, their sum left to the caller
  // (gemm.h's Gemm, for a gated product on a kernel without the gated epilogue).
  bool partials_only = false;
  // Stream-K (sm90.h): stream_k, the workspace holds gemm.h's StreamKElems floats, so the sm90
  // launcher may spread the last work units' k blocks evenly over the grid (sk_units of them, the
  // launcher's choice), the partial tiles meeting in the workspace; sk_nonce marks this call's
  // ready flags there (never 0).
  bool stream_k = false;
  int32_t sk_units = 0;
  uint64_t sk_nonce = 0;
  // The sm90 tiles' last row of tiles loads its a box ending at row m (sm90.h, Unit); false only
  // for A/B probes of the box past m.
  bool shift_last_rows = true;
  // Where a or b has fewer rows than the sm90 tile's side of it (m < 128 on 128-row tiles: a
  // decode batch), its TMA box covers only those rows (rounded up to 8) instead of reaching past
  // the tensor's end (sm90.h, LaunchSm90); false only for A/B probes of the long box.
  bool short_boxes = true;
  int32_t stage_tx = 0;  // (the sm90 launcher's: the bytes one stage's loads bring)
};

// Floats of workspace a call with `splits` needs.
inline int64_t WorkspaceElems(int64_t splits, int64_t m, int64_t n) {
  return splits > 1 ? splits * m * n : 0;
}

// ... and a call of p: a gated product's partial tiles span both halves (2n columns); `always`:
// written even unsplit (a kernel without the gated epilogue takes the whole product there).
inline int64_t WorkspaceElems(const Params& p, bool always) {
  if (p.act < 0) return WorkspaceElems(p.splits, p.m, p.n);
  return p.splits > 1 || always ? static_cast<int64_t>(p.splits) * p.m * 2 * p.n : 0;
}

// ---- quantisation to e4m3: q = x / scale rounded (saturating at +-448), scale = amax / 448 over
// the group (1 where the group is all zeros), so that x ~ q * scale.
enum class Granularity : int32_t {
  kTensor = 0,  // one scale: [1]
  kRow = 1,     // one per row: [rows]
  kBlock = 2,   // one per 1 x 128 block of a row: [rows, ceil(cols / 128)]
  kBlock2d = 3  // one per 128 x 128 block: [ceil(rows / 128), ceil(cols / 128)] (weights)
};

constexpr float kE4M3Max = 448.f;

struct QuantParams {
  const void* x = nullptr;  // [rows, cols], row pitch ldx, x_type (kF16, kBF16 or kF32)
  void* q = nullptr;        // [rows, cols] e4m3, row pitch ldq
  float* scale = nullptr;   // see Granularity; contiguous rows of pitch scale_ld (kBlock, kBlock2d)
  int64_t ldx = 0, ldq = 0, scale_ld = 0;
  int32_t rows = 0, cols = 0;
  Elem x_type = Elem::kBF16;
  Granularity granularity = Granularity::kRow;
};

}  // namespace xkernels::gemm

#endif  // XKERNELS_GEMM_PARAMS_H_
