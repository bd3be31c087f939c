"""`xkernels bench --sweep`: the memory-bound ops over the shapes of current open models.

The regular families time each op at a few shapes; the sweep times it at the widths real models
use (hidden sizes for the norms, MLP widths for the activations, vocabulary sizes for softmax;
MODELS names the model each comes from) times row counts from 1 to 65536 (ROWS), each input
tensor at most MAX_INPUT_BYTES. Each case goes through bench.run_case, the regular families'
code (checks, CUDA graphs over rotating input sets, the impls sampled in balanced rounds), with
the sweep's settings (bench.Context.sweep):

- SWEEP_MIN_MS (15 ms) of samples per impl and case instead of 100;
- graphs of at least SWEEP_REPLAY_MS per replay (at most 40 calls) instead of 40 calls, so a
  1 GiB case does not replay 28 ms graphs;
- 1-row cases (where even 1000 sets fit in the L2) rotate 40 sets instead of 1000;
- torch.compile: the rows marked dynamic, the columns static: one graph per op and width, its
  first call at the width's largest row count (the cases of a width run from the most rows down),
  and one more graph for 1 row (dynamo specializes a size of 1). Per shape (the regular families'
  dynamic=False) would be about 400 compiles, 7 minutes on their own. A dynamic width would change
  the kernel Inductor writes (a looped reduction tuned for the first width) and weaken the peer.
- left out: FlashInfer's softmax (bench.SWEEP_SKIP: 75 s of JIT build, 2-5x slower than every
  other impl) and torch.compile at 1 row of the norms (bench.SWEEP_NO_ONE_ROW_COMPILE: a graph of
  its own per width, for a peer FlashInfer and Liger beat there).

Rows: DIR/sweep-<gpu>.jsonl, the regular JSONL rows plus `sweep` (true), `rows`, `cols` and
`models` (the models whose shape it is). `summarize` gives per op the worst and the median ratio
of xkernels to the best peer; benchmarks/plot_sweep.py draws them.
"""

from __future__ import annotations

import math
import statistics
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from . import bench

OPS_BY_FAMILY = bench.MEMORY_BOUND  # the memory-bound families' ops
FAMILIES = tuple(OPS_BY_FAMILY)
ROWS = (1, 16, 128, 1024, 8192, 65536)
QUICK_ROWS = (1, 128, 8192)
MAX_INPUT_BYTES = 1 << 30  # per input tensor (the gated ops' [rows, 2d] input)
HIDDEN_RANGE = (2048, 16384)  # the norms' widths: hidden sizes in this range


@dataclass(frozen=True)
class Model:
    """A model's shapes, from its Hugging Face config.json: hidden_size, intermediate_size (the
    MLP width; MoE: moe_intermediate_size, marked "expert"), hidden_act, its norm, vocab_size."""
    name: str
    hidden: int
    mlp: int
    act: str  # "silu" (SwiGLU), "gelu_tanh" (GeGLU), or "gelu" / "gelu_tanh" un-gated ("+ bias")
    norm: str  # "rms", "gemma" (x (1 + w)) or "layer"
    vocab: int
    gated: bool = True
    mlp_bias: bool = False


