"""`xkernels bench --family attention`: prefill and paged decode next to the attention peers.

The family's cases, impls, inputs and checks; the timing, rows, sampling rounds and context are
bench.py's (GraphTimer over rotating input sets, CUDA events around graph replays, the impls of a
case sampled in the interleaved rounds of balanced_orders; time_host on the host path).

- prefill: batch 1, dense q [1, s, Hq, d], k and v [1, s, Hkv, d]; xkernels.torch.attention against
  torch SDPA (flash, cuDNN), FlashInfer's single_prefill_with_kv_cache (fa2, fa3) and flash_attn
  where installed. TFLOP/s = 4 s^2 Hq d / time, halved for causal.
- decode: one query token per request over a paged NHD cache (page size 16; each request's pages
  a run of kv_indices, the page ids a random permutation of the cache's pages);
  xkernels.torch.decode_paged against FlashInfer's BatchDecodeWithPagedKVCacheWrapper (CUDA-core
  and tensor-core decode), with torch SDPA on a contiguous copy of the keys as a reference point
  (not paged: left out of "vs best"). GB/s = (K and V bytes + q bytes + out bytes) / time.

Designs (the `design` column and field): xkernels, torch SDPA flash (FlashAttention-2), FlashInfer
fa2 and its decode kernels, flash_attn are cp.async + mma.sync designs; cuDNN and FlashInfer fa3 are
TMA + wgmma (Hopper) designs. "vs best" compares an xkernels row with the fastest peer of its case,
"vs cp.async" with the fastest cp.async peer.
"""

from __future__ import annotations

import contextlib
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import bench

FAMILY = "attention"
DTYPES = ("bf16", "fp16")
PAGE_SIZE = 16
# (s, Hq, Hkv, d) of the prefill cases, each non-causal and causal
PREFILL = [(8192, 32, 32, 128), (4096, 32, 8, 128), (8192, 16, 16, 64)]
# (batch, kv_len) of the decode cases; heads and head_dim DECODE_HEADS
DECODE = [(64, 4096), (1, 32768), (256, 1024), (16, 16384), (256, 2048)]
DECODE_HEADS = (32, 8, 128)  # Hq, Hkv, d
QUICK_DECODE = [(64, 4096), (1, 32768)]
# Host path (no GPU): tiny shapes, so that `xkernels bench` stays fast
HOST_PREFILL = (256, 4, 2, 64)
HOST_DECODE = (4, 300)
HOST_DECODE_HEADS = (8, 2, 128)
# Checks: prefill, the first and last CHECK_TOKENS query tokens and CHECK_TOKENS spread between;
# decode, the first and last CHECK_REQUESTS requests; every head.
CHECK_TOKENS = 16
CHECK_REQUESTS = 4
# ||out - ref|| / ||ref|| at most this, on top of bench.compare's elementwise bound
REL_TOL = 1e-2
WORKSPACE_BYTES = 128 << 20  # FlashInfer's float workspace, per decode wrapper

CP_ASYNC, TMA, REFERENCE, HOST = "cp.async", "TMA+wgmma", "reference", "host"
TABLE_COLUMNS = ("case", "impl", "design", "ms", "TFLOP/s", "GB/s", "%copy", "vs best",
                 "vs cp.async", "note")
LEGEND = """[attention]
design: cp.async = cp.async + mma.sync, FlashAttention-2 class (xkernels, SDPA flash, FlashInfer
  fa2 and its decode kernels, flash_attn); TMA+wgmma = Hopper designs (SDPA cuDNN, FlashInfer fa3);
  reference = not the same problem (SDPA on a contiguous cache), left out of vs best; host = CPU.
vs best, vs cp.async: xkernels ms / the fastest peer's, / the fastest cp.async peer's
  (< 1: xkernels faster)"""


# --------------------------------------------------------------------------------------------
# Cases and accounting (no torch).


