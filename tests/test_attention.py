"""The attention ops against their float64 references (xkernels.reference): the host path on small
shapes (runs everywhere), argument validation, and the CUDA kernels on shapes that reach every
tile shape, mask boundary and split-KV path (skipped without a GPU). Inputs, references, calls
on poisoned outputs and the tolerances (with their justification): tests/attention_cases.py.

Adapter contracts (opcheck, the returned structure, errors from each framework): see
test_attention_adapters.py; here the numbers."""

from __future__ import annotations

import functools
import itertools
import math

import numpy as np
import pytest
import torch
import xkernels.torch as xt
from attention_cases import (
    DTYPES16,
    Case,
    as_tuple,
    assert_close,
    bits,
    call,
    check,
    decode,
    dense,
    dtype_id,
    from_numpy,
    merge_state_case,
    merge_states_case,
    paged,
    randn,
    reference,
    to_numpy,
    tolerance,
    varlen,
)
from conftest import gpu, needs_cupy, needs_jax_gpu
from xkernels import reference as R

CPU = "cpu"
DT_IDS = [dtype_id(d) for d in DTYPES16]

# ================================================================== host path
#
# Small shapes, every op, fp16 and bf16: GQA ratios 1, 4 and 8 (8 query heads over 8, 2 or 1 kv
# heads), head_dim 64/128/256, query lengths 1 and 7 (and 37, 77), key lengths that are not
# multiples of 16 or 64 (37, 77), causal (also with fewer keys than queries: rows that see no
# key), windows, soft cap, sm_scale, the LSE, empty requests and requests without keys.

LSE = {"return_lse": True}
CAUSAL = {"causal": True}

# id -> (batch, q_len, kv_len, hq, hkv, head_dim, layout, attrs)
HOST_DENSE = {
    "mha-d64-q7-kv37": (2, 7, 37, 8, 8, 64, "contiguous", {}),
    "gqa4-d128-causal": (2, 7, 37, 8, 2, 128, "contiguous", CAUSAL),
    "mqa-d256-q1-lse": (1, 1, 77, 8, 1, 256, "contiguous", LSE),
    "gqa4-causal-window5-lse": (2, 7, 77, 8, 2, 64, "contiguous",
                                {"causal": True, "window_left": 5, **LSE}),
    "window10-not-causal-lse": (1, 7, 37, 8, 8, 128, "contiguous", {"window_left": 10, **LSE}),
    "window0-causal-lse": (1, 7, 37, 8, 2, 64, "contiguous", {"causal": True, "window_left": 0,
                                                              **LSE}),
    "softcap5-scale0.3-lse": (1, 37, 37, 4, 1, 128, "contiguous",
                              {"logits_soft_cap": 5.0, "sm_scale": 0.3, **LSE}),
    "causal-q77-over-kv37-lse": (2, 77, 37, 8, 8, 64, "contiguous", {**CAUSAL, **LSE}),
    "kv0-lse": (2, 7, 0, 8, 2, 64, "contiguous", LSE),
    "peaky-scale1-causal-lse": (1, 37, 77, 8, 2, 128, "contiguous",
                                {"causal": True, "sm_scale": 1.0, **LSE}),
    "q0-lse": (2, 0, 37, 8, 2, 64, "contiguous", LSE),
    "q1-kv1-causal-lse": (3, 1, 1, 8, 4, 64, "contiguous", {**CAUSAL, **LSE}),
    "packed-gqa4-causal-lse": (2, 37, 37, 8, 2, 128, "packed", {**CAUSAL, **LSE}),
    "packed-mha-window16": (1, 77, 77, 8, 8, 64, "packed", {"causal": True, "window_left": 16}),
    "packed-mqa-d256-softcap": (1, 7, 7, 8, 1, 256, "packed", {"logits_soft_cap": 2.0, **LSE}),
}

# id -> (q_lens, kv_lens, hq, hkv, head_dim, layout, tail, attrs)
HOST_VARLEN = {
    "gqa4-causal-lse": ([7, 0, 1, 37], [37, 5, 0, 77], 8, 2, 64, "contiguous", 0,
                        {**CAUSAL, **LSE}),
    "mqa-d128-window-softcap": ([7, 0, 1, 37], [37, 5, 0, 77], 8, 1, 128, "contiguous", 0,
                                {"window_left": 8, "logits_soft_cap": 30.0, **LSE}),
    "mha-d256": ([1, 7], [77, 37], 8, 8, 256, "contiguous", 0, {}),
    "packed-gqa4-causal-lse": ([37, 0, 7, 1], [37, 0, 7, 1], 8, 2, 128, "packed", 0,
                               {**CAUSAL, **LSE}),
    "nan-rows-after-last-request": ([7, 5], [37, 20], 8, 2, 64, "contiguous", 6, LSE),
    "causal-q-longer-than-kv": ([37, 9], [5, 9], 8, 4, 64, "contiguous", 0, {**CAUSAL, **LSE}),
}

# (page_size, layout) -> (hq, hkv, head_dim, attrs): every page size x layout once, each with
# its own head configuration and attributes. q_lens/kv_lens: a partial last page, an exact
# multiple of page sizes 5 and 16 (80), an empty request, a request without keys.
PAGED_Q, PAGED_KV = [7, 0, 1, 37], [37, 5, 0, 80]
HOST_PAGED = {
    (1, "NHD"): (8, 2, 64, {**CAUSAL, **LSE}),
    (1, "HND"): (8, 8, 128, {}),
    (16, "NHD"): (8, 1, 128, {"causal": True, "window_left": 9, **LSE}),
    (16, "HND"): (8, 2, 64, {"logits_soft_cap": 5.0, **LSE}),
    (5, "NHD"): (8, 8, 256, CAUSAL),
    (5, "HND"): (8, 2, 64, {**CAUSAL, **LSE}),
}

# id -> (kv_lens, q_len (None: 3-D q), page_size, layout, hq, hkv, head_dim, attrs)
HOST_DECODE = {
    "q1-page16-NHD-gqa4-lse": ([37, 0, 77], None, 16, "NHD", 8, 2, 128, LSE),
    "q1-page1-HND-window4-lse": ([37, 0, 77], None, 1, "HND", 8, 8, 64,
                                 {"window_left": 4, **LSE}),
    "q1-page5-NHD-mqa-d256-softcap": ([37, 5, 77], None, 5, "NHD", 8, 1, 256,
                                      {"logits_soft_cap": 5.0}),
    "q4-page5-HND-causal-lse": ([37, 2, 0, 80], 4, 5, "HND", 8, 2, 64, LSE),
    "q4-page16-HND-not-causal-lse": ([37, 2, 0, 80], 4, 16, "HND", 8, 2, 128,
                                     {"causal": False, **LSE}),
    "q7-page16-NHD-mqa-window3-lse": ([37, 80], 7, 16, "NHD", 8, 1, 128,
                                      {"window_left": 3, **LSE}),
}


def _dense(key, dtype, device=CPU, seed=0):
    b, n, L, hq, hkv, d, layout, attrs = HOST_DENSE[key]
    return dense(b, n, L, hq, hkv, d, dtype, device, seed, layout, attrs)


@pytest.mark.parametrize("dtype", DTYPES16, ids=DT_IDS)
@pytest.mark.parametrize("key", list(HOST_DENSE))
def test_host_attention(key, dtype):
    check(_dense(key, dtype), check_inputs=True)


@pytest.mark.parametrize("dtype", DTYPES16, ids=DT_IDS)
@pytest.mark.parametrize("key", list(HOST_VARLEN))
def test_host_attention_varlen(key, dtype):
    q_lens, kv_lens, hq, hkv, d, layout, tail, attrs = HOST_VARLEN[key]
    check(varlen(q_lens, kv_lens, hq, hkv, d, dtype, CPU, 1, layout, tail, attrs),
          check_inputs=True)


@pytest.mark.parametrize("dtype", DTYPES16, ids=DT_IDS)
@pytest.mark.parametrize("page_size,layout", list(HOST_PAGED),
                         ids=[f"page{p}-{l}" for p, l in HOST_PAGED])
def test_host_attention_paged(page_size, layout, dtype):
    hq, hkv, d, attrs = HOST_PAGED[(page_size, layout)]
    check(paged(PAGED_Q, PAGED_KV, page_size, layout, hq, hkv, d, dtype, CPU, 2, attrs),
          check_inputs=True)


@pytest.mark.parametrize("dtype", DTYPES16, ids=DT_IDS)
@pytest.mark.parametrize("key", list(HOST_DECODE))
def test_host_decode_paged(key, dtype):
    kv_lens, q_len, ps, layout, hq, hkv, d, attrs = HOST_DECODE[key]
    check(decode(kv_lens, q_len, ps, layout, hq, hkv, d, dtype, CPU, 3, attrs), check_inputs=True)


