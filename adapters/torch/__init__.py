"""xkernels.torch: every op of the table as a function on torch.Tensor.

Each op is also registered as a torch custom op (``torch.ops.xkernels.<name>``, destination-passing
and mutating, with a fake implementation), so it works under ``torch.compile(fullgraph=True)``,
``torch.library.opcheck`` and CUDA-graph capture. In eager mode the public functions call the
exported TVM-FFI function directly, skipping the dispatcher: that keeps the per-call host cost
below the native ops'. The kernel runs on torch's current stream (TVM-FFI reads it per call).

Functional ops take an optional ``out=``; in-place ops (``fused_add_rmsnorm``) overwrite their
inputs and return None, as FlashInfer's do, or, given all their outputs by keyword
(``out=, residual_out=``), write those instead and leave the inputs alone.

Attention and GEMM ops take their outputs by keyword (``out=, lse=``; ``out=``; ``q=, scale=``)
and return ``out`` or ``(out, lse)`` (``(q, scale)``); an optional input left None (a bias) is an
empty float32 tensor at the custom op (its schema has no optional tensors). Their float32
workspace, sized by the op's planner (cached per shapes), comes from torch's caching allocator on
every call: in the custom op's implementation, not its schema, so that ``torch.compile`` traces
only the outputs' allocation and a CUDA graph capture takes the workspace from the graph's pool.
"""

from __future__ import annotations

import functools

import torch

from .. import _attention_calls as ac
from .. import jit
from ..ops import DTYPES, OPS, Op, outputs_given

__all__ = sorted(OPS)  # noqa: PLE0605 (generated from the op table)

_lib = torch.library.Library("xkernels", "DEF")  # noqa: TOR901 (low-overhead registration)


_FN = jit.FUNCTIONS


def _no_grad(name: str):
    raise NotImplementedError(
        f"xkernels.torch.{name} has no backward yet; call it under torch.no_grad() or "
        "torch.inference_mode(), or with inputs that do not require grad"
    )


def _schema(op: Op, out_form: bool = False) -> str:
    """The custom op's schema: destinations first, then inputs (those it overwrites, in place),
    then attributes. `out_form`: an in-place op's destination-passing form, `<name>_out`."""
    in_place = op.in_place and not out_form
    outs = [] if in_place else [o.name for o in op.outputs]
    args = [f"Tensor(a{i}!) {o}" for i, o in enumerate(outs)]
    mutated = set(op.aliases.values()) if in_place else set()
    args += [f"Tensor(m{i}!) {x.name}" if x.name in mutated else f"Tensor {x.name}"
             for i, x in enumerate(op.inputs)]
    args += [f"{'float' if a.type is float else 'str'} {a.name}" for a in op.attrs]
    return f"{op.name}{'_out' if out_form else ''}({', '.join(args)}) -> ()"


def _ffi_args(op: Op, outs: list[str] | None = None) -> str:
    """The exported function's arguments, in terms of the torch op's parameters (`outs`: the
    destinations, by default the outputs or, in place, the inputs they overwrite)."""
    if outs is None:
        outs = [op.aliases.get(o.name, o.name) for o in op.outputs]
    return ", ".join(outs + [x.name for x in op.inputs] + op.ffi_attrs())


