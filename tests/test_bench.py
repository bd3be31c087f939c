"""`xkernels bench` on the host path (CPU, CI) and its pure helpers.

The GPU path cannot run here: its helpers are exercised directly, and the peers' glue runs against
stand-ins with the signatures of FlashInfer 0.5.3 and Liger 0.8.5 (on CPU tensors).
"""

from __future__ import annotations

import itertools
import json
import math
import subprocess
import sys
import types

import pytest
import torch
import torch.nn.functional as F
from xkernels import bench

HAS_CUDA = torch.cuda.is_available()
host_only = pytest.mark.skipif(HAS_CUDA, reason="with a GPU the bench runs the GPU path (minutes)")
HEADER = ("op", "shape", "impl", "ms", "GB/s", "%copy", "vs best peer")
REQUIRED = {"op", "shape", "dtype", "impl", "ms", "gbps", "device", "date", "versions"}


def _table_header(text: str) -> str:
    return next(line for line in text.splitlines() if line.startswith("op "))


# ------------------------------------------------------------------------------ pure helpers


def test_bytes_formulas():
    assert bench.bytes_moved("rmsnorm", (8192, 4096), 2) == 2 * 8192 * 4096 * 2 + 4096 * 2
    assert bench.bytes_moved("fused_add_rmsnorm", (8192, 4096), 2) == 4 * 8192 * 4096 * 2
    assert bench.bytes_moved("silu_and_mul", (8192, 28672), 2) == 3 * 8192 * 14336 * 2
    assert bench.bytes_moved("gelu_tanh_and_mul", (1, 28672), 2) == 3 * 14336 * 2
    assert bench.bytes_moved("softmax", (32768, 8192), 2) == 2 * 32768 * 8192 * 2
    assert bench.bytes_moved("add_bias_gelu", (131072, 4096), 2) == 2 * 131072 * 4096 * 2 + 8192
    assert bench.bytes_moved("mul_add", (1 << 28,), 2) == 4 * (1 << 28) * 2
    assert bench.bytes_moved("layernorm", (2, 8), 4) == 2 * 16 * 4 + 2 * 8 * 4
    assert bench.bytes_moved("copy", (1 << 29,), 2) == 2 << 30
    # anchors.md: rmsnorm 8192x4096 flashinfer 0.0538 ms -> 2493.8 GB/s
    g = bench.gbps(bench.bytes_moved("rmsnorm", (8192, 4096), 2), 0.0538)
    assert abs(g - 2494.0) < 1.0
    assert bench.gbps(100, None) is None
    with pytest.raises(ValueError):
        bench.bytes_moved("nope", (1,), 2)


@pytest.mark.parametrize("name,short", [
    ("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA H200", "h200"), ("NVIDIA A100-SXM4-80GB", "a100"),
    ("NVIDIA GeForce RTX 4090", "rtx4090"), ("Tesla V100-SXM2-16GB", "v100"),
    ("NVIDIA GH200 480GB", "gh200"), ("NVIDIA H100 PCIe", "h100"), ("NVIDIA", "gpu"),
])
def test_gpu_short_name(name, short):
    assert bench.gpu_short_name(name) == short


@pytest.mark.parametrize("uuid, card", [("2593c30e-dbea", "GPU-2593c30e-dbea"),
                                         ("GPU-2593c30e-dbea", "GPU-2593c30e-dbea"), ("", ""),
                                         (None, "")])
def test_card_id(uuid, card):
    assert bench.card_id(types.SimpleNamespace(uuid=uuid)) == card
    assert bench.card_id(object()) == ""


def test_cases_and_shapes():
    norm = bench.select_cases("norm")
    assert ("rmsnorm", (1048576, 128)) in norm and ("layernorm", (32768, 8192)) in norm
    assert len(norm) == 13
    act = dict(bench.select_cases("activation"))
    assert act["add_bias_gelu"] == (131072, 4096) and act["mul_add"] == (1 << 28,)
    assert bench.ATTRS["add_bias_gelu"] == {"approximate": "tanh"}
    quick = bench.select_cases("norm", quick=True)
    assert [s for op, s in quick if op == "rmsnorm"] == [(1, 4096), (128, 4096), (32768, 8192)]
    assert [s for op, s in bench.select_cases("softmax", quick=True)] == [
        (32768, 8192), (4096, 131072)]
    host = bench.select_cases("activation", quick=True, host_cap=1 << 16)
    assert all(math.prod(s) <= 1 << 16 or s[0] == 1 for _, s in host)
    assert len(host) == len(set(host))
    assert bench.host_shape((1 << 28,), 1 << 16) == (1 << 16,)
    assert bench.host_shape((4096, 131072), 1 << 16) == (1, 131072)
    assert bench.host_shape((32768, 8192), 1 << 20) == (128, 8192)


