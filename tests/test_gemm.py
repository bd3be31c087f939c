"""The GEMM ops (gemm, gemm_fp8, quantize_fp8) against their float64 references
(xkernels.reference): the host path on small shapes (runs everywhere), argument validation, and
the CUDA kernels on shapes that reach every tile and split-K path (skipped without a GPU). Inputs,
calls on poisoned outputs and the tolerances (with their justification): tests/gemm_cases.py.

Adapter contracts (opcheck, torch.compile, the same bits from every framework on the host, errors
from JAX): test_gemm_adapters.py; here the numbers."""

from __future__ import annotations

import functools
import subprocess
import tempfile
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import torch
import xkernels.numpy as xn
import xkernels.torch as xt
from conftest import gpu, needs_cupy, needs_jax_gpu
from gemm_cases import (
    DTYPES16,
    F8,
    Case,
    as_float64,
    as_tuple,
    assert_close,
    bits,
    call,
    check,
    dtype_id,
    e4m3,
    fp8_case,
    from_numpy,
    gated_case,
    gemm_case,
    quantize_input,
    quantize_reference,
    reference,
    scales,
    seed_of,
    strided,
    to_numpy,
    tolerance,
)

CPU = "cpu"
DT_IDS = [dtype_id(d) for d in DTYPES16]
NP_F8 = np.dtype(ml_dtypes.float8_e4m3fn)

# ================================================================== host path
#
# m = 1, 7, 64, 100, 1000 rows (100: the 128 x 128 tiles of 64 < m <= 128); n and k multiples of
# 8 (16 for e4m3) but of no tile (n 200, k 328: 128- and 64-wide tiles both end partial; e4m3 n
# 208, k 336: the 128-blocks of the scales too). m 100 and 1000 keep n and k small on the host
# (136 x 264 and 72 x 136; e4m3 144 x 272, 80 x 144) so that it stays quick; the GPU runs them at
# 200 x 328.

HOST_NK = {1: (200, 328), 7: (200, 328), 64: (200, 328), 100: (136, 264), 1000: (72, 136)}
HOST_NK8 = {1: (208, 336), 7: (208, 336), 64: (208, 336), 100: (144, 272), 1000: (80, 144)}

ROOT = Path(__file__).resolve().parents[1]

GEMM_VARIANTS = {
    "plain": {},
    "bias": {"bias": "a"},
    "bias-f32": {"bias": "float32"},
    "out-f32-bias": {"out_dtype": "float32", "bias": "a"},
    "kn": {"b_layout": "KN"},
    "kn-out-f32-bias-f32": {"b_layout": "KN", "out_dtype": "float32", "bias": "float32"},
    "strided": {"layout": "strided", "bias": "a"},
    "lead": {"layout": "lead"},
    "lead-strided-out-f32": {"layout": "lead-strided", "out_dtype": "float32"},
    "splits4": {"num_splits": 4, "bias": "float32"},
    "splits1-sm90": {"num_splits": 1, "kernel": "sm90"},  # the host takes both and ignores them
}


@pytest.mark.parametrize("variant", list(GEMM_VARIANTS))
@pytest.mark.parametrize("m", [1, 7, 64, 100, 1000])
@pytest.mark.parametrize("dtype", DTYPES16, ids=DT_IDS)
def test_host_gemm(dtype, m, variant):
    n, k = HOST_NK[m]
    check(gemm_case(m, n, k, dtype, CPU, seed_of("gemm", dtype, m, variant),
                    **GEMM_VARIANTS[variant]))


# The host's packed path (m >= 32: b's panel packed k-major, 8 x 32 sums in registers, edge rows
# and columns in narrower blocks) across threads (m * n * k past 1e7): 300 rows (9 blocks of 32,
# the last 12 rows; 8-row blocks and 4 single rows), n 520 (8 panels of 64 and one of 8 columns),
# k 1000 (no multiple of 16: the packing's last 16 x 16 blocks are partial), both b layouts, e4m3
# block scales (b packed in 16-value runs within its 128-blocks).
@pytest.mark.parametrize("kw", [{}, {"b_layout": "KN", "bias": "a"}, {"out_dtype": "float32"}],
                         ids=["nk", "kn-bias", "out-f32"])
def test_host_gemm_packed(kw):
    check(gemm_case(300, 520, 1000, torch.bfloat16, CPU, seed_of("packed", str(kw)), **kw))


# Past k 4096 a call's panels of b come from per-call buffers, one per thread that may run at once
# (below, each thread keeps its own): decode rows (dot products, k 4104 leaving 8 products past the
# last 16) and the packed path (m 40), several panels per thread.
@pytest.mark.parametrize("m", [3, 40])
def test_host_gemm_long_k(m):
    check(gemm_case(m, 200, 4104, torch.bfloat16, CPU, seed_of("long-k", m), bias="a"))


def test_host_gemm_packed_fp8_block():
    check(fp8_case(300, 528, 1008, CPU, seed_of("packed8"), a_scale="block", b_scale="block"))


# gemm_gated: act(a @ gate^T + bias) * (a @ up^T + bias) for b [2n, k]; n as gemm's (200 outputs:
# 400 rows of b, no tile's multiple)
GATED_VARIANTS = {
    "plain": {},
    "bias": {"bias": "a"},
    "gelu-bias-f32": {"act": "gelu", "bias": "float32"},
    "gelu_tanh-out-f32": {"act": "gelu_tanh", "out_dtype": "float32", "bias": "a"},
    "strided": {"layout": "strided", "bias": "a"},
    "lead-splits3": {"layout": "lead", "num_splits": 3},
}


@pytest.mark.parametrize("variant", list(GATED_VARIANTS))
@pytest.mark.parametrize("m", [1, 7, 100])
@pytest.mark.parametrize("dtype", DTYPES16, ids=DT_IDS)
def test_host_gemm_gated(dtype, m, variant):
    n, k = HOST_NK[m]
    check(gated_case(m, n, k, dtype, CPU, seed_of("gated", dtype, m, variant),
                     **GATED_VARIANTS[variant]))


# a_scale / b_scale kinds (gemm_cases.a_scale_shape): every kind, every mix allowed, every shape
FP8_VARIANTS = {
    "tensor/tensor": {"a_scale": "tensor", "b_scale": "tensor"},
    "tensor1/tensor1-out-f32": {"a_scale": "tensor1", "b_scale": "tensor1",
                                "out_dtype": "float32"},
    "row/row-bias": {"a_scale": "row", "b_scale": "row", "bias": "out"},
    "row1/row1-f16-bias-f32": {"a_scale": "row1", "b_scale": "row1", "out_dtype": "float16",
                               "bias": "float32"},
    "tensor/row": {"a_scale": "tensor", "b_scale": "row1"},
    "row/tensor-out-f32-bias": {"a_scale": "row", "b_scale": "tensor1", "out_dtype": "float32",
                                "bias": "out"},
    "block/block": {"a_scale": "block", "b_scale": "block"},
    "block/block-bias-f16": {"a_scale": "block", "b_scale": "block", "out_dtype": "float16",
                             "bias": "out"},
    "lead-row": {"a_scale": "row-lead", "b_scale": "row", "layout": "lead"},
    "lead-block-strided": {"a_scale": "block-lead", "b_scale": "block",
                           "layout": "lead-strided", "bias": "float32"},
    "strided-row-splits3": {"a_scale": "row", "b_scale": "tensor", "layout": "strided",
                            "num_splits": 3},
}


@pytest.mark.parametrize("variant", list(FP8_VARIANTS))
@pytest.mark.parametrize("m", [1, 7, 64, 100, 1000])
def test_host_gemm_fp8(m, variant):
    n, k = HOST_NK8[m]
    check(fp8_case(m, n, k, CPU, seed_of("fp8", m, variant), **FP8_VARIANTS[variant]))


@pytest.mark.parametrize("op", ["gemm", "gemm_fp8"])
def test_host_strided_output(op):
    """out given as a view of a padded buffer: written through its row pitch, the padding left."""
    if op == "gemm":
        case = gemm_case(7, 200, 328, torch.bfloat16, CPU, seed_of(op, "out"), bias="a")
    else:
        case = fp8_case(7, 208, 336, CPU, seed_of(op, "out"), a_scale="block", b_scale="block")
    check(case, out_layout="strided")


def test_host_allocated_output_matches_given_output():
    case = gemm_case(64, 200, 328, torch.float16, CPU, seed_of("alloc"), bias="float32")
    given = call(case)
    got = xt.gemm(*case.args(), **case.attrs)
    assert got.shape == given.shape and got.dtype == given.dtype
    assert torch.equal(bits(got), bits(given))
    f32 = xt.gemm(*case.args(), out_dtype=torch.float32)
    assert f32.dtype == torch.float32 and f32.shape == (64, 200)


def test_host_num_splits_and_kernel_are_ignored_on_the_host():
    """num_splits and kernel only shape the GPU's work: on the host every value gives the same
    bits."""
    case = gemm_case(7, 200, 328, torch.bfloat16, CPU, seed_of("splits"), bias="a")
    want = xt.gemm(*case.args())
    for kw in ({"num_splits": 1}, {"num_splits": 5}, {"kernel": "sm80"}, {"kernel": "sm90"},
               {"num_splits": 65535, "kernel": "sm90"}):
        assert torch.equal(bits(xt.gemm(*case.args(), **kw)), bits(want)), kw


# ------------------------------------------------------------------ empty shapes