def _source(op: Op) -> str:
    ins = [x.name for x in op.inputs]
    attrs = [f"{a.name}={a.default!r}" for a in op.attrs]
    outs = [o.name for o in op.outputs]
    params = ", ".join(ins + attrs + ["*"] + [f"{o}=None" for o in outs])
    op_args = ", ".join(([] if op.in_place else ["out"]) + ins + [a.name for a in op.attrs])
    first = ins[0]
    grad = " or ".join(f"{x}.requires_grad" for x in ins)
    lines = [f"def {op.name}({params}):"]
    if op.in_place:  # given its outputs, the destination-passing form
        out_args = ", ".join(outs + ins + [a.name for a in op.attrs])
        ffi = _ffi_args(op, outs)
        given = ", ".join(f"{o!r}: {o}" for o in outs)
        lines += [
            f"    if _outputs_given({op.name!r}, {{{given}}}):",
            f"        if type({first}) is _Tensor and not _is_compiling():",
            f"            if _grad_enabled() and ({grad}):",
            f"                _no_grad({op.name!r})",
            f"            _FN[{op.name!r}]({ffi})",
            "        else:",
            f"            _ops.{op.name}_out({out_args})",
            "        return None",
        ]
    if not op.in_place:
        (o,) = op.outputs
        if o.shape is OPS["rmsnorm"].outputs[0].shape:
            # Contiguous: a contiguous input's empty_like (0.08 us less per call than asking
            # for contiguous_format, whose keyword costs 0.13), else contiguous_format.
            alloc = (f"_empty_like({o.like}) if {o.like}.is_contiguous() else "
                     f"_empty_like({o.like}, memory_format=_contiguous)")
        else:
            alloc = (f"_empty(_OUT_{op.name}(tuple({o.like}.shape)), dtype={o.like}.dtype, "
                     f"device={o.like}.device)")
        lines += ["    if out is None:", f"        out = {alloc}"]
    lines += [
        f"    if type({first}) is _Tensor and not _is_compiling():",
        f"        if _grad_enabled() and ({grad}):",
        f"            _no_grad({op.name!r})",
        f"        _FN[{op.name!r}]({_ffi_args(op)})",
        "    else:",
        f"        _ops.{op.name}({op_args})",
        f"    return {'None' if op.in_place else 'out'}",
        "",
        f"def _impl_{op.name}({op_args}):",
        f"    _FN[{op.name!r}]({_ffi_args(op)})",
    ]
    if op.in_place:
        lines += [
            "",
            f"def _impl_{op.name}_out({out_args}):",
            f"    _FN[{op.name!r}]({ffi})",
        ]
    return "\n".join(lines) + "\n"


def _attention_schema(op: Op, out_form: bool = False) -> str:
    """The schema of an op of the general path (attention, GEMM, RoPE): every output (mutated),
    the inputs, the encoded attributes; no workspace (the implementation allocates it). An
    in-place op (RoPE) has no outputs in its own schema but mutates the inputs they alias;
    `out_form`: its destination-passing form, `<name>_out`."""
    in_place = op.in_place and not out_form
    args = [] if in_place else [f"Tensor(a{i}!) {o.name}" for i, o in enumerate(op.outputs)]
    mutated = list(op.aliases.values()) if in_place else []
    args += [f"Tensor(m{mutated.index(x.name)}!) {x.name}" if x.name in mutated
             else f"Tensor {x.name}" for x in op.inputs]
    args += [f"{a.ffi_type} {a.name}" for a in op.attrs]
    return f"{op.name}{'_out' if out_form else ''}({', '.join(args)}) -> ()"


