"""DLPack glue for array libraries whose exporter refuses a dtype TVM-FFI takes (bfloat16 from
NumPy with ml_dtypes): export a uint16 view and retag the capsule's dtype, in place, zero-copy.

NumPy's ``__dlpack__`` raises ``BufferError: DLPack only supports signed/unsigned integers, float
and complex dtypes`` for ``ml_dtypes.bfloat16``; the retagged capsule points at the same memory.

This runs once per bfloat16 array per call, so it is kept to one ctypes call
(``PyCapsule_GetPointer``) and one 16-bit read and write of the dtype's (code, bits) bytes.
"""

from __future__ import annotations

import ctypes
import sys
from typing import Any

import tvm_ffi

KDL_UINT, KDL_BFLOAT = 1, 4
_VERSIONED, _LEGACY = b"dltensor_versioned", b"dltensor"
# Offset of DLTensor.dtype in the capsule's struct: DLTensor = {void* data; DLDevice device (2 x
# int32); int32 ndim; DLDataType dtype; ...}; DLManagedTensorVersioned puts {version (2 x uint32),
# manager_ctx, deleter, uint64 flags} = 32 bytes before its DLTensor.
_DTYPE_OFFSET = {_LEGACY: 20, _VERSIONED: 32 + 20}
_VERSIONED_OFFSET = _DTYPE_OFFSET[_VERSIONED]


def _code_bits(code: int, bits: int = 16) -> int:
    """DLDataType's first two bytes (uint8 code, uint8 bits) read as one native uint16."""
    return int.from_bytes(bytes([code, bits]), sys.byteorder)


_UINT16, _BFLOAT16 = _code_bits(KDL_UINT), _code_bits(KDL_BFLOAT)

_api = ctypes.pythonapi
_api.PyCapsule_GetName.restype = ctypes.c_char_p
_api.PyCapsule_GetName.argtypes = [ctypes.py_object]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_get_pointer = _api.PyCapsule_GetPointer  # raises ValueError for another name (or no capsule)
_u16_at = ctypes.c_uint16.from_address


def _dtype_address(capsule: Any) -> int:
    """Address of the dtype of a capsule of either name (the slow path: two ctypes calls)."""
    name = _api.PyCapsule_GetName(capsule) if type(capsule).__name__ == "PyCapsule" else None
    if name not in _DTYPE_OFFSET:
        raise ValueError(f"expected an unconsumed DLPack capsule, got one named {name!r}")
    return _get_pointer(capsule, name) + _DTYPE_OFFSET[name]


def retag_bfloat16(capsule: Any) -> Any:
    """Turn an unconsumed DLPack capsule of a uint16 tensor into a bfloat16 one (same memory)."""
    try:  # NumPy's __dlpack__(max_version=(1, 0)): the common case, one ctypes call
        dtype = _u16_at(_get_pointer(capsule, _VERSIONED) + _VERSIONED_OFFSET)
    except (ValueError, TypeError):
        dtype = _u16_at(_dtype_address(capsule))
    if dtype.value != _UINT16:
        code, bits = dtype.value.to_bytes(2, sys.byteorder)
        raise ValueError(f"expected a uint16 DLPack tensor, got code {code} bits {bits}")
    dtype.value = _BFLOAT16
    return capsule


def bfloat16_tensor(view16_capsule: Any) -> tvm_ffi.Tensor:
    """A tvm_ffi.Tensor of dtype bfloat16 over the memory of a uint16 view's capsule."""
    return tvm_ffi.from_dlpack(retag_bfloat16(view16_capsule))