@pytest.mark.parametrize("op", ["gemm", "gemm_fp8"])
def test_host_empty_m_and_k(op):
    """m = 0: an empty output (nothing written, nothing read). k = 0: the product of an empty
    sum, out = bias (or zeros)."""
    gen = torch.Generator().manual_seed(seed_of("empty", op))
    if op == "gemm":
        dt = torch.bfloat16

        def run(m, k, bias):
            a = torch.randn(m, k, generator=gen).to(dt)
            b = torch.randn(16, k, generator=gen).to(dt)
            return xt.gemm(a, b, bias), bias
    else:
        dt = torch.bfloat16

        def run(m, k, bias):
            a, b = e4m3((m, k), CPU, gen), e4m3((16, k), CPU, gen)
            return xt.gemm_fp8(a, b, scales((), CPU, gen), scales((16,), CPU, gen), bias), bias

    out, _ = run(0, 32, None)
    assert out.shape == (0, 16) and out.dtype == dt
    bias = torch.randn(16, generator=gen).to(dt)
    out, _ = run(5, 0, bias)
    assert torch.equal(bits(out), bits(bias.expand(5, 16)))
    out, _ = run(5, 0, None)
    assert (out == 0).all() and not out.isnan().any()
    out, _ = run(0, 0, None)
    assert out.shape == (0, 16)


# ------------------------------------------------------------------ quantize_fp8

QUANT_SHAPES = {
    "tensor": [(1, 300), (7, 100), (3, 5, 300), (300,), (130, 257)],
    "row": [(1, 300), (7, 100), (3, 5, 300), (300,), (130, 1)],
    "block": [(1, 300), (7, 100), (3, 5, 300), (300,), (130, 128)],
    "block2d": [(300, 200), (7, 300), (128, 128), (129, 129), (1, 1)],
}
QUANT_CASES = [(g, s) for g, shapes in QUANT_SHAPES.items() for s in shapes]


@pytest.mark.parametrize("dtype", [*DTYPES16, torch.float32], ids=[*DT_IDS, "float32"])
@pytest.mark.parametrize("granularity,shape", QUANT_CASES,
                         ids=[f"{g}-{'x'.join(map(str, s))}" for g, s in QUANT_CASES])
def test_host_quantize_fp8(granularity, shape, dtype):
    """The same bits as the reference: scales to the float32 bit, q to the e4m3 bit (rows of
    zeros included: scale 1, q 0)."""
    x = quantize_input(shape, dtype, CPU, seed_of("quant", granularity, shape, dtype),
                       zero_rows=1 if len(shape) > 1 and shape[0] > 1 else 0)
    q, s = xt.quantize_fp8(x, granularity)
    want_q, want_s = quantize_reference(x, granularity)
    assert q.dtype == F8 and q.shape == x.shape
    assert s.dtype == torch.float32 and s.shape == want_s.shape
    assert np.array_equal(s.numpy().view(np.uint32), want_s.view(np.uint32))
    assert np.array_equal(bits(q).numpy(), want_q)


def test_host_e4m3_rounding_is_exact():
    """Every e4m3 value, every midpoint between neighbours and the float32 values either side of
    it, the subnormal boundaries and a dense sweep: with amax 448 the scale is 1 and q is x
    rounded to nearest e4m3, ties to even (ml_dtypes' rounding, the reference's)."""
    vals = np.unique(np.arange(256, dtype=np.uint8).view(NP_F8).astype(np.float32))
    vals = vals[np.isfinite(vals)]
    mids = ((vals[:-1].astype(np.float64) + vals[1:]) / 2).astype(np.float32)
    x = np.concatenate([vals, mids, np.nextafter(mids, np.float32(np.inf)),
                        np.nextafter(mids, np.float32(-np.inf)),
                        np.linspace(-448, 448, 100001, dtype=np.float32),
                        np.float32([2.0 ** -10, 2.0 ** -11, 3 * 2.0 ** -11, -(2.0 ** -10), 1e-30,
                                    -1e-30, 0.0, -0.0, 448.0])])
    q, s = xn.quantize_fp8(x, "tensor")
    assert s.tolist() == [1.0]
    want = np.clip(x, -448, 448).astype(NP_F8)
    assert np.array_equal(q.view(np.uint8), want.view(np.uint8))


def test_host_quantize_saturates_and_keeps_signs():
    """q = x / scale saturates at +-448: a float16 row whose amax rounds the scale down lands a
    hair above 448 and must give 448, not NaN."""
    x = torch.tensor([[448.0, -448.0, 1.0, -0.0, 0.0]], dtype=torch.float32)
    q, s = xt.quantize_fp8(x, "row")
    assert s.item() == 1.0
    assert bits(q).tolist() == [[0x7E, 0xFE, 0x38, 0x80, 0x00]]
    y = torch.tensor([[65504.0, -1.0]], dtype=torch.float16)  # scale 65504/448 = 146.21...
    q, s = xt.quantize_fp8(y, "tensor")
    assert bits(q).tolist()[0][0] == 0x7E and (s.item() * 448) <= 65504 * (1 + 2 ** -23)
    # amax / 448 underflows to 0 (float32 subnormals): scale 1, as for a group of zeros
    z = torch.tensor([[1e-44, -1e-44], [1.0, 0.5]], dtype=torch.float32)
    q, s = xt.quantize_fp8(z, "row")
    assert s[0].item() == 1.0 and bits(q).tolist()[0] == [0x00, 0x80]
    want_q, want_s = quantize_reference(z, "row")
    assert np.array_equal(bits(q).numpy(), want_q) and np.array_equal(s.numpy(), want_s)


def test_host_quantize_strided_and_given_outputs():
    """x a view of a wider tensor's columns; q and scale given (q a strided view too)."""
    x = strided(quantize_input((7, 300), torch.bfloat16, CPU, seed_of("qs")), pad=20)
    q_buf = torch.zeros(7, 332, dtype=torch.uint8)
    q = q_buf[:, 16:316].view(F8)
    s = torch.full((7, 3), float("nan"))
    res = xt.quantize_fp8(x, "block", q=q, scale=s)
    assert res[0] is q and res[1] is s
    want_q, want_s = quantize_reference(x, "block")
    assert np.array_equal(bits(q).numpy(), want_q) and np.array_equal(s.numpy(), want_s)
    assert (q_buf[:, :16] == 0).all() and (q_buf[:, 316:] == 0).all()


def test_host_quantize_empty():
    q, s = xt.quantize_fp8(torch.zeros(0, 300), "block")
    assert q.shape == (0, 300) and s.shape == (0, 3)
    q, s = xt.quantize_fp8(torch.zeros(0, 300), "tensor")
    assert s.tolist() == [1.0]  # a group of no element: nothing to scale
    q, s = xt.quantize_fp8(torch.zeros(4, 0), "row")
    assert q.shape == (4, 0) and s.tolist() == [[1.0]] * 4
    q, s = xt.quantize_fp8(torch.zeros(0, 0), "block2d")
    assert s.shape == (0, 0)


# ------------------------------------------------------------------ quantize -> gemm_fp8


def _round_trip(a, b, ga, gb):
    """quantize_fp8's outputs straight into gemm_fp8: the same as the reference on the quantized
    operands (to the GEMM tolerance), and near a @ b^T of the originals (e4m3 keeps 4 significant
    bits: elementwise 2^-4 per operand, about 5% in relative norm over a sum; 0.1 allowed)."""
    qa, sa = xt.quantize_fp8(a, ga)
    qb, sb = xt.quantize_fp8(b, gb)
    case = Case("gemm_fp8", {"a": qa, "b": qb, "a_scale": sa, "b_scale": sb, "bias": None},
                {"out_dtype": "float32"}, f"round trip {ga}/{gb}")
    out = check(case)
    full = as_float64(a).reshape(-1, a.shape[-1]) @ as_float64(b).T
    got = out.double().cpu().numpy().reshape(full.shape)
    rel = np.linalg.norm(got - full) / np.linalg.norm(full)
    assert rel < 0.1, f"{ga}/{gb}: {rel:.3g} from the unquantized product"
    return out


ROUND_TRIPS = [("block", "block2d"), ("row", "row"), ("row", "tensor"), ("tensor", "row"),
               ("tensor", "tensor")]


@pytest.mark.parametrize("ga,gb", ROUND_TRIPS, ids=[f"{a}-{b}" for a, b in ROUND_TRIPS])
@pytest.mark.parametrize("a_shape", [(7, 336), (2, 3, 336), (1, 336)],
                         ids=["m7", "lead2x3", "m1"])
def test_host_quantize_round_trip(a_shape, ga, gb):
    a = quantize_input(a_shape, torch.bfloat16, CPU, seed_of("rt", a_shape, ga), zero_rows=0)
    b = torch.randn(208, 336, generator=torch.Generator().manual_seed(seed_of("rtb"))).to(
        torch.bfloat16)
    _round_trip(a, b, ga, gb)


def test_host_round_trip_block_scales_of_one_element():
    """m = 1 and k, n <= 128: quantize_fp8's block scales are (1, 1) on both sides, shapes that
    also read as per tensor; with the other operand per block they count as per block (the
    rules' ambiguity resolved), and the product is the same either way."""
    gen = torch.Generator().manual_seed(seed_of("one"))
    a = torch.randn(1, 128, generator=gen)
    b = torch.randn(128, 128, generator=gen)
    out = _round_trip(a, b, "block", "block2d")
    qa, sa = xt.quantize_fp8(a, "block")
    qb, sb = xt.quantize_fp8(b, "block2d")
    assert sa.shape == (1, 1) and sb.shape == (1, 1)
    same = xt.gemm_fp8(qa, qb, sa.reshape(()), sb.reshape(1), out_dtype="float32")
    assert torch.equal(bits(same), bits(out))
    # k <= 128 and n > 128: a's block scales (7, 1) read as per row too, b's (2, 1) as per block
    # only (not the (256,) of per row): both per block.
    a7, b2 = torch.randn(7, 128, generator=gen), torch.randn(256, 128, generator=gen)
    qa, sa = xt.quantize_fp8(a7, "block")
    qb, sb = xt.quantize_fp8(b2, "block2d")
    assert sa.shape == (7, 1) and sb.shape == (2, 1)
    _round_trip(a7, b2, "block", "block2d")


# ------------------------------------------------------------------ errors name the argument


def _g(**kw):
    """gemm arguments (bf16 7 x 16 @ (24 x 16)^T) with some replaced."""
    gen = torch.Generator().manual_seed(seed_of("bad", tuple(kw)))
    args = {"a": torch.randn(7, 16, generator=gen).bfloat16(),
            "b": torch.randn(24, 16, generator=gen).bfloat16()}
    return {**args, **kw}


