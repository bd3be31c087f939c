"""The host path's float math (bindings/host/vmath.h: exp, the normal CDF) and its float16
conversions (convert.h, branch-free), measured through the ops on float32 and float16 arrays
against float64 and NumPy: the bounds that vmath.h's header states."""

import numpy as np
import pytest
import xkernels.numpy as xn
from scipy.special import erfc

TINY = 1e-30  # below this the outputs are compared by absolute error (they are ~0 anyway)


def ulps(got, ref):
    """|got - ref| in units of float32's spacing at ref."""
    spacing = np.spacing(np.abs(ref).astype(np.float32)).astype(np.float64)
    return np.abs(got.astype(np.float64) - ref) / spacing


def sweep(lo, hi, n=400_001):
    return np.linspace(lo, hi, n, dtype=np.float64).astype(np.float32)


@pytest.mark.parametrize("lo,hi", [(-100, -5), (-5, 5), (5, 100)])
def test_silu_within_3_ulp(lo, hi):
    x = sweep(lo, hi)
    xd = x.astype(np.float64)
    ref = xd / (1 + np.exp(-xd))
    got = xn.silu(x)
    big = np.abs(ref) > TINY
    assert ulps(got[big], ref[big]).max() <= 3
    assert np.abs(got[~big] - ref[~big]).max(initial=0) <= 1e-35


@pytest.mark.parametrize("lo,hi", [(-40, -5), (-5, 0), (0, 5), (5, 40)])
def test_gelu_erf_within_8_ulp(lo, hi):
    # Phi from erfc's tail: no cancellation for x < 0, where Phi is small
    x = sweep(lo, hi)
    xd = x.astype(np.float64)
    ref = xd * 0.5 * erfc(-xd / np.sqrt(2))
    got = xn.gelu(x, approximate="none")
    big = np.abs(ref) > TINY
    assert ulps(got[big], ref[big]).max() <= 8
    assert np.abs(got[~big] - ref[~big]).max(initial=0) <= 1e-35


@pytest.mark.parametrize("lo,hi,rel", [(-12, -5, 1.5e-5), (-5, 0, 2.5e-6), (0, 40, 2e-7)])
def test_gelu_tanh_relative_error(lo, hi, rel):
    # x / (1 + e^(-2u)), the same function as 0.5 x (1 + tanh(u)) without its cancellation; the
    # error left is that of u in float (|2u| ~ 70 at x = -9: 1.2e-5 of e^(2u))
    x = sweep(lo, hi)
    xd = x.astype(np.float64)
    u = np.sqrt(2 / np.pi) * (xd + 0.044715 * xd**3)
    with np.errstate(over="ignore"):
        ref = xd / (1 + np.exp(-2 * u))
    got = xn.gelu(x, approximate="tanh").astype(np.float64)
    big = np.abs(ref) > TINY
    assert (np.abs(got[big] - ref[big]) / np.abs(ref[big])).max() <= rel


def test_softmax_exp_within_3_ulp():
    # softmax([0, d]) = [1, e^d] / (1 + e^d): e^d over the range that softmax feeds exp
    d = sweep(-86.9, 0, 1_000_001)
    got = xn.softmax(np.stack([np.zeros_like(d), d], 1))
    e = np.exp(d.astype(np.float64))
    assert ulps(got[:, 1], e / (1 + e)).max() <= 3
    assert ulps(got[:, 0], 1 / (1 + e)).max() <= 3


def test_softmax_far_below_the_max_is_zero():
    got = xn.softmax(np.array([[0.0, -87.0, -1e30, -np.inf, -200.0]], np.float32))
    assert got[0, 0] == 1 and (got[0, 1:] == 0).all()


