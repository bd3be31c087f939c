"""The adapters of array libraries whose arrays go to the exported functions as they are, through
DLPack (NumPy, CuPy): one generator over the op table, given what differs per library (its array
type, how to allocate an output, how an array crosses, the stream a call runs on).

Functional ops take an optional ``out=`` and return it; in-place ops (``fused_add_rmsnorm``)
overwrite their inputs and return None, as in ``xkernels.torch``. Attention ops take their outputs
by keyword (``out=, lse=``) and return ``out`` or ``(out, lse)``, as do GEMM ops (``out=``;
``quantize_fp8``: ``q=, scale=``); their float32 workspace, sized by the op's planner (cached per
shapes), is allocated by the library per call. RoPE ops work in place (given ``q_out=, k_out=``,
into those) and return None.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import _attention_calls as ac
from . import jit
from .ops import DTYPES, OPS, Op, outputs_given


@dataclass
class Backend:
    module: str  # "xkernels.numpy"
    array: type  # the library's array type
    array_name: str  # "numpy.ndarray", in errors
    empty: Callable[[tuple, Any, Any], Any]  # (shape, dtype, like) -> a new array on like's device
    arg: Callable[[Any], Any]  # array -> what the exported function takes (same memory)
    stream: Callable[[Any], Any] | None = None  # like -> context manager: the stream of the call
    read_only: Callable[[Any], bool] | None = None  # array -> True when it must not be written
    # array -> the GPU an attention op plans for; None: host memory (-1)
    device_id: Callable[[Any], int] | None = None


def _head(op: Op) -> tuple[list[str], list[str], list[str]]:
    """(input names, output names, the function's first lines: its signature, absent optional
    inputs made empty arrays, inputs type-checked)."""
    ins = [x.name for x in op.inputs]
    outs = [o.name for o in op.outputs]
    def checked(optional):
        return [f"    if type({x.name}) is not _A: _check({op.name!r}, {x.name!r}, {x.name})"
                for x in op.inputs if x.optional == optional]

    lines = [f"def {op.name}({ac.params(op)}):", *checked(False),
             *ac.absent(op, "_empty((0,), _f32, {first})"), *checked(True)]
    return ins, outs, lines


def _source(op: Op, b: Backend) -> str:
    ins, outs, lines = _head(op)
    written = list(dict.fromkeys(op.aliases.values())) if op.in_place else ["out"]
    if op.in_place:  # all its outputs given by keyword: written there instead of in place
        given = ", ".join(f"{o!r}: {o}" for o in outs)
        lines += [f"    if _outputs_given({op.name!r}, {{{given}}}):"]
        lines += [f"        if type({o}) is not _A: _check({op.name!r}, {o!r}, {o})" for o in outs]
        if b.read_only:
            lines += [f"        if _read_only({o}): _refuse({op.name!r}, {o!r})" for o in outs]
        lines += ["    else:"]
        lines += [f"        {o} = {op.aliases[o]}" for o in outs]
        if b.read_only:
            lines += [f"        if _read_only({x}): _refuse({op.name!r}, {x!r})" for x in written]
    else:
        (o,) = op.outputs
        lines += ["    if out is None:",
                  f"        out = _empty(_OUT_{op.name}({o.like}.shape), {o.like}.dtype, {o.like})",
                  "    else:",
                  f"        if type(out) is not _A: _check({op.name!r}, 'out', out)"]
        if b.read_only:
            lines.append(f"        if _read_only(out): _refuse({op.name!r}, 'out')")
    call = f"_FN[{op.name!r}]({', '.join([f'_arg({t})' for t in outs + ins] + op.ffi_attrs())})"
    if b.stream:
        lines += [f"    with _stream({ins[0]}):", f"        {call}"]
    else:
        lines.append(f"    {call}")
    lines.append(f"    return {'None' if op.in_place else 'out'}")
    return "\n".join(lines) + "\n"


def _attention_source(op: Op, b: Backend) -> str:
    ins, outs, lines = _head(op)
    lines += ac.encode(op)
    if op.in_place:  # in place, or, given every output, into those (RoPE)
        given = ", ".join(f"{o!r}: {o}" for o in outs)
        lines += [f"    if _outputs_given({op.name!r}, {{{given}}}):"]
        lines += [f"        if type({o}) is not _A: _check({op.name!r}, {o!r}, {o})" for o in outs]
        if b.read_only:
            lines += [f"        if _read_only({o}): _refuse({op.name!r}, {o!r})" for o in outs]
        lines += ["    else:"]
        lines += [f"        {o} = {op.aliases[o]}" for o in outs]
        if b.read_only:
            lines += [f"        if _read_only({x}): _refuse({op.name!r}, {x!r})"
                      for x in dict.fromkeys(op.aliases.values())]
    for o in op.outputs if not op.in_place else ():
        lines += [f"    if {o.name} is None:",
                  (f"        {o.name} = _empty({ac.shape(op, o)}, "
                   f"{ac.dtype(o, f'{o.like}.dtype')}, {o.like})"),
                  "    else:",
                  f"        if type({o.name}) is not _A: _check({op.name!r}, {o.name!r}, {o.name})"]
        if b.read_only:
            lines.append(f"        if _read_only({o.name}): _refuse({op.name!r}, {o.name!r})")
    first = ins[0]
    args = [f"_arg({t})" for t in outs]
    if op.workspace:
        device = f"_device_id({first})" if b.device_id else "-1"
        lines += [f"    _a, _n = {ac.plan(op, device)}",
                  f"    _ws = _empty((_n,), _f32, {first})"]
        args += ["_arg(_ws)", *(f"_arg({x})" for x in ins), "*_a"]
    else:
        args += [*(f"_arg({x})" for x in ins), *(a.name for a in op.attrs)]
    call = f"_FN[{op.name!r}]({', '.join(args)})"
    if b.stream:
        lines += [f"    with _stream({first}):", f"        {call}"]
    else:
        lines.append(f"    {call}")
    lines.append(f"    return {'None' if op.in_place else ac.returns(op)}")
    return "\n".join(lines) + "\n"


def _doc(op: Op, b: Backend) -> str:
    if op.kind != "rows" and not op.in_place:
        return op.docstring(f"{ac.returns_doc(op)} {ac.outputs_doc(op, f'{b.array_name}s')}")
    return op.docstring(op.overwrites_or(f"{b.array_name}s") if op.in_place else
                        f"out: optional destination {b.array_name} (shape and dtype of the result).")


def numpy_dtypes() -> tuple:
    """ops.DTYPES as NumPy dtypes (bfloat16 and float8_e4m3fn: ml_dtypes'); where ml_dtypes is
    missing, their names, which NumPy refuses when an output of that dtype is allocated."""
    try:
        import ml_dtypes  # noqa: F401 (registers its dtypes with NumPy by name)
    except ImportError:
        pass
    dtypes = []
    for name in DTYPES:
        try:
            dtypes.append(np.dtype(name))
        except TypeError:
            dtypes.append(name)
    return tuple(dtypes)


def generate(b: Backend) -> dict[str, Callable]:
    """The public functions of an adapter, one per op of the table."""
    def check(op, name, x):
        if not isinstance(x, b.array):
            t = type(x)
            raise TypeError(f"{b.module}.{op}: {name} must be a {b.array_name}, got "
                            f"{t.__module__}.{t.__qualname__}")

    def refuse(op, name):
        raise ValueError(f"{b.module}.{op}: {name} is written but is read-only")

    env = {"_A": b.array, "_check": check, "_refuse": refuse, "_empty": b.empty, "_arg": b.arg,
           "_stream": b.stream, "_read_only": b.read_only, "_FN": jit.FUNCTIONS,
           "_outputs_given": functools.partial(outputs_given, b.module),
           "_device_id": b.device_id, "_plan": jit.plan, "_f32": np.dtype(np.float32),
           "_DT": numpy_dtypes()}
    public = {}
    for op in OPS.values():
        env[f"_OP_{op.name}"] = op
        source = _source(op, b) if op.kind == "rows" else _attention_source(op, b)
        public[op.name] = op.generate(source, env, b.module, _doc(op, b))
    return public
