"""xkernels.torch: every op of the table as a function on torch.Tensor.

Each op is also registered as a torch custom op (``torch.ops.xkernels.<name>``, destination-passing
and mutating, with a fake implementation), so it works under ``torch.compile(fullgraph=True)``,
``torch.library.opcheck`` and CUDA-graph capture. In eager mode the public functions call the
exported TVM-FFI function directly, skipping the dispatcher: that keeps the per-call host cost
below the native ops'. The kernel runs on torch's current stream (TVM-FFI reads it per call).

Functional ops take an optional ``out=``; in-place ops (``fused_add_rmsnorm``) overwrite their
inputs and return None, as FlashInfer's do.
"""

from __future__ import annotations

import torch

from .. import jit
from ..ops import OPS, Op

__all__ = sorted(OPS)  # noqa: PLE0605 (generated from the op table)

_lib = torch.library.Library("xkernels", "DEF")  # noqa: TOR901 (low-overhead registration)


_FN = jit.FUNCTIONS


def _no_grad(name: str):
    raise NotImplementedError(
        f"xkernels.torch.{name} has no backward yet; call it under torch.no_grad() or "
        "torch.inference_mode(), or with inputs that do not require grad"
    )


def _schema(op: Op) -> str:
    args = [f"Tensor(a{i}!) {o.name}" for i, o in enumerate(o for o in op.outputs if o.name not in op.aliases)]
    mutated = set(op.aliases.values())
    args += [f"Tensor(m{i}!) {x.name}" if x.name in mutated else f"Tensor {x.name}"
             for i, x in enumerate(op.inputs)]
    args += [f"{'float' if a.type is float else 'str'} {a.name}" for a in op.attrs]
    return f"{op.name}({', '.join(args)}) -> ()"


def _ffi_args(op: Op) -> str:
    """The exported function's arguments, in terms of the torch op's parameters."""
    outs = [op.aliases.get(o.name, o.name) for o in op.outputs]
    attrs = [f"_ENC_{op.name}_{a.name}({a.name})" if a.choices else a.name for a in op.attrs]
    return ", ".join(outs + [x.name for x in op.inputs] + attrs)


def _source(op: Op) -> str:
    ins = [x.name for x in op.inputs]
    attrs = [f"{a.name}={a.default!r}" for a in op.attrs]
    params = ", ".join(ins + attrs + ([] if op.in_place else ["*", "out=None"]))
    op_args = ", ".join(([] if op.in_place else ["out"]) + ins + [a.name for a in op.attrs])
    first = ins[0]
    grad = " or ".join(f"{x}.requires_grad" for x in ins)
    lines = [f"def {op.name}({params}):"]
    if not op.in_place:
        (o,) = op.outputs
        if o.shape is OPS["rmsnorm"].outputs[0].shape:
            alloc = f"_empty_like({o.like}, memory_format=_contiguous)"
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
    return "\n".join(lines) + "\n"


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
    }
    public = {}
    for op in OPS.values():
        _lib.define(_schema(op))
        public[op.name] = op.generate(_source(op), env, __name__, _doc(op))
        impl = env[f"_impl_{op.name}"]
        _lib.impl(op.name, impl, "CPU")
        _lib.impl(op.name, impl, "CUDA")
        torch.library.register_fake(f"xkernels::{op.name}", _fake, lib=_lib)
    return public


def _doc(op: Op) -> str:
    return op.docstring(op.overwrites if op.in_place else
                        "out: optional destination tensor (shape and dtype of the result).")


globals().update(_generate())
