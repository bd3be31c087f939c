"""The host path of every op against its float64 reference (runs everywhere; CI's matrix)."""

import pytest
import torch
from cases import DTYPES, check
from xkernels.ops import ROW_OPS

SHAPES = [
    ((1, 1), "contiguous"),
    ((1, 7), "contiguous"),
    ((3, 127), "contiguous"),
    ((2, 4097), "contiguous"),
    ((2, 3, 40), "contiguous"),
    ((5, 33), "strided"),
    ((4, 3, 16), "heads"),
    ((3, 24), "unaligned"),
]


@pytest.mark.parametrize("shape,layout", SHAPES, ids=[f"{s}-{l}" for s, l in SHAPES])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("op", sorted(ROW_OPS))
def test_host_matches_reference(op, dtype, shape, layout):
    check(op, shape, dtype, "cpu", layout)


@pytest.mark.parametrize("op", [n for n, o in ROW_OPS.items()
                                if any(x.role == "column" for x in o.inputs)])
def test_host_float32_weights_with_16bit_input(op):
    check(op, (3, 40), torch.bfloat16, "cpu", weight_dtype=torch.float32)


def test_host_softmax_rows_of_neg_inf():
    import xkernels.torch as xt

    x = torch.randn(4, 9)
    x[1] = float("-inf")
    x[2, ::2] = float("-inf")
    y = xt.softmax(x)
    assert torch.equal(y[1], torch.zeros(9))
    assert torch.allclose(y[2, 1::2].sum(), torch.tensor(1.0)) and (y[2, ::2] == 0).all()
    assert torch.allclose(y[[0, 3]], torch.softmax(x[[0, 3]], -1), atol=1e-6)


def test_host_long_row():
    check("softmax", (1, 262144), torch.float32, "cpu")
    check("rmsnorm", (1, 262144), torch.bfloat16, "cpu")
