"""`xkernels bench`: check every op against its float64 reference and time it next to the peers.

On a GPU: CUDA events around CUDA-graph replays over rotating input sets (>= 3x L2), the median of
>= 100 ms of samples, next to the peers that are installed (torch eager, torch.compile, FlashInfer,
Liger), with GB/s and the share of a 1 GiB device-to-device copy timed the same way in the same
run. Without a GPU: the host path (CPU tensors) at small shapes, timed with time.perf_counter.

Results: a table (printed last) and, with --out DIR, DIR/<family>-<gpu>.jsonl, one object per
row, appended as rows are measured. Exit status 1 when an xkernels op fails its check or fails to
run; a peer that fails is reported in the table and the run goes on.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import functools
import importlib
import importlib.metadata
import importlib.util
import json
import math
import os
import re
import signal
import statistics
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import __version__
from .ops import OPS

FAMILIES = ("norm", "activation", "softmax", "overhead", "attention", "gemm", "rope")
# Run only when named (--family model): one decoder layer next to Hugging Face (needs transformers)
EXTRA_FAMILIES = ("model",)
IMPL_GROUPS = ("xkernels", "torch", "torch.compile", "flashinfer", "liger", "flash_attn")
PEERS = {"flashinfer": ("flashinfer", "flashinfer-python"),
         "liger": ("liger_kernel", "liger-kernel"), "flash_attn": ("flash_attn", "flash-attn")}
# The families each peer has impls in (loaded only when one of them runs). All CUDA only.
PEER_FAMILIES = {"flashinfer": {"norm", "activation", "softmax", "overhead", "attention", "gemm",
                                "rope"},
                 "liger": {"norm", "activation", "softmax"}, "flash_attn": {"attention"}}
DTYPES = {"bf16": ("bfloat16", 2), "fp16": ("float16", 2), "fp32": ("float32", 4)}
# |out - ref| <= atol + rtol * |ref| (as tests/cases.py): (rtol, atol) per dtype.
TOL = {"bf16": (2e-2, 2e-2), "fp16": (4e-3, 4e-3), "fp32": (2e-5, 2e-5)}
# and ||out - ref|| / ||ref|| at most this (the elementwise atol alone passes an all-zero softmax
# of wide rows): a few output roundings of the dtype.
REL_TOL = {"bf16": 2e-2, "fp16": 4e-3, "fp32": 1e-4}

# Input shapes (gated ops: [rows, 2d]). add_bias_gelu uses approximate='tanh' for every impl.
_NORM = [(1, 4096), (128, 4096), (8192, 4096), (32768, 8192)]
QK_NORM = (1048576, 128)  # rows of one head: FlashInfer gets it as [32768, 32, 128]
QK_HEADS = 32
_GATED = [(1, 28672), (4096, 28672), (8192, 28672)]
CASES: dict[str, list[tuple[str, tuple[int, ...]]]] = {
    "norm": [("rmsnorm", s) for s in [*_NORM, QK_NORM]]
    + [("fused_add_rmsnorm", s) for s in _NORM]
    + [("layernorm", s) for s in _NORM],
    "activation": [(op, s) for op in ("silu_and_mul", "gelu_tanh_and_mul", "gelu_and_mul")
                   for s in _GATED]
    + [("add_bias_gelu", (131072, 4096)), ("mul_add", (1 << 28,))],
    "softmax": [("softmax", (32768, 8192)), ("softmax", (4096, 131072))],
}
ATTRS: dict[str, dict[str, Any]] = {
    "rmsnorm": {"eps": 1e-6},
    "gemma_rmsnorm": {"eps": 1e-6},
    "fused_add_rmsnorm": {"eps": 1e-6},
    "gemma_fused_add_rmsnorm": {"eps": 1e-6},
    "layernorm": {"eps": 1e-5},
    "add_bias_gelu": {"approximate": "tanh"},
    "gelu": {"approximate": "tanh"},  # the sweep's (GPT-2, Phi-2 and StarCoder2 use tanh)
    "softmax": {"scale": 1.0},
}
GEMM_FAMILY_OPS = ("gemm", "gemm_fp8", "quantize_fp8")  # bench_gemm.py's ops
MODEL_FAMILY_OPS = ("rmsnorm", "silu_and_mul", "gemm", "attention", "apply_rope")  # a layer's
OVERHEAD_SHAPE = (1, 4096)
OVERHEAD_ROUNDS = 15  # host-cost rounds of every impl (3 with --quick)

L2_FACTOR = 3  # rotating input sets cover at least this many times the L2
MAX_SETS = 1000  # and at most this many sets
# and at least this many, where the GPU's free memory holds them (SET_MEMORY_SHARE of it): each
# set's tensors land on their own pages, so the shapes whose one set would cover the L2 are timed
# over several memory layouts instead of one. At 32768x8192 the layout alone moved FlashInfer's
# in-place fused_add_rmsnorm between 712 and 717 us (benchmarks/README.md, Memory layout).
MIN_SETS = 3
SET_MEMORY_SHARE = 0.3
# A graph makes at least this many calls (cycling through the sets): a replay and its events
# cost a few microseconds, which one call per replay would add to each call's time. Measured on
# the H100, bf16 rmsnorm 32768x8192 (one set): 359.0 us per call with one call per replay, 355.4
# with 40.
MIN_GRAPH_CALLS = 40
# The impls of a case are sampled in rounds (each round, every impl for min_ms / rounds), all
# their graphs captured first, in the orders of balanced_orders: so that no impl's figure depends
# on its place in the run or on the impl before it. Timed one after the other, the impl that
# followed torch.compile ran faster: H100 bf16 fused_add_rmsnorm 8192x4096 in place, whichever
# of FlashInfer and xkernels came right after it measured 89.6-89.9 us, the other 91.2-91.5
# (also after 100 ms of warm-up replays, and with the data at its fixed point in both).
# The sweep (bench --sweep, bench_sweep.py): samples per impl and case, the least time a graph's
# replay takes (its calls), the copy rate assumed before it is measured, and impls left out
# (op, --impls group): FlashInfer's softmax (sampling.softmax: fp32 out, 2-5x the time of every
# other impl in the softmax family, never the best peer) costs 75 s of JIT build on a fresh
# machine.
SWEEP_MIN_MS = 15.0
SWEEP_REPLAY_MS = 2.0
SWEEP_COPY_GBPS = 3000.0
SWEEP_SKIP = {("softmax", "flashinfer")}
# and torch.compile at 1 row of the norms: a graph of its own per width (dynamo specializes a size
# of 1), 44 graphs, about 50 s, for a peer FlashInfer and Liger beat there (H100, 1x4096:
# torch.compile 1.8-2.2 us, FlashInfer 1.6-1.8, Liger 1.6-1.8). Kept for the activations and
# softmax, where torch.compile is the fastest peer at 1 row (silu_and_mul 1.7 us, FlashInfer 3.5).
SWEEP_NO_ONE_ROW_COMPILE = ("rmsnorm", "fused_add_rmsnorm", "gemma_rmsnorm",
                            "gemma_fused_add_rmsnorm", "layernorm")
CHECK_ROWS = 16  # first and last rows checked against the float64 reference
CHECK_ELEMS = 4096  # 1-D ops: first and last elements checked
HOST_CAP, HOST_CAP_QUICK = 1 << 20, 1 << 16  # host path: elements per input at most

TABLE_COLUMNS = ("op", "shape", "impl", "ms", "GB/s", "%copy", "vs best peer", "note")
NOTE_WIDTH = 48  # the table's notes are cut (the JSONL keeps them whole)


# --------------------------------------------------------------------------------------------
# Pure helpers (no torch): bytes, names, shapes, the table.


def balanced_orders(n: int) -> list[list[int]]:
    """Orders of n impls for the sampling rounds (a Williams design): over the rounds every impl
    takes every place equally often and follows every other impl equally often (n rounds for an
    even n, 2n for an odd one; one round for n = 1)."""
    if n <= 1:
        return [list(range(n))]
    first = [0]
    lo, hi = 1, n - 1
    while lo <= hi:  # 0, 1, n-1, 2, n-2, ...
        first.append(lo)
        lo += 1
        if lo <= hi:
            first.append(hi)
            hi -= 1
    orders = [[(i + k) % n for i in first] for k in range(n)]
    if n % 2:
        orders += [order[::-1] for order in orders]
    return orders


def bytes_moved(op: str, shape: tuple[int, ...], elem: int, weight_elem: int | None = None) -> int:
    """Bytes that must cross memory: each input read once, each output written once.

    `shape` is the input shape (gated ops: [..., 2d]); rmsnorm counts its weight, fused_add_rmsnorm
    does not (4 * rows * cols * elem, as anchors.md counts it)."""
    we = elem if weight_elem is None else weight_elem
    n = math.prod(shape)
    cols = shape[-1]
    if op in ("rmsnorm", "gemma_rmsnorm"):
        return 2 * n * elem + cols * we
    if op in ("fused_add_rmsnorm", "gemma_fused_add_rmsnorm"):
        return 4 * n * elem
    if op == "layernorm":
        return 2 * n * elem + 2 * cols * we
    if op.endswith("_and_mul"):
        return 3 * (n // 2) * elem
    if op in ("softmax", "silu", "gelu"):
        return 2 * n * elem
    if op == "add_bias_gelu":
        return 2 * n * elem + cols * we
    if op == "mul_add":
        return 4 * n * elem
    if op == "copy":
        return 2 * n * elem
    raise ValueError(f"no byte count for {op!r}")


def gbps(nbytes: int, ms: float | None) -> float | None:
    return None if not ms or ms <= 0 else nbytes / ms / 1e6


def gpu_short_name(name: str) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'h100'; 'NVIDIA GeForce RTX 4090' -> 'rtx4090'."""
    toks = [t for t in re.split(r"[\s_\-/]+", name.lower()) if t]
    toks = [t for t in toks if t not in ("nvidia", "geforce", "tesla", "quadro", "amd", "radeon")]
    if not toks:
        return "gpu"
    first = re.sub(r"[^a-z0-9]", "", toks[0])
    if first.isalpha() and len(toks) > 1:  # "rtx 4090", "rtx a6000"
        first += re.sub(r"[^a-z0-9]", "", toks[1])
    return first or "gpu"