def _f(**kw):
    """gemm_fp8 arguments (7 x 32 @ (32 x 32)^T, row / tensor scales) with some replaced."""
    gen = torch.Generator().manual_seed(seed_of("bad8", tuple(kw)))
    args = {"a": e4m3((7, 32), CPU, gen), "b": e4m3((32, 32), CPU, gen),
            "a_scale": scales((7,), CPU, gen), "b_scale": scales((), CPU, gen)}
    return {**args, **kw}


def _bad_cases():
    bf16, f32 = torch.bfloat16, torch.float32
    def f8(*s):
        return torch.zeros(*s).to(F8)

    return [
        # gemm: dtypes
        ("gemm", lambda: _g(a=torch.ones(7, 16, dtype=torch.int32)), TypeError,
         "gemm: a must be float16 or bfloat16, got int32"),
        ("gemm", lambda: _g(a=torch.ones(7, 16)), TypeError,
         "gemm: a must be float16 or bfloat16, got float32"),
        ("gemm", lambda: _g(a=f8(7, 16), b=f8(24, 16)), TypeError,
         (r"gemm: a must be float16 or bfloat16, got float8_e4m3fn \(float8_e4m3fn operands: "
          r"gemm_fp8\)")),
        ("gemm", lambda: _g(b=torch.ones(24, 16, dtype=torch.float16)), TypeError,
         "gemm: b must have a's dtype bfloat16, got float16"),
        ("gemm", lambda: _g(bias=torch.ones(24, dtype=torch.float16)), TypeError,
         r"gemm: bias must be bfloat16 \(a's dtype\) or float32, got float16"),
        ("gemm", lambda: _g(out_dtype="float64"), ValueError,
         (r"out_dtype must be one of \('float16', 'bfloat16', 'float32'\) or None, got "
          "'float64'")),
        ("gemm", lambda: _g(out_dtype=torch.int8), ValueError,
         "out_dtype must be one of .* or None, got torch.int8"),
        ("gemm", lambda: _g(out_dtype="float16"), ValueError,
         r"gemm: out_dtype must be None or bfloat16 \(a's dtype\), or float32, got float16"),
        ("gemm", lambda: _g(out=torch.zeros(7, 24)), TypeError,
         r"gemm: out must be bfloat16 \(out_dtype\), got float32"),
        # gemm: shapes
        ("gemm", lambda: _g(a=torch.ones(7, 12, dtype=bf16), b=torch.ones(24, 12, dtype=bf16)),
         ValueError, r"gemm: k \(a's last dimension\) must be a multiple of 8, got 12"),
        ("gemm", lambda: _g(b=torch.ones(20, 16, dtype=bf16)), ValueError,
         r"gemm: n \(b's first dimension\) must be a multiple of 8, got 20"),
        ("gemm", lambda: _g(b=torch.ones(24, 8, dtype=bf16)), ValueError,
         (r"gemm: b must be \[n, k\] \(b_layout 'NK'\) with k = 16 \(a's last dimension\), got "
          r"shape \(24, 8\)")),
        ("gemm", lambda: _g(b_layout="KN"), ValueError,
         r"gemm: b must be \[k, n\] \(b_layout 'KN'\) with k = 16"),
        ("gemm", lambda: _g(b=torch.ones(2, 24, 16, dtype=bf16)), ValueError,
         r"gemm: b must be 2-D \[n, k\]"),
        ("gemm", lambda: _g(a=torch.ones((), dtype=bf16)), ValueError,
         "gemm: a must have at least 1 dimension, got 0"),
        ("gemm", lambda: _g(bias=torch.ones(16)), ValueError,
         r"gemm: bias must have shape \(24,\) \(n, out's last dimension\), got \(16,\)"),
        ("gemm", lambda: _g(bias=torch.ones(24, 2)[:, 0]), ValueError,
         "gemm: bias must be contiguous, got stride 2"),
        ("gemm", lambda: _g(out=torch.zeros(7, 16, dtype=bf16)), ValueError,
         r"gemm: out must have shape \(7, 24\)"),
        # gemm: layouts
        ("gemm", lambda: _g(a=torch.ones(16, 7, dtype=bf16).t()), ValueError,
         "gemm: a must be contiguous in its last dimension, got stride 7"),
        ("gemm", lambda: _g(b=torch.ones(16, 24, dtype=bf16).t()), ValueError,
         "gemm: b must be contiguous in its last dimension, got stride 24"),
        ("gemm", lambda: _g(a=torch.ones(3, 2, 16, dtype=bf16).transpose(0, 1)), ValueError,
         "gemm: a with shape .* has leading dimensions that do not collapse into one row pitch"),
        # gemm: attributes
        ("gemm", lambda: _g(b_layout="TN"), ValueError,
         r"b_layout must be one of \('NK', 'KN'\), got 'TN'"),
        ("gemm", lambda: _g(kernel="sm100"), ValueError,
         r"kernel must be one of \('auto', 'sm80', 'sm90'\), got 'sm100'"),
        ("gemm", lambda: _g(num_splits=-1), ValueError,
         r"gemm: num_splits must be in \[0, 65535\] \(0: chosen\), got -1"),
        ("gemm", lambda: _g(num_splits=1.5), TypeError, "num_splits must be an int"),
        # gemm_fp8: dtypes
        ("gemm_fp8", lambda: _f(a=torch.ones(7, 32, dtype=bf16)), TypeError,
         "gemm_fp8: a must be float8_e4m3fn, got bfloat16"),
        ("gemm_fp8", lambda: _f(b=torch.ones(32, 32, dtype=torch.uint8)), TypeError,
         "gemm_fp8: b must be float8_e4m3fn, got uint8"),
        ("gemm_fp8", lambda: _f(a_scale=torch.ones(7, dtype=bf16)), TypeError,
         "gemm_fp8: a_scale must be float32, got bfloat16"),
        ("gemm_fp8", lambda: _f(bias=torch.ones(32, dtype=torch.float16)), TypeError,
         r"gemm_fp8: bias must be bfloat16 \(out's dtype\) or float32, got float16"),
        ("gemm_fp8", lambda: _f(out_dtype="float32", bias=torch.ones(32, dtype=bf16)),
         TypeError, r"gemm_fp8: bias must be float32 \(out's dtype\), got bfloat16"),
        ("gemm_fp8", lambda: _f(out_dtype=None), ValueError,
         r"out_dtype must be one of \('bfloat16', 'float16', 'float32'\), got None"),
        ("gemm_fp8", lambda: _f(out_dtype="float8_e4m3fn"), ValueError,
         "out_dtype must be one of"),
        # gemm_fp8: shapes
        ("gemm_fp8", lambda: _f(a=f8(7, 24), b=f8(32, 24)), ValueError,
         r"gemm_fp8: k \(a's last dimension\) must be a multiple of 16, got 24"),
        ("gemm_fp8", lambda: _f(b=f8(40, 32)), ValueError,
         r"gemm_fp8: n \(b's first dimension\) must be a multiple of 16, got 40"),
        ("gemm_fp8", lambda: _f(b=f8(32, 48)), ValueError,
         (r"gemm_fp8: b must be \[n, k\] with k = 32 \(a's last dimension; e4m3 GEMM takes b as "
          r"\[n, k\] only\)")),
        ("gemm_fp8", lambda: _f(b_layout="KN"), TypeError, "unexpected keyword argument"),
        # gemm_fp8: scales
        ("gemm_fp8", lambda: _f(a_scale=torch.ones(8)), ValueError,
         (r"gemm_fp8: a_scale must have shape \(\) or \(1,\) \(per tensor\), \(7,\) or \(7, 1\) "
          r"\(per row of a\) or \(7, 1\) \(per 128-block of k\), got \(8,\)")),
        ("gemm_fp8", lambda: _f(a_scale=torch.ones(7, 2)), ValueError,
         r"gemm_fp8: a_scale must have shape .* got \(7, 2\)"),
        ("gemm_fp8", lambda: _f(b_scale=torch.ones(2, 1, 1)), ValueError,
         (r"gemm_fp8: b_scale must have shape \(\) or \(1,\) \(per tensor\), \(32,\) or \(32, 1\) "
          r"\(per row of b\) or \(1, 1\) \(per 128-block of k and n\), got \(2, 1, 1\)")),
        ("gemm_fp8", lambda: _f(a=f8(7, 256), b=f8(32, 256), a_scale=torch.ones(7, 2)),
         ValueError,
         (r"gemm_fp8: a_scale is per block \(shape \(7, 2\)\) and b_scale per tensor \(shape "
          r"\(\)\): block scales go with block scales only")),
        ("gemm_fp8", lambda: _f(a=f8(7, 256), b=f8(32, 256), b_scale=torch.ones(1, 2)),
         ValueError, "gemm_fp8: a_scale is per row .* and b_scale per block"),
        ("gemm_fp8", lambda: _f(a_scale=torch.ones(7, 2)[:, 0]), ValueError,
         "gemm_fp8: a_scale must be contiguous"),
        # gemm_gated
        ("gemm_gated", lambda: _g(b=torch.ones(24, 16, dtype=bf16)), ValueError,
         (r"gemm_gated: 2n \(b's first dimension: gate and up rows\) must be a multiple of 16, "
          "got 24")),
        ("gemm_gated", lambda: _g(b=torch.ones(32, 16, dtype=bf16),
                                  bias=torch.ones(16, dtype=bf16)), ValueError,
         r"gemm_gated: bias must have shape \(32,\)"),
        ("gemm_gated", lambda: _g(b=torch.ones(32, 16, dtype=bf16), act="relu"), ValueError,
         r"act must be one of \('silu', 'gelu', 'gelu_tanh'\), got 'relu'"),
        ("gemm_gated", lambda: _g(b=torch.ones(32, 16, dtype=bf16), out=torch.zeros(7, 32,
                                                                                  dtype=bf16)),
         ValueError, r"gemm_gated: out must have shape \(7, 16\)"),
        # quantize_fp8
        ("quantize_fp8", lambda: {"x": torch.ones(4, 8, dtype=torch.int32)}, TypeError,
         "quantize_fp8: x must be float16, bfloat16 or float32, got int32"),
        ("quantize_fp8", lambda: {"x": torch.ones(2, 4, 8), "granularity": "block2d"},
         ValueError, r"quantize_fp8: x must be 2-D \[rows, cols\] for 'block2d'"),
        ("quantize_fp8", lambda: {"x": torch.ones(4, 8), "granularity": "col"}, ValueError,
         r"granularity must be one of \('tensor', 'row', 'block', 'block2d'\), got 'col'"),
        ("quantize_fp8", lambda: {"x": torch.ones(4, 8), "q": torch.zeros(4, 8, dtype=torch.uint8)},
         TypeError, "quantize_fp8: q must be float8_e4m3fn, got uint8"),
        ("quantize_fp8", lambda: {"x": torch.ones(4, 8), "scale": torch.zeros(4)}, ValueError,
         r"quantize_fp8: scale must have shape \(4, 1\)"),
        ("quantize_fp8", lambda: {"x": torch.ones(4, 8), "granularity": "block",
                                  "scale": torch.zeros(4, 1, dtype=f32).double()}, TypeError,
         "quantize_fp8: scale must be float32, got float64"),
        ("quantize_fp8", lambda: {"x": torch.ones(8, 4).t()}, ValueError,
         "quantize_fp8: x must be contiguous in its last dimension"),
    ]


