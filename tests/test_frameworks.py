"""One kernel, every framework: the cross-framework matrix and the adapters' contracts.

The matrix runs one test body over framework x op x dtype x shape (odd widths, 1 row, 3-D; strided
rows, per-head views and unaligned pointers where the framework has views): the result against
the float64 reference, and bitwise equal to xkernels.torch's on the same inputs and device. JAX
runs eagerly and under jax.jit (contiguous arrays: XLA has no strided views). Without a GPU the
matrix runs the host path for torch, jax and numpy; with one, torch, jax and cupy also run on it.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
import xkernels.numpy as xn
import xkernels.torch as xt
from cases import ATTRS, DTYPES, assert_close, call, copy_layout, make_inputs, reference
from conftest import HAS_CUPY, HAS_JAX, gpu, needs_cupy, needs_jax, needs_jax_gpu
from xkernels.ops import OPS, ROW_OPS

try:
    import ml_dtypes

    BF16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:
    BF16 = None

HOST_SHAPES = [((1, 7), "contiguous"), ((3, 127), "contiguous"), ((2, 3, 40), "contiguous"),
               ((5, 33), "strided"), ((4, 3, 16), "heads"), ((3, 24), "unaligned")]
GPU_SHAPES = [((1, 7), "contiguous"), ((3, 127), "contiguous"), ((37, 4096), "contiguous"),
              ((2, 16385), "contiguous"), ((9, 1000), "strided"), ((64, 8, 128), "heads"),
              ((33, 4096), "unaligned")]
# framework -> (devices it runs on, whether it has strided views)
FRAMEWORKS = {"torch": (("cpu", "cuda"), True), "jax": (("cpu", "cuda"), False),
              "jax-jit": (("cpu", "cuda"), False), "numpy": (("cpu",), True),
              "cupy": (("cuda",), True)}


def _cases():
    out = []
    for fw, (devices, views) in FRAMEWORKS.items():
        for dev in devices:
            marks = []
            if fw.startswith("jax"):
                marks.append(needs_jax_gpu if dev == "cuda" else needs_jax)
            if fw == "cupy":
                marks.append(needs_cupy)
            if dev == "cuda":
                marks.append(gpu)
            for shape, layout in HOST_SHAPES if dev == "cpu" else GPU_SHAPES:
                if views or layout == "contiguous":
                    out.append(pytest.param(fw, dev, shape, layout, marks=marks,
                                            id=f"{fw}-{dev}-{'x'.join(map(str, shape))}-{layout}"))
    return out


# ------------------------------------------------------------------ conversions (zero-copy views)


def to_numpy(t: torch.Tensor) -> np.ndarray:
    """A NumPy view of a CPU tensor (strides kept; bfloat16 as ml_dtypes.bfloat16)."""
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(BF16)
    return t.numpy()


def np_to_torch(a: np.ndarray) -> torch.Tensor:
    if a.dtype == BF16:
        return torch.from_numpy(np.array(a).view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(np.array(a))  # a copy: JAX's arrays are read-only


def to_cupy(t: torch.Tensor):
    """A CuPy view of a CUDA tensor (strides kept)."""
    import cupy

    if t.dtype == torch.bfloat16:
        return cupy.from_dlpack(t.view(torch.int16)).view(BF16)
    return cupy.from_dlpack(t)


def to_jax(t: torch.Tensor, device: str):
    import jax

    dev = jax.devices("gpu" if device == "cuda" else "cpu")[0]
    return jax.device_put(np.ascontiguousarray(to_numpy(t.cpu())), dev)


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.detach().cpu().contiguous().view({2: torch.int16, 4: torch.int32}[t.element_size()])


def run(fw: str, op, inputs: dict, attrs: dict, device: str) -> tuple[torch.Tensor, ...]:
    """The op through framework `fw` on outputs poisoned with NaN; its outputs as torch tensors.
    NumPy and CuPy write into views of torch tensors: what torch reads back is what they wrote."""
    if fw == "torch":
        return call(op, inputs, attrs)
    names = [x.name for x in op.inputs]
    if fw.startswith("jax"):
        import jax
        import xkernels.jax as xj

        fn = functools.partial(getattr(xj, op.name), **attrs)
        args = [to_jax(inputs[n], device) for n in names]
        res = (jax.jit(fn) if fw == "jax-jit" else fn)(*args)
        res = res if isinstance(res, tuple) else (res,)
        for r in res:
            assert {d.platform for d in r.devices()} == {"cpu" if device == "cpu" else "gpu"}
        return tuple(np_to_torch(np.asarray(r)) for r in res)
    view = to_numpy if fw == "numpy" else to_cupy
    mod = xn if fw == "numpy" else pytest.importorskip("xkernels.cupy")
    if op.in_place:  # the torch tensors the framework overwrites (laid out as the inputs)
        ins = {k: copy_layout(v) if k in op.aliases.values() else v for k, v in inputs.items()}
        assert getattr(mod, op.name)(*[view(ins[n]) for n in names], **attrs) is None
        got = tuple(ins[op.aliases[o.name]] for o in op.outputs)
    else:
        (o,) = op.outputs
        like = inputs[o.like]
        out_t = torch.full(o.shape(tuple(like.shape)), float("nan"), dtype=like.dtype,
                           device=like.device)
        out = view(out_t)
        assert getattr(mod, op.name)(*[view(inputs[n]) for n in names], **attrs, out=out) is out
        got = (out_t,)
    if device == "cuda":
        import cupy

        cupy.cuda.get_current_stream().synchronize()
    return got


@pytest.mark.parametrize("fw,device,shape,layout", _cases())
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("op", sorted(ROW_OPS))
def test_matrix(op, dtype, fw, device, shape, layout):
    """Against the float64 reference, and bitwise equal to xkernels.torch on the same device."""
    spec = OPS[op]
    gen = torch.Generator().manual_seed(7)
    inputs = make_inputs(spec, shape, dtype, device, layout, gen=gen)
    attrs = ATTRS.get(op, {})
    ref = reference(spec, inputs, attrs)
    got = run(fw, spec, inputs, attrs, device)
    assert_close(spec, got, ref, dtype, f" {fw} {device} {shape} {dtype} {layout}")
    if fw != "torch":
        for g, b in zip(got, call(spec, inputs, attrs)):
            assert torch.equal(bits(g), bits(b)), f"{op} {fw}: not bitwise equal to xkernels.torch"


# ------------------------------------------------------------------ every op in every adapter


def _adapters():
    mods = [("torch", xt, "cpu"), ("numpy", xn, "cpu")]
    if HAS_JAX:
        import xkernels.jax as xj

        mods.append(("jax", xj, "cpu"))
    if HAS_CUPY:
        import xkernels.cupy as xc

        mods.append(("cupy", xc, "cuda"))
    return mods


def test_every_op_in_every_adapter():
    """Every op of the table is a function of every adapter, and calling a row op through each
    gives xkernels.torch's result: an op left out of an adapter fails here (the attention ops'
    results: test_attention_adapters.py)."""
    adapters = _adapters()
    assert {"torch", "numpy"} <= {n for n, _, _ in adapters}
    for name, spec in OPS.items():
        gen = torch.Generator().manual_seed(3)
        attrs = ATTRS.get(name, {})
        for fw, mod, device in adapters:
            assert sorted(OPS) == sorted(mod.__all__), fw
            assert callable(getattr(mod, name, None)), f"xkernels.{fw} lacks {name}"
            if name not in ROW_OPS:
                continue
            inputs = make_inputs(spec, (2, 16), torch.float32, device, gen=gen)
            want = call(spec, inputs, attrs)
            for g, w in zip(run(fw, spec, inputs, attrs, device), want):
                assert torch.equal(bits(g), bits(w)), f"{fw}.{name}"


def test_import_xkernels_imports_no_framework():
    code = ("import sys, xkernels, xkernels.ops, xkernels.reference; "
            "print(sorted(m for m in ('torch', 'jax', 'cupy') if m in sys.modules))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert res.stdout.strip() == "[]", res.stdout


# ------------------------------------------------------------------ NumPy: zero copies, errors


def test_numpy_out_is_the_buffer_written():
    """out= may be a strided view: the kernel writes the caller's memory, no hidden copy."""
    x = np.random.default_rng(0).standard_normal((4, 40)).astype(np.float32)
    w = np.ones(40, np.float32)
    big = np.full((4, 64), np.nan, np.float32)
    out = big[:, 8:48]
    assert xn.rmsnorm(x, w, out=out) is out
    want = x / np.sqrt((x.astype(np.float64) ** 2).mean(-1, keepdims=True) + 1e-6)
    np.testing.assert_allclose(big[:, 8:48], want, rtol=1e-5, atol=1e-6)
    assert np.isnan(big[:, :8]).all() and np.isnan(big[:, 48:]).all()
    y = x.copy()
    assert xn.silu(y, out=y) is y  # in place through out=
    np.testing.assert_allclose(y, x / (1 + np.exp(-x)), rtol=1e-5, atol=1e-6)


