"""The GEMM ops' adapter contracts on the host path: torch's custom ops (opcheck, torch.compile),
what a call returns, optional inputs (bias=None), dtypes named by attributes (out_dtype as a
string or any framework's dtype object), float8_e4m3fn crossing DLPack from every framework, the
same bits from torch, NumPy and JAX (eagerly and under jax.jit), errors naming the argument from
each, and the caches keyed on the attributes. Not the GEMMs' correctness (tests/test_gemm.py)."""

from __future__ import annotations

import functools

import ml_dtypes
import numpy as np
import pytest
import torch
import xkernels.numpy as xn
import xkernels.torch as xt
from conftest import needs_jax
from gemm_cases import (
    F8,
    as_tuple,
    bits,
    e4m3,
    from_numpy,
    quantize_input,
    scales,
    seed_of,
    to_numpy,
)
from xkernels import _dlpack, jit
from xkernels.ops import GEMM_OPS, OPS

NP_F8 = np.dtype(ml_dtypes.float8_e4m3fn)
GEMMS = sorted(GEMM_OPS)


def inputs(name: str, seed: int = 0, **kw) -> dict:
    """Small CPU inputs of op `name` by input name (bias given), some replaced by `kw`."""
    gen = torch.Generator().manual_seed(seed_of("adapters", name, seed))
    ins = {
        "gemm": lambda: {"a": torch.randn(2, 3, 32, generator=gen).bfloat16(),
                         "b": torch.randn(24, 32, generator=gen).bfloat16(),
                         "bias": torch.randn(24, generator=gen)},
        "gemm_gated": lambda: {"a": torch.randn(2, 3, 32, generator=gen).half(),
                               "b": torch.randn(48, 32, generator=gen).half(),
                               "bias": torch.randn(48, generator=gen).half()},
        "gemm_fp8": lambda: {"a": e4m3((5, 256), "cpu", gen), "b": e4m3((144, 256), "cpu", gen),
                             "a_scale": scales((5, 2), "cpu", gen),
                             "b_scale": scales((2, 2), "cpu", gen),
                             "bias": torch.randn(144, generator=gen).bfloat16()},
        "quantize_fp8": lambda: {"x": quantize_input((5, 300), torch.float16, "cpu",
                                                     seed_of("q", seed))},
    }[name]()
    return {**ins, **kw}


def args_of(name: str, ins: dict) -> list:
    return [ins[x.name] for x in OPS[name].inputs]


# attribute sets per op
ATTR_SETS = {
    "gemm": {"default": {}, "f32-kn": {"out_dtype": "float32", "b_layout": "KN", "num_splits": 3,
                                       "kernel": "sm80"}},
    "gemm_gated": {"default": {}, "gelu-f32": {"act": "gelu_tanh", "out_dtype": "float32",
                                               "num_splits": 2, "kernel": "sm90"}},
    "gemm_fp8": {"default": {}, "f16": {"out_dtype": "float16", "num_splits": 1,
                                        "kernel": "sm90"}},
    "quantize_fp8": {"default": {}, "block": {"granularity": "block"},
                     "block2d": {"granularity": "block2d"}, "tensor": {"granularity": "tensor"}},
}
CASES = [(n, w) for n in GEMMS for w in ATTR_SETS[n]]
CASE_IDS = [f"{n}-{w}" for n, w in CASES]


def case(name: str, which: str, seed: int = 0):
    """(inputs, attrs) of a case: "f32-kn" gives b as [k, n] and a float32 bias, "f16" a float16
    bias."""
    attrs = ATTR_SETS[name][which]
    ins = inputs(name, seed)
    if name == "gemm" and attrs.get("b_layout") == "KN":
        ins["b"] = ins["b"].t().contiguous()
    if name == "gemm_fp8" and attrs.get("out_dtype") == "float16":
        ins["bias"] = ins["bias"].half()
    return ins, attrs


def op_args(name: str, which: str) -> list:
    """Arguments of torch.ops.xkernels.<name>: outputs, inputs, encoded attributes."""
    op = OPS[name]
    ins, attrs = case(name, which)
    full = {a.name: a.default for a in op.attrs} | attrs
    res = as_tuple(getattr(xt, name)(**ins, **attrs))
    return [*(torch.empty_like(r) for r in res), *args_of(name, ins),
            *(a.encode(full[a.name]) for a in op.attrs)]


# ------------------------------------------------------------------ torch