MODELS = (
    Model("Llama 3.1 8B", 4096, 14336, "silu", "rms", 128256),
    Model("Llama 3.1 70B", 8192, 28672, "silu", "rms", 128256),
    Model("Llama 3.1 405B", 16384, 53248, "silu", "rms", 128256),
    Model("Llama 3.2 1B", 2048, 8192, "silu", "rms", 128256),
    Model("Llama 3.2 3B", 3072, 8192, "silu", "rms", 128256),
    Model("Llama 2 7B", 4096, 11008, "silu", "rms", 32000),
    Model("Qwen2.5 3B", 2048, 11008, "silu", "rms", 151936),
    Model("Qwen2.5 7B", 3584, 18944, "silu", "rms", 152064),
    Model("Qwen2.5 72B", 8192, 29568, "silu", "rms", 152064),
    Model("Qwen3 8B", 4096, 12288, "silu", "rms", 151936),
    Model("Qwen3 32B", 5120, 25600, "silu", "rms", 151936),
    Model("Qwen3 235B-A22B expert", 4096, 1536, "silu", "rms", 151936),
    Model("Mistral 7B v0.3", 4096, 14336, "silu", "rms", 32768),
    Model("Mistral Nemo 12B", 5120, 14336, "silu", "rms", 131072),
    Model("Mistral Large 2", 12288, 28672, "silu", "rms", 32768),
    Model("DeepSeek-V3", 7168, 18432, "silu", "rms", 129280),
    Model("DeepSeek-V3 expert", 7168, 2048, "silu", "rms", 129280),
    Model("Gemma 2 2B", 2304, 9216, "gelu_tanh", "gemma", 256000),
    Model("Gemma 2 9B", 3584, 14336, "gelu_tanh", "gemma", 256000),
    Model("Gemma 2 27B", 4608, 36864, "gelu_tanh", "gemma", 256000),
    Model("Gemma 3 4B", 2560, 10240, "gelu_tanh", "gemma", 262208),
    Model("Gemma 3 12B", 3840, 15360, "gelu_tanh", "gemma", 262208),
    Model("Gemma 3 27B", 5376, 21504, "gelu_tanh", "gemma", 262208),
    # LayerNorm and un-gated GELU MLPs (with biases: add_bias_gelu)
    Model("GPT-2", 768, 3072, "gelu_tanh", "layer", 50257, gated=False, mlp_bias=True),
    Model("Phi-2", 2560, 10240, "gelu_tanh", "layer", 51200, gated=False, mlp_bias=True),
    Model("StarCoder2 15B", 6144, 24576, "gelu_tanh", "layer", 49152, gated=False,
          mlp_bias=True),
    Model("Falcon 7B", 4544, 18176, "gelu", "layer", 65024, gated=False),
    Model("Falcon 40B", 8192, 32768, "gelu", "layer", 65024, gated=False),
)

# The rule that gives each op its widths: (what, models).
_WIDTHS: dict[str, tuple[str, Callable[[Model], int | None]]] = {}


def _hidden(norms):
    def f(m):
        return m.hidden if m.norm in norms and HIDDEN_RANGE[0] <= m.hidden <= HIDDEN_RANGE[1] \
            else None
    return f


_WIDTHS.update({
    # RMSNorm's kernel at every hidden size of the RMSNorm and Gemma models
    "rmsnorm": ("hidden", _hidden({"rms", "gemma"})),
    "fused_add_rmsnorm": ("hidden", _hidden({"rms", "gemma"})),
    "gemma_rmsnorm": ("hidden", _hidden({"gemma"})),
    "gemma_fused_add_rmsnorm": ("hidden", _hidden({"gemma"})),
    "layernorm": ("hidden", _hidden({"layer"})),
    "silu_and_mul": ("mlp", lambda m: m.mlp if m.gated and m.act == "silu" else None),
    "gelu_tanh_and_mul": ("mlp", lambda m: m.mlp if m.gated and m.act == "gelu_tanh" else None),
    # the exact-erf GeGLU (Gemma 1's "gelu") at the Gemma widths
    "gelu_and_mul": ("mlp", lambda m: m.mlp if m.gated and m.act == "gelu_tanh" else None),
    # un-gated MLPs' activation (silu: the gate half of a SwiGLU computed apart, at the three
    # largest dense Llama / Qwen widths)
    "silu": ("mlp", lambda m: m.mlp if m.name in ("Llama 3.1 8B", "Qwen2.5 7B", "Qwen2.5 72B")
             else None),
    "gelu": ("mlp", lambda m: m.mlp if not m.gated else None),
    "add_bias_gelu": ("mlp", lambda m: m.mlp if m.mlp_bias else None),
    # a * b + c over residual-stream-sized rows
    "mul_add": ("hidden", lambda m: m.hidden if m.name in ("Gemma 2 2B", "Llama 3.1 8B",
                                                           "DeepSeek-V3") else None),
    # the vocabularies of the gated models, and GPT-2's odd 50257
    "softmax": ("vocab", lambda m: m.vocab if m.gated or m.name == "GPT-2" else None),
})