@pytest.mark.parametrize("layout", ["NHD", "HND"])
def test_host_paged_shared_prefix_pages(layout):
    """Two requests reading the same pages (a shared prefix): kv_indices may repeat pages."""
    case = paged([7, 3], [37, 45], 5, layout, 8, 2, 64, torch.bfloat16, CPU, 4,
                 {**CAUSAL, **LSE}, share_first=True)
    idx = case.inputs["kv_indices"].tolist()
    ptr = case.inputs["kv_indptr"].tolist()
    assert idx[ptr[1]:ptr[1] + 7] == idx[:7]  # request 1 starts with request 0's 7 full pages
    check(case)


@pytest.mark.parametrize("op", ["attention", "attention_varlen", "attention_paged",
                                "decode_paged"])
def test_host_strided_outputs(op):
    """out and lse given as views of padded buffers: written through their strides, the padding
    left alone."""
    case = {
        "attention": lambda: _dense("gqa4-causal-window5-lse", torch.float16),
        "attention_varlen": lambda: varlen([7, 0, 37], [37, 5, 77], 8, 2, 64, torch.float16, CPU,
                                           attrs={**CAUSAL, **LSE}),
        "attention_paged": lambda: paged(PAGED_Q, PAGED_KV, 16, "HND", 8, 2, 64, torch.bfloat16,
                                         CPU, attrs={**CAUSAL, **LSE}),
        "decode_paged": lambda: decode([37, 0, 77], None, 5, "NHD", 8, 2, 128, torch.bfloat16,
                                       CPU, attrs=LSE),
    }[op]()
    check(case, out_layout="strided")


def test_host_allocated_outputs_match_given_outputs():
    """The adapter's own outputs (no out=, lse=) hold the same bits as given ones."""
    case = _dense("gqa4-causal-window5-lse", torch.bfloat16)
    out, lse = call(case)
    o2, l2 = xt.attention(*case.args(), **case.attrs)
    assert torch.equal(bits(out), bits(o2)) and torch.equal(bits(lse), bits(l2))
    o3 = xt.attention(*case.args(), **{**case.attrs, "return_lse": False})
    assert isinstance(o3, torch.Tensor) and torch.equal(bits(o3), bits(out))


def _outside_rows_cases(device, dtype=torch.float16):
    """attention_varlen and attention_paged whose requests cover query rows 2..8 of 12 (and keys
    3..19 of 25 for varlen, the others NaN: never read): rows 0-1 and 9-11 belong to no request."""
    gen = torch.Generator().manual_seed(8)
    i32 = functools.partial(torch.tensor, dtype=torch.int32, device=device)
    q = randn((12, 8, 64), dtype, device, gen)
    k, v = randn((25, 2, 64), dtype, device, gen), randn((25, 2, 64), dtype, device, gen)
    for t in (k, v):
        t[:3] = float("nan")
        t[20:] = float("nan")
    attrs = {**CAUSAL, **LSE}
    var = Case("attention_varlen", {"q": q, "k": k, "v": v, "cu_seqlens_q": i32([2, 5, 9]),
                                    "cu_seqlens_k": i32([3, 10, 20])}, attrs, "offset rows")
    pg = paged([3, 4], [10, 9], 5, "HND", 8, 2, 64, dtype, device, 9, attrs)
    pg = Case(pg.op, {**pg.inputs, "q": q, "qo_indptr": i32([2, 5, 9])}, pg.attrs, "offset rows")
    return var, pg


def _check_outside_rows_left_alone(case, backend, num_splits):
    """Rows of q that belong to no request: their outputs are not written (params.h:
    qo_indptr[batch] <= total_q); the others as the reference."""
    attrs = {**case.attrs, "num_splits": num_splits}
    ref_out, ref_lse = reference(case, backend, attrs)
    q = case.inputs["q"]
    out = torch.full_like(q, float("nan"))
    lse = torch.full(q.shape[:-1], float("nan"), device=q.device)
    getattr(xt, case.op)(*case.args(), **attrs, out=out, lse=lse)
    assert out[:2].isnan().all() and out[9:].isnan().all(), "rows of no request written"
    assert lse[:2].isnan().all() and lse[9:].isnan().all(), "LSEs of no request written"
    assert_close(out[2:9], lse[2:9], ref_out[2:9], ref_lse[2:9], q.dtype, attrs,
                 q.device.type == "cuda", f"{case.op} {case.desc}")


@pytest.mark.parametrize("which", [0, 1], ids=["varlen", "paged"])
def test_host_rows_outside_the_requests_are_left_alone(which):
    _check_outside_rows_left_alone(_outside_rows_cases(CPU)[which], "numpy", 0)


@pytest.mark.parametrize("layout", ["NHD", "HND"])
def test_host_paged_last_page_len_zero(layout):
    """A request whose last page holds 0 tokens (allowed: 0 <= kv_last_page_len <= page_size):
    its keys are the full pages before it."""
    case = paged([3, 4, 2], [10, 9, 5], 5, layout, 8, 2, 64, torch.bfloat16, CPU, 10,
                 {**CAUSAL, **LSE})
    case.inputs["kv_last_page_len"][0] = 0  # request 0: 5 keys (its second page unread)
    case.inputs["kv_last_page_len"][2] = 0  # request 2: one page of 0 tokens, no key
    check(case)


# ------------------------------------------------------------------ merging


@pytest.mark.parametrize("dtype", [*DTYPES16, torch.float32], ids=[*DT_IDS, "float32"])
@pytest.mark.parametrize("shape", [(5, 8, 64), (2, 3, 4, 128)], ids=["rows5", "lead2x3"])
def test_host_merge_state(shape, dtype):
    check(merge_state_case(shape, dtype, CPU), check_inputs=True)


@pytest.mark.parametrize("dtype", [*DTYPES16, torch.float32], ids=[*DT_IDS, "float32"])
@pytest.mark.parametrize("lead,k,d", [((4,), 1, 64), ((4,), 3, 64), ((2, 3), 7, 64),
                                      ((5,), 3, 30)],
                         ids=["k1", "k3", "lead2x3-k7", "k3-d30"])
def test_host_merge_states(lead, k, d, dtype):
    """Any head_dim (30: not a multiple of 4) for merging."""
    check(merge_states_case(lead, k, 4, d, dtype, CPU), check_inputs=True)


def _split_and_merge(case: Case, cuts, merge: str):
    """attention over keys [0, L) as the merge of attention over the parts [cuts[i],
    cuts[i+1]) (each with its LSE): out and lse of the union."""
    q, k, v = case.args()
    attrs = {**case.attrs, "return_lse": True}
    parts = [xt.attention(q, k[:, a:b], v[:, a:b], **attrs) for a, b in itertools.pairwise(cuts)]
    if merge == "merge_state":
        out, lse = parts[0]
        for o, s in parts[1:]:
            out, lse = xt.merge_state(out, lse, o, s)
        return out, lse
    v_all = torch.stack([o for o, _ in parts], dim=-3)  # [B, n, parts, H, D]
    s_all = torch.stack([s for _, s in parts], dim=-2)  # [B, n, parts, H]
    return xt.merge_states(v_all, s_all)


@pytest.mark.parametrize("dtype", DTYPES16, ids=DT_IDS)
@pytest.mark.parametrize("merge", ["merge_state", "merge_states"])
def test_host_merge_of_parts_is_attention_of_the_union(merge, dtype):
    """Keys split in parts (one of them empty: lse -inf, it contributes nothing), each part's
    attention with its LSE, merged: the attention over all keys (the reference's, and the op's own
    over all keys). Not causal: a causal mask aligns each part to its own end."""
    case = dense(2, 7, 77, 8, 2, 64, dtype, CPU, 5, attrs={"logits_soft_cap": 30.0, **LSE})
    out, lse = _split_and_merge(case, [0, 20, 20, 21, 77], merge)
    ref_out, ref_lse = reference(case)
    assert_close(out, lse, ref_out, ref_lse, dtype, case.attrs, what=f"{merge} of parts")
    direct_out, direct_lse = xt.attention(*case.args(), **case.attrs)
    assert_close(out, lse, direct_out.double().numpy(), direct_lse.double().numpy(), dtype,
                 what=f"{merge} of parts vs the op over all keys")