def cpu_info(cpuinfo: str | None = None, cpus: int | None = None) -> dict[str, Any]:
    """The host CPU, for the host path's rows: `model` (/proc/cpuinfo's model name), `family` and
    `model_id` (x86's), `cpus` (the CPUs this process may run on: what the host ops' threads use
    unless XKERNELS_HOST_THREADS says otherwise) and `isa` (the widest x86 vector ISA it has)."""
    import platform

    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            cpuinfo = ""
    fields: dict[str, str] = {}
    for line in cpuinfo.split("\n\n")[0].splitlines():  # the first processor
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    flags = set(fields.get("flags", "").split())
    out: dict[str, Any] = {"model": fields.get("model name") or platform.processor() or "cpu"}
    if "cpu family" in fields:
        out["family"], out["model_id"] = int(fields["cpu family"]), int(fields.get("model", "0"))
    if cpus is None:
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    out["cpus"] = cpus
    isa = next((name for name, flag in (("avx512", "avx512f"), ("avx2", "avx2"), ("sse2", "sse2"))
                if flag in flags), None)
    if isa:
        out["isa"] = isa
    return out


def cpu_short_name(model: str) -> str:
    """'AMD EPYC 7763 64-Core Processor' -> 'epyc-7763'; 'Intel(R) Xeon(R) Platinum 8480C' ->
    'xeon-platinum-8480c'; 'AMD EPYC' -> 'epyc' (what a KVM guest may show)."""
    name = re.sub(r"\((r|tm)\)|@.*$|\d+-core|\bcpu\b|\bprocessor\b", " ", model.lower())
    toks = [t for t in re.split(r"[^a-z0-9]+", name)
            if t and t not in ("amd", "intel", "genuineintel", "authenticamd")]
    return "-".join(toks) or "cpu"


