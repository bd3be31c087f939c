"""xkernels.jax: every op of the table as a function on jax.Array, eagerly and under jax.jit.

The exported TVM-FFI function itself is registered with XLA through jax-tvm-ffi as the FFI target
``xkernels.<op>`` (no second binding): on first use of an op, once per process, for the "cpu"
platform (the host implementation) and, when jax has a GPU backend, for "gpu" (the CUDA kernel on
XLA's stream, marked safe for XLA's command buffers, i.e. CUDA graphs). Arguments cross as
``(*outputs, *inputs, *attrs)``, outputs allocated by XLA from the op table's shapes and dtypes.

- Ops that work in place in PyTorch return their results here (``fused_add_rmsnorm`` returns
  ``(out, residual_out)``), aliased to the inputs (``input_output_aliases``): under ``jax.jit``
  with donated arguments XLA reuses their buffers.
- Scalar attributes (eps, scale, approximate) are static Python values; a traced one raises
  TypeError. Arguments are checked when a call is traced (once per shapes and dtypes) by the
  exported function itself (on empty host arrays of the same shapes behind a leading 0), so
  mistakes raise its TypeError / ValueError naming the argument, as from every other framework.
- ``jax.vmap``: batched data arguments with unbatched weights fold the batch into the rows (one
  call); a batched weight or bias falls back to a sequential ``lax.map``.
- No backward yet: ``jax.grad`` or ``jax.jvp`` through an op raises NotImplementedError naming it.

Attention ops return ``out`` or ``(out, lse)``, GEMM ops ``out`` (``quantize_fp8``: ``(q, scale)``),
RoPE ops ``(q_out, k_out)`` aliased to ``(q, k)``;
an optional input left None (a bias) is an empty float32 array at the FFI call, which the exported
function takes as absent. float8_e4m3fn arrays cross as they are: jax-tvm-ffi (0.1.3) maps XLA's
F8E4M3FN buffers to DLPack's kDLFloat8_e4m3fn. An op's float32 workspace is one more result of
the FFI call (XLA allocates it; the exported function takes it after the outputs), sized when the
call is traced by the op's planner for the first input's GPU (or the default backend's). The
arguments are checked at trace time by the exported function in its dry-run mode, on host arrays
of the exact shapes (zero strides, nothing allocated); ``jax.vmap`` maps them sequentially.
"""

from __future__ import annotations

import functools
import threading

import numpy as np
import tvm_ffi

import jax
from jax.custom_batching import custom_vmap

from .. import _attention_calls as ac
from .. import _dlpack, jit
from ..ops import OPS, Op

__all__ = sorted(OPS)  # noqa: PLE0605 (generated from the op table)

_lock = threading.Lock()
_registered: dict[str, tuple[str, ...]] = {}  # op -> platforms its target is registered for


def target(name: str) -> str:
    """The XLA FFI target name of an op."""
    return f"xkernels.{name}"


def _gpu_backend() -> bool:
    try:
        return bool(jax.devices("gpu"))
    except RuntimeError:
        return False


def _register(name: str) -> tuple[str, ...]:
    """Register the op's exported function as an XLA FFI target, once per process."""
    if name in _registered:
        return _registered[name]
    with _lock:
        if name not in _registered:
            import jax_tvm_ffi

            op = OPS[name]
            fn = jit.FUNCTIONS[name]
            spec = ["rets", "args", *(f"attrs.{a.name}" for a in op.attrs)]
            jax_tvm_ffi.register_ffi_target(target(name), fn, spec, platform="cpu")
            platforms = ("cpu",)
            if _gpu_backend():
                # the kernels do no host sync and no allocation: safe in a CUDA graph
                jax_tvm_ffi.register_ffi_target(target(name), fn, spec, platform="gpu",
                                                allow_cuda_graph=True)
                platforms += ("gpu",)
            _registered[name] = platforms
    return _registered[name]


def _no_grad(name: str):
    raise NotImplementedError(
        f"xkernels.jax.{name} has no backward (JVP/VJP) yet; call it outside jax.grad/jax.jvp, "
        "or on values that are not differentiated (jax.lax.stop_gradient)")


def _ffi_attrs(op: Op, attrs: tuple) -> dict:
    """Encoded attributes as the exported function takes them: float -> f64, choice -> i64."""
    return {a.name: np.float64(v) if a.type is float else np.int64(v)
            for a, v in zip(op.attrs, attrs)}