def test_host_cascade_decode_over_two_page_tables():
    """Decode over a shared prefix's pages and each request's own pages separately, merged with
    merge_state: decode over the concatenated page table (cascade attention)."""
    dtype = torch.bfloat16
    gen = torch.Generator().manual_seed(6)
    ps, hq, hkv, d = 16, 8, 2, 128
    cache_k = randn((20, ps, hkv, d), dtype, CPU, gen)
    cache_v = randn((20, ps, hkv, d), dtype, CPU, gen)
    q = randn((3, hq, d), dtype, CPU, gen)
    prefix = [17, 3, 8]  # 3 full pages shared by the 3 requests
    own = [[5, 0], [11], [19, 2, 6]]
    last = [7, 16, 1]
    i32 = functools.partial(torch.tensor, dtype=torch.int32)

    def table(pages, lasts):
        return (i32([0, *np.cumsum([len(p) for p in pages])]), i32([x for p in pages for x in p]), i32(lasts))

    a = xt.decode_paged(q, cache_k, cache_v, *table([prefix] * 3, [ps] * 3), return_lse=True)
    b = xt.decode_paged(q, cache_k, cache_v, *table(own, last), return_lse=True)
    out, lse = xt.merge_state(a[0], a[1], b[0], b[1])
    full = Case("decode_paged", {"q": q, "k_cache": cache_k, "v_cache": cache_v,
                                 **dict(zip(["kv_indptr", "kv_indices", "kv_last_page_len"],
                                            table([prefix + o for o in own], last)))}, LSE)
    ref_out, ref_lse = reference(full)
    assert_close(out, lse, ref_out, ref_lse, dtype, what="cascade")


# ------------------------------------------------------------------ the references themselves


def test_reference_matches_brute_force_and_sdpa():
    """The float64 reference against a per-element loop (GQA, causal bottom-right, window, soft
    cap) and against torch's scaled_dot_product_attention (float64, q_len == kv_len); a wrong
    computation (causal vs not, another scale) differs from it, and assert_close rejects it."""
    rng = np.random.default_rng(0)
    n, L, hq, hkv, d = 3, 6, 4, 2, 64
    q, k, v = (rng.standard_normal(s) for s in ((1, n, hq, d), (1, L, hkv, d), (1, L, hkv, d)))
    attrs = {"causal": True, "window_left": 2, "logits_soft_cap": 3.0, "sm_scale": 0.2}
    out, lse = R.attention(q, k, v, **attrs)
    for t in range(n):
        for h in range(hq):
            kh = h // (hq // hkv)
            seen = [p for p in range(L) if p <= t + L - n and p >= t + L - n - 2]
            s = [3.0 * math.tanh(0.2 * float(q[0, t, h] @ k[0, p, kh]) / 3.0) for p in seen]
            w = np.exp(np.array(s) - max(s))
            want = sum(wi * v[0, p, kh] for wi, p in zip(w, seen)) / w.sum()
            np.testing.assert_allclose(out[0, t, h], want, rtol=1e-12, atol=1e-12)
            assert abs(lse[0, t, h] - (max(s) + math.log(w.sum()))) < 1e-12

    qs = rng.standard_normal((2, 9, 8, 64))
    ks, vs = rng.standard_normal((2, 9, 2, 64)), rng.standard_normal((2, 9, 2, 64))
    rep = functools.partial(np.repeat, repeats=4, axis=2)
    for causal in (False, True):
        got, _ = R.attention(qs, ks, vs, causal=causal)
        want = torch.nn.functional.scaled_dot_product_attention(
            *(torch.from_numpy(x).transpose(1, 2) for x in (qs, rep(ks), rep(vs))),
            is_causal=causal).transpose(1, 2).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    wrong, _ = R.attention(qs, ks, vs, causal=False)
    right, right_lse = R.attention(qs, ks, vs, causal=True)
    assert np.abs(wrong - right).max() > 0.1
    scaled, _ = R.attention(qs, ks, vs, causal=True, sm_scale=0.2)
    assert np.abs(scaled - right).max() > 0.05
    # the comparison itself fails on a wrong output, a NaN, a wrong LSE, a non-zero dead row
    good = torch.from_numpy(right).to(torch.bfloat16)
    lse32 = torch.from_numpy(right_lse).float()
    assert_close(good, lse32, right, right_lse, torch.bfloat16)
    for bad_out, bad_lse in [(torch.from_numpy(wrong).to(torch.bfloat16), lse32),
                             (good.clone().index_fill_(1, torch.tensor([3]), float("nan")), lse32),
                             (good, lse32 + 0.01), (good, lse32.clone().fill_(-math.inf))]:
        with pytest.raises(AssertionError):
            assert_close(bad_out, bad_lse, right, right_lse, torch.bfloat16)
    dead_ref = np.full_like(right_lse, -math.inf)
    with pytest.raises(AssertionError, match="must be 0"):
        assert_close(good, None, np.zeros_like(right), dead_ref, torch.bfloat16)


@pytest.mark.parametrize("case", [
    lambda: dense(2, 7, 37, 8, 2, 64, torch.bfloat16, CPU, attrs={"causal": True,
                                                                   "window_left": 4}),
    lambda: dense(1, 5, 0, 8, 2, 64, torch.bfloat16, CPU),
    lambda: varlen([7, 0, 1, 37], [37, 5, 0, 77], 8, 2, 64, torch.float16, CPU,
                   attrs={"logits_soft_cap": 5.0}),
    lambda: paged(PAGED_Q, PAGED_KV, 5, "HND", 8, 1, 64, torch.float16, CPU, attrs=CAUSAL),
    lambda: decode([37, 0, 77], 4, 16, "NHD", 8, 2, 64, torch.bfloat16, CPU),
    lambda: decode([37, 0, 77], None, 1, "HND", 8, 8, 64, torch.bfloat16, CPU),
    lambda: merge_state_case((5, 4, 64), torch.float16, CPU),
    lambda: merge_states_case((2, 3), 4, 4, 64, torch.float16, CPU),
], ids=["dense", "dense-kv0", "varlen", "paged", "decode4", "decode1", "merge_state",
        "merge_states"])
def test_torch_reference_matches_numpy_reference(case):
    """The GPU tests' reference (the same code in torch float64) is the NumPy one. The bound,
    1e-7, is what two float64 BLAS builds may differ by on another CPU (a CI machine's torch
    einsum was once 2.5e-9 off NumPy's on the dense case) and still 1e5 times tighter than any
    op's tolerance: a wrong mask, scale or index shows as 1e-2 or more."""
    c = case()
    a_out, a_lse = reference(c, "numpy")
    b_out, b_lse = reference(c, "torch")
    np.testing.assert_allclose(b_out, a_out, rtol=1e-7, atol=1e-7)
    assert np.array_equal(np.isneginf(a_lse), np.isneginf(b_lse))
    fin = np.isfinite(a_lse)
    np.testing.assert_allclose(b_lse[fin], a_lse[fin], rtol=1e-7, atol=1e-7)


# ------------------------------------------------------------------ the same bits: NumPy


@pytest.mark.parametrize("op", ["attention", "attention_varlen", "attention_paged",
                                "decode_paged", "merge_states"])
def test_host_numpy_same_bits_as_torch(op):
    import xkernels.numpy as xn

    case = {
        "attention": lambda: _dense("packed-gqa4-causal-lse", torch.bfloat16),
        "attention_varlen": lambda: varlen([7, 0, 37], [37, 5, 77], 8, 2, 64, torch.bfloat16,
                                           CPU, attrs={**CAUSAL, **LSE}),
        "attention_paged": lambda: paged(PAGED_Q, PAGED_KV, 5, "HND", 8, 2, 64, torch.float16,
                                         CPU, attrs=LSE),
        "decode_paged": lambda: decode([37, 0, 77], 4, 16, "NHD", 8, 1, 128, torch.bfloat16, CPU,
                                       attrs=LSE),
        "merge_states": lambda: merge_states_case((4,), 3, 4, 64, torch.bfloat16, CPU),
    }[op]()
    want = as_tuple(getattr(xt, op)(*case.args(), **case.attrs))
    got = as_tuple(getattr(xn, op)(*[to_numpy(a) for a in case.args()], **case.attrs))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert torch.equal(bits(from_numpy(g)), bits(w)), op


# ------------------------------------------------------------------ validation


def _small(op: str, dtype=torch.float16) -> Case:
    """Small valid inputs of each op (CPU)."""
    return {
        "attention": lambda: dense(2, 5, 9, 4, 2, 64, dtype, CPU),
        "attention_varlen": lambda: varlen([3, 4], [4, 5], 4, 2, 64, dtype, CPU),
        "attention_paged": lambda: paged([3, 4], [6, 9], 4, "NHD", 4, 2, 64, dtype, CPU,
                                         extra_pages=1),
        "decode_paged": lambda: decode([6, 9], None, 4, "NHD", 4, 2, 64, dtype, CPU,
                                       extra_pages=1),
        "merge_state": lambda: merge_state_case((3, 4, 64), dtype, CPU),
        "merge_states": lambda: merge_states_case((3,), 2, 4, 64, dtype, CPU),
    }[op]()