@pytest.mark.parametrize("name,which", CASES, ids=CASE_IDS)
def test_opcheck(name, which):
    """torch.library.opcheck; for ops with float8_e4m3fn arguments without its test_schema, which
    multiplies the arguments to detect mutation and torch has no float8 multiply on the CPU
    ("mul_cpu_reduced_float" not implemented for 'Float8_e4m3fn'): what it checks, that the op
    writes its outputs and nothing else, is checked below."""
    args = op_args(name, which)
    utils = [u for u in ("test_schema", "test_autograd_registration", "test_faketensor",
                         "test_aot_dispatch_dynamic")
             if u != "test_schema" or not any(isinstance(a, torch.Tensor) and a.dtype == F8
                                              for a in args)]
    torch.library.opcheck(getattr(torch.ops.xkernels, name).default, args, test_utils=utils)
    n = len(OPS[name].outputs)
    ins = [a.clone() for a in args[n:] if isinstance(a, torch.Tensor)]
    for o in args[:n]:
        o.copy_(torch.full(o.shape, float("nan")))  # poison (float8: its NaN)
    getattr(torch.ops.xkernels, name)(*args)
    for a, b in zip([a for a in args[n:] if isinstance(a, torch.Tensor)], ins):
        assert torch.equal(bits(a), bits(b)), f"{name}: an input was written"
    ins_, attrs = case(name, which)
    for o, want in zip(args[:n], as_tuple(getattr(xt, name)(**ins_, **attrs))):
        assert torch.equal(bits(o), bits(want)), f"{name}: an output not written"


def test_schemas_have_no_workspace_and_no_optional_tensor():
    schemas = {n: str(getattr(torch.ops.xkernels, n).default._schema) for n in GEMMS}
    assert schemas == {
        "gemm": "xkernels::gemm(Tensor(a0!) out, Tensor a, Tensor b, Tensor bias, int out_dtype, "
                "int b_layout, int num_splits, int kernel) -> ()",
        "gemm_gated": "xkernels::gemm_gated(Tensor(a0!) out, Tensor a, Tensor b, Tensor bias, "
                      "int act, int out_dtype, int num_splits, int kernel) -> ()",
        "gemm_fp8": "xkernels::gemm_fp8(Tensor(a0!) out, Tensor a, Tensor b, Tensor a_scale, "
                    "Tensor b_scale, Tensor bias, int out_dtype, int num_splits, int kernel) -> ()",
        "quantize_fp8": "xkernels::quantize_fp8(Tensor(a0!) q, Tensor(a1!) scale, Tensor x, "
                        "int granularity) -> ()",
    }, schemas


@pytest.mark.parametrize("name,which", CASES, ids=CASE_IDS)
def test_dispatcher_path_matches_fast_path(name, which):
    args = op_args(name, which)
    n = len(OPS[name].outputs)
    getattr(torch.ops.xkernels, name)(*args)
    ins, attrs = case(name, which)
    fast = as_tuple(getattr(xt, name)(**ins, **attrs))
    for d, f in zip(args[:n], fast):
        assert torch.equal(bits(d), bits(f)), name


def test_returned_structure_and_given_outputs():
    ins = inputs("gemm")
    out = xt.gemm(**ins)
    assert isinstance(out, torch.Tensor) and out.shape == (2, 3, 24)
    assert out.dtype == torch.bfloat16
    o = torch.full_like(out, float("nan"))
    assert xt.gemm(**ins, out=o) is o and torch.equal(bits(o), bits(out))
    q, s = xt.quantize_fp8(inputs("quantize_fp8")["x"], "block")
    assert q.dtype == F8 and q.shape == (5, 300) and s.dtype == torch.float32 and s.shape == (5, 3)
    q2, s2 = torch.empty_like(q), torch.empty_like(s)
    got = xt.quantize_fp8(inputs("quantize_fp8")["x"], "block", q=q2, scale=s2)
    assert got[0] is q2 and got[1] is s2 and torch.equal(bits(q2), bits(q))
    with pytest.raises(TypeError, match="xkernels.torch.gemm: out must be a torch.Tensor, got "
                                        "numpy.ndarray"):
        xt.gemm(**ins, out=to_numpy(out))
    with pytest.raises(TypeError, match="xkernels.torch.quantize_fp8: scale must be a "
                                        "torch.Tensor"):
        xt.quantize_fp8(inputs("quantize_fp8")["x"], scale=[1.0])


