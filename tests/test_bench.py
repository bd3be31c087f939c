"""`xkernels bench` on the host path (CPU, CI) and its pure helpers.

The GPU path cannot run here: its helpers are exercised directly, and the peers' glue runs against
stand-ins with the signatures of FlashInfer 0.5.3 and Liger 0.8.5 (on CPU tensors).
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import math
import subprocess
import sys
import time
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


@pytest.mark.parametrize("model,short", [
    ("AMD EPYC 7763 64-Core Processor", "epyc-7763"), ("AMD EPYC", "epyc"),
    ("Intel(R) Xeon(R) Platinum 8480C", "xeon-platinum-8480c"),
    ("Intel(R) Core(TM) i9-13900K CPU @ 3.00GHz", "core-i9-13900k"), ("", "cpu"),
])
def test_cpu_short_name(model, short):
    assert bench.cpu_short_name(model) == short


def test_cpu_info_reads_the_first_processor():
    text = ("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 17\n"
            "model name\t: AMD EPYC\nflags\t\t: fpu sse2 avx2 avx512f\n\n"
            "processor\t: 1\nmodel name\t: other\n")
    assert bench.cpu_info(text, cpus=2) == {"model": "AMD EPYC", "family": 25, "model_id": 17,
                                            "cpus": 2, "isa": "avx512"}
    assert bench.cpu_info("model name : X\nflags : sse2 avx2", cpus=1)["isa"] == "avx2"
    assert bench.cpu_info("", cpus=3)["cpus"] == 3


def _host_file(family):
    """DIR/<family>-cpu-<model>.jsonl: the host path's results file on this machine."""
    return f"{family}-cpu-{bench.cpu_short_name(bench.cpu_info()['model'])}.jsonl"


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
        _r("xkernels out=", 1.0), _r("torch", 2.0), _r("liger", 0.5, check="failed"),
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
    """Impls are compared with peers of the same form. In-place ops: in place with in place, out of
    place (given destinations, or new tensors) with out of place. Other ops: an output per input
    set (given by out=) with the same, the same output on every call (new tensors from the caching
    allocator, or "xkernels out=") with the same."""
    f = "fused_add_rmsnorm"
    rows = [_r("xkernels", 3.2, op=f), _r("xkernels out=", 2.8, op=f), _r("flashinfer", 3.6, op=f),
            _r("liger", 3.0, op=f), _r("torch.compile (functional)", 2.9, op=f),
            _r("torch.compile", 3.4, op=f), _r("xkernels", 1.0), _r("liger", 0.9),
            _r("xkernels out=", 0.8), _r("flashinfer (3-D)", 1.1), _r("torch.compile", 0.85),
            _r("flashinfer", 0.7, op="softmax"), _r("torch.addcmul", 2.0, op="mul_add"),
            _r("gemm", 1.0, op="not an op"), _r("xkernels", 1.0, op="gemm")]
    assert [bench.impl_form(r["op"], r["impl"]) for r in rows] == (
        ["in place", "out of place", "in place", "out of place", "out of place", "in place",
         "out per set", "out reused", "out reused", "out per set", "out reused",
         "out reused", "out per set", "", ""])
    ratios = bench.best_peer_ratios(rows)
    assert ratios == {0: pytest.approx(3.2 / 3.4), 1: pytest.approx(2.8 / 2.9),
                      6: pytest.approx(1.0 / 1.1), 8: pytest.approx(0.8 / 0.85)}


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

    def gemma_rmsnorm(input, weight, eps=1e-6, out=None, enable_pdl=None):
        y = _rms(input, 1.0 + weight.float(), eps)
        return y if out is None else out.copy_(y)

    def gemma_fused_add_rmsnorm(input, residual, weight, eps=1e-6, enable_pdl=None):
        residual.add_(input)
        input.copy_(_rms(residual, 1.0 + weight.float(), eps))

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
                                 gemma_rmsnorm=gemma_rmsnorm,
                                 gemma_fused_add_rmsnorm=gemma_fused_add_rmsnorm,
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
        assert casting_mode in ("llama", "gemma", "none")
        return F.rms_norm(X.float(), (X.shape[-1],), offset + W.float(), eps).to(X.dtype)

    def fused(X, R, W, eps, offset=0.0, casting_mode="llama", in_place=False):
        s = X + R
        return rms(s, W, eps, offset, casting_mode), s

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
         ("add_bias_gelu", (3, 256)), ("mul_add", (5000,)), ("softmax", (40, 300)),
         ("gemma_rmsnorm", (5, 256)), ("gemma_fused_add_rmsnorm", (3, 256)), ("silu", (3, 200)),
         ("gelu", (3, 200)), ("mul_add", (4, 300))]
EXPECTED = {
    "rmsnorm": {"xkernels", "xkernels out=", "torch", "flashinfer (3-D)", "liger"},
    "fused_add_rmsnorm": {"xkernels", "xkernels out=", "torch", "flashinfer", "liger"},
    "layernorm": {"xkernels", "xkernels out=", "torch", "flashinfer", "liger"},
    "silu_and_mul": {"xkernels", "xkernels out=", "torch", "flashinfer", "liger", "liger (a,b split)"},
    "gelu_tanh_and_mul": {"xkernels", "xkernels out=", "torch", "flashinfer", "liger (a,b split)"},
    "gelu_and_mul": {"xkernels", "xkernels out=", "torch", "flashinfer"},
    "add_bias_gelu": {"xkernels", "xkernels out=", "torch"},
    "mul_add": {"xkernels", "xkernels out=", "torch", "torch.addcmul"},
    "softmax": {"xkernels", "xkernels out=", "torch", "flashinfer", "liger"},
    "gemma_rmsnorm": {"xkernels", "xkernels out=", "torch", "flashinfer", "liger"},
    "gemma_fused_add_rmsnorm": {"xkernels", "xkernels out=", "torch", "flashinfer", "liger"},
    "silu": {"xkernels", "xkernels out=", "torch"},
    "gelu": {"xkernels", "xkernels out=", "torch"},
}


@pytest.mark.parametrize("op,shape", CASES, ids=[f"{c[0]}-{len(c[1])}d" for c in CASES])
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


@pytest.mark.parametrize("op", ["rmsnorm", "fused_add_rmsnorm"])
def test_shared_destinations_poisoned_at_the_check(op, monkeypatch):
    """"xkernels out=" makes its one set of destinations at its first bind (the check's): they
    hold NaN there, as the check set's `out` does, so that a kernel that writes nothing fails the
    check instead of passing on what an earlier call left in reused memory."""
    import xkernels.torch as xt

    spec = bench.OPS[op]
    impl = next(i for i in bench._xkernels_impls(op, {"eps": 1e-6}) if i.name == "xkernels out=")
    monkeypatch.setattr(xt, op, lambda *a, **k: None)  # writes nothing
    gen = torch.Generator().manual_seed(0)
    s = {x.name: torch.randn(8 if x.role == "column" else (4, 8), generator=gen).bfloat16()
         for x in spec.inputs}
    if not spec.in_place:
        s["out"] = torch.full((4, 8), float("nan"), dtype=torch.bfloat16)
    outs = impl.bind(s)()
    assert outs and all(bool(o.float().isnan().all()) for o in outs)


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
    assert by["flashinfer (2-D)"]["note"] == ("failed: RuntimeError: kernel exploded; "
                                              "(flashinfer (3-D): RuntimeError: kernel exploded)")
    assert by["liger"]["check"] == "failed" and "CHECK FAILED" in by["liger"]["note"]
    assert by["liger"]["ms"] is not None and by["xkernels"]["check"] == "ok"
    assert not ctx.xkernels_failed
    ratios = bench.best_peer_ratios(rows)  # the wrong peer does not count as the best
    i = next(i for i, r in enumerate(rows) if r["impl"] == "xkernels out=")
    assert ratios[i] == pytest.approx(by["xkernels out="]["ms"] / by["torch"]["ms"])
    assert next(i for i, r in enumerate(rows) if r["impl"] == "xkernels") not in ratios

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