def _with(case: Case, **inputs) -> Case:
    return Case(case.op, {**case.inputs, **inputs}, case.attrs, case.desc)


def _bad_cases():
    """(id, op, case builder, extra call kwargs, exception, message regex)."""
    f16 = torch.float16
    att = functools.partial(_small, "attention")
    var = functools.partial(_small, "attention_varlen")
    pag = functools.partial(_small, "attention_paged")
    dec = functools.partial(_small, "decode_paged")
    i32 = functools.partial(torch.tensor, dtype=torch.int32)
    return [
        ("float32-q", "attention", lambda: _small("attention", torch.float32), {}, TypeError,
         r"attention: q must be float16 or bfloat16, got float32"),
        ("k-other-dtype", "attention",
         lambda: _with(att(), k=att().inputs["k"].to(torch.bfloat16)), {}, TypeError,
         r"attention: k must have q's dtype float16, got bfloat16"),
        ("head_dim-96", "attention", lambda: dense(2, 5, 9, 4, 2, 96, f16, CPU), {}, ValueError,
         r"attention: head_dim \(q's last dimension\) must be one of 64, 128, 256, got 96"),
        ("heads-6-over-4", "attention", lambda: dense(2, 5, 9, 6, 4, 64, f16, CPU), {},
         ValueError, (r"attention: num_qo_heads \(6, q\) must be a multiple of num_kv_heads "
                     r"\(4, k\)")),
        ("q-3d", "attention", lambda: _with(att(), q=att().inputs["q"][0]), {}, ValueError,
         r"attention: q must be 4-D \[batch, q_len, num_qo_heads, head_dim\]"),
        ("q-last-dim-strided", "attention",
         lambda: _with(att(), q=randn((2, 5, 4, 128), f16, CPU, torch.Generator())[..., ::2]),
         {}, ValueError, r"attention: q must be contiguous in its last dimension, got stride 2"),
        ("out-shape", "attention", att, {"out": torch.empty(2, 5, 4, 128, dtype=f16)},
         ValueError, (r"attention: out must have shape \(2, 5, 4, 64\) \(q's shape\), got "
                     r"\(2, 5, 4, 128\)")),
        ("out-dtype", "attention", att, {"out": torch.empty(2, 5, 4, 64, dtype=torch.bfloat16)},
         TypeError, r"attention: out must have q's dtype float16, got bfloat16"),
        ("lse-without-return_lse", "attention", att,
         {"lse": torch.empty(2, 5, 4, dtype=torch.float32)}, ValueError,
         r"attention: lse must be empty when return_lse is 0, got shape \(2, 5, 4\)"),
        ("lse-shape", "attention", att,
         {"return_lse": True, "lse": torch.empty(2, 5, 3, dtype=torch.float32)}, ValueError,
         r"attention: lse must have shape \(2, 5, 4\) \(q's shape without head_dim\)"),
        ("lse-dtype", "attention", att,
         {"return_lse": True, "lse": torch.empty(2, 5, 4, dtype=f16)}, TypeError,
         r"attention: lse must be float32, got float16"),
        ("window_left--2", "attention", att, {"window_left": -2}, ValueError,
         r"attention: window_left must be -1 \(no window\) or >= 0, got -2"),
        ("sm_scale--1", "attention", att, {"sm_scale": -1.0}, ValueError,
         r"attention: sm_scale must be > 0 and finite"),
        ("sm_scale-inf", "attention", att, {"sm_scale": math.inf}, ValueError,
         r"attention: sm_scale must be > 0 and finite"),
        ("softcap-negative", "attention", att, {"logits_soft_cap": -1.0}, ValueError,
         r"attention: logits_soft_cap must be >= 0 and finite"),
        ("cu_seqlens_k-length", "attention_varlen",
         lambda: _with(var(), cu_seqlens_k=i32([0, 4, 9, 9])), {}, ValueError,
         (r"attention_varlen: cu_seqlens_k must have 3 entries \(cu_seqlens_q's length, "
         r"batch \+ 1\), got 4")),
        ("cu_seqlens_q-int64", "attention_varlen",
         lambda: _with(var(), cu_seqlens_q=torch.tensor([0, 3, 7])), {}, TypeError,
         r"attention_varlen: cu_seqlens_q must be int32, got int64"),
        ("cu_seqlens_q-past-q", "attention_varlen",
         lambda: _with(var(), cu_seqlens_q=i32([0, 3, 8])), {}, ValueError,
         (r"attention_varlen: cu_seqlens_q must be non-decreasing, from 0 up to 7 \(q's tokens\)"
         r", got 8 at index 2")),
        ("cu_seqlens_k-decreasing", "attention_varlen",
         lambda: _with(var(), cu_seqlens_k=i32([0, 5, 4])), {}, ValueError,
         r"attention_varlen: cu_seqlens_k must be non-decreasing"),
        ("kv_indptr-decreasing", "attention_paged",
         lambda: _with(pag(), kv_indptr=i32([0, 3, 2])), {}, ValueError,
         (r"attention_paged: kv_indptr must be non-decreasing, from 0 up to 5 \(kv_indices' "
         r"length\), got 2 at index 2 after 3")),
        ("kv_indptr-decreasing", "decode_paged",
         lambda: _with(dec(), kv_indptr=i32([0, 3, 2])), {}, ValueError,
         r"decode_paged: kv_indptr must be non-decreasing"),
        ("kv_indices-out-of-range", "attention_paged",
         lambda: _with(pag(), kv_indices=i32([0, 1, 2, 3, 6])), {}, ValueError,
         (r"attention_paged: kv_indices values must be in \[0, 5\] \(pages of k_cache\), got 6 "
         r"at index 4")),
        ("kv_indices-negative", "decode_paged",
         lambda: _with(dec(), kv_indices=i32([0, 1, -1, 3, 4])), {}, ValueError,
         r"decode_paged: kv_indices values must be in \[0, 5\]"),
        ("kv_last_page_len-past-page", "decode_paged",
         lambda: _with(dec(), kv_last_page_len=i32([2, 5])), {}, ValueError,
         r"decode_paged: kv_last_page_len values must be in \[0, 4\]"),
        ("kv_last_page_len-length", "attention_paged",
         lambda: _with(pag(), kv_last_page_len=i32([2])), {}, ValueError,
         r"attention_paged: kv_last_page_len must have 2 entries \(batch\), got 1"),
        ("v_cache-shape", "attention_paged",
         lambda: _with(pag(), v_cache=pag().inputs["v_cache"][:, :2]), {}, ValueError,
         r"attention_paged: v_cache must have k_cache's shape"),
        ("heads-6-over-4", "decode_paged",
         lambda: decode([6, 9], None, 4, "NHD", 6, 4, 64, f16, CPU), {}, ValueError,
         (r"decode_paged: num_qo_heads \(6, q\) must be a multiple of num_kv_heads \(4, "
         r"k_cache\)")),
        ("q-2d", "decode_paged", lambda: _with(dec(), q=dec().inputs["q"][0]), {}, ValueError,
         r"decode_paged: q must be 3-D \[batch, num_qo_heads, head_dim\] or 4-D"),
        ("kv_layout", "decode_paged", dec, {"kv_layout": "NDH"}, ValueError,
         r"kv_layout must be one of \('NHD', 'HND'\), got 'NDH'"),
        ("num_splits-negative", "decode_paged", dec, {"num_splits": -1}, ValueError,
         r"decode_paged: num_splits must be in \[0, 65535\] \(0: chosen\), got -1"),
        ("s_a-float16", "merge_state",
         lambda: _with(_small("merge_state"), s_a=_small("merge_state").inputs["s_a"].half()),
         {}, TypeError, r"merge_state: s_a must be float32, got float16"),
        ("v_b-shape", "merge_state",
         lambda: _with(_small("merge_state"), v_b=_small("merge_state").inputs["v_b"][:2]), {},
         ValueError, r"merge_state: v_b must have v_a's shape"),
        ("v-2d", "merge_states",
         lambda: _with(_small("merge_states"), v=_small("merge_states").inputs["v"][0, 0]), {},
         ValueError, (r"merge_states: v must be at least 3-D \[\.\.\., num_states, heads, "
                     r"head_dim\]")),
        ("s-shape", "merge_states",
         lambda: _with(_small("merge_states"), s=_small("merge_states").inputs["s"][:, :1]), {},
         ValueError, r"merge_states: s must have shape \(3, 2, 4\)"),
    ]


BAD = _bad_cases()