def widths(op: str) -> dict[int, list[str]]:
    """{width (the op's last dim, for the gated ops d of [rows, 2d]): [models]}, ascending."""
    _, rule = _WIDTHS[op]
    out: dict[int, list[str]] = {}
    for m in MODELS:
        w = rule(m)
        if w is not None:
            out.setdefault(w, []).append(m.name)
    return dict(sorted(out.items()))


@dataclass(frozen=True)
class Case:
    op: str
    shape: tuple[int, ...]  # the input shape (gated ops: [rows, 2d])
    models: tuple[str, ...]

    @property
    def family(self) -> str:
        return family_of(self.op)

    @property
    def rows(self) -> int:
        return self.shape[0]

    @property
    def cols(self) -> int:  # the width (gated ops: d)
        return self.shape[-1] // 2 if self.op.endswith("_and_mul") else self.shape[-1]


def family_of(op: str) -> str:
    return next(f for f, ops in OPS_BY_FAMILY.items() if op in ops)


def sweep_ops(family: str = "all", ops: Iterable[str] | None = None) -> list[str]:
    """The ops of --family (norm, activation, softmax, all), restricted to --ops."""
    fams = FAMILIES if family == "all" else (family,)
    out = [op for f in fams for op in OPS_BY_FAMILY[f]]
    if ops is not None:
        wanted = list(ops)
        unknown = [o for o in wanted if o not in {o for f in FAMILIES for o in OPS_BY_FAMILY[f]}]
        if unknown:
            raise ValueError(f"unknown sweep op(s) {', '.join(unknown)}")
        out = [o for o in out if o in wanted]
    return out


def cases(family: str = "all", ops: Iterable[str] | None = None, rows: Iterable[int] | None = None,
          quick: bool = False, elem: int = 2, host_cap: int | None = None) -> list[Case]:
    """The sweep's cases: per op (in OPS_BY_FAMILY's order), per width ascending, the row counts
    descending (torch.compile's dynamic-rows graph is compiled at the largest), each input at most
    MAX_INPUT_BYTES. --quick: each op's smallest and largest width, QUICK_ROWS. The host path cuts
    the rows to `host_cap` elements per input (duplicates dropped)."""
    row_list = sorted(set(rows if rows is not None else (QUICK_ROWS if quick else ROWS)),
                      reverse=True)
    out: list[Case] = []
    for op in sweep_ops(family, ops):
        ws = widths(op)
        keys = list(ws)
        if quick:
            keys = sorted({keys[0], keys[-1]})
        gated = op.endswith("_and_mul")
        for w in keys:
            cols = 2 * w if gated else w
            seen = set()
            for r in row_list:
                if r * cols * elem > MAX_INPUT_BYTES:
                    continue
                shape = (r, cols)
                if host_cap is not None:
                    shape = bench.host_shape(shape, host_cap)
                if shape not in seen:
                    seen.add(shape)
                    out.append(Case(op, shape, tuple(ws[w])))
    return out


# --------------------------------------------------------------------------------------------
# The device-time estimate (printed before the run; tests/test_sweep.py holds it to the budget).

# Host time per call of an impl in the warm-up (every set twice) and the capture: xkernels and
# FlashInfer about 5-10 us, torch eager 5-30 (the Gemma composite six kernels), torch.compile and
# Liger 15-25 (guesses: no GPU measured them).
EST_HOST_CALL_S = 15e-6
EST_CASE_S = 0.04  # a case's inputs (per set), reference and emptying the cache
EST_SET_S = 30e-6  # per input set: its randn tensors and output
EST_IMPL_S = 0.015  # per impl: first call, check (32 rows to float64 on the host), graph upload
EST_COMPILE_S = 1.1  # per torch.compile graph (the H100 results: first_call_s 0.6-1.3 s)
EST_TRITON_S = 0.5  # per Liger kernel compiled (its BLOCK_SIZE: the width's next power of 2)
# FlashInfer JIT builds on a fresh machine (its cache empty; the H100 results' first_call_s)
EST_FLASHINFER_JIT_S = {"norm": 18.0, "silu_and_mul": 7.0, "gelu_and_mul": 8.0,
                        "gelu_tanh_and_mul": 7.0}
