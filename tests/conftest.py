import importlib.util
import os

import pytest
import torch

HAS_CUDA = torch.cuda.is_available()
HAS_JAX = all(importlib.util.find_spec(m) is not None for m in ("jax", "jax_tvm_ffi"))


def _cupy_gpu() -> bool:
    """CuPy imports without a GPU and raises CUDARuntimeError on first use."""
    if importlib.util.find_spec("cupy") is None:
        return False
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # noqa: BLE001 (no driver, no device: no CuPy here)
        return False


def _jax_gpu() -> bool:
    if not HAS_JAX:
        return False
    # torch, CuPy and JAX share the GPU in one process: JAX must not take 75% of it up front
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    import jax

    try:
        return bool(jax.devices("gpu"))
    except RuntimeError:
        return False


HAS_CUPY = _cupy_gpu()
HAS_JAX_GPU = _jax_gpu()

gpu = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
needs_jax = pytest.mark.skipif(not HAS_JAX, reason="needs jax and jax-tvm-ffi")
needs_jax_gpu = pytest.mark.skipif(not HAS_JAX_GPU, reason="needs jax with a GPU backend")
needs_cupy = pytest.mark.skipif(not HAS_CUPY, reason="needs CuPy and a CUDA GPU")
