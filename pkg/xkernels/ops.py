"""The op table: every op declared once.

An op names its module and exported TVM-FFI function, its tensor inputs, its outputs (shape and
dtype follow from an input), its scalar attributes, and which inputs its outputs overwrite in the
in-place form (PyTorch's). The exported function always takes ``(*outputs, *inputs, *attrs)``;
adapters and tests are generated from this table, so adding an op means a kernel, a binding, an
entry here and a reference in ``reference.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Shape = tuple[int, ...]


def _same(shape: Shape) -> Shape:
    return tuple(shape)


def _halve_last(shape: Shape) -> Shape:
    return (*shape[:-1], shape[-1] // 2)


@dataclass(frozen=True)
class Input:
    name: str
    role: str = "data"  # "data": [..., cols] rows; "column": a (cols,) weight or bias
    doc: str = ""


@dataclass(frozen=True)
class Output:
    name: str
    like: str  # the input whose dtype and device it takes
    shape: Callable[[Shape], Shape] = _same  # from that input's shape


@dataclass(frozen=True)
class Attr:
    name: str
    type: type  # float or str
    default: Any
    choices: tuple[str, ...] = ()  # a str attribute crosses the FFI as its index here
    doc: str = ""

    def encode(self, value: Any) -> Any:
        """The value the exported function takes."""
        if self.choices:
            if value not in self.choices:
                raise ValueError(f"{self.name} must be one of {self.choices}, got {value!r}")
            return self.choices.index(value)
        return float(value) if self.type is float else value


@dataclass(frozen=True)
class Op:
    name: str  # also the exported function's name
    module: str
    inputs: tuple[Input, ...]
    outputs: tuple[Output, ...]
    attrs: tuple[Attr, ...] = ()
    aliases: dict[str, str] = field(default_factory=dict)  # output -> input it overwrites in place
    doc: str = ""

    @property
    def in_place(self) -> bool:
        return bool(self.aliases)

    def input(self, name: str) -> Input:
        return next(i for i in self.inputs if i.name == name)

    def output_shape(self, out: Output, shapes: dict[str, Shape]) -> Shape:
        return out.shape(tuple(shapes[out.like]))

    def docstring(self, last: str, attr_note: str = "") -> str:
        """The adapters' docstring: what the op does, its attributes, then `last` (what it
        returns or overwrites, in the adapter's terms)."""
        lines = [self.doc, ""]
        lines += [f"{a.name}: {a.doc} (default {a.default!r}{attr_note})." for a in self.attrs]
        return "\n".join([*lines, last] if last else lines)

    @property
    def overwrites(self) -> str:
        """The in-place form's docstring line."""
        return ("Overwrites " + ", ".join(f"{v} with {k}" for k, v in self.aliases.items())
                + "; returns None.")

    def overwrites_or(self, what: str) -> str:
        """The docstring line of an in-place op that also takes its outputs by keyword."""
        outs = ", ".join(f"{k}=" for k in self.aliases)
        return (self.overwrites + f" Given {outs} (destination {what}, all of them), writes "
                "those instead and leaves the inputs unchanged.")

    def codegen_env(self) -> dict[str, Any]:
        """Names the adapters' generated code of this op refers to: `_ENC_<op>_<attr>`, the
        encoder of each attribute with choices, and `_OUT_<op>`, the shape rule of the output of
        an op that is not in place."""
        env: dict[str, Any] = {f"_ENC_{self.name}_{a.name}": a.encode
                               for a in self.attrs if a.choices}
        if not self.in_place:
            env[f"_OUT_{self.name}"] = self.outputs[0].shape
        return env

    def ffi_attrs(self) -> list[str]:
        """The attributes as the exported function takes them, in generated code whose
        parameters are named as the attributes (those with choices go through their encoder)."""
        return [f"_ENC_{self.name}_{a.name}({a.name})" if a.choices else a.name for a in self.attrs]

    def generate(self, source: str, env: dict[str, Any], module: str,
                 doc: str) -> Callable[..., Any]:
        """Run an adapter's generated `source` for this op in `env` (codegen_env added to it) and
        return the public function it defines, named as one of `module`'s, with `doc`."""
        env.update(self.codegen_env())
        exec(compile(source, f"<{module}.{self.name}>", "exec"), env)  # noqa: S102
        fn = env[self.name]
        fn.__module__ = module
        fn.__qualname__ = self.name
        fn.__doc__ = doc
        return fn

    def reference(self) -> Callable[..., Any]:
        """The float64 NumPy reference: (*inputs, **attrs) -> output or tuple of outputs."""
        from . import reference

        return getattr(reference, self.name)


