"""xkernels.numpy: every op of the table as a function on numpy.ndarray, the host path.

The same exported TVM-FFI functions as every other adapter, on CPU memory: the host (C++)
implementations, the same API on any machine. Arrays cross through DLPack without a copy (strided
rows, offsets and read-only inputs included). bfloat16 is ``ml_dtypes.bfloat16``: NumPy's DLPack
exporter refuses it, so such an array crosses as a uint16 view whose DLPack dtype is retagged
(the same memory).

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

    _BF16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # then no bfloat16 array can exist
    _BF16 = None


def _arg(x: np.ndarray):
    if x.dtype == _BF16:
        return _dlpack.bfloat16_tensor(x.view(np.uint16).__dlpack__(max_version=(1, 0)))
    # versioned DLPack: the legacy export refuses read-only arrays
    return tvm_ffi.from_dlpack(x.__dlpack__(max_version=(1, 0)))


def _empty(shape, dtype, like):
    return np.empty(shape, dtype)


def _read_only(x: np.ndarray) -> bool:
    return not x.flags.writeable


globals().update(_arrays.generate(_arrays.Backend(
    module=__name__, array=np.ndarray, array_name="numpy.ndarray", empty=_empty, arg=_arg,
    read_only=_read_only)))
