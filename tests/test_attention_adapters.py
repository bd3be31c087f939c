"""The attention ops' adapter contracts on the host path: torch's custom ops (opcheck,
torch.compile), what a call returns, the same bits from torch, NumPy and JAX (eagerly and under
jax.jit), errors naming the argument from each, and the caches keyed on the attributes. Not the
attention's correctness (tests/test_attention*.py)."""

from __future__ import annotations

import functools

import ml_dtypes
import numpy as np
import pytest
import torch
import xkernels.numpy as xn
import xkernels.torch as xt
from conftest import needs_jax
from xkernels import jit
from xkernels.ops import ATTENTION_OPS, OPS

BF16 = np.dtype(ml_dtypes.bfloat16)
ATTN = sorted(ATTENTION_OPS)
WITH_ATTRS = sorted(n for n, o in ATTENTION_OPS.items() if o.attrs)

# attribute sets per op with attributes: the defaults, the LSE, and every attribute changed
ATTR_SETS = {
    "default": {},
    "lse": {"return_lse": True},
    "all": {"causal": True, "window_left": 3, "logits_soft_cap": 30.0, "sm_scale": 0.1,
            "return_lse": True, "num_splits": 1},
}


def _attrs(name: str, which: str) -> dict:
    return ATTR_SETS[which] if OPS[name].attrs else {}


def inputs(name: str, dtype=torch.float16, seed=0) -> list[torch.Tensor]:
    """Small CPU inputs of op `name`, in the table's order."""
    gen = torch.Generator().manual_seed(seed)

    def r(*shape, dt=dtype):
        return torch.randn(*shape, generator=gen).to(dt)

    def i32(*values):
        return torch.tensor(values, dtype=torch.int32)

    pages = {"k_cache": r(5, 4, 2, 64), "v_cache": r(5, 4, 2, 64)}  # NHD, page_size 4
    table = {"kv_indptr": i32(0, 2, 5), "kv_indices": i32(4, 0, 1, 3, 2),
             "kv_last_page_len": i32(3, 2)}
    ins = {
        "attention": lambda: {"q": r(2, 5, 4, 64), "k": r(2, 7, 2, 64), "v": r(2, 7, 2, 64)},
        "attention_varlen": lambda: {"q": r(7, 4, 64), "k": r(9, 2, 64), "v": r(9, 2, 64),
                                     "cu_seqlens_q": i32(0, 3, 7), "cu_seqlens_k": i32(0, 4, 9)},
        "attention_paged": lambda: {"q": r(7, 4, 64), **pages, "qo_indptr": i32(0, 3, 7),
                                    **table},
        "decode_paged": lambda: {"q": r(2, 4, 64), **pages, **table},
        "merge_state": lambda: {"v_a": r(3, 4, 64), "s_a": r(3, 4, dt=torch.float32),
                                "v_b": r(3, 4, 64), "s_b": r(3, 4, dt=torch.float32)},
        "merge_states": lambda: {"v": r(3, 3, 4, 64), "s": r(3, 3, 4, dt=torch.float32)},
    }[name]()
    return [ins[x.name] for x in OPS[name].inputs]


def as_tuple(res) -> tuple:
    return res if isinstance(res, tuple) else (res,)


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.detach().cpu().contiguous().view({2: torch.int16, 4: torch.int32}[t.element_size()])


def to_numpy(t: torch.Tensor) -> np.ndarray:
    """A NumPy copy (bfloat16 as ml_dtypes.bfloat16)."""
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(BF16).copy()
    return t.numpy().copy()


def from_numpy(a) -> torch.Tensor:
    a = np.array(a)
    if a.dtype == BF16:
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def op_args(name: str, which: str = "lse") -> list:
    """Arguments of torch.ops.xkernels.<name>: outputs, inputs, encoded attributes."""
    op = OPS[name]
    ins = inputs(name)
    attrs = {a.name: a.default for a in op.attrs} | _attrs(name, which)
    res = as_tuple(getattr(xt, name)(*ins, **attrs))
    outs = [torch.empty_like(r) for r in res]
    if len(outs) < len(op.outputs):  # the LSE not asked for: an empty float32 tensor
        outs.append(torch.empty(0, dtype=torch.float32))
    return [*outs, *ins, *(a.encode(attrs[a.name]) for a in op.attrs)]


# ------------------------------------------------------------------ torch