def outputs_given(module: str, op: str, given: dict[str, Any]) -> bool:
    """Whether an in-place op's call gave its outputs (`given`: name -> value or None) by keyword
    to write there instead: all of them, or none (then False)."""
    missing = [k for k, v in given.items() if v is None]
    if missing and len(missing) < len(given):
        raise TypeError(f"{module}.{op}: {', '.join(given)} are given together (to write the "
                        f"results there instead of in place); missing {', '.join(missing)}")
    return not missing


_EPS = Attr("eps", float, 1e-6, doc="added to the mean square (variance) before the square root")
_APPROX = Attr("approximate", str, "none", ("none", "tanh"), doc="'none' (erf) or 'tanh'")
_X = Input("input")


def _gated(name: str, what: str) -> Op:
    return Op(name, "activation", (_X,), (Output("out", "input", _halve_last),),
              doc=f"{what}(input[..., :d]) * input[..., d:] for input [..., 2d] -> [..., d].")


def _rms(name: str, gemma: bool) -> Op:
    scale = "(1 + weight)" if gemma else "weight"
    return Op(name, "norm", (_X, Input("weight", "column")), (Output("out", "input"),), (_EPS,),
              doc=f"RMSNorm over the last dimension: input / sqrt(mean(input^2) + eps) * {scale}.")


def _fused(name: str, gemma: bool) -> Op:
    scale = "(1 + weight)" if gemma else "weight"
    return Op(
        name, "norm",
        (_X, Input("residual"), Input("weight", "column")),
        (Output("out", "input"), Output("residual_out", "residual")), (_EPS,),
        aliases={"out": "input", "residual_out": "residual"},
        doc=("residual <- input + residual (rounded to the dtype), then input <- RMSNorm(residual)"
             f" * {scale}. In place in PyTorch; functional frameworks return both."),
    )


OPS: dict[str, Op] = {
    op.name: op
    for op in (
        _gated("silu_and_mul", "silu"),
        _gated("gelu_and_mul", "gelu"),
        _gated("gelu_tanh_and_mul", "gelu_tanh"),
        Op("silu", "activation", (_X,), (Output("out", "input"),), doc="input * sigmoid(input)."),
        Op("gelu", "activation", (_X,), (Output("out", "input"),), (_APPROX,),
           doc="GELU, exact (erf) or tanh-approximated."),
        Op("add_bias_gelu", "activation", (_X, Input("bias", "column")), (Output("out", "input"),),
           (_APPROX,), doc="gelu(input + bias), bias broadcast over rows."),
        Op("mul_add", "activation", (Input("a"), Input("b"), Input("c")), (Output("out", "a"),),
           doc="a * b + c (same shapes), computed in float and rounded once."),
        _rms("rmsnorm", gemma=False),
        _rms("gemma_rmsnorm", gemma=True),
        _fused("fused_add_rmsnorm", gemma=False),
        _fused("gemma_fused_add_rmsnorm", gemma=True),
        Op("layernorm", "norm", (_X, Input("weight", "column"), Input("bias", "column")),
           (Output("out", "input"),), (Attr("eps", float, 1e-5, doc=_EPS.doc),),
           doc="LayerNorm over the last dimension (biased variance) * weight + bias."),
        Op("softmax", "softmax", (_X,), (Output("out", "input"),),
           (Attr("scale", float, 1.0, doc="multiplies the input first"),),
           doc="softmax(scale * input) over the last dimension; a row of -inf gives zeros."),
    )
}
