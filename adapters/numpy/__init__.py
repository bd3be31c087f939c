"""xkernels.numpy: every op of the table as a function on numpy.ndarray, the host path.

The same exported TVM-FFI functions as every other adapter, on CPU memory: the host (C++)
implementations, the same API on any machine. Arrays cross through DLPack without a copy (strided
rows, offsets and read-only inputs included). bfloat16 is ``ml_dtypes.bfloat16`` and float8 is
``ml_dtypes.float8_e4m3fn``: NumPy's DLPack exporter refuses both, so such an array crosses as a
uint16 (uint8) view whose DLPack dtype is retagged (the same memory).

Functional ops take an optional ``out=`` and return it; in-place ops (``fused_add_rmsnorm``)
overwrite their inputs and return None, as in ``xkernels.torch``.
"""

from __future__ import annotations

import tvm_ffi

import numpy as np

from .. import _arrays, _dlpack
from ..ops import OPS

__all__ = sorted(OPS)  # noqa: PLE0605 (generated from the op table)

try:
    import ml_dtypes

    _BF16, _F8 = np.dtype(ml_dtypes.bfloat16), np.dtype(ml_dtypes.float8_e4m3fn)
except ImportError:  # then no bfloat16 or float8 array can exist
    _BF16 = _F8 = None


def _arg(x: np.ndarray):
    dtype = x.dtype
    if dtype == _BF16:
        return _dlpack.bfloat16_tensor(x.view(np.uint16).__dlpack__(max_version=(1, 0)))
    if dtype == _F8:
        return _dlpack.float8_e4m3fn_tensor(x.view(np.uint8).__dlpack__(max_version=(1, 0)))
    # versioned DLPack: the legacy export refuses read-only arrays
    return tvm_ffi.from_dlpack(x.__dlpack__(max_version=(1, 0)))


def _empty(shape, dtype, like):
    return np.empty(shape, dtype)


def _read_only(x: np.ndarray) -> bool:
    return not x.flags.writeable


globals().update(_arrays.generate(_arrays.Backend(
    module=__name__, array=np.ndarray, array_name="numpy.ndarray", empty=_empty, arg=_arg,
    read_only=_read_only)))