@pytest.mark.skipif(BF16 is None, reason="needs ml_dtypes")
def test_numpy_bfloat16_zero_copy_and_in_place():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 32)).astype(BF16)
    r = rng.standard_normal((3, 32)).astype(BF16)
    w = rng.standard_normal(32).astype(BF16)
    x0, r0 = x.copy(), r.copy()
    assert xn.fused_add_rmsnorm(x, r, w) is None
    assert np.array_equal(r.view(np.uint16), (x0.astype(np.float32) + r0.astype(np.float32))
                          .astype(BF16).view(np.uint16))
    assert np.array_equal(x.view(np.uint16), xn.rmsnorm(r, w).view(np.uint16))
    buf = np.zeros((3, 40), BF16)
    view = buf[:, 4:36]  # a strided bfloat16 out: written in place through the retagged view
    assert xn.gelu(x0, out=view) is view
    assert (buf[:, 4:36] != 0).all() and (buf[:, :4] == 0).all() and (buf[:, 36:] == 0).all()


def test_numpy_read_only_inputs_and_refused_outputs():
    x = np.random.default_rng(2).standard_normal((2, 16)).astype(np.float32)
    x.flags.writeable = False
    np.testing.assert_allclose(xn.softmax(x).sum(-1), 1.0, rtol=1e-6)
    with pytest.raises(ValueError, match="xkernels.numpy.softmax: out is written but is read-only"):
        xn.softmax(x, out=x)
    with pytest.raises(ValueError, match="fused_add_rmsnorm: input is written but is read-only"):
        xn.fused_add_rmsnorm(x, x.copy(), np.ones(16, np.float32))
    # Given its outputs, the in-place op reads read-only inputs and writes only those outputs.
    r = x + 1
    r.flags.writeable = False
    out, res = np.full_like(x, np.nan), np.full_like(x, np.nan)
    assert xn.fused_add_rmsnorm(x, r, np.ones(16, np.float32), out=out, residual_out=res) is None
    np.testing.assert_allclose(res, x + r, rtol=1e-6)
    np.testing.assert_allclose(out, xn.rmsnorm(res, np.ones(16, np.float32)), rtol=1e-6)
    with pytest.raises(ValueError, match="fused_add_rmsnorm: residual_out is written but is read-only"):
        xn.fused_add_rmsnorm(x, r, np.ones(16, np.float32), out=out, residual_out=r)
    with pytest.raises(TypeError, match="xkernels.numpy.fused_add_rmsnorm: out, residual_out are "
                       "given together"):
        xn.fused_add_rmsnorm(x, r, np.ones(16, np.float32), residual_out=res)


