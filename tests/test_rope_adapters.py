"""The RoPE ops' adapter contracts: torch's custom ops (opcheck of the in-place and the _out form,
torch.compile), in place in torch/NumPy/CuPy and returned by JAX, the same bits from every
framework (host path here; GPU: torch, CuPy, JAX on the device), errors naming the argument.
Correctness against the references: tests/test_rope.py."""

from __future__ import annotations

import functools

import ml_dtypes
import numpy as np
import pytest
import torch
import xkernels.numpy as xn
import xkernels.torch as xt
from conftest import gpu, needs_cupy, needs_jax, needs_jax_gpu
from xkernels.ops import OPS, ROPE_OPS

BF16 = np.dtype(ml_dtypes.bfloat16)
NAMES = sorted(ROPE_OPS)
ATTRS = {"theta": 500000.0, "interleaved": True, "rotary_dim": 48, "rope_scale": 8.0}


def inputs(name, dtype=torch.bfloat16, device="cpu", t=9, seed=0):
    """q, k (views of a packed qkv), [q_weight, k_weight,] positions, in the table's order."""
    gen = torch.Generator().manual_seed(seed)
    hq, hk, d = 4, 2, 64
    qkv = torch.randn(t, (hq + 2 * hk) * d, generator=gen).to(dtype).to(device)
    ins = {"q": qkv[:, : hq * d].view(t, hq, d), "k": qkv[:, hq * d: (hq + hk) * d].view(t, hk, d),
           "positions": torch.randint(0, 500000, (t,), generator=gen, dtype=torch.int32).to(device),
           "q_weight": torch.randn(d, generator=gen).to(dtype).to(device),
           "k_weight": torch.randn(d, generator=gen).to(dtype).to(device)}
    return [ins[x.name] for x in OPS[name].inputs]


def bits(t):
    return t.detach().cpu().contiguous().view({2: torch.int16, 4: torch.int32}[t.element_size()])


def to_numpy(t):
    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(BF16).copy()
    return t.numpy().copy()


def from_numpy(a):
    a = np.array(a)
    if a.dtype == BF16:
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def torch_result(name, ins, attrs):
    ins = [x.clone() for x in ins]
    assert getattr(xt, name)(*ins, **attrs) is None
    return ins[0], ins[1]


def encoded(name, attrs):
    op = OPS[name]
    full = {a.name: a.default for a in op.attrs} | attrs
    return [a.encode(full[a.name]) for a in op.attrs]


# ------------------------------------------------------------------ torch


@pytest.mark.parametrize("name", NAMES)
def test_schema_and_opcheck(name):
    ins = inputs(name)
    schema = str(getattr(torch.ops.xkernels, name).default._schema)
    assert schema.startswith(f"xkernels::{name}(Tensor(m0!) q, Tensor(m1!) k, "), schema
    out_schema = str(getattr(torch.ops.xkernels, f"{name}_out").default._schema)
    assert out_schema.startswith(f"xkernels::{name}_out(Tensor(a0!) q_out, Tensor(a1!) k_out, "
                                 "Tensor q, Tensor k, "), out_schema
    attrs = encoded(name, ATTRS)
    torch.library.opcheck(getattr(torch.ops.xkernels, name).default,
                          [x.clone() for x in ins] + attrs)
    outs = [torch.empty_like(ins[0]), torch.empty_like(ins[1])]
    torch.library.opcheck(getattr(torch.ops.xkernels, f"{name}_out").default, outs + ins + attrs)


@pytest.mark.parametrize("name", NAMES)
def test_dispatcher_path_matches_fast_path(name):
    ins = inputs(name)
    want = torch_result(name, ins, ATTRS)
    got = [x.clone() for x in ins]
    getattr(torch.ops.xkernels, name)(*got, *encoded(name, ATTRS))
    assert torch.equal(bits(got[0]), bits(want[0])) and torch.equal(bits(got[1]), bits(want[1]))
    outs = [torch.full_like(ins[0], float("nan")), torch.full_like(ins[1], float("nan"))]
    getattr(torch.ops.xkernels, f"{name}_out")(*outs, *ins, *encoded(name, ATTRS))
    assert torch.equal(bits(outs[0]), bits(want[0])) and torch.equal(bits(outs[1]), bits(want[1]))