def test_rotation_and_check_rows():
    l2 = 50 << 20
    assert bench.input_bytes("rmsnorm", (8192, 4096), 2) == 8192 * 4096 * 2  # not the weight
    assert bench.input_bytes("fused_add_rmsnorm", (8192, 4096), 2) == 2 * 8192 * 4096 * 2
    assert bench.input_bytes("mul_add", (1 << 28,), 2) == 3 << 29
    assert bench.n_sets(bench.input_bytes("rmsnorm", (1, 4096), 2), l2) == bench.MAX_SETS
    # 512 MiB of input per set would cover the L2 alone: MIN_SETS layouts all the same
    big = bench.input_bytes("rmsnorm", (32768, 8192), 2)
    assert bench.n_sets(big, l2) == bench.MIN_SETS == 3
    # 64 MiB of input per set: 3 sets; 128 MiB (x and residual): 2 would cover the L2 (where
    # the bytes moved per call, 256 MiB, would have let one set pass), MIN_SETS is 3
    assert bench.n_sets(bench.input_bytes("rmsnorm", (8192, 4096), 2), l2) == 3
    assert bench.n_sets(bench.input_bytes("fused_add_rmsnorm", (8192, 4096), 2), l2) == 3
    # fewer where the free memory cannot hold them (inputs and an output as large, per set)
    assert bench.n_sets(big, l2, free_bytes=80 << 30) == 3
    assert bench.n_sets(big, l2, free_bytes=int(5 * big / bench.SET_MEMORY_SHARE)) == 2
    assert bench.n_sets(big, l2, free_bytes=big) == 1
    assert bench.n_sets(bench.input_bytes("rmsnorm", (1, 4096), 2), l2, free_bytes=1 << 30) \
        == bench.MAX_SETS
    for op in ("rmsnorm", "fused_add_rmsnorm", "layernorm"):
        one = bench.input_bytes(op, (128, 4096), 2)
        assert bench.n_sets(one, l2) * one >= 3 * l2
    assert bench.check_index(1) == [0]
    assert bench.check_index(40) == [*range(16), *range(24, 40)]
    assert bench.check_index(20) == list(range(20))


@pytest.mark.parametrize("n", range(1, 9))
def test_balanced_orders(n):
    orders = bench.balanced_orders(n)
    assert len(orders) == (1 if n == 1 else n if n % 2 == 0 else 2 * n)
    assert all(sorted(order) == list(range(n)) for order in orders)
    places = {(order[i], i) for order in orders for i in range(n)}
    assert len(places) == n * n  # every impl in every place
    counts = {}
    for order in orders:
        for pair in itertools.pairwise(order):
            counts[pair] = counts.get(pair, 0) + 1
    assert len(counts) == n * (n - 1)  # every impl right after every other
    assert len(set(counts.values())) <= 1  # equally often


def test_impl_groups():
    assert bench.impl_group("xkernels (dispatcher)") == "xkernels"
    assert bench.impl_group("torch.addcmul") == "torch"
    assert bench.impl_group("torch.compile (functional)") == "torch.compile"
    assert bench.impl_group("flashinfer (3-D)") == "flashinfer"
    assert bench.impl_group("liger (a,b split)") == "liger"


def _r(impl, ms, op="rmsnorm", shape=(8, 8), **kw):
    return {"family": "norm", "op": op, "shape": list(shape), "impl": impl, "ms": ms,
            "gbps": None if ms is None else 1.0 / ms, **kw}


def test_best_peer_and_table():
    rows = [
        {"family": "copy", "op": "copy", "shape": [1 << 29], "impl": "torch copy_", "ms": 0.7,
         "gbps": 3000.0, "note": "1024 MiB"},
        _r("xkernels", 1.0), _r("torch", 2.0), _r("liger", 0.5, check="failed"),
        _r("flashinfer", None, note="failed: ImportError: x"), _r("torch.compile", 1.25),
        _r("xkernels", 3.0, shape=(1, 8)),  # no peer: no ratio
    ]
    ratios = bench.best_peer_ratios(rows)
    assert ratios == {1: pytest.approx(0.8)}
    text = bench.format_table(rows, copy_gbps=3000.0)
    lines = text.splitlines()
    assert lines[0].split()[:3] == ["op", "shape", "impl"] and "vs best peer" in lines[0]
    assert lines[1].startswith("copy") and "2^29" in lines[1]
    assert lines[2] == "[norm]"
    assert "0.80" in lines[3] and "failed: ImportError" in text
    assert len(lines) == 3 + 6