def test_numpy_errors_name_the_argument():
    x, w = np.ones((4, 8), np.float32), np.ones(8, np.float32)
    with pytest.raises(TypeError, match=r"xkernels.numpy.rmsnorm: weight must be a "
                                        r"numpy.ndarray, got torch.Tensor"):
        xn.rmsnorm(x, torch.ones(8))
    with pytest.raises(ValueError, match=r"weight must have shape \(8,\) to match input's last "
                                         r"dim, got \(7,\)"):
        xn.rmsnorm(x, w[:7])
    with pytest.raises(TypeError, match="input must be float16, bfloat16 or float32, got float64"):
        xn.rmsnorm(x.astype(np.float64), w)
    with pytest.raises(ValueError, match="input must be contiguous in its last dimension"):
        xn.rmsnorm(np.ones((4, 16), np.float32)[:, ::2], w)
    with pytest.raises(ValueError, match="approximate must be one of"):
        xn.gelu(x, approximate="fast")


# ------------------------------------------------------------------ JAX: transformations, errors


@needs_jax
@pytest.mark.parametrize("op", sorted(ROW_OPS))
def test_jax_vmap_equals_per_slice(op):
    """vmap over the data arguments (weights unbatched: one call, the batch folded into rows),
    over every argument (a batched weight: sequential), nested, and on a non-leading axis."""
    import jax
    import xkernels.jax as xj

    spec = OPS[op]
    attrs = ATTRS.get(op, {})
    gen = torch.Generator().manual_seed(5)
    names = [x.name for x in spec.inputs]
    cols = [x.role == "column" for x in spec.inputs]
    batch = [make_inputs(spec, (3, 24), torch.float32, "cpu", gen=gen) for _ in range(4)]
    stacked = [np.stack([to_numpy(b[n]) for b in batch]) for n in names]
    fn = functools.partial(getattr(xj, op), **attrs)

    def per_slice(args_of):
        outs = [fn(*args_of(i)) for i in range(4)]
        return [np.stack([np.asarray(o[k] if isinstance(o, tuple) else o) for o in outs])
                for k in range(len(spec.outputs))]

    def same(got, want):
        got = got if isinstance(got, tuple) else (got,)
        for g, w in zip(got, want):
            assert np.array_equal(np.asarray(g), w), op

    shared = [s[0] for s in stacked]  # unbatched columns: those of slice 0
    in_axes = tuple(None if c else 0 for c in cols)
    same(jax.vmap(fn, in_axes=in_axes)(*[sh if c else s for s, sh, c in zip(stacked, shared, cols)]),
         per_slice(lambda i: [sh if c else s[i] for s, sh, c in zip(stacked, shared, cols)]))
    same(jax.jit(jax.vmap(fn))(*stacked), per_slice(lambda i: [s[i] for s in stacked]))
    nested = [s.reshape(2, 2, *s.shape[1:]) for s in stacked]
    got = jax.vmap(jax.vmap(fn))(*nested)
    same(tuple(np.asarray(g).reshape(4, *np.asarray(g).shape[2:])
               for g in (got if isinstance(got, tuple) else (got,))),
         per_slice(lambda i: [s[i] for s in stacked]))
    moved = [s if c else np.moveaxis(s, 0, 1) for s, c in zip(stacked, cols)]
    got = jax.vmap(fn, in_axes=tuple(0 if c else 1 for c in cols))(*moved)
    same(got, per_slice(lambda i: [s[i] for s in stacked]))


