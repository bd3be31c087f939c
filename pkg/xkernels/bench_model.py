"""The model family: one decoder layer of Llama 3 8B, xkernels next to Hugging Face's own.

Impls of one layer (hidden 4096, MLP 14336, 32 query heads over 8 kv heads of 128, RoPE theta
500000 with Llama 3 scaling, bf16), all with the same weights:
- ``xkernels``: ``xkernels.torch.nn.DecoderLayer`` made from the HF layer (``patch``'s converter):
  prefill dense and causal; decode over a ``PagedKVCache`` (page 16, pages shuffled).
- ``hf eager (sdpa)``: transformers' ``LlamaDecoderLayer`` with ``attn_implementation="sdpa"``;
  decode over a ``StaticCache`` of kv_len + 1 slots (its position reset before each call, so every
  call writes the same slot), cos/sin computed once outside the timing (HF computes them once per
  model forward, for all layers).
- ``torch.compile``: ``torch.compile`` of that HF layer (default mode), the same calls.

Cases: prefill of 1 x 4096 and 8 x 1024 tokens (causal), decode of one token per request at batch
1, 32, 128 over 4096 cached tokens. Each call is timed as the other families time theirs (a CUDA
graph of >= 40 calls, medians of replays); the row's ``ms`` is one layer's time. Checks: every
impl's output against HF eager's on the same input and cache (``‖err‖ / ‖ref‖ <= 2e-2``: three bf16
implementations of a layer, each rounding its intermediates to bf16). ``kernels``: the profiler's
split of one call's GPU time by kernel (torch.profiler, eager launches), the top entries.

Without a GPU: a small layer (hidden 256, heads 4 / 2 of 64) on the host path, xkernels and HF eager.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import bench

LLAMA3_8B = {"hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
             "num_key_value_heads": 8, "head_dim": 128, "rms_norm_eps": 1e-5,
             "max_position_embeddings": 131072,
             "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                 "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                 "original_max_position_embeddings": 8192}}
HOST_LAYER = {"hidden_size": 256, "intermediate_size": 512, "num_attention_heads": 4,
              "num_key_value_heads": 2, "head_dim": 64, "rms_norm_eps": 1e-5,
              "max_position_embeddings": 4096}
CHECK_RTOL = 2e-2
TOP_KERNELS = 8


@dataclass(frozen=True)
class Case:
    kind: str  # "prefill" or "decode"
    batch: int
    tokens: int  # per request: the prefill's length, 1 for decode
    kv_len: int  # decode: tokens already cached

    @property
    def name(self) -> str:
        if self.kind == "prefill":
            return f"prefill {self.batch}x{self.tokens}"
        return f"decode b{self.batch} kv{self.kv_len}"

    @property
    def shape(self) -> list[int]:
        return [self.batch, self.tokens, self.kv_len]


def select_cases(quick: bool = False, gpu: bool = True) -> list[Case]:
    if not gpu:
        return [Case("prefill", 1, 64, 0), Case("decode", 2, 1, 64)]
    cases = [Case("prefill", 1, 4096, 0), Case("prefill", 8, 1024, 0),
             Case("decode", 1, 1, 4096), Case("decode", 32, 1, 4096),
             Case("decode", 128, 1, 4096)]
    return [cases[0], cases[3]] if quick else cases


def hf_layer(layer_kwargs: dict, dtype, device) -> tuple[Any, Any, Any]:
    """(config, LlamaDecoderLayer, rotary embedding) with random weights."""
    import torch
    from transformers import LlamaConfig
    from transformers.models.llama import modeling_llama as ml

    cfg = LlamaConfig(num_hidden_layers=1, vocab_size=128, **layer_kwargs)
    cfg._attn_implementation = "sdpa"
    with torch.device(device):
        layer = ml.LlamaDecoderLayer(cfg, 0).to(dtype)
        rotary = ml.LlamaRotaryEmbedding(cfg)
    gen = torch.Generator(device="cpu").manual_seed(0)
    with torch.no_grad():
        for p in layer.parameters():
            if p.dim() == 2:
                p.copy_(torch.randn(p.shape, generator=gen) * p.shape[1] ** -0.5)
            else:
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=gen))
    return cfg, layer.eval(), rotary


@dataclass
class Inputs:
    x: Any  # [batch, tokens, hidden]
    positions: Any  # [batch, tokens] int64
    cos_sin: tuple
    keys: Any = None  # decode: [batch, kv_len, kv_heads, head_dim] (post-RoPE)
    values: Any = None


def make_inputs(case: Case, cfg, rotary, dtype, device) -> Inputs:
    import torch

    gen = torch.Generator(device="cpu").manual_seed(1)
    x = torch.randn(case.batch, case.tokens, cfg.hidden_size, generator=gen).to(device, dtype)
    start = case.kv_len if case.kind == "decode" else 0
    pos = (torch.arange(case.tokens) + start)[None].expand(case.batch, -1).to(device)
    inp = Inputs(x, pos.contiguous(), rotary(x, pos))
    if case.kind == "decode":
        shape = (case.batch, case.kv_len, cfg.num_key_value_heads, cfg.head_dim)
        inp.keys = torch.randn(shape, generator=gen).to(device, dtype)
        inp.values = torch.randn(shape, generator=gen).to(device, dtype)
    return inp


def _xkernels_fn(case: Case, cfg, layer, inp: Inputs) -> Callable[[], Any]:
    import torch

    from xkernels.torch import nn as xnn

    rope = xnn.RopeConfig.from_hf(cfg, cfg.head_dim)
    xl = xnn._decoder_from_hf(layer, cfg, 0, rope, strict=True)
    if case.kind == "prefill":
        return lambda: xl(inp.x, inp.positions)
    cache = xnn.PagedKVCache(1, cfg.num_key_value_heads, cfg.head_dim, batch_size=case.batch,
                             max_seq_len=case.kv_len + 1, dtype=inp.x.dtype,
                             device=inp.x.device, auto_step=False)
    cache.begin(case.kv_len)
    cache.append(0, inp.keys, inp.values)
    cache.begin(1)
    torch.cuda.synchronize() if inp.x.is_cuda else None
    return lambda: xl(inp.x, inp.positions, cache)


def _hf_fn(case: Case, cfg, layer, inp: Inputs, compiled: bool) -> Callable[[], Any]:
    from transformers import StaticCache

    fn = layer
    if compiled:
        import torch

        fn = torch.compile(layer)
    if case.kind == "prefill":
        return lambda: fn(inp.x, attention_mask=None, position_ids=inp.positions,
                          position_embeddings=inp.cos_sin)
    cache = StaticCache(config=cfg, max_cache_len=case.kv_len + 1)
    cl = cache.layers[0]
    cl.lazy_initialization(inp.keys.transpose(1, 2), inp.values.transpose(1, 2))
    cl.keys[:, :, : case.kv_len].copy_(inp.keys.transpose(1, 2))
    cl.values[:, :, : case.kv_len].copy_(inp.values.transpose(1, 2))

    # the layer's cache keyword ("cache", or "past_key_values" in earlier transformers 5
    # releases: a keyword the layer does not take would leave its attention over the new token)
    from xkernels.torch.nn import cache_kwarg

    kw = {cache_kwarg(layer): cache}

    def call():
        cl.cumulative_length.fill_(case.kv_len)
        return fn(inp.x, attention_mask=None, position_ids=inp.positions,
                  position_embeddings=inp.cos_sin, **kw)
    return call


def kernel_split(fn: Callable[[], Any], gpu: bool, calls: int = 3) -> list[list]:
    """[[kernel name, us per call, share], ...]: the profiler's top entries of one call's GPU time
    (CPU ops on the host path)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CUDA] if gpu else [ProfilerActivity.CPU]
    with profile(activities=acts) as prof:
        for _ in range(calls):
            fn()
        if gpu:
            torch.cuda.synchronize()
    rows = []
    for e in prof.key_averages():
        t = e.self_device_time_total if gpu else e.self_cpu_time_total
        if t > 0 and (not gpu or e.device_type == torch.autograd.DeviceType.CUDA):
            rows.append((e.key, t / calls))
    total = sum(t for _, t in rows) or 1.0
    rows.sort(key=lambda r: -r[1])
    return [[name[:90], round(t, 2), round(t / total, 4)] for name, t in rows[:TOP_KERNELS]]


