"""`xkernels bench --family gemm`: fp16/bf16 and fp8 GEMM, and the fp8 quantisers, next to their
peers (issue 22's table).

The family's cases, impls, inputs and checks; the timing, rows, sampling rounds and context are
bench.py's (GraphTimer over rotating input sets, CUDA events around graph replays, the impls of a
case sampled in the interleaved rounds of balanced_orders; time_host on the host path).

- GEMM: out [M, N] = a [M, K] @ b [N, K]^T (an nn.Linear weight), TFLOP/s = 2 M N K / time.
  16-bit: xkernels.torch.gemm (and its sm80 kernel, kernel="sm80", at bf16 8192^3) against
  torch.matmul and F.linear (cuBLAS) and torch.compile(mode="max-autotune-no-cudagraphs").
  e4m3 (out bf16): xkernels.torch.gemm_fp8 with per-tensor, row-wise (a per row, b per output
  column) or block-wise scales (a 1 x 128, b 128 x 128: the DeepSeek-V3 recipe) against
  torch._scaled_mm (cuBLASLt; with and without fast accumulation where it has both), FlashInfer's
  bmm_fp8 (per-tensor: its cuBLASLt and cuDNN paths) and fp8_blockscale_gemm_sm90 (block-wise;
  FlashInfer >= 0.6.0), and torch.compile of the _scaled_mm call. A dequantise-then-cuBLAS
  composite is not a peer. Decode shapes (M <= 64) also get GB/s over a + b + out.
- gated: out [M, N] = silu(a @ gate^T) * (a @ up^T) for b [2N, K] (gate rows, then up rows: a
  gated MLP's first half), TFLOP/s = 2 M (2N) K / time. xkernels.torch.gemm_gated (the epilogue
  gates) and, as a reference, xkernels' gemm then silu_and_mul; against torch.matmul into [M, 2N]
  then torch's silu and multiply, and torch.compile (max-autotune-no-cudagraphs) of that
  composite.
- quantize: xkernels.torch.quantize_fp8(x, granularity) of bf16 x -> (q e4m3, scale float32)
  against the torch composite (amax, divide, clamp, cast) and torch.compile of it; GB/s over x
  read + q and the scales written. FlashInfer 0.5.3 has no quantiser of these formats (its
  mxfp8_quantize writes 1 x 32 blocks with e8m0 scales, on sm_100).

FlashInfer 0.5.3 on sm_90, read from its sources: gemm_fp8_nt_groupwise and
gemm_fp8_nt_blockscaled (block-wise fp8) refuse every GPU but SM100/103/110/120/121 (cutlass) and
SM100/103 (trtllm); its DeepGEMM port (group_deepgemm_fp8_nt_groupwise, deep_gemm.py) only maps
the 100a/103a archs; mm_fp8 is the SM100 trtllm low-latency kernel. On sm_90 it has bmm_fp8
(per-tensor scales, through cuBLASLt or cuDNN). fp8_blockscale_gemm_sm90 (TensorRT-LLM's CUTLASS
kernel) arrived in 0.6.0: timed where installed.

Every impl's output is checked against a float64 reference before it is timed (a relative
Frobenius error bound; GEMM: the first and last 16 rows and 16 spread between, every column;
quantize: the scales, and the dequantised q of those rows against the reference's). torch.compile
compiles in its first call, outside the timing, under --compile-timeout seconds per case.
"""

from __future__ import annotations

import contextlib
import importlib.util
import math
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import bench

FAMILY = "gemm"
BLOCK = 128  # fp8 scale blocks (include/xkernels/gemm/params.h, kScaleBlock)
E4M3_MAX = 448.0
DECODE_M = 64  # GEMMs of at most this many rows also get GB/s (memory-bound on b)
ELEM = {"bf16": 2, "fp16": 2, "e4m3": 1}
TORCH_DTYPE = {"bf16": "bfloat16", "fp16": "float16", "e4m3": "float8_e4m3fn"}
# As shared/reference/anchors.md names the GEMM cases: "<dtype> mm MxNxK [scaling]"
LABEL_DTYPE = {"bf16": "bfloat16", "fp16": "float16", "e4m3": "fp8e4m3"}
LABEL_SCALING = {"tensor": "per-tensor", "row": "rowwise", "block": "blockwise"}
GRANULARITIES = ("tensor", "row", "block", "block2d")
# The scales of a and b of an e4m3 GEMM, by the GEMM's scaling
OPERAND_SCALES = {"tensor": ("tensor", "tensor"), "row": ("row", "row"),
                  "block": ("block", "block2d")}
# ||out - ref|| / ||ref|| at most this: GEMM (bf16 output rounding alone is about 1e-3; a lost
# 128-deep slice of K = 8192 about 1e-1); quantize, against the reference's dequantised q (the
# kernels and the torch composite meet its definition to the bit; the bound leaves room for a
# quantiser that multiplies by 1 / scale, one e4m3 step off in about 2^-20 of the values); the
# scales to a float32 rounding.
GEMM_REL_TOL = 1e-2
QUANT_REL_TOL = 1e-3
SCALE_REL_TOL = 1e-6
CHECK_ROWS = 16
COMPILE_MODE = "max-autotune-no-cudagraphs"  # the bench captures its own graphs
COMPILE_TIMEOUT_S = 120.0  # per case, unless --compile-timeout says otherwise
FP32, FAST = "fp32", "fast"  # accumulation of the fp8 peers where known (the rows' `accum`)