@needs_jax
def test_jax_vmap_with_one_data_argument_unbatched():
    import jax
    import xkernels.jax as xj

    rng = np.random.default_rng(3)
    a, b, c = (rng.standard_normal(s).astype(np.float32) for s in ((4, 2, 8), (2, 8), (2, 8)))
    got = jax.vmap(xj.mul_add, in_axes=(0, None, None))(a, b, c)
    assert np.array_equal(np.asarray(got), np.stack([np.asarray(xj.mul_add(a[i], b, c))
                                                     for i in range(4)]))


@needs_jax
@pytest.mark.parametrize("op", ["rmsnorm", "fused_add_rmsnorm", "softmax", "silu_and_mul"])
def test_jax_grad_raises_naming_the_op(op):
    import jax
    import xkernels.jax as xj

    spec = OPS[op]
    ins = make_inputs(spec, (2, 16), torch.float32, "cpu")
    args = [np.asarray(to_numpy(ins[x.name])) for x in spec.inputs]
    fn = getattr(xj, op)

    def loss(first):
        out = fn(first, *args[1:])
        return (out[0] if isinstance(out, tuple) else out).sum()

    with pytest.raises(NotImplementedError, match=f"xkernels.jax.{op} has no backward"):
        jax.grad(loss)(args[0])
    with pytest.raises(NotImplementedError, match=f"xkernels.jax.{op} has no backward"):
        jax.jit(jax.grad(loss))(args[0])
    loss(args[0])  # without a transformation: fine