def _rel_err(got, ref) -> float:
    g, r = got.float(), ref.float()
    return float((g - r).norm() / r.norm().clamp_min(1e-30))


def run_family(ctx: bench.Context, quick: bool, emit: Callable[[dict], None]) -> None:
    import torch

    try:
        import transformers  # noqa: F401
    except ImportError as e:
        emit(bench._row(ctx, "model", "decoder_layer", (0,), "xkernels", None, None,
                        f"failed: the model family needs transformers ({e})"))
        ctx.xkernels_failed.append("model: transformers is not installed")
        return
    dtype = torch.bfloat16
    cfg, layer, rotary = hf_layer(LLAMA3_8B if ctx.gpu else HOST_LAYER, dtype, ctx.dev)
    for case in select_cases(quick, ctx.gpu):
        rows = []
        try:
            inp = make_inputs(case, cfg, rotary, dtype, ctx.dev)
            # HF eager first: its output is the others' reference
            args = (case, cfg, layer, inp)
            makers = [("hf eager (sdpa)", lambda a=args: _hf_fn(*a, False))]
            if "xkernels" in ctx.groups:
                makers.append(("xkernels", lambda a=args: _xkernels_fn(*a)))
            if ctx.gpu and "torch.compile" in ctx.groups:
                makers.append(("torch.compile", lambda a=args: _hf_fn(*a, True)))
            ref = None
            for name, make in makers:
                row = _measure(ctx, case, name, make, ref)
                out = row.pop("_out", None)
                if ref is None:
                    ref = out
                rows.append(row)
        except Exception as e:  # noqa: BLE001 (report the case, go on)
            rows.append(bench._row(ctx, "model", "decoder_layer", case.shape, "xkernels", None,
                                   None, f"failed: case setup: {bench._error(e)}",
                                   case=case.name))
        order = {"xkernels": 0, "hf eager (sdpa)": 1, "torch.compile": 2}
        rows.sort(key=lambda r: order.get(r["impl"], 9))
        bench.emit_case_rows(rows, f"model {case.name}", ctx, emit)