@dataclass(frozen=True)
class Case:
    kind: str  # "prefill" or "decode"
    batch: int
    q_len: int
    kv_len: int
    num_qo_heads: int
    num_kv_heads: int
    head_dim: int
    causal: bool = False
    page_size: int | None = None  # decode

    @property
    def op(self) -> str:
        return "attention" if self.kind == "prefill" else "decode_paged"

    @property
    def label(self) -> str:
        """As shared/reference/anchors.md names the cases."""
        h = f"hq={self.num_qo_heads} hkv={self.num_kv_heads} d={self.head_dim}"
        if self.kind == "prefill":
            b = f" b={self.batch}" if self.batch != 1 else ""
            return f"prefill{b} s={self.q_len} {h} causal={self.causal}"
        return f"decode b={self.batch} L={self.kv_len} {h} paged ps={self.page_size}"

    @property
    def q_shape(self) -> tuple[int, ...]:
        if self.kind == "prefill":
            return (self.batch, self.q_len, self.num_qo_heads, self.head_dim)
        return (self.batch, self.num_qo_heads, self.head_dim)

    @property
    def pages_per_request(self) -> int:
        return -(-self.kv_len // self.page_size)

    def params(self) -> dict[str, Any]:
        """The row fields of the case."""
        return {"case": self.label, "kind": self.kind, "causal": self.causal,
                "batch": self.batch, "q_len": self.q_len, "kv_len": self.kv_len,
                "num_qo_heads": self.num_qo_heads, "num_kv_heads": self.num_kv_heads,
                "head_dim": self.head_dim, "page_size": self.page_size}


def prefill_case(s: int, hq: int, hkv: int, d: int, causal: bool) -> Case:
    return Case("prefill", 1, s, s, hq, hkv, d, causal)


def decode_case(batch: int, kv_len: int, hq: int, hkv: int, d: int,
                page_size: int = PAGE_SIZE) -> Case:
    # One query token at the end of each request sees every key: no mask (causal=False), as
    # FlashInfer's decode and SDPA compute it; decode_paged is called with its default.
    return Case("decode", batch, 1, kv_len, hq, hkv, d, False, page_size)


def select_cases(quick: bool = False, gpu: bool = True) -> list[Case]:
    """The family's cases: every prefill shape non-causal and causal and every decode case;
    --quick: each prefill shape non-causal and two decode cases. The host path: one tiny prefill
    shape (non-causal only with --quick) and one tiny decode case."""
    if not gpu:
        s, hq, hkv, d = HOST_PREFILL
        out = [prefill_case(s, hq, hkv, d, c) for c in ((False,) if quick else (False, True))]
        return out + [decode_case(*HOST_DECODE, *HOST_DECODE_HEADS)]
    out = [prefill_case(s, hq, hkv, d, c) for s, hq, hkv, d in PREFILL
           for c in ((False,) if quick else (False, True))]
    return out + [decode_case(b, n, *DECODE_HEADS) for b, n in (QUICK_DECODE if quick else DECODE)]


def flops(case: Case) -> int:
    """4 * q_len * kv_len * Hq * d per request (QK^T and PV, 2 flops a multiply-add), halved for
    causal (anchors.md's count)."""
    f = 4 * case.batch * case.q_len * case.kv_len * case.num_qo_heads * case.head_dim
    return f // 2 if case.causal else f


def bytes_moved(case: Case, elem: int) -> int:
    """Keys and values read once, q read once, out written once (anchors.md's decode count)."""
    kv = 2 * case.batch * case.kv_len * case.num_kv_heads * case.head_dim * elem
    return kv + 2 * math.prod(case.q_shape) * elem


def tflops(n: int, ms: float | None) -> float | None:
    return None if not ms or ms <= 0 else n / ms / 1e9


def set_bytes(case: Case, elem: int) -> int:
    """Bytes of the inputs one rotating set holds (bench.n_sets' set_bytes): q, k, v (prefill) or
    q and the set's caches (decode; its page table is a few KB)."""
    q = math.prod(case.q_shape) * elem
    if case.kind == "prefill":
        return q + 2 * case.batch * case.kv_len * case.num_kv_heads * case.head_dim * elem
    pages = case.batch * case.pages_per_request
    return q + 2 * pages * case.page_size * case.num_kv_heads * case.head_dim * elem


def check_tokens(n: int, k: int = CHECK_TOKENS) -> list[int]:
    """The first and last k of n query tokens and k spread between them."""
    spread = {round(i * (n - 1) / (k + 1)) for i in range(1, k + 1)} if n > 2 * k else set()
    return sorted(set(bench.check_index(n, k)) | spread)


# --------------------------------------------------------------------------------------------
# Ratios and the table (no torch).


def best_peers(rows: list[dict]) -> dict[int, tuple[int | None, int | None]]:
    """{index of an xkernels row: (index of the fastest peer of its case, index of the fastest
    cp.async peer)}. Peers that failed, failed their check or are reference points (SDPA on a
    contiguous cache, against a paged one) do not count."""
    return bench.best_peer_pairs(rows, FAMILY, lambda r: [r.get("design")], CP_ASYNC,
                                 lambda r: r.get("design") != REFERENCE)


def ratios(rows: list[dict]) -> dict[int, tuple[float | None, float | None]]:
    """{index of an xkernels row: (its ms / the best peer's, its ms / the best cp.async peer's)};
    < 1: xkernels is faster."""
    return bench.pair_ratios(rows, best_peers(rows))


def format_table(rows: list[dict], copy_gbps: float | None = None) -> str:
    """The attention table: case, impl, design, ms, TFLOP/s (prefill), GB/s and %copy (decode),
    vs best (xkernels / the fastest peer), vs cp.async (xkernels / the fastest cp.async peer),
    note."""
    rows = [r for r in rows if r.get("family") == FAMILY]
    rat = ratios(rows)
    cells: list[tuple[str, ...]] = [TABLE_COLUMNS]
    for i, r in enumerate(rows):
        g = r.get("gbps")
        vs, vc = rat.get(i, (None, None))
        cells.append((
            r.get("case") or f"{r['op']} {bench.fmt_shape(r['shape'])}", r["impl"],
            r.get("design") or "",
            bench._fmt(r.get("ms"), ".4f" if (r.get("ms") or 0) < 10 else ".2f"),
            bench._fmt(r.get("tflops"), ".1f" if (r.get("tflops") or 0) >= 10 else ".3g"),
            bench._fmt(g, ".1f"), bench._fmt(bench.pct_copy(r, copy_gbps), ".1f"),
            bench._fmt(vs, ".3f"), bench._fmt(vc, ".3f"), bench.clip_note(r.get("note") or ""),
        ))
    return bench.render_cells(cells, {3, 4, 5, 6, 7, 8}, LEGEND)


# --------------------------------------------------------------------------------------------
# Impls: bind(set) -> call() -> the output, prefill [batch, q_len, Hq, d], decode [batch, Hq, d]
# (views of what the impl returns; a view costs nothing on the GPU).


@dataclass
class Impl(bench.Impl):
    design: str = ""
    graph: bool = True  # captured in a CUDA graph (False: plain launches, noted)
    # the output of the check call into the case's layout where a view cannot do it (not timed)
    canon: Callable[[Any], Any] | None = None


def _sm90_prefill(case: Case) -> bool:
    """Whether xkernels' "auto" kernel for this prefill case is the TMA + wgmma one (an sm_90
    GPU and head_dim 64 or 128; the dispatcher in include/xkernels/attention/attention.h)."""
    import torch

    return (torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9
            and case.head_dim in (64, 128))


def _xkernels_impls(case: Case, gpu: bool) -> list[Impl]:
    if case.kind == "prefill":
        def make(kernel):
            def bind(s):
                import xkernels.torch as xt

                q, k, v, out = s["q"], s["k"], s["v"], s["out"]
                causal = case.causal
                return lambda: xt.attention(q, k, v, causal=causal, kernel=kernel, out=out)
            return bind

        sm90 = gpu and _sm90_prefill(case)
        out = [Impl("xkernels", make("auto"), "xkernels.torch.attention(q, k, v, causal, out=)"
                    + (": the sm90 kernel (TMA + wgmma)" if sm90 else ""),
                    design=TMA if sm90 else CP_ASYNC)]
        if sm90:  # the cp.async kernel too, the one the sm_80 GPUs get
            out.append(Impl("xkernels sm80", make("sm80"),
                            "xkernels.torch.attention(..., kernel='sm80', out=): cp.async + "
                            "mma.sync", design=CP_ASYNC))
        return out

    def bindd(s):
        import xkernels.torch as xt

        q, kc, vc, out = s["q"], s["k_cache"], s["v_cache"], s["out"]
        ind, idx, last = s["kv_indptr"], s["kv_indices"], s["kv_last_page_len"]
        return lambda: xt.decode_paged(q, kc, vc, ind, idx, last, out=out)

    return [Impl("xkernels", bindd, "xkernels.torch.decode_paged(..., out=), NHD",
                 design=CP_ASYNC)]


def _bhsd(x):
    """[B, S, H, D] -> the [B, H, S, D] view SDPA takes."""
    return x.transpose(1, 2)


def _repeat_kv(x, g: int):
    """[B, S, Hkv, D] -> [B, S, Hkv * g, D], each kv head repeated for its g query heads."""
    return x if g == 1 else x.repeat_interleave(g, dim=2)


def _sdpa_impls(case: Case, gpu: bool) -> list[Impl]:
    """torch.nn.functional.scaled_dot_product_attention under sdpa_kernel(FLASH_ATTENTION) and
    (GPU) sdpa_kernel(CUDNN_ATTENTION), on [B, H, S, D] views of the same data; enable_gqa when
    Hq != Hkv. Fallbacks (their rows say so): contiguous [B, H, S, D] copies made before timing,
    then (GQA) the kv heads repeated for their query heads."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    g = case.num_qo_heads // case.num_kv_heads
    causal = case.causal

    def make(backend, contiguous: bool, repeat: bool):
        def bind(s):
            q, k, v = s["q"], s["k"], s["v"]
            if repeat:
                k, v = _repeat_kv(k, g), _repeat_kv(v, g)
            q, k, v = _bhsd(q), _bhsd(k), _bhsd(v)
            if contiguous:
                q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
            kw = {"is_causal": causal}
            if g > 1 and not repeat:
                kw["enable_gqa"] = True

            def call():
                with sdpa_kernel(backend):
                    return F.scaled_dot_product_attention(q, k, v, **kw).transpose(1, 2)
            return call
        return bind

    def chain(name, backend, design, host_note=""):
        steps = [(False, False, "[B, H, S, D] views (transpose(1, 2))"),
                 (True, False, "contiguous [B, H, S, D] copies, made before timing")]
        if g > 1:
            steps.append((True, True, (f"kv heads repeated x{g} (no enable_gqa), contiguous "
                                       "copies made before timing")))
        impl = None
        for i, (contig, rep, what) in reversed(list(enumerate(steps))):
            nm = name if i == 0 else f"{name} ({'kv repeated' if rep else 'contiguous'})"
            note = what + (", enable_gqa" if g > 1 and not rep else "") + host_note
            impl = Impl(nm, make(backend, contig, rep), note, impl, design=design)
        return impl

    out = [chain("torch sdpa flash", SDPBackend.FLASH_ATTENTION, CP_ASYNC,
                 "" if gpu else "; CPU flash kernel")]
    if gpu:
        out.append(chain("torch sdpa cudnn", SDPBackend.CUDNN_ATTENTION, TMA))
    return out


def _sdpa_contiguous_impl(case: Case, gpu: bool) -> Impl:
    """Decode reference point: SDPA (default backend choice) on a contiguous [B, Hkv, L, d] copy
    of each set's keys and values (made with the set), q [B, Hq, 1, d], enable_gqa; fallback:
    the g query heads of a kv head as g query rows, q [B, Hkv, g, d] (the same result)."""
    import torch.nn.functional as F

    g = case.num_qo_heads // case.num_kv_heads
    b, hq, hkv, d = case.batch, case.num_qo_heads, case.num_kv_heads, case.head_dim
    note = "default backend; NOT PAGED: a contiguous [B, Hkv, L, d] copy of the cache"
    main = Impl("torch sdpa (contiguous)", None, note + (", enable_gqa" if g > 1 else ""),
                design=REFERENCE)
    rows = Impl("torch sdpa (contiguous, heads as rows)", None,
                note + ", q as [B, Hkv, Hq/Hkv, d]", design=REFERENCE)

    def bind(s):
        q4 = s["q"].unsqueeze(2)  # [B, Hq, 1, d]
        kc, vc = s["k_contig"], s["v_contig"]
        kw = {"enable_gqa": True} if g > 1 else {}
        main.note = _with_choice(main.note, q4, kc, vc, **kw)
        return lambda: F.scaled_dot_product_attention(q4, kc, vc, **kw).squeeze(2)

    def bind_rows(s):
        qg = s["q"].view(b, hkv, g, d)
        kc, vc = s["k_contig"], s["v_contig"]
        rows.note = _with_choice(rows.note, qg, kc, vc)
        return lambda: F.scaled_dot_product_attention(qg, kc, vc)  # [B, Hkv, g, d]

    main.bind, rows.bind = bind, bind_rows
    # SDPA's output may be laid out [B, g, Hkv, d] underneath: reshaped for the check only
    rows.canon = lambda o: o.reshape(b, hq, d)
    main.fallback = rows if g > 1 else None
    return main


def _with_choice(note: str, q, k, v, **kw) -> str:
    """`note` naming the backend SDPA's default choice takes for these inputs (torch's private
    _fused_sdp_choice: left out where it is missing or fails)."""
    if "default backend" not in note or "default backend (" in note:
        return note
    try:
        import torch
        from torch.nn.attention import SDPBackend

        c = torch._fused_sdp_choice(q, k, v, None, 0.0, False, **kw)
        name = {v.value: n for n, v in SDPBackend.__members__.items()}[int(c)]
    except Exception:  # noqa: BLE001
        return note
    return note.replace("default backend", f"default backend ({name})")


def _flashinfer_prefill_impls(case: Case, fi: Any) -> list[Impl]:
    """flashinfer.single_prefill_with_kv_cache(q [s, Hq, d], k [s, Hkv, d], v, causal=,
    backend="fa2" / "fa3") on views of the same data (batch 1); it allocates its output."""
    if isinstance(fi, BaseException):
        return [Impl("flashinfer fa2", bench._failing(fi), design=CP_ASYNC),
                Impl("flashinfer fa3", bench._failing(fi), design=TMA)]
    if case.batch != 1:
        return []
    causal = case.causal

    def make(backend):
        def bind(s):
            q, k, v = s["q"][0], s["k"][0], s["v"][0]
            return lambda: fi.single_prefill_with_kv_cache(
                q, k, v, causal=causal, backend=backend).unsqueeze(0)
        return bind

    return [Impl("flashinfer fa2", make("fa2"), "single_prefill_with_kv_cache backend=fa2",
                 design=CP_ASYNC),
            Impl("flashinfer fa3", make("fa3"), "single_prefill_with_kv_cache backend=fa3",
                 design=TMA)]


def _flashinfer_decode_impls(case: Case, fi: Any) -> list[Impl]:
    """flashinfer.BatchDecodeWithPagedKVCacheWrapper(workspace (128 MiB uint8), "NHD",
    use_cuda_graph=True, use_tensor_cores=False / True, fixed index buffers): one wrapper per
    input set, .plan(...) once per wrapper at bind time (outside the timing), .run(q, (k_cache,
    v_cache), out=) timed. Fallback when that fails: a wrapper without use_cuda_graph, timed with
    plain launches."""
    if isinstance(fi, BaseException):
        return [Impl("flashinfer decode", bench._failing(fi), design=CP_ASYNC),
                Impl("flashinfer decode tc", bench._failing(fi), design=CP_ASYNC)]
    hq, hkv, d, ps = case.num_qo_heads, case.num_kv_heads, case.head_dim, case.page_size

    def make(tc: bool, graph: bool):
        def bind(s):
            import torch

            q, kc, vc, out = s["q"], s["k_cache"], s["v_cache"], s["out"]
            ind, idx, last = s["kv_indptr"], s["kv_indices"], s["kv_last_page_len"]
            ws = torch.zeros(WORKSPACE_BYTES, dtype=torch.uint8, device=q.device)
            kw = {}
            if graph:
                kw = {"use_cuda_graph": True,
                      "paged_kv_indptr_buffer": torch.empty_like(ind),
                      "paged_kv_indices_buffer": torch.empty_like(idx),
                      "paged_kv_last_page_len_buffer": torch.empty_like(last)}
            w = fi.BatchDecodeWithPagedKVCacheWrapper(ws, "NHD", use_tensor_cores=tc, **kw)
            w.plan(ind, idx, last, hq, hkv, d, ps, q_data_type=q.dtype, kv_data_type=kc.dtype)
            kv = (kc, vc)
            return lambda: w.run(q, kv, out=out)
        return bind

    out = []
    for name, tc in (("flashinfer decode", False), ("flashinfer decode tc", True)):
        what = f"BatchDecodeWithPagedKVCacheWrapper use_tensor_cores={tc}"
        eager = Impl(f"{name} (no graph)", make(tc, False),
                     f"{what}, use_cuda_graph=False, plain launches", design=CP_ASYNC,
                     graph=False)
        out.append(Impl(name, make(tc, True), f"{what}, use_cuda_graph=True", eager,
                        design=CP_ASYNC))
    return out


def _flash_attn_impl(case: Case, fa: Any) -> list[Impl]:
    """flash_attn.flash_attn_func(q, k, v, causal=) on the [B, S, H, D] tensors themselves."""
    if isinstance(fa, BaseException):
        return [Impl("flash_attn", bench._failing(fa), design=CP_ASYNC)]
    causal = case.causal

    def bind(s):
        q, k, v = s["q"], s["k"], s["v"]
        return lambda: fa.flash_attn_func(q, k, v, causal=causal)

    return [Impl("flash_attn", bind, "flash_attn_func", design=CP_ASYNC)]


def impls_for(case: Case, ctx: bench.Context) -> list[Impl]:
    """The impls of a case, xkernels first. The CUDA-only peers are in ctx.groups only on a GPU
    (bench.main drops them on the host path; tests run their glue on CPU stand-ins)."""
    out = _xkernels_impls(case, ctx.gpu) if "xkernels" in ctx.groups else []
    fi = ctx.peers.get("flashinfer") if "flashinfer" in ctx.groups else None
    fa = ctx.peers.get("flash_attn") if "flash_attn" in ctx.groups else None
    if case.kind == "prefill":
        if "torch" in ctx.groups:
            out += _sdpa_impls(case, ctx.gpu)
        if fi is not None:
            out += _flashinfer_prefill_impls(case, fi)
        if fa is not None:
            out += _flash_attn_impl(case, fa)
    else:
        if fi is not None:
            out += _flashinfer_decode_impls(case, fi)
        if "torch" in ctx.groups:
            out.append(_sdpa_contiguous_impl(case, ctx.gpu))
    return out


# --------------------------------------------------------------------------------------------
# Inputs, reference, check.


def make_set(case: Case, ctx: bench.Context, contiguous: bool = False) -> dict:
    """One rotating input set. prefill: q, k, v, out. decode: q, out, the set's own caches and
    page table (each request's pages a run of kv_indices, the page ids a random permutation of
    the cache's pages: request b's tokens scattered over the cache as a serving engine leaves
    them), and with `contiguous` the keys and values gathered into [B, Hkv, L, d] copies."""
    import torch

    dt, dev = ctx.torch_dtype, ctx.dev
    b, hkv, d = case.batch, case.num_kv_heads, case.head_dim
    if case.kind == "prefill":
        q = torch.randn(case.q_shape, dtype=dt, device=dev)
        kv_shape = (b, case.kv_len, hkv, d)
        return {"q": q, "k": torch.randn(kv_shape, dtype=dt, device=dev),
                "v": torch.randn(kv_shape, dtype=dt, device=dev), "out": torch.empty_like(q)}
    ps, per = case.page_size, case.pages_per_request
    pages = b * per
    q = torch.randn(case.q_shape, dtype=dt, device=dev)
    s = {"q": q, "out": torch.empty_like(q),
         "k_cache": torch.randn((pages, ps, hkv, d), dtype=dt, device=dev),
         "v_cache": torch.randn((pages, ps, hkv, d), dtype=dt, device=dev),
         "kv_indptr": (torch.arange(b + 1, dtype=torch.int32) * per).to(dev),
         "kv_indices": torch.randperm(pages, dtype=torch.int64).to(torch.int32).to(dev),
         "kv_last_page_len": torch.full((b,), case.kv_len - (per - 1) * ps, dtype=torch.int32,
                                        device=dev)}
    if contiguous:
        for name in ("k", "v"):
            g = s[f"{name}_cache"][s["kv_indices"].long()]  # [pages, ps, hkv, d], request order
            g = g.view(b, per * ps, hkv, d)[:, :case.kv_len]
            s[f"{name}_contig"] = g.transpose(1, 2).contiguous()
            del g
    return s


def _attend(q, k, v, tokens, q_len: int, causal: bool, scale: float):
    """Float64 attention of the query tokens `tokens` (of q_len) of one request: q [n, Hq, d] (those
    tokens), k and v [L, Hkv, d] -> [n, Hq, d]. Causal: key p visible to token t when
    p <= t + L - q_len (params.h)."""
    import torch

    n, hq, d = q.shape
    kv_len, hkv = k.shape[0], k.shape[1]
    g = hq // hkv
    s = torch.einsum("nhgd,lhd->nhgl", q.double().reshape(n, hkv, g, d), k.double()) * scale
    if causal:
        limit = torch.as_tensor(tokens, device=q.device) + (kv_len - q_len)
        hidden = torch.arange(kv_len, device=q.device)[None, :] > limit[:, None]
        s = s.masked_fill(hidden[:, None, None, :], float("-inf"))
    p = torch.softmax(s, dim=-1)
    return torch.einsum("nhgl,lhd->nhgd", p, v.double()).reshape(n, hq, d)


def selection(case: Case) -> list[int]:
    """The checked query tokens (prefill) or requests (decode)."""
    if case.kind == "prefill":
        return check_tokens(case.q_len)
    return bench.check_index(case.batch, CHECK_REQUESTS)


def reference(case: Case, s: dict, sel: list[int]):
    """Float64 outputs of the checked rows (numpy [rows * Hq, d]), from set `s` (on its device)."""
    import torch

    scale = 1.0 / math.sqrt(case.head_dim)
    if case.kind == "prefill":
        idx = torch.as_tensor(sel, device=s["q"].device)
        outs = [_attend(s["q"][b].index_select(0, idx), s["k"][b], s["v"][b], sel, case.q_len,
                        case.causal, scale) for b in range(case.batch)]
        out = torch.cat(outs)
    else:
        ind = s["kv_indptr"].tolist()
        last = s["kv_last_page_len"].tolist()
        outs = []
        for b in sel:
            pages = s["kv_indices"][ind[b]:ind[b + 1]].long()
            n = (ind[b + 1] - ind[b] - 1) * case.page_size + last[b]
            k = s["k_cache"][pages].reshape(-1, case.num_kv_heads, case.head_dim)[:n]
            v = s["v_cache"][pages].reshape(-1, case.num_kv_heads, case.head_dim)[:n]
            outs.append(_attend(s["q"][b:b + 1], k, v, [0], 1, case.causal, scale))
        out = torch.cat(outs)
    return out.reshape(-1, case.head_dim).cpu().numpy()


def checked_rows(case: Case, got, sel: list[int]):
    """An impl's output at the checked rows: [rows * Hq, d]."""
    import torch

    idx = torch.as_tensor(sel, device=got.device)
    if case.kind == "prefill":
        got = got.index_select(1, idx)  # [B, n, Hq, d]
    else:
        got = got.index_select(0, idx)  # [n, Hq, d]
    return got.reshape(-1, case.head_dim)


