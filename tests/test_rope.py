"""RoPE and the fused QK norm + RoPE against their float64 references (pkg/xkernels/reference.py):
the host path here, the CUDA kernel on a GPU (the same cases, plus larger ones).

A case is (tokens, num_qo_heads, num_kv_heads, head_dim, attributes), on q and k laid out as
views of one packed QKV tensor [tokens, (Hq + 2 Hk) * head_dim] (the layout a fused QKV
projection leaves: token stride != heads * head_dim), as separate contiguous tensors, with two
leading dims [2, tokens / 2, heads, head_dim], or off by one element (no 16-byte vectors). Each
call runs twice: into poisoned (NaN) outputs given by keyword, which must leave q and k alone,
then in place, which must give the same bits and leave the rest of the packed tensor (V) alone.

Tolerance: |out - ref| <= rtol |ref| + atol * max|ref|. rtol is two half-ulps of the output
dtype (one rounding of the result: 2^-8 bf16, 2^-11 fp16; fp32: the float arithmetic). atol
covers the float arithmetic on values of the tensor's scale, near-cancelling pairs included:
cos and sin rounded to float (6e-8), the angle (the kernel forms pos * inv_freq exactly in two
floats and reduces it modulo 2 pi exactly: about 2e-7 rad at any position below 2^24; the host
uses double angles), and, for the QK norm, the float sum of squares and rsqrt (1e-6 relative).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import xkernels.torch as xt
from conftest import gpu
from xkernels import reference

DTYPES = [torch.float16, torch.bfloat16, torch.float32]
RTOL = {torch.float32: 1e-5, torch.float16: 1e-3, torch.bfloat16: 8e-3}
ATOL = 1e-5  # times max |ref|

LLAMA3 = {"theta": 500000.0, "rope_scale": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position": 8192}

# (tokens, num_qo_heads, num_kv_heads, head_dim, attributes)
HOST_CASES = [
    (1, 32, 8, 128, {}),
    (7, 4, 2, 64, {"interleaved": True}),
    (1000, 8, 2, 128, LLAMA3),
    (7, 4, 4, 256, {"rotary_dim": 64}),
    (7, 3, 1, 34, {}),  # head_dim / 2 odd: single elements
    (7, 2, 1, 34, {"interleaved": True, "rotary_dim": 18}),
    (1000, 6, 2, 64, {"rotary_dim": 32, "interleaved": True, "theta": 1e6}),
    (7, 2, 2, 512, {}),
    (7, 4, 1, 80, {"rotary_dim": 40}),  # tail of 40: five 8-element vectors
]
GPU_CASES = HOST_CASES + [
    (128, 32, 8, 128, {}),
    (4096, 32, 8, 128, LLAMA3),
    (4096, 16, 8, 64, {"interleaved": True}),
    (1000, 16, 16, 256, {}),
    (333, 40, 8, 128, {"rotary_dim": 64}),
    (1000, 1, 1, 512, {"interleaved": True}),
    (7, 64, 4, 256, {"rotary_dim": 128, "interleaved": True}),
]
LAYOUTS = ["packed", "contiguous", "batched", "unaligned"]


def case_id(c) -> str:
    t, hq, hk, d, kw = c
    extra = "-".join(f"{k}={v}" for k, v in kw.items() if k != "low_freq_factor")
    return f"t{t}-h{hq}x{hk}-d{d}" + (f"-{extra}" if extra else "")


def make(t, hq, hk, d, dtype, device, layout, seed=0):
    """(qkv, q, k): q and k views of qkv as `layout` says; qkv the whole buffer they live in."""
    gen = torch.Generator().manual_seed(seed)
    width = (hq + 2 * hk) * d
    if layout == "contiguous":
        q = torch.randn(t, hq, d, generator=gen).to(dtype).to(device)
        k = torch.randn(t, hk, d, generator=gen).to(dtype).to(device)
        return None, q, k
    if layout == "unaligned":
        buf = torch.randn(t * width + 1, generator=gen).to(dtype).to(device)
        qkv = buf[1:].view(t, width)
    else:
        qkv = torch.randn(t, width, generator=gen).to(dtype).to(device)
    q = qkv[:, : hq * d].view(t, hq, d)
    k = qkv[:, hq * d: (hq + hk) * d].view(t, hk, d)
    if layout == "batched" and t % 2 == 0:
        q = q.view(2, t // 2, hq, d)
        k = k.view(2, t // 2, hk, d)
    return (buf if layout == "unaligned" else qkv), q, k


def positions_for(q, large: bool, seed=1):
    gen = torch.Generator().manual_seed(seed)
    hi = 500_000 if large else 4096
    return torch.randint(0, hi, q.shape[:-2], generator=gen, dtype=torch.int32).to(q.device)


def weights(d, dtype, device, seed=2):
    gen = torch.Generator().manual_seed(seed)
    return [(1.0 + 0.5 * torch.randn(d, generator=gen)).to(dtype).to(device) for _ in range(2)]


def np64(t):
    return t.detach().double().cpu().numpy()


def assert_close(got, ref, dtype, what):
    g = np64(got)
    assert g.shape == ref.shape, (what, g.shape, ref.shape)
    assert np.isfinite(g).all(), f"{what}: unwritten or non-finite outputs"
    err = np.abs(g - ref)
    bound = RTOL[dtype] * np.abs(ref) + ATOL * max(np.abs(ref).max(), 1.0)
    bad = err > bound
    assert not bad.any(), (f"{what}: {bad.sum()} of {bad.size} off; max error {err.max():.3g} at "
                           f"{np.unravel_index(err.argmax(), err.shape)}")


def like_poisoned(t):
    """A NaN tensor of t's shape at t's strides and storage offset (the same alignment)."""
    buf = torch.full((t.untyped_storage().nbytes() // t.element_size(),), float("nan"),
                     dtype=t.dtype, device=t.device)
    return buf.as_strided(t.shape, t.stride(), t.storage_offset())


def run_case(op, case, dtype, device, layout, large, weight_dtype=None):
    t, hq, hk, d, kw = case
    qkv, q, k = make(t, hq, hk, d, dtype, device, layout)
    pos = positions_for(q, large)
    ws = weights(d, weight_dtype or dtype, device) if op == "qk_norm_rope" else []
    fn = getattr(xt, op)
    ref = getattr(reference, op)(np64(q), np64(k), *map(np64, ws), pos.cpu().numpy(), **kw)
    what = f"{op} {case_id(case)} {dtype} {layout} large={large}"

    # into given outputs: q and k untouched
    q0, k0 = q.clone(), k.clone()
    q_out, k_out = like_poisoned(q), like_poisoned(k)
    assert fn(q, k, *ws, pos, **kw, q_out=q_out, k_out=k_out) is None
    assert torch.equal(q, q0) and torch.equal(k, k0), f"{what}: inputs written"
    assert_close(q_out, ref[0], dtype, what + " q_out")
    assert_close(k_out, ref[1], dtype, what + " k_out")

    # in place: the same bits, nothing else of the packed buffer touched
    before = qkv.clone() if qkv is not None else None
    assert fn(q, k, *ws, pos, **kw) is None
    assert torch.equal(q, q_out), f"{what}: in place != out of place (q)"
    assert torch.equal(k, k_out), f"{what}: in place != out of place (k)"
    if qkv is not None:
        grid = (lambda b: b[1:].view(t, -1)) if layout == "unaligned" else (lambda b: b)
        rest = torch.ones(grid(qkv).shape, dtype=torch.bool, device=device)
        rest[:, : (hq + hk) * d] = False  # V, after q and k
        assert torch.equal(grid(qkv)[rest], grid(before)[rest]), f"{what}: V written"
        if layout == "unaligned":
            assert torch.equal(qkv[:1], before[:1]), f"{what}: the element before q written"


OPS = ["apply_rope", "qk_norm_rope"]


@pytest.mark.parametrize("large", [False, True], ids=["pos4096", "pos500k"])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", HOST_CASES, ids=case_id)
@pytest.mark.parametrize("op", OPS)
def test_host(op, case, dtype, layout, large):
    run_case(op, case, dtype, "cpu", layout, large)


@gpu
@pytest.mark.parametrize("large", [False, True], ids=["pos4096", "pos500k"])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", GPU_CASES, ids=case_id)
@pytest.mark.parametrize("op", OPS)
def test_gpu(op, case, dtype, layout, large):
    run_case(op, case, dtype, "cuda", layout, large)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=gpu)])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_qk_norm_float32_weights(device, dtype):
    run_case("qk_norm_rope", (7, 8, 2, 128, {}), dtype, device, "packed", True, torch.float32)


@gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_gpu_matches_host(dtype):
    """The kernel and the host implementation agree to the tolerance on the same inputs (a
    Llama 3 8B layer's QKV, 333 tokens at positions up to 500000)."""
    for op in OPS:
        outs = []
        for device in ("cpu", "cuda"):
            _, q, k = make(333, 32, 8, 128, dtype, device, "packed")
            pos = positions_for(q, True)
            ws = weights(128, dtype, device) if op == "qk_norm_rope" else []
            getattr(xt, op)(q, k, *ws, pos, **LLAMA3)
            outs.append((q.cpu(), k.cpu()))
        for c, g in zip(*outs):
            assert_close(g, np64(c), dtype, f"{op} gpu vs host")


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=gpu)])
def test_empty_and_position_zero(device):
    q = torch.randn(0, 4, 64, device=device)
    k = torch.randn(0, 2, 64, device=device)
    xt.apply_rope(q, k, torch.zeros(0, dtype=torch.int32, device=device))
    q = torch.randn(3, 4, 64, device=device)
    k = torch.randn(3, 2, 64, device=device)
    q0, k0 = q.clone(), k.clone()
    xt.apply_rope(q, k, torch.zeros(3, dtype=torch.int32, device=device))
    assert torch.equal(q, q0) and torch.equal(k, k0)  # angle 0: cos 1, sin 0 exactly


