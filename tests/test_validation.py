"""Bad input gets a typed exception naming the argument, the expectation and what came."""

import pytest
import torch
import xkernels.torch as xt
from xkernels import jit
from xkernels.ops import ROW_OPS


def raises(exc, *words):
    """pytest.raises whose message must contain every word."""
    ctx = pytest.raises(exc)

    class _Check:
        def __enter__(self):
            self.info = ctx.__enter__()
            return self.info

        def __exit__(self, *a):
            ok = ctx.__exit__(*a)
            msg = str(self.info.value)
            for w in words:
                assert w in msg, f"{w!r} not in {msg!r}"
            return ok

    return _Check()


x = torch.randn(4, 8)
w = torch.randn(8)


@pytest.mark.parametrize("op", sorted(ROW_OPS))
def test_integer_input_is_a_type_error(op):
    fn = getattr(xt, op)
    args = [torch.ones(4, 8, dtype=torch.int32) if i.role == "data" else w
            for i in ROW_OPS[op].inputs]
    first = ROW_OPS[op].inputs[0].name
    with raises(TypeError, op, first, "float16, bfloat16 or float32", "int32"):
        fn(*args)


def test_weight_shape_and_dtype():
    with raises(ValueError, "rmsnorm", "weight", "(8,)", "(7,)"):
        xt.rmsnorm(x, torch.randn(7))
    with raises(TypeError, "rmsnorm", "weight", "float16"):
        xt.rmsnorm(x.bfloat16(), w.half())
    with raises(ValueError, "layernorm", "bias", "(8,)", "(9,)"):
        xt.layernorm(x, w, torch.randn(9))
    with raises(ValueError, "weight", "contiguous"):
        xt.rmsnorm(x, torch.randn(16)[::2])


def test_out_shape_and_dtype():
    with raises(ValueError, "softmax", "out", "(4, 8)", "(4, 7)"):
        xt.softmax(x, out=torch.empty(4, 7))
    with raises(TypeError, "softmax", "out", "float32", "float16"):
        xt.softmax(x, out=torch.empty(4, 8, dtype=torch.float16))
    with raises(ValueError, "silu_and_mul", "out", "(4, 4)"):
        xt.silu_and_mul(x, out=torch.empty(4, 8))


def test_layouts():
    with raises(ValueError, "rmsnorm", "input", "contiguous in its last dimension"):
        xt.rmsnorm(torch.randn(8, 4).t(), w)
    # three strided groups of leading dimensions cannot be addressed by two row strides
    y = torch.randn(4, 5, 6, 8)[:, ::2, ::2, :]
    with raises(ValueError, "rmsnorm", "input", "do not collapse"):
        xt.rmsnorm(y, w)
    with raises(ValueError, "rmsnorm", "input", "at least 1 dimension"):
        xt.rmsnorm(torch.tensor(1.0), torch.randn(1))


def test_shapes_that_must_agree():
    with raises(ValueError, "silu_and_mul", "even", "7"):
        xt.silu_and_mul(torch.randn(3, 7))
    with raises(ValueError, "mul_add", "c", "(4, 8)", "(4, 1)"):
        xt.mul_add(x, x, torch.randn(4, 1))
    with raises(ValueError, "fused_add_rmsnorm", "residual", "(4, 8)"):
        xt.fused_add_rmsnorm(x.clone(), torch.randn(4, 9), w)
    with raises(TypeError, "fused_add_rmsnorm", "residual", "float32", "bfloat16"):
        xt.fused_add_rmsnorm(x.clone(), x.bfloat16(), w)


def test_scalars():
    with raises(ValueError, "approximate", "tanh", "'fast'"):
        xt.gelu(x, approximate="fast")
    fn = jit.load("activation")["gelu"]  # the exported function checks too
    with raises(ValueError, "gelu", "approximate", "5"):
        fn(torch.empty_like(x), x, 5)
    with raises(ValueError, "rmsnorm", "eps", ">= 0"):
        xt.rmsnorm(x, w, eps=-1.0)
    with raises(ValueError, "softmax", "scale", "finite"):
        xt.softmax(x, scale=float("inf"))


@pytest.mark.parametrize("op", sorted(ROW_OPS))
def test_empty_tensors_are_a_no_op(op):
    o = ROW_OPS[op]
    width = 0 if o.name.endswith("_and_mul") else 8
    args = [torch.empty(0, width if width else 0) if i.role == "data" else torch.randn(width)
            for i in o.inputs]
    res = getattr(xt, op)(*args)
    if not o.in_place:
        assert res.numel() == 0


def test_errors_leave_outputs_untouched():
    out = torch.full((4, 8), 7.0)
    with pytest.raises(ValueError):
        xt.rmsnorm(x, torch.randn(7), out=out)
    assert (out == 7.0).all()


def test_gradients_are_refused_not_dropped():
    with raises(NotImplementedError, "xkernels.torch.rmsnorm", "backward"):
        xt.rmsnorm(x, torch.randn(8, requires_grad=True))
    with torch.no_grad():  # inference with parameters that require grad is fine
        xt.rmsnorm(x, torch.randn(8, requires_grad=True))
