"""Attention test cases: input builders (dense, packed-QKV strided views, ragged batches with empty
requests, paged caches in NHD and HND with shuffled page ids, decode), the float64 references
(NumPy on the host; the same code in torch float64 on the GPU for large cases), calls on poisoned
outputs, and the comparison with its tolerances. Shared by tests/test_attention.py's host-path
and GPU tests.

Tolerances (|got - ref| <= atol + rtol * |ref| elementwise, plus a bound on the relative 2-norm
||got - ref|| / ||ref|| of each output, plus an absolute bound on the finite LSEs):
- out is rounded to the dtype once: relative 2^-9 (bf16) and 2^-12 (fp16) at most, half an ulp.
- On the GPU, P is rounded to 16 bits before the P.V product (relative 2^-9 / 2^-12 per weight,
  unbiased), accumulation is fp32 and exp is ex2.approx (relative ~2^-22). The P rounding adds a
  random-walk error of about the same size as the output rounding; elementwise the bound below is
  ~5x (fp16: ~8x) the worst single rounding. With long keys the outputs average many values and
  are small (|out| ~ 0.03 over 4097 keys), where the elementwise atol says little: the
  relative-norm bound (~5-10x the expected rms relative error, 2^-9 / sqrt(3) ~ 1.1e-3 for bf16)
  is the one that catches a wrong weight there.
- The LSE is float32 and not rounded to the dtype. Its worst case on the GPU is the row sum taken
  over the 16-bit P (the prefill tiles of head_dim 128 sum P on the tensor cores): |dl / l| <=
  2^-9 = 1.95e-3 for bf16 if every weight of a row rounded the same way, 2^-12 for fp16; a
  simulation of that arithmetic (bf16, causal with a window of 5: six keys a row) reached 1.5e-3.
  Absolute bounds: bf16 3e-3, fp16 1e-3 (float32 merges 1e-4).
- Soft cap on the GPU uses tanh.approx.f32 (relative error up to 2^-11): each capped logit s is off
  by up to |s| 2^-11, which moves the LSE and the weights by as much. These tests' capped logits
  stay within +-10 (normal inputs, at most a few standard deviations), so GPU soft-capped cases
  add min(cap, 10) * 2^-11 (<= 4.9e-3) to the LSE bound, the relative-norm bound and rtol. A
  simulation with every logit off by a random +-2^-11 relative (cap 30, 4097 keys) measured LSE
  1.3e-3, relative norm 2.7e-3 (bf16) and 2.0e-3 (fp16).
- The host path (float accumulation, exact exp and tanh, P not rounded) measured, over every host
  case here and a few larger ones: elementwise at most 0.13 of the bound, relative norm 1.7e-3
  (bf16) and 2.1e-4 (fp16), LSE within 1e-6. Its outputs keep the same bounds (the final rounding
  to the dtype dominates them), its LSE gets 1e-4 (HOST_LSE_ATOL): a missing or extra key moves
  an LSE by far more.
- merge_state(s) over float32 values: (2e-5, 2e-5) elementwise, 1e-5 relative norm.
Where the reference LSE is -inf (a query that sees no key) the LSE must be exactly -inf and the
output exactly 0; every output element must be finite (outputs are poisoned with NaN first).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch
import xkernels.torch as xt
from xkernels import reference as R
from xkernels.ops import OPS

DTYPES16 = [torch.float16, torch.bfloat16]

# dtype -> (rtol, atol, relative-norm bound) of out
TOL = {torch.float16: (4e-3, 4e-3, 2e-3), torch.bfloat16: (2e-2, 2e-2, 1e-2),
       torch.float32: (2e-5, 2e-5, 1e-5)}
LSE_ATOL = {torch.float16: 1e-3, torch.bfloat16: 3e-3, torch.float32: 1e-4}
HOST_LSE_ATOL = 1e-4
TANH_APPROX_REL = 2.0 ** -11  # tanh.approx.f32's relative error (the GPU's soft cap)
CAPPED_LOGIT_MAX = 10.0  # |capped logits| these tests' inputs reach, at most


def dtype_id(dtype) -> str:
    return str(dtype).replace("torch.", "")


# ------------------------------------------------------------------ cases


@dataclass
class Case:
    op: str
    inputs: dict[str, torch.Tensor]
    attrs: dict = field(default_factory=dict)
    desc: str = ""

    @property
    def spec(self):
        return OPS[self.op]

    def args(self) -> list[torch.Tensor]:
        return [self.inputs[x.name] for x in self.spec.inputs]

    @property
    def dtype(self):
        return self.args()[0].dtype

    @property
    def device(self):
        return self.args()[0].device

    def with_attrs(self, **attrs) -> Case:
        return Case(self.op, self.inputs, {**self.attrs, **attrs}, self.desc)


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def randn(shape, dtype, device, gen, scale=1.0) -> torch.Tensor:
    """Normal values rounded to `dtype` (drawn on the host, so the same on every device)."""
    return (torch.randn(tuple(shape), generator=gen) * scale).to(dtype).to(device)


def i32(values, device) -> torch.Tensor:
    return torch.tensor(list(values), dtype=torch.int32, device=device)


def cumsum0(lens) -> list[int]:
    out = [0]
    for n in lens:
        out.append(out[-1] + int(n))
    return out


def dense(batch, q_len, kv_len, hq, hkv, d, dtype, device, seed=0, layout="contiguous",
          attrs=None) -> Case:
    """attention: q [batch, q_len, hq, d], k and v [batch, kv_len, hkv, d]. layout "packed": the
    three are strided views of one [batch, len, hq + 2 hkv, d] qkv tensor (q_len == kv_len)."""
    gen = _gen(seed)
    if layout == "packed":
        assert q_len == kv_len
        qkv = randn((batch, q_len, hq + 2 * hkv, d), dtype, device, gen)
        q, k, v = qkv[:, :, :hq], qkv[:, :, hq:hq + hkv], qkv[:, :, hq + hkv:]
    else:
        assert layout == "contiguous", layout
        q = randn((batch, q_len, hq, d), dtype, device, gen)
        k = randn((batch, kv_len, hkv, d), dtype, device, gen)
        v = randn((batch, kv_len, hkv, d), dtype, device, gen)
    return Case("attention", {"q": q, "k": k, "v": v}, dict(attrs or {}),
                f"B{batch} n{q_len} L{kv_len} {hq}/{hkv} d{d} {layout}")


def varlen(q_lens, kv_lens, hq, hkv, d, dtype, device, seed=0, layout="contiguous",
           tail=0, attrs=None) -> Case:
    """attention_varlen over requests of q_lens queries and kv_lens keys (zeros allowed). layout
    "packed": q, k, v are views of one [total, hq + 2 hkv, d] tensor (q_lens == kv_lens). `tail`
    rows of NaN after the last request's keys (valid: cu_seqlens_k[-1] <= total_k; never read)."""
    gen = _gen(seed)
    cq, ck = cumsum0(q_lens), cumsum0(kv_lens)
    if layout == "packed":
        assert list(q_lens) == list(kv_lens) and tail == 0
        qkv = randn((cq[-1], hq + 2 * hkv, d), dtype, device, gen)
        q, k, v = qkv[:, :hq], qkv[:, hq:hq + hkv], qkv[:, hq + hkv:]
    else:
        q = randn((cq[-1], hq, d), dtype, device, gen)
        k = randn((ck[-1] + tail, hkv, d), dtype, device, gen)
        v = randn((ck[-1] + tail, hkv, d), dtype, device, gen)
        if tail:
            k[ck[-1]:] = float("nan")
            v[ck[-1]:] = float("nan")
    ins = {"q": q, "k": k, "v": v, "cu_seqlens_q": i32(cq, device), "cu_seqlens_k": i32(ck, device)}
    return Case("attention_varlen", ins, dict(attrs or {}),
                f"q{list(q_lens)} kv{list(kv_lens)} {hq}/{hkv} d{d} {layout}")