EST_START_S = 25.0  # torch import, CUDA context, modules loaded, the copy row
L2_BYTES = 50 << 20  # the H100's


def _fake_ctx(groups: Iterable[str], peers: dict | None = None) -> bench.Context:
    return bench.Context(gpu=True, dtype_name="bf16", quick=False, groups=set(groups),
                         peers=peers if peers is not None else
                         {p: object() for p in ("flashinfer", "liger")}, sweep=True)


def estimate(case_list: list[Case], groups: Iterable[str] = bench.IMPL_GROUPS,
             peers: dict | None = None, elem: int = 2, l2_bytes: int = L2_BYTES,
             copy_gbps: float = bench.SWEEP_COPY_GBPS, cold_jit: bool = True) -> dict:
    """Seconds the sweep of `case_list` takes on a GPU like the H100 (a model: see the EST_
    constants), as {"total", "cases", "compile", "jit", "start", "per_op": {op: s}}. `peers`:
    the peers present (default: FlashInfer and Liger both)."""
    groups = set(groups)
    ctx = _fake_ctx(groups, peers)
    per_op: dict[str, float] = {}
    graphs: set[tuple] = set()
    triton: set[tuple] = set()
    for c in case_list:
        impls = bench.impls_for(c.op, bench.ATTRS.get(c.op, {}), c.shape, ctx)
        nbytes = bench.bytes_moved(c.op, c.shape, elem)
        sets = bench.sweep_sets(bench.input_bytes(c.op, c.shape, elem), l2_bytes)
        calls = max(sets, bench.sweep_graph_calls(nbytes, copy_gbps))
        call_ms = nbytes / (copy_gbps * 1e6) + 0.002
        rounds = len(bench.balanced_orders(len(impls)))
        sample_s = max(bench.SWEEP_MIN_MS, rounds * 2 * calls * call_ms) / 1e3
        s = EST_CASE_S + sets * EST_SET_S
        s += len(impls) * (EST_IMPL_S + (2 * sets + calls) * EST_HOST_CALL_S + sample_s
                           + 2 * calls * call_ms / 1e3)
        per_op[c.op] = per_op.get(c.op, 0.0) + s
        for i in impls:
            if i.group == "torch.compile":
                graphs.add((c.op, c.cols, c.rows == 1))
            if i.group == "liger":
                triton.add((c.op, i.name, 1 << max(0, c.shape[-1] - 1).bit_length()))
    compile_s = len(graphs) * EST_COMPILE_S + len(triton) * EST_TRITON_S
    jit = 0.0
    if cold_jit and "flashinfer" in groups and ctx.peers.get("flashinfer") is not None:
        ops = {c.op for c in case_list}
        jit = sum(v for k, v in EST_FLASHINFER_JIT_S.items()
                  if (k == "norm" and ops & set(OPS_BY_FAMILY["norm"])) or k in ops)
    cases_s = sum(per_op.values())
    return {"total": EST_START_S + cases_s + compile_s + jit, "cases": cases_s,
            "compile": compile_s, "graphs": len(graphs), "jit": jit, "start": EST_START_S,
            "per_op": per_op}


def format_estimate(est: dict, n_cases: int) -> str:
    per = ", ".join(f"{op} {s:.0f}" for op, s in est["per_op"].items())
    return (f"sweep: {n_cases} cases, estimated {est['total']:.0f} s on an H100 "
            f"({est['cases']:.0f} s of cases, {est['compile']:.0f} s of torch.compile/Triton "
            f"compiles ({est['graphs']} torch.compile graphs), {est['jit']:.0f} s FlashInfer JIT "
            f"if its cache is cold, {est['start']:.0f} s start); per op (s): {per}")