# Each op with its default attributes, and the ops with attributes with other sets too.
OPCHECK_RUNS = [(n, w) for n in ATTN for w in ("default", "lse") if w == "default" or OPS[n].attrs]
BITWISE_RUNS = [(n, w) for n in ATTN for w in sorted(ATTR_SETS) if w == "default" or OPS[n].attrs]


@pytest.mark.parametrize("name,which", OPCHECK_RUNS, ids=[f"{n}-{w}" for n, w in OPCHECK_RUNS])
def test_opcheck(name, which):
    torch.library.opcheck(getattr(torch.ops.xkernels, name).default, op_args(name, which))


def test_schema_has_no_workspace():
    schema = str(torch.ops.xkernels.attention.default._schema)
    assert schema == ("xkernels::attention(Tensor(a0!) out, Tensor(a1!) lse, Tensor q, Tensor k, "
                      "Tensor v, int causal, int window_left, float logits_soft_cap, "
                      "float sm_scale, int return_lse, int num_splits, int kernel) -> ()"), schema


@pytest.mark.parametrize("name", ATTN)
def test_dispatcher_path_matches_fast_path(name):
    args = op_args(name)
    n = len(OPS[name].outputs)
    getattr(torch.ops.xkernels, name)(*args)
    attrs = {a.name: a.default for a in OPS[name].attrs} | _attrs(name, "lse")
    fast = as_tuple(getattr(xt, name)(*args[n:n + len(OPS[name].inputs)], **attrs))
    for d, f in zip(args[:n], fast):
        assert torch.equal(bits(d), bits(f)), name


@pytest.mark.parametrize("name", ATTN)
def test_returned_structure_and_given_outputs(name):
    op = OPS[name]
    ins = inputs(name)
    fn = getattr(xt, name)
    res = fn(*ins)
    if op.attrs:  # out alone unless the LSE is asked for
        assert isinstance(res, torch.Tensor) and res.dtype == ins[0].dtype
        out, lse = fn(*ins, return_lse=True)
        assert torch.equal(bits(out), bits(res))
        assert lse.dtype == torch.float32 and lse.shape == ins[0].shape[:-1]
    else:  # merge ops: always (out, lse)
        out, lse = res
        assert out.dtype == ins[0].dtype and lse.dtype == torch.float32
    # given by keyword: written and returned as they are
    o, s = torch.full_like(out, float("nan")), torch.full_like(lse, float("nan"))
    kw = {"return_lse": True} if op.attrs else {}
    got = fn(*ins, **kw, out=o, lse=s)
    assert got[0] is o and got[1] is s
    assert torch.equal(bits(o), bits(out)) and torch.equal(bits(s), bits(lse))
    if op.attrs:
        assert fn(*ins, out=o) is o
    with pytest.raises(TypeError, match=f"xkernels.torch.{name}: out must be a torch.Tensor, "
                                        "got numpy.ndarray"):
        fn(*ins, out=to_numpy(out))
    with pytest.raises(TypeError, match=f"xkernels.torch.{name}: lse must be a torch.Tensor"):
        fn(*ins, **kw, lse=[1.0])


def test_torch_compile_fullgraph():
    q, k, v = inputs("attention")

    def layer(q, k, v):
        o = xt.attention(q, k, v, causal=True)
        o2, lse = xt.attention(q, k, v, sm_scale=0.2, return_lse=True)
        return o.float() + o2.float(), lse * 2

    def given(q, k, v, out, lse):
        xt.attention(q, k, v, return_lse=True, out=out, lse=lse)
        return out.float() * 2, lse

    eager = layer(q, k, v)
    compiled = torch.compile(layer, fullgraph=True, backend="aot_eager")(q, k, v)
    for e, c in zip(eager, compiled):
        assert torch.equal(e, c)
    outs = [torch.empty_like(q), torch.empty(q.shape[:-1])]
    want = given(q, k, v, torch.empty_like(q), torch.empty(q.shape[:-1]))
    got = torch.compile(given, fullgraph=True, backend="aot_eager")(q, k, v, *outs)
    for w, g in zip(want, got):
        assert torch.equal(w, g)
    # Inductor (the op alone: no C++ kernel of Inductor's to compile)
    fn = functools.partial(xt.attention, window_left=2, return_lse=True)
    for w, g in zip(fn(q, k, v), torch.compile(fn, fullgraph=True)(q, k, v)):
        assert torch.equal(w, g)


