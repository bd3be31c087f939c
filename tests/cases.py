"""One definition of what a test case is: inputs for an op at a shape, the float64 reference,
and the tolerance per dtype. Shared by the host-path tests and the GPU tests."""

from __future__ import annotations

import numpy as np
import torch
import xkernels.torch as xt
from xkernels.ops import OPS, Op

DTYPES = [torch.float16, torch.bfloat16, torch.float32]

# |out - ref| <= atol + rtol * |ref|: a few output roundings plus the 16-bit paths' PTX
# approximations (tanh.approx, ex2.approx); float32 keeps accurate math.
TOL = {torch.float32: (2e-5, 2e-5), torch.float16: (4e-3, 4e-3), torch.bfloat16: (2e-2, 2e-2)}

ATTRS = {  # non-default attributes, so that they are exercised
    "gelu": {"approximate": "tanh"},
    "add_bias_gelu": {"approximate": "none"},
    "rmsnorm": {"eps": 1e-5},
    "layernorm": {"eps": 1e-5},
    "softmax": {"scale": 0.7},
}


def data(shape, dtype, device, layout="contiguous", gen=None):
    """A random tensor of `shape` whose rows are laid out as `layout` says:
    contiguous; strided (rows padded: only the last dim contiguous); heads (a 3-D per-head view
    of a wider row, token stride != heads * dim); unaligned (base pointer off by one element)."""
    n = int(np.prod(shape))
    if layout == "contiguous":
        return torch.randn(shape, dtype=torch.float32, generator=gen).to(dtype).to(device)
    if layout == "unaligned":
        buf = torch.randn(n + 1, dtype=torch.float32, generator=gen).to(dtype).to(device)
        return buf[1:].view(shape)
    if layout == "strided":
        wide = torch.randn((*shape[:-1], shape[-1] + 13), dtype=torch.float32, generator=gen)
        return wide.to(dtype).to(device)[..., : shape[-1]]
    if layout == "heads":  # shape (tokens, heads, dim)
        t, h, d = shape
        wide = torch.randn((t, h * d + 3 * d), dtype=torch.float32, generator=gen)
        return wide.to(dtype).to(device)[:, : h * d].view(t, h, d)
    raise ValueError(layout)


def make_inputs(op: Op, shape, dtype, device, layout="contiguous", weight_dtype=None, gen=None):
    """Inputs of `op` whose output has `shape` (gated ops get [..., 2 * shape[-1]])."""
    in_shape = (*shape[:-1], 2 * shape[-1]) if op.name.endswith("_and_mul") else tuple(shape)
    out = {}
    for x in op.inputs:
        if x.role == "column":
            w = torch.randn(in_shape[-1], generator=gen).to(weight_dtype or dtype).to(device)
            out[x.name] = w
        else:
            out[x.name] = data(in_shape, dtype, device, layout, gen)
    if op.name == "layernorm":  # a large mean exercises the variance's cancellation
        out["input"] = out["input"] + 3.0
    return out


def round_like(dtype):
    return lambda a: torch.from_numpy(np.asarray(a)).to(dtype).double().numpy()


def reference(op: Op, inputs: dict, attrs: dict):
    """Float64 reference outputs of `op` (a tuple, in the table's output order)."""
    args = [inputs[x.name].detach().double().cpu().numpy() for x in op.inputs]
    kw = dict(attrs)
    if op.in_place:
        kw["round_to"] = round_like(inputs[op.inputs[0].name].dtype)
    ref = op.reference()(*args, **kw)
    return ref if isinstance(ref, tuple) else (ref,)


def copy_layout(t: torch.Tensor, fill: float | None = None) -> torch.Tensor:
    """A copy of `t` (or a tensor of `fill`) at the same strides and storage offset, so with the
    same alignment of its data pointer: an op given it takes the same kernel path."""
    buf = torch.empty(t.untyped_storage().nbytes() // t.element_size(), dtype=t.dtype,
                      device=t.device)
    c = buf.as_strided(t.shape, t.stride(), t.storage_offset())
    return c.copy_(t) if fill is None else c.fill_(fill)


def call(op: Op, inputs: dict, attrs: dict):
    """Run the op through xkernels.torch on poisoned outputs; returns its outputs (a tuple)."""
    fn = getattr(xt, op.name)
    if op.in_place:
        # Given its outputs by keyword, the op writes them (poisoned first) and leaves its inputs
        # alone; in place, it writes the same bits over them.
        args = [inputs[x.name] for x in op.inputs]
        before = [a.clone() for a in args]
        outs = {o.name: copy_layout(inputs[op.aliases[o.name]], float("nan"))
                for o in op.outputs}
        assert fn(*args, **attrs, **outs) is None
        assert all(torch.equal(a, b) for a, b in zip(args, before)), "inputs written"
        ins = {k: copy_layout(v) if k in op.aliases.values() else v for k, v in inputs.items()}
        assert fn(*[ins[x.name] for x in op.inputs], **attrs) is None
        got = tuple(ins[op.aliases[o.name]] for o in op.outputs)
        for o, g in zip(op.outputs, got):
            assert torch.equal(outs[o.name], g), f"{o.name}: out of place != in place"
        return got
    (o,) = op.outputs
    like = inputs[o.like]
    out = torch.full(o.shape(tuple(like.shape)), float("nan"), dtype=like.dtype, device=like.device)
    res = fn(*[inputs[x.name] for x in op.inputs], **attrs, out=out)
    assert res is out
    return (out,)


def assert_close(op: Op, got, ref, dtype, what=""):
    rtol, atol = TOL[dtype]
    for g, r in zip(got, ref):
        g = g.detach().double().cpu().numpy()
        assert g.shape == r.shape, (op.name, g.shape, r.shape)
        finite = np.isfinite(r)
        assert np.isfinite(g[finite]).all(), f"{op.name}{what}: unwritten or non-finite outputs"
        err = np.abs(g - r)
        bad = err > atol + rtol * np.abs(r)
        assert not bad.any(), (
            f"{op.name}{what}: {bad.sum()} of {bad.size} elements off; max error "
            f"{err.max():.3g} at {np.unravel_index(err.argmax(), err.shape)}"
        )


def check(op_name, shape, dtype, device, layout="contiguous", weight_dtype=None, seed=0):
    op = OPS[op_name]
    gen = torch.Generator().manual_seed(seed)
    inputs = make_inputs(op, shape, dtype, device, layout, weight_dtype, gen)
    attrs = ATTRS.get(op_name, {})
    ref = reference(op, inputs, attrs)
    got = call(op, inputs, attrs)
    assert_close(op, got, ref, dtype, f" {tuple(shape)} {dtype} {layout}")
    return got