@pytest.mark.parametrize("out_dtype", ["float32", torch.float32, np.float32, np.dtype("float32")],
                         ids=["str", "torch", "numpy-type", "numpy-dtype"])
def test_out_dtype_as_any_dtype_object(out_dtype):
    ins = inputs("gemm")
    want = xt.gemm(**ins, out_dtype="float32")
    got = xt.gemm(**ins, out_dtype=out_dtype)
    assert got.dtype == torch.float32 and torch.equal(bits(got), bits(want))
    # a's own dtype, named, is the default's
    assert torch.equal(bits(xt.gemm(**ins, out_dtype=torch.bfloat16)), bits(xt.gemm(**ins)))


def test_bias_none_is_no_bias():
    ins = inputs("gemm")
    with_bias = xt.gemm(**ins, out_dtype="float32")
    no_bias = xt.gemm(ins["a"], ins["b"], out_dtype="float32")
    assert torch.allclose(with_bias - ins["bias"], no_bias, atol=1e-5)
    assert torch.equal(bits(no_bias), bits(xt.gemm(ins["a"], ins["b"], None,
                                                   out_dtype="float32")))


def test_torch_compile_fullgraph():
    g, f8, qz = inputs("gemm"), inputs("gemm_fp8"), inputs("quantize_fp8")

    def layer(a, b, bias, a8, b8, sa, sb, x):
        h = xt.gemm(a, b, bias, out_dtype=torch.float32)
        h2 = xt.gemm(a, b.t().contiguous(), b_layout="KN")
        o8 = xt.gemm_fp8(a8, b8, sa, sb, out_dtype="float32")
        q, s = xt.quantize_fp8(x, "block")
        return h * 2, h2, o8 + 1, q, s

    args = [*args_of("gemm", g), *args_of("gemm_fp8", f8)[:4], qz["x"]]
    eager = layer(*args)
    compiled = torch.compile(layer, fullgraph=True, backend="aot_eager")(*args)
    for e, c in zip(eager, compiled):
        assert torch.equal(bits(e), bits(c))
    # Inductor (the op alone: no C++ kernel of Inductor's to compile)
    fn = functools.partial(xt.gemm, out_dtype="float32")
    a, b, bias = args_of("gemm", g)
    assert torch.equal(bits(fn(a, b, bias)), bits(torch.compile(fn, fullgraph=True)(a, b, bias)))


def test_grad_is_refused():
    ins = inputs("gemm")
    ins["a"] = ins["a"].float().requires_grad_()
    with pytest.raises(NotImplementedError, match="xkernels.torch.gemm has no backward"):
        xt.gemm(ins["a"], ins["b"].float(), bias=None)
    with torch.no_grad(), pytest.raises(TypeError, match="gemm: a must be float16 or bfloat16, "
                                                     "got float32"):
        xt.gemm(ins["a"], ins["b"].float())


def test_plan_cache_is_hit():
    """One plan per shapes and attributes, from every framework; on the host never split."""
    ins = inputs("gemm")
    xt.gemm(**ins)
    n = len(jit._plans)
    for _ in range(3):
        xt.gemm(**ins)
        xn.gemm(*(to_numpy(t) for t in args_of("gemm", ins)))
    assert len(jit._plans) == n
    op = OPS["gemm"]
    attrs = tuple(a.encode(a.default) for a in op.attrs)
    got, ws = jit.plan(op, -1, ((2, 3, 32), (24, 32), (24,)), attrs)
    assert ws == 0 and got[2] == 1 and got[:2] == attrs[:2]
    assert callable(jit.FUNCTIONS["gemm_plan"]) and callable(jit.FUNCTIONS["gemm_fp8_plan"])
    with pytest.raises(KeyError):
        jit.FUNCTIONS["quantize_fp8_plan"]  # no workspace, no planner
    with pytest.raises(ValueError, match=r"gemm: num_splits must be in \[0, 65535\]"):
        jit.FUNCTIONS["gemm_plan"](-1, [2, 32], [24, 32], [0], -1, 0, 70000, 0)


# ------------------------------------------------------------------ every framework, one result


def _host(a):
    """A jax array on jax's CPU device (these tests compare with torch's host results)."""
    import jax

    return jax.device_put(a, jax.devices("cpu")[0])


def _numpy(name, ins, attrs):
    args = [None if t is None else to_numpy(t) for t in args_of(name, ins)]
    return tuple(from_numpy(r) for r in as_tuple(getattr(xn, name)(*args, **attrs)))