def test_best_peer_like_for_like():
    """In-place ops are compared with peers of the same form: in place with in place, out of place
    (given destinations, or new tensors) with out of place."""
    f = "fused_add_rmsnorm"
    rows = [_r("xkernels", 3.2, op=f), _r("xkernels out=", 2.8, op=f), _r("flashinfer", 3.6, op=f),
            _r("liger", 3.0, op=f), _r("torch.compile (functional)", 2.9, op=f),
            _r("torch.compile", 3.4, op=f), _r("xkernels", 1.0), _r("liger", 0.9)]
    assert [bench.impl_form(r["op"], r["impl"]) for r in rows] == (
        ["in place", "out of place", "in place", "out of place", "out of place", "in place", "", ""])
    ratios = bench.best_peer_ratios(rows)
    assert ratios == {0: pytest.approx(3.2 / 3.4), 1: pytest.approx(2.8 / 2.9),
                      6: pytest.approx(1.0 / 0.9)}


def test_time_host_and_loop():
    calls = [lambda: sum(range(100))] * 3
    ms, why = bench.time_host(calls, min_ms=1.0, min_samples=5)
    assert ms > 0 and why is None
    us = bench.host_loop_us(lambda: None, 100, lambda: None, repeats=2, warmup=2)
    assert us >= 0


def test_versions_import_no_peer():
    v = bench.versions()
    assert v["xkernels"] and v["torch"] == torch.__version__
    assert "flashinfer" not in sys.modules and "liger_kernel" not in sys.modules


# ------------------------------------------------------------------------------ peers' glue


def _fake_flashinfer():
    """The calls bench makes, with FlashInfer 0.5.3's signatures (flashinfer/norm.py,
    activation.py, sampling.py)."""
    def _rms(x, w, eps):
        return F.rms_norm(x.float(), (x.shape[-1],), w.float(), eps).to(x.dtype)

    def rmsnorm(input, weight, eps=1e-6, out=None, enable_pdl=None):
        assert input.ndim in (2, 3)
        y = _rms(input, weight, eps)
        return y if out is None else out.copy_(y)

    def fused_add_rmsnorm(input, residual, weight, eps=1e-6, enable_pdl=None):
        residual.add_(input)
        input.copy_(_rms(residual, weight, eps))

    def layernorm(input, gemma, beta, eps=1e-6):
        assert gemma.dtype == beta.dtype == torch.float32
        return F.layer_norm(input.float(), (input.shape[-1],), gemma, beta, eps).to(input.dtype)

    def act(fn):
        def f(input, out=None, enable_pdl=None):
            d = input.shape[-1] // 2
            y = (fn(input[..., :d].float()) * input[..., d:].float()).to(input.dtype)
            return y if out is None else out.copy_(y)
        return f

    def softmax(logits, temperature=None, enable_pdl=None):
        return torch.softmax(logits.float() / (temperature or 1.0), -1)

    norm = types.SimpleNamespace(rmsnorm=rmsnorm, fused_add_rmsnorm=fused_add_rmsnorm,
                                 layernorm=layernorm)
    activation = types.SimpleNamespace(
        silu_and_mul=act(F.silu), gelu_and_mul=act(F.gelu),
        gelu_tanh_and_mul=act(lambda v: F.gelu(v, approximate="tanh")))
    return types.SimpleNamespace(norm=norm, activation=activation,
                                 sampling=types.SimpleNamespace(softmax=softmax), rmsnorm=rmsnorm)


