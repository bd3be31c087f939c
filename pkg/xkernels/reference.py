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