TABLE_COLUMNS = ("case", "impl", "ms", "TFLOP/s", "GB/s", "%copy", "vs best", "vs fp32 acc",
                 "note")
LEGEND = """[gemm]
vs best: xkernels ms / the fastest peer's; vs fp32 acc: / the fastest peer not marked as skipping
  cuBLASLt's fp32 promotion of fp8 sums (torch._scaled_mm fast accum, flashinfer bmm_fp8 cublas);
  < 1: xkernels faster. GB/s: decode GEMMs (a + b + out) and quantize (x + q + scales)."""


# --------------------------------------------------------------------------------------------
# Cases and accounting (no torch).


@dataclass(frozen=True)
class Case:
    kind: str  # "gemm" (m, n, k), "gated" (b [2n, k]) or "quantize" (x [m, k]; n is 0)
    m: int
    n: int
    k: int
    dtype: str  # GEMM inputs: "bf16", "fp16" or "e4m3"; quantize: x's dtype
    scaling: str | None = None  # e4m3 GEMM: "tensor", "row", "block"; quantize: GRANULARITIES
    sm80: bool = False  # also time xkernels' sm80 kernel (kernel="sm80")

    @property
    def op(self) -> str:
        if self.kind == "quantize":
            return "quantize_fp8"
        if self.kind == "gated":
            return "gemm_gated"
        return "gemm_fp8" if self.dtype == "e4m3" else "gemm"

    @property
    def decode(self) -> bool:
        return self.kind == "gemm" and self.m <= DECODE_M

    @property
    def out_dtype(self) -> str:
        """GEMM output: bf16 for e4m3 inputs, else the inputs' dtype; quantize: e4m3."""
        if self.kind == "quantize":
            return "e4m3"
        return "bf16" if self.dtype == "e4m3" else self.dtype

    @property
    def shape(self) -> tuple[int, ...]:
        return (self.m, self.k) if self.kind == "quantize" else (self.m, self.n, self.k)

    @property
    def label(self) -> str:
        if self.kind == "quantize":
            return f"quantize {self.dtype} {self.m}x{self.k} {self.scaling}"
        if self.kind == "gated":
            return f"{LABEL_DTYPE[self.dtype]} mm+silu_and_mul {self.m}x{self.n}x{self.k}"
        s = f" {LABEL_SCALING[self.scaling]}" if self.scaling else ""
        return f"{LABEL_DTYPE[self.dtype]} mm {self.m}x{self.n}x{self.k}{s}"

    def params(self) -> dict[str, Any]:
        """The row fields of the case."""
        return {"case": self.label, "kind": "decode" if self.decode else self.kind,
                "m": self.m, "n": self.n if self.kind != "quantize" else None, "k": self.k,
                "dtype": self.dtype, "out_dtype": self.out_dtype, "scaling": self.scaling}


def gemm(m: int, n: int, k: int, dtype: str, scaling: str | None = None,
         sm80: bool = False) -> Case:
    return Case("gemm", m, n, k, dtype, scaling, sm80)


def gated(m: int, n: int, k: int, dtype: str = "bf16") -> Case:
    return Case("gated", m, n, k, dtype)


def quantize(m: int, k: int, granularity: str, dtype: str = "bf16") -> Case:
    return Case("quantize", m, 0, k, dtype, granularity)


SQ = 8192
PREFILL = [gemm(SQ, SQ, SQ, "bf16", sm80=True), gemm(SQ, SQ, SQ, "fp16"),
           gemm(4096, 4096, 4096, "fp16"), gemm(16384, 8192, 2048, "fp16"),
           *(gemm(SQ, SQ, SQ, "e4m3", s) for s in ("tensor", "row", "block"))]
DECODE = [gemm(m, SQ, k, dtype, scaling) for dtype, scaling in (("bf16", None), ("e4m3", "row"))
          for k in (SQ, 28672) for m in (1, 16, 64)]
# and 4 rows (a small decode batch, or a few speculated tokens): the bulk-copy GEMV (gemv.h)
DECODE += [gemm(4, SQ, k, "bf16") for k in (SQ, 28672)]
QUANTIZE = [quantize(m, SQ, g) for m in (SQ, 16) for g in GRANULARITIES]
# mid-sized batches (chunked prefill, large decode batches): Llama 3 8B's O, QKV, down and
# (unfused) gate + up projections and 70B's O projection at m 192 to 576, where a wave quantum and the padding of the
# last row of tiles decide the tile (gemm.h, TileGrid)
MID_M = (192, 256, 320, 384, 512, 576)
MID_NK = ((4096, 4096), (6144, 4096), (4096, 14336), (28672, 4096), (8192, 8192))
MID = [gemm(m, n, k, "bf16") for m in MID_M for n, k in MID_NK]
# and e4m3 with row-wise scales at three of those m, Llama 3 8B's O and down projections
MID8 = [gemm(m, n, k, "e4m3", "row") for m in (192, 320, 576) for n, k in ((4096, 4096),
                                                                           (4096, 14336))]