def test_first_call_walks_the_fallback_chain():
    """bench.first_call: the impls of a fallback chain in turn while the call raises, the notes
    naming the errors; every call raising, a failed note listing them all; a call past its time
    limit counts as raising."""
    def raising(msg):
        def bind(s):
            def call():
                raise RuntimeError(msg)
            return call
        return bind

    def slow(s):
        return lambda: time.sleep(5)

    def ok(s):
        return lambda: s["x"]

    checked = []

    def check(got):
        checked.append(got)
        return None if got == 7 else "wrong"

    def run(impl):
        return impl.bind({"x": 7})()

    b = bench.Impl("b", ok, "b's note")
    first = bench.first_call(bench.Impl("a", raising("a broke"), "a's note", fallback=b), run,
                             check)
    assert first.impl is b and first.failed is None and first.bad is None and checked == [7]
    assert first.notes == ["b's note", "(a: RuntimeError: a broke)"] and first.first_s >= 0
    t, failed = bench.timed_impl(first, [{"x": 7}], _ctx({}))
    assert failed is None and t.name == "b" and t.check == "ok" and t.calls == 1

    chain = bench.Impl("a", raising("one"), fallback=bench.Impl(
        "b", raising("two"), "b's note", fallback=bench.Impl("c", raising("three"))))
    first = bench.first_call(chain, run, check)
    assert first.impl.name == "c" and checked == [7]
    assert first.failed == ("failed: RuntimeError: three; (a: RuntimeError: one); "
                            "(b: RuntimeError: two)")

    t0 = time.perf_counter()
    first = bench.first_call(bench.Impl("slow", slow, fallback=bench.Impl("b", ok)), run,
                             lambda got: "wrong", limit=lambda i: 0.2 if i.name == "slow" else None)
    assert time.perf_counter() - t0 < 2
    late = "CompileTimeout: compile took more than 0.2 s (--compile-timeout)"
    assert first.impl.name == "b" and first.bad == "wrong" and first.notes == [f"(slow: {late})"]
    first = bench.first_call(bench.Impl("slow", slow), run, check, limit=lambda i: 0.2)
    assert first.failed == f"failed: {late}"


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
    path = tmp_path / _host_file("softmax")
    (tmp_path / "stale").write_text("")
    recs = [json.loads(line) for line in path.read_text().splitlines()]
    assert recs[0]["op"] == "copy" and recs[0]["gbps"] > 0
    impls = {(r["op"], tuple(r["shape"]), r["impl"]) for r in recs[1:]}
    assert {i for _, _, i in impls} == {"xkernels", "xkernels out=", "torch"}
    for r in recs:
        assert REQUIRED <= r.keys(), r.keys()
        assert r["dtype"] == "bf16" and isinstance(r["shape"], list)
        assert r["device"] == r["cpu"]["model"] and r["cpu"]["cpus"] >= 1
        assert r["cpu"]["torch_threads"] >= 1 and r["cpu"]["xkernels_threads"] >= 1
        assert r["versions"]["xkernels"] and r["date"]
    # a second run truncates the file first
    assert bench.main(["--quick", "--family", "softmax", "--out", str(tmp_path),
                       "--impls", "xkernels"]) == 0
    recs2 = [json.loads(line) for line in path.read_text().splitlines()]
    assert {r["impl"] for r in recs2} == {"torch copy_", "xkernels", "xkernels out="}
    capsys.readouterr()


@host_only
def test_cli_overhead(tmp_path, capsys):
    assert bench.main(["--quick", "--family", "overhead", "--out", str(tmp_path)]) == 0
    recs = [json.loads(line) for line in (tmp_path / _host_file("overhead")).read_text()
            .splitlines()]
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
        bench.main(["--family", "conv"])
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
    assert (tmp_path / _host_file("softmax")).exists()  # a later --out wins over run.py's


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
    recs = [json.loads(line) for line in (tmp_path / _host_file("adapters")).read_text()
            .splitlines()]
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
    recs = [json.loads(line) for line in (tmp_path / _host_file("adapters")).read_text()
            .splitlines()]
    assert {r["framework"] for r in recs} == {"numpy"}


# ------------------------------------------------------------------------------ --family attention

ATTN_KEYS = REQUIRED | {"case", "kind", "causal", "batch", "q_len", "kv_len", "num_qo_heads",
                        "num_kv_heads", "head_dim", "design", "check", "calls"}


def test_attention_accounting():
    """FLOPs and bytes as shared/reference/anchors.md counts them: its (ms, figure) pairs."""
    from xkernels import bench_attention as ba

    mha = ba.prefill_case(8192, 32, 32, 128, False)
    assert ba.flops(mha) == 4 * 8192 * 8192 * 32 * 128
    assert ba.flops(ba.prefill_case(8192, 32, 32, 128, True)) * 2 == ba.flops(mha)
    for (s, hq, hkv, d, causal), ms, tf in [
            ((8192, 32, 32, 128, False), 1.5763, 697.5), ((8192, 32, 32, 128, True), 0.9378, 586.2),
            ((4096, 32, 8, 128, False), 0.4375, 628.3), ((4096, 32, 8, 128, True), 0.2579, 532.9),
            ((8192, 16, 16, 64, False), 0.8244, 333.4), ((8192, 16, 16, 64, True), 0.3375, 407.2)]:
        c = ba.prefill_case(s, hq, hkv, d, causal)
        assert ba.tflops(ba.flops(c), ms) == pytest.approx(tf, abs=0.1), c.label
    dec = ba.decode_case(64, 4096, 32, 8, 128)
    assert ba.bytes_moved(dec, 2) == 2 * 64 * 4096 * 8 * 128 * 2 + 2 * 64 * 32 * 128 * 2
    for (b, n), ms, g in [((64, 4096), 0.3594, 2990.6), ((256, 2048), 0.6992, 3077.5),
                          ((16, 16384), 0.3624, 2963.3), ((64, 4096), 0.3966, 2709.7)]:
        c = ba.decode_case(b, n, 32, 8, 128)
        assert bench.gbps(ba.bytes_moved(c, 2), ms) == pytest.approx(g, rel=3e-4), c.label
    assert ba.tflops(1, None) is None and ba.tflops(1, 0.0) is None
    # a set: q, k, v (prefill); q and whole pages of the caches (decode)
    assert ba.set_bytes(mha, 2) == 3 * 8192 * 32 * 128 * 2
    host = ba.decode_case(4, 300, 8, 2, 128)
    assert host.pages_per_request == 19
    assert ba.set_bytes(host, 2) == 4 * 8 * 128 * 2 + 2 * 4 * 19 * 16 * 2 * 128 * 2
    assert ba.bytes_moved(host, 2) == 2 * 4 * 300 * 2 * 128 * 2 + 2 * 4 * 8 * 128 * 2
    l2 = 50 << 20  # every GPU case rotates >= 3 sets, inputs >= 3x the L2
    for c in ba.select_cases():
        n = bench.n_sets(ba.set_bytes(c, 2), l2, free_bytes=80 << 30)
        assert n >= 3 and n * ba.set_bytes(c, 2) >= 3 * l2, c.label


def test_attention_cases():
    from xkernels import bench_attention as ba

    full = ba.select_cases()
    labels = [c.label for c in full]
    assert len(full) == 11 and len(set(labels)) == 11
    for s, hq, hkv, d in [(8192, 32, 32, 128), (4096, 32, 8, 128), (8192, 16, 16, 64)]:
        for causal in (False, True):  # anchors.md's names
            assert f"prefill s={s} hq={hq} hkv={hkv} d={d} causal={causal}" in labels
    for b, n in [(64, 4096), (1, 32768), (256, 1024), (16, 16384), (256, 2048)]:
        assert f"decode b={b} L={n} hq=32 hkv=8 d=128 paged ps=16" in labels
    for c in full:
        assert c.batch >= 1 and c.num_qo_heads % c.num_kv_heads == 0
        if c.kind == "prefill":
            assert c.op == "attention" and c.batch == 1 and c.q_len == c.kv_len
            assert c.q_shape == (1, c.q_len, c.num_qo_heads, c.head_dim)
        else:
            assert c.op == "decode_paged" and c.q_len == 1 and c.page_size == 16
            assert not c.causal and c.q_shape == (c.batch, 32, 128)
    quick = ba.select_cases(quick=True)
    assert [c.kind for c in quick] == ["prefill"] * 3 + ["decode"] * 2
    assert not any(c.causal for c in quick)
    assert len({(c.num_qo_heads, c.num_kv_heads, c.head_dim) for c in quick[:3]}) == 3
    host = ba.select_cases(quick=True, gpu=False)
    assert [c.label for c in host] == ["prefill s=256 hq=4 hkv=2 d=64 causal=False",
                                       "decode b=4 L=300 hq=8 hkv=2 d=128 paged ps=16"]
    assert len(ba.select_cases(gpu=False)) == 3
    tokens = ba.check_tokens(8192)
    assert tokens[:16] == list(range(16)) and tokens[-16:] == list(range(8176, 8192))
    assert len(tokens) == 48 and ba.check_tokens(20) == list(range(20))