# --------------------------------------------------------------------------------------------
# The run.


def run(ctx: bench.Context, case_list: list[Case], emit: Callable[[dict], None],
        time_limit: float | None = None) -> list[Case]:
    """Every case through bench.run_case (ctx.sweep set), rows tagged; with `time_limit` (s), no
    case starts after that many seconds. Returns the cases skipped for the time limit."""
    t0 = time.perf_counter()
    done_s = 0.0
    for k, c in enumerate(case_list):
        elapsed = time.perf_counter() - t0
        if time_limit is not None and elapsed > time_limit:
            rest = case_list[k:]
            print(f"sweep: time limit {time_limit:.0f} s reached after {elapsed:.0f} s: "
                  f"{len(rest)} case(s) not run, from {rest[0].op} {bench.fmt_shape(rest[0].shape)}",
                  file=sys.stderr, flush=True)
            return rest
        if k and (k % 25 == 0 or c.op != case_list[k - 1].op):
            left = done_s / k * (len(case_list) - k)
            print(f"sweep: case {k + 1}/{len(case_list)} ({c.op}), {elapsed:.0f} s elapsed, "
                  f"about {left:.0f} s left at this rate", file=sys.stderr, flush=True)

        def tagged(row, c=c):
            row.update(sweep=True, rows=c.rows, cols=c.cols, models=list(c.models))
            emit(row)

        t1 = time.perf_counter()
        try:
            bench.run_case(c.op, c.shape, ctx, c.family, tagged)
        except Exception as e:  # noqa: BLE001 (inputs or reference: report, go on)
            tagged(bench._row(ctx, c.family, c.op, c.shape, "xkernels", None, None,
                              f"failed: case setup: {bench._error(e)}"))
            ctx.xkernels_failed.append(f"{c.op} {bench.fmt_shape(c.shape)}: {bench._error(e)}")
        done_s += time.perf_counter() - t1
    return []


# --------------------------------------------------------------------------------------------
# The summary (benchmarks/plot_sweep.py prints and writes it too).

GOAL_RATIO = 1.02  # xkernels' time / the best peer's, at most, at every shape
SOFTMAX_MIN_COLS = 32000  # softmax rows of at least this many elements ...
SOFTMAX_GOAL_GBPS = 2800.0  # ... at least this many GB/s
SOFTMAX_BULK_ROWS = 1024  # also reported over the cases of at least this many rows


