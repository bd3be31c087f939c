"""Float64 NumPy references, one per op of the table: (*inputs, **attrs) -> outputs.

Inputs are float64 arrays already rounded to the tested dtype; fused ops return every output.
"""

from __future__ import annotations

import math

import numpy as np

_erf = np.vectorize(math.erf, otypes=[np.float64])


def _silu(x):
    return x / (1.0 + np.exp(-x))


def _gelu(x, approximate="none"):
    if approximate == "tanh":
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def _gated(act):
    def ref(x):
        d = x.shape[-1] // 2
        return act(x[..., :d]) * x[..., d:]

    return ref


silu_and_mul = _gated(_silu)
gelu_and_mul = _gated(_gelu)
gelu_tanh_and_mul = _gated(lambda x: _gelu(x, "tanh"))
silu = _silu


def gelu(x, approximate="none"):
    return _gelu(x, approximate)


def add_bias_gelu(x, bias, approximate="none"):
    return _gelu(x + bias, approximate)


def mul_add(a, b, c):
    return a * b + c


def rmsnorm(x, weight, eps=1e-6):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * weight


def gemma_rmsnorm(x, weight, eps=1e-6):
    return rmsnorm(x, 1.0 + weight, eps)


def fused_add_rmsnorm(x, residual, weight, eps=1e-6, round_to=None):
    """(out, residual_out); `round_to` rounds the sum as the kernel stores it (a callable)."""
    s = x + residual
    if round_to is not None:
        s = round_to(s)
    return rmsnorm(s, weight, eps), s


def gemma_fused_add_rmsnorm(x, residual, weight, eps=1e-6, round_to=None):
    return fused_add_rmsnorm(x, residual, 1.0 + weight, eps, round_to)


def layernorm(x, weight, bias, eps=1e-5):
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * weight + bias


def softmax(x, scale=1.0):
    v = x * scale
    m = np.max(v, axis=-1, keepdims=True)
    dead = np.isneginf(m)  # a row of -inf: zeros
    e = np.exp(v - np.where(dead, 0.0, m))
    s = e.sum(axis=-1, keepdims=True)
    return np.where(dead, 0.0, e / np.where(dead, 1.0, s))


# ----------------------------------------------------------------------------------------------
# Attention (params.h's semantics), written independently of the C++: for each request and kv
# head, scores = q @ k.T * sm_scale, then cap * tanh(s / cap), the causal (bottom-right) and
# window masks, a stable softmax. A query that sees no key gives out 0 and lse -inf. Every
# reference returns (out, lse), lse the natural-log sum-exp, whatever return_lse says.
#
# The arithmetic goes through an `xp` object (ArrayOps: NumPy here) so that the tests can run the
# same code in torch float64 on the GPU (tests/attention_cases.py's TorchOps) for large cases;
# index inputs are only read through .tolist() and slicing, which both have.


class ArrayOps:
    """The array operations the attention references use, NumPy's (float64 arrays)."""

    @staticmethod
    def zeros(shape, like):
        return np.zeros(shape, np.float64)

    @staticmethod
    def full(shape, value, like):
        return np.full(shape, value, np.float64)

    @staticmethod
    def arange(n, like):
        return np.arange(n)

    einsum = staticmethod(np.einsum)
    where = staticmethod(np.where)
    exp = staticmethod(np.exp)
    log = staticmethod(np.log)
    tanh = staticmethod(np.tanh)
    isneginf = staticmethod(np.isneginf)

    @staticmethod
    def amax(x, axis):
        return np.max(x, axis=axis, keepdims=True)

    @staticmethod
    def sum(x, axis):
        return np.sum(x, axis=axis, keepdims=True)

    @staticmethod
    def stack(xs, axis):
        return np.stack(xs, axis=axis)


NUMPY_OPS = ArrayOps()