def _measure(ctx: bench.Context, case: Case, name: str, make, ref) -> dict:
    import torch

    t0 = time.perf_counter()
    try:
        fn = make()
        out = fn()
        if ctx.gpu:
            torch.cuda.synchronize()
        first = time.perf_counter() - t0
        check = "reference" if ref is None else "ok"
        err = None
        if ref is not None:
            err = _rel_err(out, ref)
            check = "ok" if err <= CHECK_RTOL else f"rel err {err:.3g} > {CHECK_RTOL}"
        ms, why = ctx.time([fn])
        kernels = kernel_split(fn, ctx.gpu)
    except Exception as e:  # noqa: BLE001 (a failing impl is a row)
        return bench._row(ctx, "model", "decoder_layer", case.shape, name, None, None,
                          f"failed: {bench._error(e)}", case=case.name)
    finally:
        if name == "torch.compile":
            with contextlib.suppress(Exception):
                torch._dynamo.reset()
    tokens = case.batch * case.tokens
    row = bench._row(ctx, "model", "decoder_layer", case.shape, name, ms, None, why or "",
                     case=case.name, check=check, rel_err=err, kernels=kernels,
                     tokens_per_s=tokens / (ms * 1e-3) if ms else None,
                     first_call_s=round(first, 3))
    row["_out"] = out.detach().clone()
    return row


def format_table(rows: list[dict]) -> str:
    rows = [r for r in rows if r.get("family") == "model"]
    best: dict[str, float] = {}
    for r in rows:
        if r["impl"] != "xkernels" and r.get("ms"):
            best[r["case"]] = min(best.get(r["case"], float("inf")), r["ms"])
    head = f"{'model: one decoder layer':<28} {'impl':<18} {'ms':>9} {'vs best peer':>12}  "
    lines = [head + "top kernels (share of GPU time)"]
    for r in rows:
        ms = r.get("ms")
        ratio = f"{ms / best[r['case']]:.3f}" if ms and r["case"] in best else "-"
        top = ", ".join(f"{k[0][:28]} {k[2]:.0%}" for k in (r.get("kernels") or [])[:3])
        lines.append(f"{r.get('case', '?'):<28} {r['impl']:<18} "
                     f"{'-' if ms is None else f'{ms:.3f}':>9} {ratio:>12}  "
                     f"{top or r.get('note', '')[:80]}")
    return "\n".join(lines)


# ---- xkernels profile

def profile_main(argv: list[str]) -> int:
    """`xkernels profile`: a Chrome trace (torch.profiler) of one decoder layer's calls, and the
    per-kernel table."""
    import argparse

    import torch
    from torch.profiler import ProfilerActivity, profile

    p = argparse.ArgumentParser(prog="xkernels profile", description=profile_main.__doc__)
    p.add_argument("--case", default="decode:32:4096",
                   help="prefill:BATCH:TOKENS or decode:BATCH:KV_LEN (default decode:32:4096)")
    p.add_argument("--impl", choices=("xkernels", "hf"), default="xkernels")
    p.add_argument("--trace", default="xkernels-trace.json", help="the Chrome trace to write")
    p.add_argument("--calls", type=int, default=5)
    args = p.parse_args(argv)
    kind, a, b = args.case.split(":")
    case = (Case("prefill", int(a), int(b), 0) if kind == "prefill"
            else Case("decode", int(a), 1, int(b)))
    gpu = torch.cuda.is_available()
    dev = "cuda" if gpu else "cpu"
    cfg, layer, rotary = hf_layer(LLAMA3_8B if gpu else HOST_LAYER, torch.bfloat16, dev)
    inp = make_inputs(case, cfg, rotary, torch.bfloat16, dev)
    with torch.no_grad():
        fn = (_xkernels_fn(case, cfg, layer, inp) if args.impl == "xkernels"
              else _hf_fn(case, cfg, layer, inp, False))
        for _ in range(3):
            fn()
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if gpu else [])
        with profile(activities=acts) as prof:
            for _ in range(args.calls):
                fn()
            if gpu:
                torch.cuda.synchronize()
    prof.export_chrome_trace(args.trace)
    sort = "self_cuda_time_total" if gpu else "self_cpu_time_total"
    print(prof.key_averages().table(sort_by=sort, row_limit=15))
    print(f"{args.impl}, {case.name}, {'GPU' if gpu else 'host path (no GPU)'}: trace written to "
          f"{args.trace} (open it in chrome://tracing or https://ui.perfetto.dev)")
    return 0
