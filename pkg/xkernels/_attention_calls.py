"""What the adapters' generated code of attention-kind ops shares, framework-free: the pieces of
source every adapter writes the same way (attribute encoding, output shapes and dtypes, the plan
call, what a call returns) and their docstring lines. Row ops do not use this module.

Generated code refers to `_ENC_<op>_<attr>` and `_OUT_<op>_<output>` (``Op.codegen_env``), to
`_OP_<op>` (the Op), `_plan` (``jit.plan``) and `_f32` (the framework's float32), all of which the
adapter puts in the code's environment.
"""

from __future__ import annotations

from .ops import Op, Output


def encode(op: Op, indent: str = "    ") -> list[str]:
    """Lines rebinding each attribute that needs it to its encoded value (what the exported
    function and the custom op's schema take): later lines use the attributes' names."""
    return [f"{indent}{a.name} = _ENC_{op.name}_{a.name}({a.name})"
            for a in op.attrs if op.encoded(a)]


def attrs(op: Op) -> str:
    """The (encoded) attributes as a tuple expression, in the table's order."""
    return _tuple([a.name for a in op.attrs])


def shape(op: Op, o: Output, like_shape: str) -> str:
    """The output's shape from its `like` input's shape (an expression): (0,) when it does not
    exist (its `when` attribute is false)."""
    s = f"_OUT_{op.name}_{o.name}({like_shape})"
    return f"({s} if {o.when} else (0,))" if o.when else s


def dtype(o: Output, like_dtype: str) -> str:
    """The output's dtype: fixed (float32), else its `like` input's; float32 when it does not
    exist."""
    if o.dtype not in (None, "float32"):
        raise NotImplementedError(f"output {o.name}: dtype {o.dtype!r}")
    if o.dtype == "float32":
        return "_f32"
    return f"({like_dtype} if {o.when} else _f32)" if o.when else like_dtype


def plan(op: Op, device_id: str) -> str:
    """`(attrs to pass, workspace elements)` of a call: jit.plan on the inputs' shapes."""
    shapes = _tuple([f"{x.name}.shape" for x in op.inputs])
    return f"_plan(_OP_{op.name}, {device_id}, {shapes}, {attrs(op)})"


def _tuple(items: list[str]) -> str:
    return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"


def _pack(names: list[str]) -> str:
    return names[0] if len(names) == 1 else "(" + ", ".join(names) + ")"


def _when(op: Op) -> str | None:
    whens = list(dict.fromkeys(o.when for o in op.outputs if o.when))
    if len(whens) > 1:
        raise NotImplementedError(f"{op.name}: outputs conditional on more than one attribute")
    return whens[0] if whens else None


def returns(op: Op) -> str:
    """The expression a call returns: its outputs that exist, one alone or a tuple."""
    every = [o.name for o in op.outputs]
    when = _when(op)
    if when is None:
        return _pack(every)
    return f"{_pack(every)} if {when} else {_pack([o.name for o in op.outputs if not o.when])}"


def returns_doc(op: Op) -> str:
    """The docstring's sentence on what a call returns."""
    every = [o.name for o in op.outputs]
    when = _when(op)
    if when is None:
        return f"Returns {_pack(every)}."
    return f"Returns {_pack([o.name for o in op.outputs if not o.when])}, or {_pack(every)} " \
           f"when {when} is true."


def outputs_doc(op: Op, what: str) -> str:
    """The docstring's sentence on the outputs given by keyword (`what`: "tensors")."""
    conditional = [f"{o.name} only when {o.when}" for o in op.outputs if o.when]
    note = f"; {', '.join(conditional)}" if conditional else ""
    return (", ".join(f"{o.name}=" for o in op.outputs)
            + f": optional destination {what} (shapes and dtypes of the results{note}).")
