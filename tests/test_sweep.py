"""`xkernels bench --sweep` (bench_sweep.py) and benchmarks/plot_sweep.py: the grid, the device-time
estimate, the sweep's settings, the summary's arithmetic, and a tiny sweep end to end on the host
path (seconds)."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest
import torch
from xkernels import bench, bench_sweep
from xkernels.ops import OPS

HAS_CUDA = torch.cuda.is_available()
host_only = pytest.mark.skipif(HAS_CUDA, reason="with a GPU the bench runs the GPU path")
ROOT = Path(__file__).resolve().parents[1]



def _host_file() -> str:
    """The sweep's results file on this machine's host path (bench names it for the CPU)."""
    return f"sweep-cpu-{bench.cpu_short_name(bench.cpu_info()['model'])}.jsonl"

def _plot_module():
    spec = importlib.util.spec_from_file_location("plot_sweep", ROOT / "benchmarks/plot_sweep.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# ------------------------------------------------------------------------------ the grid


def test_grid_covers_the_models():
    ops = bench_sweep.sweep_ops()
    assert set(ops) == {"rmsnorm", "gemma_rmsnorm", "fused_add_rmsnorm", "gemma_fused_add_rmsnorm",
                        "layernorm", "silu_and_mul", "gelu_and_mul", "gelu_tanh_and_mul", "silu",
                        "gelu", "add_bias_gelu", "mul_add", "softmax"}
    for op in ops:
        assert op in OPS and bench_sweep.widths(op), op
        for w, models in bench_sweep.widths(op).items():
            assert w > 0 and models and all(isinstance(m, str) for m in models)
    hidden = bench_sweep.widths("rmsnorm")
    assert min(hidden) == 2048 and max(hidden) == 16384
    # Llama 3 8B/70B/405B, Qwen, Gemma 2/3, DeepSeek-V3, Mistral Large 2
    assert {4096, 8192, 16384, 3584, 5120, 2304, 3840, 4608, 5376, 7168, 12288} <= set(hidden)
    assert "DeepSeek-V3" in hidden[7168] and "Llama 3.1 405B" in hidden[16384]
    assert set(bench_sweep.widths("gemma_rmsnorm")) <= set(hidden)
    mlp = bench_sweep.widths("silu_and_mul")
    assert {14336, 28672, 53248, 18432, 18944, 29568, 2048} <= set(mlp)
    assert {9216, 14336, 21504, 36864} <= set(bench_sweep.widths("gelu_tanh_and_mul"))
    vocab = bench_sweep.widths("softmax")
    assert {32000, 128256, 151936, 256000, 129280, 152064, 262208} <= set(vocab)
    assert any(v % 2 for v in vocab)  # an odd one (GPT-2's 50257)
    assert all(v >= 32000 for v in vocab)


def test_cases_rows_cap_and_order():
    cases = bench_sweep.cases()
    assert len(cases) == len({(c.op, c.shape) for c in cases})
    assert {c.rows for c in cases} == set(bench_sweep.ROWS)
    assert min(bench_sweep.ROWS) == 1 and max(bench_sweep.ROWS) == 65536
    for c in cases:
        assert c.shape[0] * c.shape[-1] * 2 <= bench_sweep.MAX_INPUT_BYTES
        assert c.family in bench_sweep.FAMILIES and c.models
        assert bench.bytes_moved(c.op, c.shape, 2) > 0
        if c.op.endswith("_and_mul"):
            assert c.shape[-1] == 2 * c.cols
    # every width has its 1-row case and its largest row count that fits
    by = {}
    for c in cases:
        by.setdefault((c.op, c.cols), []).append(c.rows)
    for (op, cols), rows in by.items():
        assert rows == sorted(rows, reverse=True), (op, cols)  # most rows first (torch.compile)
        assert rows[-1] == 1
        fits = [r for r in bench_sweep.ROWS
                if r * cols * (2 if op.endswith("_and_mul") else 1) * 2 <= 1 << 30]
        assert rows[0] == max(fits)
    assert (65536, 8192) in {c.shape for c in cases if c.op == "rmsnorm"}
    assert (65536, 16384) not in {c.shape for c in cases if c.op == "rmsnorm"}  # 2 GiB


def test_case_filters():
    assert {c.op for c in bench_sweep.cases("softmax")} == {"softmax"}
    sel = bench_sweep.cases(ops=["rmsnorm", "softmax"], rows=[4, 1], quick=True)
    assert {c.op for c in sel} == {"rmsnorm", "softmax"}
    assert {c.rows for c in sel} == {1, 4}
    assert {c.cols for c in sel if c.op == "rmsnorm"} == {2048, 16384}  # quick: ends
    assert bench_sweep.cases("norm", ops=["softmax"]) == []
    with pytest.raises(ValueError, match="unknown sweep op"):
        bench_sweep.cases(ops=["gemm"])
    host = bench_sweep.cases(ops=["softmax"], host_cap=1 << 16)
    assert all(c.shape[0] * c.shape[1] <= max(1 << 16, c.shape[1]) for c in host)
    assert {c.shape for c in host if c.cols == 32000} == {(2, 32000), (1, 32000)}  # deduplicated
    assert bench_sweep.parse_ints("1, 16,128") == [1, 16, 128]
    for bad in ("", "0", "x"):
        with pytest.raises(ValueError):
            bench_sweep.parse_ints(bad)


# ------------------------------------------------------------------------------ settings, budget


def test_sweep_sets_and_graph_calls():
    l2 = 50 << 20
    assert bench.sweep_sets(8192, l2) == bench.MIN_GRAPH_CALLS  # 1x4096: 1000 sets fit in L2
    assert bench.sweep_sets(16 * 4096 * 2, l2) == bench.n_sets(16 * 4096 * 2, l2)
    assert bench.sweep_sets(1 << 30, l2, free_bytes=80 << 30) == 3
    # a 1 GiB-input rmsnorm call (0.7 ms): a graph of 3 calls (>= 2 ms); small calls: 40
    assert bench.sweep_graph_calls(2 << 30, 3000.0) == 3
    assert bench.sweep_graph_calls(16 << 10, 3000.0) == bench.MIN_GRAPH_CALLS
    assert bench.sweep_graph_calls(512 << 20, None) == math.ceil(
        bench.SWEEP_REPLAY_MS / ((512 << 20) / 3e9 + 0.002)) == 12
    ctx = bench.Context(gpu=True, dtype_name="bf16", quick=False, groups={"xkernels"},
                        sweep=True, l2_bytes=l2, copy_gbps=3000.0)
    assert ctx.min_ms == bench.SWEEP_MIN_MS and ctx.graph_calls(2 << 30) == 3
    assert ctx.set_count(8192, None) == bench.MIN_GRAPH_CALLS
    ctx.sweep = False
    assert ctx.min_ms == 100.0 and ctx.graph_calls(2 << 30) == bench.MIN_GRAPH_CALLS
    assert ctx.set_count(8192, None) == bench.MAX_SETS


def test_sweep_impls_left_out():
    ctx = bench_sweep._fake_ctx(bench.IMPL_GROUPS)
    names = {i.name for i in bench.impls_for("softmax", {"scale": 1.0}, (4, 32000), ctx)}
    assert names == {"xkernels", "xkernels out=", "torch", "torch.compile", "liger"}  # no FlashInfer
    one = {i.group for i in bench.impls_for("rmsnorm", {"eps": 1e-6}, (1, 4096), ctx)}
    assert "torch.compile" not in one and {"flashinfer", "liger"} <= one
    two = bench.impls_for("rmsnorm", {"eps": 1e-6}, (2, 4096), ctx)
    compiled = next(i for i in two if i.group == "torch.compile")
    assert compiled.note == bench.DYNAMIC_ROWS_NOTE
    act = {i.group for i in bench.impls_for("silu_and_mul", {}, (1, 28672), ctx)}
    assert "torch.compile" in act  # the fastest peer at 1 row: kept
    ctx.sweep = False
    assert "flashinfer" in {i.group for i in bench.impls_for("softmax", {"scale": 1.0},
                                                             (4, 32000), ctx)}
    static = bench.impls_for("rmsnorm", {"eps": 1e-6}, (2, 4096), ctx)
    assert next(i for i in static if i.group == "torch.compile").note == ""


def test_budget_estimate():
    """The whole default sweep fits the device budget (about 6 minutes on an H100, the FlashInfer
    JIT builds of a fresh machine included)."""
    cases = bench_sweep.cases()
    est = bench_sweep.estimate(cases)
    assert est["total"] <= 390, bench_sweep.format_estimate(est, len(cases))
    assert est["total"] == pytest.approx(est["start"] + est["cases"] + est["compile"] + est["jit"])
    assert set(est["per_op"]) == set(bench_sweep.sweep_ops())
    # torch.compile graphs: one per op and width (rows > 1), one more at 1 row, but not the norms'
    expect = 0
    for op in bench_sweep.sweep_ops():
        n = len(bench_sweep.widths(op))
        expect += n if op in bench.SWEEP_NO_ONE_ROW_COMPILE else 2 * n
    assert est["graphs"] == expect
    no_compile = bench_sweep.estimate(cases, groups=("xkernels", "torch", "flashinfer", "liger"))
    assert no_compile["graphs"] == 0 and no_compile["total"] < est["total"]
    warm = bench_sweep.estimate(cases, cold_jit=False)
    assert warm["jit"] == 0 and warm["total"] < est["total"]
    # each case costs at least its samples: impls x SWEEP_MIN_MS
    one = bench_sweep.cases(ops=["rmsnorm"], rows=[65536])
    e1 = bench_sweep.estimate(one, peers={})
    assert e1["cases"] >= len(one) * 3 * bench.SWEEP_MIN_MS / 1e3
    text = bench_sweep.format_estimate(est, len(cases))
    assert f"{len(cases)} cases" in text and "torch.compile graphs" in text


# ------------------------------------------------------------------------------ the summary


def _row(op, shape, impl, ms, gbps=None, check="ok", **kw):
    r = {"family": bench_sweep.family_of(op), "op": op, "shape": list(shape), "impl": impl,
         "ms": ms, "gbps": gbps, "check": check, "sweep": True, "rows": shape[0],
         "cols": shape[-1] // 2 if op.endswith("_and_mul") else shape[-1],
         "models": ["M"], "device": "NVIDIA H100 80GB HBM3", "date": "2026-01-01"}
    if form := bench.impl_form(op, impl):
        r["form"] = form
    r.update(kw)
    return r


def _synthetic():
    rows = [{"family": "sweep", "op": "copy", "shape": [1], "impl": "torch copy_", "ms": 1.0,
             "gbps": 3000.0}]
    # rmsnorm: ratios 0.98 (an output per set, vs FlashInfer's; torch's new tensors are of the
    # other form, and no xkernels row of that form ran), 1.05 (one output reused, vs torch.compile,
    # the best peer of that form), 1.00
    for shape, impl, ours, peers in (
            ((1, 4096), "xkernels", 0.98, {"torch": 0.5, "flashinfer": 1.0}),
            ((8192, 4096), "xkernels out=", 1.05, {"torch.compile": 1.0, "liger": 1.01,
                                                    "flashinfer": 0.9}),
            ((8192, 2048), "xkernels out=", 0.50, {"torch.compile": 0.5, "liger": 0.6})):
        rows.append(_row("rmsnorm", shape, impl, ours))
        rows += [_row("rmsnorm", shape, p, ms) for p, ms in peers.items()]
    rows.append(_row("rmsnorm", (16, 4096), "liger", 0.2, check="failed"))  # not a peer
    rows.append(_row("rmsnorm", (16, 4096), "torch", 0.4))
    rows.append(_row("rmsnorm", (16, 4096), "xkernels out=", 0.404))
    # fused: in place vs FlashInfer, out= vs Liger
    rows += [_row("fused_add_rmsnorm", (128, 4096), "xkernels", 1.10),
             _row("fused_add_rmsnorm", (128, 4096), "xkernels out=", 0.90),
             _row("fused_add_rmsnorm", (128, 4096), "flashinfer", 1.0),
             _row("fused_add_rmsnorm", (128, 4096), "liger", 1.0)]
    # softmax: GB/s
    for shape, gb in (((1, 32000), 50.0), ((1024, 128256), 2500.0), ((4096, 32000), 2900.0),
                      ((4096, 8000), 1000.0)):
        rows.append(_row("softmax", shape, "xkernels", 1.0, gb))
        rows.append(_row("softmax", shape, "xkernels out=", 1.0, 2 * gb))  # not in min_gbps
        rows.append(_row("softmax", shape, "torch", 2.0))
    rows.append(_row("silu", (1, 14336), "xkernels", None, check=None, note="failed: boom"))
    return rows


def test_summary_math():
    s = bench_sweep.summarize(_synthetic())
    assert list(s) == ["rmsnorm", "fused_add_rmsnorm", "softmax", "silu"]
    r = s["rmsnorm"]
    assert r["cases"] == 4 and r["points"] == 4
    assert r["worst"] == pytest.approx(1.05) and r["worst_shape"] == [8192, 4096]
    assert r["worst_peer"] == "torch.compile" and r["worst_impl"] == "xkernels out="
    # ratios 0.98, 1.05, 1.0, 1.01 (16x4096 against torch: the failed Liger is no peer)
    assert r["median"] == pytest.approx((1.0 + 1.01) / 2)
    assert r["over"] == 1 and r["failed"] == 0
    f = s["fused_add_rmsnorm"]
    assert f["points"] == 2 and f["worst"] == pytest.approx(1.10) and f["worst_peer"] == "flashinfer"
    sm = s["softmax"]
    assert sm["min_gbps"] == 50.0 and sm["min_gbps_shape"] == [1, 32000]
    assert sm["min_gbps_bulk"] == 2500.0 and sm["min_gbps_bulk_shape"] == [1024, 128256]
    assert s["silu"] == {"cases": 0, "points": 0, "failed": 1}
    text = bench_sweep.format_summary(s)
    line = next(x for x in text.splitlines() if x.startswith("rmsnorm "))
    assert "1.050" in line and "8192x4096" in line and "torch.compile" in line and "1/4" in line
    assert "softmax  " in text and "0.500 ok" in text  # every softmax ratio 0.5
    assert "lowest GB/s" in text and "2500 at 1024x128256" in text
    md = bench_sweep.format_summary(s, markdown=True)
    assert md.startswith("| op |") and "| rmsnorm | 4 | 1.050 |" in md
    assert "| fused_add_rmsnorm | 1 | 1.100 | 128x4096 |" in md


def test_plot_synthetic(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    path = tmp_path / "sweep-h100.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _synthetic()))
    plot = _plot_module()
    assert plot.main([str(path), "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "rmsnorm" in out and "1.050" in out
    for op in ("rmsnorm", "fused_add_rmsnorm", "softmax"):
        png = tmp_path / "out" / f"{op}.png"
        assert png.read_bytes()[:4] == b"\x89PNG"
    md = (tmp_path / "out" / "summary.md").read_text()
    assert "NVIDIA H100" in md and "| softmax |" in md
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert plot.main([str(empty), "--out", str(tmp_path / "o2")]) == 1


# ------------------------------------------------------------------------------ end to end


def test_torch_compile_graphs_per_width(monkeypatch):
    """Dynamic rows, static widths: a second row count of a width reuses the width's graph, a new
    width or 1 row compiles again (a counting backend instead of Inductor)."""
    graphs = []

    def backend(gm, example_inputs):
        graphs.append([tuple(getattr(x, "shape", ())) for x in example_inputs])
        return gm.forward

    real = torch.compile
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: real(fn, backend=backend, **kw))
    torch._dynamo.reset()
    bench._torch_fn.cache_clear()
    try:
        ctx = bench.Context(gpu=False, dtype_name="bf16", quick=True, groups={"torch.compile"},
                            sweep=True, copy_gbps=1.0)
        rows = []
        for op, shape in (("silu_and_mul", (8, 128)), ("silu_and_mul", (4, 128)),
                          ("silu_and_mul", (1, 128)), ("silu_and_mul", (8, 256)),
                          ("rmsnorm", (8, 64)), ("rmsnorm", (3, 64)), ("rmsnorm", (1, 64))):
            bench.run_case(op, shape, ctx, "x", rows.append)
    finally:
        bench._torch_fn.cache_clear()
        torch._dynamo.reset()
    assert [r["check"] for r in rows] == ["ok"] * 6  # rmsnorm 1x64: no torch.compile row
    assert len(graphs) == 4, graphs  # silu 128 (rows dynamic), 1 row, 256; rmsnorm 64
    assert all(r["note"] == bench.DYNAMIC_ROWS_NOTE for r in rows)


@host_only
def test_cli_sweep_host_end_to_end(tmp_path, capsys):
    out_dir = tmp_path / "results"
    args = ["--sweep", "--quick", "--ops", "rmsnorm,fused_add_rmsnorm,softmax", "--rows", "4,1",
            "--out", str(out_dir)]
    assert bench.main(args) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("sweep: ") and "estimated" in out
    assert "sweep summary" in out and "host path" in out
    recs = [json.loads(line) for line in (out_dir / _host_file()).read_text().splitlines()]
    assert recs[0]["op"] == "copy"
    body = recs[1:]
    assert {r["op"] for r in body} == {"rmsnorm", "fused_add_rmsnorm", "softmax"}
    assert {r["impl"] for r in body} == {"xkernels", "xkernels out=", "torch"}
    for r in body:
        assert r["sweep"] is True and r["models"] and r["rows"] == r["shape"][0]
        assert r["cols"] == r["shape"][-1] and r["check"] == "ok" and r["ms"] > 0
    want = {(c.op, c.shape) for c in bench_sweep.cases(
        ops=["rmsnorm", "fused_add_rmsnorm", "softmax"], rows=[4, 1], quick=True,
        host_cap=bench.HOST_CAP_QUICK)}
    assert {(r["op"], tuple(r["shape"])) for r in body} == want
    pytest.importorskip("matplotlib")
    plot = _plot_module()
    assert plot.main([str(out_dir / _host_file()), "--out", str(tmp_path / "plots")]) == 0
    for op in ("rmsnorm", "fused_add_rmsnorm", "softmax"):
        assert (tmp_path / "plots" / f"{op}.png").exists()
    assert "softmax: lowest GB/s" in (tmp_path / "plots" / "summary.md").read_text()


@host_only
def test_cli_sweep_estimate_and_errors(capsys):
    assert bench.main(["--sweep", "--estimate", "--family", "softmax"]) == 0
    out = capsys.readouterr().out
    assert "estimated" in out and "softmax 1x32000" in out and "(Llama 2 7B)" in out
    for args in (["--ops", "rmsnorm"], ["--sweep", "--family", "gemm"],
                 ["--sweep", "--ops", "nope"], ["--sweep", "--rows", "0"],
                 ["--sweep", "--family", "norm", "--ops", "softmax"]):
        assert bench.main(args) == 2, args
    capsys.readouterr()


def test_time_limit_skips_the_rest():
    ctx = bench.Context(gpu=False, dtype_name="bf16", quick=True, groups={"xkernels"}, sweep=True)
    cases = bench_sweep.cases(ops=["rmsnorm"], rows=[1], quick=True)
    rows = []
    assert bench_sweep.run(ctx, cases, rows.append, time_limit=-1.0) == cases
    assert rows == []
