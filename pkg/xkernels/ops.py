"""The op table: every op declared once.

An op names its module and exported TVM-FFI function, its tensor inputs, its outputs (shape and
dtype follow from an input), its scalar attributes, and which inputs its outputs overwrite in the
in-place form (PyTorch's). The exported function always takes
``(*outputs, [workspace,] *inputs, *attrs)``; adapters and tests are generated from this table, so
adding an op means a kernel, a binding, an entry here and a reference in ``reference.py``.

Two kinds of op share the table. Row ops (``kind="rows"``: norms, activations, softmax) take
``[..., cols]`` rows and ``(cols,)`` columns. Attention ops (``kind="attention"``) take tensors of
their own layouts and int32 index tensors (``role="index"``), may have an output that exists only
when a boolean attribute asks for it (``Output.when``: the LSE), an output of a fixed dtype
(``Output.dtype``), and a scratch workspace: an op with ``workspace=True`` also exports
``<name>_plan(device_id, *input_shapes, *attrs) -> (num_splits, workspace_elems)``, which the
adapters call (cached per shapes) to resolve the ``num_splits`` attribute and size the float32
workspace they allocate from the framework's caching allocator. The workspace follows the outputs
in the exported function's arguments: XLA can only allocate it as a result, and jax-tvm-ffi passes
results as one group (``rets``), before the inputs.
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


def _drop_last(shape: Shape) -> Shape:
    return tuple(shape[:-1])


@dataclass(frozen=True)
class Input:
    name: str
    # "data": a float tensor ([..., cols] rows for row ops); "column": a (cols,) weight or bias;
    # "index": an int32 index tensor (indptr, indices, lengths) on the data's device
    role: str = "data"
    doc: str = ""


@dataclass(frozen=True)
class Output:
    name: str
    like: str  # the input whose device (and dtype, unless `dtype`) it takes
    shape: Callable[[Shape], Shape] = _same  # from that input's shape
    dtype: str | None = None  # a fixed dtype ("float32") instead of `like`'s
    # A boolean attribute: the output exists only when it is true; otherwise the exported function
    # gets an empty (0,) tensor in its place and the adapters do not return it.
    when: str | None = None

    def exists(self, attrs: dict[str, Any]) -> bool:
        return self.when is None or bool(attrs[self.when])

    def shape_for(self, like_shape: Shape, attrs: dict[str, Any]) -> Shape:
        return self.shape(tuple(like_shape)) if self.exists(attrs) else (0,)


_NAN = float("nan")


@dataclass(frozen=True)
class Attr:
    name: str
    type: type  # float, int, bool or str
    default: Any
    choices: tuple[str, ...] = ()  # a str attribute crosses the FFI as its index here
    doc: str = ""

    def encode(self, value: Any) -> Any:
        """The value the exported function takes: a str as its index in `choices`, a bool as an
        int (0 or 1: jax-tvm-ffi passes XLA attributes of integer and float types), a float None
        (the op's default, e.g. sm_scale = 1/sqrt(head_dim)) as NaN."""
        if self.choices:
            if value not in self.choices:
                raise ValueError(f"{self.name} must be one of {self.choices}, got {value!r}")
            return self.choices.index(value)
        if self.type is float:
            # one NaN object: NaNs compare unequal, so cache keys of encoded attrs need the same one
            return _NAN if value is None or value != value else float(value)
        if self.type is bool:
            if not isinstance(value, (bool, int)) or value not in (0, 1):
                raise TypeError(f"{self.name} must be a bool, got {value!r}")
            return int(value)
        if self.type is int:
            if isinstance(value, bool) or not isinstance(value, int):
                try:
                    import operator

                    value = operator.index(value)  # numpy integers
                except TypeError:
                    raise TypeError(f"{self.name} must be an int, got {value!r}") from None
            return int(value)
        return value

    @property
    def ffi_type(self) -> str:
        """The exported function's parameter type: "float" (double) or "int" (int64_t)."""
        return "float" if self.type is float else "int"


@dataclass(frozen=True)
class Op:
    name: str  # also the exported function's name
    module: str
    inputs: tuple[Input, ...]
    outputs: tuple[Output, ...]
    attrs: tuple[Attr, ...] = ()
    aliases: dict[str, str] = field(default_factory=dict)  # output -> input it overwrites in place
    doc: str = ""
    kind: str = "rows"  # "rows" or "attention" (see the module docstring)
    # A float32 scratch workspace, sized by the exported `<name>_plan` (see the module docstring);
    # the op then has a "num_splits" attribute, which the plan resolves.
    workspace: bool = False

    @property
    def in_place(self) -> bool:
        return bool(self.aliases)

    @property
    def plan_name(self) -> str:
        return f"{self.name}_plan"

    def returned(self, attrs: dict[str, Any]) -> list[Output]:
        """The outputs a call with these attributes returns."""
        return [o for o in self.outputs if o.exists(attrs)]

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

    def encoded(self, a: Attr) -> bool:
        """Whether the attribute's value changes on its way to the exported function."""
        return bool(a.choices) or a.type in (bool, int) or (a.type is float and a.default is None)

    def codegen_env(self) -> dict[str, Any]:
        """Names the adapters' generated code of this op refers to: `_ENC_<op>_<attr>`, the
        encoder of each attribute that needs one, `_OUT_<op>` (the shape rule of the output of an
        op with one output, not in place) and `_OUT_<op>_<output>` (every output's)."""
        env: dict[str, Any] = {f"_ENC_{self.name}_{a.name}": a.encode
                               for a in self.attrs if self.encoded(a)}
        if not self.in_place and len(self.outputs) == 1:
            env[f"_OUT_{self.name}"] = self.outputs[0].shape
        for o in self.outputs:
            env[f"_OUT_{self.name}_{o.name}"] = o.shape
        return env

    def ffi_attrs(self) -> list[str]:
        """The attributes as the exported function takes them, in generated code whose
        parameters are named as the attributes (those that need it go through their encoder)."""
        return [f"_ENC_{self.name}_{a.name}({a.name})" if self.encoded(a) else a.name
                for a in self.attrs]

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


# ----------------------------------------------------------------------------------------------
# Attention. Shapes: q [..., tokens, num_qo_heads, head_dim], keys and values [..., num_kv_heads,
# head_dim] (num_qo_heads a multiple of num_kv_heads), out like q, lse [..., tokens, num_qo_heads]
# float32, the natural log of the softmax's denominator (log sum_j exp(s_ij), s the scaled and
# capped logits), -inf for a query that sees no key (its output is 0).

_CAUSAL = Attr("causal", bool, False,
               doc="causal mask; when the query is shorter than the keys, aligned to the bottom "
                   "right (query i of n sees keys up to i + kv_len - n)")
_WINDOW = Attr("window_left", int, -1,
               doc="sliding window: a query sees at most this many keys before its own position "
                   "(-1: no window)")
_SOFTCAP = Attr("logits_soft_cap", float, 0.0,
                doc="logits s -> cap * tanh(s / cap) before the softmax (0: off)")
_SM_SCALE = Attr("sm_scale", float, None,
                 doc="scale of q.k before the softmax (None: 1/sqrt(head_dim))")
_RETURN_LSE = Attr("return_lse", bool, False,
                   doc="also return the log-sum-exp (natural log) per query token and head, "
                       "float32, shaped as q without its last dimension")
_SPLITS = Attr("num_splits", int, 0,
               doc="split each query tile's keys over this many thread blocks, merged after "
                   "(0: chosen from the shapes and the GPU; 1: never split)")
_KV_LAYOUT = Attr("kv_layout", str, "NHD", ("NHD", "HND"),
                  doc="page layout of the caches: NHD [pages, page_size, num_kv_heads, head_dim] "
                      "or HND [pages, num_kv_heads, page_size, head_dim]")
_ATTN_ATTRS = (_CAUSAL, _WINDOW, _SOFTCAP, _SM_SCALE, _RETURN_LSE, _SPLITS)
_ATTN_OUTPUTS = (Output("out", "q"),
                 Output("lse", "q", _drop_last, dtype="float32", when="return_lse"))
_Q, _K, _V = Input("q"), Input("k"), Input("v")
_PAGED = (Input("q"), Input("k_cache"), Input("v_cache"))
_PAGE_TABLE = (Input("kv_indptr", "index"), Input("kv_indices", "index"),
               Input("kv_last_page_len", "index"))


def _merged(shape: Shape) -> Shape:
    """[..., num_states, heads(, head_dim)] -> without the states' dimension: merge_states's
    outputs from v [..., k, h, d] and s [..., k, h]."""
    return (*shape[:-3], *shape[-2:]) if len(shape) >= 3 else tuple(shape)


def _merged_lse(shape: Shape) -> Shape:
    return (*shape[:-2], shape[-1]) if len(shape) >= 2 else tuple(shape)


_ATTENTION_OPS = (
    Op("attention", "attention", (_Q, _K, _V), _ATTN_OUTPUTS, _ATTN_ATTRS,
       kind="attention", workspace=True,
       doc="Attention over a dense batch: q [batch, q_len, num_qo_heads, head_dim], k and v "
           "[batch, kv_len, num_kv_heads, head_dim] -> out like q (softmax(q k^T * sm_scale) v "
           "per head; query heads h*g..h*g+g-1 share kv head h, g = num_qo_heads / "
           "num_kv_heads)."),
    Op("attention_varlen", "attention",
       (_Q, _K, _V, Input("cu_seqlens_q", "index"), Input("cu_seqlens_k", "index")),
       _ATTN_OUTPUTS, _ATTN_ATTRS, kind="attention", workspace=True,
       doc="Attention over a ragged batch packed along tokens (flash_attn_varlen_func's "
           "layout): q [total_q, num_qo_heads, head_dim], k and v [total_k, num_kv_heads, "
           "head_dim]; request b's queries are rows cu_seqlens_q[b]:cu_seqlens_q[b+1] of q, its "
           "keys rows cu_seqlens_k[b]:cu_seqlens_k[b+1] of k and v (int32, batch + 1 entries). "
           "No maximum length is needed: the kernels read the lengths on the GPU."),
    Op("attention_paged", "attention",
       (*_PAGED, Input("qo_indptr", "index"), *_PAGE_TABLE),
       _ATTN_OUTPUTS, (_KV_LAYOUT, *_ATTN_ATTRS), kind="attention", workspace=True,
       doc="Attention of a ragged batch of queries over a paged KV cache (FlashInfer's layout): "
           "q [total_q, num_qo_heads, head_dim], request b's queries rows "
           "qo_indptr[b]:qo_indptr[b+1]; its keys and values the pages "
           "kv_indices[kv_indptr[b]:kv_indptr[b+1]] of k_cache and v_cache, all full but the "
           "last, which holds kv_last_page_len[b] tokens (int32 index tensors)."),
    Op("decode_paged", "attention", (*_PAGED, *_PAGE_TABLE), _ATTN_OUTPUTS,
       (_KV_LAYOUT, Attr("causal", bool, True, doc=_CAUSAL.doc), *_ATTN_ATTRS[1:]),
       kind="attention", workspace=True,
       doc="Decode over a paged KV cache: q [batch, num_qo_heads, head_dim] (one token per "
           "request) or [batch, q_len, num_qo_heads, head_dim] (q_len tokens per request, e.g. "
           "speculative decoding: the last q_len positions of each request's keys); the pages "
           "as in attention_paged. The query heads of a kv head share one pass over its keys; "
           "long caches are split over thread blocks and merged."),
    Op("merge_state", "attention",
       (Input("v_a"), Input("s_a"), Input("v_b"), Input("s_b")),
       (Output("out", "v_a"), Output("lse", "s_a")), kind="attention",
       doc="Merge two attention states over disjoint key sets: v_a, v_b [..., heads, head_dim] "
           "(outputs normalised by their own softmax denominators), s_a, s_b [..., heads] their "
           "log-sum-exps (float32, natural log) -> (out, lse) of the union. A state whose lse is "
           "-inf contributes nothing."),
    Op("merge_states", "attention", (Input("v"), Input("s")),
       (Output("out", "v", _merged), Output("lse", "s", _merged_lse)), kind="attention",
       doc="Merge k attention states: v [..., k, heads, head_dim], s [..., k, heads] (float32 "
           "log-sum-exps, natural log) -> (out [..., heads, head_dim], lse [..., heads])."),
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
        *_ATTENTION_OPS,
    )
}

ROW_OPS: dict[str, Op] = {name: op for name, op in OPS.items() if op.kind == "rows"}
ATTENTION_OPS: dict[str, Op] = {name: op for name, op in OPS.items() if op.kind == "attention"}