def host_shape(shape: tuple[int, ...], cap: int) -> tuple[int, ...]:
    """The shape cut (rows first) to at most `cap` elements, for the host path."""
    if len(shape) == 1:
        return (min(shape[0], cap),)
    row = math.prod(shape[1:])
    return (max(1, min(shape[0], cap // row)), *shape[1:])


def select_cases(family: str, quick: bool = False, host_cap: int | None = None):
    """(op, input shape) pairs of a family; --quick keeps each op's two smallest shapes and its
    largest; the host path cuts the shapes to `host_cap` elements (duplicates dropped)."""
    by_op: dict[str, list[tuple[int, ...]]] = {}
    for op, shape in CASES[family]:
        by_op.setdefault(op, []).append(shape)
    out = []
    for op, shapes in by_op.items():
        if quick:
            order = sorted(shapes, key=math.prod)
            keep = set(order[:2]) | {order[-1]}
            shapes = [s for s in shapes if s in keep]
        if host_cap is not None:
            shapes = list(dict.fromkeys(host_shape(s, host_cap) for s in shapes))
        out += [(op, s) for s in shapes]
    return out


def input_bytes(op: str, shape: tuple[int, ...], elem: int) -> int:
    """Bytes of the row inputs one set holds (its columns are shared by every set)."""
    return sum(x.role != "column" for x in OPS[op].inputs) * math.prod(shape) * elem


def n_sets(set_bytes: int, l2_bytes: int, free_bytes: int | None = None) -> int:
    """Input sets to rotate so that their inputs (`set_bytes` each) cover L2_FACTOR x the L2
    (MIN_SETS .. MAX_SETS), fewer where `free_bytes` is given and SET_MEMORY_SHARE of it cannot
    hold MIN_SETS of them with an output as large as the inputs each (at least 1). Counted by
    the bytes a call moves instead, one set of an 8192x4096 fused_add_rmsnorm (128 MiB of inputs,
    rewritten in place) had passed, and what the L2 kept of it from the call before varied: on
    the H100, FlashInfer's kernel measured 90.75 us there in a full norm run and 94.85 in a run
    of that case alone (91.4 with two sets)."""
    n = max(MIN_SETS, min(MAX_SETS, math.ceil(L2_FACTOR * l2_bytes / max(1, set_bytes))))
    if free_bytes is not None and n == MIN_SETS:
        n = min(n, int(SET_MEMORY_SHARE * free_bytes) // max(1, 2 * set_bytes))
    return max(1, n)


def sweep_sets(set_bytes: int, l2_bytes: int, free_bytes: int | None = None) -> int:
    """The sweep's rotating sets: n_sets, but MIN_GRAPH_CALLS where even MAX_SETS sets would fit
    in the L2 (1-row cases): there no rotation reaches the DRAM, and capturing 1000 calls per impl
    costs about a second of host time per case."""
    if MAX_SETS * set_bytes <= l2_bytes:
        return MIN_GRAPH_CALLS
    return n_sets(set_bytes, l2_bytes, free_bytes)


def sweep_graph_calls(nbytes: int, copy_gbps: float | None) -> int:
    """The calls a sweep graph makes at least: enough for SWEEP_REPLAY_MS per replay at the copy
    rate (a replay's own cost, a few us, stays under 0.2%), at most MIN_GRAPH_CALLS. A graph of
    40 calls of 0.7 ms would need 28 ms per replay and 2 replays per round at the least."""
    ms = nbytes / ((copy_gbps or SWEEP_COPY_GBPS) * 1e6) + 0.002
    return max(1, min(MIN_GRAPH_CALLS, math.ceil(SWEEP_REPLAY_MS / ms)))


def check_index(n: int, k: int = CHECK_ROWS) -> list[int]:
    """The first and last k indices of n."""
    return sorted(set(range(min(k, n))) | set(range(max(0, n - k), n)))


def emit_case_rows(rows: list[dict], label: str, ctx: Context,
                   emit: Callable[[dict], None]) -> None:
    """Emit a case's rows (an xkernels row that failed or was not checked ok is recorded in
    ctx.xkernels_failed), then let the GPU's memory go before the next case."""
    for row in rows:
        if impl_group(row["impl"]) == "xkernels" and (
                row["ms"] is None or row.get("check") != "ok"):
            ctx.xkernels_failed.append(f"{label}: {row['note']}")
        emit(row)
    if ctx.gpu:
        import torch

        with contextlib.suppress(Exception):
            torch.cuda.synchronize()
            torch.cuda.empty_cache()


def impl_group(impl: str) -> str:
    """The --impls name an impl's display name belongs to."""
    if impl.startswith("xkernels"):
        return "xkernels"
    if impl.startswith("torch.compile"):
        return "torch.compile"
    for g in ("torch", "flashinfer", "liger"):
        if impl.startswith(g):
            return g
    return impl


def fmt_shape(shape) -> str:
    if len(shape) == 1 and shape[0] >= 1 << 20 and shape[0] & (shape[0] - 1) == 0:
        return f"2^{shape[0].bit_length() - 1}"
    return "x".join(str(s) for s in shape)


def _fmt(v: float | None, spec: str) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


# Impls of in-place ops that leave their inputs alone and write other tensors instead (new ones,
# or given destinations), by name; the torch composites' fallbacks end in "(functional)".
OUT_OF_PLACE_IMPLS = ("xkernels out=", "liger")


# The ops of the memory-bound families, by family (the sweep's grid too); their rows carry a form.
MEMORY_BOUND = {
    "norm": ("rmsnorm", "fused_add_rmsnorm", "gemma_rmsnorm", "gemma_fused_add_rmsnorm",
             "layernorm"),
    "activation": ("silu_and_mul", "gelu_tanh_and_mul", "gelu_and_mul", "silu", "gelu",
                   "add_bias_gelu", "mul_add"),
    "softmax": ("softmax",),
}
MEMORY_BOUND_OPS = frozenset(op for ops in MEMORY_BOUND.values() for op in ops)


def out_per_set(op: str, impl: str) -> bool:
    """Whether an impl of an out-of-place op writes each input set's own output (given by out=:
    xkernels, torch.addcmul, FlashInfer's norms and activations) rather than the same memory on
    every call (new tensors from the caching allocator, which hands back the block the last call
    freed, or "xkernels out=", one output for every set)."""
    if impl in ("xkernels", "torch.addcmul"):
        return True
    return impl.startswith("flashinfer") and op not in ("layernorm", "softmax")


def impl_form(op: str, impl: str) -> str:
    """The form an impl is compared in, like with like ("" for ops outside the op table, and for
    the attention and GEMM ops, whose families compare per case):
    - an op that works in place (fused_add_rmsnorm): "in place", or "out of place" where the impl
      writes other tensors. Out of place, the outputs of a call can stay in the L2 for the next
      (a caching allocator hands back the same addresses), where in place every call's outputs
      are its rotating inputs, written back to memory (bf16 fused_add_rmsnorm 128x4096 on the
      H100: 3.24 us in place, 2.77 out of place);
    - any other memory-bound op: "out per set" or "out reused" (out_per_set), for the same
      reason: where the output fits in the L2, one reused on every call stays there, and a call
      moves only its input to and from memory. Measured on the H100 (bf16, the sweep's method),
      xkernels per set -> one output reused, us: silu_and_mul 128x29568 9.03 -> 7.21
      (torch.compile 7.67), rmsnorm 1024x7168 11.51 -> 9.59 (torch.compile 9.99)."""
    spec = OPS.get(op)
    if spec is None:
        return ""
    if not spec.in_place:
        if op not in MEMORY_BOUND_OPS:  # attention, gemm: compared per case (best_peer_pairs)
            return ""
        return "out per set" if out_per_set(op, impl) else "out reused"
    return ("out of place" if impl in OUT_OF_PLACE_IMPLS or impl.endswith("(functional)")
            else "in place")


def best_peers(rows: list[dict]) -> dict[int, int]:
    """{index of an xkernels row: index of the fastest peer row of the same op, shape and form
    (impl_form)}. Peers that failed or failed their check do not count."""
    def key(r):
        return (r.get("family"), r["op"], tuple(r["shape"]), impl_form(r["op"], r["impl"]))

    best: dict[tuple, int] = {}
    for i, r in enumerate(rows):
        if impl_group(r["impl"]) == "xkernels" or r.get("ms") is None or r.get("check") == "failed":
            continue
        if key(r) not in best or r["ms"] < rows[best[key(r)]]["ms"]:
            best[key(r)] = i
    return {i: best[key(r)] for i, r in enumerate(rows)
            if impl_group(r["impl"]) == "xkernels" and r.get("ms") is not None and key(r) in best}


def best_peer_pairs(rows: list[dict], family: str, classes: Callable[[dict], list],
                    want: Any, counts: Callable[[dict], bool] = lambda r: True
                    ) -> dict[int, tuple[int | None, int | None]]:
    """For the families whose table has two ratios (attention, gemm): {index of a `family`
    xkernels row: (index of the fastest peer of its case, index of the fastest peer of its case in
    class `want`)}. A peer row counts (its ms measured, its check not failed, ``counts(row)``) in
    its case's "all" and in the classes ``classes(row)`` names."""
    best: dict[tuple, int] = {}
    for i, r in enumerate(rows):
        if (r.get("family") != family or impl_group(r["impl"]) == "xkernels"
                or r.get("ms") is None or r.get("check") == "failed" or not counts(r)):
            continue
        for key in [(r.get("case"), "all")] + [(r.get("case"), c) for c in classes(r)]:
            if key not in best or r["ms"] < rows[best[key]]["ms"]:
                best[key] = i
    out = {}
    for i, r in enumerate(rows):
        if (r.get("family") == family and impl_group(r["impl"]) == "xkernels"
                and r.get("ms") is not None):
            a, c = best.get((r.get("case"), "all")), best.get((r.get("case"), want))
            if a is not None or c is not None:
                out[i] = (a, c)
    return out


def pair_ratios(rows: list[dict], pairs: dict[int, tuple[int | None, int | None]]
                ) -> dict[int, tuple[float | None, float | None]]:
    """best_peer_pairs as time ratios: {xkernels row: (its ms / each peer's ms, or None)}."""
    def q(i, j):
        return None if j is None else rows[i]["ms"] / rows[j]["ms"]

    return {i: (q(i, a), q(i, c)) for i, (a, c) in pairs.items()}


def best_peer_ratios(rows: list[dict]) -> dict[int, float]:
    """{index of an xkernels row: its ms / its best peer's (best_peers)}."""
    return {i: rows[i]["ms"] / rows[j]["ms"] for i, j in best_peers(rows).items()}


def format_table(rows: list[dict], copy_gbps: float | None = None) -> str:
    """The printed table: op, shape, impl, ms, GB/s, %copy, vs best peer (xkernels rows: our
    time / the fastest peer's; < 1 means xkernels wins), note."""
    ratios = best_peer_ratios(rows)
    cells: list[tuple[str, ...]] = [TABLE_COLUMNS]
    family = None
    for i, r in enumerate(rows):
        if r.get("family") not in (family, "copy"):
            family = r.get("family")
            cells.append((f"[{family}]",))
        note = r.get("note") or ""
        if r.get("host_us") is not None:
            note = f"{r['host_us']:.2f} us/call" + (f"; {note}" if note else "")
        cells.append((
            r["op"], fmt_shape(r["shape"]), r["impl"],
            _fmt(r.get("ms"), ".4f" if (r.get("ms") or 0) < 10 else ".2f"),
            _fmt(r.get("gbps"), ".1f"), _fmt(pct_copy(r, copy_gbps), ".1f"),
            _fmt(ratios.get(i), ".2f"), clip_note(note),
        ))
    return render_cells(cells, right={3, 4, 5, 6})


def pct_copy(row: dict, copy_gbps: float | None) -> float | None:
    """A row's GB/s as a share of the copy's (%), from the row or the copy measured in the run."""
    g, pct = row.get("gbps"), row.get("pct_copy")
    if pct is None and g is not None and copy_gbps:
        pct = 100.0 * g / copy_gbps
    return pct


def clip_note(note: str) -> str:
    """A note as the tables show it: cut at NOTE_WIDTH (the JSONL keeps it whole)."""
    return note if len(note) <= NOTE_WIDTH else note[:NOTE_WIDTH - 3] + "..."


def render_cells(cells: list[tuple[str, ...]], right: set[int], legend: str | None = None) -> str:
    """The families' tables: cells in aligned columns (those in `right` to the right), the last
    cell of a row (the note) as it is, a one-cell row as a heading; `legend` above."""
    n = max(len(c) for c in cells) - 1
    widths = [max(len(c[j]) for c in cells if len(c) > 1) for j in range(n)]
    lines = [] if legend is None else [legend]
    for c in cells:
        if len(c) == 1:
            lines.append(c[0])
            continue
        parts = [c[j].rjust(widths[j]) if j in right else c[j].ljust(widths[j])
                 for j in range(n)]
        lines.append("  ".join(parts + [c[-1]]).rstrip())
    return "\n".join(lines)


def _error(e: BaseException) -> str:
    msg = str(e).strip().splitlines()
    first = next((m for m in msg if m.strip()), "")
    text = f"{type(e).__name__}: {first}" if first else type(e).__name__
    return text if len(text) <= 160 else text[:157] + "..."


def _dist_version(*names: str) -> str | None:
    for n in names:
        try:
            return importlib.metadata.version(n)
        except importlib.metadata.PackageNotFoundError:
            pass
    return None


def versions() -> dict[str, str]:
    """xkernels, torch, triton, tvm_ffi, cuda, flashinfer, liger, flash_attn, transformers (the
    model family's HF layers): those present (no peer import)."""
    out = {"xkernels": __version__}
    try:
        import torch

        out["torch"] = torch.__version__
        if torch.version.cuda:
            out["cuda"] = torch.version.cuda
    except ImportError:
        pass
    for key, dists in (("triton", ("triton", "pytorch-triton")), ("tvm_ffi", ("apache-tvm-ffi",)),
                       ("flashinfer", ("flashinfer-python", "flashinfer")),
                       ("liger", ("liger-kernel", "liger_kernel")),
                       ("flash_attn", ("flash-attn", "flash_attn")),
                       ("transformers", ("transformers",))):
        v = _dist_version(*dists)
        if v is not None:
            out[key] = v
    return out


# --------------------------------------------------------------------------------------------
# Timing.


class GraphTimer:
    """`calls` (one call per rotating input set) captured in one CUDA graph that makes every call
    in turn, at least MIN_GRAPH_CALLS calls in all, cycling through them as often as that takes;
    sampled by CUDA events around replays, as often as asked (`sample`); `result` is the median
    ms per call. Warm-up: every call twice, eagerly, before the capture (JIT compilers run
    outside the graph), then one replay (it uploads the graph). Where the graph cannot be
    captured, or `graph` is False, plain launches are timed instead (events around the same
    loop), and `why` says so. `min_calls` replaces MIN_GRAPH_CALLS (the sweep's long calls)."""

    def __init__(self, calls: list[Callable[[], Any]], graph: bool = True,
                 min_calls: int = MIN_GRAPH_CALLS):
        import torch

        for _ in range(2):
            for c in calls:
                c()
        torch.cuda.synchronize()
        if graph:
            calls = calls * math.ceil(min_calls / len(calls))
        self.calls, self.why, self.g, self.samples = calls, None, None, []
        self.run = self._eager
        if graph:
            try:
                self.g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(self.g):
                    for c in calls:
                        c()
                self.run = self.g.replay
            except Exception as e:  # noqa: BLE001 (any capture failure: time plain launches)
                self.why, self.g = _error(e), None
                with contextlib.suppress(Exception):  # a sticky error fails the eager loop
                    torch.cuda.synchronize()
        else:
            self.why = "graphs off"
        self.run()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        self.run()
        end.record()
        end.synchronize()
        self.est = max(start.elapsed_time(end), 1e-3)  # ms per replay

    def _eager(self):
        for c in self.calls:
            c()

    def sample(self, min_ms: float, min_samples: int = 1, max_samples: int = 20000) -> None:
        """Replays timed until `min_ms` of them and at least `min_samples`."""
        import torch

        n = int(min(max_samples, max(min_samples, math.ceil(min_ms / self.est))))
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        for s, e in zip(starts, ends):
            s.record()
            self.run()
            e.record()
        torch.cuda.synchronize()
        self.samples += [s.elapsed_time(e) for s, e in zip(starts, ends)]

    def result(self) -> tuple[float, str | None]:
        return statistics.median(self.samples) / len(self.calls), self.why

    def close(self) -> None:
        self.g = self.run = None


def time_gpu(calls: list[Callable[[], Any]], min_ms: float = 100.0, min_samples: int = 10,
             graph: bool = True, max_samples: int = 20000) -> tuple[float, str | None]:
    """Median ms per call of `calls` (see GraphTimer), from at least `min_ms` of samples and at
    least `min_samples`. Returns (ms per call, None), or (ms per call, why) when plain launches
    were timed."""
    t = GraphTimer(calls, graph)
    t.sample(min_ms, min_samples, max_samples)
    result = t.result()
    t.close()
    return result


def time_host(calls: list[Callable[[], Any]], min_ms: float = 50.0, min_samples: int = 10,
              max_samples: int = 1000) -> tuple[float, str | None]:
    """Median ms per call on the host clock (time.perf_counter): each sample makes every call once;
    warm-up: every call twice. Same return as time_gpu."""
    for _ in range(2):
        for c in calls:
            c()
    samples: list[float] = []
    while len(samples) < min_samples or (sum(samples) < min_ms and len(samples) < max_samples):
        t0 = time.perf_counter()
        for c in calls:
            c()
        samples.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(samples) / len(calls), None


def host_loop_us(fn: Callable[[], Any], calls: int, sync: Callable[[], Any],
                 repeats: int = 3, warmup: int = 200) -> float:
    """Per-call wall time (us) of a host loop of `calls` calls synchronized at the end; the median
    of `repeats` loops."""
    for _ in range(warmup):
        fn()
    sync()
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        out.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(out)


# --------------------------------------------------------------------------------------------
# Implementations: bind(set) -> call() -> outputs (a tuple, in the op table's output order).


@dataclass
class Impl:
    name: str
    bind: Callable[[dict], Callable[[], tuple]]
    note: str = ""
    fallback: Impl | None = None  # tried when the first (checking) call raises

    @property
    def group(self) -> str:
        return impl_group(self.name)


def _failing(e: BaseException) -> Callable[[dict], Callable[[], tuple]]:
    def bind(s):
        raise RuntimeError(f"import: {_error(e)}")

    return bind


def _torch_composites(op: str, attrs: dict) -> dict[str, Callable]:
    """The torch eager composites of an op: {'': main} and variants ('functional' for fused)."""
    import torch
    import torch.nn.functional as F

    if op == "rmsnorm":
        eps = attrs["eps"]

        def rmsnorm(x, w):
            return F.rms_norm(x, (x.shape[-1],), w, eps)

        return {"": rmsnorm}
    if op == "fused_add_rmsnorm":
        eps = attrs["eps"]

        def fused_add_rmsnorm(x, r, w):  # in place, as the op: r <- x + r; x <- rmsnorm(r)
            r.add_(x)
            x.copy_(F.rms_norm(r, (r.shape[-1],), w, eps))

        def fused_add_rmsnorm_functional(x, r, w):
            s = x + r
            return F.rms_norm(s, (s.shape[-1],), w, eps), s

        return {"": fused_add_rmsnorm, "functional": fused_add_rmsnorm_functional}
    if op in ("gemma_rmsnorm", "gemma_fused_add_rmsnorm"):
        eps = attrs["eps"]

        def gemma_norm(x, w):  # as Hugging Face's Gemma RMSNorm: float32, times (1 + w)
            xf = x.float()
            y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
            return (y * (1.0 + w.float())).to(x.dtype)

        if op == "gemma_rmsnorm":
            def gemma_rmsnorm(x, w):
                return gemma_norm(x, w)

            return {"": gemma_rmsnorm}

        def gemma_fused_add_rmsnorm(x, r, w):  # in place, as the op
            r.add_(x)
            x.copy_(gemma_norm(r, w))

        def gemma_fused_add_rmsnorm_functional(x, r, w):
            s = x + r
            return gemma_norm(s, w), s

        return {"": gemma_fused_add_rmsnorm, "functional": gemma_fused_add_rmsnorm_functional}
    if op == "layernorm":
        eps = attrs["eps"]

        def layernorm(x, w, b):
            return F.layer_norm(x, (x.shape[-1],), w, b, eps)

        return {"": layernorm}
    if op.endswith("_and_mul"):
        act = {"silu_and_mul": F.silu, "gelu_and_mul": F.gelu,
               "gelu_tanh_and_mul": functools.partial(F.gelu, approximate="tanh")}[op]

        def act_and_mul(x):
            d = x.shape[-1] // 2
            return act(x[..., :d]) * x[..., d:]

        return {"": act_and_mul}
    if op == "silu":
        def silu(x):
            return F.silu(x)

        return {"": silu}
    if op == "gelu":
        approximate = attrs["approximate"]

        def gelu(x):
            return F.gelu(x, approximate=approximate)

        return {"": gelu}
    if op == "add_bias_gelu":
        approximate = attrs["approximate"]

        def add_bias_gelu(x, b):
            return F.gelu(x + b, approximate=approximate)

        return {"": add_bias_gelu}
    if op == "mul_add":
        def mul_add(a, b, c):
            return a * b + c

        return {"": mul_add}
    if op == "softmax":
        scale = attrs["scale"]

        def softmax(x):
            return torch.softmax(x * scale if scale != 1.0 else x, -1)

        return {"": softmax}
    return {}


@functools.cache
def _torch_fn(op: str, attrs_key: tuple, variant: str, compiled: bool) -> Callable:
    """One function object per (op, attributes, variant): torch.compile recompiles it per shape
    (dynamic=False) and keeps every compiled shape."""
    fn = _torch_composites(op, dict(attrs_key))[variant]
    if not compiled:
        return fn
    import torch

    return torch.compile(fn, dynamic=False)


def _setup_dynamo() -> None:
    """Let dynamo keep one compiled graph per shape (it recompiles per shape, dynamic=False)."""
    import torch._dynamo

    cfg = torch._dynamo.config
    for k, v in (("cache_size_limit", 256), ("recompile_limit", 256),
                 ("accumulated_cache_size_limit", 4096), ("accumulated_recompile_limit", 4096)):
        # an older or newer torch may lack a name or refuse it: keep its default then
        with contextlib.suppress(Exception):
            if hasattr(cfg, k):
                setattr(cfg, k, max(int(getattr(cfg, k)), v))


def _data(op: str) -> list[str]:
    return [x.name for x in OPS[op].inputs]


def _bind_fn(fn: Callable, names: list[str], mutated: list[str] | None = None):
    """bind for fn(*set[names]): returns fn's result as a tuple, or, when fn works in place, the
    tensors of `mutated`."""
    def bind(s):
        args = [s[n] for n in names]
        if mutated:
            outs = tuple(s[n] for n in mutated)

            def call():
                fn(*args)
                return outs
        else:
            def call():
                r = fn(*args)
                return r if isinstance(r, tuple) else (r,)
        return call

    return bind


def _xkernels_impls(op: str, attrs: dict) -> list[Impl]:
    """xkernels through xkernels.torch, and as "xkernels out=": given its outputs by keyword, one
    set of them for every input set, as a caching allocator hands back to the peers that allocate
    theirs (in-place ops: out of place, compare Liger)."""
    spec = OPS[op]
    dest: dict = {}  # one set of destinations for every input set

    def bind(s):
        import torch

        import xkernels.torch as xt

        fn = getattr(xt, op)
        args = [s[x.name] for x in spec.inputs]
        if not dest:  # at the check's bind, the first: NaN-poisoned, as its `out` is
            dest.update({o.name: torch.full_like(s[spec.aliases.get(o.name, o.name)],
                                                 float("nan")) for o in spec.outputs})
        outs = tuple(dest.values())

        def call():
            fn(*args, **attrs, **dest)
            return outs
        return call

    note = ("out of place, into one set of destinations for every input set, as a caching "
            "allocator hands back (compare liger)" if spec.in_place else
            "one output for every input set, as a caching allocator hands back to the peers "
            "that allocate theirs")
    return [_xkernels_impl(op, attrs), Impl("xkernels out=", bind, note)]


def _xkernels_impl(op: str, attrs: dict) -> Impl:
    spec = OPS[op]

    def bind(s):
        import xkernels.torch as xt

        fn = getattr(xt, op)
        args = [s[x.name] for x in spec.inputs]
        if spec.in_place:
            outs = tuple(s[spec.aliases[o.name]] for o in spec.outputs)

            def call():
                fn(*args, **attrs)
                return outs
        else:
            out = s["out"]

            def call():
                fn(*args, **attrs, out=out)
                return (out,)
        return call

    return Impl("xkernels", bind)


DYNAMIC_ROWS_NOTE = ("rows dynamic (mark_dynamic), columns static: one graph per width, "
                     "compiled at its largest row count; 1 row a graph of its own")


def _mark_rows_dynamic(s: dict, op: str) -> None:
    """torch._dynamo.mark_dynamic on dim 0 of a set's row inputs of 2 or more dims and rows
    (dynamo specializes a size of 1: a 1-row case compiles a graph of its own)."""
    import torch._dynamo

    for x in OPS[op].inputs:
        t = s[x.name]
        if x.role != "column" and t.ndim >= 2 and t.shape[0] > 1:
            torch._dynamo.mark_dynamic(t, 0)


def _torch_impls(op: str, attrs: dict, compiled: bool, dynamic_rows: bool = False) -> list[Impl]:
    """torch eager composites, or torch.compile of them (dynamic=False: one graph per shape; with
    `dynamic_rows` (the sweep) the rows are marked dynamic: one graph per width)."""
    name = "torch.compile" if compiled else "torch"
    key = tuple(sorted(attrs.items()))
    variants = _torch_composites(op, attrs)
    if not variants:
        return []
    names = _data(op)
    spec = OPS[op]
    dynamic_rows = dynamic_rows and compiled
    note = DYNAMIC_ROWS_NOTE if dynamic_rows else ""

    def bind_for(variant: str, mutated: list[str] | None = None):
        def bind(s):  # torch.compile wraps on the first bind: --impls torch never compiles
            if dynamic_rows:
                _mark_rows_dynamic(s, op)
            return _bind_fn(_torch_fn(op, key, variant, compiled), names, mutated)(s)
        return bind

    if spec.in_place:
        functional = Impl(f"{name} (functional)", bind_for("functional"),
                          "; ".join(n for n in ("x+r, rms_norm: new tensors", note) if n))
        return [Impl(name, bind_for("", list(spec.aliases.values())), note, fallback=functional)]
    out = [Impl(name, bind_for(""), note)]
    if op == "mul_add" and not compiled:
        import torch

        def bind(s):
            a, b, c, o = s["a"], s["b"], s["c"], s["out"]

            def call():
                torch.addcmul(c, a, b, out=o)
                return (o,)
            return call

        out.append(Impl("torch.addcmul", bind))
    return out


def _split(x):
    d = x.shape[-1] // 2
    return x[..., :d].contiguous(), x[..., d:].contiguous()


def _flashinfer_impls(op: str, attrs: dict, fi: Any, shape: tuple[int, ...]) -> list[Impl]:
    """FlashInfer 0.5.3: flashinfer.norm.{rmsnorm, fused_add_rmsnorm, gemma_rmsnorm,
    gemma_fused_add_rmsnorm, layernorm},
    flashinfer.activation.{silu,gelu,gelu_tanh}_and_mul, flashinfer.sampling.softmax."""
    if isinstance(fi, BaseException):
        if op in ("rmsnorm", "fused_add_rmsnorm", "gemma_rmsnorm", "gemma_fused_add_rmsnorm",
                  "layernorm", "softmax") or op.endswith("_and_mul"):
            return [Impl("flashinfer", _failing(fi))]
        return []
    eps = attrs.get("eps")
    if op == "rmsnorm":
        def bind2(s):
            x, w, o = s["input"], s["weight"], s["out"]
            return lambda: (fi.norm.rmsnorm(x, w, eps, out=o),)

        if shape[-1] <= 256 and shape[0] % QK_HEADS == 0 and len(shape) == 2 and shape[0] > 1:
            def bind3(s):  # QK-norm: FlashInfer's 3-D [tokens, heads, head_dim] path
                x, w, o = s["input"], s["weight"], s["out"]
                v = (shape[0] // QK_HEADS, QK_HEADS, shape[-1])
                x3, o3 = x.view(v), o.view(v)
                return lambda: (fi.norm.rmsnorm(x3, w, eps, out=o3),)

            note = f"3-D input [{shape[0] // QK_HEADS}, {QK_HEADS}, {shape[-1]}]"
            return [Impl("flashinfer (3-D)", bind3, note,
                         fallback=Impl("flashinfer (2-D)", bind2, "3-D path failed; 2-D"))]
        return [Impl("flashinfer", bind2)]
    if op == "fused_add_rmsnorm":
        def bindf(s):
            x, r, w = s["input"], s["residual"], s["weight"]

            def call():
                fi.norm.fused_add_rmsnorm(x, r, w, eps)
                return (x, r)
            return call

        return [Impl("flashinfer", bindf)]
    if op == "gemma_rmsnorm":
        def bindg(s):
            x, w, o = s["input"], s["weight"], s["out"]
            return lambda: (fi.norm.gemma_rmsnorm(x, w, eps, out=o),)

        return [Impl("flashinfer", bindg)]
    if op == "gemma_fused_add_rmsnorm":
        def bindgf(s):
            x, r, w = s["input"], s["residual"], s["weight"]

            def call():
                fi.norm.gemma_fused_add_rmsnorm(x, r, w, eps)
                return (x, r)
            return call

        return [Impl("flashinfer", bindgf)]
    if op == "layernorm":
        import torch

        def bindl(s):  # FlashInfer's layernorm takes float32 gamma and beta
            x = s["input"]
            w, b = s["weight"].to(torch.float32), s["bias"].to(torch.float32)
            return lambda: (fi.norm.layernorm(x, w, b, eps),)

        return [Impl("flashinfer", bindl, "fp32 weight/bias (its API)")]
    if op.endswith("_and_mul"):
        def binda(s):
            f = getattr(fi.activation, op)
            x, o = s["input"], s["out"]
            return lambda: (f(x, out=o),)

        return [Impl("flashinfer", binda)]
    if op == "softmax":
        temperature = 1.0 / attrs["scale"]

        def binds(s):
            x = s["input"]
            return lambda: (fi.sampling.softmax(x, temperature=temperature),)

        return [Impl("flashinfer", binds, "sampling.softmax: casts to fp32, fp32 out")]
    return []


def _liger_impls(op: str, attrs: dict, lk: Any) -> list[Impl]:
    """Liger 0.8.5 (liger_kernel.ops, the autograd Functions' forward): LigerRMSNormFunction,
    LigerFusedAddRMSNormFunction (both also with offset 1.0 and casting_mode "gemma" for the
    Gemma ops), LigerLayerNormFunction, LigerFusedGateUpSiLUMulFunction,
    LigerSiLUMulFunction(a, b), LigerGELUMulFunction(a, b) (tanh), LigerSoftmaxFunction."""
    if isinstance(lk, BaseException):
        if op in ("rmsnorm", "fused_add_rmsnorm", "gemma_rmsnorm", "gemma_fused_add_rmsnorm",
                  "layernorm", "silu_and_mul", "gelu_tanh_and_mul", "softmax"):
            return [Impl("liger", _failing(lk))]
        return []
    eps = attrs.get("eps")
    if op == "rmsnorm":
        return [Impl("liger", _bind_fn(
            lambda x, w: lk.LigerRMSNormFunction.apply(x, w, eps), ["input", "weight"]))]
    if op == "fused_add_rmsnorm":
        return [Impl("liger", _bind_fn(
            lambda x, r, w: tuple(lk.LigerFusedAddRMSNormFunction.apply(x, r, w, eps)),
            ["input", "residual", "weight"]),
            "returns new (out, residual): allocated inside the graph, they may reuse the same "
            "addresses every call and stay in L2 (xkernels in place writes into the rotating "
            "sets; xkernels out= into one set)")]
    if op == "gemma_rmsnorm":  # Liger's Gemma mode: offset 1 (w + 1), casting_mode "gemma"
        return [Impl("liger", _bind_fn(
            lambda x, w: lk.LigerRMSNormFunction.apply(x, w, eps, 1.0, "gemma"),
            ["input", "weight"]), "offset 1.0, casting_mode gemma")]
    if op == "gemma_fused_add_rmsnorm":
        return [Impl("liger", _bind_fn(
            lambda x, r, w: tuple(lk.LigerFusedAddRMSNormFunction.apply(x, r, w, eps, 1.0,
                                                                        "gemma")),
            ["input", "residual", "weight"]),
            "offset 1.0, casting_mode gemma; returns new (out, residual), as for "
            "fused_add_rmsnorm")]
    if op == "layernorm":
        return [Impl("liger", _bind_fn(
            lambda x, w, b: lk.LigerLayerNormFunction.apply(x, w, b, eps),
            ["input", "weight", "bias"]))]

    def split_bind(fn):
        def bind(s):
            a, b = _split(s["input"])
            return lambda: (fn(a, b),)
        return bind

    if op == "silu_and_mul":
        return [
            Impl("liger", _bind_fn(lambda x: lk.LigerFusedGateUpSiLUMulFunction.apply(x),
                                   ["input"]), "fused gate-up [.., 2d]"),
            Impl("liger (a,b split)", split_bind(lambda a, b: lk.LigerSiLUMulFunction.apply(a, b)),
                 "swiglu on separate a, b"),
        ]
    if op == "gelu_tanh_and_mul":
        return [Impl("liger (a,b split)", split_bind(lambda a, b: lk.LigerGELUMulFunction.apply(a, b)),
                     "geglu (tanh) on separate a, b")]
    if op == "softmax" and attrs.get("scale", 1.0) == 1.0:
        return [Impl("liger", _bind_fn(lambda x: lk.LigerSoftmaxFunction.apply(x), ["input"]))]
    return []


# --------------------------------------------------------------------------------------------
# The run.


def card_id(props) -> str:
    """The GPU's UUID as nvidia-smi prints it (GPU-xxxxxxxx-...), or "" where torch has none."""
    u = str(getattr(props, "uuid", "") or "")
    return u if not u or u.startswith("GPU-") else f"GPU-{u}"


@dataclass
class Context:
    gpu: bool
    dtype_name: str
    quick: bool
    groups: set[str]
    device: str = "cpu"
    card: str = ""  # the GPU's UUID: H100s of one name differ (benchmarks/README.md, Machines)
    cpu: dict[str, Any] = field(default_factory=dict)  # host path: cpu_info() and the threads
    l2_bytes: int = 0
    peers: dict[str, Any] = field(default_factory=dict)  # name -> module, or the import error
    writer: Callable[[dict], None] | None = None
    versions: dict[str, str] = field(default_factory=dict)
    date: str = ""
    copy_gbps: float | None = None
    xkernels_failed: list[str] = field(default_factory=list)
    compile_timeout: float | None = None  # gemm family: s per case for torch.compile (0: skip)
    case_filter: list[str] = field(default_factory=list)  # gemm family: --cases (regexes)
    # bench --sweep (bench_sweep.py): SWEEP_MIN_MS of samples, graphs of SWEEP_REPLAY_MS, fewer
    # sets where every set fits in the L2 anyway, torch.compile with dynamic rows
    sweep: bool = False

    @property
    def torch_dtype(self):
        import torch

        return getattr(torch, DTYPES[self.dtype_name][0])

    @property
    def elem(self) -> int:
        return DTYPES[self.dtype_name][1]

    @property
    def dev(self) -> str:
        return "cuda" if self.gpu else "cpu"

    @property
    def min_ms(self) -> float:  # of samples per impl and case
        if self.sweep:
            return SWEEP_MIN_MS
        return 25.0 if self.quick else 100.0

    def graph_calls(self, nbytes: int) -> int:
        """The calls a graph makes at least (GraphTimer's min_calls)."""
        return sweep_graph_calls(nbytes, self.copy_gbps) if self.sweep else MIN_GRAPH_CALLS

    def set_count(self, set_bytes: int, free_bytes: int | None) -> int:
        """Rotating input sets of a case (n_sets; the sweep's sweep_sets)."""
        if self.sweep:
            return sweep_sets(set_bytes, self.l2_bytes, free_bytes)
        return n_sets(set_bytes, self.l2_bytes, free_bytes)

    def time(self, calls, graph: bool = True):
        if self.gpu:
            return time_gpu(calls, min_ms=self.min_ms, graph=graph)
        return time_host(calls, min_ms=5.0 if self.quick else 50.0)


def load_peer(name: str) -> Any:
    """The peer's module, None when it is not installed (never imported then), or the exception
    its import raised."""
    top, _ = PEERS[name]
    if importlib.util.find_spec(top) is None:
        return None
    try:
        if name in ("flashinfer", "flash_attn"):
            return importlib.import_module(top)
        return importlib.import_module("liger_kernel.ops")
    except Exception as e:  # noqa: BLE001 (a broken peer is reported, the run goes on)
        return e


def impls_for(op: str, attrs: dict, shape: tuple[int, ...], ctx: Context) -> list[Impl]:
    out = _xkernels_impls(op, attrs) if "xkernels" in ctx.groups else []
    if "torch" in ctx.groups:
        out += _torch_impls(op, attrs, compiled=False)
    if "torch.compile" in ctx.groups:
        out += _torch_impls(op, attrs, compiled=True, dynamic_rows=ctx.sweep)
    if "flashinfer" in ctx.groups and ctx.peers.get("flashinfer") is not None:
        out += _flashinfer_impls(op, attrs, ctx.peers["flashinfer"], shape)
    if "liger" in ctx.groups and ctx.peers.get("liger") is not None:
        out += _liger_impls(op, attrs, ctx.peers["liger"])
    if ctx.sweep:
        out = [i for i in out if not sweep_skipped(op, shape, i.group)]
    return out


def sweep_skipped(op: str, shape: tuple[int, ...], group: str) -> bool:
    """Whether the sweep leaves an impl group out of a case (SWEEP_SKIP, SWEEP_NO_ONE_ROW_COMPILE)."""
    if (op, group) in SWEEP_SKIP:
        return True
    return (group == "torch.compile" and op in SWEEP_NO_ONE_ROW_COMPILE and len(shape) > 1
            and shape[0] == 1)


def _make_set(op: str, shape, ctx: Context, columns: dict) -> dict:
    import torch

    spec = OPS[op]
    s = dict(columns)
    for x in spec.inputs:
        if x.role != "column":
            s[x.name] = torch.randn(shape, dtype=ctx.torch_dtype, device=ctx.dev)
    if not spec.in_place:
        (o,) = spec.outputs
        s["out"] = torch.empty(o.shape(tuple(shape)), dtype=ctx.torch_dtype, device=ctx.dev)
    return s


def _rows_of(t, idx):
    import torch

    if t.ndim > 2:
        t = t.reshape(-1, t.shape[-1])
    return t.index_select(0, torch.tensor(idx, device=t.device))


def _reference(op: str, attrs: dict, pristine: dict, idx: list[int], dtype):
    """Float64 reference outputs on the checked rows (a tuple)."""
    import torch

    spec = OPS[op]
    args = [(pristine[x.name] if x.role == "column" else _rows_of(pristine[x.name], idx))
            .detach().double().cpu().numpy() for x in spec.inputs]
    kw = dict(attrs)
    if spec.in_place:
        kw["round_to"] = lambda a: torch.from_numpy(a).to(dtype).double().numpy()
    ref = spec.reference()(*args, **kw)
    return ref if isinstance(ref, tuple) else (ref,)


def rel_error(got, ref) -> float:
    """||got - ref|| / ||ref|| (NumPy arrays) without BLAS: np.linalg.norm calls OpenBLAS, whose
    threads then spin for ~0.1 s and took a core from the host path's timing that follows the
    check (bf16 gelu_and_mul 36x28672 on 2 CPUs: 0.71 ms instead of 0.31)."""
    import numpy as np

    def l2(x):
        return float(np.sqrt(np.sum(np.square(x))))

    return l2(got - ref) / max(l2(ref), 1e-30)


def compare(got: tuple, ref: tuple, idx: list[int], dtype_name: str) -> str | None:
    """None when every checked element is within the tolerance, else what is wrong."""
    import numpy as np

    rtol, atol = TOL[dtype_name]
    if len(got) != len(ref):
        return f"{len(got)} outputs, expected {len(ref)}"
    for k, (g, r) in enumerate(zip(got, ref)):
        g = _rows_of(g, idx).detach().double().cpu().numpy()
        if g.shape != r.shape:
            return f"output {k}: shape {g.shape}, expected {r.shape}"
        finite = np.isfinite(r)
        if not np.isfinite(g[finite]).all():
            return f"output {k}: non-finite or unwritten elements"
        err = np.abs(g - r)
        bad = err > atol + rtol * np.abs(r)
        if bad.any():
            return f"output {k}: {int(bad.sum())}/{bad.size} off, max err {err.max():.3g}"
        g, r = g[finite], r[finite]
        rel = rel_error(g, r)
        if rel > REL_TOL[dtype_name]:
            return f"output {k}: relative error {rel:.3g} > {REL_TOL[dtype_name]:g}"
    return None


def _check_set(op: str, pristine: dict) -> dict:
    """Fresh copies of the first set's original inputs, and a NaN-poisoned `out`."""
    import torch

    spec = OPS[op]
    s = {}
    for k, v in pristine.items():
        if k == "out":
            s[k] = torch.full_like(v, float("nan"))
        else:
            s[k] = v if spec.input(k).role == "column" else v.clone()
    return s


def _row(ctx: Context, family: str, op: str, shape, impl: str, ms, nbytes, note="", **kw) -> dict:
    g = gbps(nbytes, ms) if nbytes is not None else None
    row = {"family": family, "op": op, "shape": list(shape), "dtype": ctx.dtype_name,
           "impl": impl, **({"form": f} if (f := impl_form(op, impl)) else {}), "ms": ms, "gbps": g,
           "pct_copy": (100.0 * g / ctx.copy_gbps) if g is not None and ctx.copy_gbps else None,
           "device": ctx.device, **({"card": ctx.card} if ctx.card else {}),
           **({"cpu": ctx.cpu} if ctx.cpu else {}), "date": ctx.date,
           "versions": ctx.versions, "note": note}
    row.update(kw)
    return row


@dataclass
class _Timed:
    """An impl that passed its first call: its row's parts, and its timer (GPU) or its time
    (host), filled in by run_case."""
    name: str
    notes: list[str]
    check: str
    first_s: float
    calls: int
    timer: GraphTimer | None = None
    ms: float | None = None
    why: str | None = None
    error: str | None = None


def run_check(check: Callable[..., str | None], *args: Any) -> str | None:
    """check(*args), an impl's check of its first call: what failed, or None; a check that raises
    fails."""
    try:
        return check(*args)
    except Exception as e:  # noqa: BLE001
        return f"check raised {_error(e)}"


class CompileTimeout(BaseException):
    """Raised into a compile that outlasted --compile-timeout. Not an Exception, so that
    Inductor's handlers (which note a failed autotuning choice and go on) do not swallow it."""


@contextlib.contextmanager
def time_limit(seconds: float | None):
    """Raise CompileTimeout in the main thread after `seconds` (SIGALRM); no limit when seconds is
    None or <= 0, off the main thread, or without SIGALRM."""
    if (not seconds or seconds <= 0 or not hasattr(signal, "setitimer")
            or threading.current_thread() is not threading.main_thread()):
        yield
        return

    def expired(signum, frame):
        raise CompileTimeout(f"compile took more than {seconds:g} s (--compile-timeout)")

    old = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@dataclass
class FirstCall:
    """What first_call returns: the impl that ran (where every call raised, the last one tried,
    and `failed` the note of its row), its first call's seconds, its notes, and what its check
    found wrong (`bad`)."""
    impl: Impl
    first_s: float = 0.0
    notes: list[str] = field(default_factory=list)
    bad: str | None = None
    failed: str | None = None


def first_call(impl: Impl, call: Callable[[Impl], Any], check: Callable[[Any], str | None],
               limit: Callable[[Impl], float | None] | None = None) -> FirstCall:
    """An impl's first call, call(impl) on a check set, the impls of its fallback chain tried in
    turn while it raises (each held to limit(impl) s, time_limit, where given); then
    check(output) (run_check). first_s counts the calls (the first call compiles: torch.compile,
    Triton, JIT), not the check; notes: the impl's note, then "(impl: error)" per call that
    raised. Where every call raised, `failed`: "failed: <the last error>", then "(impl: error)"
    per earlier call."""
    tried: list[tuple[str, str]] = []  # (impl, error) of the calls that raised
    t0 = time.perf_counter()
    while True:
        try:
            with time_limit(limit(impl) if limit else None):
                got = call(impl)
            break
        except (Exception, CompileTimeout) as e:  # noqa: BLE001
            tried.append((impl.name, _error(e)))
            if impl.fallback is None:
                note = [f"failed: {tried[-1][1]}", *(f"({n}: {m})" for n, m in tried[:-1])]
                return FirstCall(impl, failed="; ".join(note))
            impl = impl.fallback
    first_s = time.perf_counter() - t0
    notes = ([impl.note] if impl.note else []) + [f"({n}: {m})" for n, m in tried]
    return FirstCall(impl, first_s, notes, run_check(check, got))


def timed_impl(first: FirstCall, sets: list, ctx: Context,
               **timer_kw: Any) -> tuple[_Timed, str | None]:
    """What every family does after an impl's first call and check (first_call): its calls, one
    per set, captured in a GraphTimer (GPU, `timer_kw` its options) or timed (host). Returns
    (the _Timed to sample, None), or (the _Timed, the note of the row that failed)."""
    notes = first.notes
    if first.bad:
        notes.insert(0, f"CHECK FAILED: {first.bad}")
    t = _Timed(first.impl.name, notes, "failed" if first.bad else "ok", first.first_s, len(sets))
    try:
        calls = [first.impl.bind(s) for s in sets]
        if ctx.gpu:
            t.timer = GraphTimer(calls, **timer_kw)
        else:
            t.ms, t.why = ctx.time(calls)
    except Exception as e:  # noqa: BLE001
        return t, "; ".join([f"failed: {_error(e)}", *notes])
    return t, None


def prepare_impl(impl: Impl, op: str, attrs: dict, shape, sets: list[dict], pristine: dict,
                 ref: tuple, idx: list[int], ctx: Context, family: str,
                 nbytes: int) -> dict | _Timed:
    """First call and check (first_call); then the graph captured (GPU) or the calls timed
    (host). A row where the impl failed, else the _Timed to sample."""
    first = first_call(impl, lambda i: i.bind(_check_set(op, pristine))(),
                       lambda got: compare(got, ref, idx, ctx.dtype_name))
    name = first.impl.name
    if first.failed:
        return _row(ctx, family, op, shape, name, None, nbytes, first.failed)
    t, failed = timed_impl(first, sets, ctx, min_calls=ctx.graph_calls(nbytes))
    if failed:
        return _row(ctx, family, op, shape, name, None, nbytes, failed, check=t.check)
    return t


def _timed_row(t: _Timed, op: str, shape, ctx: Context, family: str, nbytes: int) -> dict:
    if t.timer is not None:
        if t.error is None:
            t.ms, t.why = t.timer.result()
        t.timer.close()
    if t.error is not None:
        return _row(ctx, family, op, shape, t.name, None, nbytes,
                    "; ".join([f"failed: {t.error}", *t.notes]), check=t.check)
    if t.why is not None:
        t.notes.append(f"(no graph: {t.why})" if t.why != "graphs off" else "(no graph)")
    return _row(ctx, family, op, shape, t.name, t.ms, nbytes, "; ".join(n for n in t.notes if n),
                check=t.check, calls=t.calls, first_call_s=round(t.first_s, 3))


def sample_rounds(results: list, ctx: Context) -> None:
    """The samples of a case's impls (the _Timed of `results` with a timer), each min_ms in all,
    in the interleaved rounds of balanced_orders; an impl that fails gets its error."""
    timed = [t for t in results if isinstance(t, _Timed) and t.timer is not None]
    orders = balanced_orders(len(timed)) if timed else []
    for order in orders:
        for t in (timed[i] for i in order):
            if t.error is None:
                try:
                    t.timer.sample(ctx.min_ms / len(orders), min_samples=2)
                except Exception as e:  # noqa: BLE001
                    t.error = _error(e)


def run_case(op: str, shape, ctx: Context, family: str, emit: Callable[[dict], None]) -> None:
    """Every impl of one case: first calls and checks, graphs captured, then (GPU) the samples of
    all the impls in the interleaved rounds of balanced_orders; rows emitted in impl order."""
    import torch

    attrs = ATTRS.get(op, {})
    impls = impls_for(op, attrs, shape, ctx)
    if not impls:
        return
    spec = OPS[op]
    nbytes = bytes_moved(op, shape, ctx.elem)
    columns = {x.name: torch.randn(shape[-1], dtype=ctx.torch_dtype, device=ctx.dev)
               for x in spec.inputs if x.role == "column"}
    count = (ctx.set_count(input_bytes(op, shape, ctx.elem), torch.cuda.mem_get_info(ctx.dev)[0])
             if ctx.gpu else 1)
    sets = [_make_set(op, shape, ctx, columns) for _ in range(count)]
    # the first set's inputs before any impl mutates them in place (for every check)
    pristine = {k: (v.clone() if k not in columns and k != "out" else v)
                for k, v in sets[0].items()}
    idx = check_index(shape[0], CHECK_ROWS if len(shape) > 1 else CHECK_ELEMS)
    ref = _reference(op, attrs, pristine, idx, ctx.torch_dtype)
    results = []
    for impl in impls:
        results.append(prepare_impl(impl, op, attrs, shape, sets, pristine, ref, idx, ctx,
                                    family, nbytes))
        if ctx.gpu:
            with contextlib.suppress(Exception):  # a sticky CUDA error shows in the next rows
                torch.cuda.synchronize()
    sample_rounds(results, ctx)
    for r in results:
        row = _timed_row(r, op, shape, ctx, family, nbytes) if isinstance(r, _Timed) else r
        if impl_group(row["impl"]) == "xkernels" and (row["ms"] is None or row.get("check") != "ok"):
            ctx.xkernels_failed.append(f"{op} {fmt_shape(shape)}: {row['note']}")
        emit(row)
    del results, sets, pristine
    if ctx.gpu:
        with contextlib.suppress(Exception):
            torch.cuda.synchronize()
            torch.cuda.empty_cache()


def measure_copy(ctx: Context) -> dict:
    """The card's copy bandwidth: a 1 GiB device-to-device copy timed as the ops (host path:
    64 MiB, 16 with --quick), read + write bytes."""
    import torch

    nbytes = (1 << 30) if ctx.gpu else (16 << 20 if ctx.quick else 64 << 20)
    n = nbytes // ctx.elem
    src = torch.randn(n, dtype=ctx.torch_dtype, device=ctx.dev)
    dst = torch.empty_like(src)
    try:
        # Plain launches: captured in a graph, a copy becomes a memcpy node that the copy engines
        # run (2430 GB/s on the H100, against 3003 for the copy kernel of an eager copy_).
        ms, _ = ctx.time([lambda: dst.copy_(src)], graph=False)
    except Exception as e:  # noqa: BLE001
        return _row(ctx, "copy", "copy", (n,), "torch copy_", None, None, f"failed: {_error(e)}")
    ctx.copy_gbps = gbps(2 * nbytes, ms)
    note = f"{nbytes >> 20} MiB, read + write, plain launches"
    return _row(ctx, "copy", "copy", (n,), "torch copy_", ms, 2 * nbytes, note)


def run_overhead(ctx: Context, emit: Callable[[dict], None]) -> None:
    """Per-call wall time of 1x4096 rmsnorm from PyTorch: a host loop synchronized at the end."""
    import torch
    import torch.nn.functional as F

    x = torch.randn(OVERHEAD_SHAPE, dtype=ctx.torch_dtype, device=ctx.dev)
    w = torch.randn(OVERHEAD_SHAPE[-1], dtype=ctx.torch_dtype, device=ctx.dev)
    out = torch.empty_like(x)
    eps = 1e-6
    calls = 1000 if ctx.quick else 5000
    sync = torch.cuda.synchronize if ctx.gpu else (lambda: None)
    fns: list[tuple[str, Callable[[], Any], str]] = []
    if "xkernels" in ctx.groups:
        import xkernels.torch as xt

        fns.append(("xkernels", lambda: xt.rmsnorm(x, w, eps), "xkernels.torch.rmsnorm"))
        fns.append(("xkernels (dispatcher)", lambda: torch.ops.xkernels.rmsnorm(out, x, w, eps),
                    "torch.ops.xkernels.rmsnorm, out= preallocated"))
    if "torch" in ctx.groups:
        fns.append(("torch", lambda: F.rms_norm(x, (x.shape[-1],), w, eps), "F.rms_norm"))
    fi = ctx.peers.get("flashinfer")
    if "flashinfer" in ctx.groups and fi is not None:
        if isinstance(fi, BaseException):
            emit(_row(ctx, "overhead", "rmsnorm", OVERHEAD_SHAPE, "flashinfer", None, None,
                      f"failed: import: {_error(fi)}"))
        else:
            fns.append(("flashinfer", lambda: fi.rmsnorm(x, w, eps), "flashinfer.rmsnorm"))
    # Rounds that visit every impl in turn, the median per impl: the host's state drifts between
    # runs by more than the impls differ (seen on the H100 machine: F.rms_norm 10.5 to 15.5 us
    # in three runs), so the impls are compared within the same stretch of time.
    # Each impl is also compared with FlashInfer round by round (the median of its per-round
    # ratios, `vs_flashinfer`): steadier than the ratio of medians where the host drifts within
    # the run.
    samples: dict[str, list[float]] = {name: [] for name, _, _ in fns}
    failed: dict[str, str] = {}
    for _ in range(3 if ctx.quick else OVERHEAD_ROUNDS):
        for name, fn, _ in fns:
            if name in failed:
                continue
            try:
                samples[name].append(host_loop_us(fn, calls, sync))
            except Exception as e:  # noqa: BLE001
                failed[name] = f"failed: {_error(e)}"
    paired = {}
    if "flashinfer" in samples and "flashinfer" not in failed:
        paired = {name: statistics.median(a / b for a, b in zip(v, samples["flashinfer"]))
                  for name, v in samples.items() if name not in failed}
    for name, _, what in fns:
        if name in failed:
            row = _row(ctx, "overhead", "rmsnorm", OVERHEAD_SHAPE, name, None, None, failed[name])
            if name.startswith("xkernels"):
                ctx.xkernels_failed.append(f"overhead {name}: {row['note']}")
        else:
            us = statistics.median(samples[name])
            vs = (f"; median per-round ratio to flashinfer {paired[name]:.3f}"
                  if name in paired and name != "flashinfer" else "")
            row = _row(ctx, "overhead", "rmsnorm", OVERHEAD_SHAPE, name, us / 1e3, None,
                       f"{what}; host loop x{calls}, synced at the end; median of "
                       f"{len(samples[name])} rounds interleaved with the other impls{vs}",
                       host_us=us, **({"vs_flashinfer": paired[name]} if name in paired else {}))
        row["gbps"] = row["pct_copy"] = None
        emit(row)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="xkernels bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--family", choices=[*FAMILIES, *EXTRA_FAMILIES, "adapters", "all"], default="all",
                   help="all: every family but adapters (the torch families); adapters: one "
                        "kernel through every framework (kernel time and host cost per call)")
    p.add_argument("--quick", action="store_true",
                   help="each op's two smallest shapes and its largest; shorter timing")
    p.add_argument("--out", metavar="DIR",
                   help="write DIR/<family>-<gpu>.jsonl (truncated at the start of the run)")
    p.add_argument("--impls", default=",".join(IMPL_GROUPS),
                   help=f"comma-separated subset of {','.join(IMPL_GROUPS)} (default: all; "
                        "host path: xkernels,torch unless torch.compile is named)")
    p.add_argument("--framework", choices=["torch", "jax", "cupy", "numpy", "all"],
                   help="the framework the ops are called from: the peer families run from torch; "
                        "any other choice (or --family adapters, default all) runs the adapters "
                        "family for it")
    p.add_argument("--dtype", choices=list(DTYPES), default="bf16")
    sw = p.add_argument_group("sweep", "xkernels bench --sweep: the memory-bound ops over the "
                              "shapes of current open models (bench_sweep.py; --family norm, "
                              "activation, softmax or all)")
    sw.add_argument("--sweep", action="store_true",
                    help="run the sweep: DIR/sweep-<gpu>.jsonl, a summary per op printed last")
    sw.add_argument("--ops", metavar="OP,...", help="the sweep's ops (default: the family's)")
    sw.add_argument("--rows", metavar="N,...", help="the sweep's row counts (default: "
                    "1,16,128,1024,4096,16384,65536; --quick 1,128,4096)")
    sw.add_argument("--time-limit", type=float, metavar="S",
                    help="sweep: start no case after S seconds (the rows so far are kept)")
    sw.add_argument("--estimate", action="store_true",
                    help="sweep: print the cases and the estimated device time, run nothing")
    p.add_argument("--compile-timeout", type=float, default=None, metavar="S",
                   help="gemm family: abandon a torch.compile (max-autotune) that takes more than "
                        "S seconds in a case, its row says so (default 120); 0 skips "
                        "torch.compile there")
    p.add_argument("--cases", metavar="REGEX,...",
                   help="gemm family: only the cases whose name one of these regular expressions "
                        "finds (re.search; e.g. '^float16,x8192x8192 rowwise'; names as in the "
                        "results' `case`: 'float16' alone also finds 'bfloat16')")
    return p


def _record(row: dict) -> dict:
    """The JSONL object of a row: None-valued optional keys left out (ms and gbps kept)."""
    return {k: v for k, v in row.items() if v is not None or k in ("ms", "gbps")}


def _progress(row: dict) -> None:
    ms = "-" if row["ms"] is None else f"{row['ms']:.4f} ms"
    g = "" if row.get("gbps") is None else f" {row['gbps']:.1f} GB/s"
    if row.get("tflops") is not None:
        g += f" {row['tflops']:.1f} TFLOP/s"
    note = f"  {row['note']}" if row.get("note") else ""
    if (row.get("first_call_s") or 0) > 2:
        note += f"  (first call {row['first_call_s']:.1f} s)"
    what = row.get("case") or f"{row['op']} {fmt_shape(row['shape'])}"
    print(f"  {what} {row['impl']}: {ms}{g}{note}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(sys.argv[1:] if argv is None else list(argv))
    if args.family == "adapters" or args.framework not in (None, "torch"):
        if args.family not in ("adapters", "all"):
            print(f"xkernels bench: --family {args.family} compares peers from PyTorch; "
                  f"--framework {args.framework} runs --family adapters", file=sys.stderr)
            return 2
        from . import bench_adapters

        return bench_adapters.main(args)
    groups = [g.strip() for g in args.impls.split(",") if g.strip()]
    unknown = [g for g in groups if g not in IMPL_GROUPS]
    if unknown or not groups:
        print(f"xkernels bench: unknown --impls {unknown or args.impls!r}; choose from "
              f"{','.join(IMPL_GROUPS)}", file=sys.stderr)
        return 2
    try:
        import torch
    except ImportError:
        print("xkernels bench: --framework torch needs PyTorch (pip install torch)",
              file=sys.stderr)
        return 2

    gpu = torch.cuda.is_available()
    families = list(FAMILIES) if args.family == "all" else [args.family]
    sweep_cases = None
    if args.sweep or args.ops or args.rows or args.time_limit is not None or args.estimate:
        from . import bench_sweep

        if not args.sweep:
            print("xkernels bench: --ops, --rows, --time-limit and --estimate go with --sweep",
                  file=sys.stderr)
            return 2
        if args.family not in (*bench_sweep.FAMILIES, "all"):
            print(f"xkernels bench: --sweep covers --family {', '.join(bench_sweep.FAMILIES)} "
                  f"or all, not {args.family}", file=sys.stderr)
            return 2
        try:
            ops = None if args.ops is None else [o.strip() for o in args.ops.split(",")
                                                 if o.strip()]
            sweep_rows = bench_sweep.parse_ints(args.rows)
            kw = {"ops": ops, "rows": sweep_rows, "quick": args.quick,
                  "elem": DTYPES[args.dtype][1]}
            sweep_cases = bench_sweep.cases(
                args.family, **kw,
                host_cap=None if gpu else (HOST_CAP_QUICK if args.quick else HOST_CAP))
            gpu_cases = sweep_cases if gpu else bench_sweep.cases(args.family, **kw)
        except ValueError as e:
            print(f"xkernels bench: {e}", file=sys.stderr)
            return 2
        if not sweep_cases:
            print("xkernels bench: the sweep selects no case", file=sys.stderr)
            return 2
        est = bench_sweep.estimate(gpu_cases, groups)
        print(bench_sweep.format_estimate(est, len(gpu_cases))
              + ("" if gpu else f"; this host path runs {len(sweep_cases)} cut-down cases"),
              flush=True)
        if args.estimate:
            for c in gpu_cases:
                print(f"  {c.op} {fmt_shape(c.shape)}  ({', '.join(c.models)})")
            return 0
        families = ["sweep"]
    explicit = args.impls != ",".join(IMPL_GROUPS)
    ctx = Context(gpu=gpu, dtype_name=args.dtype, quick=args.quick, groups=set(groups),
                  versions=versions(), date=datetime.date.today().isoformat(),
                  compile_timeout=args.compile_timeout,
                  case_filter=[c.strip() for c in (args.cases or "").split(",") if c.strip()])
    if gpu:
        props = torch.cuda.get_device_properties(0)
        ctx.device = torch.cuda.get_device_name(0)
        ctx.card = card_id(props)
        ctx.l2_bytes = int(getattr(props, "L2_cache_size", 50 << 20) or (50 << 20))
        short = gpu_short_name(ctx.device)
        print(f"xkernels bench: {ctx.device} {ctx.card} (sm_{props.major}{props.minor}, "
              f"{props.multi_processor_count} SMs, L2 {ctx.l2_bytes / 2**20:.0f} MiB), "
              f"torch {torch.__version__}, {args.dtype}{', quick' if args.quick else ''}",
              flush=True)
    else:
        ctx.cpu = cpu_info()
        ctx.cpu["torch_threads"] = torch.get_num_threads()
        ctx.cpu["xkernels_threads"] = int(os.environ.get("XKERNELS_HOST_THREADS") or 0) or \
            ctx.cpu["cpus"]
        ctx.device, short = ctx.cpu["model"], f"cpu-{cpu_short_name(ctx.cpu['model'])}"
        if not explicit:
            ctx.groups = {"xkernels", "torch"}
        dropped = sorted(ctx.groups & set(PEERS))
        ctx.groups -= set(PEERS)
        print("xkernels bench: no GPU (torch.cuda.is_available() is False): running the HOST path "
              "on CPU tensors at small shapes, timed with time.perf_counter medians; "
              "these are not GPU numbers"
              + (f" (skipped, CUDA only: {', '.join(dropped)})" if dropped else ""), flush=True)
        c = ctx.cpu
        print(f"host: {c['model']}" + (f" (family {c['family']} model {c['model_id']})"
                                        if "family" in c else "")
              + f", {c['cpus']} CPUs, {c.get('isa', '?')}; threads: xkernels "
              f"{c['xkernels_threads']}, torch {c['torch_threads']}", flush=True)

    torch.manual_seed(0)
    ctx.sweep = sweep_cases is not None

    def peer_needed(name):
        if ctx.sweep:  # a family it has impls in, and an op not left out of the sweep for it
            return any(c.family in PEER_FAMILIES[name] and (c.op, name) not in SWEEP_SKIP
                       for c in sweep_cases)
        return bool(PEER_FAMILIES[name] & set(families))

    peers = [name for name in PEERS if name in ctx.groups and peer_needed(name)]
    if gpu:
        for name in peers:
            ctx.peers[name] = load_peer(name)
    if "torch.compile" in ctx.groups:
        _setup_dynamo()
    peer_text = []
    for name in peers:
        p = ctx.peers.get(name)
        peer_text.append(f"{name} " + ("not installed" if p is None else
                                       f"IMPORT FAILED ({_error(p)})" if isinstance(p, BaseException)
                                       else ctx.versions.get(name, "?")))
    vers = ", ".join(f"{k} {v}" for k, v in ctx.versions.items())
    print(f"versions: {vers}" + (f"; peers: {', '.join(peer_text)}" if peer_text else ""),
          flush=True)

    out_dir = Path(args.out) if args.out else None
    paths = {}
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        for fam in families:
            paths[fam] = out_dir / f"{fam}-{short}.jsonl"
            paths[fam].write_text("")

    rows: list[dict] = []

    def emit_to(fam):
        def emit(row):
            rows.append(row)
            _progress(row)
            if fam in paths:
                with paths[fam].open("a") as f:
                    f.write(json.dumps(_record(row)) + "\n")
                    f.flush()
        return emit

    # Build (or load) the modules first: the JIT runs here, outside every measurement.
    if "xkernels" in ctx.groups:
        from . import jit

        needed = sorted({OPS[op].module for fam in families if fam in CASES
                         for op, _ in CASES[fam]} | ({"norm"} if "overhead" in families else set())
                        | {OPS[c.op].module for c in sweep_cases or ()}
                        | ({OPS["attention"].module, OPS["decode_paged"].module}
                           if "attention" in families else set())
                        | ({OPS[o].module for o in GEMM_FAMILY_OPS if o in OPS}
                           if "gemm" in families else set())
                        | ({OPS[o].module for o in MODEL_FAMILY_OPS if o in OPS}
                           if "model" in families else set())
                        | ({OPS["apply_rope"].module} if "rope" in families else set()))
        t0 = time.perf_counter()
        print(f"building/loading xkernels modules {', '.join(needed)} ...", file=sys.stderr,
              flush=True)
        for m in needed:
            try:
                jit.load(m)
            except Exception as e:  # noqa: BLE001 (its rows will fail and the run exits 1)
                print(f"xkernels module {m}: {_error(e)}", file=sys.stderr, flush=True)
        print(f"  ready in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)

    # SIGTERM (`timeout`) stops the run as Ctrl-C does: the table of what was measured is printed
    interrupted = None
    old_term = None
    if threading.current_thread() is threading.main_thread():
        old_term = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        with torch.no_grad():
            _run(ctx, families, args.quick, emit_to, paths, rows, sweep_cases, args.time_limit)
    except KeyboardInterrupt:
        interrupted = "interrupted: the table holds the rows measured so far"
    finally:
        if old_term is not None:
            signal.signal(signal.SIGTERM, old_term)

    if interrupted:
        print(f"\n{interrupted}", flush=True)
    if ctx.xkernels_failed:
        print(f"\nxkernels FAILED {len(ctx.xkernels_failed)} case(s):", flush=True)
        for f in ctx.xkernels_failed:
            print(f"  {f}", flush=True)
    if ctx.sweep:
        from . import bench_sweep

        summary = bench_sweep.format_summary(bench_sweep.summarize(rows))
        print(("\nhost path (CPU), not GPU numbers\n" if not gpu else "\n")
              + f"sweep summary (xkernels time / the best peer's; details: "
              f"benchmarks/plot_sweep.py {paths.get('sweep', 'DIR/sweep-<gpu>.jsonl')})\n"
              + summary, flush=True)
        return 130 if interrupted else 1 if ctx.xkernels_failed else 0
    table = format_table([r for r in rows
                          if r.get("family") not in ("attention", "gemm", "rope", "model")],
                         ctx.copy_gbps)
    if any(r.get("family") == "attention" for r in rows):
        from . import bench_attention

        table += "\n\n" + bench_attention.format_table(rows, ctx.copy_gbps)
    if any(r.get("family") == "gemm" for r in rows):
        from . import bench_gemm

        table += "\n\n" + bench_gemm.format_table(rows, ctx.copy_gbps)
    if any(r.get("family") == "rope" for r in rows):
        from . import bench_rope

        table += "\n\n" + bench_rope.format_table(rows, ctx.copy_gbps)
    if any(r.get("family") == "model" for r in rows):
        from . import bench_model

        table += "\n\n" + bench_model.format_table(rows)
    print(("\nhost path (CPU), not GPU numbers\n" if not gpu else "\n") + table, flush=True)
    return 130 if interrupted else 1 if ctx.xkernels_failed else 0


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt


def _run(ctx: Context, families: list[str], quick: bool, emit_to, paths: dict,
         rows: list[dict], sweep_cases: list | None = None,
         time_limit: float | None = None) -> None:
    if any(f != "overhead" for f in families):
        try:
            copy_row = measure_copy(ctx)
        except Exception as e:  # noqa: BLE001 (no ceiling: %copy stays empty)
            copy_row = _row(ctx, "copy", "copy", (0,), "torch copy_", None, None,
                            f"failed: {_error(e)}")
        rows.append(copy_row)
        _progress(copy_row)
        for fam in families:
            if fam in paths and fam != "overhead":
                with paths[fam].open("a") as f:
                    f.write(json.dumps(_record(dict(copy_row, family=fam))) + "\n")
    if sweep_cases is not None:
        from . import bench_sweep

        print("[sweep]", file=sys.stderr, flush=True)
        bench_sweep.run(ctx, sweep_cases, emit_to("sweep"), time_limit)
        return
    host_cap = None if ctx.gpu else (HOST_CAP_QUICK if quick else HOST_CAP)
    for fam in families:
        emit = emit_to(fam)
        print(f"[{fam}]", file=sys.stderr, flush=True)
        if fam == "overhead":
            run_overhead(ctx, emit)
            continue
        if fam == "attention":
            from . import bench_attention

            bench_attention.run_family(ctx, quick, emit)
            continue
        if fam == "gemm":
            from . import bench_gemm

            if ctx.compile_timeout is None:
                ctx.compile_timeout = bench_gemm.COMPILE_TIMEOUT_S
            bench_gemm.run_family(ctx, quick, emit)
            continue
        if fam == "rope":
            from . import bench_rope

            bench_rope.run_family(ctx, quick, emit)
            continue
        if fam == "model":
            from . import bench_model

            bench_model.run_family(ctx, quick, emit)
            continue
        for op, shape in select_cases(fam, quick, host_cap):
            try:
                run_case(op, shape, ctx, fam, emit)
            except Exception as e:  # noqa: BLE001 (inputs or reference: report, go on)
                emit(_row(ctx, fam, op, shape, "xkernels", None, None,
                          f"failed: case setup: {_error(e)}"))
                ctx.xkernels_failed.append(f"{op} {fmt_shape(shape)}: {_error(e)}")


if __name__ == "__main__":
    raise SystemExit(main())
