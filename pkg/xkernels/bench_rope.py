"""`xkernels bench --family rope`: RoPE and the fused QK norm + RoPE next to their peers.

The family's cases, impls, inputs and checks; the timing, rows, sampling rounds and context are
bench.py's (GraphTimer over rotating input sets, CUDA events around graph replays, the impls of a
case sampled in the interleaved rounds of balanced_orders; time_host on the host path).

- apply_rope: Llama 3 8B's q and k (Hq 32, Hkv 8, d 128, theta 500000, the Llama 3.1 frequency
  scaling: factor 8, low 1, high 4, original 8192) as views of one packed qkv [T, (Hq + 2 Hkv) d]
  (what a fused QKV projection leaves), T = 1, 128, 4096, 32768; and the same without scaling
  (theta 10000). xkernels.torch.apply_rope in place against FlashInfer's
  apply_llama31_rope_pos_ids_inplace / apply_rope_pos_ids_inplace (the same views, in place) and
  apply_rope_with_cos_sin_cache_inplace (a float32 cos/sin cache built at bind time, q and k as
  [T, H d] views), torch eager (Hugging Face's formula: cos and sin from inv_freq and the
  positions, q * cos + rotate_half(q) * sin, new tensors) and torch.compile of it.
- qk_norm_rope: Qwen3 8B's (Hq 32, Hkv 8, d 128, theta 1e6, RMSNorm of each head, eps 1e-6),
  T = 128, 4096, 32768: xkernels.torch.qk_norm_rope in place against torch eager (Hugging Face's
  Qwen3RMSNorm on each head, then the rotation) and torch.compile of it. FlashInfer has no fused
  QK norm + RoPE.

GB/s = (q and k read and written + the positions) / time: the one pass the op needs. Positions
are random in [0, 8192): Hugging Face's float32 angles lose pos * 6e-8 rad, which at 500000 would
fail the peers' check (xkernels' angles are exact to float rounding at any position, see
tests/test_rope.py).
"""

from __future__ import annotations

import contextlib
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import bench