def _attend(xp, q, k, v, causal, window_left, cap, scale):
    """One request: q [n, Hq, D], k and v [L, Hkv, D] -> out [n, Hq, D], lse [n, Hq]."""
    n, hq, d = q.shape
    kv_len, hkv = k.shape[0], k.shape[1]
    if n == 0 or kv_len == 0:  # nothing to see: out 0, lse -inf
        return xp.zeros((n, hq, d), q), xp.full((n, hq), -math.inf, q)
    g = hq // hkv  # query head h reads kv head h // g
    qg = q.reshape(n, hkv, g, d)
    s = xp.einsum("nhgd,lhd->hgnl", qg, k) * scale  # [Hkv, g, n, L]
    if cap > 0:
        s = cap * xp.tanh(s / cap)
    t = xp.arange(n, q)[:, None]
    p = xp.arange(kv_len, q)[None, :]
    diag = t + (kv_len - n)  # query t's own position among the keys (bottom-right aligned)
    visible = p >= 0
    if causal:
        visible = visible & (p <= diag)
    if window_left >= 0:
        visible = visible & (p >= diag - window_left)
    s = xp.where(visible, s, -math.inf)
    m = xp.amax(s, -1)  # [Hkv, g, n, 1]
    dead = xp.isneginf(m)
    e = xp.exp(s - xp.where(dead, 0.0, m))  # masked keys: exp(-inf) = 0
    denom = xp.sum(e, -1)
    w = e / xp.where(dead, 1.0, denom)
    out = xp.einsum("hgnl,lhd->nhgd", w, v).reshape(n, hq, d)  # dead rows: all-zero weights
    lse = xp.where(dead, -math.inf, m + xp.log(xp.where(dead, 1.0, denom)))  # [Hkv, g, n, 1]
    lse = xp.einsum("hgn->nhg", lse[..., 0]).reshape(n, hq)
    return out, lse


def _scale(sm_scale, head_dim):
    nan = sm_scale != sm_scale  # noqa: PLR0124 (NaN, whatever numeric type it came as)
    return 1.0 / math.sqrt(head_dim) if sm_scale is None or nan else sm_scale


def _run(xp, q, requests, q_shape, causal, window_left, logits_soft_cap, sm_scale):
    """Runs _attend over `requests`, (out index, q_b [n, Hq, D], k_b, v_b) each, into out (q's
    shape) and lse (q's shape without head_dim)."""
    out = xp.zeros(q_shape, q)
    lse = xp.full(q_shape[:-1], -math.inf, q)
    scale = _scale(sm_scale, q_shape[-1])
    for idx, qb, kb, vb in requests:
        o, s = _attend(xp, qb, kb, vb, causal, window_left, logits_soft_cap, scale)
        out[idx] = o
        lse[idx] = s
    return out, lse


def _paged_kv(cache, kv_indptr, kv_indices, kv_last_page_len, b, kv_layout):
    """Request b's keys (or values) from a paged cache: [kv_len, Hkv, D]."""
    lo, hi = kv_indptr[b], kv_indptr[b + 1]
    pages = kv_indices[lo:hi]
    if kv_layout == "HND":  # [pages, Hkv, page_size, D] -> [pages, page_size, Hkv, D]
        cache = cache.swapaxes(1, 2)
    page_size, hkv, d = cache.shape[1:]
    if not pages:
        return cache[:0, 0]  # [0, Hkv, D]
    kv_len = (len(pages) - 1) * page_size + kv_last_page_len[b]
    return cache[pages].reshape(len(pages) * page_size, hkv, d)[:kv_len]


def attention(q, k, v, causal=False, window_left=-1, logits_soft_cap=0.0, sm_scale=None,
              return_lse=False, num_splits=0, kernel="auto", *, xp=NUMPY_OPS):
    """q [B, n, Hq, D], k and v [B, L, Hkv, D] -> (out [B, n, Hq, D], lse [B, n, Hq])."""
    reqs = ((b, q[b], k[b], v[b]) for b in range(q.shape[0]))
    return _run(xp, q, reqs, tuple(q.shape), causal, window_left, logits_soft_cap, sm_scale)


def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, causal=False, window_left=-1,
                     logits_soft_cap=0.0, sm_scale=None, return_lse=False, num_splits=0,
                     kernel="auto", *, xp=NUMPY_OPS):
    """q [total_q, Hq, D], k and v [total_k, Hkv, D], request b rows cu_seqlens[b]:[b+1]."""
    cq, ck = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    reqs = ((slice(cq[b], cq[b + 1]), q[cq[b]:cq[b + 1]], k[ck[b]:ck[b + 1]],
             v[ck[b]:ck[b + 1]]) for b in range(len(cq) - 1))
    return _run(xp, q, reqs, tuple(q.shape), causal, window_left, logits_soft_cap, sm_scale)