def check(case: Case, got, sel: list[int], ref, dtype_name: str) -> str | None:
    """None when the checked rows are right: bench.compare's elementwise bound (bf16: |err| <=
    2e-2 + 2e-2 |ref|) and ||err|| / ||ref|| <= REL_TOL; else what is wrong."""
    if tuple(got.shape) != case.q_shape:
        return f"output shape {tuple(got.shape)}, expected {case.q_shape}"
    rows = checked_rows(case, got, sel)
    bad = bench.compare((rows,), (ref,), list(range(rows.shape[0])), dtype_name)
    if bad:
        return bad
    g = rows.double().cpu().numpy()
    rel = bench.rel_error(g, ref)
    return f"relative error {rel:.3g} > {REL_TOL:g}" if rel > REL_TOL else None


# --------------------------------------------------------------------------------------------
# The run.


def design(impl: Impl, ctx: bench.Context) -> str:
    """The design an impl's rows name: "host" for every impl but references on the host path."""
    return impl.design if ctx.gpu or impl.design == REFERENCE else HOST


def _case_row(ctx: bench.Context, case: Case, impl: str, ms, note: str, design: str,
              **kw) -> dict:
    nbytes = bytes_moved(case, ctx.elem) if case.kind == "decode" else None
    row = bench._row(ctx, FAMILY, case.op, case.q_shape, impl, ms, nbytes, note, **kw)
    row.update(case.params(), design=design,
               tflops=tflops(flops(case), ms) if case.kind == "prefill" else None)
    return row