@functools.cache
def _core(name: str, attrs: tuple):
    """The jitted op for fixed (encoded) attributes: ffi_call, under custom_vmap and custom_jvp."""
    op = OPS[name]
    index = {x.name: i for i, x in enumerate(op.inputs)}
    outs = {o.name: i for i, o in enumerate(op.outputs)}
    aliases = {index[i]: outs[o] for o, i in op.aliases.items()} or None
    kw = _ffi_attrs(op, attrs)

    def call(*args):
        _register(name)
        _validate(op, args, attrs)  # at trace time: once per shapes and dtypes
        shapes = {x.name: a.shape for x, a in zip(op.inputs, args)}
        types = tuple(jax.ShapeDtypeStruct(op.output_shape(o, shapes), args[index[o.like]].dtype)
                      for o in op.outputs)
        res = jax.ffi.ffi_call(target(name), types, input_output_aliases=aliases)(*args, **kw)
        return tuple(res) if len(types) > 1 else res[0]

    fn = custom_vmap(call)
    columns = [x.role == "column" for x in op.inputs]
    all_batched = tuple(True for _ in op.outputs) if len(op.outputs) > 1 else True

    @fn.def_vmap
    def _batched(axis_size, in_batched, *args):
        if any(b and c for b, c in zip(in_batched, columns)):
            # a batched weight or bias: one call per slice
            def one(sliced):
                it = iter(sliced)
                return fn(*[next(it) if b else a for a, b in zip(args, in_batched)])

            return jax.lax.map(one, tuple(a for a, b in zip(args, in_batched) if b)), all_batched
        # batch dims lead: the op takes any leading dims, so the batch becomes more rows
        args = [a if b or c else jax.numpy.broadcast_to(a, (axis_size, *a.shape))
                for a, b, c in zip(args, in_batched, columns)]
        return fn(*args), all_batched

    fn = jax.custom_jvp(fn)
    fn.defjvp(lambda primals, tangents: _no_grad(name))
    return jax.jit(fn)


def _device_id(x) -> int:
    """The device an attention call plans for: a concrete array's GPU (-1: host memory); under a
    trace, the default backend's first GPU."""
    if isinstance(x, jax.core.Tracer):
        return 0 if jax.default_backend() == "gpu" else -1
    d = next(iter(x.devices()))
    return d.local_hardware_id if d.platform == "gpu" else -1


@functools.cache
def _attention_core(name: str, attrs: tuple, device_id: int):
    """The jitted attention op for fixed (encoded) attributes, planned for `device_id`: ffi_call
    (results: the outputs, those that do not exist as (0,) float32, then the workspace), under
    custom_vmap (sequential) and custom_jvp."""
    op = OPS[name]
    index = {x.name: i for i, x in enumerate(op.inputs)}
    outs_at = {o.name: i for i, o in enumerate(op.outputs)}
    # an in-place op's outputs alias the inputs they overwrite elsewhere (RoPE's q and k)
    aliases = {index[i]: outs_at[o] for o, i in op.aliases.items()} or None
    named = {a.name: v for a, v in zip(op.attrs, attrs)}
    exists = [o.exists(named) for o in op.outputs]
    dtypes = [o.dtype_of(named) for o in op.outputs]  # None: the `like` input's

    def call(*args):
        _register(name)
        shapes = {x.name: a.shape for x, a in zip(op.inputs, args)}
        outs = [(o.shape_of(shapes, named),
                 args[index[o.like]].dtype if d is None else jax.numpy.dtype(d))
                for o, d in zip(op.outputs, dtypes)]
        _dry_run(op, args, attrs, outs)  # at trace time: once per shapes and dtypes
        types = [jax.ShapeDtypeStruct(*sd) for sd in outs]
        ffi = attrs
        if op.workspace:
            ffi, n = jit.plan(op, device_id, tuple(tuple(a.shape) for a in args), attrs)
            types.append(jax.ShapeDtypeStruct((n,), np.float32))
        res = jax.ffi.ffi_call(target(name), types, input_output_aliases=aliases)(
            *args, **_ffi_attrs(op, ffi))
        got = tuple(r for r, e in zip(res, exists) if e)
        return got if len(got) > 1 else got[0]

    fn = custom_vmap(call)
    all_batched = (True,) * sum(exists) if sum(exists) > 1 else True

    @fn.def_vmap
    def _batched(axis_size, in_batched, *args):
        # one call per slice: the batch does not fold into these ops' layouts
        def one(sliced):
            it = iter(sliced)
            return fn(*[next(it) if b else a for a, b in zip(args, in_batched)])

        return jax.lax.map(one, tuple(a for a, b in zip(args, in_batched) if b)), all_batched

    fn = jax.custom_jvp(fn)
    fn.defjvp(lambda primals, tangents: _no_grad(name))
    return jax.jit(fn)