def attention_paged(q, k_cache, v_cache, qo_indptr, kv_indptr, kv_indices, kv_last_page_len,
                    kv_layout="NHD", causal=False, window_left=-1, logits_soft_cap=0.0,
                    sm_scale=None, return_lse=False, num_splits=0, *, xp=NUMPY_OPS):
    """q [total_q, Hq, D] (request b rows qo_indptr[b]:[b+1]) over paged caches."""
    qo = qo_indptr.tolist()
    table = (kv_indptr.tolist(), kv_indices.tolist(), kv_last_page_len.tolist())
    reqs = ((slice(qo[b], qo[b + 1]), q[qo[b]:qo[b + 1]],
             _paged_kv(k_cache, *table, b, kv_layout), _paged_kv(v_cache, *table, b, kv_layout))
            for b in range(len(qo) - 1))
    return _run(xp, q, reqs, tuple(q.shape), causal, window_left, logits_soft_cap, sm_scale)


def decode_paged(q, k_cache, v_cache, kv_indptr, kv_indices, kv_last_page_len, kv_layout="NHD",
                 causal=True, window_left=-1, logits_soft_cap=0.0, sm_scale=None,
                 return_lse=False, num_splits=0, *, xp=NUMPY_OPS):
    """q [B, Hq, D] (one token) or [B, n, Hq, D] (the last n positions of each request)."""
    table = (kv_indptr.tolist(), kv_indices.tolist(), kv_last_page_len.tolist())
    q4 = q[:, None] if q.ndim == 3 else q  # one token: [B, 1, Hq, D]
    reqs = ((b, q4[b], _paged_kv(k_cache, *table, b, kv_layout),
             _paged_kv(v_cache, *table, b, kv_layout)) for b in range(q4.shape[0]))
    out, lse = _run(xp, q4, reqs, tuple(q4.shape), causal, window_left, logits_soft_cap,
                    sm_scale)
    return (out[:, 0], lse[:, 0]) if q.ndim == 3 else (out, lse)


def merge_states(v, s, *, xp=NUMPY_OPS):
    """v [..., k, H, D], s [..., k, H] (natural-log LSEs) -> (out [..., H, D], lse [..., H]):
    out = sum_i w_i v_i / sum_i w_i, lse = m + log(sum_i w_i), w_i = exp(s_i - m), m = max_i s_i;
    (0, -inf) where every s_i is -inf. A state of weight 0 (s_i = -inf) contributes nothing: its
    v_i is not used (it may be anything, NaN included)."""
    m = xp.amax(s, -2)  # [..., 1, H]
    dead = xp.isneginf(m)
    w = xp.exp(s - xp.where(dead, 0.0, m))  # [..., k, H]
    denom = xp.sum(w, -2)  # [..., 1, H]
    wv = xp.where(w[..., None] > 0, w[..., None] * v, 0.0)
    out = xp.sum(wv, -3)[..., 0, :, :] / xp.where(dead, 1.0, denom)[..., 0, :, None]
    lse = xp.where(dead, -math.inf, m + xp.log(xp.where(dead, 1.0, denom)))[..., 0, :]
    return out, lse


def merge_state(v_a, s_a, v_b, s_b, *, xp=NUMPY_OPS):
    """Two states (v [..., H, D], s [..., H]) of disjoint key sets -> (out, lse) of the union."""
    return merge_states(xp.stack([v_a, v_b], -3), xp.stack([s_a, s_b], -2), xp=xp)


# ----------------------------------------------------------------------------------------------
# GEMM (gemm/params.h's semantics): inputs are float64 arrays of the values the operands hold (for
# gemm_fp8, e4m3 values and float32 scales, all exact in float64); a's leading dimensions are rows.