def _fake_liger():
    """liger_kernel.ops' autograd Functions as bench calls them (Liger 0.8.5 signatures)."""
    def fn(f):
        return type("F", (), {"apply": staticmethod(f)})

    def rms(X, W, eps, offset=0.0, casting_mode="llama", in_place=True, row_mode=None):
        return F.rms_norm(X.float(), (X.shape[-1],), W.float(), eps).to(X.dtype)

    def fused(X, R, W, eps, offset=0.0, casting_mode="llama", in_place=False):
        s = X + R
        return rms(s, W, eps), s

    def split(g):
        return lambda a, b: (g(a.float()) * b.float()).to(a.dtype)

    def gate_up(y, in_place=False):
        d = y.shape[-1] // 2
        return split(F.silu)(y[..., :d], y[..., d:])

    return types.SimpleNamespace(
        LigerRMSNormFunction=fn(rms), LigerFusedAddRMSNormFunction=fn(fused),
        LigerLayerNormFunction=fn(lambda X, W, B, eps: F.layer_norm(X, (X.shape[-1],), W, B, eps)),
        LigerFusedGateUpSiLUMulFunction=fn(gate_up),
        LigerSiLUMulFunction=fn(lambda a, b, gate_multiplier=1.0, down_multiplier=1.0:
                                split(F.silu)(a, b)),
        LigerGELUMulFunction=fn(split(lambda v: F.gelu(v, approximate="tanh"))),
        LigerSoftmaxFunction=fn(lambda x: torch.softmax(x, -1)),
    )


def _ctx(peers, groups=bench.IMPL_GROUPS[:2] + ("flashinfer", "liger")):
    return bench.Context(gpu=False, dtype_name="bf16", quick=True, groups=set(groups),
                         peers=peers, copy_gbps=100.0, date="2026-01-01",
                         versions={"xkernels": "0"})


CASES = [("rmsnorm", (64, 128)), ("fused_add_rmsnorm", (3, 256)), ("layernorm", (3, 256)),
         ("silu_and_mul", (3, 512)), ("gelu_tanh_and_mul", (2, 512)), ("gelu_and_mul", (2, 512)),
         ("add_bias_gelu", (3, 256)), ("mul_add", (5000,)), ("softmax", (40, 300))]
EXPECTED = {
    "rmsnorm": {"xkernels", "torch", "flashinfer (3-D)", "liger"},
    "fused_add_rmsnorm": {"xkernels", "xkernels out=", "torch", "flashinfer", "liger"},
    "layernorm": {"xkernels", "torch", "flashinfer", "liger"},
    "silu_and_mul": {"xkernels", "torch", "flashinfer", "liger", "liger (a,b split)"},
    "gelu_tanh_and_mul": {"xkernels", "torch", "flashinfer", "liger (a,b split)"},
    "gelu_and_mul": {"xkernels", "torch", "flashinfer"},
    "add_bias_gelu": {"xkernels", "torch"},
    "mul_add": {"xkernels", "torch", "torch.addcmul"},
    "softmax": {"xkernels", "torch", "flashinfer", "liger"},
}


@pytest.mark.parametrize("op,shape", CASES, ids=[c[0] for c in CASES])
def test_peer_glue_on_stand_ins(op, shape):
    ctx = _ctx({"flashinfer": _fake_flashinfer(), "liger": _fake_liger()})
    rows = []
    bench.run_case(op, shape, ctx, "x", rows.append)
    assert {r["impl"] for r in rows} == EXPECTED[op]
    for r in rows:
        assert r["ms"] is not None and r["ms"] > 0, r
        assert r["check"] == "ok", r
        assert r["gbps"] > 0 and r["shape"] == list(shape)
    assert not ctx.xkernels_failed


def test_peer_failures_are_rows():
    fi = _fake_flashinfer()

    def broken(*a, **k):
        raise RuntimeError("kernel exploded")

    fi.norm.rmsnorm = broken
    lk = _fake_liger()
    lk.LigerRMSNormFunction = type("F", (), {"apply": staticmethod(
        lambda X, W, eps: torch.zeros_like(X))})  # wrong answers
    ctx = _ctx({"flashinfer": fi, "liger": lk})
    rows = []
    bench.run_case("rmsnorm", (64, 128), ctx, "x", rows.append)
    by = {r["impl"]: r for r in rows}
    # the 3-D path fails, the 2-D fallback too: a failed row; the run goes on
    assert by["flashinfer (2-D)"]["ms"] is None
    assert "failed: RuntimeError: kernel exploded" in by["flashinfer (2-D)"]["note"]
    assert by["liger"]["check"] == "failed" and "CHECK FAILED" in by["liger"]["note"]
    assert by["liger"]["ms"] is not None and by["xkernels"]["check"] == "ok"
    assert not ctx.xkernels_failed
    ratios = bench.best_peer_ratios(rows)  # the wrong peer does not count as the best
    i = next(i for i, r in enumerate(rows) if r["impl"] == "xkernels")
    assert ratios[i] == pytest.approx(by["xkernels"]["ms"] / by["torch"]["ms"])

    ctx = _ctx({"flashinfer": ImportError("no libcuda"), "liger": None})
    rows = []
    bench.run_case("silu_and_mul", (2, 64), ctx, "x", rows.append)
    by = {r["impl"]: r for r in rows}
    assert "liger" not in by  # absent: no row
    assert by["flashinfer"]["note"].startswith("failed: RuntimeError: import: ImportError")


