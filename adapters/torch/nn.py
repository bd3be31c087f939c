"""xkernels.torch.nn: the layers of a decoder-only transformer on xkernels' ops.

``RMSNorm``, ``GatedMLP`` (gate and up projections as one GEMM, ``silu_and_mul``, the down
projection), ``Attention`` (one QKV GEMM, optional QK-norm, RoPE in place on the QKV views,
prefill or paged decode, the output GEMM) and ``DecoderLayer``, plus ``PagedKVCache`` (FlashInfer's
page table: ``kv_indptr``, ``kv_indices``, ``kv_last_page_len``) and ``patch(model)``, which swaps
these into a Hugging Face Llama / Mistral / Qwen2 / Qwen3 model in place, keeping its weights.

Inference only: the ops have no backward, so call the layers under ``torch.no_grad()`` or
``torch.inference_mode()``.

Shapes the kernels do not take (e.g. a head_dim other than 64, 128, 256; float64; a GEMM whose k is
not a multiple of 8) run PyTorch's op instead, with a once-per-site ``FallbackWarning``
(``xkernels.fallback``); ``strict=True`` or ``XKERNELS_STRICT=1`` makes that an error.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import xkernels.torch as xt

import torch
import torch.nn.functional as F
from torch import nn  # noqa: PLW0406 (ruff takes adapters/torch/nn.py for torch.nn)

from .. import fallback, reference

__all__ = ["Attention", "DecoderLayer", "GatedMLP", "PagedKVCache", "RMSNorm", "RopeConfig",
           "cache_kwarg", "patch", "rope_inv_freq"]

_HALF = (torch.float16, torch.bfloat16)
_ROW_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_HEAD_DIMS = (64, 128, 256)
_GATES = {"silu": "silu", "gelu": "gelu", "gelu_tanh": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh"}


# ---------------------------------------------------------------------------------------------
# What the kernels take (None) or why not: checked before a call, so a fallback never follows a
# half-done kernel call.

def _aligned(t: torch.Tensor) -> bool:
    """16-byte aligned data and row pitches (the GEMM and attention kernels' loads)."""
    if t.data_ptr() % 16:
        return False
    esize = t.element_size()
    return all(t.stride(i) * esize % 16 == 0 for i in range(t.dim() - 1) if t.size(i) > 1)


def _gemm_unsupported(x: torch.Tensor, w: torch.Tensor, n_multiple: int = 8) -> str | None:
    if x.dtype not in _HALF or w.dtype != x.dtype:
        return f"gemm takes float16/bfloat16 a and b of one dtype, got {x.dtype} and {w.dtype}"
    k, n = w.shape[1], w.shape[0]
    if k % 8 or n % n_multiple:
        return f"gemm needs k a multiple of 8 and n of {n_multiple}, got k={k}, n={n}"
    if x.stride(-1) != 1 or w.stride(-1) != 1:
        return "gemm needs the last dimension contiguous"
    if x.is_cuda and not (_aligned(x) and _aligned(w)):
        return "gemm needs 16-byte aligned data and row pitches on a GPU"
    return None


def _attention_unsupported(q: torch.Tensor, k: torch.Tensor) -> str | None:
    if q.dtype not in _HALF or k.dtype != q.dtype:
        return f"attention takes float16/bfloat16 q, k, v, got {q.dtype}"
    if q.shape[-1] not in _HEAD_DIMS:
        return f"attention has head_dim {_HEAD_DIMS}, got {q.shape[-1]}"
    if q.shape[-2] % k.shape[-2]:
        return f"num_qo_heads {q.shape[-2]} is not a multiple of num_kv_heads {k.shape[-2]}"
    if q.is_cuda and not (_aligned(q) and _aligned(k)):
        return "attention needs 16-byte aligned data and strides on a GPU"
    return None


def _rows_unsupported(x: torch.Tensor) -> str | None:
    if x.dtype not in _ROW_DTYPES:
        return f"the row ops take float16/bfloat16/float32, got {x.dtype}"
    return None


# ---------------------------------------------------------------------------------------------
# RoPE

class RopeConfig:
    """Rotary embedding: theta, the convention, the rotated part of a head, Llama 3's scaling
    (rope_scale 1 is plain RoPE), and, for RoPE types xkernels has no kernel for (YaRN, dynamic,
    ...), Hugging Face's own inverse frequencies and attention scaling, which the PyTorch
    fallback applies."""

    def __init__(self, head_dim: int, theta: float = 10000.0, *, interleaved: bool = False,
                 rotary_dim: int | None = None, rope_scale: float = 1.0,
                 low_freq_factor: float = 1.0, high_freq_factor: float = 4.0,
                 original_max_position: int = 8192, inv_freq: torch.Tensor | None = None,
                 attention_scaling: float = 1.0, unsupported: str | None = None):
        self.head_dim = head_dim
        self.theta = float(theta)
        self.interleaved = bool(interleaved)
        self.rotary_dim = int(rotary_dim or head_dim)
        self.rope_scale = float(rope_scale)
        self.low_freq_factor = float(low_freq_factor)
        self.high_freq_factor = float(high_freq_factor)
        self.original_max_position = int(original_max_position)
        self.unsupported = unsupported  # why the kernel cannot apply it (None: it can)
        if inv_freq is None:
            inv_freq = rope_inv_freq(self)
        self.inv_freq = inv_freq.float()
        self.attention_scaling = float(attention_scaling)

    def kernel_attrs(self) -> dict[str, Any]:
        return {"theta": self.theta, "interleaved": self.interleaved,
                "rotary_dim": self.rotary_dim, "rope_scale": self.rope_scale,
                "low_freq_factor": self.low_freq_factor,
                "high_freq_factor": self.high_freq_factor,
                "original_max_position": self.original_max_position}

    @classmethod
    def from_hf(cls, config: Any, head_dim: int, rotary_emb: nn.Module | None = None
                ) -> RopeConfig:
        """From a transformers config (rope_parameters, or the older rope_theta/rope_scaling)."""
        params = dict(getattr(config, "rope_parameters", None) or {})
        if not params:
            params = dict(getattr(config, "rope_scaling", None) or {})
            params.setdefault("rope_theta", getattr(config, "rope_theta", 10000.0))
        kind = params.get("rope_type", params.get("type", "default"))
        theta = params.get("rope_theta", getattr(config, "rope_theta", 10000.0))
        partial = params.get("partial_rotary_factor",
                             getattr(config, "partial_rotary_factor", 1.0)) or 1.0
        rotary_dim = int(head_dim * partial)
        if kind == "default":
            return cls(head_dim, theta, rotary_dim=rotary_dim)
        if kind == "llama3":
            return cls(head_dim, theta, rotary_dim=rotary_dim, rope_scale=params["factor"],
                       low_freq_factor=params["low_freq_factor"],
                       high_freq_factor=params["high_freq_factor"],
                       original_max_position=params["original_max_position_embeddings"])
        if rotary_emb is None:
            raise ValueError(f"rope_type {kind!r} needs the model's rotary_emb for its "
                             "frequencies")
        return cls(head_dim, theta, rotary_dim=rotary_dim,
                   inv_freq=rotary_emb.inv_freq.detach().cpu(),
                   attention_scaling=getattr(rotary_emb, "attention_scaling", 1.0),
                   unsupported=f"rope_type {kind!r} (xkernels has default and llama3)")


def rope_inv_freq(rope: RopeConfig) -> torch.Tensor:
    """The inverse frequencies [rotary_dim / 2] (float32; from the float64 reference's, which
    follows Hugging Face's formulas), with Llama 3's scaling when rope_scale != 1."""
    inv = reference.rope_inv_freq(rope.rotary_dim, rope.theta, rope.rope_scale,
                                  rope.low_freq_factor, rope.high_freq_factor,
                                  rope.original_max_position)
    return torch.from_numpy(inv.astype(np.float32))


def _rope_torch(x: torch.Tensor, positions: torch.Tensor, rope: RopeConfig) -> None:
    """RoPE in place on x [..., tokens, heads, head_dim] at positions [..., tokens], in float32
    (the fallback)."""
    r = rope.rotary_dim
    ang = positions.to(torch.float32)[..., None] * rope.inv_freq.to(x.device)  # (..., T, r/2)
    cos = (ang.cos() * rope.attention_scaling)[..., None, :]  # (..., T, 1, r/2)
    sin = (ang.sin() * rope.attention_scaling)[..., None, :]
    xr = x[..., :r].float()
    if rope.interleaved:
        x1, x2 = xr[..., 0::2], xr[..., 1::2]
        out = torch.stack((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).flatten(-2)
    else:
        x1, x2 = xr[..., : r // 2], xr[..., r // 2:]
        out = torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
    x[..., :r].copy_(out)


def _rms_torch(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (y.to(x.dtype) * weight).to(x.dtype)


def _rope_unsupported(x: torch.Tensor, rope: RopeConfig) -> str | None:
    if rope.unsupported:
        return rope.unsupported
    if not hasattr(xt, "apply_rope"):
        return "this build has no apply_rope op"
    if x.dtype not in _ROW_DTYPES:
        return f"apply_rope takes float16/bfloat16/float32, got {x.dtype}"
    if x.shape[-1] % 2 or rope.rotary_dim % 2 or x.shape[-1] > 512:
        return f"apply_rope needs an even head_dim <= 512, got {x.shape[-1]}"
    return None


# ---------------------------------------------------------------------------------------------
# Layers

def _param(shape: tuple[int, ...], device, dtype, fill: float | None = None) -> nn.Parameter:
    t = torch.empty(shape, device=device, dtype=dtype)
    if fill is None:
        nn.init.normal_(t, std=0.02)
    else:
        t.fill_(fill)
    return nn.Parameter(t, requires_grad=False)


class _Layer(nn.Module):
    """What every layer shares: its name in fallback messages and its strict flag."""

    def __init__(self, strict: bool | None):
        super().__init__()
        self.strict = strict

    def _site(self, what: str) -> str:
        return f"{type(self).__name__}.{what}"

    def _fallback(self, what: str, reason: str, instead: str) -> None:
        fallback.take(self._site(what), reason, instead, self.strict)

    def _linear(self, what: str, x: torch.Tensor, w: torch.Tensor,
                b: torch.Tensor | None = None) -> torch.Tensor:
        why = _gemm_unsupported(x, w)
        if why is None:
            return xt.gemm(x, w, b)
        self._fallback(what, why, "torch.nn.functional.linear")
        return F.linear(x, w, b)


class RMSNorm(_Layer):
    """RMSNorm over the last dimension: ``forward(x)`` returns it; ``forward(x, residual)`` is
    the fused add: residual <- x + residual, x <- RMSNorm(residual), both in place, returned as
    (x, residual). ``gemma=True`` scales by (1 + weight)."""

    def __init__(self, hidden_size: int, eps: float = 1e-6, *, gemma: bool = False,
                 device=None, dtype=None, strict: bool | None = None):
        super().__init__(strict)
        self.weight = _param((hidden_size,), device, dtype, 0.0 if gemma else 1.0)
        self.eps = eps
        self.variance_epsilon = eps  # Hugging Face's name
        self.gemma = gemma

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None,
                residual_out: torch.Tensor | None = None):
        """``residual_out``: write the sum there and leave ``residual`` as it is."""
        why = _rows_unsupported(x)
        if residual is None:
            if why is None:
                return (xt.gemma_rmsnorm if self.gemma else xt.rmsnorm)(x, self.weight, self.eps)
            self._fallback("rmsnorm", why, "a PyTorch composite")
            w = self.weight + 1 if self.gemma else self.weight
            return _rms_torch(x, w, self.eps)
        if why is None:
            op = xt.gemma_fused_add_rmsnorm if self.gemma else xt.fused_add_rmsnorm
            if residual_out is None:
                op(x, residual, self.weight, self.eps)
                return x, residual
            op(x, residual, self.weight, self.eps, out=x, residual_out=residual_out)
            return x, residual_out
        self._fallback("fused_add_rmsnorm", why, "a PyTorch composite")
        if residual_out is None:
            residual_out = residual
        torch.add(x, residual, out=residual_out)
        w = self.weight + 1 if self.gemma else self.weight
        x.copy_(_rms_torch(residual_out, w, self.eps))
        return x, residual_out

    def extra_repr(self) -> str:
        return f"{tuple(self.weight.shape)}, eps={self.eps}, gemma={self.gemma}"


class GatedMLP(_Layer):
    """down(act(x @ gate^T) * (x @ up^T)) with gate and up as one [2 * intermediate, hidden]
    weight (``gate_up``: gate rows first): ``gemm_gated`` reads x once and gates in its epilogue,
    so the [.., 2 * intermediate] product never reaches memory; then the down GEMM."""

    def __init__(self, hidden_size: int, intermediate_size: int, *, act: str = "silu",
                 bias: bool = False, device=None, dtype=None, strict: bool | None = None):
        super().__init__(strict)
        if act not in _GATES:
            raise ValueError(f"GatedMLP: act must be one of {sorted(_GATES)}, got {act!r}")
        self.act = act
        self.gate_up = _param((2 * intermediate_size, hidden_size), device, dtype)
        self.down = _param((hidden_size, intermediate_size), device, dtype)
        self.gate_up_bias = _param((2 * intermediate_size,), device, dtype, 0.0) if bias else None
        self.down_bias = _param((hidden_size,), device, dtype, 0.0) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        why = _gemm_unsupported(x, self.gate_up, 16)
        if why is None:
            a = xt.gemm_gated(x, self.gate_up, self.gate_up_bias, act=_GATES[self.act])
        else:
            self._fallback("gate_up", why, "torch.nn.functional.linear and a PyTorch act_and_mul")
            g, u = F.linear(x, self.gate_up, self.gate_up_bias).chunk(2, dim=-1)
            a = (F.silu(g) if self.act == "silu" else
                 F.gelu(g, approximate="none" if self.act == "gelu" else "tanh")) * u
        return self._linear("down", a, self.down, self.down_bias)


class PagedKVCache:
    """A paged KV cache for a batch of requests (FlashInfer's layout, NHD pages
    ``[num_pages, page_size, num_kv_heads, head_dim]`` per layer).

    Each forward appends the same number of new tokens to every request. ``begin(n)`` plans a
    forward of n new tokens per request (page slots, ``kv_indptr``, ``kv_indices``,
    ``kv_last_page_len``; one host-to-device copy); with ``auto_step`` (the default) the layer of
    index 0 calls it, so a model's forward needs nothing more. Pages are given out from a
    shuffled free list (a request's tokens scattered over the cache, as a serving engine leaves
    them)."""

    def __init__(self, num_layers: int, num_kv_heads: int, head_dim: int, *, batch_size: int,
                 max_seq_len: int, page_size: int = 16, dtype=torch.bfloat16, device=None,
                 auto_step: bool = True, seed: int = 0):
        self.num_layers, self.num_kv_heads, self.head_dim = num_layers, num_kv_heads, head_dim
        self.batch_size, self.max_seq_len, self.page_size = batch_size, max_seq_len, page_size
        self.device = torch.device(device if device is not None else "cpu")
        self.dtype = dtype
        self.auto_step = auto_step
        self.pages_per_request = -(-max_seq_len // page_size)
        num_pages = batch_size * self.pages_per_request
        shape = (num_pages, page_size, num_kv_heads, head_dim)
        self.k = [torch.zeros(shape, dtype=dtype, device=self.device) for _ in range(num_layers)]
        self.v = [torch.zeros(shape, dtype=dtype, device=self.device) for _ in range(num_layers)]
        rng = np.random.default_rng(seed)
        self.page_table = rng.permutation(num_pages).reshape(batch_size, -1).astype(np.int64)
        self.seq_lens = np.zeros(batch_size, dtype=np.int64)
        self.meta: dict[str, Any] | None = None

    def get_seq_length(self, layer_idx: int = 0) -> int:
        """Tokens already cached (Hugging Face's Cache method: the longest request's)."""
        return int(self.seq_lens.max()) if self.batch_size else 0

    def get_query_offset(self, layer_idx: int = 0) -> int:
        """Hugging Face's Cache method (its mask code asks): tokens cached before this call."""
        return self.get_seq_length(layer_idx)

    def get_mask_sizes(self, query_length: int, layer_idx: int = 0) -> tuple[int, int]:
        """Hugging Face's Cache method: the keys a call of query_length tokens attends to, and
        the position of the first."""
        return self.get_seq_length(layer_idx) + query_length, 0

    def reset(self) -> None:
        self.seq_lens[:] = 0
        self.meta = None

    def begin(self, num_new: int) -> dict[str, Any]:
        """Plan a forward that appends num_new tokens to every request."""
        old = self.seq_lens
        new = old + num_new
        if new.max(initial=0) > self.max_seq_len:
            raise ValueError(f"PagedKVCache: {int(new.max())} tokens exceed max_seq_len "
                             f"{self.max_seq_len}")
        p = self.page_size
        pos = old[:, None] + np.arange(num_new)[None, :]  # (batch, num_new)
        rows = np.arange(self.batch_size)[:, None]
        slots = self.page_table[rows, pos // p] * p + pos % p
        npages = -(-new // p)
        indptr = np.concatenate(([0], np.cumsum(npages))).astype(np.int32)
        indices = np.concatenate([self.page_table[b, : npages[b]] for b in range(self.batch_size)]
                                 + [np.zeros(0, np.int64)]).astype(np.int32)
        last = (new - (npages - 1) * p).astype(np.int32)
        qo = (np.arange(self.batch_size + 1) * num_new).astype(np.int32)
        packed = torch.from_numpy(np.concatenate((indptr, last, qo, indices)))
        packed = packed.to(self.device, non_blocking=True)
        b = self.batch_size
        self.meta = {
            "slots": torch.from_numpy(slots.reshape(-1)).to(self.device, non_blocking=True),
            "kv_indptr": packed[: b + 1], "kv_last_page_len": packed[b + 1: 2 * b + 1],
            "qo_indptr": packed[2 * b + 1: 3 * b + 2], "kv_indices": packed[3 * b + 2:],
            "fresh": bool((old == 0).all()), "num_new": num_new,
            "positions": torch.from_numpy(pos).to(self.device, non_blocking=True),
        }
        self.seq_lens = new
        return self.meta

    def step(self, layer_idx: int, num_new: int) -> dict[str, Any]:
        """The current forward's plan (begun here by layer 0 when auto_step)."""
        if self.auto_step and layer_idx == 0:
            return self.begin(num_new)
        if self.meta is None or self.meta["num_new"] != num_new:
            raise ValueError(f"PagedKVCache: layer {layer_idx} got {num_new} new tokens per "
                             "request, but no forward of that size was begun (begin(n), or "
                             "auto_step with layer 0 first)")
        return self.meta

    def append(self, layer_idx: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Write k, v [batch, num_new, num_kv_heads, head_dim] into their slots."""
        slots = self.meta["slots"]
        h, d = self.num_kv_heads, self.head_dim
        self.k[layer_idx].view(-1, h, d).index_copy_(0, slots, k.reshape(-1, h, d))
        self.v[layer_idx].view(-1, h, d).index_copy_(0, slots, v.reshape(-1, h, d))


class Attention(_Layer):
    """Self-attention of a decoder layer: qkv = x @ W_qkv^T (+ bias) as one GEMM; q and k
    views of it normalised per head (``qk_norm``, Qwen3) and rotated in place (RoPE); causal
    attention (dense for a prefill, the paged cache's kernels when given one); out = o @ W_o^T.

    ``forward(x [batch, seq, hidden], positions [batch, seq], cache=None)``; cache a
    ``PagedKVCache`` (prefill then decode), a Hugging Face ``Cache`` (its ``update`` gives the
    keys and values seen so far) or None (a prefill of its own)."""

    def __init__(self, hidden_size: int, num_heads: int, num_kv_heads: int,
                 head_dim: int | None = None, *, layer_idx: int = 0, bias: bool = False,
                 o_bias: bool = False, qk_norm: bool = False, eps: float = 1e-6,
                 rope: RopeConfig | None = None, window_left: int = -1,
                 logits_soft_cap: float = 0.0, sm_scale: float | None = None,
                 device=None, dtype=None, strict: bool | None = None):
        super().__init__(strict)
        if num_heads % num_kv_heads:
            raise ValueError(f"Attention: num_heads ({num_heads}) must be a multiple of "
                             f"num_kv_heads ({num_kv_heads})")
        d = head_dim or hidden_size // num_heads
        self.num_heads, self.num_kv_heads, self.head_dim = num_heads, num_kv_heads, d
        self.layer_idx = layer_idx
        self.window_left, self.logits_soft_cap = window_left, logits_soft_cap
        self.sm_scale = sm_scale if sm_scale is not None else d ** -0.5
        self.rope = rope or RopeConfig(d)
        self.eps = eps
        width = (num_heads + 2 * num_kv_heads) * d
        self.qkv = _param((width, hidden_size), device, dtype)
        self.qkv_bias = _param((width,), device, dtype, 0.0) if bias else None
        self.o = _param((hidden_size, num_heads * d), device, dtype)
        self.o_bias = _param((hidden_size,), device, dtype, 0.0) if o_bias else None
        self.q_norm = _param((d,), device, dtype, 1.0) if qk_norm else None
        self.k_norm = _param((d,), device, dtype, 1.0) if qk_norm else None

    def _rotate(self, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor) -> None:
        why = _rope_unsupported(q, self.rope)
        pos = positions.to(torch.int32)
        if self.q_norm is not None:
            if why is None:
                xt.qk_norm_rope(q, k, self.q_norm, self.k_norm, pos, eps=self.eps,
                                **self.rope.kernel_attrs())
                return
            self._fallback("qk_norm_rope", why, "a PyTorch composite")
            q.copy_(_rms_torch(q, self.q_norm, self.eps))
            k.copy_(_rms_torch(k, self.k_norm, self.eps))
        elif why is None:
            xt.apply_rope(q, k, pos, **self.rope.kernel_attrs())
            return
        else:
            self._fallback("apply_rope", why, "a PyTorch composite")
        _rope_torch(q, positions, self.rope)
        _rope_torch(k, positions, self.rope)

    def _attend(self, q, k, v, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Causal attention of q [b, s, hq, d] over k, v [b, l, hk, d] (bottom-right aligned);
        ``mask`` [b, l] (True: a real token) leaves out padding (see ``padded_attention``)."""
        why = _attention_unsupported(q, k)
        common = {"window_left": self.window_left, "logits_soft_cap": self.logits_soft_cap,
                  "sm_scale": self.sm_scale}
        if why is None and mask is None:
            return xt.attention(q, k, v, causal=True, **common)
        if why is None:
            return padded_attention(q, k, v, mask, **common)
        self._fallback("attention", why, "torch scaled_dot_product_attention")
        return _sdpa(q, k, v, self.sm_scale, self.window_left, self.logits_soft_cap, mask)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, cache: Any = None,
                mask: torch.Tensor | None = None) -> torch.Tensor:
        """``mask``: None (every token real), or [b, l] booleans over the keys this call
        attends to, the cached ones first and this call's last (Hugging Face's 2-D padding mask;
        False: padding, never attended to); not with a PagedKVCache."""
        b, s = x.shape[0], x.shape[1]
        hq, hk, d = self.num_heads, self.num_kv_heads, self.head_dim
        qkv = self._linear("qkv", x, self.qkv, self.qkv_bias)  # (b, s, (hq + 2 hk) d)
        q = qkv[..., : hq * d].view(b, s, hq, d)
        k = qkv[..., hq * d: (hq + hk) * d].view(b, s, hk, d)
        v = qkv[..., (hq + hk) * d:].view(b, s, hk, d)
        positions = positions.expand(b, s)
        self._rotate(q, k, positions)
        if isinstance(cache, PagedKVCache):
            if mask is not None:
                raise ValueError("Attention: a padding mask with a PagedKVCache is not "
                                 "supported (the paged cache holds each request's own tokens: "
                                 "give it unpadded requests)")
            o = self._paged(q, k, v, cache)
        elif cache is not None:  # a Hugging Face Cache: [b, h, l, d] keys and values so far
            kk, vv = cache.update(k.transpose(1, 2), v.transpose(1, 2), self.layer_idx)
            o = self._attend(q, kk.transpose(1, 2), vv.transpose(1, 2), mask)
        else:
            o = self._attend(q, k, v, mask)
        return self._linear("o", o.reshape(b, s, hq * d), self.o, self.o_bias)

    def _paged(self, q, k, v, cache: PagedKVCache) -> torch.Tensor:
        b, s, hq, d = q.shape
        meta = cache.step(self.layer_idx, s)
        cache.append(self.layer_idx, k, v)
        if meta["fresh"]:  # a prefill with no earlier tokens: the dense kernel over k, v
            return self._attend(q, k, v)
        kc, vc = cache.k[self.layer_idx], cache.v[self.layer_idx]
        why = _attention_unsupported(q, kc)
        common = {"window_left": self.window_left, "logits_soft_cap": self.logits_soft_cap,
                  "sm_scale": self.sm_scale}
        table = (meta["kv_indptr"], meta["kv_indices"], meta["kv_last_page_len"])
        if why is None and s == 1:
            return xt.decode_paged(q[:, 0], kc, vc, *table, **common).view(b, s, hq, d)
        if why is None:
            o = xt.attention_paged(q.reshape(b * s, hq, d), kc, vc, meta["qo_indptr"], *table,
                                   causal=True, **common)
            return o.view(b, s, hq, d)
        self._fallback("paged attention", why, "torch scaled_dot_product_attention")
        lens = cache.seq_lens
        outs = []
        for i in range(b):
            pages = cache.page_table[i, : -(-int(lens[i]) // cache.page_size)]
            idx = torch.from_numpy(pages).to(kc.device)
            kk = kc[idx].flatten(0, 1)[: lens[i]][None]
            vv = vc[idx].flatten(0, 1)[: lens[i]][None]
            outs.append(_sdpa(q[i: i + 1], kk, vv, self.sm_scale, self.window_left,
                              self.logits_soft_cap))
        return torch.cat(outs)


def _sdpa(q, k, v, scale: float, window_left: int, cap: float,
          mask: torch.Tensor | None = None) -> torch.Tensor:
    """The fallback: q [b, s, hq, d], k, v [b, l, hk, d] -> [b, s, hq, d], causal aligned to the
    bottom right, in float32 where a soft cap or window needs an explicit mask; ``mask`` [b, l]
    (True: a real token) leaves out padded keys, and padded query rows and rows that see no key
    come out 0 (as ``padded_attention``'s)."""
    s, length = q.shape[1], k.shape[1]
    qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    g = q.shape[2] // k.shape[2]
    kt, vt = kt.repeat_interleave(g, dim=1), vt.repeat_interleave(g, dim=1)
    i = torch.arange(s, device=q.device)[:, None] + (length - s)
    j = torch.arange(length, device=q.device)[None, :]
    allowed = j <= i
    if window_left >= 0:
        allowed &= j >= i - window_left
    if mask is not None:  # [s, l] -> [b, 1, s, l]
        allowed = allowed[None, None] & mask[:, None, None, -length:].to(torch.bool)
    if cap > 0 or mask is not None:
        logits = torch.einsum("bhsd,bhld->bhsl", qt.float(), kt.float()) * scale
        if cap > 0:
            logits = cap * torch.tanh(logits / cap)
        logits = logits.masked_fill(~allowed, float("-inf"))
        p = logits.softmax(-1).nan_to_num(0.0)  # a row with no key: 0, not nan
        if mask is not None:  # padded query rows: 0
            p = p * mask[:, None, -s:, None].to(torch.bool)
        o = torch.einsum("bhsl,bhld->bhsd", p, vt.float()).to(q.dtype)
    else:
        o = F.scaled_dot_product_attention(qt, kt, vt, attn_mask=allowed, scale=scale)
    return o.transpose(1, 2)


def padded_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, *,
                     window_left: int = -1, logits_soft_cap: float = 0.0,
                     sm_scale: float | None = None) -> torch.Tensor:
    """Causal attention of a padded batch: q [b, s, hq, d] (this call's tokens), k and v [b, l,
    hk, d] (every key, this call's last), ``mask`` [b, l] (True: a real token; Hugging Face's 2-D
    attention mask, left or right padding). Each request's real queries attend to its real keys
    up to their own position, as one ragged batch (``xkernels.torch.attention_varlen`` over the
    real tokens, gathered); padded query rows come out 0. The gathering reads the mask on the
    host (a synchronisation), as Hugging Face's own unpadding for FlashAttention does."""
    b, s, hq, d = q.shape
    length, hk = k.shape[1], k.shape[2]
    keys = mask[:, -length:].to(device=q.device, dtype=torch.bool)
    queries = keys[:, length - s:]
    q_rows = queries.reshape(-1).nonzero().squeeze(1)
    k_rows = keys.reshape(-1).nonzero().squeeze(1)
    cu_q = F.pad(queries.sum(1).cumsum(0), (1, 0)).to(torch.int32)
    cu_k = F.pad(keys.sum(1).cumsum(0), (1, 0)).to(torch.int32)
    o = xt.attention_varlen(q.reshape(b * s, hq, d).index_select(0, q_rows),
                            k.reshape(b * length, hk, d).index_select(0, k_rows),
                            v.reshape(b * length, hk, d).index_select(0, k_rows), cu_q, cu_k,
                            causal=True, window_left=window_left,
                            logits_soft_cap=logits_soft_cap, sm_scale=sm_scale)
    out = q.new_zeros(b * s, hq, d)
    out.index_copy_(0, q_rows, o)
    return out.view(b, s, hq, d)


class DecoderLayer(_Layer):
    """A pre-norm decoder layer: x + attn(norm(x)), then + mlp(norm(.)); the residual adds fused
    into the norms (``fused_add_rmsnorm``). ``forward(x, positions, cache=None)`` returns the
    layer's output (the residual stream)."""

    def __init__(self, hidden_size: int, intermediate_size: int, num_heads: int,
                 num_kv_heads: int, head_dim: int | None = None, *, layer_idx: int = 0,
                 eps: float = 1e-6, act: str = "silu", attention_bias: bool = False,
                 mlp_bias: bool = False, qk_norm: bool = False, rope: RopeConfig | None = None,
                 window_left: int = -1, device=None, dtype=None, strict: bool | None = None):
        super().__init__(strict)
        kw = {"device": device, "dtype": dtype, "strict": strict}
        self.layer_idx = layer_idx
        self.input_layernorm = RMSNorm(hidden_size, eps, **kw)
        self.self_attn = Attention(hidden_size, num_heads, num_kv_heads, head_dim,
                                   layer_idx=layer_idx, bias=attention_bias, qk_norm=qk_norm,
                                   eps=eps, rope=rope, window_left=window_left, **kw)
        self.post_attention_layernorm = RMSNorm(hidden_size, eps, **kw)
        self.mlp = GatedMLP(hidden_size, intermediate_size, act=act, bias=mlp_bias, **kw)

    def export_params(self) -> dict[str, torch.Tensor]:
        """The weights as ``xkernels.jax.nn``'s parameter pytree (same names, same tensors)."""
        a, m = self.self_attn, self.mlp
        named = {"input_norm": self.input_layernorm.weight, "qkv": a.qkv,
                 "qkv_bias": a.qkv_bias, "q_norm": a.q_norm, "k_norm": a.k_norm, "o": a.o,
                 "o_bias": a.o_bias, "post_norm": self.post_attention_layernorm.weight,
                 "gate_up": m.gate_up, "gate_up_bias": m.gate_up_bias, "down": m.down,
                 "down_bias": m.down_bias}
        return {k: v.detach() for k, v in named.items() if v is not None}

    def export_config(self) -> dict[str, Any]:
        """The keyword arguments of ``xkernels.jax.nn.LayerConfig`` for this layer."""
        a = self.self_attn
        return {"num_heads": a.num_heads, "num_kv_heads": a.num_kv_heads,
                "head_dim": a.head_dim, "eps": self.input_layernorm.eps, "act": self.mlp.act,
                **a.rope.kernel_attrs(), "window_left": a.window_left,
                "logits_soft_cap": a.logits_soft_cap, "sm_scale": a.sm_scale,
                "strict": self.strict}

    def forward(self, x: torch.Tensor, positions: torch.Tensor, cache: Any = None,
                mask: torch.Tensor | None = None) -> torch.Tensor:
        h = self.input_layernorm(x)
        h = self.self_attn(h, positions, cache, mask)
        # residual = x + attn (x left as it is), h = norm(residual)
        h, residual = self.post_attention_layernorm(h, x, residual_out=torch.empty_like(x))
        h = self.mlp(h)
        return h.add_(residual)


# ---------------------------------------------------------------------------------------------
# Hugging Face

class HFDecoderLayer(nn.Module):
    """A ``DecoderLayer`` behind a Hugging Face decoder layer's call (hidden_states,
    attention_mask, position_ids, cache / past_key_values, ...). The position embeddings HF
    computes are not needed (RoPE is the kernels'). The attention mask, with the "xkernels"
    mask function (``register_hf_attention``), is None for an unpadded batch (the kernels' own
    causal mask) or HF's 2-D padding mask (``padded_attention``); a 4-D mask (a custom one a
    caller passed) raises ``xkernels.fallback.UnsupportedError``."""

    def __init__(self, layer: DecoderLayer):
        super().__init__()
        self.layer = layer
        self.attention_type = "full_attention"

    def forward(self, hidden_states: torch.Tensor, attention_mask: Any = None,
                position_ids: torch.Tensor | None = None, cache: Any = None,
                past_key_values: Any = None, **kwargs: Any) -> torch.Tensor:
        if (isinstance(cache, PagedKVCache) and past_key_values is not None
                and past_key_values is not cache):
            # the model's forward did not take `cache=` (transformers before it was renamed from
            # past_key_values): it passed the keyword through to here, and made a cache of its
            # own, whose empty length set position_ids, so RoPE would rotate by wrong positions
            raise TypeError(
                "xkernels: a PagedKVCache passed as `cache=` to a transformers model whose "
                "forward takes `past_key_values=` (this transformers version); pass it as "
                "`past_key_values=` (xkernels.torch.nn.cache_kwarg(model) names the keyword)")
        cache = cache if cache is not None else past_key_values
        if position_ids is None:
            start = cache.get_seq_length() if cache is not None else 0
            position_ids = torch.arange(start, start + hidden_states.shape[1],
                                        device=hidden_states.device)[None]
        mask = attention_mask if isinstance(attention_mask, torch.Tensor) else None
        if mask is not None and mask.dim() != 2:
            raise fallback.UnsupportedError(
                f"xkernels: a {mask.dim()}-D attention mask (a custom mask) is not supported by "
                "the patched layers; they take Hugging Face's 2-D padding mask or none")
        return self.layer(hidden_states, position_ids, cache, mask)


def _hf_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0,
                  **kwargs):
    """The "xkernels" attention implementation for Hugging Face models that are not patched:
    [b, h, s, d] views in, [b, s, h, d] out, causal. ``attention_mask`` is what the "xkernels"
    mask function gives: None (no padding) or the 2-D padding mask."""
    if not getattr(module, "is_causal", True):
        raise ValueError("the xkernels attention implementation is causal only")
    mask = attention_mask if isinstance(attention_mask, torch.Tensor) else None
    if mask is not None and mask.dim() != 2:
        raise ValueError(f"the xkernels attention implementation takes a 2-D padding mask or "
                         f"none, got a {mask.dim()}-D mask")
    q, k, v = query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2)
    why = _attention_unsupported(q, k)
    window = kwargs.get("sliding_window")
    window_left = window - 1 if window else -1
    cap = getattr(module, "attn_logit_softcapping", None) or 0.0
    if why is None and mask is None:
        return xt.attention(q, k, v, causal=True, sm_scale=scaling, window_left=window_left,
                            logits_soft_cap=cap), None
    if why is None:
        return padded_attention(q, k, v, mask, sm_scale=scaling, window_left=window_left,
                                logits_soft_cap=cap), None
    fallback.take("xkernels attention implementation", why, "torch SDPA")
    return _sdpa(q, k, v, scaling or q.shape[-1] ** -0.5, window_left, cap, mask), None


def register_hf_attention() -> str:
    """Register "xkernels" as a transformers attention implementation, with FlashAttention's
    mask function (None for an unpadded batch, whose causal mask is the kernels' own; the 2-D
    padding mask otherwise); returns the name."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, flash_attention_mask

    AttentionInterface.register("xkernels", _hf_attention)
    AttentionMaskInterface.register("xkernels", flash_attention_mask)
    return "xkernels"


def _decoder_from_hf(layer: nn.Module, config: Any, idx: int, rope: RopeConfig,
                     strict: bool | None) -> DecoderLayer:
    attn, mlp = layer.self_attn, layer.mlp
    w = attn.q_proj.weight
    hq, hk = config.num_attention_heads, config.num_key_value_heads
    d = attn.head_dim
    kind = (config.layer_types[idx] if getattr(config, "layer_types", None) else None)
    window = getattr(config, "sliding_window", None) if kind == "sliding_attention" else None
    act = getattr(config, "hidden_act", "silu")
    qk_norm = hasattr(attn, "q_norm")
    out = DecoderLayer(config.hidden_size, mlp.gate_proj.weight.shape[0], hq, hk, d,
                       layer_idx=idx, eps=layer.input_layernorm.variance_epsilon, act=act,
                       attention_bias=attn.q_proj.bias is not None,
                       mlp_bias=mlp.gate_proj.bias is not None, qk_norm=qk_norm, rope=rope,
                       window_left=window - 1 if window else -1, device="meta", dtype=w.dtype,
                       strict=strict)
    out.self_attn.sm_scale = attn.scaling

    def cat(*ts):
        return nn.Parameter(torch.cat([t.detach() for t in ts]), requires_grad=False)

    def keep(t):
        return nn.Parameter(t.detach(), requires_grad=False)

    a = out.self_attn
    a.qkv = cat(attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight)
    if a.qkv_bias is not None:
        a.qkv_bias = cat(attn.q_proj.bias, attn.k_proj.bias, attn.v_proj.bias)
    a.o = keep(attn.o_proj.weight)
    if attn.o_proj.bias is not None:
        a.o_bias = keep(attn.o_proj.bias)
    if qk_norm:
        a.q_norm, a.k_norm = keep(attn.q_norm.weight), keep(attn.k_norm.weight)
        a.eps = attn.q_norm.variance_epsilon
    m = out.mlp
    m.gate_up = cat(mlp.gate_proj.weight, mlp.up_proj.weight)
    m.down = keep(mlp.down_proj.weight)
    if m.gate_up_bias is not None:
        m.gate_up_bias = cat(mlp.gate_proj.bias, mlp.up_proj.bias)
        m.down_bias = keep(mlp.down_proj.bias)
    out.input_layernorm.weight = keep(layer.input_layernorm.weight)
    out.post_attention_layernorm.weight = keep(layer.post_attention_layernorm.weight)
    out.post_attention_layernorm.eps = layer.post_attention_layernorm.variance_epsilon
    return out


def cache_kwarg(model: Any) -> str:
    """The keyword by which a Hugging Face model (or layer) takes its cache: "cache" where its
    forward has that parameter (newer transformers 5 releases), else "past_key_values" (earlier
    ones, e.g. 5.17). A keyword the forward does not take is passed on unread: HF's model then
    runs without that cache."""
    import inspect

    forward = getattr(model, "forward", model)
    return "cache" if "cache" in inspect.signature(forward).parameters else "past_key_values"


def patch(model: nn.Module, *, strict: bool | None = None) -> nn.Module:
    """Swap xkernels' layers into a Hugging Face Llama / Mistral / Qwen2 / Qwen3 model in place
    (its weights kept; q, k, v and gate, up concatenated into one weight each) and return it.

    The patched model takes a ``PagedKVCache(...)`` as its cache (prefill, then decode steps;
    unpadded requests; by the keyword ``cache_kwarg(model)`` names: ``cache=`` or, in earlier
    transformers 5 releases, ``past_key_values=``), a Hugging Face cache (``generate`` works,
    padded batches included: HF's ``attention_mask`` leaves out the padding,
    ``padded_attention``), or none."""
    inner = getattr(model, "model", model)
    config = model.config
    layers = inner.layers
    first = layers[0]
    d = first.self_attn.head_dim
    rope = RopeConfig.from_hf(config, d, getattr(inner, "rotary_emb", None))
    for i, layer in enumerate(layers):
        if isinstance(layer, HFDecoderLayer):
            continue
        layers[i] = HFDecoderLayer(_decoder_from_hf(layer, config, i, rope, strict))
    if hasattr(inner, "norm") and not isinstance(inner.norm, RMSNorm):
        norm = RMSNorm(config.hidden_size, inner.norm.variance_epsilon, device="meta",
                       dtype=inner.norm.weight.dtype, strict=strict)
        norm.weight = nn.Parameter(inner.norm.weight.detach(), requires_grad=False)
        inner.norm = norm
    if hasattr(inner, "rotary_emb"):
        inner.rotary_emb = _NoRotary(inner.rotary_emb)
    config._attn_implementation = register_hf_attention()
    return model


class _NoRotary(nn.Module):
    """Stands in for HF's rotary embedding (the layers rotate in their own kernel): HF's model
    still calls it, and gets nothing to compute."""

    def __init__(self, original: nn.Module):
        super().__init__()
        self.original = original

    def forward(self, x, position_ids=None, *args, **kwargs):
        return None, None