def gemm(a, b, bias=None, out_dtype=None, b_layout="NK", num_splits=0, kernel="auto"):
    """a [..., k] @ b^T for b [n, k] ("NK"), or a @ b for b [k, n] ("KN"), + bias [n]."""
    out = a @ (b if b_layout == "KN" else b.T)
    return out if bias is None else out + bias


_GATES = {"silu": _silu, "gelu": _gelu, "gelu_tanh": lambda x: _gelu(x, "tanh")}


def gemm_gated(a, b, bias=None, act="silu", out_dtype=None, num_splits=0, kernel="auto"):
    """act(a @ b[:n]^T + bias[:n]) * (a @ b[n:]^T + bias[n:]) for a [..., k] and b [2n, k]."""
    return _gated(_GATES[act])(gemm(a, b, bias))


def _scales(s, rows: int, k: int, rows_per_block: int):
    """An operand's scales as a [rows, k] array, by their shape: one element per tensor; one per
    row (1-D or a trailing 1); otherwise per block of rows_per_block rows (a: 1, b: 128) x 128
    values of k, the scale matrix's rows then its columns. (Where a shape reads several ways, m = 1
    or k <= 128, the readings agree.)"""
    s = np.asarray(s, np.float64)
    if s.size == 1:
        return np.full((rows, k), s.reshape(()).item())
    if s.size == rows and (s.ndim == 1 or s.shape[-1] == 1):
        return np.repeat(s.reshape(-1, 1), k, axis=1)
    blocks = s.reshape(-1, s.shape[-1])
    return np.repeat(np.repeat(blocks, rows_per_block, axis=0)[:rows], 128, axis=1)[:, :k]


def gemm_fp8(a, b, a_scale, b_scale, bias=None, out_dtype="bfloat16", num_splits=0,
             kernel="auto"):
    """(a * a_scale) @ (b * b_scale)^T + bias for a [..., k] and b [n, k]; the scales per tensor,
    per row, or per block (a: 1 x 128, b: 128 x 128), told apart by their shapes."""
    k, n = a.shape[-1], b.shape[0]
    a2 = a.reshape(-1, k)
    out = (a2 * _scales(a_scale, a2.shape[0], k, 1)) @ (b * _scales(b_scale, n, k, 128)).T
    out = out.reshape(*a.shape[:-1], n)
    return out if bias is None else out + bias


E4M3_MAX = 448.0


