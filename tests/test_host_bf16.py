"""The host path's bfloat16 rounding (branch-free, vectorized) and the DLPack retag of NumPy's
bfloat16 arrays: exact results against ml_dtypes, specials included, and the errors."""

import numpy as np
import pytest

ml_dtypes = pytest.importorskip("ml_dtypes")

import tvm_ffi
import xkernels.numpy as xn
from xkernels import _dlpack

BF16 = np.dtype(ml_dtypes.bfloat16)


@pytest.mark.parametrize("cols", [1, 15, 16, 17, 4099])
def test_float32_to_bfloat16_rounds_like_ml_dtypes(cols):
    # rmsnorm(ones, w) with eps 0 is 1 * 1 * w[c] in float: with float32 weights and a bfloat16
    # input, the output is exactly the host's float32 -> bfloat16 conversion of w, over every
    # rounding case (ties to even, carries into the exponent, overflow to inf, NaN, subnormals)
    rng = np.random.default_rng(cols)
    bits = rng.integers(0, 2**32, size=cols, dtype=np.uint64).astype(np.uint32)
    special = np.array([0x3F808000, 0x3F818000, 0x3F80C000, 0x7F7FFFFF, 0x7F7F8000, 0x7F800000,
                        0xFF800000, 0x7FC00000, 0xFFC00001, 0x7F800001, 0x80000000, 0x00000001,
                        0x007FFFFF, 0x00008000, 0x00018000], np.uint32)
    n = min(cols, special.size)
    bits[:n] = special[:n]
    w = bits.view(np.float32)
    got = xn.rmsnorm(np.ones((2, cols), BF16), w, 0.0)
    with np.errstate(invalid="ignore"):
        want = (np.float32(0) + w).astype(BF16)  # (weight offset 0 + w): -0 becomes +0
    nan = np.isnan(w)
    assert (np.isnan(got.astype(np.float32)) == nan).all()
    assert (got.view(np.uint16)[:, ~nan] == want.view(np.uint16)[~nan]).all()


@pytest.mark.parametrize("cols", [1, 16, 33, 4096])
def test_rmsnorm_bf16_output_is_the_rounded_float_result(cols):
    rng = np.random.default_rng(cols)
    x = rng.standard_normal((2, cols), dtype=np.float32).astype(BF16)
    w = rng.standard_normal(cols, dtype=np.float32).astype(BF16)
    got = xn.rmsnorm(x, w, 1e-6)
    xf = x.astype(np.float64)
    want = xf / np.sqrt((xf * xf).mean(-1, keepdims=True) + 1e-6) * w.astype(np.float64)
    # one rounding to bfloat16 (8 bits) on top of float32 arithmetic
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=2**-8, atol=1e-6)
    # the float32 path with the same values, rounded once, agrees within one bfloat16 ulp
    got32 = xn.rmsnorm(x.astype(np.float32), w.astype(np.float32), 1e-6).astype(BF16)
    ulps = np.abs(got.view(np.uint16).astype(np.int32) - got32.view(np.uint16).astype(np.int32))
    assert ulps.max() <= 1


@pytest.mark.parametrize("shape", [(1,), (15,), (16,), (17,), (4099,), (3, 70)])
def test_mul_add_bf16_is_one_fma_rounded_to_bfloat16(shape):
    # a * b + c in one fma, rounded to float32 and then to bfloat16 (ties to even): with exponents
    # in [-8, 8] the float64 sum is exact, so the reference is exact too. Lengths around the
    # 16-value vector steps (AVX-512 path: a step and its scalar tail); a strided view of rows;
    # specials: infinities, their NaN sum, and NaN inputs, which give NaN.
    rng = np.random.default_rng(sum(shape))
    def draw(size):
        m = rng.uniform(1, 2, size) * rng.choice([-1.0, 1.0], size)
        return (m * 2.0 ** rng.integers(-8, 9, size)).astype(np.float32).astype(BF16)
    n = int(np.prod(shape))
    a, b, c = (draw(n) for _ in range(3))
    special = [(np.inf, 1, 0), (-np.inf, 2, 1), (np.inf, 1, -np.inf), (np.nan, 1, 0),
               (1, 2, np.nan), (0, np.inf, 1)]
    for i, (x, y, z) in enumerate(special[: min(n, len(special))]):
        a[i], b[i], c[i] = x, y, z
    if len(shape) == 2:  # the first columns of a wider array: rows with a pitch
        wide = [np.zeros((shape[0], shape[1] + 9), BF16) for _ in range(3)]
        for w, v in zip(wide, (a, b, c)):
            w[:, : shape[1]] = v.reshape(shape)
        a, b, c = (w[:, : shape[1]] for w in wide)
    with np.errstate(invalid="ignore"):
        exact = a.astype(np.float64) * b.astype(np.float64) + c.astype(np.float64)
        want = exact.astype(np.float32).astype(BF16)
    got = xn.mul_add(a, b, c)
    nan = np.isnan(exact)
    assert np.isnan(got.astype(np.float32)[nan]).all()
    assert (got[~nan].view(np.uint16) == want[~nan].view(np.uint16)).all()


def test_retag_bfloat16_both_capsule_kinds_and_errors():
    x = np.arange(6, dtype=np.float32).astype(BF16).reshape(2, 3)
    for cap in (x.view(np.uint16).__dlpack__(max_version=(1, 0)), x.view(np.uint16).__dlpack__()):
        t = _dlpack.bfloat16_tensor(cap)
        assert str(t.dtype) == "bfloat16" and tuple(t.shape) == (2, 3)
        assert t.data_ptr() == x.ctypes.data
    with pytest.raises(ValueError, match="uint16"):
        _dlpack.retag_bfloat16(x.view(np.int16).__dlpack__(max_version=(1, 0)))
    with pytest.raises(ValueError, match="unconsumed"):
        _dlpack.retag_bfloat16(object())
    used = x.view(np.uint16).__dlpack__(max_version=(1, 0))
    tvm_ffi.from_dlpack(used)
    with pytest.raises(ValueError, match="unconsumed"):
        _dlpack.retag_bfloat16(used)