@functools.cache
def _absent():
    """What an optional input left None becomes: an empty float32 array, which the exported
    function takes as absent (uncommitted: it follows the other arguments' device). Concrete even
    when first asked for under a trace, so that the cached array is no tracer."""
    with jax.ensure_compile_time_eval():
        return jax.numpy.zeros((0,), np.float32)


def _static(op: str, name: str, value):
    if type(value) is float:
        return value
    if isinstance(value, jax.core.Tracer):
        raise TypeError(
            f"xkernels.jax.{op}: {name} must be a static Python value, got a traced array "
            f"({value.aval}); pass a Python number, or mark it static in jax.jit "
            f"(static_argnames=({name!r},))")
    return value


def _array(op: str, name: str, x):
    if isinstance(x, jax.Array):
        return x
    if isinstance(x, np.ndarray):
        return jax.numpy.asarray(x)
    raise TypeError(f"xkernels.jax.{op}: {name} must be a jax.Array (or numpy.ndarray), got "
                    f"{type(x).__module__}.{type(x).__qualname__}")


def _same_device(op: Op, args: tuple) -> None:
    """Concrete arrays of one call on one device (XLA's own error does not name the argument)."""
    first = None
    for x, a in zip(op.inputs, args):
        if isinstance(a, jax.core.Tracer) or not getattr(a, "committed", False):
            continue
        devs = a.devices()
        if first is None:
            first = (x.name, devs)
        elif devs != first[1]:
            raise ValueError(
                f"xkernels.jax.{op.name}: {x.name} must be on {first[0]}'s device "
                f"{_devstr(first[1])}, got {_devstr(devs)}; move it with jax.device_put")


def _devstr(devs) -> str:
    return ", ".join(sorted(f"{d.platform}:{d.id}" for d in devs))


def _host_array(shape, dtype, column=False, exact=False):
    """A host array as the exported function takes it (bfloat16, float8_e4m3fn: a retagged
    unsigned view) for the argument checks: the argument's shape behind a leading 0 (no element;
    a column: its shape), or with `exact` its own shape with zero strides on the leading dims (one
    row of memory)."""
    view = _dlpack.RETAGGED.get(np.dtype(dtype).name)  # (unsigned view dtype, to tvm_ffi.Tensor)
    raw = np.dtype(view[0]) if view else np.dtype(dtype)
    if column and len(shape) == 1:
        a = np.zeros(shape, raw)
    else:  # NumPy gives empty arrays zero strides: set them
        shape = shape if exact or not shape else (0, *shape)  # a leading 0: no element
        row = np.zeros(shape[-1] if shape else 1, raw)
        a = np.lib.stride_tricks.as_strided(
            row, shape, (0,) * (len(shape) - 1) + (raw.itemsize,) if shape else ())
    cap = a.__dlpack__(max_version=(1, 0))
    return view[1](cap) if view else tvm_ffi.from_dlpack(cap)


_checked: dict[tuple, None] = {}


def _validate(op: Op, args: tuple, attrs: tuple) -> None:
    """The exported function's own argument checks, on host arrays of the arguments' shapes and
    dtypes behind a leading 0 (nothing is computed); on a failure, again with the exact shapes
    so that the message shows them."""
    key = (op.name, attrs, *((a.shape, a.dtype) for a in args))
    if key in _checked:
        return
    fn = jit.FUNCTIONS[op.name]
    shapes = {x.name: a.shape for x, a in zip(op.inputs, args)}
    outs = [(op.output_shape(o, shapes), args[[x.name for x in op.inputs].index(o.like)].dtype)
            for o in op.outputs]

    def run(exact):
        fn(*[_host_array(s, d, exact=exact) for s, d in outs],
           *[_host_array(a.shape, a.dtype, x.role == "column", exact)
             for x, a in zip(op.inputs, args)], *attrs)

    try:
        run(exact=False)
    except (TypeError, ValueError) as first:
        try:
            run(exact=True)
        except (TypeError, ValueError) as e:
            raise type(e)(str(e).split("\n")[0]) from None
        raise type(first)(str(first).split("\n")[0]) from None
    _checked[key] = None