@pytest.mark.parametrize("op,build,kw,exc,msg", [b[1:] for b in BAD],
                         ids=[f"{b[1]}-{b[0]}" for b in BAD])
def test_host_errors_name_the_argument(op, build, kw, exc, msg):
    """A typed error naming the argument, and the outputs (poisoned) left untouched."""
    case = build()
    kw = dict(kw)
    spec = case.spec
    shapes = {x.name: tuple(case.inputs[x.name].shape) for x in spec.inputs}
    attrs = {**case.attrs, **{k: v for k, v in kw.items() if k not in ("out", "lse")}}
    has_lse = not spec.attrs or attrs.get("return_lse", False)
    if "out" not in kw:
        try:
            kw["out"] = torch.full(spec.output_shape(spec.outputs[0], shapes), float("nan"),
                                   dtype=case.dtype)
        except (IndexError, ValueError):  # a shape that has no output shape
            kw["out"] = torch.full((1,), float("nan"), dtype=case.dtype)
    if has_lse and "lse" not in kw:
        try:
            kw["lse"] = torch.full(spec.output_shape(spec.outputs[1], shapes), float("nan"))
        except (IndexError, ValueError):
            kw["lse"] = torch.full((1,), float("nan"))
    outs = {k: kw[k] for k in ("out", "lse") if k in kw}
    before = {k: v.clone() for k, v in outs.items()}
    with pytest.raises(exc, match=msg):
        getattr(xt, op)(*case.args(), **{k: v for k, v in kw.items() if k not in outs},
                        **{k: v for k, v in case.attrs.items() if k not in kw}, **outs)
    for k, v in outs.items():
        assert torch.equal(bits(v), bits(before[k])), f"{op}: {k} written before the error"


def test_host_num_splits_is_ignored_on_the_host():
    """num_splits only shapes the GPU's work: on the host every value gives the same bits."""
    case = _dense("gqa4-causal-window5-lse", torch.bfloat16)
    want = call(case)
    for n in (1, 3, 64):
        got = call(case.with_attrs(num_splits=n))
        assert all(torch.equal(bits(g), bits(w)) for g, w in zip(got, want))


# ================================================================== GPU
#
# Against the float64 reference computed in torch float64 on the GPU. The cross product is
# chosen, not exhaustive: what selects a code path is (1) the tile shape, from the query rows
# per (request, kv head) = q_len * group: decode (<= 16 rows), mid (<= 64, or head_dim 256),
# prefill (more, head_dim <= 128), and the head dim (three instantiations each); (2) the key
# range vs the 64-key tiles: 1 key, 37 (one partial tile), 1013 (16 tiles, the last partial),
# 4097 (65 tiles); (3) the masks' boundary tiles: causal with q_len == kv_len, < kv_len (bottom
# right) and > kv_len (rows that see nothing), windows, soft cap; (4) split-KV, which the plan
# picks whenever the query tiles alone fill less than 90% of the SMs (most small-batch cases
# below) and which num_splits forces; (5) the addressing modes: dense, packed-QKV views, ragged
# (batches over 32 requests: the tile search's second round), paged with page sizes 1, 16, 5 in
# both layouts, decode with 1 and 4 tokens; (6) the sm90 kernel's grid: persistent over several
# rounds of items, or one block per tile (keys and values past 64 MiB: 18 million elements), and
# its key tiles (128 keys, or 176 for dense head_dim 128 from 4096 keys on). The reference
# matrices run in fp16 and bf16, the feature tests (forced splits, strided outputs, graphs,
# compile, frameworks) in one dtype each: shapes of at most a few million elements but those past
# 64 MiB and the three of 4100 keys.

# id -> (batch, q_len, kv_len, hq, hkv, head_dim, layout, attrs)
GPU_DENSE = {
    "decode-tile-q1-kv1": (4, 1, 1, 8, 8, 64, "contiguous", {}),
    "decode-tile-mqa-q1-kv1013-lse": (2, 1, 1013, 8, 1, 128, "contiguous", LSE),
    "decode-tile-q7-kv4097-causal-lse": (1, 7, 4097, 8, 8, 64, "contiguous", {**CAUSAL, **LSE}),
    "mid-d256-q7-kv37-causal-lse": (2, 7, 37, 8, 2, 256, "contiguous", {**CAUSAL, **LSE}),
    "mid-d128-gqa2-q16-kv37-softcap5-lse": (3, 16, 37, 8, 4, 128, "contiguous",
                                            {"logits_soft_cap": 5.0, **LSE}),
    "prefill-q127-kv1013-causal-lse": (2, 127, 1013, 8, 2, 128, "contiguous", {**CAUSAL, **LSE}),
    "prefill-mqa-q127-window50": (1, 127, 127, 8, 1, 64, "contiguous",
                                  {"causal": True, "window_left": 50}),
    "prefill-q1000-causal-lse": (2, 1000, 1000, 8, 8, 128, "contiguous", {**CAUSAL, **LSE}),
    "prefill-q1000-not-causal-lse": (1, 1000, 1000, 4, 4, 64, "contiguous", LSE),
    "mid-d256-q1000-kv1013-causal-lse": (1, 1000, 1013, 8, 2, 256, "contiguous",
                                         {**CAUSAL, **LSE}),
    "prefill-mqa-q1000-kv4097-window300-lse": (2, 1000, 4097, 8, 1, 128, "contiguous",
                                               {"causal": True, "window_left": 300, **LSE}),
    "prefill-q127-kv4097-softcap30-scale-lse": (1, 127, 4097, 8, 2, 64, "contiguous",
                                                {"logits_soft_cap": 30.0, "sm_scale": 0.25,
                                                 **LSE}),
    "mid-d64-window100-not-causal-q9-kv1013-lse": (2, 9, 1013, 8, 2, 64, "contiguous",
                                                   {"window_left": 100, **LSE}),
    "causal-q1000-over-kv37-lse": (2, 1000, 37, 8, 2, 64, "contiguous", {**CAUSAL, **LSE}),
    "causal-d256-q7-over-kv1-lse": (1, 7, 1, 8, 8, 256, "contiguous", {**CAUSAL, **LSE}),
    "kv0-lse": (1, 7, 0, 8, 2, 128, "contiguous", LSE),
    # logits of std ~11: peaky rows whose running max moves late (O rescaled), big exponents
    "peaky-scale1-q127-kv1013-causal-lse": (1, 127, 1013, 8, 2, 128, "contiguous",
                                            {"causal": True, "sm_scale": 1.0, **LSE}),
    "packed-q1000-causal": (2, 1000, 1000, 8, 2, 128, "packed", CAUSAL),
    "packed-d256-q127-window16-lse": (1, 127, 127, 8, 8, 256, "packed",
                                      {"window_left": 16, **LSE}),
    # the sm90 kernel's grids (sm90.h): persistent over more (tile, request, head) items than
    # SMs (a block's next item: Q reloaded, the stages carried over), items without keys among
    # them, a window; one block per tile where the keys and values pass 64 MiB
    "rounds-gqa4-q600-causal-lse": (3, 600, 600, 16, 4, 128, "contiguous", {**CAUSAL, **LSE}),
    "rounds-d64-q600-over-kv300-causal-lse": (4, 600, 300, 16, 4, 64, "contiguous",
                                              {**CAUSAL, **LSE}),
    "rounds-gqa8-q600-kv900-window200": (3, 600, 900, 16, 2, 128, "contiguous",
                                         {"window_left": 200}),
    "kv70mib-q130-kv9000-causal-lse": (2, 130, 9000, 8, 8, 128, "contiguous", {**CAUSAL, **LSE}),
    # head_dim 64's 192-row tiles of three consumer groups, ending at the last query: a first
    # tile of 8 rows (184 before token 0), one block per tile past 64 MiB
    "kv70mib-d64-q200-kv9000-causal-lse": (2, 200, 9000, 16, 16, 64, "contiguous",
                                           {**CAUSAL, **LSE}),
    # the sm90 kernel's 176-key tiles (dense head_dim 128 from 4096 keys on, no window): key
    # counts that are not multiples of 176, persistent grids and one block per tile, soft cap,
    # the bottom-right causal mask with fewer queries than keys, packed QKV views
    "keys176-gqa4-q300-kv4100-softcap20-lse": (2, 300, 4100, 32, 8, 128, "contiguous",
                                               {"logits_soft_cap": 20.0, **LSE}),
    "keys176-q1500-kv4100-causal-lse": (1, 1500, 4100, 8, 2, 128, "contiguous",
                                        {**CAUSAL, **LSE}),
    "keys176-packed-mqa-q4100-causal": (1, 4100, 4100, 4, 1, 128, "packed", CAUSAL),
}