@needs_jax
def test_jax_attributes_are_static():
    import jax
    import xkernels.jax as xj

    x, w = np.ones((2, 8), np.float32), np.ones(8, np.float32)
    with pytest.raises(TypeError, match="xkernels.jax.rmsnorm: eps must be a static Python value"):
        jax.jit(lambda x, e: xj.rmsnorm(x, w, eps=e))(x, 1e-5)
    with pytest.raises(TypeError, match="xkernels.jax.softmax: scale must be a static"):
        jax.jit(lambda x, s: xj.softmax(x, scale=s))(x, 2.0)
    f = jax.jit(lambda x, s: xj.softmax(x, scale=s), static_argnames="s")
    np.testing.assert_allclose(np.asarray(f(x, s=2.0)), 1 / 8, rtol=1e-6)
    assert np.array_equal(np.asarray(xj.rmsnorm(x, w, eps=1e-5)),
                          np.asarray(xj.rmsnorm(x, w, eps=np.float32(1e-5))))


@needs_jax
def test_jax_errors_name_the_argument():
    import jax.numpy as jnp
    import xkernels.jax as xj

    x, w = jnp.ones((4, 8)), jnp.ones(8)
    with pytest.raises(ValueError, match=r"rmsnorm: weight must have shape \(8,\) to match "
                                         r"input's last dim, got \(7,\)"):
        xj.rmsnorm(x, w[:7])
    with pytest.raises(ValueError, match=r"mul_add: c must have shape \(4, 8\) \(a's shape; no "
                                         r"broadcasting\), got \(2, 8\)"):
        xj.mul_add(x, x, x[:2])
    with pytest.raises(TypeError, match="rmsnorm: input must be float16, bfloat16 or float32, "
                                        "got int32"):
        xj.rmsnorm(x.astype(jnp.int32), w)
    with pytest.raises(ValueError, match="rmsnorm: eps must be >= 0"):
        xj.rmsnorm(x, w, eps=-1.0)
    with pytest.raises(ValueError, match="silu_and_mul: input's last dimension must be even"):
        xj.silu_and_mul(x[:, :7])
    with pytest.raises(TypeError, match=r"xkernels.jax.rmsnorm: weight must be a jax.Array \(or "
                                        r"numpy.ndarray\), got torch.Tensor"):
        xj.rmsnorm(x, torch.ones(8))
    with pytest.raises(TypeError, match="xkernels.numpy.rmsnorm: input must be a numpy.ndarray"):
        xn.rmsnorm(x, np.ones(8, np.float32))
    with pytest.raises(TypeError, match="xkernels.jax.softmax: input must be a jax.Array"):
        xj.softmax(torch.ones(2, 8))


@needs_jax
def test_jax_in_place_ops_return_aliased_results():
    import jax
    import jax.numpy as jnp
    import xkernels.jax as xj

    rng = np.random.default_rng(4)
    x, r = (jnp.asarray(rng.standard_normal((3, 32)), jnp.bfloat16) for _ in range(2))
    w = jnp.asarray(rng.standard_normal(32), jnp.bfloat16)
    out, res = xj.fused_add_rmsnorm(x, r, w)
    assert np.array_equal(np.asarray(res), np.asarray(x + r))
    assert np.array_equal(np.asarray(out), np.asarray(xj.rmsnorm(res, w)))
    hlo = jax.jit(xj.fused_add_rmsnorm).lower(x, r, w).as_text()
    assert hlo.count("#stablehlo.output_operand_alias<") == 2, hlo
    donated = jax.jit(xj.fused_add_rmsnorm, donate_argnums=(0, 1))
    o2, r2 = donated(jnp.array(x), jnp.array(r), w)
    assert np.array_equal(np.asarray(o2), np.asarray(out))
    assert np.array_equal(np.asarray(r2), np.asarray(res))