def page_table(kv_lens, page_size, gen, extra_pages=3, share_first=False):
    """(kv_indptr, kv_indices, kv_last_page_len, num_pages, valid): every request's pages, in a
    shuffled order of the cache's num_pages pages (extra_pages of them unused); valid[page] is
    how many leading tokens of the page some request reads. share_first: request 1 starts with
    request 0's full pages (a shared prefix, as prefix caching does)."""
    counts = [-(-int(n) // page_size) for n in kv_lens]
    num_pages = sum(counts) + extra_pages
    perm = torch.randperm(num_pages, generator=gen).tolist()
    indices, indptr, last, valid = [], [0], [], [0] * num_pages
    at = 0
    for b, (n, c) in enumerate(zip(kv_lens, counts)):
        pages = perm[at:at + c]
        at += c
        if share_first and b == 1 and len(kv_lens) > 1:
            shared = indices[:max(0, counts[0] - 1)]  # request 0's full pages
            pages = (shared + pages)[:c] if c else pages
        indices += pages
        indptr.append(len(indices))
        last.append(int(n) - (c - 1) * page_size if c else 0)
        for i, p in enumerate(pages):
            valid[p] = max(valid[p], page_size if i < c - 1 else last[-1])
    return indptr, indices, last, num_pages, valid


def paged_cache(num_pages, page_size, hkv, d, layout, valid, dtype, device, gen):
    """A cache of random values, NaN in every slot no request reads (unused pages, the tails of
    last pages): the kernels must not let those reach the output."""
    shape = (num_pages, page_size, hkv, d) if layout == "NHD" else (num_pages, hkv, page_size, d)
    cache = randn(shape, dtype, "cpu", gen)
    unread = torch.arange(page_size)[None, :] >= torch.tensor(valid)[:, None]  # [pages, size]
    (cache if layout == "NHD" else cache.transpose(1, 2))[unread] = float("nan")
    return cache.to(device)


def _paged_kv_inputs(kv_lens, page_size, layout, hkv, d, dtype, device, gen, extra_pages,
                     share_first):
    indptr, indices, last, num_pages, valid = page_table(kv_lens, page_size, gen, extra_pages,
                                                         share_first)
    k = paged_cache(num_pages, page_size, hkv, d, layout, valid, dtype, device, gen)
    v = paged_cache(num_pages, page_size, hkv, d, layout, valid, dtype, device, gen)
    return {"k_cache": k, "v_cache": v, "kv_indptr": i32(indptr, device),
            "kv_indices": i32(indices, device), "kv_last_page_len": i32(last, device)}


def paged(q_lens, kv_lens, page_size, layout, hq, hkv, d, dtype, device, seed=0, attrs=None,
          extra_pages=3, share_first=False) -> Case:
    """attention_paged: ragged queries (q_lens) over paged caches of kv_lens keys."""
    gen = _gen(seed)
    q = randn((sum(q_lens), hq, d), dtype, device, gen)
    ins = {"q": q, **_paged_kv_inputs(kv_lens, page_size, layout, hkv, d, dtype, device, gen,
                                      extra_pages, share_first)}
    ins["qo_indptr"] = i32(cumsum0(q_lens), device)
    return Case("attention_paged", ins, {"kv_layout": layout, **(attrs or {})},
                f"q{list(q_lens)} kv{list(kv_lens)} page{page_size} {layout} {hq}/{hkv} d{d}")


def decode(kv_lens, q_len, page_size, layout, hq, hkv, d, dtype, device, seed=0, attrs=None,
           extra_pages=3) -> Case:
    """decode_paged: q [batch, hq, d] when q_len is None, else [batch, q_len, hq, d]."""
    gen = _gen(seed)
    batch = len(kv_lens)
    shape = (batch, hq, d) if q_len is None else (batch, q_len, hq, d)
    q = randn(shape, dtype, device, gen)
    ins = {"q": q, **_paged_kv_inputs(kv_lens, page_size, layout, hkv, d, dtype, device, gen,
                                      extra_pages, False)}
    return Case("decode_paged", ins, {"kv_layout": layout, **(attrs or {})},
                f"kv{list(kv_lens) if batch <= 8 else f'[{batch} requests]'} q_len {q_len} "
                f"page{page_size} {layout} {hq}/{hkv} d{d}")


def lse_values(shape, gen, device, dead_frac=0.0) -> torch.Tensor:
    """Float32 log-sum-exps of partial states: spread over a few units, some -inf."""
    s = torch.randn(tuple(shape), generator=gen) * 3.0 + 2.0
    if dead_frac:
        s[torch.rand(tuple(shape), generator=gen) < dead_frac] = -math.inf
    return s.to(device)


def merge_state_case(shape, dtype, device, seed=0) -> Case:
    """merge_state: v_a, v_b [*shape] (shape = (..., heads, head_dim)), s_a, s_b [*shape[:-1]];
    row 0 has s_a = -inf, row 1 s_b = -inf, row 2 both (out 0, lse -inf). The v of a state whose
    s is -inf is NaN: such a state contributes nothing, its v is not to be read."""
    gen = _gen(seed)
    s_shape = shape[:-1]
    s_a, s_b = lse_values(s_shape, gen, "cpu"), lse_values(s_shape, gen, "cpu")
    flat_a, flat_b = s_a.view(-1, s_shape[-1]), s_b.view(-1, s_shape[-1])
    flat_a[0] = -math.inf
    flat_b[1] = -math.inf
    flat_a[2] = flat_b[2] = -math.inf
    v_a, v_b = randn(shape, dtype, "cpu", gen), randn(shape, dtype, "cpu", gen)
    v_a[torch.isneginf(s_a)] = float("nan")
    v_b[torch.isneginf(s_b)] = float("nan")
    ins = {"v_a": v_a.to(device), "s_a": s_a.to(device), "v_b": v_b.to(device),
           "s_b": s_b.to(device)}
    return Case("merge_state", ins, {}, f"{tuple(shape)}")


def merge_states_case(lead, k, heads, d, dtype, device, seed=0, dead_frac=0.2) -> Case:
    """merge_states: v [*lead, k, heads, d], s [*lead, k, heads], a fraction of the s -inf and the
    first row's first head -inf in every state; v NaN where s is -inf (not to be read)."""
    gen = _gen(seed)
    s = lse_values((*lead, k, heads), gen, "cpu", dead_frac)
    s.view(-1, k, heads)[0, :, 0] = -math.inf
    v = randn((*lead, k, heads, d), dtype, "cpu", gen)
    v[torch.isneginf(s)] = float("nan")
    ins = {"v": v.to(device), "s": s.to(device)}
    return Case("merge_states", ins, {}, f"lead{tuple(lead)} k{k} h{heads} d{d}")


# ------------------------------------------------------------------ references


class TorchOps(R.ArrayOps):
    """reference.ArrayOps in torch (float64 tensors on their device): the references on the GPU."""

    @staticmethod
    def zeros(shape, like):
        return torch.zeros(tuple(shape), dtype=torch.float64, device=like.device)

    @staticmethod
    def full(shape, value, like):
        return torch.full(tuple(shape), value, dtype=torch.float64, device=like.device)

    @staticmethod
    def arange(n, like):
        return torch.arange(n, device=like.device)

    einsum = staticmethod(torch.einsum)
    where = staticmethod(torch.where)
    exp = staticmethod(torch.exp)
    log = staticmethod(torch.log)
    tanh = staticmethod(torch.tanh)
    isneginf = staticmethod(torch.isneginf)

    @staticmethod
    def amax(x, axis):
        return torch.amax(x, dim=axis, keepdim=True)

    @staticmethod
    def sum(x, axis):
        return x.sum(dim=axis, keepdim=True)

    @staticmethod
    def stack(xs, axis):
        return torch.stack(xs, dim=axis)


TORCH_OPS = TorchOps()


def ref_args(case: Case, backend: str) -> list:
    """The reference's inputs: float64 (NaN poison kept), index inputs as integers; NumPy arrays
    ("numpy") or torch tensors on the case's device ("torch")."""
    out = []
    for x in case.spec.inputs:
        t = case.inputs[x.name]
        if x.role == "index":
            out.append(t.cpu().numpy().astype(np.int64) if backend == "numpy" else t)
        else:
            out.append(t.detach().double().cpu().numpy() if backend == "numpy" else t.double())
    return out


def reference(case: Case, backend: str = "numpy", attrs: dict | None = None):
    """(out, lse) of the float64 reference as NumPy arrays; backend "torch" computes in torch
    float64 on the case's device (fast on the GPU)."""
    attrs = case.attrs if attrs is None else attrs
    fn = getattr(R, case.op)
    if backend == "numpy":
        return fn(*ref_args(case, "numpy"), **attrs)
    with torch.no_grad():
        out, lse = fn(*ref_args(case, "torch"), **attrs, xp=TORCH_OPS)
    return out.cpu().numpy(), lse.cpu().numpy()


# ------------------------------------------------------------------ calls


def poisoned(shape, dtype, device, layout="contiguous"):
    """(tensor of NaN, its backing buffer): contiguous, or "strided": a view whose rows are
    padded (the last dim cut from a wider one; the padding must stay NaN)."""
    if layout == "contiguous":
        t = torch.full(tuple(shape), float("nan"), dtype=dtype, device=device)
        return t, t
    pad = 8 if len(shape) and shape[-1] >= 8 else 3  # 8: keeps a CUDA view 16-byte aligned
    buf = torch.full((*shape[:-1], shape[-1] + pad), float("nan"), dtype=dtype, device=device)
    return buf[..., :shape[-1]], buf


def call(case: Case, out_layout: str = "contiguous", attrs: dict | None = None,
         check_inputs: bool = False):
    """The op through xkernels.torch on outputs poisoned with NaN, given by out= and lse=
    (out_layout "strided": views of padded buffers, the padding checked untouched). Returns
    (out, lse), lse None when the call returns none."""
    attrs = case.attrs if attrs is None else attrs
    spec = case.spec
    fn = getattr(xt, case.op)
    args = case.args()
    before = [a.clone() for a in args] if check_inputs else None
    has_lse = not spec.attrs or attrs.get("return_lse", False)
    shapes = {x.name: tuple(case.inputs[x.name].shape) for x in spec.inputs}
    o_spec, l_spec = spec.outputs
    out, out_buf = poisoned(spec.output_shape(o_spec, shapes), case.dtype, case.device,
                            out_layout)
    lse = lse_buf = None
    if has_lse:
        lse, lse_buf = poisoned(spec.output_shape(l_spec, shapes), torch.float32, case.device,
                                out_layout)
    res = fn(*args, **attrs, out=out, **({"lse": lse} if has_lse else {}))
    if has_lse:
        assert isinstance(res, tuple) and len(res) == 2 and res[0] is out and res[1] is lse
    else:
        assert res is out
    if out_layout != "contiguous":
        for view, buf in ((out, out_buf), (lse, lse_buf)):
            if view is not None:
                pad = buf[..., view.shape[-1]:]
                assert pad.isnan().all(), f"{case.op}: wrote past the view of a strided output"
    if check_inputs:
        for x, a, b in zip(spec.inputs, args, before):
            assert torch.equal(bits(a), bits(b)), f"{case.op}: input {x.name} was written"
    return out, lse


# ------------------------------------------------------------------ comparison


def tolerance(dtype, attrs: dict, gpu: bool):
    """(rtol, atol, norm bound, lse atol) for outputs of `dtype` (see the module docstring)."""
    rtol, atol, norm = TOL[dtype]
    lse_atol = LSE_ATOL[dtype] if gpu else HOST_LSE_ATOL
    cap = attrs.get("logits_soft_cap", 0.0) or 0.0
    if gpu and cap > 0:
        slack = min(cap, CAPPED_LOGIT_MAX) * TANH_APPROX_REL
        rtol, norm, lse_atol = rtol + slack, norm + slack, lse_atol + slack
    return rtol, atol, norm, lse_atol


def assert_close(got_out, got_lse, ref_out, ref_lse, dtype, attrs=None, gpu=False, what="",
                 tol=None):
    """got (tensors) against the float64 reference (NumPy arrays): see the module docstring.
    got_lse None: the LSE was not asked for (ref_lse still says which rows see no key)."""
    rtol, atol, norm, lse_atol = tol or tolerance(dtype, attrs or {}, gpu)
    g = got_out.detach().double().cpu().numpy()
    assert g.shape == ref_out.shape, (what, g.shape, ref_out.shape)
    assert np.isfinite(g).all(), (
        f"{what}: {int((~np.isfinite(g)).sum())} of {g.size} outputs not finite (unwritten: "
        f"NaN poison, or a NaN from unused cache slots)")
    dead = np.isneginf(ref_lse)
    if dead.any():
        assert (g[dead] == 0).all(), f"{what}: rows that see no key must be 0"
    err = np.abs(g - ref_out)
    bad = err > atol + rtol * np.abs(ref_out)
    assert not bad.any(), (
        f"{what}: {int(bad.sum())} of {bad.size} outputs off; max error {err.max():.3g} at "
        f"{np.unravel_index(err.argmax(), err.shape)} (ref {ref_out.flat[err.argmax()]:.4g})")
    nref = np.linalg.norm(ref_out)
    if nref > 0:
        rel = np.linalg.norm(g - ref_out) / nref
        assert rel <= norm, f"{what}: relative norm error {rel:.3g} > {norm:.3g}"
    if got_lse is None:
        return
    s = got_lse.detach().cpu().numpy().astype(np.float64)
    assert got_lse.dtype == torch.float32, got_lse.dtype
    assert s.shape == ref_lse.shape, (what, s.shape, ref_lse.shape)
    assert np.isneginf(s[dead]).all(), f"{what}: the LSE of rows that see no key must be -inf"
    live = ~dead
    assert np.isfinite(s[live]).all(), (
        f"{what}: {int((~np.isfinite(s[live])).sum())} LSEs not finite (unwritten?)")
    if live.any():
        e = np.abs(s[live] - ref_lse[live])
        assert e.max() <= lse_atol, f"{what}: LSE off by {e.max():.3g} > {lse_atol:.3g}"


def check(case: Case, backend: str = "numpy", out_layout: str = "contiguous",
          check_inputs: bool = False, attrs: dict | None = None):
    """Run the case (poisoned outputs) and compare with the reference; returns (out, lse)."""
    attrs = case.attrs if attrs is None else attrs
    ref_out, ref_lse = reference(case, backend, attrs)
    out, lse = call(case, out_layout, attrs, check_inputs)
    assert_close(out, lse, ref_out, ref_lse, case.dtype, attrs, case.device.type == "cuda",
                 f"{case.op} {case.desc} {dtype_id(case.dtype)} {attrs}")
    return out, lse


# ------------------------------------------------------------------ frameworks


def bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's bits on the host (16-bit as int16, 32-bit as int32)."""
    return t.detach().cpu().contiguous().view({2: torch.int16, 4: torch.int32}[t.element_size()])


def bf16_np():
    import ml_dtypes

    return np.dtype(ml_dtypes.bfloat16)


def to_numpy(t: torch.Tensor) -> np.ndarray:
    """A NumPy copy of a tensor (bfloat16 as ml_dtypes.bfloat16)."""
    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:
        return t.contiguous().view(torch.int16).numpy().view(bf16_np()).copy()
    return t.contiguous().numpy().copy()


def from_numpy(a) -> torch.Tensor:
    a = np.array(a)
    if a.dtype == bf16_np():
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def as_tuple(res) -> tuple:
    return res if isinstance(res, tuple) else (res,)