def prepare(impl: Impl, case: Case, sets: list[dict], check_set: dict, sel: list[int], ref,
            ctx: bench.Context) -> tuple[dict | bench._Timed, Impl]:
    """As bench.prepare_impl: the first call (bench.first_call: fallbacks tried in turn when it
    raises; canon applied, timed with the call) and its check, then the graph captured (GPU) or
    the calls timed (host). (A failed row, or the _Timed to sample; the impl that ran)."""
    def call(cur: Impl):
        got = cur.bind(check_set)()
        return got if cur.canon is None else cur.canon(got)

    first = bench.first_call(impl, call, lambda got: check(case, got, sel, ref, ctx.dtype_name))
    cur = first.impl
    if first.failed:
        return _case_row(ctx, case, cur.name, None, first.failed, design(cur, ctx)), cur
    t, failed = bench.timed_impl(first, sets, ctx, graph=cur.graph)
    if failed:
        return _case_row(ctx, case, cur.name, None, failed, design(cur, ctx), check=t.check), cur
    return t, cur


def run_case(case: Case, ctx: bench.Context, emit: Callable[[dict], None]) -> None:
    """Every impl of one case: first calls and checks, graphs captured, the samples in the
    interleaved rounds (bench.sample_rounds); rows emitted in impl order."""
    import torch

    impls = impls_for(case, ctx)
    if not impls:
        return
    contiguous = case.kind == "decode" and any(i.design == REFERENCE for i in impls)
    count = 1
    if ctx.gpu:
        count = bench.n_sets(set_bytes(case, ctx.elem), ctx.l2_bytes,
                             torch.cuda.mem_get_info()[0])
    sets = [make_set(case, ctx, contiguous) for _ in range(count)]
    sel = selection(case)
    ref = reference(case, sets[0], sel)
    # the first set, its out NaN-poisoned (an unwritten output fails the check)
    check_set = dict(sets[0], out=torch.full_like(sets[0]["out"], float("nan")))
    results: list = []
    for impl in impls:
        results.append(prepare(impl, case, sets, check_set, sel, ref, ctx))
        if ctx.gpu:
            with contextlib.suppress(Exception):  # a sticky CUDA error shows in the next rows
                torch.cuda.synchronize()
    del check_set
    bench.sample_rounds([r for r, _ in results], ctx)
    nbytes = bytes_moved(case, ctx.elem) if case.kind == "decode" else None
    rows = []
    for r, impl in results:
        if isinstance(r, bench._Timed):
            row = bench._timed_row(r, case.op, case.q_shape, ctx, FAMILY, nbytes)
            row.update(case.params(), design=design(impl, ctx),
                       tflops=tflops(flops(case), row["ms"]) if case.kind == "prefill" else None)
        else:
            row = r
        rows.append(row)
    r = impl = None  # the graphs, their calls and the sets: freed before the next case
    del results, sets
    bench.emit_case_rows(rows, case.label, ctx, emit)


def run_family(ctx: bench.Context, quick: bool, emit: Callable[[dict], None]) -> None:
    """The attention family (called by bench._run)."""
    if ctx.dtype_name not in DTYPES:
        print(f"[attention] skipped: --dtype {ctx.dtype_name} (attention runs bf16 or fp16)",
              file=sys.stderr, flush=True)
        return
    if not ctx.gpu:
        print("[attention] host path (CPU tensors, tiny shapes; not GPU numbers): xkernels and "
              "torch sdpa flash (CPU) / sdpa on a contiguous cache; cuDNN, FlashInfer and "
              "flash_attn are CUDA only", file=sys.stderr, flush=True)
    for case in select_cases(quick, ctx.gpu):
        try:
            run_case(case, ctx, emit)
        except Exception as e:  # noqa: BLE001 (inputs or reference: report, go on)
            emit(_case_row(ctx, case, "xkernels", None, f"failed: case setup: {bench._error(e)}",
                           CP_ASYNC if ctx.gpu else HOST))
            ctx.xkernels_failed.append(f"{case.label}: {bench._error(e)}")
