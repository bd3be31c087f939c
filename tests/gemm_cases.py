"""GEMM test cases: input builders (16-bit operands rounded from normal draws; e4m3 operands drawn
as e4m3 values, never zero; float32 scales of every kind and shape; strided rows, leading
dimensions, strided outputs), calls on outputs poisoned with NaN, the float64 references
(xkernels.reference) and the comparison with its tolerances. Shared by tests/test_gemm.py (the
numbers) and tests/test_gemm_adapters.py (the adapters' contracts).

Tolerances: |got - ref| <= rtol * |ref| + atol elementwise, and ||got - ref|| / ||ref|| <= rtol +
atol / rms(ref) over the whole output, where
- rtol is the output's unit roundoff: the result is rounded once, to nearest, from a float32 value
  (bias added in float32 first): 2^-8 for bfloat16 (8 significant bits), 2^-11 for float16, 2^-24
  for float32. Inputs are exact in float64, so nothing else is rounded before the products (e4m3
  products are exact in float32; a scale times an e4m3 value rounds by 2^-24 at most).
- atol bounds the float32 accumulation over k, relative to the output's scale sqrt(k) max|a|
  max|b| (the rms of a sum of k products of that size; the sums partial along the way are of that
  size too): atol = acc * sqrt(k) * max|a * a_scale| * max|b * b_scale| with
  - host: acc = 4 * 2^-24 * sqrt(k): float32 adds, each off by half an ulp of a partial sum, as a
    random walk over k adds (kLanes partial sums make it shorter still);
  - GPU, 16-bit: acc = 4 * 2^-22 * sqrt(k): the same with 4x slack for the tensor cores' adder
    (float32 accumulators, products summed in a different order) and split-K's partial sums;
  - GPU, e4m3: acc = (k / 32 + 1) * 2^-14: H100's FP8 tensor-core accumulation keeps about 14 bits
    (DeepSeek-V3 report, 3.3.2) each time a k32 step adds into the accumulator, taken as biased (the
    worst case) rather than a random walk; block-scaled GEMMs promote every 128 to float32 and do
    better.
  Using max|a| max|b| (about 10x the rms products of normal data) keeps this a bound, not an
  estimate: a missing or doubled k block, a wrong scale or a wrong row moves outputs by O(1) of
  their scale, and fails it.
- The relative-norm bound then follows from the elementwise one; it is checked as well because it
  names the size of an error spread over every output.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, field

import numpy as np
import torch
import xkernels.torch as xt
from xkernels import reference as R
from xkernels.ops import OPS

DTYPES16 = [torch.float16, torch.bfloat16]
F8 = torch.float8_e4m3fn
UNIT = {torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11, torch.float32: 2.0 ** -24}
OUT_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def dtype_id(dtype) -> str:
    return str(dtype).replace("torch.", "")


def seed_of(*key) -> int:
    """A seed per case: fresh data for every case, the same from run to run."""
    return zlib.crc32(repr(key).encode())


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def randn(shape, dtype, device, gen) -> torch.Tensor:
    """Normal values rounded to `dtype` (drawn on the host, so the same on every device)."""
    return torch.randn(tuple(shape), generator=gen).to(dtype).to(device)


def e4m3(shape, device, gen) -> torch.Tensor:
    """Random e4m3 values: random signs, exponents 2^-2..2^2, mantissas; never zero or NaN."""
    sign = torch.randint(0, 2, tuple(shape), generator=gen) << 7
    exp = torch.randint(5, 10, tuple(shape), generator=gen) << 3  # biased exponent 5..9
    man = torch.randint(0, 8, tuple(shape), generator=gen)
    return (sign | exp | man).to(torch.uint8).view(F8).to(device)


def scales(shape, device, gen) -> torch.Tensor:
    """Random positive float32 scales in [2^-6, 2^-2) (never 1: a missing scale shows)."""
    return torch.exp2(torch.rand(tuple(shape), generator=gen) * 4 - 6).to(device)


def strided(t: torch.Tensor, pad: int = 16, offset: int = 8) -> torch.Tensor:
    """t's values as a view of a wider tensor's columns [offset, offset + cols) (the padding zero):
    the last dimension contiguous, a row pitch of cols + pad. offset 8 keeps 16-bit (offset 16:
    e4m3) views of a fresh CUDA tensor 16-byte aligned."""
    wide = torch.zeros((*t.shape[:-1], t.shape[-1] + pad), dtype=t.dtype, device=t.device)
    view = wide[..., offset:offset + t.shape[-1]]
    view.copy_(t)
    return view


@dataclass
class Case:
    op: str
    inputs: dict[str, torch.Tensor | None]
    attrs: dict = field(default_factory=dict)
    desc: str = ""

    @property
    def spec(self):
        return OPS[self.op]

    def args(self) -> list:
        return [self.inputs[x.name] for x in self.spec.inputs]

    @property
    def device(self):
        return self.inputs["a"].device

    @property
    def k(self) -> int:
        return self.inputs["a"].shape[-1]

    @property
    def out_dtype(self):
        d = self.attrs.get("out_dtype", OPS[self.op].attrs[0].default)
        return self.inputs["a"].dtype if d is None else OUT_DTYPES[d]

    @property
    def out_shape(self) -> tuple:
        a, b = self.inputs["a"], self.inputs["b"]
        n = b.shape[1] if self.attrs.get("b_layout") == "KN" else b.shape[0]
        return (*a.shape[:-1], n // 2 if self.op == "gemm_gated" else n)


def gemm_case(m, n, k, dtype, device, seed, *, bias=None, out_dtype=None, b_layout="NK",
              layout="contiguous", num_splits=0, kernel="auto") -> Case:
    """gemm: a [m, k] ("lead": [2, m, k]; "strided": a view of a wider tensor; "lead-strided":
    both), b [n, k] or [k, n] ("KN"), bias None, "a" (a's dtype) or "float32"."""
    gen = _gen(seed)
    a = randn((2, m, k) if layout.startswith("lead") else (m, k), dtype, device, gen)
    b = randn((k, n) if b_layout == "KN" else (n, k), dtype, device, gen)
    if layout.endswith("strided"):
        a, b = strided(a), strided(b, pad=24)
    inputs = {"a": a, "b": b, "bias": None}
    if bias is not None:
        inputs["bias"] = randn((n,), dtype if bias == "a" else torch.float32, device, gen)
    attrs = {"out_dtype": out_dtype, "b_layout": b_layout, "num_splits": num_splits,
             "kernel": kernel}
    return Case("gemm", inputs, attrs, f"m{m} n{n} k{k} {layout} bias={bias}")


def gated_case(m, n, k, dtype, device, seed, *, act="silu", bias=None, out_dtype=None,
               layout="contiguous", num_splits=0, kernel="auto") -> Case:
    """gemm_gated: a [m, k] (layouts as gemm_case's), b [2n, k] (gate rows, then up rows), bias
    None, "a" or "float32" of 2n; out [m, n]."""
    gen = _gen(seed)
    a = randn((2, m, k) if layout.startswith("lead") else (m, k), dtype, device, gen)
    b = randn((2 * n, k), dtype, device, gen)
    if layout.endswith("strided"):
        a, b = strided(a), strided(b, pad=24)
    inputs = {"a": a, "b": b, "bias": None}
    if bias is not None:
        inputs["bias"] = randn((2 * n,), dtype if bias == "a" else torch.float32, device, gen)
    attrs = {"act": act, "out_dtype": out_dtype, "num_splits": num_splits, "kernel": kernel}
    return Case("gemm_gated", inputs, attrs, f"m{m} n{n} k{k} {act} {layout} bias={bias}")


# a_scale / b_scale kinds -> the shapes they are given in (m: a's rows, n: b's rows)
def a_scale_shape(kind: str, a_shape, k: int) -> tuple:
    m, kb = math.prod(a_shape[:-1]), -(-k // 128)
    return {"tensor": (), "tensor1": (1,), "row": (m,), "row1": (m, 1),
            "row-lead": (*a_shape[:-1], 1), "block": (m, kb),
            "block-lead": (*a_shape[:-1], kb)}[kind]


def b_scale_shape(kind: str, n: int, k: int) -> tuple:
    return {"tensor": (), "tensor1": (1,), "row": (n,), "row1": (n, 1),
            "block": (-(-n // 128), -(-k // 128))}[kind]


def fp8_case(m, n, k, device, seed, *, a_scale="row", b_scale="tensor", bias=None,
             out_dtype="bfloat16", layout="contiguous", num_splits=0, kernel="auto") -> Case:
    """gemm_fp8: e4m3 a [m, k] ("lead": [2, m, k]; "strided"), b [n, k], scales of the named
    kinds (a_scale_shape, b_scale_shape), bias None, "out" (out's dtype) or "float32"."""
    gen = _gen(seed)
    a = e4m3((2, m, k) if layout.startswith("lead") else (m, k), device, gen)
    b = e4m3((n, k), device, gen)
    if layout.endswith("strided"):
        a, b = strided(a, pad=32, offset=16), strided(b, pad=48, offset=16)
    inputs = {"a": a, "b": b,
              "a_scale": scales(a_scale_shape(a_scale, a.shape, k), device, gen),
              "b_scale": scales(b_scale_shape(b_scale, n, k), device, gen), "bias": None}
    if bias is not None:
        bt = OUT_DTYPES[out_dtype] if bias == "out" else torch.float32
        inputs["bias"] = randn((n,), bt, device, gen)
    attrs = {"out_dtype": out_dtype, "num_splits": num_splits, "kernel": kernel}
    return Case("gemm_fp8", inputs, attrs,
                f"m{m} n{n} k{k} {layout} scales {a_scale}/{b_scale} bias={bias}")


# ------------------------------------------------------------------ references, calls


def as_float64(t: torch.Tensor | None) -> np.ndarray | None:
    return None if t is None else t.detach().to(torch.float64).cpu().numpy()


def reference(case: Case) -> np.ndarray:
    """The float64 reference of a gemm, gemm_gated or gemm_fp8 case (NumPy)."""
    attrs = {k: v for k, v in case.attrs.items() if k in ("b_layout", "act")}
    return getattr(R, case.op)(*[as_float64(t) for t in case.args()], **attrs)


def poisoned(shape, dtype, device, layout="contiguous"):
    """(NaN tensor, its backing buffer): contiguous, or "strided": a view of a wider buffer."""
    if layout == "contiguous":
        t = torch.full(tuple(shape), float("nan"), dtype=dtype, device=device)
        return t, t
    buf = torch.full((*shape[:-1], shape[-1] + 16), float("nan"), dtype=dtype, device=device)
    return buf[..., 8:8 + shape[-1]], buf


def call(case: Case, out_layout: str = "contiguous", check_inputs: bool = True) -> torch.Tensor:
    """The op through xkernels.torch into an output poisoned with NaN (out_layout "strided": a
    view of a padded buffer, whose padding must stay NaN); the inputs checked unchanged."""
    args = case.args()
    before = [None if a is None else a.clone() for a in args] if check_inputs else None
    out, buf = poisoned(case.out_shape, case.out_dtype, case.device, out_layout)
    res = getattr(xt, case.op)(*args, **case.attrs, out=out)
    assert res is out
    if out_layout != "contiguous":
        assert buf[..., :8].isnan().all() and buf[..., 8 + out.shape[-1]:].isnan().all(), \
            f"{case.op}: wrote past the view of a strided output"
    if check_inputs:
        for x, a, b in zip(case.spec.inputs, args, before):
            assert a is None or torch.equal(bits(a), bits(b)), f"{case.op}: {x.name} was written"
    return out


def tolerance(case: Case) -> tuple[float, float]:
    """(rtol, atol) of the case's output: see the module docstring."""
    k = case.k
    a, b = as_float64(case.inputs["a"]), as_float64(case.inputs["b"])
    if case.op == "gemm_fp8":  # the operands' effective values: times their scales
        sa, sb = (float(case.inputs[s].max()) for s in ("a_scale", "b_scale"))
    else:
        sa = sb = 1.0
    size = math.sqrt(max(k, 1)) * np.abs(a).max(initial=0) * sa * np.abs(b).max(initial=0) * sb
    if case.device.type != "cuda":
        acc = 4 * 2.0 ** -24 * math.sqrt(max(k, 1))
    elif case.op == "gemm_fp8":
        acc = (k / 32 + 1) * 2.0 ** -14
    else:
        acc = 4 * 2.0 ** -22 * math.sqrt(max(k, 1))
    if case.op == "gemm_gated":
        # act(g) * u from g and u each off by e = acc * size: off by about |act'(g)| |u| e +
        # |act(g)| e, with |act'| <= 1.13 (gelu's largest slope; silu's 1.10) and |act(g)| <= |g|
        e = acc * size
        prod = R.gemm(*[as_float64(case.inputs[x]) for x in ("a", "b", "bias")])
        g, u = np.split(np.abs(prod), 2, axis=-1)
        return UNIT[case.out_dtype], e * (1.13 * u.max(initial=0) + g.max(initial=0) + e)
    return UNIT[case.out_dtype], acc * size


def assert_close(got: torch.Tensor, ref: np.ndarray, rtol: float, atol: float, what: str = ""):
    g = got.detach().to(torch.float64).cpu().numpy()
    assert g.shape == ref.shape, (what, g.shape, ref.shape)
    assert np.isfinite(g).all(), (
        f"{what}: {int((~np.isfinite(g)).sum())} of {g.size} outputs not finite (unwritten: the "
        "NaN poison)")
    err = np.abs(g - ref)
    bad = err > atol + rtol * np.abs(ref)
    assert not bad.any(), (
        f"{what}: {int(bad.sum())} of {bad.size} outputs off; max error {err.max():.3g} at "
        f"{np.unravel_index(err.argmax(), err.shape)} (ref {ref.flat[err.argmax()]:.4g}, "
        f"atol {atol:.3g}, rtol {rtol:.3g})")
    if ref.size and np.linalg.norm(ref) > 0:
        rms = np.linalg.norm(ref) / math.sqrt(ref.size)
        rel = np.linalg.norm(g - ref) / np.linalg.norm(ref)
        assert rel <= rtol + atol / rms, f"{what}: relative norm error {rel:.3g}"


def check(case: Case, out_layout: str = "contiguous") -> torch.Tensor:
    """Run the case (poisoned output) and compare it with the float64 reference."""
    out = call(case, out_layout)
    assert_close(out, reference(case), *tolerance(case),
                 f"{case.op} {case.desc} {dtype_id(case.out_dtype)} {case.attrs}")
    return out


# ------------------------------------------------------------------ bits, frameworks


def bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's bits on the host, as an integer tensor of its element size."""
    ints = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]
    return t.detach().cpu().contiguous().view(ints)


def _ml(name: str):
    import ml_dtypes

    return np.dtype(getattr(ml_dtypes, name))


def to_numpy(t: torch.Tensor) -> np.ndarray:
    """A NumPy copy (bfloat16 as ml_dtypes.bfloat16, float8_e4m3fn as ml_dtypes')."""
    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(_ml("bfloat16")).copy()
    if t.dtype == F8:
        return t.view(torch.uint8).numpy().view(_ml("float8_e4m3fn")).copy()
    return t.numpy().copy()


def from_numpy(a) -> torch.Tensor:
    a = np.array(a)
    if a.dtype == _ml("bfloat16"):
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    if a.dtype == _ml("float8_e4m3fn"):
        return torch.from_numpy(a.view(np.uint8)).view(F8)
    return torch.from_numpy(a)


def as_tuple(res) -> tuple:
    return res if isinstance(res, tuple) else (res,)


# ------------------------------------------------------------------ quantisation


def quantize_input(shape, dtype, device, seed, zero_rows=0) -> torch.Tensor:
    """x for quantize_fp8: normal values of spread magnitudes (rows scaled by 2^-8..2^8, so that
    groups have different scales), rounded to dtype; the first `zero_rows` rows zero (their
    groups' scale is 1)."""
    gen = _gen(seed)
    x = torch.randn(tuple(shape), generator=gen)
    if x.ndim >= 1 and x.shape[-1]:
        x = x * torch.exp2(torch.randint(-8, 9, (*shape[:-1], 1), generator=gen).float())
    x = x.to(dtype)
    if zero_rows:
        x.view(-1, shape[-1])[:zero_rows] = 0
    return x.to(device)


def quantize_reference(x: torch.Tensor, granularity: str):
    """(q as e4m3 bits (uint8), scale float32), NumPy, from xkernels.reference."""
    q, s = R.quantize_fp8(as_float64(x), granularity)
    return q.astype(_ml("float8_e4m3fn")).view(np.uint8), s.astype(np.float32)