def _jax(name, ins, attrs, jitted):
    import jax
    import xkernels.jax as xj

    fn = functools.partial(getattr(xj, name), **attrs)
    args = [None if t is None else _host(to_numpy(t)) for t in args_of(name, ins)]
    res = (jax.jit(fn) if jitted else fn)(*args)
    return tuple(from_numpy(np.asarray(r)) for r in as_tuple(res))


FRAMEWORKS = ["numpy", pytest.param("jax", marks=needs_jax),
              pytest.param("jax-jit", marks=needs_jax)]


# Each case with its bias, and without it where the op has one.
BIAS_CASES = [(n, w, nb) for n, w in CASES
              for nb in ((False, True) if "bias" in inputs(n) else (False,))]


@pytest.mark.parametrize("fw", FRAMEWORKS)
@pytest.mark.parametrize("name,which,no_bias", BIAS_CASES,
                         ids=[f"{n}-{w}-{'no-bias' if nb else 'bias'}" for n, w, nb in BIAS_CASES])
def test_bitwise_equal_to_torch(name, which, fw, no_bias):
    ins, attrs = case(name, which)
    if no_bias:
        ins["bias"] = None
    want = as_tuple(getattr(xt, name)(*args_of(name, ins), **attrs))
    got = _numpy(name, ins, attrs) if fw == "numpy" else _jax(name, ins, attrs, fw == "jax-jit")
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, g.dtype, w.shape, w.dtype)
        assert torch.equal(bits(g), bits(w)), f"{fw}.{name}"


def test_numpy_float8_is_zero_copy_and_strided():
    """ml_dtypes float8_e4m3fn arrays cross as retagged uint8 views: strided inputs read in place,
    a strided q written in place."""
    ins = inputs("gemm_fp8")
    a, b, sa, sb, bias = (to_numpy(t) for t in args_of("gemm_fp8", ins))
    want = xn.gemm_fp8(a, b, sa, sb, bias)
    wide = np.zeros((5, 288), np.uint8).view(NP_F8)
    wide[:, 16:272] = a
    got = xn.gemm_fp8(wide[:, 16:272], b, sa, sb, bias)
    assert np.array_equal(got.view(np.uint16), want.view(np.uint16))
    x = to_numpy(inputs("quantize_fp8")["x"])
    q, _ = xn.quantize_fp8(x, "row")
    buf = np.zeros((5, 320), np.uint8)
    view = buf[:, 8:308].view(NP_F8)
    res = xn.quantize_fp8(x, "row", q=view)
    assert res[0] is view and np.array_equal(buf[:, 8:308], q.view(np.uint8))
    assert (buf[:, :8] == 0).all() and (buf[:, 308:] == 0).all()


def test_numpy_given_outputs_and_read_only():
    ins = inputs("gemm")
    a, b, bias = (to_numpy(t) for t in args_of("gemm", ins))
    out = xn.gemm(a, b, bias)
    o = np.full_like(out, np.nan)
    assert xn.gemm(a, b, bias, out=o) is o
    assert np.array_equal(o.view(np.int16), out.view(np.int16))
    a.flags.writeable = False  # read-only inputs are fine
    assert xn.gemm(a, b).shape == out.shape
    o.flags.writeable = False
    with pytest.raises(ValueError, match="xkernels.numpy.gemm: out is written but is read-only"):
        xn.gemm(a, b, out=o)
    with pytest.raises(TypeError, match="xkernels.numpy.gemm: bias must be a numpy.ndarray, got "
                                        "torch.Tensor"):
        xn.gemm(a, b, torch.ones(24))
    with pytest.raises(TypeError, match="xkernels.numpy.gemm: b must be a numpy.ndarray"):
        xn.gemm(a, [1.0])


def test_dlpack_retag_float8():
    x = np.arange(6, dtype=np.uint8).reshape(2, 3)
    t = _dlpack.float8_e4m3fn_tensor(x.__dlpack__(max_version=(1, 0)))
    assert str(t.dtype) == "float8_e4m3fn" and tuple(t.shape) == (2, 3)
    with pytest.raises(ValueError, match="expected a uint8 DLPack tensor, got code 0 bits 8"):
        _dlpack.retag_float8_e4m3fn(x.view(np.int8).__dlpack__(max_version=(1, 0)))
    assert _dlpack.RETAGGED["float8_e4m3fn"][0] == "uint8"


