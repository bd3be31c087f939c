"""What the adapters' generated code of the ops of the general path (every kind but "rows":
attention, GEMM) shares, framework-free: the pieces of source every adapter writes the same way
(the signature, attribute encoding, absent optional inputs, output shapes and dtypes, the plan
call, what a call returns) and their docstring lines. Row ops do not use this module.

Generated code refers to `_ENC_<op>_<attr>` and `_OUT_<op>_<output>` (``Op.codegen_env``), to
`_OP_<op>` (the Op), `_plan` (``jit.plan``), `_f32` (the framework's float32) and `_DT` (the
framework's dtypes in the order of ``ops.DTYPES``), all of which the adapter puts in the code's
environment.
"""

from __future__ import annotations

from .ops import DTYPES, Op, Output


def params(op: Op, outputs: bool = True) -> str:
    """The public function's parameters: the inputs (optional ones default to None), the
    attributes with their defaults and, with `outputs`, the outputs by keyword."""
    ps = [x.param for x in op.inputs] + [f"{a.name}={a.default!r}" for a in op.attrs]
    return ", ".join(ps + (["*"] + [f"{o.name}=None" for o in op.outputs] if outputs else []))


def absent(op: Op, empty: str, indent: str = "    ") -> list[str]:
    """Lines giving each optional input that is None `empty` (an expression: the framework's
    empty (0,) float32 tensor, where `{first}` stands for the first input), which the exported
    function takes as absent."""
    first = op.inputs[0].name
    return [f"{indent}if {x.name} is None: {x.name} = {empty.format(first=first)}"
            for x in op.inputs if x.optional]


def encode(op: Op, indent: str = "    ") -> list[str]:
    """Lines rebinding each attribute that needs it to its encoded value (what the exported
    function and the custom op's schema take): later lines use the attributes' names."""
    return [f"{indent}{a.name} = _ENC_{op.name}_{a.name}({a.name})"
            for a in op.attrs if op.encoded(a)]


def attrs(op: Op) -> str:
    """The (encoded) attributes as a tuple expression, in the table's order."""
    return _tuple([a.name for a in op.attrs])


def shape(op: Op, o: Output) -> str:
    """The output's shape (an expression): from its `like` input's shape, or from the inputs'
    shapes and the (encoded) attributes it is shaped `of`; (0,) when it does not exist (its `when`
    attribute is false)."""
    inputs = {x.name for x in op.inputs}
    args = [f"{n}.shape" if n in inputs else n for n in (o.of or (o.like,))]
    s = f"_OUT_{op.name}_{o.name}({', '.join(args)})"
    return f"({s} if {o.when} else (0,))" if o.when else s


def dtype(o: Output, like_dtype: str) -> str:
    """The output's dtype (an expression): fixed (float32: `_f32`; others from `_DT`), named by a
    DType attribute (-1: the `like` input's), else its `like` input's; float32 when it does not
    exist."""
    if o.dtype_from is not None:
        d = f"(_DT[{o.dtype_from}] if {o.dtype_from} >= 0 else {like_dtype})"
    elif o.dtype == "float32":
        return "_f32"
    elif o.dtype is not None:
        d = f"_DT[{DTYPES.index(o.dtype)}]"  # {o.dtype}
    else:
        d = like_dtype
    return f"({d} if {o.when} else _f32)" if o.when else d


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