# Llama 3 8B's gate and up projections (2 x 14336 x 4096) at prefill and decode batches
GATED = [gated(m, 14336, 4096) for m in (8192, 4096, 128, 4, 1)]
QUICK = [gemm(SQ, SQ, SQ, "bf16", sm80=True), gemm(SQ, SQ, SQ, "e4m3", "row"),
         gemm(16, SQ, SQ, "bf16"), gemm(16, SQ, SQ, "e4m3", "row"), quantize(SQ, SQ, "row"),
         quantize(SQ, SQ, "block")]
# Host path (no GPU): small shapes (a partial 128 x 128 tile of rows), so that it stays fast
HOST = [gemm(96, 256, 384, "bf16"), *(gemm(96, 256, 384, "e4m3", s) for s in LABEL_SCALING),
        gated(96, 128, 384),
        gemm(4, 256, 384, "bf16"), gemm(4, 256, 384, "e4m3", "row"),
        *(quantize(40, 384, g) for g in GRANULARITIES)]
HOST_QUICK = [gemm(96, 256, 384, "bf16"), gemm(96, 256, 384, "e4m3", "row"),
              quantize(40, 384, "row")]


def select_cases(quick: bool = False, gpu: bool = True) -> list[Case]:
    """The family's cases: issue 22's table (prefill shapes, decode M = 1, 16, 64, the quantisers)
    and mid-sized m (192 to 576; e4m3 row-wise at 192, 320, 576);
    --quick a case of each kind; the host path a few small shapes."""
    if not gpu:
        return list(HOST_QUICK if quick else HOST)
    return list(QUICK if quick else [*PREFILL, *DECODE, *MID, *MID8, *GATED, *QUANTIZE])


