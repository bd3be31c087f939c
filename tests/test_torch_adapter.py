"""xkernels.torch: registered custom ops, torch.compile, out=, in place; on the CPU (host path)."""

import pytest
import torch
import xkernels.torch as xt
from cases import make_inputs
from xkernels.ops import OPS, ROW_OPS


def _op_args(name, device="cpu", dtype=torch.float32):
    """Arguments of torch.ops.xkernels.<name> (destination first unless in place)."""
    op = OPS[name]
    gen = torch.Generator().manual_seed(1)
    ins = make_inputs(op, (3, 16), dtype, device, gen=gen)
    args = [ins[i.name] for i in op.inputs]
    attrs = [a.default for a in op.attrs]
    if op.in_place:
        return args + attrs
    (o,) = op.outputs
    like = ins[o.like]
    out = torch.empty(o.shape(tuple(like.shape)), dtype=like.dtype, device=device)
    return [out, *args, *attrs]


@pytest.mark.parametrize("op", sorted(ROW_OPS))
def test_opcheck(op):
    torch.library.opcheck(getattr(torch.ops.xkernels, op).default, _op_args(op))
    if OPS[op].in_place:  # and its destination-passing form
        args = _op_args(op)
        outs = [torch.empty_like(args[OPS[op].inputs.index(next(
            x for x in OPS[op].inputs if x.name == OPS[op].aliases[o.name]))])
            for o in OPS[op].outputs]
        torch.library.opcheck(getattr(torch.ops.xkernels, f"{op}_out").default, outs + args)


def test_every_op_is_exported_and_adapted():
    from xkernels import jit

    for name, op in OPS.items():
        assert callable(getattr(xt, name)), name
        assert hasattr(torch.ops.xkernels, name), name
        assert jit.load(op.module)[name] is not None
        if op.workspace:  # and its planner, in the same module
            assert jit.load(op.module)[op.plan_name] is not None
            assert callable(jit.FUNCTIONS[op.plan_name])


def test_dispatcher_path_matches_fast_path():
    for name, op in ROW_OPS.items():
        if op.in_place:
            continue
        args = _op_args(name)
        getattr(torch.ops.xkernels, name)(*args)
        fast = getattr(xt, name)(*args[1:])
        assert torch.equal(args[0], fast), name


def test_in_place_fused_add_rmsnorm():
    x, r, w = torch.randn(5, 32), torch.randn(5, 32), torch.randn(32)
    x0, r0 = x.clone(), r.clone()
    assert xt.fused_add_rmsnorm(x, r, w) is None
    assert torch.allclose(r, x0 + r0)
    assert torch.allclose(x, xt.rmsnorm(x0 + r0, w), atol=1e-6)


def test_fused_add_rmsnorm_out_of_place():
    x, r, w = torch.randn(5, 32), torch.randn(5, 32), torch.randn(32)
    x0, r0 = x.clone(), r.clone()
    out, res = torch.full_like(x, float("nan")), torch.full_like(x, float("nan"))
    assert xt.fused_add_rmsnorm(x, r, w, out=out, residual_out=res) is None
    assert torch.equal(x, x0) and torch.equal(r, r0)
    assert torch.allclose(res, x0 + r0)
    assert torch.allclose(out, xt.rmsnorm(x0 + r0, w), atol=1e-6)
    with pytest.raises(TypeError, match="fused_add_rmsnorm: out, residual_out are given together"
                       ".*missing residual_out"):
        xt.fused_add_rmsnorm(x, r, w, out=out)
    with pytest.raises(ValueError, match="residual_out"):
        xt.fused_add_rmsnorm(x, r, w, out=out, residual_out=res[:, :16])

    def layer(x, r, w, out, res):
        xt.fused_add_rmsnorm(x, r, w, out=out, residual_out=res)
        return out * 2

    o2 = torch.empty_like(x)
    got = torch.compile(layer, fullgraph=True, backend="aot_eager")(x, r, w, o2, torch.empty_like(x))
    assert torch.equal(got, out * 2) and torch.equal(x, x0)


def test_out_is_written_and_returned():
    x = torch.randn(3, 40)
    out = torch.full_like(x, float("nan"))
    assert xt.softmax(x, out=out) is out
    assert torch.allclose(out, torch.softmax(x, -1), atol=1e-6)
    # in place through out=
    y = x.clone()
    xt.silu(y, out=y)
    assert torch.allclose(y, torch.nn.functional.silu(x), atol=1e-6)


def test_allocated_out_is_contiguous():
    # Whatever the input's layout (contiguous, dense permuted, padded rows).
    base = torch.randn(4, 6, 40)
    w = torch.randn(40)
    for x, strides in ((base, (240, 40, 1)), (base.transpose(0, 1), (160, 40, 1)),
                       (base[:, :, :33], (198, 33, 1))):
        got = xt.rmsnorm(x, w[: x.shape[-1]])
        want = torch.nn.functional.rms_norm(x, (x.shape[-1],), w[: x.shape[-1]], 1e-6)
        assert got.stride() == strides
        assert torch.allclose(got, want, atol=1e-5)


def test_torch_compile_fullgraph():
    def layer(x, r, w, b):
        xt.fused_add_rmsnorm(x, r, w)
        h = xt.silu_and_mul(torch.cat([x, x * 2], -1))
        h = xt.add_bias_gelu(h, b, approximate="tanh")
        return xt.softmax(xt.rmsnorm(h, w), scale=0.5), r

    args = [torch.randn(4, 64), torch.randn(4, 64), torch.randn(64), torch.randn(64)]
    eager = layer(*[a.clone() for a in args])
    compiled = torch.compile(layer, fullgraph=True, backend="aot_eager")(*[a.clone() for a in args])
    for e, c in zip(eager, compiled):
        assert torch.allclose(e, c, atol=1e-5)