FAMILY = "rope"
LLAMA3 = {"theta": 500000.0, "rope_scale": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position": 8192}
PLAIN = {"theta": 10000.0}
QWEN3 = {"theta": 1000000.0, "eps": 1e-6}
TOKENS = (1, 128, 4096, 32768)
QUICK_TOKENS = (1, 4096)
HEADS = (32, 8, 128)  # Hq, Hkv, d (Llama 3 8B, Qwen3 8B)
HOST_TOKENS = (1, 64)
HOST_HEADS = (8, 2, 64)
MAX_POSITION = 8192
CHECK_TOKENS = 8
TABLE_COLUMNS = ("case", "impl", "ms", "GB/s", "%copy", "vs best", "note")
LEGEND = """[rope]
GB/s: q and k read and written once + the positions, over the time. vs best: xkernels ms / the
  fastest peer's (< 1: xkernels faster); torch eager and torch.compile write new tensors (Hugging
  Face's form), FlashInfer and xkernels rotate in place."""


@dataclass(frozen=True)
class Case:
    op: str  # "apply_rope" or "qk_norm_rope"
    tokens: int
    num_qo_heads: int
    num_kv_heads: int
    head_dim: int
    attrs: dict = field(default_factory=dict, hash=False, compare=False)
    name: str = ""  # "llama3", "plain", "qwen3"

    @property
    def label(self) -> str:
        h = f"hq={self.num_qo_heads} hkv={self.num_kv_heads} d={self.head_dim}"
        return f"{self.op} {self.name} T={self.tokens} {h}"

    @property
    def shape(self) -> tuple[int, ...]:
        return (self.tokens, self.num_qo_heads + self.num_kv_heads, self.head_dim)

    @property
    def norm(self) -> bool:
        return self.op == "qk_norm_rope"

    def params(self) -> dict[str, Any]:
        return {"case": self.label, "tokens": self.tokens, "num_qo_heads": self.num_qo_heads,
                "num_kv_heads": self.num_kv_heads, "head_dim": self.head_dim,
                "rope": self.name, "attrs": dict(self.attrs)}


def select_cases(quick: bool = False, gpu: bool = True) -> list[Case]:
    """Llama 3 (scaled) at every token count, unscaled RoPE at 4096, Qwen3's QK norm + RoPE from
    128 tokens; --quick two token counts; the host path tiny shapes."""
    heads = HEADS if gpu else HOST_HEADS
    tokens = (QUICK_TOKENS if quick else TOKENS) if gpu else HOST_TOKENS
    out = [Case("apply_rope", t, *heads, LLAMA3, "llama3") for t in tokens]
    out += [Case("apply_rope", max(tokens), *heads, PLAIN, "plain")]
    out += [Case("qk_norm_rope", t, *heads, QWEN3, "qwen3") for t in tokens if t > 1 or not gpu]
    return out


def bytes_moved(case: Case, elem: int) -> int:
    """q and k read and written once, the positions read once (the weights are noise)."""
    return 2 * math.prod(case.shape) * elem + 4 * case.tokens


def set_bytes(case: Case, elem: int) -> int:
    """One set's packed qkv (V included: it is the memory the views live in) and positions."""
    t, hq, hk, d = case.tokens, case.num_qo_heads, case.num_kv_heads, case.head_dim
    return t * (hq + 2 * hk) * d * elem + 4 * t


# --------------------------------------------------------------------------------------------
# Inputs and reference.


def make_set(case: Case, ctx: bench.Context) -> dict:
    """qkv [T, (Hq + 2 Hkv) d]; q and k views of it; positions int32 in [0, MAX_POSITION); the
    norm weights (shared values, one copy per set)."""
    import torch

    t, hq, hk, d = case.tokens, case.num_qo_heads, case.num_kv_heads, case.head_dim
    qkv = torch.randn(t, (hq + 2 * hk) * d, dtype=ctx.torch_dtype, device=ctx.dev)
    s = {"qkv": qkv, "positions": torch.randint(0, MAX_POSITION, (t,), dtype=torch.int32,
                                                device=ctx.dev)}
    _views(s, case)
    if case.norm:
        g = torch.Generator().manual_seed(7)
        s["q_weight"] = (1 + 0.2 * torch.randn(d, generator=g)).to(ctx.torch_dtype).to(ctx.dev)
        s["k_weight"] = (1 + 0.2 * torch.randn(d, generator=g)).to(ctx.torch_dtype).to(ctx.dev)
    return s


def _views(s: dict, case: Case) -> None:
    t, hq, hk, d = case.tokens, case.num_qo_heads, case.num_kv_heads, case.head_dim
    qkv = s["qkv"]
    s["q"] = qkv[:, : hq * d].view(t, hq, d)
    s["k"] = qkv[:, hq * d: (hq + hk) * d].view(t, hk, d)


def clone_set(s: dict, case: Case) -> dict:
    c = dict(s, qkv=s["qkv"].clone())
    _views(c, case)
    return c


def reference(case: Case, s: dict, sel: list[int]):
    """Float64 (q_out, k_out) at the checked tokens (reference.py)."""
    import torch

    from . import reference as ref

    idx = torch.as_tensor(sel, device=s["q"].device)

    def np64(x):
        return x.index_select(0, idx).double().cpu().numpy() if x.dim() == 3 else \
            x.double().cpu().numpy()

    pos = s["positions"].index_select(0, idx).cpu().numpy()
    if case.norm:
        return ref.qk_norm_rope(np64(s["q"]), np64(s["k"]), np64(s["q_weight"]),
                                np64(s["k_weight"]), pos, **case.attrs)
    return ref.apply_rope(np64(s["q"]), np64(s["k"]), pos, **case.attrs)


# --------------------------------------------------------------------------------------------
# Impls: bind(set) -> call() -> (q_out, k_out) ([T, H, d] each).


@dataclass
class Impl(bench.Impl):
    in_place: bool = True


def _xkernels_impls(case: Case) -> list[Impl]:
    attrs = dict(case.attrs)

    def bind(s):
        import xkernels.torch as xt

        q, k, pos = s["q"], s["k"], s["positions"]
        if case.norm:
            qw, kw = s["q_weight"], s["k_weight"]

            def call():
                xt.qk_norm_rope(q, k, qw, kw, pos, **attrs)
                return q, k
        else:
            def call():
                xt.apply_rope(q, k, pos, **attrs)
                return q, k
        return call

    what = "qk_norm_rope" if case.norm else "apply_rope"
    return [Impl("xkernels", bind, f"xkernels.torch.{what}(q, k, ...) in place on qkv views")]


def _hf_inv_freq(case: Case, device, dtype=None):
    """Hugging Face's inv_freq, in float32 as it keeps it (with _compute_llama3_parameters's
    scaling), or in `dtype`."""
    import torch

    from . import reference as ref

    a = case.attrs
    inv = ref.rope_inv_freq(case.head_dim, a.get("theta", 10000.0), a.get("rope_scale", 1.0),
                            a.get("low_freq_factor", 1.0), a.get("high_freq_factor", 4.0),
                            a.get("original_max_position", 8192))
    return torch.tensor(inv, dtype=dtype or torch.float32, device=device)


def _hf_rope(q, k, positions, inv_freq):
    """Hugging Face's RotaryEmbedding.forward + apply_rotary_pos_emb (rotate_half), q and k
    [T, H, d], cos and sin rounded to q's dtype, new tensors."""
    import torch

    freqs = positions.float()[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos().to(q.dtype)[:, None, :], emb.sin().to(q.dtype)[:, None, :]

    def rotate_half(x):
        h = x.shape[-1] // 2
        return torch.cat((-x[..., h:], x[..., :h]), dim=-1)

    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def _hf_rmsnorm(x, w, eps):
    """Qwen3RMSNorm: float32 variance, rsqrt, back to the dtype, times the weight."""
    import torch

    v = x.float().pow(2).mean(-1, keepdim=True)
    return w * (x.float() * torch.rsqrt(v + eps)).to(x.dtype)


def _torch_impls(case: Case, compiled: bool) -> list[Impl]:
    import torch

    eps = case.attrs.get("eps", 1e-6)

    def layer(q, k, pos, inv, qw=None, kw=None):
        if qw is not None:
            q, k = _hf_rmsnorm(q, qw, eps), _hf_rmsnorm(k, kw, eps)
        return _hf_rope(q, k, pos, inv)

    fn = torch.compile(layer, dynamic=False) if compiled else layer

    def bind(s):
        q, k, pos = s["q"], s["k"], s["positions"]
        inv = _hf_inv_freq(case, q.device)
        ws = (s["q_weight"], s["k_weight"]) if case.norm else ()
        return lambda: fn(q, k, pos, inv, *ws)

    name = "torch.compile" if compiled else "torch"
    what = "HF Qwen3RMSNorm per head + " if case.norm else ""
    return [Impl(name, bind, f"{what}HF rotate_half formula{', compiled' if compiled else ''}, "
                 "new tensors", in_place=False)]


def _flashinfer_impls(case: Case, fi: Any) -> list[Impl]:
    """FlashInfer's in-place RoPE on the same views: apply_llama31_rope_pos_ids_inplace (Llama 3
    scaling) or apply_rope_pos_ids_inplace, and apply_rope_with_cos_sin_cache_inplace (a float32
    [MAX_POSITION, d] cos/sin cache, q and k as [T, H d] views). No fused QK norm + RoPE."""
    if case.norm:
        return []
    if isinstance(fi, BaseException):
        return [Impl("flashinfer", bench._failing(fi))]
    a = case.attrs
    llama3 = a.get("rope_scale", 1.0) != 1.0

    def bind(s):
        q, k, pos = s["q"], s["k"], s["positions"]
        if llama3:
            def call():
                fi.apply_llama31_rope_pos_ids_inplace(
                    q, k, pos, rope_scale=a["rope_scale"], rope_theta=a["theta"],
                    low_freq_factor=a["low_freq_factor"], high_freq_factor=a["high_freq_factor"],
                    old_context_len=a["original_max_position"])
                return q, k
        else:
            def call():
                fi.apply_rope_pos_ids_inplace(q, k, pos, rope_theta=a["theta"])
                return q, k
        return call

    def bind_cache(s):
        import torch

        q, k, pos = s["q"], s["k"], s["positions"]
        t, hq, d = q.shape
        inv = _hf_inv_freq(case, q.device, torch.float64)  # the cache as accurate as floats go
        ang = torch.arange(MAX_POSITION, device=q.device, dtype=torch.float64)[:, None] * inv
        cache = torch.cat((ang.cos(), ang.sin()), dim=-1).float()  # [max_pos, d]: cos | sin
        q2, k2 = q.view(t, hq * d), k.view(t, k.shape[1] * d)
        pos64 = pos.long()

        def call():
            fi.apply_rope_with_cos_sin_cache_inplace(pos64, q2, k2, d, cache, is_neox=True)
            return q, k
        return call

    fn = "apply_llama31_rope_pos_ids_inplace" if llama3 else "apply_rope_pos_ids_inplace"
    return [Impl("flashinfer", bind, f"flashinfer.{fn}, in place on the views"),
            Impl("flashinfer cos_sin_cache", bind_cache,
                 "flashinfer.apply_rope_with_cos_sin_cache_inplace, float32 cache, in place")]


def impls_for(case: Case, ctx: bench.Context) -> list[Impl]:
    out = _xkernels_impls(case) if "xkernels" in ctx.groups else []
    fi = ctx.peers.get("flashinfer") if "flashinfer" in ctx.groups else None
    if fi is not None:
        out += _flashinfer_impls(case, fi)
    if "torch" in ctx.groups:
        out += _torch_impls(case, False)
    if "torch.compile" in ctx.groups:
        out += _torch_impls(case, True)
    return out


# --------------------------------------------------------------------------------------------
# The run.


def check(case: Case, got, sel: list[int], ref, dtype_name: str) -> str | None:
    """None when q_out and k_out at the checked tokens are within bench.compare's bounds."""
    import torch

    idx = torch.as_tensor(sel, device=got[0].device)
    for name, g, r in zip(("q", "k"), got, ref):
        rows = g.index_select(0, idx).reshape(-1, case.head_dim)
        bad = bench.compare((rows,), (r.reshape(-1, case.head_dim),),
                            list(range(rows.shape[0])), dtype_name)
        if bad:
            return f"{name}: {bad}"
    return None


def _case_row(ctx, case, impl, ms, note, **kw):
    row = bench._row(ctx, FAMILY, case.op, case.shape, impl, ms,
                     bytes_moved(case, ctx.elem), note, **kw)
    row.update(case.params())
    return row


def prepare(impl: Impl, case: Case, sets: list[dict], check_set: dict, sel, ref,
            ctx: bench.Context):
    """The first call (bench.first_call, on a copy of the first set) and its check, then the
    graph captured (GPU) or the calls timed (host). A failed row, or the _Timed to sample."""
    first = bench.first_call(impl, lambda i: i.bind(clone_set(check_set, case))(),
                             lambda got: check(case, got, sel, ref, ctx.dtype_name))
    if first.failed:
        return _case_row(ctx, case, impl.name, None, first.failed)
    t, failed = bench.timed_impl(first, sets, ctx)
    if failed:
        return _case_row(ctx, case, impl.name, None, failed, check=t.check)
    return t


def run_case(case: Case, ctx: bench.Context, emit: Callable[[dict], None]) -> None:
    import torch

    impls = impls_for(case, ctx)
    if not impls:
        return
    count = 1
    if ctx.gpu:
        count = bench.n_sets(set_bytes(case, ctx.elem), ctx.l2_bytes,
                             torch.cuda.mem_get_info()[0])
    sets = [make_set(case, ctx) for _ in range(count)]
    pristine = clone_set(sets[0], case)  # the in-place impls rotate the sets as they are timed
    sel = bench.check_index(case.tokens, CHECK_TOKENS)
    ref = reference(case, pristine, sel)
    results = []
    for impl in impls:
        results.append(prepare(impl, case, sets, pristine, sel, ref, ctx))
        if ctx.gpu:
            with contextlib.suppress(Exception):
                torch.cuda.synchronize()
    bench.sample_rounds(results, ctx)
    nbytes = bytes_moved(case, ctx.elem)
    rows = []
    for r in results:
        if isinstance(r, bench._Timed):
            row = bench._timed_row(r, case.op, case.shape, ctx, FAMILY, nbytes)
            row.update(case.params())
        else:
            row = r
        rows.append(row)
    del results, sets, pristine
    bench.emit_case_rows(rows, case.label, ctx, emit)


def best_peer_ratios(rows: list[dict]) -> dict[int, float]:
    """{index of an xkernels row: its ms / the fastest peer's of its case}."""
    best: dict[str, int] = {}
    for i, r in enumerate(rows):
        if (bench.impl_group(r["impl"]) == "xkernels" or r.get("ms") is None
                or r.get("check") == "failed"):
            continue
        if r["case"] not in best or r["ms"] < rows[best[r["case"]]]["ms"]:
            best[r["case"]] = i
    return {i: r["ms"] / rows[best[r["case"]]]["ms"] for i, r in enumerate(rows)
            if bench.impl_group(r["impl"]) == "xkernels" and r.get("ms") is not None
            and r["case"] in best}


def format_table(rows: list[dict], copy_gbps: float | None = None) -> str:
    rows = [r for r in rows if r.get("family") == FAMILY]
    rat = best_peer_ratios(rows)
    cells = [TABLE_COLUMNS]
    for i, r in enumerate(rows):
        cells.append((r.get("case") or r["op"], r["impl"],
                      bench._fmt(r.get("ms"), ".4f"), bench._fmt(r.get("gbps"), ".1f"),
                      bench._fmt(bench.pct_copy(r, copy_gbps), ".1f"),
                      bench._fmt(rat.get(i), ".3f"), bench.clip_note(r.get("note") or "")))
    return bench.render_cells(cells, {2, 3, 4, 5}, LEGEND)


def run_family(ctx: bench.Context, quick: bool, emit: Callable[[dict], None]) -> None:
    """The rope family (called by bench._run)."""
    if not ctx.gpu:
        print("[rope] host path (CPU tensors, tiny shapes; not GPU numbers): xkernels and the "
              "torch formula; FlashInfer is CUDA only", file=sys.stderr, flush=True)
    for case in select_cases(quick, ctx.gpu):
        try:
            run_case(case, ctx, emit)
        except Exception as e:  # noqa: BLE001 (inputs or reference: report, go on)
            emit(_case_row(ctx, case, "xkernels", None, f"failed: case setup: {bench._error(e)}"))
            ctx.xkernels_failed.append(f"{case.label}: {bench._error(e)}")