def ratio_points(rows: list[dict]) -> list[dict]:
    """Per xkernels row with a best peer (bench.best_peers: same op, shape and form): op, impl,
    form, shape, rows, cols, ms, ratio (ours / the peer's), peer, gbps."""
    out = []
    for i, j in bench.best_peers(rows).items():
        r, p = rows[i], rows[j]
        shape = tuple(r["shape"])
        cols = r.get("cols") or (shape[-1] // 2 if r["op"].endswith("_and_mul") else shape[-1])
        out.append({"op": r["op"], "impl": r["impl"], "form": r.get("form", ""), "shape": shape,
                    "rows": r.get("rows") or (shape[0] if len(shape) > 1 else 1), "cols": cols,
                    "ms": r["ms"], "ratio": r["ms"] / p["ms"], "peer": p["impl"],
                    "gbps": r.get("gbps"), "models": r.get("models", [])})
    return out


def summarize(rows: list[dict], goal: float = GOAL_RATIO) -> dict[str, dict]:
    """Per op: cases (shapes with a ratio), worst (the largest ratio over every xkernels form and
    shape) and where (shape, impl, peer, models), median ratio, over (points above `goal`), failed
    (xkernels rows that failed or failed their check); softmax also min_gbps over the xkernels rows
    of >= SOFTMAX_MIN_COLS columns (and where), and min_gbps_bulk over those of
    >= SOFTMAX_BULK_ROWS rows."""
    rows = [r for r in rows if r.get("op") != "copy"]
    pts = ratio_points(rows)
    out: dict[str, dict] = {}
    ops = list(dict.fromkeys(r["op"] for r in rows))
    for op in ops:
        mine = [p for p in pts if p["op"] == op]
        failed = [r for r in rows if r["op"] == op and bench.impl_group(r["impl"]) == "xkernels"
                  and (r.get("ms") is None or r.get("check") != "ok")]
        s: dict = {"cases": len({p["shape"] for p in mine}), "points": len(mine),
                   "failed": len(failed)}
        if mine:
            w = max(mine, key=lambda p: p["ratio"])
            s.update(worst=w["ratio"], worst_shape=list(w["shape"]), worst_impl=w["impl"],
                     worst_peer=w["peer"], worst_models=w["models"],
                     median=statistics.median(p["ratio"] for p in mine),
                     over=sum(p["ratio"] > goal for p in mine))
        if op == "softmax":
            ours = [r for r in rows if r["op"] == op and r["impl"] == "xkernels"
                    and r.get("gbps") is not None and r.get("check") == "ok"
                    and r["shape"][-1] >= SOFTMAX_MIN_COLS]
            if ours:
                lo = min(ours, key=lambda r: r["gbps"])
                s.update(min_gbps=lo["gbps"], min_gbps_shape=list(lo["shape"]))
            bulk = [r for r in ours if r["shape"][0] >= SOFTMAX_BULK_ROWS]
            if bulk:
                lo = min(bulk, key=lambda r: r["gbps"])
                s.update(min_gbps_bulk=lo["gbps"], min_gbps_bulk_shape=list(lo["shape"]))
        out[op] = s
    return out


def _shape(s) -> str:
    return bench.fmt_shape(s) if s else "-"


def format_summary(summary: dict[str, dict], goal: float = GOAL_RATIO,
                   markdown: bool = False) -> str:
    """One line per op: the worst ratio over the sweep, where, the median, the points over the
    goal; softmax's lowest GB/s. Markdown: a table."""
    head = ("op", "cases", f"worst ratio (goal <= {goal:g})", "at", "best peer there", "median",
            f"> {goal:g}", "failed")
    cells = []
    notes = []
    for op, s in summary.items():
        if "worst" in s:
            at = _shape(s["worst_shape"]) + (" (out=)" if s["worst_impl"] == "xkernels out="
                                             else "")
            cells.append((op, str(s["cases"]), f"{s['worst']:.3f}" + (" ok" if s["worst"] <= goal
                                                                     else ""),
                          at, s["worst_peer"], f"{s['median']:.3f}", f"{s['over']}/{s['points']}",
                          str(s["failed"])))
        else:
            cells.append((op, str(s["cases"]), "-", "-", "-", "-", "-", str(s["failed"])))
        if "min_gbps" in s:
            line = (f"{op}: lowest GB/s over rows of >= {SOFTMAX_MIN_COLS} elements "
                    f"{s['min_gbps']:.0f} at {_shape(s['min_gbps_shape'])}")
            if "min_gbps_bulk" in s:
                line += (f"; over those of >= {SOFTMAX_BULK_ROWS} rows {s['min_gbps_bulk']:.0f} at "
                         f"{_shape(s['min_gbps_bulk_shape'])}")
            notes.append(line + f" (goal >= {SOFTMAX_GOAL_GBPS:.0f})")
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(c) + " |" for c in cells]
        return "\n".join(lines + [""] + [f"- {n}" for n in notes])
    widths_ = [max(len(str(c[j])) for c in [head, *cells]) for j in range(len(head))]
    lines = ["  ".join(str(c[j]).ljust(widths_[j]) for j in range(len(head))).rstrip()
             for c in [head, *cells]]
    return "\n".join(lines + notes)


def parse_ints(text: str | None) -> list[int] | None:
    if text is None:
        return None
    out = [int(t) for t in text.replace(" ", "").split(",") if t]
    if not out or any(v < 1 for v in out):
        raise ValueError(f"expected positive integers, got {text!r}")
    return out


def check_budget(est: dict, limit_s: float) -> bool:
    return math.isfinite(est["total"]) and est["total"] <= limit_s