BAD = _bad_cases()


def np_view(t: torch.Tensor) -> np.ndarray:
    """A NumPy view of a CPU tensor, its strides kept (bfloat16 and float8_e4m3fn as ml_dtypes')."""
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    if t.dtype == F8:
        return t.view(torch.uint8).numpy().view(NP_F8)
    return t.numpy()


@pytest.mark.parametrize("op,build,exc,msg", BAD, ids=[f"{b[0]}-{i}" for i, b in enumerate(BAD)])
@pytest.mark.parametrize("fw", ["torch", "numpy"])
def test_host_errors_name_the_argument(fw, op, build, exc, msg):
    """A typed error naming the argument (from torch and NumPy alike); a given output left
    untouched."""
    kw = build()
    outs = {k: kw.pop(k) for k in ("out", "q", "scale") if k in kw}
    before = {k: v.clone() for k, v in outs.items()}
    if fw == "numpy":
        kw = {k: np_view(v) if isinstance(v, torch.Tensor) else v for k, v in kw.items()}
        np_outs = {k: np_view(v) for k, v in outs.items()}
        with pytest.raises(exc, match=msg):
            getattr(xn, op)(**kw, **np_outs)
        return
    with pytest.raises(exc, match=msg):
        getattr(xt, op)(**kw, **outs)
    for k, v in outs.items():
        assert torch.equal(bits(v), bits(before[k])), f"{op}: {k} written before the error"


# ================================================================== GPU
#
# The host matrix again at full size (m 1, 7, 64, 1000 x n 200, k 328; e4m3 n 208, k 336; 16-bit
# also m 8500, where the 128 x 256 tiles run one round and 128 x 128 ones would take two: m 1000
# takes the 128 x 128 tiles there, gemm.h's TileGrid), which
# reaches every kernel version the dispatcher picks by m (gemm.h's Choose: m <= 16, <= 64, more;
# sm90 for [n, k] b, sm80 for [k, n]), every kernel by name (kernel="sm80", "sm90"), and k long
# enough for split-K (planned: num_splits 0, and forced), against the NumPy float64 reference.

GPU_NK, GPU_NK8 = (200, 328), (208, 336)


def plan_of(case, device_id=0):
    """(num_splits, workspace floats) that the op's planner gives `case` on `device_id`."""
    from xkernels import jit

    op = case.spec
    attrs = tuple(a.encode(case.attrs.get(a.name, a.default)) for a in op.attrs)
    shapes = tuple(tuple(t.shape) if t is not None else (0,) for t in case.args())
    (*_, splits, _), ws = jit.plan(op, device_id, shapes, attrs)
    return splits, ws


# Every variant on every kernel, but b as [k, n] on the sm90 kernel, which takes b as [n, k] only
# (test_gpu_unsupported_kernels checks that it says so).
GPU_GEMM_RUNS = [(v, k) for v in GEMM_VARIANTS for k in ("auto", "sm80", "sm90")
                 if not (k == "sm90" and GEMM_VARIANTS[v].get("b_layout") == "KN")]


@gpu
@pytest.mark.parametrize("variant,kernel", GPU_GEMM_RUNS, ids=[f"{v}-{k}" for v, k in GPU_GEMM_RUNS])
@pytest.mark.parametrize("m", [1, 7, 64, 100, 1000, 8500])
@pytest.mark.parametrize("dtype", DTYPES16, ids=DT_IDS)
def test_gpu_gemm(dtype, m, variant, kernel):
    kw = {**GEMM_VARIANTS[variant], "kernel": kernel}
    check(gemm_case(m, *GPU_NK, dtype, "cuda", seed_of("gpu", dtype, m, variant), **kw))


# The 128 x 192 tiles (gemm.h's TileGrid: m 700, n 4104 is 66 clusters of them in one round, 51
# of 128 x 256), every variant: partial last tiles in n (4104 = 21 x 192 + 72) and m, bias, fp32
# output (no TMA store), strided and leading dimensions, split-K.
@gpu
@pytest.mark.parametrize("variant", list(GEMM_VARIANTS))
@pytest.mark.parametrize("dtype", DTYPES16, ids=DT_IDS)
def test_gpu_gemm_wide192(dtype, variant):
    check(gemm_case(700, 4104, 1000, dtype, "cuda", seed_of("gpu192", dtype, variant),
                    **GEMM_VARIANTS[variant]))


# Mid-sized m (gemm.h's TileGrid on the H100's 132 SMs), each shape for one tile and the way it
# runs, m and n off every tile edge, so that the last row of tiles starts at m - 128 (sm90.h, Unit:
# a group's rows all the tile above's, skipped; some of them, element stores from m_lo; none, TMA
# stores), for the swapped tiles on the kernel's side (n 8200: 8200 % 128 = 8):
# - 128 x 128, split in two: m 136 x 1800 (its last tile's group 0 skipped, group 1 straddling;
#   n 1800 is 29 weight tiles of 64 rows, too few for the one-group swapped tiles below);
# - 128 x 128 whole: m 143 x 8200;
# - 128 x 128 with stream-K: m 339 x 12296 x 2056 (group 0 straddling, group 1 by TMA);
# - 128 x 128 split in two at long k (gemm.h's MidPair): m 200 x 4000 x 12296 (193 k blocks);
# - 64 x 256: m 269 x 6400 (at n 6152 the 128 x 144 tiles below fill the SMs);
# - swapped 128 x 192, whole: m 283 x 8200; split in 4: m 213 x 1032 x 2056; with stream-K:
#   m 521 x 8200 x 4104.
# Every variant (partial last tiles, bias, fp32 output, strided and leading dimensions, forced
# splits) against the float64 reference, the stream-K and long-k shapes (a large float64 product
# on the host) in four of them; and gated products (not swapped: 128 x 128 tiles of 2n columns)
# split in two (136 x 1032), whole (143 x 4104) and with stream-K (521 x 4104 x 4104).
MID_SHAPES = {
    "mid-split": (136, 1800, 1000),
    "mid-whole": (143, 8200, 1000),
    "mid-sk": (339, 12296, 2056),
    "mid-long": (200, 4000, 12296),
    "slim": (269, 6400, 1000),
    "swap-whole": (283, 8200, 1000),
    "swap-split": (213, 1032, 2056),
    "swap-sk": (521, 8200, 4104),
}
MID_CASES = [(shape, variant) for shape in MID_SHAPES for variant in GEMM_VARIANTS
             if not shape.endswith(("-sk", "-long")) or variant in ("plain", "bias-f32",
                                                                     "out-f32-bias", "strided")]


@gpu
@pytest.mark.parametrize("shape,variant", MID_CASES)
@pytest.mark.parametrize("dtype", DTYPES16, ids=DT_IDS)
def test_gpu_gemm_mid(dtype, shape, variant):
    m, n, k = MID_SHAPES[shape]
    check(gemm_case(m, n, k, dtype, "cuda", seed_of("gpumid", dtype, shape, variant),
                    **GEMM_VARIANTS[variant]))


# The swapped tiles sized to m (gemm.h's SwapSizedN on the H100's 132 SMs: 32 weight tiles of 128
# rows and 4 a-tiles of n_t rows, or 63 of them and 2 a-tiles, in clusters of 2 that share the
# weights' tile), each n_t the dispatcher takes for 16-bit inputs (48, 64 and 80 at n 4000 went to
# the one-group tiles below): 80 (m 150 x n 8000: element stores, a partial last tile), 96 (m 192 x
# n 8000), 112 (m 440 x n 3976: 8 rows past a whole weight tile), 128 (m 512: TMA stores), 144 (m
# 570), 160 (m 320 x n 8000). k 1000 leaves a partial k block; n 4000 a partial weight tile. Every
# variant: those with fp32 outputs or b as [k, n] take other tiles, the forced split runs the
# clusters in splits.
SIZED_SHAPES = {80: (150, 8000, 1000), 96: (192, 8000, 1000), 112: (440, 3976, 1000),
                128: (512, 4000, 1000), 144: (570, 4000, 1000), 160: (320, 8000, 1000)}


