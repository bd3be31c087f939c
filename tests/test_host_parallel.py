"""The host path's threads (bindings/host/parallel.h): calls big enough to be split over threads
give the bits of the single-threaded path, for any thread count, and stay within the float64
reference's tolerance; odd sizes, long rows, strided rows and flat tensors included."""

import json
import multiprocessing
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
import xkernels.numpy as xn
import xkernels.torch as xt
from cases import DTYPES, check
from xkernels.ops import ROW_OPS

# Big enough that the host splits them (parallel.h: ~64K elements per thread): many rows, few
# long rows (elementwise ops cut them into column chunks), odd widths.
BIG = [(1024, 513), (3, 70001), (7, 12289)]


@pytest.mark.parametrize("shape", BIG, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("op", sorted(ROW_OPS))
def test_threaded_matches_reference(op, dtype, shape):
    check(op, shape, dtype, "cpu")


@pytest.mark.parametrize("op", sorted(ROW_OPS))
def test_threaded_strided_rows_match_reference(op):
    check(op, (2048, 129), torch.bfloat16, "cpu", layout="strided")
    check(op, (64, 16, 96), torch.float16, "cpu", layout="heads")


def _row_fn(op, x):
    g = torch.Generator().manual_seed(1)
    w = torch.randn(x.shape[-1], generator=g).to(x.dtype)
    return {
        "rmsnorm": lambda t: xt.rmsnorm(t, w, 1e-6),
        "gemma_rmsnorm": lambda t: xt.gemma_rmsnorm(t, w, 1e-6),
        "layernorm": lambda t: xt.layernorm(t, w, w, 1e-5),
        "softmax": lambda t: xt.softmax(t, 0.7),
        "silu_and_mul": xt.silu_and_mul,
        "gelu_and_mul": xt.gelu_and_mul,
        "gelu_tanh_and_mul": xt.gelu_tanh_and_mul,
        "add_bias_gelu": lambda t: xt.add_bias_gelu(t, w, "none"),
        "silu": xt.silu,
    }[op]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("op", ["rmsnorm", "gemma_rmsnorm", "layernorm", "softmax",
                                "silu_and_mul", "gelu_and_mul", "gelu_tanh_and_mul",
                                "add_bias_gelu", "silu"])
def test_threaded_call_gives_the_bits_of_row_by_row_calls(op, dtype):
    # One call over 600 rows runs on every thread; a call on one short row never leaves the
    # caller's thread. Each row alone must come out the same.
    x = torch.randn(600, 1030, generator=torch.Generator().manual_seed(0)).to(dtype)
    fn = _row_fn(op, x)
    whole = fn(x)
    rows = torch.cat([fn(x[i : i + 1]) for i in range(0, x.shape[0], 37)])
    bits = torch.int32 if dtype == torch.float32 else torch.int16
    assert torch.equal(whole[::37].view(bits), rows.view(bits))


def test_threaded_fused_add_rmsnorm_in_place_matches_row_by_row():
    g = torch.Generator().manual_seed(2)
    x, r = (torch.randn(777, 1031, generator=g).to(torch.bfloat16) for _ in range(2))
    w = torch.randn(1031, generator=g).to(torch.bfloat16)
    x1, r1 = x.clone(), r.clone()
    xt.fused_add_rmsnorm(x1, r1, w, 1e-6)
    for i in range(0, 777, 50):
        xi, ri = x[i : i + 1].clone(), r[i : i + 1].clone()
        xt.fused_add_rmsnorm(xi, ri, w, 1e-6)
        assert torch.equal(xi.view(torch.int16), x1[i : i + 1].view(torch.int16))
        assert torch.equal(ri.view(torch.int16), r1[i : i + 1].view(torch.int16))


_DIGEST = textwrap.dedent("""
    import hashlib, json, sys, torch
    import xkernels.torch as xt
    g = torch.Generator().manual_seed(0)
    out = {}
    for dt in (torch.float16, torch.bfloat16, torch.float32):
        x = torch.randn(301, 4099, generator=g).to(dt)
        w = torch.randn(4099, generator=g).to(dt)
        flat = torch.randn(300007, generator=g).to(dt)
        wide = torch.randn(5, 2 * 33331 + 26, generator=g).to(dt)[:, : 2 * 33331]
        r = torch.randn(301, 4099, generator=g).to(dt)
        ys = [xt.rmsnorm(x, w, 1e-6), xt.layernorm(x, w, w, 1e-5), xt.softmax(x, 1.3),
              xt.silu_and_mul(wide), xt.gelu_and_mul(wide), xt.gelu_tanh_and_mul(wide),
              xt.gelu(flat), xt.add_bias_gelu(x, w, "tanh"), xt.mul_add(flat, flat, flat)]
        x2, r2 = x.clone(), r.clone()
        xt.fused_add_rmsnorm(x2, r2, w, 1e-6)
        ys += [x2, r2]
        out[str(dt)] = [hashlib.sha256(y.contiguous().view(torch.uint8).numpy().tobytes())
                        .hexdigest() for y in ys]
        again = xt.softmax(x, 1.3)  # the pool, started, reused
        assert torch.equal(again.view(torch.uint8), ys[2].view(torch.uint8))
    json.dump(out, sys.stdout)
""")


def _digest(threads: int) -> dict:
    env = dict(os.environ, XKERNELS_HOST_THREADS=str(threads))
    res = subprocess.run([sys.executable, "-c", _DIGEST], env=env, capture_output=True, text=True,
                         timeout=600, check=False)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout)


def test_same_bits_for_any_thread_count():
    # 1: every call on the caller's thread; 3 and 7: more threads than this machine may have
    # cores, and splits that do not divide the rows or the chunks evenly.
    one = _digest(1)
    for n in (3, 7):
        assert _digest(n) == one, f"XKERNELS_HOST_THREADS={n} changed the bits"


def _big_rmsnorm(_=None):
    # NumPy, not torch: torch's OpenMP threads do not survive a fork (libgomp hangs in the child)
    x = np.random.default_rng(3).standard_normal((2048, 1024), dtype=np.float32)
    return xn.rmsnorm(x, np.ones(1024, np.float32), 1e-6)


def test_forked_child_gets_its_own_threads():
    # The parent's pool is running; a forked child has none of its threads and must start anew
    # (a child that waited on the parent's workers would hang).
    want = _big_rmsnorm()
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(2) as pool:
        got = pool.map_async(_big_rmsnorm, range(2)).get(timeout=120)
    assert all(np.array_equal(g, want) for g in got)