@needs_jax
def test_jax_second_device_and_mixed_devices():
    """In a process with two host devices: arrays on the second run there; arguments on two
    devices raise a ValueError naming the argument."""
    code = textwrap.dedent("""
        import jax, numpy as np, xkernels.jax as xj
        cpu0, cpu1 = jax.devices("cpu")[:2]
        x = jax.device_put(np.ones((4, 8), np.float32), cpu1)
        w = jax.device_put(np.full(8, 2.0, np.float32), cpu1)
        y = xj.rmsnorm(x, w)
        assert y.devices() == {cpu1}, y.devices()
        assert np.allclose(np.asarray(y), 2.0, atol=1e-5)
        try:
            xj.rmsnorm(x, jax.device_put(np.ones(8, np.float32), cpu0))
        except ValueError as e:
            print(e)
    """)
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2",
               JAX_PLATFORMS="cpu")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         check=False)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "xkernels.jax.rmsnorm: weight must be on input's device cpu:1, got cpu:0" in res.stdout


# ------------------------------------------------------------------ on the GPU


@needs_jax_gpu
def test_jax_gpu_runs_on_the_gpu_and_cpu_arrays_on_the_host():
    import jax
    import xkernels.jax as xj

    assert xj._register("rmsnorm") == ("cpu", "gpu")
    x = np.random.default_rng(5).standard_normal((64, 4096)).astype(np.float32)
    w = np.ones(4096, np.float32)
    ys = {p: xj.rmsnorm(jax.device_put(x, jax.devices(p)[0]), jax.device_put(w, jax.devices(p)[0]))
          for p in ("cpu", "gpu")}
    for p, y in ys.items():
        assert {d.platform for d in y.devices()} == {p}
    np.testing.assert_allclose(np.asarray(ys["gpu"]), np.asarray(ys["cpu"]), rtol=1e-5, atol=1e-5)
    gpu_dev, cpu_dev = jax.devices("gpu")[0], jax.devices("cpu")[0]
    with pytest.raises(ValueError, match=r"weight must be on input's device gpu:\d+, got cpu:\d+"):
        xj.rmsnorm(jax.device_put(x, gpu_dev), jax.device_put(w, cpu_dev))


@needs_jax_gpu
def test_jax_command_buffers():
    """Under XLA command buffers (CUDA graphs) for custom calls, a jitted chain of ops gives the
    same bits as without, across calls with new inputs; and XLA does trace FFI custom calls
    registered as graph-safe into a graph (a probe registered the same way sees the capture)."""
    import ctypes

    import jax
    import jax.numpy as jnp
    import jax_tvm_ffi
    import tvm_ffi
    import xkernels.jax as xj

    libcuda = ctypes.CDLL("libcuda.so.1")
    seen = []

    def probe(stream, out, x):
        status = ctypes.c_int(-1)
        libcuda.cuStreamIsCapturing(ctypes.c_void_p(stream), ctypes.byref(status))
        seen.append(status.value)

    jax_tvm_ffi.register_ffi_target("xkernels_test.capture_probe", tvm_ffi.convert(probe),
                                    ["ctx.stream", "rets", "args"], platform="gpu",
                                    allow_cuda_graph=True)

    def layer(x, r, w, b):
        h, r = xj.fused_add_rmsnorm(x, r, w)
        h = xj.silu_and_mul(jnp.concatenate([h, h * 2], -1))
        h = xj.add_bias_gelu(h, b, approximate="tanh")
        p = jax.ffi.ffi_call("xkernels_test.capture_probe", jax.ShapeDtypeStruct((1,), jnp.int8),
                             has_side_effect=True)(h)
        return xj.softmax(xj.layernorm(h, w, b), scale=0.5), r, p

    graphs = {"xla_gpu_enable_command_buffer": "FUSION,CUSTOM_CALL",
              "xla_gpu_graph_min_graph_size": 1}
    with_graphs = jax.jit(layer, compiler_options=graphs)
    without = jax.jit(layer, compiler_options={"xla_gpu_enable_command_buffer": ""})
    key = jax.random.PRNGKey(0)
    for i in range(4):
        ks = jax.random.split(jax.random.fold_in(key, i), 4)
        args = [jax.random.normal(k, s, jnp.bfloat16)
                for k, s in zip(ks, [(64, 1024), (64, 1024), (1024,), (1024,)])]
        a, b = with_graphs(*args), without(*args)
        for u, v in zip(a[:2], b[:2]):
            assert np.array_equal(np.asarray(u).view(np.uint16), np.asarray(v).view(np.uint16))
    assert 1 in seen, f"no custom call was traced under stream capture (statuses {seen})"