def test_given_outputs_together_or_not_at_all():
    q, k, pos = inputs("apply_rope")
    with pytest.raises(TypeError, match="xkernels.torch.apply_rope: q_out, k_out are given "
                                        "together"):
        xt.apply_rope(q, k, pos, q_out=torch.empty_like(q))
    with pytest.raises(TypeError, match="xkernels.torch.apply_rope: q_out must be a torch.Tensor"):
        xt.apply_rope(q, k, pos, q_out=to_numpy(q), k_out=torch.empty_like(k))


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_torch_compile_fullgraph_in_place_on_views(backend):
    """Compiled, the in-place op on views of a packed qkv mutates the caller's tensor as eager
    does (functionalization writes the views back)."""
    hq, hk, d = 4, 2, 64

    def layer(qkv, pos, w):
        t = qkv.shape[0]
        q = qkv[:, : hq * d].view(t, hq, d)
        k = qkv[:, hq * d: (hq + hk) * d].view(t, hk, d)
        xt.qk_norm_rope(q, k, w, w, pos, theta=1e6)
        xt.apply_rope(q, k, pos, interleaved=True, rotary_dim=32)
        return qkv.float().sum(-1)

    gen = torch.Generator().manual_seed(0)
    qkv = torch.randn(9, (hq + 2 * hk) * d, generator=gen).to(torch.bfloat16)
    pos = torch.arange(9, dtype=torch.int32) * 1000
    w = torch.randn(d, generator=gen).to(torch.bfloat16)
    eager_qkv = qkv.clone()
    want = layer(eager_qkv, pos, w)
    comp_qkv = qkv.clone()
    got = torch.compile(layer, fullgraph=True, backend=backend)(comp_qkv, pos, w)
    assert torch.equal(want, got)
    assert torch.equal(bits(eager_qkv), bits(comp_qkv))


def test_grad_is_refused():
    q, k, pos = inputs("apply_rope", torch.float32)
    with pytest.raises(NotImplementedError, match="xkernels.torch.apply_rope has no backward"):
        xt.apply_rope(q.detach().clone().requires_grad_(), k, pos)


# ------------------------------------------------------------------ every framework, one result


def _host(a):
    import jax

    return jax.device_put(a, jax.devices("cpu")[0])


def _numpy(name, ins, attrs):
    arrays = [to_numpy(x) for x in ins]
    assert getattr(xn, name)(*arrays, **attrs) is None  # in place
    return from_numpy(arrays[0]), from_numpy(arrays[1])


def _jax(name, ins, attrs, jitted, place=_host):
    import jax
    import xkernels.jax as xj

    fn = functools.partial(getattr(xj, name), **attrs)
    res = (jax.jit(fn) if jitted else fn)(*[place(to_numpy(x)) for x in ins])
    assert isinstance(res, tuple) and len(res) == 2
    return tuple(from_numpy(r) for r in res)


FRAMEWORKS = ["numpy", pytest.param("jax", marks=needs_jax),
              pytest.param("jax-jit", marks=needs_jax)]