def test_torch_fused_fallback_to_functional(monkeypatch):
    """An in-place torch composite that fails falls back to the functional one."""
    orig = bench._torch_composites

    def composites(op, attrs):
        out = dict(orig(op, attrs))
        if op == "fused_add_rmsnorm":
            def bad(x, r, w):
                raise NotImplementedError("no in-place")
            out[""] = bad
        return out

    monkeypatch.setattr(bench, "_torch_composites", composites)
    bench._torch_fn.cache_clear()
    try:
        ctx = _ctx({}, groups=("torch",))
        rows = []
        bench.run_case("fused_add_rmsnorm", (4, 64), ctx, "x", rows.append)
    finally:
        bench._torch_fn.cache_clear()
    (row,) = rows
    assert row["impl"] == "torch (functional)" and row["check"] == "ok" and row["ms"] > 0
    assert "NotImplementedError" in row["note"]


# ------------------------------------------------------------------------------ the command


@host_only
@pytest.mark.parametrize("family", ["norm", "activation", "softmax"])
def test_cli_quick_host(family, capsys):
    assert bench.main(["--quick", "--family", family]) == 0
    out = capsys.readouterr().out
    first = out.splitlines()[0]
    assert first.startswith("xkernels bench: no GPU") and "HOST path" in first
    assert tuple(_table_header(out).split()[:3]) == HEADER[:3]
    for col in HEADER:
        assert col in _table_header(out)
    assert f"[{family}]" in out
    table = out[out.index(_table_header(out)):]
    assert "xkernels" in table and "torch" in table and "failed" not in table


@host_only
def test_cli_out_jsonl(tmp_path, capsys):
    assert bench.main(["--quick", "--family", "softmax", "--out", str(tmp_path)]) == 0
    path = tmp_path / "softmax-cpu.jsonl"
    (tmp_path / "stale").write_text("")
    recs = [json.loads(line) for line in path.read_text().splitlines()]
    assert recs[0]["op"] == "copy" and recs[0]["gbps"] > 0
    impls = {(r["op"], tuple(r["shape"]), r["impl"]) for r in recs[1:]}
    assert {i for _, _, i in impls} == {"xkernels", "torch"}
    for r in recs:
        assert REQUIRED <= r.keys(), r.keys()
        assert r["dtype"] == "bf16" and r["device"] == "cpu" and isinstance(r["shape"], list)
        assert r["versions"]["xkernels"] and r["date"]
    # a second run truncates the file first
    assert bench.main(["--quick", "--family", "softmax", "--out", str(tmp_path),
                       "--impls", "xkernels"]) == 0
    recs2 = [json.loads(line) for line in path.read_text().splitlines()]
    assert {r["impl"] for r in recs2} == {"torch copy_", "xkernels"}
    capsys.readouterr()


@host_only
def test_cli_overhead(tmp_path, capsys):
    assert bench.main(["--quick", "--family", "overhead", "--out", str(tmp_path)]) == 0
    recs = [json.loads(line) for line in (tmp_path / "overhead-cpu.jsonl").read_text().splitlines()]
    assert [r["impl"] for r in recs] == ["xkernels", "xkernels (dispatcher)", "torch"]
    for r in recs:
        assert r["host_us"] > 0 and r["gbps"] is None and r["ms"] == pytest.approx(
            r["host_us"] / 1e3)
    assert "us/call" in capsys.readouterr().out


@host_only
def test_overhead_paired_with_flashinfer():
    """With FlashInfer present, each impl's host cost also comes as its median per-round ratio to
    FlashInfer's."""
    fi = types.SimpleNamespace(rmsnorm=lambda x, w, eps: F.rms_norm(x, (x.shape[-1],), w, eps))
    rows = []
    bench.run_overhead(_ctx({"flashinfer": fi}, groups=("xkernels", "torch", "flashinfer")),
                       rows.append)
    by = {r["impl"]: r for r in rows}
    assert set(by) == {"xkernels", "xkernels (dispatcher)", "torch", "flashinfer"}
    assert by["flashinfer"]["vs_flashinfer"] == 1.0
    for name in ("xkernels", "torch"):
        assert by[name]["vs_flashinfer"] > 0
        assert "per-round ratio to flashinfer" in by[name]["note"]