def test_float16_round_trip_every_value():
    # mul_add(x, 1, 0) = x: each of the 65536 float16 values to float and back, bit for bit
    # (-0 + 0 = +0; NaNs stay NaN)
    h = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16)
    got = xn.mul_add(h, np.ones_like(h), np.zeros_like(h))
    nan = np.isnan(h)
    assert np.isnan(got[nan]).all()
    want = h[~nan].copy()
    want[want == 0] = 0  # -0 -> +0
    assert (got[~nan].view(np.uint16) == want.view(np.uint16)).all()


@pytest.mark.parametrize("cols", [1, 17, 4099])
def test_float32_to_float16_rounds_like_numpy(cols):
    # rmsnorm(ones, w) with eps 0 and float32 weights is w rounded to float16 (as the bfloat16
    # test in test_host_bf16.py): ties to even, overflow to inf, subnormals, NaN
    rng = np.random.default_rng(cols)
    bits = rng.integers(0, 2**32, size=cols, dtype=np.uint64).astype(np.uint32)
    bits[: cols // 2] = (bits[: cols // 2] & 0x8FFFFFFF) | 0x30000000  # exponents of float16's range
    special = np.array([0x477FF000, 0x477FEFFF, 0x477FE000, 0x477FF001, 0x7F800000, 0x7FC00000,
                        0x38800000, 0x387FFFFF, 0x33800000, 0x33800001, 0x337FFFFF, 0x33000000,
                        0x3F801000, 0x3F803000, 0x80000000], np.uint32)
    n = min(cols, special.size)
    bits[:n] = special[:n]
    w = bits.view(np.float32)
    got = xn.rmsnorm(np.ones((2, cols), np.float16), w, 0.0)
    with np.errstate(over="ignore", invalid="ignore"):
        want = (np.float32(0) + w).astype(np.float16)
    nan = np.isnan(w)
    assert np.isnan(got[:, nan]).all()
    assert (got.view(np.uint16)[:, ~nan] == want.view(np.uint16)[~nan]).all()


def _ulp(ref, mant_bits, min_exp):
    """The spacing of a float format with `mant_bits` stored mantissa bits and smallest normal
    exponent `min_exp` at |ref|."""
    e = np.floor(np.log2(np.maximum(np.abs(ref), 2.0**min_exp)))
    return 2.0 ** (e - mant_bits)


@pytest.mark.parametrize("fmt", ["float16", "bfloat16"])
@pytest.mark.parametrize("op", ["silu", "gelu", "gelu_tanh", "softmax"])
def test_16bit_outputs_within_one_ulp(op, fmt):
    # 16-bit outputs take vmath's shorter polynomials (kFast, ~3e-6): still within one unit of
    # the output format of the float64 value (the correctly rounded one or its neighbour at a tie)
    if fmt == "bfloat16":
        ml_dtypes = pytest.importorskip("ml_dtypes")
        dt, mant, min_exp = np.dtype(ml_dtypes.bfloat16), 7, -126
    else:
        dt, mant, min_exp = np.dtype(np.float16), 10, -14
    x = sweep(-12, 12, 200_200).astype(dt)
    xd = x.astype(np.float64)
    if op == "softmax":
        x = x.reshape(-1, 1001)  # rows of 1001
        xd = xd.reshape(x.shape)
        e = np.exp(xd - xd.max(-1, keepdims=True))
        got, ref = xn.softmax(x), e / e.sum(-1, keepdims=True)
    elif op == "silu":
        got, ref = xn.silu(x), xd / (1 + np.exp(-xd))
    elif op == "gelu":
        got, ref = xn.gelu(x, approximate="none"), xd * 0.5 * erfc(-xd / np.sqrt(2))
    else:
        u = np.sqrt(2 / np.pi) * (xd + 0.044715 * xd**3)
        got, ref = xn.gelu(x, approximate="tanh"), xd / (1 + np.exp(-2 * u))
    got = got.astype(np.float64)
    big = np.abs(ref) > TINY  # below: where e^x overflows the gates give 0
    assert (np.abs(got - ref)[big] <= _ulp(ref[big], mant, min_exp)).all()
    assert np.abs(got[~big]).max(initial=0) <= TINY