@pytest.mark.parametrize("attrs", [{}, ATTRS], ids=["default", "attrs"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=str)
@pytest.mark.parametrize("fw", FRAMEWORKS)
@pytest.mark.parametrize("name", NAMES)
def test_bitwise_equal_to_torch(name, fw, dtype, attrs):
    ins = inputs(name, dtype)
    want = torch_result(name, ins, attrs)
    got = _numpy(name, ins, attrs) if fw == "numpy" else _jax(name, ins, attrs, fw == "jax-jit")
    for g, w in zip(got, want):
        assert g.shape == w.shape and torch.equal(bits(g), bits(w)), f"{fw}.{name}"


@gpu
@pytest.mark.parametrize("fw", [pytest.param("cupy", marks=needs_cupy),
                                pytest.param("jax", marks=needs_jax_gpu),
                                pytest.param("jax-jit", marks=needs_jax_gpu)])
@pytest.mark.parametrize("name", NAMES)
def test_gpu_frameworks_bitwise_equal_to_torch(name, fw):
    ins = inputs(name, torch.bfloat16, "cuda", t=1000)
    want = torch_result(name, ins, ATTRS)
    if fw == "cupy":
        import cupy
        import xkernels.cupy as xc

        arrays = [cupy.from_dlpack(x.contiguous().view(torch.int16) if x.dtype == torch.bfloat16
                                   else x.contiguous()) for x in ins]
        arrays = [a.view(BF16) if x.dtype == torch.bfloat16 else a for a, x in zip(arrays, ins)]
        assert getattr(xc, name)(*arrays, **ATTRS) is None
        got = [from_numpy(cupy.asnumpy(a)) for a in arrays[:2]]
    else:
        import jax

        got = _jax(name, ins, ATTRS, fw == "jax-jit",
                   place=lambda a: jax.device_put(a, jax.devices("gpu")[0]))
    for g, w in zip(got, want):
        assert torch.equal(bits(g), bits(w)), f"{fw}.{name}"


def test_numpy_in_place_given_outputs_and_read_only():
    q, k, pos = (to_numpy(x) for x in inputs("apply_rope"))
    q0, k0 = q.copy(), k.copy()
    qo, ko = np.full_like(q, np.nan), np.full_like(k, np.nan)
    assert xn.apply_rope(q, k, pos, q_out=qo, k_out=ko) is None
    assert np.array_equal(q.view(np.int16), q0.view(np.int16))
    assert xn.apply_rope(q, k, pos) is None
    assert np.array_equal(q.view(np.int16), qo.view(np.int16))
    assert np.array_equal(k.view(np.int16), ko.view(np.int16))
    q0.flags.writeable = False
    with pytest.raises(ValueError, match="xkernels.numpy.apply_rope: q is written but is "
                                         "read-only"):
        xn.apply_rope(q0, k0, pos)
    # read-only inputs are fine when the outputs are given
    assert xn.apply_rope(q0, k0, pos, q_out=qo, k_out=ko) is None
    with pytest.raises(TypeError, match="xkernels.numpy.apply_rope: positions must be a "
                                        "numpy.ndarray, got torch.Tensor"):
        xn.apply_rope(q, k, torch.zeros(9, dtype=torch.int32))


@needs_jax
def test_jax_errors_at_trace_time_and_static_attributes():
    import jax
    import xkernels.jax as xj

    q, k, pos = (_host(to_numpy(x)) for x in inputs("apply_rope"))
    with pytest.raises(TypeError, match="apply_rope: positions must be int32, got float32"):
        jax.jit(xj.apply_rope).lower(q, k, _host(np.arange(9, dtype=np.float32)))
    with pytest.raises(ValueError, match="apply_rope: rotary_dim must be even"):
        xj.apply_rope(q, k, pos, rotary_dim=7)
    with pytest.raises(TypeError, match="xkernels.jax.apply_rope: theta must be a static"):
        jax.jit(lambda q, th: xj.apply_rope(q, k, pos, theta=th))(q, 1e4)
    # the module left its dry-run mode: the op computes after the failed checks
    want = torch_result("apply_rope", inputs("apply_rope"), {})
    got = xj.apply_rope(q, k, pos)
    assert torch.equal(bits(from_numpy(got[0])), bits(want[0]))


@needs_jax
def test_jax_donated_buffers_are_reused():
    """Under jax.jit with donated q and k, the outputs alias their buffers."""
    import jax
    import xkernels.jax as xj

    q, k, pos = (_host(to_numpy(x)) for x in inputs("apply_rope", torch.float32))
    want = torch_result("apply_rope", inputs("apply_rope", torch.float32), {})
    fn = jax.jit(lambda q, k, p: xj.apply_rope(q, k, p), donate_argnums=(0, 1))
    qo, ko = fn(q, k, pos)
    assert torch.equal(bits(from_numpy(qo)), bits(want[0]))
    assert torch.equal(bits(from_numpy(ko)), bits(want[1]))