def _attn_ctx(groups, peers=None):
    return bench.Context(gpu=False, dtype_name="bf16", quick=True, groups=set(groups),
                         peers=peers or {}, copy_gbps=100.0, date="2026-01-01",
                         versions={"xkernels": "0"})


def test_attention_inputs_and_reference():
    """The float64 reference at the checked rows against SDPA in float64; the decode page table
    (a permutation of the cache's pages, a partial last page) read back through the contiguous
    copy; a wrong output fails the check."""
    from xkernels import bench_attention as ba
    from xkernels import reference

    ctx = _attn_ctx(())
    for causal in (False, True):
        c = ba.prefill_case(40, 4, 2, 16, causal)
        s = ba.make_set(c, ctx)
        sel = ba.selection(c)
        ref = ba.reference(c, s, sel)
        want = F.scaled_dot_product_attention(
            s["q"].double().transpose(1, 2), s["k"].double().transpose(1, 2),
            s["v"].double().transpose(1, 2), is_causal=causal, enable_gqa=True).transpose(1, 2)
        assert ref.shape == (len(sel) * 4, 16)
        assert torch.allclose(torch.from_numpy(ref), want[0, sel].reshape(-1, 16), atol=1e-12)
        full, _ = reference.attention(*(s[n].double().numpy() for n in "qkv"), causal=causal)
        assert abs(full[0, sel].reshape(-1, 16) - ref).max() < 1e-12  # the op table's reference
        assert ba.check(c, want.to(torch.bfloat16), sel, ref, "bf16") is None
        wrong = want.clone()
        wrong[0, -1, 1] += 0.1  # the last token, one head
        assert "off" in ba.check(c, wrong.to(torch.bfloat16), sel, ref, "bf16")
        assert "shape" in ba.check(c, want[0], sel, ref, "bf16")
    c = ba.decode_case(3, 40, 4, 2, 16)
    s = ba.make_set(c, ctx, contiguous=True)
    assert s["kv_indptr"].tolist() == [0, 3, 6, 9] and s["kv_last_page_len"].tolist() == [8] * 3
    assert sorted(s["kv_indices"].tolist()) == list(range(9))
    assert s["kv_indices"].dtype == torch.int32 and s["k_contig"].shape == (3, 2, 40, 16)
    b, t = 2, 37  # token 37 of request 2: page 2 of its pages, slot 5
    page = int(s["kv_indices"][s["kv_indptr"][b] + t // 16])
    assert torch.equal(s["k_contig"][b, :, t], s["k_cache"][page, t % 16])
    sel = ba.selection(c)
    ref = ba.reference(c, s, sel)
    want = F.scaled_dot_product_attention(
        s["q"].double().unsqueeze(2), s["k_contig"].double(), s["v_contig"].double(),
        enable_gqa=True).squeeze(2)
    assert torch.allclose(torch.from_numpy(ref), want[sel].reshape(-1, 16), atol=1e-12)
    full, _ = reference.decode_paged(
        s["q"].double().numpy(), s["k_cache"].double().numpy(), s["v_cache"].double().numpy(),
        s["kv_indptr"], s["kv_indices"], s["kv_last_page_len"])
    assert abs(full[sel].reshape(-1, 16) - ref).max() < 1e-12
    nan = torch.full_like(want, float("nan")).to(torch.bfloat16)
    assert "non-finite" in ba.check(c, nan, sel, ref, "bf16")


def _paged_ref(q, kc, vc, indptr, indices, last):
    out = torch.empty_like(q)
    ps = kc.shape[1]
    for b in range(q.shape[0]):
        pages = indices[indptr[b]:indptr[b + 1]].long()
        n = (len(pages) - 1) * ps + int(last[b])
        k = kc[pages].reshape(-1, *kc.shape[2:])[:n].transpose(0, 1).float()
        v = vc[pages].reshape(-1, *vc.shape[2:])[:n].transpose(0, 1).float()
        o = F.scaled_dot_product_attention(q[b].float().unsqueeze(1), k, v, enable_gqa=True)
        out[b] = o.squeeze(1).to(q.dtype)
    return out


def _fake_flashinfer_attention(log):
    """flashinfer.single_prefill_with_kv_cache and BatchDecodeWithPagedKVCacheWrapper with
    FlashInfer 0.5.3's signatures (flashinfer/prefill.py, decode.py) and checks."""
    def single_prefill_with_kv_cache(q, k, v, scale_q=None, scale_k=None, scale_v=None,
                                     o_dtype=None, custom_mask=None, packed_custom_mask=None,
                                     causal=False, kv_layout="NHD", pos_encoding_mode="NONE",
                                     use_fp16_qk_reduction=False, sm_scale=None, window_left=-1,
                                     logits_soft_cap=None, rope_scale=None, rope_theta=None,
                                     backend="auto", return_lse=False):
        assert q.ndim == k.ndim == 3 and kv_layout == "NHD" and backend in ("fa2", "fa3")
        log.append(("prefill", backend, causal))
        o = F.scaled_dot_product_attention(q.transpose(0, 1).float(), k.transpose(0, 1).float(),
                                           v.transpose(0, 1).float(), is_causal=causal,
                                           enable_gqa=True)
        return o.transpose(0, 1).to(q.dtype)

    class BatchDecodeWithPagedKVCacheWrapper:
        def __init__(self, float_workspace_buffer, kv_layout="NHD", use_cuda_graph=False,
                     use_tensor_cores=False, paged_kv_indptr_buffer=None,
                     paged_kv_indices_buffer=None, paged_kv_last_page_len_buffer=None,
                     backend="auto", jit_args=None):
            assert float_workspace_buffer.dtype == torch.uint8 and kv_layout == "NHD"
            if use_cuda_graph:
                for buf in (paged_kv_indptr_buffer, paged_kv_indices_buffer,
                            paged_kv_last_page_len_buffer):
                    assert torch.is_tensor(buf), "buffers needed in cudagraph mode"
                assert len(paged_kv_indptr_buffer) == len(paged_kv_last_page_len_buffer) + 1
            self.graph, self.tc = use_cuda_graph, use_tensor_cores
            self.bufs = (paged_kv_indptr_buffer, paged_kv_indices_buffer,
                         paged_kv_last_page_len_buffer)
            log.append(("decode", use_tensor_cores, use_cuda_graph))

        def plan(self, indptr, indices, last_page_len, num_qo_heads, num_kv_heads, head_dim,
                 page_size, pos_encoding_mode="NONE", window_left=-1, logits_soft_cap=None,
                 q_data_type="float16", kv_data_type=None, data_type=None, sm_scale=None,
                 rope_scale=None, rope_theta=None, non_blocking=True, block_tables=None,
                 seq_lens=None, fixed_split_size=None, disable_split_kv=False):
            for t in (indptr, indices, last_page_len):
                assert t.dtype == torch.int32
            if self.graph:
                assert len(last_page_len) == len(self.bufs[2])
                self.bufs[0].copy_(indptr)
                self.bufs[1][:len(indices)].copy_(indices)
                self.bufs[2].copy_(last_page_len)
            else:
                self.bufs = (indptr, indices, last_page_len)
            self.dtypes = (q_data_type, kv_data_type or q_data_type)
            self.shape = (num_qo_heads, num_kv_heads, head_dim, page_size)

        def run(self, q, paged_kv_cache, *args, q_scale=None, k_scale=None, v_scale=None,
                out=None, lse=None, return_lse=False, enable_pdl=None, window_left=None,
                sinks=None, q_len_per_req=1):
            kc, vc = paged_kv_cache
            assert (q.dtype, kc.dtype) == self.dtypes, "_check_cached_qkv_data_type"
            assert (q.shape[1], kc.shape[2], q.shape[2], kc.shape[1]) == self.shape
            o = _paged_ref(q, kc, vc, *self.bufs)
            if out is None:
                return o
            assert out.shape == q.shape and out.dtype == q.dtype
            return out.copy_(o)

    return types.SimpleNamespace(
        single_prefill_with_kv_cache=single_prefill_with_kv_cache,
        BatchDecodeWithPagedKVCacheWrapper=BatchDecodeWithPagedKVCacheWrapper)


def _fake_flash_attn(log):
    def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False,
                        window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                        deterministic=False, return_attn_probs=False):
        assert q.ndim == 4
        log.append(("flash_attn", causal))
        o = F.scaled_dot_product_attention(q.transpose(1, 2).float(), k.transpose(1, 2).float(),
                                           v.transpose(1, 2).float(), is_causal=causal,
                                           enable_gqa=True)
        return o.transpose(1, 2).to(q.dtype)

    return types.SimpleNamespace(flash_attn_func=flash_attn_func)


def test_attention_peer_glue_on_stand_ins(monkeypatch):
    from xkernels import bench_attention as ba

    monkeypatch.setattr(ba, "WORKSPACE_BYTES", 1 << 10)
    log = []
    ctx = _attn_ctx(("torch", "flashinfer", "flash_attn"),
                    {"flashinfer": _fake_flashinfer_attention(log),
                     "flash_attn": _fake_flash_attn(log)})
    rows = []
    for causal in (False, True):
        ba.run_case(ba.prefill_case(64, 4, 2, 32, causal), ctx, rows.append)
    ba.run_case(ba.decode_case(3, 40, 4, 2, 32), ctx, rows.append)
    by = {(r["case"], r["impl"]): r for r in rows}
    pre = "prefill s=64 hq=4 hkv=2 d=32 causal=True"
    dec = "decode b=3 L=40 hq=4 hkv=2 d=32 paged ps=16"
    assert {i for c, i in by if c == pre} == {"torch sdpa flash", "flashinfer fa2",
                                              "flashinfer fa3", "flash_attn"}
    assert {i for c, i in by if c == dec} == {"flashinfer decode", "flashinfer decode tc",
                                              "torch sdpa (contiguous)"}
    for r in rows:
        assert ATTN_KEYS <= r.keys(), r.keys()
        assert r["check"] == "ok" and r["ms"] > 0, r
        if r["kind"] == "prefill":
            assert r["gbps"] is None and r["tflops"] == pytest.approx(
                ba.flops(ba.prefill_case(64, 4, 2, 32, r["causal"])) / r["ms"] / 1e9)
        else:
            assert r["gbps"] == pytest.approx(
                ba.bytes_moved(ba.decode_case(3, 40, 4, 2, 32), 2) / r["ms"] / 1e6)
            assert r["page_size"] == 16 and r["shape"] == [3, 4, 32]
    assert by[(dec, "torch sdpa (contiguous)")]["design"] == ba.REFERENCE
    assert ("prefill", "fa3", True) in log and ("flash_attn", True) in log
    assert ("decode", True, True) in log  # tensor cores, use_cuda_graph with fixed buffers
    assert not ctx.xkernels_failed


def test_attention_sdpa_fallbacks(monkeypatch):
    """SDPA that refuses enable_gqa: the prefill rows fall back to repeated kv heads, the decode
    reference to the query heads of a kv head as rows; the rows say so."""
    from xkernels import bench_attention as ba

    real = F.scaled_dot_product_attention

    def no_gqa(q, k, v, *a, enable_gqa=False, **kw):
        if enable_gqa:
            raise RuntimeError("No available kernel")
        o = real(q, k, v, *a, **kw)
        return o.transpose(1, 2).contiguous().transpose(1, 2)  # laid out [B, S, H, D]

    monkeypatch.setattr(F, "scaled_dot_product_attention", no_gqa)
    rows = []
    ctx = _attn_ctx(("torch",))
    ba.run_case(ba.prefill_case(48, 4, 2, 16, True), ctx, rows.append)
    ba.run_case(ba.decode_case(5, 20, 8, 2, 16), ctx, rows.append)
    by = {r["impl"]: r for r in rows}
    assert set(by) == {"torch sdpa flash (kv repeated)", "torch sdpa (contiguous, heads as rows)"}
    for r in rows:
        assert r["check"] == "ok" and r["ms"] > 0, r
        assert "No available kernel" in r["note"]


def test_attention_peer_failures_and_ratios(monkeypatch):
    """A peer that raises gets a failed row, one that is wrong a CHECK FAILED row; neither, nor
    the contiguous reference, counts as the best peer; causal and non-causal cases apart."""
    from xkernels import bench_attention as ba

    log = []
    fi = _fake_flashinfer_attention(log)
    good = fi.single_prefill_with_kv_cache

    def prefill(q, k, v, causal=False, backend="auto"):
        if backend == "fa3":
            raise RuntimeError("fa3 needs sm90")
        return good(q, k, v, causal=causal, backend=backend) * 0  # wrong

    fi.single_prefill_with_kv_cache = prefill
    rows = []
    ba.run_case(ba.prefill_case(64, 4, 4, 32, False), _attn_ctx(("torch", "flashinfer"),
                                                                {"flashinfer": fi}), rows.append)
    by = {r["impl"]: r for r in rows}
    assert by["flashinfer fa3"]["ms"] is None
    assert by["flashinfer fa3"]["note"] == "failed: RuntimeError: fa3 needs sm90"
    assert by["flashinfer fa2"]["check"] == "failed"
    assert "CHECK FAILED" in by["flashinfer fa2"]["note"]
    assert by["torch sdpa flash"]["check"] == "ok"

    def r(case, impl, ms, design, **kw):
        return {"family": "attention", "case": case, "op": "attention", "shape": [1],
                "impl": impl, "ms": ms, "design": design, "kind": "prefill", **kw}

    a, b, d = "prefill A causal=False", "prefill A causal=True", "decode D"
    rows = [r(a, "xkernels", 1.0, "cp.async", tflops=500.0),
            r(a, "torch sdpa flash", 1.25, "cp.async"),
            r(a, "flashinfer fa3", 0.8, "TMA+wgmma"),
            r(a, "torch sdpa cudnn", 0.5, "TMA+wgmma", check="failed"),
            r(a, "flash_attn", None, "cp.async", note="failed: x"),
            r(b, "xkernels", 0.5, "cp.async"), r(b, "flashinfer fa2", 0.625, "cp.async"),
            r(d, "xkernels", 0.4, "cp.async", kind="decode", gbps=2900.0),
            r(d, "flashinfer decode", 0.5, "cp.async", kind="decode"),
            r(d, "torch sdpa (contiguous)", 0.3, "reference", kind="decode"),
            r("decode E", "xkernels", 0.4, "cp.async", kind="decode")]  # no peer: no ratio
    assert ba.ratios(rows) == {0: (pytest.approx(1.25), pytest.approx(0.8)),
                               5: (pytest.approx(0.8), pytest.approx(0.8)),
                               7: (pytest.approx(0.8), pytest.approx(0.8))}
    text = ba.format_table(rows, copy_gbps=3000.0)
    lines = text.splitlines()
    header = next(line for line in lines if line.startswith("case "))
    for col in ("impl", "design", "TFLOP/s", "GB/s", "%copy", "vs best", "vs cp.async"):
        assert col in header
    row0 = lines[lines.index(header) + 1]
    assert "1.250" in row0 and "0.800" in row0 and "500.0" in row0
    assert "96.7" in text  # 2900 GB/s of a 3000 GB/s copy
    assert "TMA+wgmma" in text and "reference" in text
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(
        "bench_table", Path(__file__).resolve().parents[1] / "benchmarks" / "table.py")
    table = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(table)
    md = table.attention_tables(rows)
    assert "| prefill A causal=False | 500.0 |" in md
    assert "0.800 (torch sdpa flash)" in md and "1.250 (flashinfer fa3)" in md
    assert "torch sdpa (contiguous) (ref)" in md and "CHECK FAILED" in md


@host_only
def test_cli_attention_quick_host(tmp_path, capsys):
    from xkernels import bench_attention as ba

    assert bench.main(["--quick", "--family", "attention", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("xkernels bench: no GPU") and "HOST path" in out
    assert "vs cp.async" in out and out.rstrip().splitlines()[-1].startswith("decode b=4")
    path = tmp_path / _host_file("attention")
    recs = [json.loads(line) for line in path.read_text().splitlines()]
    assert recs[0]["op"] == "copy"
    cases = {c.label: c for c in ba.select_cases(quick=True, gpu=False)}
    impls = {(r["case"], r["impl"]) for r in recs[1:]}
    (pre, dec) = cases
    assert impls == {(pre, "xkernels"), (pre, "torch sdpa flash"), (dec, "xkernels"),
                     (dec, "torch sdpa (contiguous)")}
    for r in recs[1:]:
        assert ATTN_KEYS <= r.keys(), r.keys()
        assert r["check"] == "ok" and r["ms"] > 0 and r["device"] == r["cpu"]["model"], r
        c = cases[r["case"]]
        assert r["shape"] == list(c.q_shape) and r["op"] == c.op
        if c.kind == "prefill":
            assert r["tflops"] == pytest.approx(ba.flops(c) / r["ms"] / 1e9) and r["gbps"] is None
        else:
            assert r["gbps"] == pytest.approx(ba.bytes_moved(c, 2) / r["ms"] / 1e6)


@host_only
def test_cli_attention_xkernels_wrong_is_an_error(monkeypatch, capsys):
    import xkernels.torch as xt

    def wrong(q, k, v, causal=False, *, out=None, **kw):
        return out.zero_()

    monkeypatch.setattr(xt, "attention", wrong)
    assert bench.main(["--quick", "--family", "attention", "--impls", "xkernels"]) == 1
    out = capsys.readouterr().out
    assert "xkernels FAILED" in out and "CHECK FAILED" in out


# ------------------------------------------------------------------------------ --family gemm

GEMM_KEYS = REQUIRED | {"case", "kind", "m", "k", "out_dtype", "check", "calls"}


def test_gemm_accounting():
    """FLOPs and bytes as shared/reference/anchors.md counts them: its (ms, TFLOP/s) pairs."""
    from xkernels import bench_gemm as bg

    for (m, n, k, dt, sc), ms, tf in [
            ((8192, 8192, 8192, "fp16", None), 1.5214, 722.7),
            ((8192, 8192, 8192, "bf16", None), 1.6233, 677.3),
            ((8192, 8192, 8192, "e4m3", "tensor"), 0.8005, 1373.5),
            ((8192, 8192, 8192, "e4m3", "row"), 0.8871, 1239.4),
            ((16384, 8192, 2048, "fp16", None), 0.8835, 622.2),
            ((4096, 4096, 4096, "bf16", None), 0.1836, 748.6)]:
        c = bg.gemm(m, n, k, dt, sc)
        assert bg.flops(c) == 2 * m * n * k
        assert bg.tflops(bg.flops(c), ms) == pytest.approx(tf, abs=0.1), c.label
    dec = bg.gemm(16, 8192, 28672, "bf16")
    assert dec.decode and dec.params()["kind"] == "decode"
    assert bg.bytes_moved(dec) == (16 + 8192) * 28672 * 2 + 16 * 8192 * 2
    fp8 = bg.gemm(1, 8192, 8192, "e4m3", "row")
    assert fp8.out_dtype == "bf16" and bg.bytes_moved(fp8) == (1 + 8192) * 8192 + 8192 * 2
    assert not bg.gemm(128, 8192, 8192, "bf16").decode
    n = 8192 * 8192
    for g, scales in [("tensor", 1), ("row", 8192), ("block", 8192 * 64), ("block2d", 64 * 64)]:
        q = bg.quantize(8192, 8192, g)
        assert bg.bytes_moved(q) == 3 * n + 4 * scales and bg.flops(q) == 0
        assert bg.tflops(bg.flops(q), 0.07) is None
    assert bg.tflops(1, None) is None and bg.tflops(1, 0.0) is None
    assert bg.set_bytes(bg.gemm(8192, 8192, 8192, "bf16")) == 2 * 8192 * 8192 * 2
    l2 = 50 << 20  # every GPU case rotates >= 3 sets, inputs >= 3x the L2
    for c in bg.select_cases():
        sets = bench.n_sets(bg.set_bytes(c), l2, free_bytes=80 << 30)
        assert sets >= 3 and sets * bg.set_bytes(c) >= 3 * l2, c.label


def test_gemm_cases():
    from xkernels import bench_gemm as bg

    full = bg.select_cases()
    labels = [c.label for c in full]
    assert len(full) == 7 + 14 + 30 + 6 + 5 + 8 and len(set(labels)) == len(full)
    for name in ("bfloat16 mm 8192x8192x8192", "float16 mm 8192x8192x8192",  # anchors.md's names
                 "float16 mm 4096x4096x4096", "float16 mm 16384x8192x2048",
                 "fp8e4m3 mm 8192x8192x8192 per-tensor", "fp8e4m3 mm 8192x8192x8192 rowwise",
                 "fp8e4m3 mm 8192x8192x8192 blockwise"):
        assert name in labels
    assert [c.label for c in full if c.sm80] == ["bfloat16 mm 8192x8192x8192"]
    decode = [c for c in full if c.decode]
    assert {(c.m, c.n, c.k, c.dtype, c.scaling) for c in decode} == {
        (m, 8192, k, dt, sc) for m in (1, 16, 64) for k in (8192, 28672)
        for dt, sc in (("bf16", None), ("e4m3", "row"))} | {
        (4, 8192, k, "bf16", None) for k in (8192, 28672)}  # the bulk-copy GEMV's m
    mid = [c for c in full if c.kind == "gemm" and 128 < c.m < 1024]
    assert {(c.m, c.n, c.k, c.dtype, c.scaling) for c in mid} == {
        (m, n, k, "bf16", None) for m in (192, 256, 320, 384, 512, 576)
        for n, k in ((4096, 4096), (6144, 4096), (4096, 14336), (28672, 4096), (8192, 8192))} | {
        (m, 4096, k, "e4m3", "row") for m in (192, 320, 576) for k in (4096, 14336)}
    quant = [c for c in full if c.kind == "quantize"]
    assert {(c.m, c.k, c.scaling) for c in quant} == {
        (m, 8192, g) for m in (8192, 16) for g in bg.GRANULARITIES}
    assert all(c.op == "quantize_fp8" and c.dtype == "bf16" for c in quant)
    assert {c.op for c in full if c.kind == "gemm"} == {"gemm", "gemm_fp8"}
    gated = [c for c in full if c.kind == "gated"]
    assert {(c.m, c.n, c.k) for c in gated} == {(m, 14336, 4096)
                                                for m in (8192, 4096, 128, 4, 1)}
    assert all(c.op == "gemm_gated" and not c.decode for c in gated)
    assert "bfloat16 mm+silu_and_mul 8192x14336x4096" in labels
    assert bg.flops(gated[0]) == 4 * 8192 * 14336 * 4096
    quick = bg.select_cases(quick=True)
    assert {c.kind for c in quick} == {"gemm", "quantize"} and any(c.decode for c in quick)
    assert all(c in full for c in quick)
    host = bg.select_cases(gpu=False)
    assert all(max(c.m, c.n, c.k) <= 512 for c in host) and len(bg.select_cases(True, False)) == 3
    assert {c.scaling for c in host if c.kind == "quantize"} == set(bg.GRANULARITIES)
    assert bg.scale_shape("tensor", 40, 300) == (1,)
    assert bg.scale_shape("row", 40, 300) == (40, 1)
    assert bg.scale_shape("block", 40, 300) == (40, 3)
    assert bg.scale_shape("block2d", 200, 300) == (2, 3)
    sel = bg.selection(bg.gemm(8192, 8, 8, "bf16"))
    assert sel[:16] == list(range(16)) and sel[-16:] == list(range(8176, 8192)) and len(sel) == 48
    assert bg.selection(bg.gemm(16, 8, 8, "bf16")) == list(range(16))


def _gemm_ctx(groups, peers=None, compile_timeout=None):
    return bench.Context(gpu=False, dtype_name="bf16", quick=True, groups=set(groups),
                         peers=peers or {}, copy_gbps=100.0, date="2026-01-01",
                         versions={"xkernels": "0"}, compile_timeout=compile_timeout)


def _spread(m, k, zero_block=True, seed=0):
    """bf16 [m, k], rows of magnitudes 2^-8..2^8, the first 128 x 128 block zero."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=g) * torch.exp2(torch.randint(-8, 9, (m, 1), generator=g))
    if zero_block:
        x[:128, :128] = 0
    return x.to(torch.bfloat16)


@pytest.mark.parametrize("granularity", ["tensor", "row", "block", "block2d"])
def test_gemm_quantize_composite_and_check(granularity):
    """The torch composite quantises as params.h says (x / scale rounded to float32, then to
    e4m3; scale amax / 448, 1 for zeros): its q equals the float64 reference's to the bit, and the
    check passes it; wrong scales, zeroed rows, unwritten outputs and shapes fail."""
    from xkernels import bench_gemm as bg

    case = bg.quantize(200, 384, granularity)  # a partial 128-row tile
    x = _spread(200, 384)
    q, s = bg.quantize_torch(x, granularity)
    assert q.dtype == torch.float8_e4m3fn and tuple(s.shape) == bg.scale_shape(granularity, 200, 384)
    sel = bg.selection(case)
    ref = bg.reference(case, {"x": x}, sel)
    assert bg.check(case, (q, s), sel, ref) is None
    want = ref[1] / bg.expand_scale(ref[0], granularity, 200, 384, sel)
    assert torch.equal(q[sel].double(), want)  # the e4m3 values themselves
    if granularity in ("block", "block2d"):
        assert s.reshape(-1)[0] == 1.0  # the zero block
    assert "scale: relative error" in bg.check(case, (q, s * 1.01), sel, ref)
    bad = q.clone()
    bad[sel[int(ref[1].abs().sum(1).argmax())]] = 0  # the largest checked row
    assert "q: relative error" in bg.check(case, (bad, s), sel, ref)
    assert "non-finite" in bg.check(case, (torch.full_like(q, float("nan")), s), sel, ref)
    assert "scale" in bg.check(case, (q, s.reshape(-1)[:1] if s.numel() > 1 else s.repeat(2)),
                               sel, ref)
    assert "expected (q, scale)" in bg.check(case, q, sel, ref)


@pytest.mark.parametrize("dtype,scaling", [("bf16", None), ("fp16", None), ("e4m3", "tensor"),
                                           ("e4m3", "row"), ("e4m3", "block")])
def test_gemm_inputs_reference_and_check(dtype, scaling):
    """The float64 reference from the dequantised operands (a block scales 1 x 128, b 128 x 128)
    against a float32 product of the same; a wrong column or a NaN fails."""
    from xkernels import bench_gemm as bg

    case = bg.gemm(96, 256, 384, dtype, scaling)
    s = bg.make_set(case, _gemm_ctx(()))
    assert s["out"].dtype == (torch.float16 if dtype == "fp16" else torch.bfloat16)
    a, b = s["a"].float(), s["b"].float()
    if dtype == "e4m3":
        ga, gb = bg.OPERAND_SCALES[scaling]
        assert a.dtype == torch.float32 and s["a"].dtype == torch.float8_e4m3fn
        assert tuple(s["a_scale"].shape) == bg.scale_shape(ga, 96, 384)
        assert tuple(s["b_scale"].shape) == bg.scale_shape(gb, 256, 384)
        a = a * bg.expand_scale(s["a_scale"], ga, 96, 384)
        b = b * bg.expand_scale(s["b_scale"], gb, 256, 384)
    got = (a @ b.t()).to(s["out"].dtype)
    sel = bg.selection(case)
    ref = bg.reference(case, s, sel)
    assert ref.shape == (len(sel), 256)
    assert bg.check(case, got, sel, ref) is None
    wrong = got.clone()
    wrong[:, 3] += 50
    assert "relative error" in bg.check(case, wrong, sel, ref)
    assert "non-finite" in bg.check(case, torch.full_like(got, float("nan")), sel, ref)
    assert "shape" in bg.check(case, got[:, :8], sel, ref)
    poisoned = bg.check_set(case, s)
    assert poisoned["out"].isnan().all() and poisoned["a"] is s["a"]


def _fake_xkernels_gemm(monkeypatch, quantize_out=True):
    """xkernels.torch.gemm, gemm_fp8 and quantize_fp8 with the op table's signatures, in float32
    on the host (the harness is under test, not the kernels)."""
    import xkernels.torch as xt
    from xkernels import bench_gemm as bg

    calls = []

    def gran(scale, rows, cols, second):
        if scale.numel() == 1:
            return "tensor"
        if tuple(scale.shape) == (rows, 1):
            return "row"
        return "block2d" if second else "block"

    def gemm(a, b, bias=None, out_dtype=None, b_layout="NK", num_splits=0, kernel="auto", *,
             out=None):
        calls.append(("gemm", kernel))
        y = (a.float() @ b.float().t()).to(a.dtype)
        return y if out is None else out.copy_(y)

    def gemm_fp8(a, b, a_scale, b_scale, bias=None, out_dtype="bfloat16", num_splits=0,
                 kernel="auto", *, out=None):
        calls.append(("gemm_fp8", kernel))
        (m, k), n = a.shape, b.shape[0]
        ad = a.float() * bg.expand_scale(a_scale, gran(a_scale, m, k, False), m, k)
        bd = b.float() * bg.expand_scale(b_scale, gran(b_scale, n, k, True), n, k)
        y = (ad @ bd.t()).to(torch.bfloat16)
        return y if out is None else out.copy_(y)

    def quantize_fp8(x, granularity="row", *, q=None, scale=None):
        calls.append(("quantize_fp8", q is not None))
        qq, s = bg.quantize_torch(x, granularity)
        if q is None:
            return qq, s
        q.copy_(qq)
        scale.copy_(s.reshape(scale.shape))
        return q, scale

    def quantize_fp8_alloc(x, granularity="row"):
        return quantize_fp8(x, granularity)

    monkeypatch.setattr(xt, "gemm", gemm, raising=False)
    monkeypatch.setattr(xt, "gemm_fp8", gemm_fp8, raising=False)
    monkeypatch.setattr(xt, "quantize_fp8", quantize_fp8 if quantize_out else quantize_fp8_alloc,
                        raising=False)
    return calls


def test_gemm_host_glue(monkeypatch):
    """Every host case through run_case with stand-ins for the xkernels ops: rows, fields, checks,
    the figures from the time; quantize_fp8 without q=/scale= falls back to the allocating call."""
    from xkernels import bench_gemm as bg

    calls = _fake_xkernels_gemm(monkeypatch)
    ctx = _gemm_ctx(("xkernels", "torch"))
    rows = []
    for case in bg.select_cases(gpu=False):
        bg.run_case(case, ctx, rows.append)
    assert not ctx.xkernels_failed
    by = {(r["case"], r["impl"]): r for r in rows}
    assert {i for c, i in by if c == "bfloat16 mm 96x256x384"} == {"xkernels", "torch.matmul",
                                                                 "torch F.linear"}
    assert {i for c, i in by if c == "fp8e4m3 mm 96x256x384 rowwise"} == {"xkernels"}  # CUDA peers
    assert {i for c, i in by if c == "quantize bf16 40x384 block2d"} == {"xkernels", "torch"}
    for r in rows:
        assert GEMM_KEYS <= r.keys(), r.keys()
        assert r["check"] == "ok" and r["ms"] > 0 and r["family"] == "gemm", r
        c = next(c for c in bg.select_cases(gpu=False) if c.label == r["case"])
        assert r["shape"] == list(c.shape) and r["op"] == c.op and r["dtype"] == c.dtype
        if c.kind == "quantize":
            assert r["tflops"] is None and r["scaling"] == c.scaling
            assert r["gbps"] == pytest.approx(bg.bytes_moved(c) / r["ms"] / 1e6)
        else:
            assert r["tflops"] == pytest.approx(bg.flops(c) / r["ms"] / 1e9)
            assert (r["gbps"] is None) == (not c.decode)
        if r["impl"] == "xkernels" and c.kind == "gemm":
            assert r["kernel"] == "auto"
    assert ("quantize_fp8", True) in calls and ("gemm", "auto") in calls
    assert "q=, scale=" in by[("quantize bf16 40x384 row", "xkernels")]["note"]

    _fake_xkernels_gemm(monkeypatch, quantize_out=False)
    rows = []
    bg.run_case(bg.quantize(40, 384, "row"), ctx, rows.append)
    (x,) = [r for r in rows if r["impl"] == "xkernels"]
    assert x["check"] == "ok" and "allocates q and scale" in x["note"]
    assert "TypeError" in x["note"]  # the q=, scale= call, noted


def _fake_scaled_mm(log):
    """torch._scaled_mm as bench_gemm calls it, refusing what PyTorch's CUDA implementation
    refuses (aten/src/ATen/native/cuda/ScaledBlas.cpp): mat2 column-major; per-tensor scales of
    one element; row-wise (M, 1) and (1, N), contiguous; 1x128 scales of a outer-dim-major
    (strides (1, M)), 128x128 scales of b given as the transpose of a row-major (N/128, K/128);
    no fast accumulation with block scales."""
    def scaled_mm(a, b, scale_a, scale_b, bias=None, scale_result=None, out_dtype=None,
                  use_fast_accum=False):
        (m, k), n = a.shape, b.shape[1]
        assert a.stride(1) == 1 and b.stride(0) == 1, "row-major x column-major only"
        kb, nb = -(-k // 128), -(-n // 128)
        sbt = scale_b.t()
        if scale_a.numel() == 1 and scale_b.numel() == 1:
            kind, ga, gb = "tensor", "tensor", "tensor"
        elif tuple(scale_a.shape) == (m, 1) and tuple(sbt.shape) == (n, 1):
            assert scale_a.is_contiguous() and sbt.is_contiguous()
            kind, ga, gb = "row", "row", "row"
        else:
            assert tuple(scale_a.shape) == (m, kb) and scale_a.stride() == (1, m), scale_a.stride()
            assert tuple(sbt.shape) == (nb, kb) and sbt.stride() == (kb, 1), sbt.stride()
            assert not use_fast_accum, "scaled_gemm doesn't support fast accum with blocks"
            kind, ga, gb = "block", "block", "block2d"
        log.append(("scaled_mm", kind, use_fast_accum))
        from xkernels import bench_gemm as bg

        ad = a.float() * bg.expand_scale(scale_a.contiguous(), ga, m, k)
        bd = b.t().float() * bg.expand_scale(sbt.contiguous(), gb, n, k)
        return (ad @ bd.t()).to(out_dtype)

    return scaled_mm


def _fake_flashinfer_gemm(log, blockscale=True):
    """FlashInfer's bmm_fp8 (0.5.3) and fp8_blockscale_gemm_sm90 (0.6.0), with their checks."""
    from xkernels import bench_gemm as bg

    def bmm_fp8(A, B, A_scale, B_scale, dtype, out=None, backend="cublas"):
        assert A.ndim == B.ndim == 3 and B.stride(-2) == 1, "B column-major [b, k, n]"
        assert A_scale.numel() == B_scale.numel() == 1 and backend in ("cublas", "cudnn")
        log.append(("bmm_fp8", backend))
        y = (A[0].float() @ B[0].float() * A_scale * B_scale).to(dtype).unsqueeze(0)
        return y if out is None else out.copy_(y)

    def fp8_blockscale_gemm_sm90(input, weight, input_scale=None, weight_scale=None, out=None,
                                 out_dtype=None):
        (m, k), n = input.shape, weight.shape[0]
        assert tuple(input_scale.shape) == (m, k // 128)
        assert tuple(weight_scale.shape) == (-(-n // 128), k // 128) and n % 64 == 0
        log.append(("blockscale",))
        ad = input.float() * bg.expand_scale(input_scale, "block", m, k)
        bd = weight.float() * bg.expand_scale(weight_scale, "block2d", n, k)
        y = (ad @ bd.t()).to(torch.bfloat16)
        return y if out is None else out.copy_(y)

    gemm = types.SimpleNamespace(fp8_blockscale_gemm_sm90=fp8_blockscale_gemm_sm90)
    return types.SimpleNamespace(bmm_fp8=bmm_fp8, **({"gemm": gemm} if blockscale else {}))


def test_gemm_cuda_peer_glue_on_stand_ins(monkeypatch, capsys):
    """The CUDA-only peers' calls (torch._scaled_mm's scale layouts, FlashInfer's bmm_fp8 and
    block-scale GEMM) run against stand-ins that refuse what the real ones refuse, and pass their
    checks; the rows carry their accumulation."""
    from xkernels import bench_gemm as bg

    log = []
    monkeypatch.setattr(torch, "_scaled_mm", _fake_scaled_mm(log))
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: object() if name == "cudnn" else _find_spec(name, *a))
    fi = _fake_flashinfer_gemm(log)
    ctx = _gemm_ctx(("torch", "flashinfer"))
    names = {}
    for scaling in ("tensor", "row", "block"):
        case = bg.gemm(96, 256, 384, "e4m3", scaling)
        sets = [bg.make_set(case, ctx)]
        sel = bg.selection(case)
        ref = bg.reference(case, sets[0], sel)
        impls = bg._torch_impls(case, gpu=True) + bg._flashinfer_impls(case, fi)
        for impl in impls:
            r, _ = bg.prepare(impl, case, sets, bg.check_set(case, sets[0]), sel, ref, ctx)
            assert isinstance(r, bench._Timed) and r.check == "ok", (impl.name, r)
            names[(scaling, impl.name)] = impl.accum
    assert names == {
        ("tensor", "torch._scaled_mm"): "fp32", ("tensor", "torch._scaled_mm fast accum"): "fast",
        ("tensor", "flashinfer bmm_fp8 cublas"): "fast", ("tensor", "flashinfer bmm_fp8 cudnn"): "",
        ("row", "torch._scaled_mm"): "fp32", ("row", "torch._scaled_mm fast accum"): "fast",
        ("block", "torch._scaled_mm"): "fp32",
        ("block", "flashinfer fp8_blockscale_gemm_sm90"): "fp32"}
    assert {e[:2] for e in log} >= {("scaled_mm", "tensor"), ("scaled_mm", "row"),
                                    ("scaled_mm", "block"), ("bmm_fp8", "cudnn"), ("blockscale",)}
    # FlashInfer 0.5.3: no block-scale GEMM on sm_90 (no row, a note); no peer for rows
    assert bg._flashinfer_impls(bg.gemm(96, 256, 384, "e4m3", "block"),
                                _fake_flashinfer_gemm(log, blockscale=False)) == []
    assert "fp8_blockscale_gemm_sm90 arrived in 0.6.0" in capsys.readouterr().err
    assert bg._flashinfer_impls(bg.gemm(96, 256, 384, "e4m3", "row"), fi) == []
    assert bg._flashinfer_impls(bg.gemm(96, 256, 384, "bf16"), fi) == []
    (failed,) = bg._flashinfer_impls(bg.gemm(9, 256, 384, "e4m3", "tensor"),
                                     ImportError("no libcuda"))
    with pytest.raises(RuntimeError, match="import: ImportError"):
        failed.bind({})


_find_spec = importlib.util.find_spec


def test_gemm_ratios_and_table():
    """vs best over every peer that ran and passed; vs fp32 acc without the fast-accumulation
    peers; quantize rows show GB/s and %copy."""
    from xkernels import bench_gemm as bg

    def r(case, impl, ms, **kw):
        return {"family": "gemm", "case": case, "op": "gemm_fp8", "shape": [1], "impl": impl,
                "ms": ms, **kw}

    a, q = "fp8e4m3 mm 8192x8192x8192 per-tensor", "quantize bf16 8192x8192 row"
    rows = [r(a, "xkernels", 1.0, tflops=1100.0), r(a, "torch._scaled_mm", 1.25, accum="fp32"),
            r(a, "torch._scaled_mm fast accum", 0.8, accum="fast"),
            r(a, "flashinfer bmm_fp8 cudnn", 0.5, check="failed"),
            r(a, "torch.compile max-autotune", None, note="failed: compile took more than 1 s"),
            r(a, "xkernels sm80", 2.0),
            r(q, "xkernels", 0.07, gbps=2876.0), r(q, "torch", 0.14, gbps=1438.0),
            r("bfloat16 mm 1x2x3", "xkernels", 0.4)]  # no peer: no ratio
    assert bg.ratios(rows) == {0: (pytest.approx(1.25), pytest.approx(0.8)),
                               5: (pytest.approx(2.5), pytest.approx(1.6)),
                               6: (pytest.approx(0.5), pytest.approx(0.5))}
    text = bg.format_table(rows, copy_gbps=3000.0)
    lines = text.splitlines()
    header = next(line for line in lines if line.startswith("case "))
    for col in ("impl", "TFLOP/s", "GB/s", "%copy", "vs best", "vs fp32 acc"):
        assert col in header
    row0 = lines[lines.index(header) + 1]
    assert "1.250" in row0 and "0.800" in row0 and "1100.0" in row0
    assert "95.9" in text  # 2876 GB/s of a 3000 GB/s copy
    assert "failed: compile took more than" in text


def test_gemm_compile_time_limit(monkeypatch):
    """A compile that outlasts --compile-timeout is abandoned in its first call (the row says so);
    --compile-timeout 0 leaves torch.compile out."""
    from xkernels import bench_gemm as bg

    t0 = time.perf_counter()
    with pytest.raises(bench.CompileTimeout), bench.time_limit(0.2):
        time.sleep(5)
    assert time.perf_counter() - t0 < 2
    with bench.time_limit(None):
        time.sleep(0.01)
    case = bg.quantize(40, 384, "row")
    ctx = _gemm_ctx(("torch.compile",), compile_timeout=0.2)

    def slow(s):
        def call():
            time.sleep(5)
        return call

    sets = [bg.make_set(case, ctx)]
    sel = bg.selection(case)
    impl = bg.Impl("torch.compile", slow, compiled=True)
    row, _ = bg.prepare(impl, case, sets, sets[0], sel, bg.reference(case, sets[0], sel), ctx)
    assert row["ms"] is None and "--compile-timeout" in row["note"]
    assert [i.name for i in bg.impls_for(case, ctx)] == ["torch.compile"]
    assert bg.impls_for(case, _gemm_ctx(("torch.compile",), compile_timeout=0)) == []


@host_only
def test_cli_gemm_quick_host(monkeypatch, tmp_path, capsys):
    from xkernels import bench_gemm as bg

    _fake_xkernels_gemm(monkeypatch)
    assert bench.main(["--quick", "--family", "gemm", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("xkernels bench: no GPU") and "HOST path" in out
    assert "vs fp32 acc" in out and out.rstrip().splitlines()[-1].startswith("quantize bf16")
    recs = [json.loads(line) for line in (tmp_path / _host_file("gemm")).read_text()
            .splitlines()]
    assert recs[0]["op"] == "copy"
    cases = {c.label for c in bg.select_cases(quick=True, gpu=False)}
    assert {r["case"] for r in recs[1:]} == cases
    for r in recs[1:]:
        assert GEMM_KEYS <= r.keys(), r.keys()
        assert r["check"] == "ok" and r["ms"] > 0 and r["device"] == r["cpu"]["model"], r


@host_only
def test_cli_gemm_xkernels_wrong_is_an_error(monkeypatch, capsys):
    import xkernels.torch as xt

    _fake_xkernels_gemm(monkeypatch)

    def wrong(a, b, bias=None, out_dtype=None, b_layout="NK", num_splits=0, kernel="auto", *,
              out=None):
        return out.zero_()

    monkeypatch.setattr(xt, "gemm", wrong)
    assert bench.main(["--quick", "--family", "gemm", "--impls", "xkernels"]) == 1
    out = capsys.readouterr().out
    assert "xkernels FAILED" in out and "CHECK FAILED" in out


# ------------------------------------------------------------------------------ --family rope

ROPE_KEYS = REQUIRED | {"case", "tokens", "num_qo_heads", "num_kv_heads", "head_dim", "rope",
                        "check", "calls"}


def test_rope_cases_and_accounting():
    from xkernels import bench_rope as br

    cases = br.select_cases()
    llama = [c for c in cases if c.name == "llama3"]
    assert [c.tokens for c in llama] == [1, 128, 4096, 32768]
    assert all((c.num_qo_heads, c.num_kv_heads, c.head_dim) == (32, 8, 128) for c in cases)
    assert {c.op for c in cases} == {"apply_rope", "qk_norm_rope"}
    c = llama[-1]
    # q and k (40 heads x 128) read and written, bf16, and 4-byte positions
    assert br.bytes_moved(c, 2) == 2 * 32768 * 40 * 128 * 2 + 4 * 32768
    assert br.set_bytes(c, 2) == 32768 * 48 * 128 * 2 + 4 * 32768
    assert [c.tokens for c in br.select_cases(quick=True) if c.name == "llama3"] == [1, 4096]
    assert all(c.tokens <= 64 for c in br.select_cases(gpu=False))


def _fake_flashinfer_rope(log):
    """Stand-ins with FlashInfer 0.5.3's RoPE signatures, computing through the float64
    reference (in place)."""
    from xkernels import reference

    def rotate(q, k, pos, **kw):
        rq, rk = reference.apply_rope(q.double().numpy(), k.double().numpy(), pos.numpy(), **kw)
        q.copy_(torch.from_numpy(rq))
        k.copy_(torch.from_numpy(rk))

    def apply_rope_pos_ids_inplace(q, k, pos_ids, rotary_dim=None, interleave=False,
                                   rope_scale=1.0, rope_theta=1e4):
        log.append("pos_ids")
        rotate(q, k, pos_ids, theta=rope_theta, interleaved=interleave)

    def apply_llama31_rope_pos_ids_inplace(q, k, pos_ids, rotary_dim=None, interleave=False,
                                           rope_scale=8, rope_theta=5e5, low_freq_factor=1,
                                           high_freq_factor=4, old_context_len=8192):
        log.append("llama31")
        rotate(q, k, pos_ids, theta=rope_theta, interleaved=interleave, rope_scale=rope_scale,
               low_freq_factor=low_freq_factor, high_freq_factor=high_freq_factor,
               original_max_position=old_context_len)

    def apply_rope_with_cos_sin_cache_inplace(positions, query, key, head_size, cos_sin_cache,
                                              is_neox=True):
        log.append("cache")
        assert query.dim() == 2 and positions.dtype == torch.int64 and is_neox
        half = cos_sin_cache.shape[1] // 2
        cos, sin = (cos_sin_cache[positions][:, None, :half].double(),
                    cos_sin_cache[positions][:, None, half:].double())
        for x in (query, key):
            v = x.view(x.shape[0], -1, head_size).double()
            a, b = v[..., :half], v[..., half:]
            x.view(x.shape[0], -1, head_size).copy_(torch.cat((a * cos - b * sin,
                                                                b * cos + a * sin), -1))

    return types.SimpleNamespace(
        apply_rope_pos_ids_inplace=apply_rope_pos_ids_inplace,
        apply_llama31_rope_pos_ids_inplace=apply_llama31_rope_pos_ids_inplace,
        apply_rope_with_cos_sin_cache_inplace=apply_rope_with_cos_sin_cache_inplace)


def test_rope_peer_glue_on_stand_ins():
    from xkernels import bench_rope as br

    log: list[str] = []
    ctx = bench.Context(gpu=False, dtype_name="bf16", quick=True,
                        groups={"xkernels", "torch", "flashinfer"},
                        peers={"flashinfer": _fake_flashinfer_rope(log)})
    rows = []
    for case in br.select_cases(quick=True, gpu=False):
        br.run_case(case, ctx, rows.append)
    assert {"pos_ids", "llama31", "cache"} <= set(log)
    by = {(r["case"], r["impl"]): r for r in rows}
    for (case, impl), r in by.items():
        assert r["check"] == "ok" and r["ms"] > 0, (case, impl, r["note"])
    assert not any(i.startswith("flashinfer") for c, i in by if c.startswith("qk_norm_rope"))
    md = br.format_table(rows)
    assert "flashinfer cos_sin_cache" in md and "vs best" in md


@host_only
def test_cli_rope_quick_host(tmp_path, capsys):
    from xkernels import bench_rope as br

    assert bench.main(["--quick", "--family", "rope", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("xkernels bench: no GPU") and "[rope]" in out
    recs = [json.loads(line) for line in (tmp_path / _host_file("rope")).read_text().splitlines()]
    assert recs[0]["op"] == "copy"
    cases = {c.label: c for c in br.select_cases(quick=True, gpu=False)}
    assert {r["case"] for r in recs[1:]} == set(cases)
    for r in recs[1:]:
        assert ROPE_KEYS <= r.keys(), r.keys()
        assert r["check"] == "ok" and r["ms"] > 0 and r["device"] == r["cpu"]["model"], r
        c = cases[r["case"]]
        assert r["gbps"] == pytest.approx(br.bytes_moved(c, 2) / r["ms"] / 1e6)


@host_only
def test_cli_rope_xkernels_wrong_is_an_error(monkeypatch, capsys):
    import xkernels.torch as xt

    monkeypatch.setattr(xt, "apply_rope", lambda q, k, pos, **kw: q.zero_())
    assert bench.main(["--quick", "--family", "rope", "--impls", "xkernels"]) == 1
    out = capsys.readouterr().out
    assert "xkernels FAILED" in out and "CHECK FAILED" in out