@gpu
@pytest.mark.parametrize("dtype", DTYPES16, ids=DT_IDS)
@pytest.mark.parametrize("key", list(GPU_DENSE))
def test_gpu_attention(key, dtype):
    b, n, L, hq, hkv, d, layout, attrs = GPU_DENSE[key]
    check(dense(b, n, L, hq, hkv, d, dtype, "cuda", 10, layout, attrs), backend="torch")


# id -> (q_lens, kv_lens, hq, hkv, head_dim, layout, attrs)
def _ragged_lens(batch, seed, q_max, extra_max, zero_every=7):
    g = torch.Generator().manual_seed(seed)
    q = torch.randint(0, q_max + 1, (batch,), generator=g).tolist()
    kv = [n + int(e) for n, e in zip(q, torch.randint(0, extra_max + 1, (batch,), generator=g))]
    for i in range(0, batch, zero_every):  # empty requests
        q[i] = 0
    kv[3] = 0  # a request without keys
    q[3] = max(q[3], 2)
    return q, kv


R40_Q, R40_KV = _ragged_lens(40, 11, 200, 300)
GPU_VARLEN = {
    "gqa4-d128-causal-lse": ([7, 0, 1, 127, 1000], [37, 5, 0, 1013, 1000], 8, 2, 128,
                             "contiguous", {**CAUSAL, **LSE}),
    "mha-d64-window64-lse": ([7, 0, 1, 127, 1000], [37, 5, 0, 1013, 1000], 8, 8, 64,
                             "contiguous", {"causal": True, "window_left": 64, **LSE}),
    "batch40-gqa2-d64-causal-lse": (R40_Q, R40_KV, 8, 4, 64, "contiguous", {**CAUSAL, **LSE}),
    "batch40-decode-mqa-d256-lse": ([0 if i % 9 == 0 else 1 for i in range(40)],
                                    [1 + (i * 97) % 700 for i in range(40)], 8, 1, 256,
                                    "contiguous", LSE),
    "packed-gqa4-d128-causal": ([1000, 0, 127, 37, 1], [1000, 0, 127, 37, 1], 8, 2, 128,
                                "packed", CAUSAL),
    "d256-softcap30-lse": ([127, 7], [4097, 37], 8, 2, 256, "contiguous",
                           {"logits_soft_cap": 30.0, **LSE}),
}


@gpu
@pytest.mark.parametrize("dtype", DTYPES16, ids=DT_IDS)
@pytest.mark.parametrize("key", list(GPU_VARLEN))
def test_gpu_attention_varlen(key, dtype):
    q_lens, kv_lens, hq, hkv, d, layout, attrs = GPU_VARLEN[key]
    check(varlen(q_lens, kv_lens, hq, hkv, d, dtype, "cuda", 12, layout, 0, attrs),
          backend="torch")


# Each kernel by name (kernel="sm80" / "sm90") on every dense and ragged case of head_dim 64 or
# 128, decode-shaped ones too (the sm90 kernel's 128-row tiles mostly empty), so that neither
# path is left untested where "auto" picks the other. bf16 here; "auto" above covers fp16.
KERNEL_DENSE = [k for k, v in GPU_DENSE.items() if v[5] in (64, 128)]
KERNEL_VARLEN = [k for k, v in GPU_VARLEN.items() if v[4] in (64, 128)]


def _need_kernel(kernel: str):
    if kernel == "sm90" and torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("the sm90 kernel runs on sm_90 GPUs only")


@gpu
@pytest.mark.parametrize("kernel", ["sm80", "sm90"])
@pytest.mark.parametrize("key", KERNEL_DENSE)
def test_gpu_attention_kernel(key, kernel):
    _need_kernel(kernel)
    b, n, L, hq, hkv, d, layout, attrs = GPU_DENSE[key]
    check(dense(b, n, L, hq, hkv, d, torch.bfloat16, "cuda", 10, layout,
                {**attrs, "kernel": kernel}), backend="torch")


# Packed q, k, v share their token count: no tail of keys past the last request there.
KERNEL_VARLEN_TAILS = [(key, tail) for key in KERNEL_VARLEN for tail in (0, 300)
                       if not (tail and GPU_VARLEN[key][5] == "packed")]


@gpu
@pytest.mark.parametrize("kernel", ["sm80", "sm90"])
@pytest.mark.parametrize("key,tail", KERNEL_VARLEN_TAILS,
                         ids=[f"{k}-{'nan-tail300' if t else 'tail0'}" for k, t in KERNEL_VARLEN_TAILS])
def test_gpu_attention_varlen_kernel(key, tail, kernel):
    """`tail` rows of NaN after the last request's keys: a key tile that runs past a request's
    end must not let them (or the next request's values) into the output."""
    _need_kernel(kernel)
    q_lens, kv_lens, hq, hkv, d, layout, attrs = GPU_VARLEN[key]
    check(varlen(q_lens, kv_lens, hq, hkv, d, torch.bfloat16, "cuda", 12, layout, tail,
                 {**attrs, "kernel": kernel}), backend="torch")


@gpu
def test_gpu_sm90_kernel_refuses_what_it_cannot_run():
    """kernel="sm90" where that kernel cannot run: a ValueError naming why, not a launch."""
    dtype = torch.bfloat16
    cases = [(dense(1, 127, 127, 8, 8, 256, dtype, "cuda", 1), {}, "head_dim 64 or 128"),
             (dense(1, 127, 127, 8, 8, 128, dtype, "cuda", 1), {"num_splits": 3}, "num_splits")]
    if torch.cuda.get_device_capability()[0] != 9:
        cases = [(dense(1, 127, 127, 8, 8, 128, dtype, "cuda", 1), {}, "sm_90 GPU")]
    for case, extra, msg in cases:
        with pytest.raises(ValueError, match=msg):
            call(case, "contiguous", {**case.attrs, "kernel": "sm90", **extra}, False)


GPU_PAGED_Q, GPU_PAGED_KV = [7, 0, 1, 127, 1000], [37, 5, 0, 1013, 1013]
GPU_PAGED = {
    (1, "NHD"): (8, 2, 128, {**CAUSAL, **LSE}),
    (1, "HND"): (8, 8, 64, LSE),
    (16, "NHD"): (8, 1, 256, {"causal": True, "window_left": 100, **LSE}),
    (16, "HND"): (8, 2, 128, {**CAUSAL, "logits_soft_cap": 30.0, **LSE}),
    (5, "NHD"): (8, 8, 64, CAUSAL),
    (5, "HND"): (8, 2, 256, {**CAUSAL, **LSE}),
}


@gpu
@pytest.mark.parametrize("dtype", DTYPES16, ids=DT_IDS)
@pytest.mark.parametrize("page_size,layout", list(GPU_PAGED),
                         ids=[f"page{p}-{l}" for p, l in GPU_PAGED])
def test_gpu_attention_paged(page_size, layout, dtype):
    hq, hkv, d, attrs = GPU_PAGED[(page_size, layout)]
    check(paged(GPU_PAGED_Q, GPU_PAGED_KV, page_size, layout, hq, hkv, d, dtype, "cuda", 13,
                attrs), backend="torch")


@gpu
@pytest.mark.parametrize("dtype", DTYPES16, ids=DT_IDS)
def test_gpu_attention_paged_batch40(dtype):
    """A ragged batch over 32 requests (the tile search's second round) over a paged cache."""
    check(paged(R40_Q, R40_KV, 16, "HND", 8, 2, 128, dtype, "cuda", 14, {**CAUSAL, **LSE},
                share_first=True), backend="torch")


# Decode: batch 1 over 3000 keys (the plan splits it: check num_splits 0, 1 and 3 against the
# reference), batch 33 of mixed lengths (0, 1, ... 3000); 1 token (3-D q) and 4 (speculative).
DECODE_B1 = {
    "page16-NHD-mqa-d128-lse": (16, "NHD", 8, 1, 128, LSE),
    "page5-HND-gqa4-d256-window1000-lse": (5, "HND", 8, 2, 256, {"window_left": 1000, **LSE}),
    "page1-NHD-mha-d64-softcap30": (1, "NHD", 8, 8, 64, {"logits_soft_cap": 30.0}),
}


@gpu
@pytest.mark.parametrize("num_splits", [0, 1, 3])
@pytest.mark.parametrize("q_len", [None, 4], ids=["q1", "q4"])
@pytest.mark.parametrize("dtype", DTYPES16, ids=DT_IDS)
@pytest.mark.parametrize("key", list(DECODE_B1))
def test_gpu_decode_batch1_long(key, dtype, q_len, num_splits):
    ps, layout, hq, hkv, d, attrs = DECODE_B1[key]
    case = decode([3000], q_len, ps, layout, hq, hkv, d, dtype, "cuda", 15,
                  {**attrs, "num_splits": num_splits})
    check(case, backend="torch")