def _dry_run(op: Op, args: tuple, attrs: tuple, outs: list) -> None:
    """An attention op's argument checks: the exported function in its module's dry-run mode
    (checks, then returns) on host arrays of the exact shapes and dtypes of the arguments and of
    the outputs (`outs`: (shape, dtype) each), with an empty workspace."""
    key = (op.name, attrs, *((a.shape, a.dtype) for a in args))
    if key in _checked:
        return
    fn = jit.FUNCTIONS[op.name]
    dry = jit.load(op.module)["_set_dry_run"]
    ws = [_host_array((0,), np.float32, exact=True)] if op.workspace else []
    arrays = [*(_host_array(s, d, exact=True) for s, d in outs), *ws,
              *(_host_array(a.shape, a.dtype, exact=True) for a in args)]
    dry(1)
    try:
        fn(*arrays, *attrs)
    except (TypeError, ValueError) as e:
        raise type(e)(str(e).split("\n")[0]) from None
    finally:
        dry(0)
    _checked[key] = None


def _attention_source(op: Op) -> str:
    ins = [x.name for x in op.inputs]
    lines = [f"def {op.name}({ac.params(op, outputs=False)}):"]
    for a in op.attrs:
        enc = f"_ENC_{op.name}_{a.name}" if op.encoded(a) else "_float"
        lines.append(f"    {a.name} = {enc}(_static({op.name!r}, {a.name!r}, {a.name}))")
    lines += ac.absent(op, "_absent()")
    for x in ins:
        lines.append(f"    if type({x}) is not _ArrayImpl: {x} = _array({op.name!r}, {x!r}, {x})")
    lines += [
        "    try:",
        (f"        return _attention_core({op.name!r}, {ac.attrs(op)}, _device_id({ins[0]}))"
         f"({', '.join(ins)})"),
        "    except (ValueError, TypeError, RuntimeError):",
        f"        _same_device(_OP_{op.name}, ({', '.join(ins)},))",
        "        raise",
    ]
    return "\n".join(lines) + "\n"


def _source(op: Op) -> str:
    ins = [x.name for x in op.inputs]
    params = ", ".join(ins + [f"{a.name}={a.default!r}" for a in op.attrs])
    lines = [f"def {op.name}({params}):"]
    for a in op.attrs:
        enc = f"_ENC_{op.name}_{a.name}" if a.choices else "_float"
        lines.append(f"    {a.name} = {enc}(_static({op.name!r}, {a.name!r}, {a.name}))")
    for x in ins:
        lines.append(f"    if type({x}) is not _ArrayImpl: {x} = _array({op.name!r}, {x!r}, {x})")
    args = "(" + ", ".join(ins) + ",)"
    attrs = "(" + "".join(f"{a.name}, " for a in op.attrs) + ")"
    # Checks that cost nothing per call: the exported function's own argument checks run when
    # the call is traced (once per shapes and dtypes), the devices are compared only when the
    # call fails (XLA's message does not name the argument).
    lines += [
        "    try:",
        f"        return _core({op.name!r}, {attrs})({', '.join(ins)})",
        "    except (ValueError, TypeError, RuntimeError):",
        f"        _same_device(_OP_{op.name}, {args})",
        "        raise",
    ]
    return "\n".join(lines) + "\n"


def _doc(op: Op) -> str:
    if op.kind != "rows" and not op.in_place:
        return op.docstring(ac.returns_doc(op), "; static")
    last = ("Returns (" + ", ".join(o.name for o in op.outputs) + "), aliased to ("
            + ", ".join(op.aliases[o.name] for o in op.outputs) + ")." if op.in_place else "")
    return op.docstring(last, "; static")


def _generate() -> dict:
    env = {"_static": _static, "_array": _array, "_same_device": _same_device,
           "_core": _core, "_float": float, "_ArrayImpl": type(jax.numpy.zeros(())),
           "_attention_core": _attention_core, "_device_id": _device_id, "_absent": _absent}
    public = {}
    for op in OPS.values():
        env[f"_OP_{op.name}"] = op
        source = _source(op) if op.kind == "rows" else _attention_source(op)
        public[op.name] = op.generate(source, env, __name__, _doc(op))
    return public


globals().update(_generate())