def scale_shape(granularity: str, rows: int, cols: int) -> tuple[int, ...]:
    """The float32 scales of a [rows, cols] operand (params.h, Granularity): (1,), (rows, 1),
    (rows, ceil(cols / 128)), (ceil(rows / 128), ceil(cols / 128))."""
    blocks = -(-cols // BLOCK)
    return {"tensor": (1,), "row": (rows, 1), "block": (rows, blocks),
            "block2d": (-(-rows // BLOCK), blocks)}[granularity]


def flops(case: Case) -> int:
    """2 M N K (a multiply-add is two), anchors.md's count (gated: b's 2N rows); 0 for
    quantize."""
    if case.kind == "gated":
        return 4 * case.m * case.n * case.k
    return 2 * case.m * case.n * case.k if case.kind == "gemm" else 0


def bytes_moved(case: Case) -> int:
    """GEMM: a and b read once, out written once (the fp8 scales, under 0.1%, left out).
    quantize: x read once, q and the scales written once."""
    if case.kind == "quantize":
        scales = math.prod(scale_shape(case.scaling, case.m, case.k))
        return case.m * case.k * (ELEM[case.dtype] + 1) + 4 * scales
    e = ELEM[case.dtype]
    rows_b = 2 * case.n if case.kind == "gated" else case.n
    return (case.m + rows_b) * case.k * e + case.m * case.n * ELEM[case.out_dtype]


def tflops(n: int, ms: float | None) -> float | None:
    return None if not n or not ms or ms <= 0 else n / ms / 1e9


def set_bytes(case: Case) -> int:
    """Bytes of the inputs one rotating set holds (bench.n_sets' set_bytes)."""
    if case.kind == "quantize":
        return case.m * case.k * ELEM[case.dtype]
    return (case.m + (2 if case.kind == "gated" else 1) * case.n) * case.k * ELEM[case.dtype]


def selection(case: Case) -> list[int]:
    """The checked rows: the first and last CHECK_ROWS and CHECK_ROWS spread between (all of a
    short matrix)."""
    n = case.m
    spread = ({round(i * (n - 1) / (CHECK_ROWS + 1)) for i in range(1, CHECK_ROWS + 1)}
              if n > 2 * CHECK_ROWS else set())
    return sorted(set(bench.check_index(n, CHECK_ROWS)) | spread)


# --------------------------------------------------------------------------------------------
# Ratios and the table (no torch).


def best_peers(rows: list[dict]) -> dict[int, tuple[int | None, int | None]]:
    """{index of an xkernels row: (index of the fastest peer of its case, of the fastest peer that
    accumulates in fp32)}. Peers that failed or failed their check do not count."""
    return bench.best_peer_pairs(rows, FAMILY, lambda r: [FP32] if r.get("accum") != FAST else [],
                                 FP32)


def ratios(rows: list[dict]) -> dict[int, tuple[float | None, float | None]]:
    """{index of an xkernels row: (its ms / the best peer's, / the best fp32-accumulating
    peer's)}; < 1: xkernels is faster."""
    return bench.pair_ratios(rows, best_peers(rows))


def format_table(rows: list[dict], copy_gbps: float | None = None) -> str:
    """The gemm table: case, impl, ms, TFLOP/s, GB/s and %copy (decode, quantize), vs best, vs
    fp32 acc, note."""
    rows = [r for r in rows if r.get("family") == FAMILY]
    rat = ratios(rows)
    cells: list[tuple[str, ...]] = [TABLE_COLUMNS]
    for i, r in enumerate(rows):
        g = r.get("gbps")
        vs, vf = rat.get(i, (None, None))
        cells.append((
            r.get("case") or f"{r['op']} {bench.fmt_shape(r['shape'])}", r["impl"],
            bench._fmt(r.get("ms"), ".4f" if (r.get("ms") or 0) < 10 else ".2f"),
            bench._fmt(r.get("tflops"), ".1f" if (r.get("tflops") or 0) >= 10 else ".3g"),
            bench._fmt(g, ".1f"), bench._fmt(bench.pct_copy(r, copy_gbps), ".1f"),
            bench._fmt(vs, ".3f"), bench._fmt(vf, ".3f"), bench.clip_note(r.get("note") or ""),
        ))
    return bench.render_cells(cells, {2, 3, 4, 5, 6, 7}, LEGEND)


# --------------------------------------------------------------------------------------------
# Quantisation in torch: the peer composite and the float64 reference.


def _scale_of(amax):
    """amax / 448, 1 where that is 0 (params.h)."""
    import torch

    s = amax / E4M3_MAX
    return torch.where(s == 0, torch.ones_like(s), s)


def group_amax(x, granularity: str):
    """|x|'s max over each group, in x's precision (a max is exact), in scale_shape's shape.
    Block granularities take cols in whole 128-column blocks."""
    import torch.nn.functional as F

    m, k = x.shape
    a = x.abs()
    if granularity == "tensor":
        return a.amax().reshape(1)
    if granularity == "row":
        return a.amax(-1, keepdim=True)
    blocks = a.view(m, k // BLOCK, BLOCK).amax(-1)  # (m, k / 128)
    if granularity == "block":
        return blocks
    blocks = F.pad(blocks, (0, 0, 0, -m % BLOCK))  # rows past m: zeros, which lose every max
    return blocks.view(-1, BLOCK, k // BLOCK).amax(1)  # (ceil(m / 128), k / 128)


def expand_scale(scale, granularity: str, m: int, k: int, rows=None):
    """The scales of a [m, k] operand as one per value ([m, k], or [len(rows), k])."""
    import torch

    if granularity == "tensor":
        out = scale.reshape(1, 1).expand(m, k)
    elif granularity == "row":
        out = scale.reshape(m, 1).expand(m, k)
    elif granularity == "block":
        out = scale.repeat_interleave(BLOCK, 1)[:, :k]
    else:
        out = scale.repeat_interleave(BLOCK, 0)[:m].repeat_interleave(BLOCK, 1)[:, :k]
    if rows is not None:
        out = out.index_select(0, torch.as_tensor(rows, device=out.device))
    return out


def quantize_torch(x, granularity: str):
    """The torch composite (the peer, and how the GEMM cases make their e4m3 inputs): float32
    amax per group, scale = amax / 448 (1 where 0), q = x / scale clamped to +-448 and cast
    (torch's cast does not saturate); block scales broadcast over [m, k / 128, 128] views. Returns
    (q, scale) in scale_shape's shape. Block granularities need k a multiple of 128."""
    import torch

    m, k = x.shape
    xf = x.float()
    s = _scale_of(group_amax(xf, granularity))
    if granularity in ("tensor", "row"):
        q = xf / s.reshape(-1, 1)
    else:
        rows = s if granularity == "block" else s.repeat_interleave(BLOCK, 0)[:m]  # (m, k / 128)
        q = (xf.view(m, k // BLOCK, BLOCK) / rows.unsqueeze(-1)).view(m, k)
    return q.clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn), s


def quantize_reference(x, granularity: str, rows: list[int]):
    """Float64 reference, as params.h and xkernels.reference.quantize_fp8 define it: (the scales
    in scale_shape's shape, amax / 448 rounded to float32; the dequantised q of `rows`,
    [len(rows), k]: e4m3(x / scale rounded to float32) * scale). A float64 quotient of float32
    values rounds to the float32 quotient (53 >= 2 * 24 + 2 bits: double rounding is innocuous)."""
    import torch

    m, k = x.shape
    scale = _scale_of(group_amax(x.double(), granularity)).float().double()
    idx = torch.as_tensor(rows, device=x.device)
    sx = expand_scale(scale, granularity, m, k, rows)
    q = (x.index_select(0, idx).double() / sx).float().clamp(-E4M3_MAX, E4M3_MAX)
    return scale, q.to(torch.float8_e4m3fn).double() * sx


# --------------------------------------------------------------------------------------------
# Impls: bind(set) -> call() -> GEMM: out [M, N] (a view where the peer's is not), quantize:
# (q, scale).


@dataclass
class Impl(bench.Impl):
    accum: str = ""  # e4m3 GEMM: FP32 or FAST
    compiled: bool = False  # torch.compile: its first call is held to --compile-timeout


def _scales(s: dict):
    return s["a_scale"], s["b_scale"]


def _xkernels_impls(case: Case) -> list[Impl]:
    if case.kind == "quantize":
        g = case.scaling

        def bind_out(s):
            import xkernels.torch as xt

            x, q, sc = s["x"], s["q"], s["scale"]
            return lambda: xt.quantize_fp8(x, granularity=g, q=q, scale=sc)

        def bind(s):
            import xkernels.torch as xt

            x = s["x"]
            return lambda: xt.quantize_fp8(x, granularity=g)

        alloc = Impl("xkernels", bind, "quantize_fp8(x, granularity): allocates q and scale")
        return [Impl("xkernels", bind_out, "quantize_fp8(x, granularity, q=, scale=)", alloc)]

    if case.kind == "gated":
        def bindg(s):
            import xkernels.torch as xt

            a, b, out = s["a"], s["b"], s["out"]
            return lambda: xt.gemm_gated(a, b, out=out)

        def bindu(s):
            import xkernels.torch as xt

            a, b, h, out = s["a"], s["b"], s["h"], s["out"]

            def call():
                xt.gemm(a, b, out=h)
                return xt.silu_and_mul(h, out=out)
            return call

        return [Impl("xkernels", bindg, "xkernels.torch.gemm_gated(a, b, out=)"),
                Impl("xkernels unfused", bindu,
                     "xkernels gemm(a, b, out=h) then silu_and_mul(h, out=): the [M, 2N] product "
                     "through memory")]

    def make(kernel: str):
        kw = {} if kernel == "auto" else {"kernel": kernel}

        def bind(s):
            import xkernels.torch as xt

            a, b, out = s["a"], s["b"], s["out"]
            if case.dtype == "e4m3":
                sa, sb = _scales(s)
                return lambda: xt.gemm_fp8(a, b, sa, sb, out=out, **kw)
            return lambda: xt.gemm(a, b, out=out, **kw)
        return bind

    fn = "gemm_fp8(a, b, a_scale, b_scale" if case.dtype == "e4m3" else "gemm(a, b"
    out = [Impl("xkernels", make("auto"), f"xkernels.torch.{fn}, out=)")]
    if case.sm80:
        out.append(Impl("xkernels sm80", make("sm80"),
                        f"xkernels.torch.{fn}, kernel='sm80', out=): cp.async + mma.sync"))
    return out


def _scaled_mm_args(case: Case, s: dict):
    """torch._scaled_mm's (a, b, scale_a, scale_b) for a set: b as b.t() of the contiguous [N, K]
    (column-major, as cuBLASLt takes it); scales per-tensor (1,), row-wise (M, 1) and (1, N),
    block-wise a's (M, K / 128) outer-dim-major (a column-major copy, made here) and b's as the
    transpose of its (N / 128, K / 128) (torch's layouts for cuBLASLt's 1x128 x 128x128 mode)."""
    a, b = s["a"], s["b"]
    sa, sb = _scales(s)
    if case.scaling == "row":
        sb = sb.view(1, -1)
    elif case.scaling == "block":
        sa, sb = sa.t().contiguous().t(), sb.t()
    return a, b.t(), sa, sb


def _torch_impls(case: Case, gpu: bool) -> list[Impl]:
    import torch
    import torch.nn.functional as F

    if case.kind == "quantize":
        g = case.scaling

        def bindq(s):
            x = s["x"]
            return lambda: quantize_torch(x, g)

        return [Impl("torch", bindq, "amax, divide, clamp, cast to float8_e4m3fn")]
    if case.kind == "gated":
        def bindg(s):
            a, b, h, out = s["a"], s["b"], s["h"], s["out"]
            g, u = h.chunk(2, dim=-1)

            def call():
                torch.matmul(a, b.t(), out=h)
                return torch.mul(F.silu(g), u, out=out)
            return call

        return [Impl("torch", bindg, "torch.matmul(a, b.t(), out=h) (cuBLAS), then "
                                     "torch.mul(F.silu(gate), up, out=)")]
    if case.dtype != "e4m3":
        def bindm(s):
            a, b, out = s["a"], s["b"], s["out"]
            return lambda: torch.matmul(a, b.t(), out=out)

        def bindl(s):
            a, b = s["a"], s["b"]
            return lambda: F.linear(a, b)

        return [Impl("torch.matmul", bindm, "torch.matmul(a, b.t(), out=): cuBLAS"),
                Impl("torch F.linear", bindl, "F.linear(a, b): cuBLAS; allocates out")]
    if not gpu:
        return []  # torch._scaled_mm is CUDA only

    def make(fast: bool):
        def bind(s):
            a, bt, sa, sb = _scaled_mm_args(case, s)
            return lambda: torch._scaled_mm(a, bt, sa, sb, out_dtype=torch.bfloat16,
                                            use_fast_accum=fast)
        return bind

    what = {"tensor": "per-tensor", "row": "row-wise", "block": "1x128 x 128x128"}[case.scaling]
    out = [Impl("torch._scaled_mm", make(False), f"cuBLASLt {what}, out bf16", accum=FP32)]
    if case.scaling != "block":  # cuBLASLt has no fast accumulation with block scales
        out.append(Impl("torch._scaled_mm fast accum", make(True),
                        f"cuBLASLt {what}, use_fast_accum=True (no fp32 promotion)", accum=FAST))
    return out


def _compile_impls(case: Case, gpu: bool) -> list[Impl]:
    """torch.compile of the torch composite (quantize, default mode) or of the matmul
    (max-autotune-no-cudagraphs), one compiled function per case, compiled on the first bind."""
    import torch

    compiled: dict[str, Callable] = {}

    def fn():  # compiled lazily: --impls without torch.compile never compiles
        if "f" not in compiled:
            if case.kind == "quantize":
                g = case.scaling

                def quant(x):
                    return quantize_torch(x, g)

                compiled["f"] = torch.compile(quant, dynamic=False)
            elif case.kind == "gated":
                import torch.nn.functional as F

                def mlp_in(a, b):
                    g, u = (a @ b.t()).chunk(2, dim=-1)
                    return F.silu(g) * u

                compiled["f"] = torch.compile(mlp_in, mode=COMPILE_MODE, dynamic=False)
            elif case.dtype == "e4m3":
                def scaled_mm(a, bt, sa, sb):
                    return torch._scaled_mm(a, bt, sa, sb, out_dtype=torch.bfloat16)

                compiled["f"] = torch.compile(scaled_mm, mode=COMPILE_MODE, dynamic=False)
            else:
                def mm(a, b):
                    return a @ b.t()

                compiled["f"] = torch.compile(mm, mode=COMPILE_MODE, dynamic=False)
        return compiled["f"]

    if case.kind == "quantize":
        def bindq(s):
            f, x = fn(), s["x"]
            return lambda: f(x)

        return [Impl("torch.compile", bindq, "the torch composite, compiled", compiled=True)]
    if case.dtype == "e4m3":
        if not gpu:
            return []

        def binds(s):
            f, args = fn(), _scaled_mm_args(case, s)
            return lambda: f(*args)

        return [Impl("torch.compile max-autotune", binds,
                     f"torch._scaled_mm compiled, mode={COMPILE_MODE}", accum=FP32,
                     compiled=True)]

    def bindm(s):
        f, a, b = fn(), s["a"], s["b"]
        return lambda: f(a, b)

    what = "silu(gate) * up of a @ b.t()" if case.kind == "gated" else "a @ b.t()"
    return [Impl("torch.compile max-autotune", bindm, f"{what} compiled, mode={COMPILE_MODE}",
                 compiled=True)]


_FI_NOTED: set[str] = set()


def _note_once(key: str, text: str) -> None:
    if key not in _FI_NOTED:
        _FI_NOTED.add(key)
        print(text, file=sys.stderr, flush=True)


def _flashinfer_impls(case: Case, fi: Any) -> list[Impl]:
    """FlashInfer on sm_90: bmm_fp8 (per-tensor; backend "cublas" and, where the cudnn frontend
    is installed, "cudnn") and fp8_blockscale_gemm_sm90 (block-wise, FlashInfer >= 0.6.0)."""
    if case.kind != "gemm" or case.dtype != "e4m3" or case.scaling == "row":
        return []
    if isinstance(fi, BaseException):
        name = "flashinfer bmm_fp8" if case.scaling == "tensor" else "flashinfer"
        return [Impl(name, bench._failing(fi))]
    import torch

    if case.scaling == "tensor":
        def make(backend: str):
            def bind(s):
                a3, b3 = s["a"].unsqueeze(0), s["b"].t().unsqueeze(0)  # [1, M, K], [1, K, N]
                o3 = s["out"].unsqueeze(0)
                sa, sb = _scales(s)
                return lambda: fi.bmm_fp8(a3, b3, sa, sb, torch.bfloat16, out=o3,
                                          backend=backend)[0]
            return bind

        # its cuBLASLt path sets CUBLASLT_MATMUL_DESC_FAST_ACCUM (include/flashinfer/gemm/
        # bmm_fp8.cuh); cuDNN's accumulation is not documented: left unmarked
        out = [Impl("flashinfer bmm_fp8 cublas", make("cublas"),
                    "bmm_fp8(backend='cublas'): cuBLASLt with fast accumulation, out=",
                    accum=FAST)]
        if importlib.util.find_spec("cudnn") is not None:
            out.append(Impl("flashinfer bmm_fp8 cudnn", make("cudnn"),
                            "bmm_fp8(backend='cudnn'), out="))
        else:
            _note_once("cudnn", "[gemm] flashinfer bmm_fp8 cudnn: not timed, the cudnn frontend "
                                "(nvidia-cudnn-frontend) is not installed")
        return out
    blockscale = getattr(getattr(fi, "gemm", None), "fp8_blockscale_gemm_sm90", None)
    if blockscale is None:
        _note_once("blockscale", "[gemm] flashinfer: no sm_90 block-scale fp8 GEMM in this version "
                                 "(gemm_fp8_nt_groupwise is SM100+ only; fp8_blockscale_gemm_sm90 "
                                 "arrived in 0.6.0): not timed")
        return []

    def bindb(s):
        a, b, out = s["a"], s["b"], s["out"]
        sa, sb = _scales(s)
        return lambda: blockscale(a, b, sa, sb, out=out)

    return [Impl("flashinfer fp8_blockscale_gemm_sm90", bindb,
                 "a (M, K/128) and b (N/128, K/128) scales, out=", accum=FP32)]


def impls_for(case: Case, ctx: bench.Context) -> list[Impl]:
    """The impls of a case, xkernels first. torch._scaled_mm, its compiled form and FlashInfer
    are CUDA only."""
    out = _xkernels_impls(case) if "xkernels" in ctx.groups else []
    if "torch" in ctx.groups:
        out += _torch_impls(case, ctx.gpu)
    if "torch.compile" in ctx.groups and (ctx.compile_timeout is None or ctx.compile_timeout > 0):
        out += _compile_impls(case, ctx.gpu)
    fi = ctx.peers.get("flashinfer") if "flashinfer" in ctx.groups else None
    if fi is not None:
        out += _flashinfer_impls(case, fi)
    return out


# --------------------------------------------------------------------------------------------
# Inputs, reference, check.


def make_set(case: Case, ctx: bench.Context) -> dict:
    """One rotating input set. quantize: x (standard normal, bf16), and q and scale to write into.
    GEMM: a [M, K], b [N, K], out [M, N]; e4m3 operands quantised from standard normal bf16 by
    quantize_torch at OPERAND_SCALES, with their scales."""
    import torch

    dev = ctx.dev
    dt = getattr(torch, TORCH_DTYPE[case.dtype])
    if case.kind == "quantize":
        x = torch.randn(case.m, case.k, dtype=dt, device=dev)
        return {"x": x, "q": torch.empty(case.m, case.k, dtype=torch.float8_e4m3fn, device=dev),
                "scale": torch.empty(scale_shape(case.scaling, case.m, case.k),
                                     dtype=torch.float32, device=dev)}
    out = torch.empty(case.m, case.n, dtype=getattr(torch, TORCH_DTYPE[case.out_dtype]),
                      device=dev)
    if case.kind == "gated":  # b scaled so that the gate's inputs are O(1) (silu's curve)
        return {"a": torch.randn(case.m, case.k, dtype=dt, device=dev),
                "b": torch.randn(2 * case.n, case.k, dtype=dt, device=dev) / math.sqrt(case.k),
                "h": torch.empty(case.m, 2 * case.n, dtype=dt, device=dev), "out": out}
    if case.dtype != "e4m3":
        return {"a": torch.randn(case.m, case.k, dtype=dt, device=dev),
                "b": torch.randn(case.n, case.k, dtype=dt, device=dev), "out": out}
    ga, gb = OPERAND_SCALES[case.scaling]
    a, sa = quantize_torch(torch.randn(case.m, case.k, dtype=torch.bfloat16, device=dev), ga)
    b, sb = quantize_torch(torch.randn(case.n, case.k, dtype=torch.bfloat16, device=dev), gb)
    return {"a": a, "b": b, "a_scale": sa, "b_scale": sb, "out": out}


def check_set(case: Case, s: dict) -> dict:
    """The set the check call gets: the first set with its outputs NaN-poisoned (an output left
    unwritten fails the check)."""
    import torch

    names = ("q", "scale") if case.kind == "quantize" else ("out",)
    return dict(s, **{n: torch.full_like(s[n], float("nan")) for n in names})


def reference(case: Case, s: dict, sel: list[int]):
    """Float64 reference on the set's device. GEMM: out's rows `sel`, [len(sel), N], from the
    dequantised operands. quantize: quantize_reference's (scale, dequantised rows)."""
    import torch

    if case.kind == "quantize":
        return quantize_reference(s["x"], case.scaling, sel)
    idx = torch.as_tensor(sel, device=s["a"].device)
    a = s["a"].index_select(0, idx).double()
    b = s["b"].double()
    if case.dtype == "e4m3":
        ga, gb = OPERAND_SCALES[case.scaling]
        sa, sb = _scales(s)
        a *= expand_scale(sa.double(), ga, case.m, case.k, sel)
        b *= expand_scale(sb.double(), gb, case.n, case.k)
    if case.kind == "gated":
        g, u = (a @ b.t()).chunk(2, dim=-1)
        return g / (1 + torch.exp(-g)) * u
    return a @ b.t()


def _rel(got, ref) -> float:
    import torch

    return float(torch.linalg.norm(got - ref) / max(float(torch.linalg.norm(ref)), 1e-30))


def check(case: Case, got, sel: list[int], ref) -> str | None:
    """None when the output is right (see the module docstring), else what is wrong."""
    import torch

    if case.kind == "quantize":
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            return "expected (q, scale)"
        q, scale = got
        if tuple(q.shape) != (case.m, case.k) or q.dtype != torch.float8_e4m3fn:
            return f"q: {tuple(q.shape)} {q.dtype}, expected ({case.m}, {case.k}) float8_e4m3fn"
        want = scale_shape(case.scaling, case.m, case.k)
        if scale.numel() != math.prod(want) or scale.dtype != torch.float32:
            return f"scale: {tuple(scale.shape)} {scale.dtype}, expected {want} float32"
        ref_scale, ref_rows = ref
        scale = scale.reshape(want).double()
        if not torch.isfinite(scale).all():
            return "scale: non-finite or unwritten values"
        off = float(((scale - ref_scale).abs() / ref_scale).max())
        if off > SCALE_REL_TOL:
            return f"scale: relative error {off:.3g} > {SCALE_REL_TOL:g}"
        idx = torch.as_tensor(sel, device=q.device)
        rows = q.index_select(0, idx).double() * expand_scale(scale, case.scaling, case.m, case.k,
                                                              sel)
        if not torch.isfinite(rows).all():
            return "q: non-finite or unwritten values"
        rel = _rel(rows, ref_rows)
        return f"q: relative error {rel:.3g} > {QUANT_REL_TOL:g}" if rel > QUANT_REL_TOL else None
    if tuple(got.shape) != (case.m, case.n):
        return f"output shape {tuple(got.shape)}, expected {(case.m, case.n)}"
    rows = got.index_select(0, torch.as_tensor(sel, device=got.device)).double()
    if not torch.isfinite(rows).all():
        return "non-finite or unwritten elements"
    rel = _rel(rows, ref)
    return f"relative error {rel:.3g} > {GEMM_REL_TOL:g}" if rel > GEMM_REL_TOL else None


# --------------------------------------------------------------------------------------------
# The run.


def _nbytes(case: Case) -> int | None:
    """The bytes GB/s counts: decode GEMMs and quantize only."""
    return bytes_moved(case) if case.decode or case.kind == "quantize" else None


def _decorate(row: dict, case: Case, accum: str | None) -> dict:
    """A bench row with the case's fields: dtype (the case's), tflops, accum, and xkernels's
    kernel."""
    row.update(case.params(), tflops=tflops(flops(case), row["ms"]), accum=accum or None)
    if bench.impl_group(row["impl"]) == "xkernels" and case.kind == "gemm":
        row["kernel"] = "sm80" if row["impl"].endswith("sm80") else "auto"
    return row


def _case_row(ctx: bench.Context, case: Case, impl: Impl | None, name: str, ms, note: str,
              **kw) -> dict:
    row = bench._row(ctx, FAMILY, case.op, case.shape, name, ms, _nbytes(case), note, **kw)
    return _decorate(row, case, impl.accum if impl is not None else None)


def prepare(impl: Impl, case: Case, sets: list[dict], first: dict, sel: list[int], ref,
            ctx: bench.Context) -> tuple[dict | bench._Timed, Impl]:
    """As bench_attention.prepare: the first call (bench.first_call: fallbacks tried in turn when
    it raises; a compiled impl's held to --compile-timeout) and its check, then the graph captured
    (GPU) or the calls timed (host). (A failed row, or the _Timed to sample; the impl that ran)."""
    fc = bench.first_call(impl, lambda i: i.bind(first)(),
                          lambda got: check(case, got, sel, ref),
                          limit=lambda i: ctx.compile_timeout if i.compiled else None)
    cur = fc.impl
    if fc.failed:
        return _case_row(ctx, case, cur, cur.name, None, fc.failed), cur
    t, failed = bench.timed_impl(fc, sets, ctx)
    if failed:
        return _case_row(ctx, case, cur, cur.name, None, failed, check=t.check), cur
    return t, cur


def run_case(case: Case, ctx: bench.Context, emit: Callable[[dict], None]) -> None:
    """Every impl of one case: first calls and checks, graphs captured, the samples in the
    interleaved rounds (bench.sample_rounds); rows emitted in impl order."""
    import torch

    impls = impls_for(case, ctx)
    if not impls:
        return
    count = 1
    if ctx.gpu:
        count = bench.n_sets(set_bytes(case), ctx.l2_bytes, torch.cuda.mem_get_info()[0])
    sets = [make_set(case, ctx) for _ in range(count)]
    sel = selection(case)
    ref = reference(case, sets[0], sel)
    first = check_set(case, sets[0])
    results: list = []
    for impl in impls:
        results.append(prepare(impl, case, sets, first, sel, ref, ctx))
        if ctx.gpu:
            with contextlib.suppress(Exception):  # a sticky CUDA error shows in the next rows
                torch.cuda.synchronize()
    del first, ref
    bench.sample_rounds([r for r, _ in results], ctx)
    rows = []
    for r, impl in results:
        if isinstance(r, bench._Timed):
            row = _decorate(bench._timed_row(r, case.op, case.shape, ctx, FAMILY, _nbytes(case)),
                            case, impl.accum)
        else:
            row = r
        rows.append(row)
    r = impl = None  # the graphs, their calls and the sets: freed before the next case
    del results, sets
    bench.emit_case_rows(rows, case.label, ctx, emit)


def run_family(ctx: bench.Context, quick: bool, emit: Callable[[dict], None]) -> None:
    """The gemm family (called by bench._run). The cases carry their own dtypes (--dtype only
    sets the copy row's)."""
    if not ctx.gpu:
        print("[gemm] host path (CPU tensors, small shapes; not GPU numbers): xkernels and the "
              "torch composites; torch._scaled_mm and FlashInfer are CUDA only",
              file=sys.stderr, flush=True)
    cases = select_cases(quick, ctx.gpu)
    if ctx.case_filter:
        cases = [c for c in cases if any(re.search(f, c.label) for f in ctx.case_filter)]
        if not cases:
            print(f"[gemm] --cases {','.join(ctx.case_filter)} selects no case", file=sys.stderr)
    for case in cases:
        try:
            run_case(case, ctx, emit)
        except Exception as e:  # noqa: BLE001 (inputs or reference: report, go on)
            emit(_case_row(ctx, case, None, "xkernels", None,
                           f"failed: case setup: {bench._error(e)}"))
            ctx.xkernels_failed.append(f"{case.label}: {bench._error(e)}")