def _attention_source(op: Op) -> str:
    ins = [x.name for x in op.inputs]
    outs = [o.name for o in op.outputs]
    attr_args = [a.name for a in op.attrs]
    op_args = ", ".join(outs + ins + attr_args)
    first = ins[0]
    grad = " or ".join(f"{x.name}.requires_grad" for x in op.inputs if x.role != "index")

    def run(indent: str, dests: list[str] = outs) -> list[str]:
        if not op.workspace:
            return [f"{indent}_FN[{op.name!r}]({', '.join(dests + ins + attr_args)})"]
        return [f"{indent}_a, _n = {ac.plan(op, f'{first}.get_device()')}",
                (f"{indent}_FN[{op.name!r}]({', '.join(dests)}, _empty(_n, dtype=_f32, "
                 f"device={first}.device), {', '.join(ins)}, *_a)")]

    def call(name: str, args: str, dests: list[str]) -> list[str]:
        return [f"    if type({first}) is _Tensor and not _is_compiling():",
                f"        if _grad_enabled() and ({grad}):",
                f"            _no_grad({op.name!r})",
                *run("        ", dests),
                "    else:",
                f"        _ops.{name}({args})"]

    lines = [f"def {op.name}({ac.params(op)}):", *ac.encode(op),
             *ac.absent(op, "_empty(0, dtype=_f32, device={first}.device)")]
    if op.in_place:
        # In place (outputs = the inputs they alias), or, given every output, into those.
        given = ", ".join(f"{o!r}: {o}" for o in outs)
        aliased = [op.aliases[o] for o in outs]
        in_place_args = ", ".join(ins + attr_args)
        lines += [f"    if _outputs_given({op.name!r}, {{{given}}}):",
                  *(f"        if not isinstance({o}, _Tensor): _not_tensor({op.name!r}, {o!r}, {o})"
                    for o in outs),
                  *("    " + x for x in call(f"{op.name}_out", op_args, outs)),
                  "        return None",
                  *call(op.name, in_place_args, aliased),
                  "    return None",
                  "",
                  f"def _impl_{op.name}({in_place_args}):",
                  *run("    ", aliased),
                  "",
                  f"def _impl_{op.name}_out({op_args}):",
                  *run("    ")]
        return "\n".join(lines) + "\n"
    for o in op.outputs:
        lines += [f"    if {o.name} is None:",
                  (f"        {o.name} = _empty({ac.shape(op, o)}, "
                   f"dtype={ac.dtype(o, f'{o.like}.dtype')}, device={o.like}.device)"),
                  f"    elif not isinstance({o.name}, _Tensor):",
                  f"        _not_tensor({op.name!r}, {o.name!r}, {o.name})"]
    lines += [
        *call(op.name, op_args, outs),
        f"    return {ac.returns(op)}",
        "",
        f"def _impl_{op.name}({op_args}):",
        *run("    "),
    ]
    return "\n".join(lines) + "\n"


def _not_tensor(op: str, name: str, x):
    t = type(x)
    raise TypeError(f"xkernels.torch.{op}: {name} must be a torch.Tensor, got "
                    f"{t.__module__}.{t.__qualname__}")


def _fake(*args, **kwargs):
    return None


def _generate() -> dict:
    env = {
        "_Tensor": torch.Tensor,
        "_is_compiling": torch.compiler.is_compiling,
        "_grad_enabled": torch.is_grad_enabled,
        "_empty": torch.empty,
        "_empty_like": torch.empty_like,
        "_contiguous": torch.contiguous_format,
        "_FN": _FN,
        "_no_grad": _no_grad,
        "_ops": torch.ops.xkernels,
        "_outputs_given": functools.partial(outputs_given, __name__),
        "_f32": torch.float32,
        "_DT": tuple(getattr(torch, name) for name in DTYPES),
        "_plan": jit.plan,
        "_not_tensor": _not_tensor,
    }
    public = {}
    for op in OPS.values():
        names = [op.name] + ([f"{op.name}_out"] if op.in_place else [])
        if op.kind != "rows":
            env[f"_OP_{op.name}"] = op
            _lib.define(_attention_schema(op))
            if op.in_place:
                _lib.define(_attention_schema(op, out_form=True))
            public[op.name] = op.generate(_attention_source(op), env, __name__, _doc(op))
        else:
            _lib.define(_schema(op))
            if op.in_place:
                _lib.define(_schema(op, out_form=True))
            public[op.name] = op.generate(_source(op), env, __name__, _doc(op))
        for name in names:
            impl = env[f"_impl_{name}"]
            _lib.impl(name, impl, "CPU")
            _lib.impl(name, impl, "CUDA")
            torch.library.register_fake(f"xkernels::{name}", _fake, lib=_lib)
    return public


def _doc(op: Op) -> str:
    if op.kind != "rows" and not op.in_place:
        return op.docstring(f"{ac.returns_doc(op)} {ac.outputs_doc(op, 'tensors')}")
    return op.docstring(op.overwrites_or("tensors") if op.in_place else
                        "out: optional destination tensor (shape and dtype of the result).")


globals().update(_generate())