# The one-group swapped tiles (gemm.h's SwapHalfPlan on 132 SMs: 16-bit, weight tiles of 64 rows,
# t = 2-8 a-tiles of 48-192 rows in clusters of 2 sharing the weight tile), each form: 48 rows (m
# 96 x n 4000: m <= 128, 63 weight tiles, a partial one), 64 (m 500 x n 1000: t = 8, TMA stores),
# 80 (m 150 x n 4000: element stores, a partial last a-tile), 80 in five tiles (m 400 x n 1400, t
# = 6: a cluster's second block past the last tile loads zeros and writes nothing), 80 split in
# two (m 130 x n 2000: 32 weight tiles), 128 (m 250 x n 4040: TMA stores, 8 rows past a whole
# weight tile), 192 (m 380 x n 4104: 65 weight tiles, 130 blocks). Every variant, as above.
HALF_SHAPES = {"48": (96, 4000, 1000), "64-t8": (500, 1000, 1000), "80": (150, 4000, 1000),
               "80-odd": (400, 1400, 1000), "80-split": (130, 2000, 1000),
               "128": (250, 4040, 1000), "192": (380, 4104, 1000)}


# The 128 x 144 tiles (gemm.h's TileGrid on 132 SMs: one round of 96-100% of the SMs): 3 rows
# of tiles by 43 (m 384 x n 6104: a partial last column tile of 56), the last row shifted (m
# 360), 2 rows by 64 (m 200 x n 9200), and over 64 x 256 tiles that would pad m by 48 rows (m
# 272). Every variant, as above (element stores only: 144 columns are no whole 64-column box).
WIDE144_SHAPES = {"whole": (384, 6104, 1000), "shifted": (360, 6104, 1000),
                  "two-rows": (200, 9200, 1000), "over-slim": (272, 6104, 1000)}


# Decode batches of 65-128 rows (gemm.h's SwapOne, NarrowN and PairSplits on 132 SMs): plain
# 128 x n tiles, n the widest of 96 / 64 / 48 whose one round fills the SMs: 48 (m 120 x n 6104:
# 128 tiles, the last 8 columns wide; element stores; and m 72, where the a box is 72 rows and
# the second consumer group's rows 8-63 lie past a's end), 64 (m 104 x n 7112: 112 tiles, TMA
# stores, the last 8 columns wide), 96 (m 128 x n 11984: 125 tiles, the last 80 wide); the 64 x
# 128 tiles split to fill one round: in two (m 100 x n 3000: 48 tiles, where the one-group swapped
# tiles do not fit) and in four at long k (m 72 x n 1544 x k 12296: 193 k blocks, 26 tiles); the
# unclustered swapped tiles of 64 weight rows by 128 rows of a where their tiles number about the
# SMs: 129 of them (m 100 x n 8200, a b box of 104 rows) and 141 with stream-K spreading the last
# ones (m 72 x n 9000 x k 2056). Every variant, as above.
DECODE_SHAPES = {"narrow-48": (120, 6104, 1000), "narrow-48-m72": (72, 6104, 1000),
                 "narrow-64": (104, 7112, 1000), "narrow-96": (128, 11984, 1000),
                 "pair-2": (100, 3000, 1000), "pair-4": (72, 1544, 12296),
                 "swapone-whole": (100, 8200, 1000), "swapone-sk": (72, 9000, 2056)}


# The four tile families above, one test: each shape's id is its family and key ("sized-80",
# "half-64-t8", "wide144-whole", "decode-narrow-48"; until 2026-11-28 three tests,
# test_gpu_gemm_swap_sized, test_gpu_gemm_swap_half and test_gpu_gemm_wide144, with the same
# seeds).
TILE_SHAPES = {f"{family}-{key}": (seed_tag, key, shape)
               for family, seed_tag, shapes in (("sized", "gpusized", SIZED_SHAPES),
                                                ("half", "gpuhalf", HALF_SHAPES),
                                                ("wide144", "gpuwide144", WIDE144_SHAPES),
                                                ("decode", "gpudecode", DECODE_SHAPES))
               for key, shape in shapes.items()}


@gpu
@pytest.mark.parametrize("variant", list(GEMM_VARIANTS))
@pytest.mark.parametrize("shape_id", list(TILE_SHAPES))
@pytest.mark.parametrize("dtype", DTYPES16, ids=DT_IDS)
def test_gpu_gemm_tile_shapes(dtype, shape_id, variant):
    seed_tag, key, (m, n, k) = TILE_SHAPES[shape_id]
    check(gemm_case(m, n, k, dtype, "cuda", seed_of(seed_tag, dtype, key, variant),
                    **GEMM_VARIANTS[variant]))


# e4m3 on the sized tiles (per-tensor and per-row scales follow their operands through the swap;
# 16-bit outputs): n_t 80 (m 150 x n 8000: a partial last tile), 112 (m 440 x n 3984), 144 (m
# 570 x n 4000) and 160 (m 320 x n 8000) at k 1008 (a partial k block of 128), every variant
# (fp32 outputs and block scales take other tiles); and on the one-group tiles, each form of
# HALF_SHAPES with n a multiple of 16.
FP8_SIZED_SHAPES = {80: (150, 8000), 112: (440, 3984), 144: (570, 4000), 160: (320, 8000)}
FP8_HALF_SHAPES = {"48": (96, 4000), "64-t8": (500, 1008), "80-odd": (400, 1408),
                   "80-split": (130, 2000), "128": (250, 4048), "192": (380, 4112)}


def test_mid_shapes_reach_their_tiles():
    """The tile each mid-sized GPU test shape here is written for, as gemm.h's dispatcher chooses
    it on an H100's 132 SMs (tests/gemm_tiles.cu, built with nvcc and run on the host): a rule
    that moves a shape to another tile fails here, not silently in the GPU tests' coverage."""
    from xkernels import _toolchain

    # gemm_fp8 takes n in multiples of 16 only (the binding refuses the rest)
    assert [n for m, n in (*FP8_SIZED_SHAPES.values(), *FP8_HALF_SHAPES.values()) if n % 16] == []
    nvcc = _toolchain.find_nvcc()
    if nvcc is None:
        pytest.skip("needs nvcc")
    with tempfile.TemporaryDirectory() as tmp:
        exe = Path(tmp) / "gemm_tiles"
        subprocess.run([str(nvcc), "-std=c++17", "-arch=sm_90a", "-I", str(ROOT / "include"),
                        str(ROOT / "tests/gemm_tiles.cu"), "-o", str(exe)], check=True)
        want = {**{(m, n, k): ("mid", 128, 128, 1) for m, n, k in (MID_SHAPES["mid-split"],
                                                                   MID_SHAPES["mid-whole"],
                                                                   MID_SHAPES["mid-sk"],
                                                                   MID_SHAPES["mid-long"])},
                MID_SHAPES["slim"]: ("slim", 64, 256, 1),
                **{MID_SHAPES[s]: ("swap192", 192, 128, 1) for s in ("swap-whole", "swap-split",
                                                                    "swap-sk")},
                **{shape: ("swap-sized", n_t, 128, 1) for n_t, shape in SIZED_SHAPES.items()},
                **{shape: ("wide144", 128, 144, 1) for shape in WIDE144_SHAPES.values()},
                **{shape: ("narrow", 128, int(name.split("-")[1]), 1)
                   for name, shape in DECODE_SHAPES.items() if name.startswith("narrow")},
                **{shape: ("small", 64, 128, int(name.split("-")[1]))
                   for name, shape in DECODE_SHAPES.items() if name.startswith("pair")},
                **{shape: ("swap-one", 128, 64, 1)
                   for name, shape in DECODE_SHAPES.items() if name.startswith("swapone")},
                **{shape: ("gemv-bulk", 8, 16 if shape[0] <= 4 else 32, 1)
                   for shape in GEMV_BULK_SHAPES.values()},
                # just outside the bulk GEMV's rule: k 4088, 94 groups of b's rows, 9 rows of a
                **{shape: ("small", 64, 128, 1) for shape in ((8, 4104, 4088), (2, 3000, 4104),
                                                              (9, 8192, 8192))},
                **{shape: ("swap-half", int(name.split("-")[0]), 64,
                           2 if name.endswith("split") else 1)
                   for name, shape in HALF_SHAPES.items()},
                **{(m, n, 1008, "e4m3"): ("swap-sized", n_t, 128, 1)
                   for n_t, (m, n) in FP8_SIZED_SHAPES.items()},
                **{(m, n, 1008, "e4m3"): ("swap-half", int(name.split("-")[0]), 64,
                                          2 if name.endswith("split") else 1)
                   for name, (m, n) in FP8_HALF_SHAPES.items()}}
        lines = "".join(" ".join(map(str, shape)) + "\n" for shape in want)
        res = subprocess.run([str(exe)], input=lines, capture_output=True, text=True, check=True)
    got = [tuple(int(x) if x.isdigit() else x for x in line.split())
           for line in res.stdout.splitlines()]
    assert dict(zip(want, got)) == want


@gpu
@pytest.mark.parametrize("variant", list(FP8_VARIANTS))
@pytest.mark.parametrize("n_t", list(FP8_SIZED_SHAPES))
def test_gpu_gemm_fp8_swap_sized(n_t, variant):
    m, n = FP8_SIZED_SHAPES[n_t]
    check(fp8_case(m, n, 1008, "cuda", seed_of("gpusized8", n_t, variant),
                   **FP8_VARIANTS[variant]))


@gpu
@pytest.mark.parametrize("variant", list(FP8_VARIANTS))
@pytest.mark.parametrize("n_t", list(FP8_HALF_SHAPES))
def test_gpu_gemm_fp8_swap_half(n_t, variant):
    m, n = FP8_HALF_SHAPES[n_t]
    check(fp8_case(m, n, 1008, "cuda", seed_of("gpuhalf8", n_t, variant),
                   **FP8_VARIANTS[variant]))


@gpu
@pytest.mark.parametrize("m,n,k", [(136, 1032, 1000), (143, 4104, 1000), (521, 4104, 4104)])
@pytest.mark.parametrize("dtype", DTYPES16, ids=DT_IDS)
def test_gpu_gemm_mid_gated(dtype, m, n, k):
    check(gated_case(m, n, k, dtype, "cuda", seed_of("gpumidg", dtype, m, n), bias="float32"))