B33_KV = [0, 1, 3000] + [(i * 389) % 3001 for i in range(3, 33)]


@gpu
@pytest.mark.parametrize("hq,hkv", [(8, 2), (32, 8)], ids=["gqa4-66blocks", "gqa4-264blocks"])
@pytest.mark.parametrize("page_size,layout", [(16, "NHD"), (1, "HND"), (5, "NHD")],
                         ids=["page16-NHD", "page1-HND", "page5-NHD"])
@pytest.mark.parametrize("q_len", [None, 4], ids=["q1", "q4"])
@pytest.mark.parametrize("dtype", DTYPES16, ids=DT_IDS)
def test_gpu_decode_batch33(dtype, q_len, page_size, layout, hq, hkv):
    """33 requests x hkv blocks: 66 fit one wave of an H100's 132 SMs (the wide decode tile, 8
    warps), 264 do not (the 4-warp decode tile, several blocks per SM)."""
    check(decode(B33_KV, q_len, page_size, layout, hq, hkv, 128, dtype, "cuda", 16,
                 {**CAUSAL, **LSE}), backend="torch")


@gpu
@pytest.mark.parametrize("num_splits", [0, 1], ids=["planned", "unsplit"])
@pytest.mark.parametrize("dtype", DTYPES16, ids=DT_IDS)
def test_gpu_decode_one_wave_split_in_two(dtype, num_splits):
    """15 requests x 8 kv heads over 8200 keys: 120 blocks, one wave of the wide decode tile on
    132 SMs, which the plan splits in two for the 4-warp tile at two blocks per SM (decode.h's
    PlanSplits; 4100 keys a block); and the same call unsplit, on the wide tile."""
    check(decode([8200] * 15, None, 16, "NHD", 32, 8, 128, dtype, "cuda", 30,
                  {**LSE, "num_splits": num_splits}), backend="torch")


@gpu
@pytest.mark.parametrize("num_splits", [1, 2, 3, 16, 80])
def test_gpu_forced_splits(num_splits):
    """Forced split counts on dense and ragged prefill: more splits than key tiles (empty
    splits: -inf partial LSEs), splits with rows masked out entirely (causal q > kv)."""
    dtype = torch.bfloat16
    for case in (dense(2, 7, 37, 8, 2, 128, dtype, "cuda", 17, attrs={**CAUSAL, **LSE}),
                 dense(1, 127, 4097, 8, 1, 64, dtype, "cuda", 18,
                       attrs={"causal": True, "window_left": 700, **LSE}),
                 dense(1, 300, 100, 8, 8, 256, dtype, "cuda", 19, attrs={**CAUSAL, **LSE}),
                 varlen([7, 0, 1, 127], [37, 5, 0, 1013], 8, 2, 64, dtype, "cuda", 20,
                        attrs={**CAUSAL, **LSE})):
        check(case.with_attrs(num_splits=num_splits), backend="torch")


@gpu
@pytest.mark.parametrize("num_splits", [1, 4])
@pytest.mark.parametrize("which", [0, 1], ids=["varlen", "paged"])
def test_gpu_rows_outside_the_requests_are_left_alone(which, num_splits):
    """Also through split-KV's merge (which skips the rows of no request)."""
    _check_outside_rows_left_alone(_outside_rows_cases("cuda")[which], "torch", num_splits)


@gpu
@pytest.mark.parametrize("layout", ["NHD", "HND"])
def test_gpu_paged_last_page_len_zero(layout):
    case = paged([3, 4, 2], [10, 9, 5], 5, layout, 8, 2, 64, torch.bfloat16, "cuda", 10,
                 {**CAUSAL, **LSE})
    case.inputs["kv_last_page_len"][0] = 0
    case.inputs["kv_last_page_len"][2] = 0
    check(case, backend="torch")


@gpu
@pytest.mark.parametrize("op", ["attention", "attention_varlen", "attention_paged",
                                "decode_paged"])
def test_gpu_strided_outputs_and_determinism(op):
    """out and lse as views of padded buffers (the padding left alone), split and not; and the
    same bits from call to call."""
    dtype = torch.float16
    case = {
        "attention": lambda: dense(2, 127, 1013, 8, 2, 128, dtype, "cuda", 21,
                                   attrs={**CAUSAL, **LSE}),
        "attention_varlen": lambda: varlen([7, 0, 127], [37, 5, 1013], 8, 2, 64, dtype, "cuda",
                                           22, attrs={**CAUSAL, **LSE}),
        "attention_paged": lambda: paged([7, 0, 127], [37, 5, 1013], 16, "HND", 8, 2, 64, dtype,
                                         "cuda", 23, attrs={**CAUSAL, **LSE}),
        "decode_paged": lambda: decode([3000, 37], 4, 16, "NHD", 8, 1, 128, dtype, "cuda", 24,
                                       attrs=LSE),
    }[op]()
    for splits in (1, 4):
        c = case.with_attrs(num_splits=splits)
        first = check(c, backend="torch", out_layout="strided")
        again = call(c)
        assert all(torch.equal(bits(a), bits(b)) for a, b in zip(first, again)), op


@gpu
@pytest.mark.parametrize("dtype", [*DTYPES16, torch.float32], ids=[*DT_IDS, "float32"])
def test_gpu_merge(dtype):
    """Rows of 4-vectors and of scalars, 2 to 33 states (over a warp), states of lse -inf whose v
    is NaN (not to be read)."""
    check(merge_state_case((1000, 8, 128), dtype, "cuda", 25), backend="torch")
    check(merge_state_case((3, 7, 32, 256), dtype, "cuda", 26), backend="torch")
    check(merge_states_case((1000,), 5, 8, 128, dtype, "cuda", 27), backend="torch")
    check(merge_states_case((3, 7), 33, 4, 64, dtype, "cuda", 28), backend="torch")
    # head_dim 30 (not a multiple of 4): the kernel's scalar path
    check(merge_state_case((100, 3, 30), dtype, "cuda", 29), backend="torch")
    check(merge_states_case((300,), 3, 4, 30, dtype, "cuda", 30), backend="torch")


@gpu
@pytest.mark.parametrize("dtype", DTYPES16, ids=DT_IDS)
@pytest.mark.parametrize("merge", ["merge_state", "merge_states"])
def test_gpu_merge_of_parts_is_attention_of_the_union(merge, dtype):
    case = dense(2, 127, 4097, 8, 2, 128, dtype, "cuda", 29, attrs=LSE)
    out, lse = _split_and_merge(case, [0, 1000, 1000, 1013, 4097], merge)
    ref_out, ref_lse = reference(case, "torch")
    assert_close(out, lse, ref_out, ref_lse, dtype, case.attrs, gpu=True,
                 what=f"{merge} of parts")


def _sdpa(q, k, v, causal):
    """torch's SDPA on [B, S, H, D] tensors (enable_gqa where the heads differ)."""
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
    F = torch.nn.functional
    if q.shape[2] == k.shape[2]:
        o = F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
    else:
        try:
            o = F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal, enable_gqa=True)
        except TypeError:  # a torch without enable_gqa
            g = q.shape[2] // k.shape[2]
            o = F.scaled_dot_product_attention(qt, kt.repeat_interleave(g, 1),
                                               vt.repeat_interleave(g, 1), is_causal=causal)
    return o.transpose(1, 2)


@gpu
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dtype", DTYPES16, ids=DT_IDS)
@pytest.mark.parametrize("shape", [(2, 1000, 8, 2, 128), (1, 127, 8, 8, 64), (2, 37, 8, 1, 256)],
                         ids=["gqa4-s1000-d128", "mha-s127-d64", "mqa-s37-d256"])
def test_gpu_agrees_with_sdpa(shape, dtype, causal):
    """With torch's own kernels at q_len == kv_len (where its top-left causal mask is ours):
    both are off the float64 result by about the same, so twice the bounds."""
    b, s, hq, hkv, d = shape
    case = dense(b, s, s, hq, hkv, d, dtype, "cuda", 30, attrs={"causal": causal})
    ours = xt.attention(*case.args(), causal=causal)
    theirs = _sdpa(*case.args(), causal)
    rtol, atol, norm, lse_atol = tolerance(dtype, {}, True)
    fake_lse = np.zeros(ours.shape[:-1])
    assert_close(ours, None, theirs.double().cpu().numpy(), fake_lse, dtype,
                 tol=(2 * rtol, 2 * atol, 2 * norm, lse_atol), what="vs SDPA")