@needs_cupy
def test_cupy_runs_on_cupys_current_stream():
    """Queued behind a long kernel and a copy on a non-blocking stream, the op must see the copy:
    it runs on CuPy's current stream, not the legacy default stream."""
    import cupy
    import xkernels.cupy as xc

    s = cupy.cuda.Stream(non_blocking=True)
    x = torch.zeros(512, 8192, device="cuda", dtype=torch.bfloat16)
    w = torch.ones(8192, device="cuda", dtype=torch.bfloat16)
    src = torch.randn(512, 8192, device="cuda", dtype=torch.bfloat16)
    want = xt.rmsnorm(src, w)
    torch.cuda.synchronize()
    with torch.cuda.stream(torch.cuda.ExternalStream(s.ptr)):
        torch.cuda._sleep(50_000_000)  # ~tens of ms of spinning on s
        x.copy_(src)
    with s:
        y = xc.rmsnorm(to_cupy(x), to_cupy(w))
        o = xc.softmax(to_cupy(x), out=to_cupy(torch.empty_like(x)))
    s.synchronize()
    assert torch.equal(bits(torch.from_dlpack(y.view(np.int16)).view(torch.bfloat16)), bits(want))
    assert torch.equal(bits(torch.from_dlpack(o.view(np.int16)).view(torch.bfloat16)),
                       bits(xt.softmax(src)))