@host_only
def test_cli_xkernels_wrong_is_an_error(monkeypatch, capsys):
    import xkernels.torch as xt

    def wrong(input, scale=1.0, *, out=None):
        return out.zero_()

    monkeypatch.setattr(xt, "softmax", wrong)
    assert bench.main(["--quick", "--family", "softmax", "--impls", "xkernels,torch"]) == 1
    out = capsys.readouterr().out
    assert "xkernels FAILED" in out and "CHECK FAILED" in out
    assert out.rstrip().splitlines()[-1].startswith("softmax")  # the table is still printed last


def test_cli_bad_arguments(capsys):
    assert bench.main(["--impls", "xkernels,cupy"]) == 2
    with pytest.raises(SystemExit) as e:
        bench.main(["--framework", "tensorflow"])
    assert e.value.code == 2
    assert bench.main(["--family", "norm", "--framework", "jax"]) == 2
    with pytest.raises(SystemExit):
        bench.main(["--family", "gemm"])
    capsys.readouterr()


@host_only
def test_console_script_and_run_py(tmp_path):
    r = subprocess.run([sys.executable, "-m", "xkernels", "bench", "--quick", "--family",
                        "softmax", "--impls", "xkernels"], check=False, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0].startswith("xkernels bench: no GPU")
    from pathlib import Path

    run_py = Path(__file__).resolve().parents[1] / "benchmarks" / "run.py"
    r = subprocess.run([sys.executable, str(run_py), "--quick", "--family", "softmax",
                        "--impls", "xkernels", "--out", str(tmp_path)],
                       check=False, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "softmax-cpu.jsonl").exists()  # a later --out wins over run.py's


@host_only
def test_interrupt_prints_what_was_measured(monkeypatch, capsys):
    calls = []

    def run_case(op, shape, ctx, family, emit):
        if calls:
            raise KeyboardInterrupt
        calls.append(op)
        emit(bench._row(ctx, family, op, shape, "xkernels", 1.0, 1000, check="ok"))

    monkeypatch.setattr(bench, "run_case", run_case)
    assert bench.main(["--quick", "--family", "norm"]) == 130
    out = capsys.readouterr().out
    assert "interrupted" in out and out.rstrip().splitlines()[-1].startswith("rmsnorm")


# ------------------------------------------------------------------------------ --family adapters

ADAPTER_KEYS = {"op", "shape", "dtype", "impl", "framework", "ms", "host_us", "device", "date",
                "versions"}


@host_only
def test_cli_adapters_host(tmp_path, capsys):
    from xkernels import bench_adapters

    assert bench.main(["--family", "adapters", "--quick", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("xkernels bench --family adapters: no GPU") and "HOST path" in out
    for fw in ("torch", "jax", "numpy"):
        assert f"  {fw} " in out.split("skipped")[0]  # its path is shown
    assert "skipped: cupy" in out
    recs = [json.loads(line) for line in (tmp_path / "adapters-cpu.jsonl").read_text().splitlines()]
    for r in recs:
        assert ADAPTER_KEYS <= r.keys(), r.keys()
        assert r["ms"] > 0 and r["device"] == "cpu" and r["versions"]["xkernels"]
    kernel = {(r["op"], r["framework"]) for r in recs if r["host_us"] is None}
    assert kernel == {(op, fw) for op, _ in bench_adapters.KERNEL_CASES
                      for fw in ("torch", "jax", "numpy")}
    assert all(r["check"] == "ok" for r in recs if r["host_us"] is None)
    over = {(r["framework"], r["impl"]) for r in recs if r["host_us"] is not None}
    assert {("torch", "native: F.rms_norm"), ("jax", "native: jax.jit(jnp)"),
            ("numpy", "native: numpy"), ("jax", "xkernels"), ("numpy", "xkernels")} <= over
    assert out.rstrip().splitlines()[-1].startswith("rmsnorm")  # the table last


@host_only
def test_cli_adapters_one_framework_and_a_wrong_result(monkeypatch, tmp_path, capsys):
    import xkernels.numpy as xn

    def wrong(input, weight, eps=1e-6, *, out=None):
        out = input.copy() if out is None else out
        out[...] = 0
        return out

    monkeypatch.setattr(xn, "rmsnorm", wrong)
    assert bench.main(["--framework", "numpy", "--quick", "--out", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "xkernels FAILED" in out and "CHECK FAILED" in out
    recs = [json.loads(line) for line in (tmp_path / "adapters-cpu.jsonl").read_text().splitlines()]
    assert {r["framework"] for r in recs} == {"numpy"}
