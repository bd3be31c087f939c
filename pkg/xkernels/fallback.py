"""Fallbacks of the model layers (``xkernels.torch.nn``, ``xkernels.jax.nn``).

A layer calls an xkernels op where the op supports the call's shapes and dtypes, and the
framework's own op where it does not (a head_dim the attention kernels were not built for, float64,
a GEMM whose k is not a multiple of 8, ...). Each fallback warns once per (site, reason): a
``FallbackWarning`` naming what was unsupported and what ran instead. Nothing falls back silently
and nothing else falls back: an error that is not "unsupported" propagates.

``XKERNELS_STRICT=1`` in the environment, or ``strict=True`` on a layer, turns every fallback into
an ``UnsupportedError`` (tests use it to prove that a model ran on xkernels alone).
"""

from __future__ import annotations

import os
import threading
import warnings

STRICT_ENV = "XKERNELS_STRICT"


class FallbackWarning(UserWarning):
    """A layer ran the framework's op instead of an xkernels kernel (once per site and reason)."""


class UnsupportedError(ValueError):
    """Strict mode: a layer needed a fallback (what xkernels does not support, and where)."""


_seen: set[tuple[str, str]] = set()
_lock = threading.Lock()
# Every fallback taken since the last reset: (site, reason) -> count (tests and `profile` read it).
counts: dict[tuple[str, str], int] = {}


def strict_default() -> bool:
    return os.environ.get(STRICT_ENV, "").strip().lower() not in ("", "0", "false", "no")


def take(site: str, reason: str, instead: str, strict: bool | None = None) -> None:
    """Record that `site` (e.g. "Attention(layer 3).attention") falls back because of `reason`
    (what is unsupported), running `instead`: raise in strict mode, else warn once per (site,
    reason)."""
    if strict if strict is not None else strict_default():
        raise UnsupportedError(f"{site}: {reason}; strict mode ({STRICT_ENV}=1 or strict=True) "
                               f"forbids the fallback to {instead}")
    key = (site, reason)
    with _lock:
        counts[key] = counts.get(key, 0) + 1
        first = key not in _seen
        _seen.add(key)
    if first:
        warnings.warn(f"xkernels: {site}: {reason}; running {instead} instead (warned once)",
                      FallbackWarning, stacklevel=3)


def reset() -> None:
    """Forget the warnings given and the counts (tests)."""
    with _lock:
        _seen.clear()
        counts.clear()