@needs_cupy
def test_cupy_graph_capture():
    """Captured into a CUDA graph on a CuPy stream (no stream handshake at the DLPack boundary)."""
    import cupy
    import xkernels.cupy as xc

    x = torch.randn(64, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
    out = torch.empty_like(x)
    cx, cw, co = to_cupy(x), to_cupy(w), to_cupy(out)
    xc.rmsnorm(cx, cw, out=co)  # loads the module outside the capture
    torch.cuda.synchronize()
    s = cupy.cuda.Stream(non_blocking=True)
    with s:
        s.begin_capture()
        xc.rmsnorm(cx, cw, out=co)
        g = s.end_capture()
    for _ in range(3):
        x.copy_(torch.randn_like(x))
        torch.cuda.synchronize()
        g.launch(s)
        s.synchronize()
        assert torch.equal(bits(out), bits(xt.rmsnorm(x, w)))


@gpu
@pytest.mark.parametrize("fw", ["torch", "jax", "cupy"])
def test_device_memory_grows_by_the_outputs_only(fw):
    """No hidden copy of the inputs: a call allocates its output and nothing else (16 MiB
    inputs; the allocators round up by at most a few KiB)."""
    shape, nbytes = (1024, 4096), 1024 * 4096 * 4
    x = torch.randn(shape, device="cuda")
    w = torch.randn(4096, device="cuda")
    if fw == "torch":
        before = torch.cuda.memory_allocated()
        y = xt.rmsnorm(x, w)
        torch.cuda.synchronize()
        grew = torch.cuda.memory_allocated() - before
        out = torch.empty_like(x)
        before = torch.cuda.memory_allocated()
        xt.rmsnorm(x, w, out=out)
        assert torch.cuda.memory_allocated() == before
    elif fw == "jax":
        if not HAS_JAX:
            pytest.skip("needs jax")
        import jax
        import xkernels.jax as xj

        dev = jax.devices("gpu")[0]
        jx, jw = to_jax(x, "cuda"), to_jax(w, "cuda")
        xj.rmsnorm(jx, jw).block_until_ready().delete()  # compiled; its output freed now
        before = dev.memory_stats()["bytes_in_use"]
        y = xj.rmsnorm(jx, jw)
        y.block_until_ready()
        grew = dev.memory_stats()["bytes_in_use"] - before
    else:
        if not HAS_CUPY:
            pytest.skip("needs CuPy")
        import cupy
        import xkernels.cupy as xc

        pool = cupy.get_default_memory_pool()
        cx, cw = to_cupy(x), to_cupy(w)
        before = pool.used_bytes()
        y = xc.rmsnorm(cx, cw)
        grew = pool.used_bytes() - before
        before = pool.used_bytes()
        assert xc.rmsnorm(cx, cw, out=y) is y
        assert pool.used_bytes() == before
    assert nbytes <= grew <= nbytes + (64 << 10), grew


@needs_cupy
def test_cupy_second_device_code_path():
    """Arrays on device k run on device k whatever the current device, their output there too;
    with two GPUs, arrays on two devices raise a ValueError naming the argument."""
    import cupy
    import xkernels.cupy as xc

    n = cupy.cuda.runtime.getDeviceCount()
    k = n - 1
    x = torch.randn(8, 256, device=f"cuda:{k}")
    w = torch.randn(256, device=f"cuda:{k}")
    with cupy.cuda.Device(0):
        y = xc.rmsnorm(to_cupy(x), to_cupy(w))
        cupy.cuda.Device(k).synchronize()
    assert y.device.id == k
    got = torch.from_dlpack(y)
    assert got.device == x.device
    assert torch.equal(bits(got), bits(xt.rmsnorm(x, w)))
    if n > 1:
        with pytest.raises(ValueError, match="weight must be on input's device cuda:0, got cuda:1"):
            xc.rmsnorm(to_cupy(x.to("cuda:0")), to_cupy(w.to("cuda:1")))
    with pytest.raises(TypeError, match="xkernels.cupy.rmsnorm: weight must be a cupy.ndarray, "
                                        "got numpy.ndarray"):
        xc.rmsnorm(to_cupy(x), np.ones(256, np.float32))
    with pytest.raises(TypeError, match="xkernels.cupy.rmsnorm: weight must be a cupy.ndarray, "
                                        "got torch.Tensor"):
        xc.rmsnorm(to_cupy(x), w)


@needs_jax_gpu
def test_jax_second_device_code_path():
    import jax
    import xkernels.jax as xj

    dev = jax.devices("gpu")[-1]
    x = jax.device_put(np.ones((8, 256), np.float32), dev)
    w = jax.device_put(np.full(256, 2.0, np.float32), dev)
    y = xj.rmsnorm(x, w)
    assert y.devices() == {dev}
    np.testing.assert_allclose(np.asarray(y), 2.0, atol=1e-5)


# ------------------------------------------------------------------ the README's examples


def _readme_example(section: str) -> str:
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    body = text.split(f"\n## {section}\n", 1)[1]
    return body.split("```python\n", 1)[1].split("```", 1)[0]


@pytest.mark.parametrize("section", [
    pytest.param("NumPy"), pytest.param("JAX", marks=needs_jax),
    pytest.param("PyTorch", marks=gpu), pytest.param("CuPy", marks=needs_cupy)])
def test_readme_example_runs(section):
    """Each framework's README section runs as written (the same op, rmsnorm, in each)."""
    code = _readme_example(section)
    assert ".rmsnorm(x, w" in code
    env: dict = {}
    exec(compile(code, f"<README {section}>", "exec"), env)  # noqa: S102
    y = np.asarray(env["y"].get() if section == "CuPy" else
                   env["y"].float().cpu() if section == "PyTorch" else env["y"], np.float64)
    x = np.asarray(env["x"].get() if section == "CuPy" else
                   env["x"].float().cpu() if section == "PyTorch" else env["x"], np.float64)
    if section == "PyTorch":  # x was overwritten in place later in that example: check shapes
        assert y.shape == x.shape
        return
    want = x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6)
    np.testing.assert_allclose(y, want, rtol=2e-2, atol=2e-2)