def test_grad_is_refused():
    q, k, v = inputs("attention")
    with pytest.raises(NotImplementedError, match="xkernels.torch.attention has no backward"):
        xt.attention(q.requires_grad_(), k, v)
    with torch.no_grad():
        xt.attention(q, k, v)


def test_plan_cache_is_hit():
    """The encoded attributes (sm_scale None: NaN) compare equal from call to call: one plan."""
    q, k, v = inputs("attention")
    xt.attention(q, k, v)
    n = len(jit._plans)
    for _ in range(3):
        xt.attention(q, k, v)
        xn.attention(to_numpy(q), to_numpy(k), to_numpy(v))
    assert len(jit._plans) == n
    attrs = tuple(a.encode(a.default) for a in OPS["attention"].attrs)
    got, ws = jit.plan(OPS["attention"], -1, (tuple(q.shape), tuple(k.shape), tuple(v.shape)),
                       attrs)
    i = [a.name for a in OPS["attention"].attrs].index("num_splits")
    assert ws == 0 and got[i] == 1  # host memory: never split
    assert got[:i] + got[i + 1:] == attrs[:i] + attrs[i + 1:]
    assert callable(jit.FUNCTIONS["attention_plan"])
    with pytest.raises(KeyError):
        jit.FUNCTIONS["merge_state_plan"]  # no workspace, no planner


# ------------------------------------------------------------------ every framework, one result


def _host(a):
    """A jax array on jax's CPU device: these tests compare with torch's CPU (host) results, and
    jax on a GPU machine would otherwise place it on the GPU (the GPU bits: test_attention.py)."""
    import jax

    return jax.device_put(a, jax.devices("cpu")[0])


def _numpy(name, ins, attrs):
    return tuple(from_numpy(r) for r in as_tuple(
        getattr(xn, name)(*[to_numpy(t) for t in ins], **attrs)))


def _jax(name, ins, attrs, jitted):
    import jax
    import xkernels.jax as xj

    fn = functools.partial(getattr(xj, name), **attrs)
    res = (jax.jit(fn) if jitted else fn)(*[_host(to_numpy(t)) for t in ins])
    return tuple(from_numpy(r) for r in as_tuple(res))


FRAMEWORKS = ["numpy", pytest.param("jax", marks=needs_jax),
              pytest.param("jax-jit", marks=needs_jax)]


@pytest.mark.parametrize("fw", FRAMEWORKS)
@pytest.mark.parametrize("name,which", BITWISE_RUNS, ids=[f"{n}-{w}" for n, w in BITWISE_RUNS])
def test_bitwise_equal_to_torch(name, fw, which):
    attrs = _attrs(name, which)
    ins = inputs(name, torch.bfloat16 if which == "all" else torch.float16)
    want = as_tuple(getattr(xt, name)(*ins, **attrs))
    got = _numpy(name, ins, attrs) if fw == "numpy" else _jax(name, ins, attrs, fw == "jax-jit")
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        assert torch.equal(bits(g), bits(w)), f"{fw}.{name}"


def test_numpy_given_outputs_and_read_only():
    q, k, v = (to_numpy(t) for t in inputs("attention"))
    out, lse = xn.attention(q, k, v, return_lse=True)
    o, s = np.full_like(out, np.nan), np.full_like(lse, np.nan)
    got = xn.attention(q, k, v, return_lse=True, out=o, lse=s)
    assert got[0] is o and got[1] is s
    assert np.array_equal(o.view(np.int16), out.view(np.int16)) and np.array_equal(s, lse)
    q.flags.writeable = False  # read-only inputs are fine
    assert xn.attention(q, k, v).shape == q.shape
    o.flags.writeable = False
    with pytest.raises(ValueError, match="xkernels.numpy.attention: out is written but is "
                                         "read-only"):
        xn.attention(q, k, v, out=o)
    with pytest.raises(TypeError, match="xkernels.numpy.attention: k must be a numpy.ndarray, "
                                        "got torch.Tensor"):
        xn.attention(q, torch.ones(1), v)


# ------------------------------------------------------------------ errors name the argument


def _bad(kind: str):
    q, k, v = inputs("attention")
    if kind == "head_dim":
        return (torch.zeros(2, 5, 4, 96, dtype=torch.float16), k, v), ValueError, \
            r"attention: head_dim \(q's last dimension\) must be one of 64, 128, 256, got 96"
    return (q.to(torch.int32), k, v), TypeError, \
        "attention: q must be float16 or bfloat16, got int32"