@gpu
@pytest.mark.parametrize("kernel", ["auto", "sm80", "sm90"])
@pytest.mark.parametrize("num_splits", [0, 1, 2, 7, 64])
@pytest.mark.parametrize("m,n,k", [(1, 256, 8192), (7, 512, 4096), (64, 256, 8192),
                                   (300, 1024, 2048)])
def test_gpu_gemm_split_k(m, n, k, num_splits, kernel):
    """Long k over few output tiles: the plan splits k (num_splits 0), or the split is forced
    (64 splits of 4096 / 64 = 64 k tiles: some splits get one tile; of 2048, some none)."""
    case = gemm_case(m, n, k, torch.bfloat16, "cuda", seed_of("splitk", m, n, k),
                     bias="float32", num_splits=num_splits, kernel=kernel)
    check(case)
    if num_splits == 0 and m == 1:  # one row of 2 output tiles over k 8192: any planner splits
        splits, ws = plan_of(case)
        if kernel == "auto":  # m 1 takes the GEMV kernel (gemv.h): one pass over b, no split
            assert (splits, ws) == (1, 0), (splits, ws)
        else:
            assert splits > 1 and ws == splits * m * n, (splits, ws)  # the planner split it


@gpu
@pytest.mark.parametrize("dtype", DTYPES16, ids=DT_IDS)
@pytest.mark.parametrize("m", [1, 2, 4])
@pytest.mark.parametrize("variant", ["plain", "bias-f32", "out-f32-bias", "lead-strided-out-f32"])
def test_gpu_gemv(m, dtype, variant):
    """One row of a with the kernel left to the dispatcher takes the GEMV kernel (gemv.h), 2 and 4
    the wgmma tiles beside it: k not a multiple of its 4 x 256 x 8 unrolled step (k 1000 and
    4104: the tail loop), strided a rows and outputs (lead: 2 x m rows); gated at m 1 and 2."""
    kw = GEMM_VARIANTS[variant]
    for n, k in ((200, 1000), (1032, 4104)):
        check(gemm_case(m, n, k, dtype, "cuda", seed_of("gemv", m, dtype, variant, n, k), **kw))
    if variant == "plain" and m in (1, 2):
        check(gated_case(m, 520, 1000, dtype, "cuda", seed_of("gemvg", m, dtype), bias="float32"))


# The bulk-copy GEMV (gemv.h, UseGemvBulk on sm_90: m 2-8, k >= 4096, 32 rows of b for about every
# SM; m 2-4 in groups of 16 rows and 2048-deep pieces, m 5-8 in groups of 32 and 1024-deep ones):
# 2 rows over n 4232 x k 4104 (the last group 8 rows, 8 past n; a last piece of 8 values: one lane
# of one warp), 3 rows over k 6000 (a last piece of 1904: warp 7 reads 112 of its 256), 5 rows over
# k 5000 (a last piece of 904 of 1024: warp 7 reads nothing of it), 8 rows over n 8200 (the last
# group 8 rows, 24 past n) x k 4104; with the variants of test_gpu_gemv, and gated.
GEMV_BULK_SHAPES = {"m2": (2, 4232, 4104), "m3": (3, 8200, 6000), "m5": (5, 4104, 5000),
                    "m8": (8, 8200, 4104)}


@gpu
@pytest.mark.parametrize("dtype", DTYPES16, ids=DT_IDS)
@pytest.mark.parametrize("shape", list(GEMV_BULK_SHAPES))
@pytest.mark.parametrize("variant", ["plain", "bias-f32", "out-f32-bias", "lead-strided-out-f32"])
def test_gpu_gemv_bulk(shape, dtype, variant):
    m, n, k = GEMV_BULK_SHAPES[shape]
    check(gemm_case(m, n, k, dtype, "cuda", seed_of("gemvbulk", shape, dtype, variant),
                    **GEMM_VARIANTS[variant]))


@gpu
@pytest.mark.parametrize("dtype", DTYPES16, ids=DT_IDS)
@pytest.mark.parametrize("act", ["silu", "gelu_tanh"])
def test_gpu_gemv_bulk_gated(dtype, act):
    """The gate's rows, then the up's, through the same ring: act(gate) * up per output."""
    for m in (3, 6):  # both forms
        check(gated_case(m, 4104, 4104, dtype, "cuda", seed_of("gemvbulkg", dtype, act, m),
                         act=act, bias="float32"))


# Stream-K (sm90.h): an unsplit call of the 128-row sm90 tiles whose last round would leave
# enough SMs idle for long enough (StreamKUnits: about 34 k blocks of idle time for its 128 x 256
# tiles) spreads the k blocks of its last units over every SM, the partial tiles meeting in the
# workspace. The shapes, on an H100 (132 SMs; 16-bit units are clusters of two 128 x 256 tiles,
# 66 at a time): units under one round, each tile over 3-4 blocks (e4m3 m 1000, n 1040, forced
# unsplit: 40 units of 56 k blocks, with block scales too, whose last tile's second 128-column
# scale block lies past n; 16-bit calls under one round take narrower tiles instead, gemm.h's
# TileGrid); a whole round before the spread ones (m 4800, n 1024: 76 units of 44 k blocks, also
# forced unsplit into fp32, e4m3 152 of 48, the gated epilogue 76 of 44; block scales at n 800,
# 152 of 48, the last tile's second scale block past n again).
STREAM_K = [
    ("gemm", 4800, 1024, 2800, {"num_splits": 1}),
    ("gemm", 4800, 1024, 2800, {"num_splits": 1, "out_dtype": "float32", "bias": "a"}),
    ("gemm", 4800, 1024, 2800, {"bias": "float32"}),
    ("gated", 4800, 512, 2800, {"bias": "float32"}),
    ("fp8", 1000, 1040, 7168, {"num_splits": 1, "a_scale": "row", "b_scale": "tensor"}),
    ("fp8", 4800, 1024, 6144, {"a_scale": "row", "b_scale": "row", "bias": "out"}),
    ("fp8", 1000, 1040, 7168, {"num_splits": 1, "a_scale": "block", "b_scale": "block",
                               "bias": "out"}),
    ("fp8", 4800, 800, 6144, {"a_scale": "block", "b_scale": "block"}),
]


@gpu
@pytest.mark.parametrize("op,m,n,k,kw", STREAM_K,
                         ids=[f"{c[0]}-{c[1]}x{c[2]}x{c[3]}-{i}" for i, c in enumerate(STREAM_K)])
def test_gpu_stream_k(op, m, n, k, kw):
    seed = seed_of("streamk", op, m, n, k, str(kw))
    if op == "gemm":
        case = gemm_case(m, n, k, torch.bfloat16, "cuda", seed, **kw)
    elif op == "gated":
        case = gated_case(m, n, k, torch.bfloat16, "cuda", seed, **kw)
    else:
        case = fp8_case(m, n, k, "cuda", seed, **kw)
    first = check(case)
    assert torch.equal(bits(call(case)), bits(first))  # the pieces summed in a fixed order
    if torch.cuda.get_device_capability() == (9, 0):  # the plan reserves the stream-K area
        splits, ws = plan_of(case)
        sms = torch.cuda.get_device_properties(0).multi_processor_count
        assert (splits, ws) == (1, sms * (128 * 256 + 2)), (splits, ws)


