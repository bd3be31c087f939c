"""xkernels.jax.nn: a decoder layer as plain functions over a parameter pytree, under ``jax.jit``.

The same layer as ``xkernels.torch.nn.DecoderLayer``, from the same exported functions:

    params = {"input_norm": [hidden], "qkv": [(hq + 2 hk) d, hidden], "qkv_bias": optional,
              "q_norm", "k_norm": optional [d] (Qwen3), "o": [hidden, hq d], "post_norm": [hidden],
              "gate_up": [2 inter, hidden] (gate rows first), "down": [hidden, inter]}
    cfg = LayerConfig(num_heads=32, num_kv_heads=8, head_dim=128)
    y = jax.jit(decoder_layer, static_argnames="cfg")(params, x, positions, cfg=cfg)

``x`` is [batch, seq, hidden], ``positions`` int32 [batch, seq]. ``decoder_layer`` is a causal
prefill over the tokens given; ``decoder_layer_paged`` appends them to a paged KV cache (NHD pages,
FlashInfer's table) and attends over the cache: one token per request uses the decode kernel.

Shapes the kernels do not take fall back to jax.numpy / jax.nn with a once-per-site warning
(``xkernels.fallback``; ``XKERNELS_STRICT=1`` or ``cfg.strict`` makes it an error), decided when the
function is traced.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import xkernels.jax as xj

import jax
import jax.numpy as jnp

from .. import fallback, reference

__all__ = ["LayerConfig", "attention_block", "decoder_layer", "decoder_layer_paged", "gated_mlp",
           "rope_inv_freq"]

_HALF = (jnp.float16, jnp.bfloat16)
_GATES = {"silu": "silu", "gelu": "gelu", "gelu_tanh": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh"}


@dataclass(frozen=True)
class LayerConfig:
    """The static description of a layer (hashable: a jit static argument)."""

    num_heads: int
    num_kv_heads: int
    head_dim: int
    eps: float = 1e-6
    act: str = "silu"
    theta: float = 10000.0
    interleaved: bool = False
    rotary_dim: int = 0  # 0: head_dim
    rope_scale: float = 1.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position: int = 8192
    window_left: int = -1
    logits_soft_cap: float = 0.0
    sm_scale: float | None = None
    strict: bool | None = None

    @property
    def scale(self) -> float:
        return self.sm_scale if self.sm_scale is not None else self.head_dim ** -0.5

    def rope_attrs(self) -> dict:
        return {"theta": self.theta, "interleaved": self.interleaved,
                "rotary_dim": self.rotary_dim, "rope_scale": self.rope_scale,
                "low_freq_factor": self.low_freq_factor,
                "high_freq_factor": self.high_freq_factor,
                "original_max_position": self.original_max_position}


def _take(cfg: LayerConfig, site: str, reason: str, instead: str) -> None:
    fallback.take(f"xkernels.jax.nn.{site}", reason, instead, cfg.strict)


def _gemm_unsupported(x, w, n_multiple: int = 8) -> str | None:
    k, n = w.shape[1], w.shape[0]
    if x.dtype not in _HALF or w.dtype != x.dtype:
        return f"gemm takes float16/bfloat16 a and b of one dtype, got {x.dtype} and {w.dtype}"
    if k % 8 or n % n_multiple:
        return f"gemm needs k a multiple of 8 and n of {n_multiple}, got k={k}, n={n}"
    return None


def _dot(x, w, b=None):
    y = jnp.einsum("...k,nk->...n", x, w, preferred_element_type=jnp.float32)
    return (y + b if b is not None else y).astype(x.dtype)


def _linear(cfg: LayerConfig, site: str, x, w, b=None):
    why = _gemm_unsupported(x, w)
    if why is None:
        return xj.gemm(x, w, b)
    _take(cfg, site, why, "jnp.dot")
    return _dot(x, w, b)


def _rms(x, w, eps):
    xf = x.astype(jnp.float32)
    y = xf * jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + eps)
    return (y.astype(x.dtype) * w).astype(x.dtype)


def rope_inv_freq(cfg: LayerConfig) -> np.ndarray:
    """Inverse frequencies [rotary_dim / 2] (float32; the float64 reference's), Llama 3 scaling
    when rope_scale != 1."""
    inv = reference.rope_inv_freq(cfg.rotary_dim or cfg.head_dim, cfg.theta, cfg.rope_scale,
                                  cfg.low_freq_factor, cfg.high_freq_factor,
                                  cfg.original_max_position)
    return inv.astype(np.float32)


def _rope_jnp(x, positions, cfg: LayerConfig):
    r = cfg.rotary_dim or cfg.head_dim
    ang = positions.astype(jnp.float32)[..., None] * jnp.asarray(rope_inv_freq(cfg))
    cos, sin = jnp.cos(ang)[..., None, :], jnp.sin(ang)[..., None, :]
    xr = x[..., :r].astype(jnp.float32)
    if cfg.interleaved:
        x1, x2 = xr[..., 0::2], xr[..., 1::2]
        out = jnp.stack((x1 * cos - x2 * sin, x2 * cos + x1 * sin), axis=-1).reshape(xr.shape)
    else:
        x1, x2 = xr[..., : r // 2], xr[..., r // 2:]
        out = jnp.concatenate((x1 * cos - x2 * sin, x2 * cos + x1 * sin), axis=-1)
    return jnp.concatenate((out.astype(x.dtype), x[..., r:]), axis=-1)


def _rotate(params, q, k, positions, cfg: LayerConfig):
    qk_norm = params.get("q_norm") is not None
    why = None
    if not hasattr(xj, "apply_rope"):
        why = "this build has no apply_rope op"
    elif cfg.head_dim % 2 or cfg.head_dim > 512:
        why = f"apply_rope needs an even head_dim <= 512, got {cfg.head_dim}"
    pos = positions.astype(jnp.int32)
    if why is None:
        if qk_norm:
            return xj.qk_norm_rope(q, k, params["q_norm"], params["k_norm"], pos, eps=cfg.eps,
                                   **cfg.rope_attrs())
        return xj.apply_rope(q, k, pos, **cfg.rope_attrs())
    _take(cfg, "qk_norm_rope" if qk_norm else "apply_rope", why, "a jax.numpy composite")
    if qk_norm:
        q, k = _rms(q, params["q_norm"], cfg.eps), _rms(k, params["k_norm"], cfg.eps)
    return _rope_jnp(q, pos, cfg), _rope_jnp(k, pos, cfg)


def _attention_unsupported(q, k) -> str | None:
    if q.dtype not in _HALF:
        return f"attention takes float16/bfloat16, got {q.dtype}"
    if q.shape[-1] not in (64, 128, 256):
        return f"attention has head_dim (64, 128, 256), got {q.shape[-1]}"
    return None


def _sdpa(q, k, v, cfg: LayerConfig):
    """The fallback: causal (bottom-right) attention in float32, q [b, s, hq, d], k, v [b, l, hk,
    d]."""
    s, length = q.shape[1], k.shape[1]
    g = q.shape[2] // k.shape[2]
    kk, vv = jnp.repeat(k, g, axis=2), jnp.repeat(v, g, axis=2)
    logits = jnp.einsum("bshd,blhd->bhsl", q.astype(jnp.float32), kk.astype(jnp.float32))
    logits = logits * cfg.scale
    if cfg.logits_soft_cap > 0:
        logits = cfg.logits_soft_cap * jnp.tanh(logits / cfg.logits_soft_cap)
    i = jnp.arange(s)[:, None] + (length - s)
    j = jnp.arange(length)[None, :]
    allowed = j <= i
    if cfg.window_left >= 0:
        allowed &= j >= i - cfg.window_left
    logits = jnp.where(allowed, logits, -jnp.inf)
    p = jax.nn.softmax(logits, axis=-1)
    return jnp.einsum("bhsl,blhd->bshd", p, vv.astype(jnp.float32)).astype(q.dtype)


def _attend(q, k, v, cfg: LayerConfig):
    why = _attention_unsupported(q, k)
    if why is None:
        return xj.attention(q, k, v, causal=True, window_left=cfg.window_left,
                            logits_soft_cap=cfg.logits_soft_cap, sm_scale=cfg.scale)
    _take(cfg, "attention", why, "a jax.numpy composite")
    return _sdpa(q, k, v, cfg)


def _qkv(params, x, positions, cfg: LayerConfig):
    b, s = x.shape[0], x.shape[1]
    hq, hk, d = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    qkv = _linear(cfg, "qkv", x, params["qkv"], params.get("qkv_bias"))
    q = qkv[..., : hq * d].reshape(b, s, hq, d)
    k = qkv[..., hq * d: (hq + hk) * d].reshape(b, s, hk, d)
    v = qkv[..., (hq + hk) * d:].reshape(b, s, hk, d)
    q, k = _rotate(params, q, k, jnp.broadcast_to(positions, (b, s)), cfg)
    return q, k, v


def attention_block(params, x, positions, cfg: LayerConfig):
    """Causal self-attention of x [b, s, hidden] (its own prefill) -> [b, s, hidden]."""
    b, s = x.shape[0], x.shape[1]
    q, k, v = _qkv(params, x, positions, cfg)
    o = _attend(q, k, v, cfg)
    return _linear(cfg, "o", o.reshape(b, s, -1), params["o"], params.get("o_bias"))


def gated_mlp(params, x, cfg: LayerConfig):
    """down(act(x @ gate^T) * (x @ up^T)): gemm_gated (gate and up as one GEMM whose epilogue
    gates), then the down GEMM."""
    w, b = params["gate_up"], params.get("gate_up_bias")
    why = _gemm_unsupported(x, w, 16)
    if why is None:
        a = xj.gemm_gated(x, w, b, act=_GATES[cfg.act])
    else:
        _take(cfg, "gate_up", why, "jnp.dot and a jax.numpy act_and_mul")
        g, u = jnp.split(_dot(x, w, b), 2, axis=-1)
        a = (jax.nn.silu(g) if cfg.act == "silu" else
             jax.nn.gelu(g, approximate=cfg.act != "gelu")) * u
    return _linear(cfg, "down", a, params["down"], params.get("down_bias"))


def _post(params, x, h, cfg: LayerConfig):
    """x + h -> residual, norm(residual) -> mlp, + residual."""
    h, residual = xj.fused_add_rmsnorm(h, x, params["post_norm"], eps=cfg.eps)
    return gated_mlp(params, h, cfg) + residual


def decoder_layer(params, x, positions, cfg: LayerConfig):
    """One pre-norm decoder layer over x [b, s, hidden] at positions [b, s] (a causal prefill):
    x + attn(norm(x)), then + mlp(norm(.))."""
    h = xj.rmsnorm(x, params["input_norm"], eps=cfg.eps)
    h = attention_block(params, h, positions, cfg)
    return _post(params, x, h, cfg)


def decoder_layer_paged(params, x, positions, k_cache, v_cache, slots, kv_indptr, kv_indices,
                        kv_last_page_len, qo_indptr, cfg: LayerConfig):
    """The layer over a paged KV cache: x [b, s, hidden]'s keys and values are written to the
    flat token slots `slots` [b * s] (page * page_size + offset) of k_cache, v_cache [pages,
    page_size, hk, d], then the queries attend over each request's pages (the table as in
    FlashInfer: kv_indptr, kv_indices, kv_last_page_len, and qo_indptr [b + 1] = s per request).
    Returns (out, k_cache, v_cache); donate the caches to update them in place."""
    b, s = x.shape[0], x.shape[1]
    hq, hk, d = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    h = xj.rmsnorm(x, params["input_norm"], eps=cfg.eps)
    q, k, v = _qkv(params, h, positions, cfg)
    shape = k_cache.shape
    k_cache = k_cache.reshape(-1, hk, d).at[slots].set(k.reshape(-1, hk, d)).reshape(shape)
    v_cache = v_cache.reshape(-1, hk, d).at[slots].set(v.reshape(-1, hk, d)).reshape(shape)
    why = _attention_unsupported(q, k)
    if why is not None:
        raise fallback.UnsupportedError(f"xkernels.jax.nn.decoder_layer_paged: {why} (the paged "
                                        "layer has no fallback; use decoder_layer)")
    common = {"window_left": cfg.window_left, "logits_soft_cap": cfg.logits_soft_cap,
              "sm_scale": cfg.scale}
    if s == 1:
        o = xj.decode_paged(q[:, 0], k_cache, v_cache, kv_indptr, kv_indices, kv_last_page_len,
                            **common)
    else:
        o = xj.attention_paged(q.reshape(b * s, hq, d), k_cache, v_cache, qo_indptr, kv_indptr,
                               kv_indices, kv_last_page_len, causal=True, **common)
    h = _linear(cfg, "o", o.reshape(b, s, hq * d), params["o"], params.get("o_bias"))
    return _post(params, x, h, cfg), k_cache, v_cache