def quantize_fp8(x, granularity="row"):
    """(q, scale) of x [..., cols] as params.h specifies them, exactly: scale = amax / 448 over
    each group, rounded to float32 (1 for a group of zeros, or where that underflows to 0); q = x /
    scale rounded to float32 (the quotient a float32 division gives: float64 then float32 rounds
    once, correctly), then to the nearest e4m3 (ties to even), saturating at +-448. Groups: the
    tensor, each row, each 1 x 128 block of a row, each 128 x 128 block (x 2-D). q as float64
    (e4m3 values), scale float64 (float32 values) of quantize_fp8's shapes."""
    import ml_dtypes

    x = np.asarray(x, np.float64)
    cols = x.shape[-1]
    nb = -(-cols // 128)

    def scale_of(amax):  # 1 for a group of zeros, or where amax / 448 underflows
        s = (amax / E4M3_MAX).astype(np.float32)
        return np.where(s > 0, s, np.float32(1.0))

    ax = np.abs(x)
    if granularity == "tensor":
        scale = scale_of(np.array([ax.max() if ax.size else 0.0]))
        per = np.broadcast_to(scale.reshape(()), x.shape)
    elif granularity == "row":
        scale = scale_of(ax.max(axis=-1, keepdims=True) if cols else np.zeros((*x.shape[:-1], 1)))
        per = np.broadcast_to(scale, x.shape)
    elif granularity == "block":
        pad = np.zeros((*x.shape[:-1], nb * 128))
        pad[..., :cols] = ax
        scale = scale_of(pad.reshape(*x.shape[:-1], nb, 128).max(axis=-1, initial=0.0))
        per = np.repeat(scale, 128, axis=-1)[..., :cols]
    elif granularity == "block2d":
        rows = x.shape[0]
        rb = -(-rows // 128)
        pad = np.zeros((rb * 128, nb * 128))
        pad[:rows, :cols] = ax
        scale = scale_of(pad.reshape(rb, 128, nb, 128).max(axis=(1, 3), initial=0.0))
        per = np.repeat(np.repeat(scale, 128, axis=0), 128, axis=1)[:rows, :cols]
    else:
        raise ValueError(f"granularity must be tensor, row, block or block2d, got {granularity!r}")
    quotient = np.clip((x / per).astype(np.float32), -E4M3_MAX, E4M3_MAX)
    q = quotient.astype(ml_dtypes.float8_e4m3fn).astype(np.float64)
    return q, scale.astype(np.float64)


# ----------------------------------------------------------------------------------------------
# RoPE, as Hugging Face's modeling code defines it (rotate_half / the interleaved GPT-J form,
# _compute_llama3_parameters for the scaling), in float64 throughout: positions * inv_freq as a
# float64 product, so large positions (500000) are exact to float64 rounding.


def rope_inv_freq(rotary_dim, theta=10000.0, rope_scale=1.0, low_freq_factor=1.0,
                  high_freq_factor=4.0, original_max_position=8192):
    """inv_freq[i] = theta^(-2i / rotary_dim), i < rotary_dim / 2, with Llama 3's scaling when
    rope_scale != 1."""
    inv = 1.0 / theta ** (np.arange(0, rotary_dim, 2, dtype=np.float64) / rotary_dim)
    if rope_scale == 1.0:
        return inv
    wavelen = 2 * math.pi / inv
    low_wavelen = original_max_position / low_freq_factor
    high_wavelen = original_max_position / high_freq_factor
    scaled = np.where(wavelen > low_wavelen, inv / rope_scale, inv)
    smooth = (original_max_position / wavelen - low_freq_factor) / (high_freq_factor
                                                                    - low_freq_factor)
    smoothed = (1 - smooth) * scaled / rope_scale + smooth * scaled
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    return np.where(medium, smoothed, scaled)


def _rope(x, positions, theta, interleaved, rotary_dim, rope_scale, low_freq_factor,
          high_freq_factor, original_max_position):
    """x [..., tokens, heads, head_dim], positions [..., tokens] -> x rotated."""
    d = x.shape[-1]
    rd = rotary_dim or d
    inv = rope_inv_freq(rd, theta, rope_scale, low_freq_factor, high_freq_factor,
                        original_max_position)
    ang = np.asarray(positions, np.float64)[..., None, None] * inv  # [..., tokens, 1, rd/2]
    cos, sin = np.cos(ang), np.sin(ang)
    out = np.array(x, np.float64, copy=True)
    if interleaved:
        a, b = x[..., 0:rd:2], x[..., 1:rd:2]
        out[..., 0:rd:2] = a * cos - b * sin
        out[..., 1:rd:2] = b * cos + a * sin
    else:
        a, b = x[..., : rd // 2], x[..., rd // 2: rd]
        out[..., : rd // 2] = a * cos - b * sin
        out[..., rd // 2: rd] = b * cos + a * sin
    return out


def apply_rope(q, k, positions, theta=10000.0, interleaved=False, rotary_dim=0, rope_scale=1.0,
               low_freq_factor=1.0, high_freq_factor=4.0, original_max_position=8192,
               round_to=None):
    """(q_out, k_out). `round_to` is accepted (the in-place ops' signature) and unused: nothing
    is stored between steps."""
    args = (theta, interleaved, rotary_dim, rope_scale, low_freq_factor, high_freq_factor,
            original_max_position)
    return _rope(q, positions, *args), _rope(k, positions, *args)


def qk_norm_rope(q, k, q_weight, k_weight, positions, eps=1e-6, theta=10000.0,
                 interleaved=False, rotary_dim=0, rope_scale=1.0, low_freq_factor=1.0,
                 high_freq_factor=4.0, original_max_position=8192, round_to=None):
    """(q_out, k_out): rmsnorm over head_dim of each head, then apply_rope (no rounding
    between)."""
    return apply_rope(rmsnorm(q, q_weight, eps), rmsnorm(k, k_weight, eps), positions, theta,
                      interleaved, rotary_dim, rope_scale, low_freq_factor, high_freq_factor,
                      original_max_position)