@pytest.mark.parametrize("kind", ["head_dim", "int32"])
def test_bad_input_names_the_argument(kind):
    args, exc, msg = _bad(kind)
    with pytest.raises(exc, match=msg):
        xt.attention(*args)
    with pytest.raises(exc, match=msg):
        xn.attention(*[to_numpy(a) for a in args])
    # nothing was left in the dry-run mode: an op computes after a JAX check failed
    out = torch.full((2, 5, 4, 64), float("nan"), dtype=torch.float16)
    xt.attention(*inputs("attention"), out=out)
    assert not out.isnan().any()


@needs_jax
@pytest.mark.parametrize("kind", ["head_dim", "int32"])
def test_jax_bad_input_raises_at_trace_time(kind):
    import jax
    import xkernels.jax as xj

    args, exc, msg = _bad(kind)
    arrays = [_host(to_numpy(a)) for a in args]
    with pytest.raises(exc, match=msg):
        jax.jit(xj.attention).lower(*arrays)  # traced, not run
    with pytest.raises(exc, match=msg):
        xj.attention(*arrays)
    # the module left its dry-run mode: ops compute after the failed check
    ok = [_host(to_numpy(a)) for a in inputs("attention")]
    want = xt.attention(*inputs("attention"))
    assert torch.equal(bits(from_numpy(xj.attention(*ok))), bits(want))
    out = torch.full_like(want, float("nan"))
    assert not xt.attention(*inputs("attention"), out=out).isnan().any()


@needs_jax
def test_jax_attributes_static_and_cached():
    import jax
    import xkernels.jax as xj

    q, k, v = (_host(to_numpy(t)) for t in inputs("attention"))
    with pytest.raises(TypeError, match="xkernels.jax.attention: sm_scale must be a static"):
        jax.jit(lambda q, s: xj.attention(q, k, v, sm_scale=s))(q, 0.5)
    with pytest.raises(TypeError, match="xkernels.jax.attention: num_splits must be a static"):
        jax.jit(lambda q, n: xj.attention(q, k, v, num_splits=n))(q, 1)
    with pytest.raises(TypeError, match="causal must be a bool"):
        xj.attention(q, k, v, causal=2)
    with pytest.raises(ValueError, match="kv_layout must be one of"):
        xj.decode_paged(*[_host(to_numpy(t)) for t in inputs("decode_paged")],
                        kv_layout="NDH")
    xj.attention(q, k, v)
    before = xj._attention_core.cache_info()
    xj.attention(q, k, v)  # default sm_scale (None -> NaN): the same jitted function
    xj.attention(q, k, v, causal=False, num_splits=np.int64(0))
    after = xj._attention_core.cache_info()
    assert after.misses == before.misses and after.hits == before.hits + 2


@needs_jax
@pytest.mark.parametrize("name", ["attention", "decode_paged", "merge_state"])
def test_jax_vmap_is_per_slice(name):
    import jax
    import xkernels.jax as xj

    op = OPS[name]
    attrs = {"return_lse": True} if op.attrs else {}
    fn = functools.partial(getattr(xj, name), **attrs)
    slices = [inputs(name, seed=s) for s in range(3)]
    data = [x.role != "index" for x in op.inputs]  # index tensors shared (unbatched)
    args = [_host(np.stack([to_numpy(s[i]) for s in slices]) if d else to_numpy(slices[0][i]))
            for i, d in enumerate(data)]
    got = jax.jit(jax.vmap(fn, in_axes=tuple(0 if d else None for d in data)))(*args)
    for j, s in enumerate(slices):
        want = as_tuple(fn(*[_host(to_numpy(t)) for t in s]))
        for g, w in zip(as_tuple(got), want):
            assert np.array_equal(np.asarray(g[j]).view(np.uint8), np.asarray(w).view(np.uint8))


@needs_jax
def test_jax_grad_is_refused():
    import jax
    import xkernels.jax as xj

    q, k, v = (_host(to_numpy(t).astype("float32")) for t in inputs("attention"))

    def loss(q):
        return xj.attention(q.astype(jax.numpy.float16), k.astype(jax.numpy.float16),
                            v.astype(jax.numpy.float16)).astype(jax.numpy.float32).sum()

    with pytest.raises(NotImplementedError, match="xkernels.jax.attention has no backward"):
        jax.grad(loss)(q)