# ------------------------------------------------------------------ JAX


@needs_jax
@pytest.mark.parametrize("kind", ["k", "scale-mix", "dtype"])
def test_jax_bad_input_raises_at_trace_time(kind):
    import jax
    import xkernels.jax as xj

    if kind == "k":
        fn, args = xj.gemm, [np.ones((7, 12), ml_dtypes.bfloat16), np.ones((24, 12),
                                                                         ml_dtypes.bfloat16)]
        exc, msg = ValueError, r"gemm: k \(a's last dimension\) must be a multiple of 8, got 12"
    elif kind == "scale-mix":
        ins = inputs("gemm_fp8")
        fn = xj.gemm_fp8
        args = [to_numpy(ins["a"]), to_numpy(ins["b"]), to_numpy(ins["a_scale"]),
                np.ones((144,), np.float32)]
        exc, msg = ValueError, "gemm_fp8: a_scale is per block .* and b_scale per row"
    else:
        fn, args = xj.quantize_fp8, [np.ones((4, 8), np.int32)]
        exc, msg = TypeError, "quantize_fp8: x must be float16, bfloat16 or float32, got int32"
    arrays = [_host(a) for a in args]
    with pytest.raises(exc, match=msg):
        jax.jit(fn).lower(*arrays)  # traced, not run
    with pytest.raises(exc, match=msg):
        fn(*arrays)
    # the module left its dry-run mode: ops compute after the failed check
    ok = inputs("gemm")
    want = xt.gemm(**ok)
    got = xj.gemm(*[_host(to_numpy(t)) for t in args_of("gemm", ok)])
    assert torch.equal(bits(from_numpy(np.asarray(got))), bits(want))


@needs_jax
def test_jax_attributes_static_dtypes_and_cached():
    import jax
    import jax.numpy as jnp
    import xkernels.jax as xj

    a, b, bias = (_host(to_numpy(t)) for t in args_of("gemm", inputs("gemm")))
    with pytest.raises(TypeError, match="xkernels.jax.gemm: num_splits must be a static"):
        jax.jit(lambda a, n: xj.gemm(a, b, num_splits=n))(a, 1)
    with pytest.raises(ValueError, match="b_layout must be one of"):
        xj.gemm(a, b, b_layout="TN")
    want = xj.gemm(a, b, bias, out_dtype="float32")
    for d in (jnp.float32, np.float32, jnp.dtype("float32")):
        got = xj.gemm(a, b, bias, out_dtype=d)
        assert got.dtype == jnp.float32 and np.array_equal(np.asarray(got), np.asarray(want))
    before = xj._attention_core.cache_info()
    xj.gemm(a, b, bias, out_dtype=jnp.float32)  # encoded like "float32": the same function
    xj.gemm(a, b, bias, out_dtype="float32", num_splits=np.int64(0))
    after = xj._attention_core.cache_info()
    assert after.misses == before.misses and after.hits == before.hits + 2
    q, s = xj.quantize_fp8(a, "block")
    assert q.dtype == jnp.float8_e4m3fn and s.dtype == jnp.float32 and s.shape == (2, 3, 1)


@needs_jax
def test_jax_vmap_is_per_slice():
    import jax
    import xkernels.jax as xj

    slices = [inputs("gemm", seed=s) for s in range(3)]
    a = _host(np.stack([to_numpy(s["a"]) for s in slices]))
    b, bias = _host(to_numpy(slices[0]["b"])), _host(to_numpy(slices[0]["bias"]))
    got = jax.jit(jax.vmap(xj.gemm, in_axes=(0, None, None)))(a, b, bias)
    for j, s in enumerate(slices):
        want = xt.gemm(s["a"], slices[0]["b"], slices[0]["bias"])
        assert torch.equal(bits(from_numpy(np.asarray(got[j]))), bits(want))


@needs_jax
def test_jax_grad_is_refused():
    import jax
    import xkernels.jax as xj

    a, b, _ = (_host(to_numpy(t).astype("float32")) for t in args_of("gemm", inputs("gemm")))

    def loss(a):
        return xj.gemm(a.astype(jax.numpy.bfloat16), b.astype(jax.numpy.bfloat16)).astype(
            jax.numpy.float32).sum()

    with pytest.raises(NotImplementedError, match="xkernels.jax.gemm has no backward"):
        jax.grad(loss)(a)