# Block scales at the edges of fp32's range and past them: scales spread over 2^-22 .. 2^22 (a few
# negative), and zero, 2^-30 and denormal (2^-128) scales at a few k blocks of a few rows and
# columns of a and b, against float64 (a promotion multiplies each block's product by its scales,
# so a zero scale must drop the block and a tiny one must not lose the rest). Shapes on an H100:
# 132 wide tiles (one full round), 40 wide tiles of 56 k blocks spread by stream-K (pieces
# starting mid-tile), and 9 tiles too few for the wide grid (the 128 x 128 tiles).
@gpu
@pytest.mark.parametrize("form", ["wide", "outside"])
@pytest.mark.parametrize("m,n,k", [(1408, 3072, 1024), (1000, 1040, 7168), (300, 528, 2064)])
def test_gpu_fp8_block_scale_ranges(form, m, n, k):
    case = fp8_case(m, n, k, "cuda", seed_of("blockrange", form, m, n, k),
                    a_scale="block", b_scale="block", num_splits=1)
    sa, sb = case.inputs["a_scale"], case.inputs["b_scale"]
    gen = torch.Generator().manual_seed(seed_of("blockrange-scales", form, m, n, k))
    if form == "wide":
        for s in (sa, sb):
            v = torch.exp2(torch.rand(s.shape, generator=gen) * 44 - 22)
            v[torch.rand(s.shape, generator=gen) < 0.05] *= -1
            s.copy_(v)
    else:
        kb = sa.shape[1]
        sa[5, 2 % kb] = 0.0
        sa[m - 1, 5 % kb] = 2.0 ** -30
        sa[m // 2, kb - 1] = 2.0 ** -128
        sb[1, 1 % kb] = 0.0
        sb[sb.shape[0] - 1, 3 % kb] = 2.0 ** -30
        sb[0, 0] = -(2.0 ** -3)
    check(case)


@gpu
@pytest.mark.parametrize("kernel", ["auto", "sm80", "sm90"])
@pytest.mark.parametrize("variant", list(GATED_VARIANTS))
@pytest.mark.parametrize("m", [1, 7, 64, 100, 1000])
@pytest.mark.parametrize("dtype", DTYPES16, ids=DT_IDS)
def test_gpu_gemm_gated(dtype, m, variant, kernel):
    """Every tile the dispatcher picks by m (each gating in its epilogue, 64 to 128 output columns
    per tile), the sm80 kernel (its product whole into the workspace, gated by the reduce) and
    split-K's gated reduce, against act(gate) * up in float64."""
    check(gated_case(m, *GPU_NK, dtype, "cuda", seed_of("gpug", dtype, m, variant),
                     **{**GATED_VARIANTS[variant], "kernel": kernel}))


@gpu
@pytest.mark.parametrize("num_splits", [0, 1, 2, 5])
@pytest.mark.parametrize("m,n,k", [(1, 14336, 4096), (64, 1024, 4096), (300, 512, 2048),
                                   (2048, 1536, 1024), (4096, 1536, 1024)])
def test_gpu_gemm_gated_model_shapes(m, n, k, num_splits):
    """A gated MLP's shapes (Llama 3 8B's 2 x 14336 x 4096 at decode), planned and forced splits,
    many 128 x 128 tiles at m > 128 (m 300, 2048: gemm.h's TileGrid) and many full 128 x 256 tiles
    in clusters (m 4096)."""
    check(gated_case(m, n, k, torch.bfloat16, "cuda", seed_of("gpugm", m, n, k),
                     bias="float32", num_splits=num_splits))


@gpu
@pytest.mark.parametrize("kernel", ["auto", "sm90"])
@pytest.mark.parametrize("variant", list(FP8_VARIANTS))
@pytest.mark.parametrize("m", [1, 7, 64, 100, 1000])
def test_gpu_gemm_fp8(m, variant, kernel):
    check(fp8_case(m, *GPU_NK8, "cuda", seed_of("gpu8", m, variant),
                   **{**FP8_VARIANTS[variant], "kernel": kernel}))


@gpu
@pytest.mark.parametrize("num_splits", [0, 1, 4])
@pytest.mark.parametrize("scale", ["row/tensor", "block/block"])
@pytest.mark.parametrize("m,n,k", [(1, 256, 8192), (64, 512, 4096), (200, 1024, 2048)])
def test_gpu_gemm_fp8_split_k(m, n, k, scale, num_splits):
    a_scale, b_scale = scale.split("/")
    check(fp8_case(m, n, k, "cuda", seed_of("gpu8k", m, n, k, scale), a_scale=a_scale,
                   b_scale=b_scale, bias="out", num_splits=num_splits))


@gpu
@pytest.mark.parametrize("op", ["gemm", "gemm_fp8"])
def test_gpu_strided_output_and_determinism(op):
    if op == "gemm":
        case = gemm_case(64, 200, 328, torch.bfloat16, "cuda", seed_of(op, "gout"), bias="a")
    else:
        case = fp8_case(64, 208, 336, "cuda", seed_of(op, "gout"), a_scale="block",
                        b_scale="block")
    first = check(case, out_layout="strided")
    for _ in range(3):  # the same bits every time (split-K's sums in a fixed order)
        assert torch.equal(bits(call(case)), bits(first))


@gpu
@pytest.mark.parametrize("op", ["gemm", "gemm_fp8"])
def test_gpu_empty_m_and_k(op):
    gen = torch.Generator().manual_seed(seed_of("gempty", op))
    bias = torch.randn(16, generator=gen).bfloat16().cuda()
    for m, k, with_bias in ((0, 32, False), (5, 0, True), (5, 0, False), (0, 0, True)):
        if op == "gemm":
            a = torch.randn(m, k, generator=gen).bfloat16().cuda()
            b = torch.randn(16, k, generator=gen).bfloat16().cuda()
            out = xt.gemm(a, b, bias if with_bias else None)
        else:
            a, b = e4m3((m, k), "cuda", gen), e4m3((16, k), "cuda", gen)
            out = xt.gemm_fp8(a, b, scales((), "cuda", gen), scales((16,), "cuda", gen),
                              bias if with_bias else None)
        assert out.shape == (m, 16)
        if m:
            want = bias.expand(m, 16) if with_bias else torch.zeros_like(out)
            assert torch.equal(bits(out), bits(want)), (m, k, with_bias)


# ------------------------------------------------------------------ quantize_fp8 on the GPU


def _assert_quantized(q, s, x, granularity):
    """The GPU's quantisation against the reference: scales within 2^-22 relative (a kernel may
    take amax times 1/448 rather than divide: an ulp or two), q the same e4m3 as the reference's
    except where x / scale lies within 2^-21 relative of a rounding midpoint, where the other
    neighbour is allowed (a kernel multiplying by 1/scale rounds the quotient differently)."""
    want_q, want_s = quantize_reference(x, granularity)
    got_s = s.cpu().numpy()
    assert got_s.shape == want_s.shape and s.dtype == torch.float32
    np.testing.assert_allclose(got_s, want_s, rtol=2.0 ** -22, atol=0)
    got_q = bits(q).numpy()
    xf = as_float64(x)
    # the reference's quotient, nudged by +-2^-21 relative: the e4m3 values either side may round
    t = xf / _expand_scale(want_s.astype(np.float64), xf.shape, granularity)
    lo, hi = (np.clip(t * f, -448, 448).astype(np.float32).astype(NP_F8).view(np.uint8)
              for f in (1 - 2.0 ** -21, 1 + 2.0 ** -21))
    ok = (got_q == want_q) | (got_q == lo) | (got_q == hi)
    assert ok.all(), f"{int((~ok).sum())} of {ok.size} q off ({granularity}): " + str(
        [(float(a), int(b), int(c)) for a, b, c in
         zip(xf[~ok][:4], got_q[~ok][:4], want_q[~ok][:4], strict=False)])


def _expand_scale(s, shape, granularity):
    if granularity == "tensor":
        return np.full(shape, s.reshape(()))
    if granularity == "row":
        return np.broadcast_to(s, shape)
    if granularity == "block":
        return np.repeat(s, 128, axis=-1)[..., :shape[-1]]
    return np.repeat(np.repeat(s, 128, axis=0), 128, axis=1)[:shape[0], :shape[1]]


GPU_QUANT = {
    "tensor": [(1000, 4096), (7, 100), (3, 5, 300)],
    "row": [(1000, 4096), (7, 100), (3, 5, 300), (1, 1)],
    "block": [(1000, 4096), (7, 100), (3, 5, 300), (64, 4100)],
    "block2d": [(4096, 1024), (300, 200), (129, 129)],
}
GPU_QUANT_CASES = [(g, s) for g, shapes in GPU_QUANT.items() for s in shapes]


@gpu
@pytest.mark.parametrize("dtype", [*DTYPES16, torch.float32], ids=[*DT_IDS, "float32"])
@pytest.mark.parametrize("granularity,shape", GPU_QUANT_CASES,
                         ids=[f"{g}-{'x'.join(map(str, s))}" for g, s in GPU_QUANT_CASES])
def test_gpu_quantize_fp8(granularity, shape, dtype):
    x = quantize_input(shape, dtype, "cuda", seed_of("gq", granularity, shape, dtype),
                       zero_rows=1 if len(shape) > 1 and shape[0] > 1 else 0)
    q_buf = torch.full(shape, float("nan")).to(F8).cuda()
    q, s = xt.quantize_fp8(x, granularity, q=q_buf)
    assert q is q_buf
    _assert_quantized(q, s, x, granularity)


@gpu
@pytest.mark.parametrize("ga,gb", ROUND_TRIPS, ids=[f"{a}-{b}" for a, b in ROUND_TRIPS])
def test_gpu_quantize_round_trip(ga, gb):
    gen = torch.Generator().manual_seed(seed_of("grt", ga, gb))
    a = torch.randn(2, 100, 1024, generator=gen).bfloat16().cuda()
    b = torch.randn(768, 1024, generator=gen).bfloat16().cuda()
    _round_trip(a, b, ga, gb)


# ------------------------------------------------------------------ GPU errors


@gpu
@pytest.mark.parametrize("where,msg", [
    ("a", "gemm: a on a GPU must be 16-byte aligned"),
    ("b", "gemm: b on a GPU must be 16-byte aligned"),
    ("out", "gemm: out on a GPU must be 16-byte aligned"),
    ("a-pitch", (r"gemm: a on a GPU must be 16-byte aligned, with a row pitch in multiples of 8 "
                 r"elements, got address offset 0 and row pitch 332")),
    ("bias", "gemm: bias on a GPU must be 16-byte aligned"),
    ("fp8-a-pitch", (r"gemm_fp8: a on a GPU must be 16-byte aligned, with a row pitch in "
                     r"multiples of 16 elements, got address offset 0 and row pitch 344")),
])
def test_gpu_misaligned_pointers_are_refused(where, msg):
    """The kernels move 16-byte chunks (cp.async, TMA): a tensor one element off, or rows at a
    pitch that is not a multiple of 16 bytes, is refused naming it; the output left alone."""
    def off_by_one(t):
        buf = torch.empty(t.numel() + 1, dtype=t.dtype, device=t.device)
        view = buf[1:].view(t.shape)
        view.copy_(t)
        return view

    if where.startswith("fp8"):
        case = fp8_case(7, 208, 336, "cuda", seed_of("mis8"))
        wide = torch.zeros(7, 344, dtype=torch.uint8, device="cuda").view(F8)
        wide[:, :336] = case.inputs["a"]
        case.inputs["a"] = wide[:, :336]
    else:
        case = gemm_case(7, 200, 328, torch.bfloat16, "cuda", seed_of("mis"), bias="a")
        if where == "a-pitch":
            wide = torch.zeros(7, 332, dtype=torch.bfloat16, device="cuda")
            case.inputs["a"] = wide[:, :328]
        elif where in ("a", "b", "bias"):
            case.inputs[where] = off_by_one(case.inputs[where])
    out = torch.full(case.out_shape, float("nan"), dtype=case.out_dtype, device="cuda")
    if where == "out":
        out = off_by_one(out)
    before = out.clone()
    with pytest.raises(ValueError, match=msg):
        getattr(xt, case.op)(*case.args(), **case.attrs, out=out)
    assert torch.equal(bits(out), bits(before))


@gpu
def test_gpu_device_mix_is_refused():
    case = gemm_case(7, 200, 328, torch.bfloat16, "cuda", seed_of("mix"), bias="a")
    a, b, bias = case.args()
    with pytest.raises(ValueError, match="gemm: b must be on a's device cuda:0, got cpu"):
        xt.gemm(a, b.cpu())
    with pytest.raises(ValueError, match="gemm: bias must be on a's device cuda:0, got cpu"):
        xt.gemm(a, b, bias.cpu())
    with pytest.raises(ValueError, match="gemm: out must be on a's device cpu, got cuda:0"):
        xt.gemm(a.cpu(), b.cpu(), out=torch.empty(7, 200, dtype=torch.bfloat16, device="cuda"))
    c8 = fp8_case(7, 208, 336, "cuda", seed_of("mix8"))
    args = c8.args()
    args[2] = args[2].cpu()
    with pytest.raises(ValueError, match="gemm_fp8: a_scale must be on a's device cuda:0, got cpu"):
        xt.gemm_fp8(*args)
    with pytest.raises(ValueError, match="quantize_fp8: q must be on x's device cuda:0, got cpu"):
        xt.quantize_fp8(torch.ones(4, 8, device="cuda"), q=torch.zeros(4, 8).to(F8))


def _cc() -> int:
    major, minor = torch.cuda.get_device_capability()
    return 10 * major + minor


@gpu
def test_gpu_unsupported_kernels_are_refused():
    """What the device cannot run is refused before launch, saying why (gemm::Unsupported)."""
    case = gemm_case(7, 200, 328, torch.bfloat16, "cuda", seed_of("unsup"), b_layout="KN")
    with pytest.raises(ValueError, match=(r"gemm: the sm90 kernel takes b as \[n, k\] only; "
                                          r"asked: kernel='sm90'")):
        xt.gemm(*case.args(), b_layout="KN", kernel="sm90")
    c8 = fp8_case(7, 208, 336, "cuda", seed_of("unsup8"))
    with pytest.raises(ValueError, match=("gemm_fp8: the sm80 kernel takes 16-bit inputs only|"
                                          "gemm_fp8: e4m3 GEMM needs an sm_90 GPU")):
        xt.gemm_fp8(*c8.args(), kernel="sm80")


@gpu
@pytest.mark.skipif(torch.cuda.is_available() and _cc() == 90, reason="an sm_90 GPU runs these")
def test_gpu_sm90_only_paths_are_refused_elsewhere():
    case = gemm_case(7, 200, 328, torch.bfloat16, "cuda", seed_of("not90"))
    with pytest.raises(ValueError, match=(r"gemm: the sm90 kernel needs an sm_90 GPU \(H100, "
                                          r"H200\); asked: kernel='sm90'.*\(sm_\d+\)")):
        xt.gemm(*case.args(), kernel="sm90")
    c8 = fp8_case(7, 208, 336, "cuda", seed_of("not90-8"))
    with pytest.raises(ValueError, match=r"gemm_fp8: e4m3 GEMM needs an sm_90 GPU"):
        xt.gemm_fp8(*c8.args())


# ------------------------------------------------------------------ graphs, compile


@gpu
@pytest.mark.parametrize("num_splits", [0, 1, 8])
def test_gpu_cuda_graph_capture_and_replay(num_splits):
    """Captured once (plan and workspace resolved at capture, the workspace from the graph's
    pool), replayed over new inputs written in place: the new inputs' result."""
    case = gemm_case(16, 256, 4096, torch.bfloat16, "cuda", seed_of("graph"), bias="float32",
                     num_splits=num_splits)
    c8 = fp8_case(16, 256, 4096, "cuda", seed_of("graph8"), a_scale="block", b_scale="block",
                  num_splits=num_splits)
    out = torch.empty(case.out_shape, dtype=torch.bfloat16, device="cuda")
    out8 = torch.empty(c8.out_shape, dtype=torch.bfloat16, device="cuda")

    def run():
        xt.gemm(*case.args(), **case.attrs, out=out)
        xt.gemm_fp8(*c8.args(), **c8.attrs, out=out8)

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        run()  # warm-up: loads the module, plans, outside the capture
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        run()
    gen = torch.Generator().manual_seed(seed_of("graph-refill"))
    for step in range(3):
        for c in (case, c8):
            a = c.inputs["a"]
            if a.dtype == F8:
                a.copy_(e4m3(a.shape, "cuda", gen))
            else:
                a.copy_(torch.randn(tuple(a.shape), generator=gen).to(a.dtype))
        out.fill_(float("nan"))
        out8.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        assert_close(out, reference(case), *tolerance(case), f"gemm replay {step}")
        assert_close(out8, reference(c8), *tolerance(c8), f"gemm_fp8 replay {step}")


@gpu
def test_gpu_torch_compile_fullgraph():
    case = gemm_case(64, 256, 1024, torch.bfloat16, "cuda", seed_of("compile"), bias="a")
    a, b, bias = case.args()

    def layer(a, b, bias):
        h = xt.gemm(a, b, bias, out_dtype=torch.float32)  # [64, 256]
        q, s = xt.quantize_fp8(h, "row")
        qb, sb = xt.quantize_fp8(b[:, :256], "block2d")  # a strided [256, 256] weight
        qa, sa = xt.quantize_fp8(h, "block")
        return h * 2, xt.gemm_fp8(q, qb.contiguous(), s, sb.amax().reshape(1)), \
            xt.gemm_fp8(qa, qb, sa, sb, out_dtype="float32")

    eager = layer(a, b, bias)
    compiled = torch.compile(layer, fullgraph=True)(a, b, bias)
    for e, c in zip(eager, compiled):
        assert torch.equal(bits(e), bits(c))


# ------------------------------------------------------------------ the same bits: JAX, CuPy


def _fw_cases():
    return {
        "gemm": lambda: gemm_case(64, 200, 328, torch.bfloat16, "cuda", seed_of("fw"),
                                  bias="float32", out_dtype="float32"),
        "gemm-kn": lambda: gemm_case(7, 200, 328, torch.float16, "cuda", seed_of("fwkn"),
                                     bias="a", b_layout="KN"),
        "gemm_gated": lambda: gated_case(300, 200, 328, torch.bfloat16, "cuda", seed_of("fwg"),
                                         bias="a"),
        "gemm_gated-split": lambda: gated_case(1, 200, 4096, torch.float16, "cuda",
                                               seed_of("fwgs"), act="gelu_tanh"),
        "gemm_fp8": lambda: fp8_case(64, 208, 336, "cuda", seed_of("fw8"), a_scale="block",
                                     b_scale="block", bias="out"),
        "gemm_fp8-row": lambda: fp8_case(1, 208, 336, "cuda", seed_of("fw8r"), a_scale="row1",
                                         b_scale="tensor", out_dtype="float16"),
        "quantize_fp8": lambda: Case("quantize_fp8", {"x": quantize_input(
            (300, 200), torch.bfloat16, "cuda", seed_of("fwq"))}, {"granularity": "block2d"}),
    }


def _jax_array(t: torch.Tensor):
    """A jax array on the GPU of t's values, through DLPack (a host round trip as a fallback)."""
    import jax

    t = t.contiguous()
    torch.cuda.synchronize()
    try:
        return jax.dlpack.from_dlpack(t)
    except Exception:  # noqa: BLE001 (an older jax, or a dtype it does not import)
        return jax.device_put(to_numpy(t), jax.devices("gpu")[0])


def _cupy_array(t: torch.Tensor):
    """A CuPy array of t's values (bfloat16 and float8_e4m3fn as ml_dtypes', through an integer
    view: CuPy holds e4m3 arrays only as containers of bytes)."""
    import cupy

    t = t.contiguous()
    if t.dtype == torch.bfloat16:
        return cupy.from_dlpack(t.view(torch.int16)).view(np.dtype(ml_dtypes.bfloat16))
    if t.dtype == F8:
        return cupy.from_dlpack(t.view(torch.uint8)).view(NP_F8)
    return cupy.from_dlpack(t)


def _from_cupy(a) -> torch.Tensor:
    import cupy

    cupy.cuda.get_current_stream().synchronize()
    if a.dtype == NP_F8:
        return torch.from_dlpack(a.view(np.uint8)).view(F8)
    if a.dtype == np.dtype(ml_dtypes.bfloat16):
        return torch.from_dlpack(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_dlpack(a)


@pytest.mark.parametrize("fw", [pytest.param("jax", marks=needs_jax_gpu),
                                pytest.param("jax-jit", marks=needs_jax_gpu),
                                pytest.param("cupy", marks=needs_cupy)])
@pytest.mark.parametrize("key", list(_fw_cases()))
@gpu
def test_gpu_frameworks_same_bits_as_torch(key, fw):
    case = _fw_cases()[key]()
    op = case.op
    args = case.args()
    want = as_tuple(getattr(xt, op)(*args, **case.attrs))
    if fw.startswith("jax"):
        import jax
        import xkernels.jax as xj

        fn = functools.partial(getattr(xj, op), **case.attrs)
        res = (jax.jit(fn) if fw == "jax-jit" else fn)(
            *[None if a is None else _jax_array(a) for a in args])
        got = [from_numpy(np.asarray(r)) for r in as_tuple(res)]
        for r in as_tuple(res):
            assert {d.platform for d in r.devices()} == {"gpu"}
    else:
        import xkernels.cupy as xc

        torch.cuda.synchronize()
        res = getattr(xc, op)(*[None if a is None else _cupy_array(a) for a in args],
                              **case.attrs)
        got = [_from_cupy(r) for r in as_tuple(res)]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, g.dtype, w.shape, w.dtype)
        assert torch.equal(bits(g), bits(w.cpu())), f"{fw}.{key}"


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=gpu)])
@pytest.mark.parametrize("granularity", ["tensor", "row", "block", "block2d"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_quantize_fp8_signed_zeros(device, granularity, dtype):
    # x / scale keeps the sign of a zero (e4m3 0x80 for -0.0): an FMA-corrected division lost it
    x = torch.tensor([[-0.0, 0.0, -1.5, 3.0] * 8] * 3, dtype=dtype, device=device)
    q, _ = xt.quantize_fp8(x, granularity=granularity)
    got = q.view(torch.uint8).cpu()
    assert got[:, 0::4].eq(0x80).all() and got[:, 1::4].eq(0).all(), got[0, :4]