def test_reference_llama3_frequencies():
    """reference.rope_inv_freq against Hugging Face's _compute_llama3_parameters, written out."""
    import math

    d, theta, factor, low, high, old = 128, 500000.0, 8.0, 1.0, 4.0, 8192
    base = 1.0 / theta ** (np.arange(0, d, 2) / d)
    want = []
    for f in base:
        wavelen = 2 * math.pi / f
        if wavelen < old / high:
            want.append(f)
        elif wavelen > old / low:
            want.append(f / factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            want.append((1 - smooth) * f / factor + smooth * f)
    got = reference.rope_inv_freq(d, theta, factor, low, high, old)
    np.testing.assert_allclose(got, want, rtol=1e-15)
    np.testing.assert_array_equal(reference.rope_inv_freq(d, theta), base)


# ------------------------------------------------------------------ bad inputs name the argument


def _args(**over):
    q = torch.randn(5, 4, 64)
    k = torch.randn(5, 2, 64)
    pos = torch.arange(5, dtype=torch.int32)
    args = {"q": q, "k": k, "positions": pos} | over
    return args


BAD = [
    ({"q": torch.randn(5, 4, 64).to(torch.int32)}, {}, TypeError,
     "apply_rope: q must be float16, bfloat16 or float32, got int32"),
    ({"k": torch.randn(5, 2, 64, dtype=torch.float16)}, {}, TypeError,
     "apply_rope: k must have q's dtype float32, got float16"),
    ({"positions": torch.arange(5)}, {}, TypeError, "apply_rope: positions must be int32, got int64"),
    ({"positions": torch.arange(4, dtype=torch.int32)}, {}, ValueError,
     r"apply_rope: positions must have shape \(5,\) \(one per token"),
    ({"k": torch.randn(6, 2, 64)}, {}, ValueError, "apply_rope: k must have q's leading dimensions"),
    ({"k": torch.randn(5, 2, 32)}, {}, ValueError,
     "apply_rope: k must have q's leading dimensions and head_dim"),
    ({"q": torch.randn(5, 4, 63), "k": torch.randn(5, 2, 63)}, {}, ValueError,
     r"apply_rope: head_dim \(q's last dimension\) must be even, from 2 to 512, got 63"),
    ({"q": torch.randn(5, 4, 514), "k": torch.randn(5, 2, 514)}, {}, ValueError,
     "must be even, from 2 to 512, got 514"),
    ({}, {"rotary_dim": 96}, ValueError,
     r"apply_rope: rotary_dim must be even and at most head_dim \(64\), or 0 for head_dim; got 96"),
    ({}, {"rotary_dim": 33}, ValueError, "rotary_dim must be even"),
    ({}, {"theta": 0.0}, ValueError, "apply_rope: theta must be > 0"),
    ({}, {"rope_scale": 8.0, "high_freq_factor": 1.0}, ValueError,
     "high_freq_factor finite and above it"),
    ({"q": torch.randn(5, 64)}, {}, ValueError,
     r"apply_rope: q must be at least 3-D \[..., tokens, heads, head_dim\]"),
    ({"q": torch.randn(5, 64, 4).transpose(1, 2)}, {}, ValueError,
     "apply_rope: q must be contiguous in its last dimension"),
]


@pytest.mark.parametrize("over,attrs,exc,msg", BAD)
def test_bad_input_names_the_argument(over, attrs, exc, msg):
    a = _args(**over)
    with pytest.raises(exc, match=msg):
        xt.apply_rope(a["q"], a["k"], a["positions"], **attrs)


def test_bad_norm_weights():
    a = _args()
    w = torch.ones(64)
    with pytest.raises(ValueError, match=r"qk_norm_rope: k_weight must have shape \(64,\) "
                                         r"\(head_dim\), got \(32,\)"):
        xt.qk_norm_rope(a["q"], a["k"], w, torch.ones(32), a["positions"])
    q16, k16 = a["q"].half(), a["k"].half()
    with pytest.raises(TypeError, match="qk_norm_rope: q_weight must be float16 .q's dtype. or "
                                        "float32, got bfloat16"):
        xt.qk_norm_rope(q16, k16, w.bfloat16(), w.half(), a["positions"])
    with pytest.raises(TypeError, match="qk_norm_rope: k_weight must have q_weight's dtype"):
        xt.qk_norm_rope(q16, k16, w, w.half(), a["positions"])
    with pytest.raises(ValueError, match="qk_norm_rope: eps must be >= 0"):
        xt.qk_norm_rope(a["q"], a["k"], w, w, a["positions"], eps=-1.0)


@gpu
def test_gpu_device_mismatch():
    a = _args()
    with pytest.raises(ValueError, match="apply_rope: positions must be on q's device cuda:0, "
                                         "got cpu"):
        xt.apply_rope(a["q"].cuda(), a["k"].cuda(), a["positions"])
    with pytest.raises(ValueError, match="apply_rope: k must be on q's device"):
        xt.apply_rope(a["q"].cuda(), a["k"], a["positions"].cuda())