@gpu
@pytest.mark.parametrize("where,msg", [
    ("q", "attention: q must be 16-byte aligned"),
    ("k", "attention: k must be 16-byte aligned"),
    ("out", "attention: out must be 16-byte aligned"),
    ("q-strides", "attention: q must be 16-byte aligned"),
])
def test_gpu_misaligned_pointers_are_refused(where, msg):
    """The kernels move 16-byte chunks: a CUDA tensor one element off (buffer[1:] viewed), or
    with a token stride that is not a multiple of 8 elements, is refused naming it; the output
    is left alone."""
    dtype = torch.bfloat16
    case = dense(2, 7, 37, 8, 2, 64, dtype, "cuda", 31)
    ins = dict(case.inputs)
    out = torch.full((2, 7, 8, 64), float("nan"), dtype=dtype, device="cuda")

    def off_by_one(t):
        buf = torch.empty(t.numel() + 1, dtype=t.dtype, device=t.device)
        view = buf[1:].view(t.shape)
        view.copy_(t)
        return view

    if where == "q-strides":  # heads 68 elements apart: last dim contiguous, not 16-byte steps
        buf = torch.zeros(2, 7, 8, 68, dtype=dtype, device="cuda")
        ins["q"] = buf[..., :64]
    elif where == "out":
        out = off_by_one(out)
    else:
        ins[where] = off_by_one(ins[where])
    before = out.clone()
    with pytest.raises(ValueError, match=msg):
        xt.attention(ins["q"], ins["k"], ins["v"], out=out)
    assert torch.equal(bits(out), bits(before))


@gpu
def test_gpu_index_tensors_must_be_on_qs_device():
    case = decode([37, 77], None, 16, "NHD", 8, 2, 128, torch.bfloat16, "cuda", 32)
    ins = dict(case.inputs, kv_indptr=case.inputs["kv_indptr"].cpu())
    with pytest.raises(ValueError, match=r"decode_paged: kv_indptr must be on q's device cuda:0, "
                                         r"got cpu"):
        xt.decode_paged(*[ins[x.name] for x in case.spec.inputs])


def _refill(t: torch.Tensor, gen: torch.Generator):
    """New random values in place (NaN poison kept where it was)."""
    nan = t.isnan()
    t.copy_(torch.randn(tuple(t.shape), generator=gen).to(t.dtype).to(t.device))
    t.masked_fill_(nan, float("nan"))


@gpu
@pytest.mark.parametrize("op", ["attention", "decode_paged"])
@pytest.mark.parametrize("num_splits", [0, 1, 4])
def test_gpu_cuda_graph_capture_and_replay(op, num_splits):
    """Captured once (the plan and the workspace resolved at capture), replayed over new inputs
    written in place: the result of the new inputs. Decode also grows its requests in place
    (kv_last_page_len + 1, read from device memory at every replay)."""
    dtype = torch.bfloat16
    attrs = {**CAUSAL, **LSE, "num_splits": num_splits}
    if op == "attention":
        case = dense(2, 37, 1013, 8, 2, 128, dtype, "cuda", 33, attrs=attrs)
    else:
        case = decode([3000, 37, 1], 4, 16, "NHD", 8, 1, 128, dtype, "cuda", 34, attrs=attrs)
    fn = functools.partial(getattr(xt, op), **attrs)
    args = case.args()
    out = torch.empty_like(args[0])
    lse = torch.empty(args[0].shape[:-1], dtype=torch.float32, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn(*args, out=out, lse=lse)  # warm-up: loads the module, plans, outside the capture
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn(*args, out=out, lse=lse)
    gen = torch.Generator().manual_seed(35)
    for step in range(3):
        for x, a in zip(case.spec.inputs, args):
            if x.role != "index":
                _refill(a, gen)
        if op == "decode_paged" and step == 2:  # one more token per request (room in the pages)
            last = case.inputs["kv_last_page_len"]
            k = case.inputs["k_cache"]
            for b, (lo, n) in enumerate(zip(case.inputs["kv_indptr"].tolist()[1:],
                                            last.tolist())):
                page = int(case.inputs["kv_indices"][lo - 1])
                k[page, n] = 0.5
                case.inputs["v_cache"][page, n] = -0.25
            last.add_(1)
        out.fill_(float("nan"))
        lse.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        ref_out, ref_lse = reference(case, "torch")
        assert_close(out, lse, ref_out, ref_lse, dtype, attrs, gpu=True,
                     what=f"{op} graph replay {step}")


@gpu
def test_gpu_torch_compile_fullgraph():
    dtype = torch.bfloat16
    att = dense(2, 127, 1013, 8, 2, 128, dtype, "cuda", 36)
    dec = decode([3000, 37], None, 16, "HND", 8, 1, 128, dtype, "cuda", 37)

    def layer(q, k, v, dq, kc, vc, ptr, idx, last):
        o, lse = xt.attention(q, k, v, causal=True, return_lse=True)
        d = xt.decode_paged(dq, kc, vc, ptr, idx, last, kv_layout="HND", window_left=500)
        return o.float() * 2, lse + 1, d.float()

    args = [*att.args(), *dec.args()]
    eager = layer(*args)
    compiled = torch.compile(layer, fullgraph=True)(*args)
    for e, c in zip(eager, compiled):
        assert torch.equal(bits(e), bits(c))
    ref_out, ref_lse = reference(att.with_attrs(causal=True), "torch")
    assert_close((eager[0] / 2).to(dtype), eager[1] - 1, ref_out, ref_lse, dtype, gpu=True)


# ------------------------------------------------------------------ the same bits: JAX, CuPy


def _fw_cases():
    dtype = torch.bfloat16
    return {
        "attention": lambda: dense(2, 127, 1013, 8, 2, 128, dtype, "cuda", 40,
                                   attrs={**CAUSAL, **LSE}),
        "attention_varlen": lambda: varlen([7, 0, 127], [37, 5, 1013], 8, 2, 64, torch.float16,
                                           "cuda", 41, attrs={**CAUSAL, **LSE}),
        "attention_paged": lambda: paged([7, 0, 127], [37, 5, 1013], 5, "HND", 8, 1, 256, dtype,
                                         "cuda", 42, attrs=LSE),
        "decode_paged": lambda: decode([3000, 0, 37], 4, 16, "NHD", 8, 2, 128, dtype, "cuda",
                                       43, attrs=LSE),
        "merge_states": lambda: merge_states_case((100,), 3, 8, 128, dtype, "cuda", 44),
    }


def _jax_array(t: torch.Tensor):
    """A jax array on the GPU of t's values, through DLPack (a host round trip as a fallback)."""
    import jax

    t = t.contiguous()
    torch.cuda.synchronize()
    try:
        return jax.dlpack.from_dlpack(t)
    except Exception:  # noqa: BLE001 (an older jax: through the host)
        return jax.device_put(to_numpy(t), jax.devices("gpu")[0])


def _cupy_array(t: torch.Tensor):
    import cupy

    if t.dtype == torch.bfloat16:
        import ml_dtypes

        return cupy.from_dlpack(t.contiguous().view(torch.int16)).view(np.dtype(ml_dtypes.bfloat16))
    return cupy.from_dlpack(t.contiguous())


def _from_cupy(a) -> torch.Tensor:
    import cupy

    cupy.cuda.get_current_stream().synchronize()
    if a.dtype.itemsize == 2 and a.dtype.kind not in "fiu":  # bfloat16
        return torch.from_dlpack(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_dlpack(a)


@pytest.mark.parametrize("fw", [pytest.param("jax", marks=needs_jax_gpu),
                                pytest.param("jax-jit", marks=needs_jax_gpu),
                                pytest.param("cupy", marks=needs_cupy)])
@pytest.mark.parametrize("op", list(_fw_cases()))
@gpu
def test_gpu_frameworks_same_bits_as_torch(op, fw):
    case = _fw_cases()[op]()
    want = as_tuple(getattr(xt, op)(*case.args(), **case.attrs))
    if fw.startswith("jax"):
        import jax
        import xkernels.jax as xj

        fn = functools.partial(getattr(xj, op), **case.attrs)
        res = (jax.jit(fn) if fw == "jax-jit" else fn)(*[_jax_array(a) for a in case.args()])
        got = [from_numpy(np.asarray(r)) for r in as_tuple(res)]
        for r in as_tuple(res):
            assert {d.platform for d in r.devices()} == {"gpu"}
    else:
        import xkernels.cupy as xc

        torch.cuda.synchronize()
        res = getattr(xc, op)(*[_cupy_array(a) for a in case.args()], **case.attrs)
        got = [_from_cupy(r) for r in as_tuple(res)]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and torch.equal(bits(g), bits(w)), f"{fw}.{op}"

