"""DLPack glue for array libraries whose exporter refuses a dtype TVM-FFI takes (bfloat16 from
NumPy with ml_dtypes): export a uint16 view and retag the capsule's dtype, in place, zero-copy.

NumPy's ``__dlpack__`` raises ``BufferError: DLPack only supports signed/unsigned integers, float
and complex dtypes`` for ``ml_dtypes.bfloat16``; the retagged capsule points at the same memory.
"""

from __future__ import annotations

import ctypes
from typing import Any

import tvm_ffi

KDL_UINT, KDL_BFLOAT = 1, 4
# Offset of DLTensor.dtype in the capsule's struct: DLTensor = {void* data; DLDevice device (2 x
# int32); int32 ndim; DLDataType dtype; ...}; DLManagedTensorVersioned puts {version (2 x uint32),
# manager_ctx, deleter, uint64 flags} = 32 bytes before its DLTensor.
_DTYPE_OFFSET = {b"dltensor": 20, b"dltensor_versioned": 32 + 20}

_api = ctypes.pythonapi
_api.PyCapsule_GetName.restype = ctypes.c_char_p
_api.PyCapsule_GetName.argtypes = [ctypes.py_object]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def retag_bfloat16(capsule: Any) -> Any:
    """Turn an unconsumed DLPack capsule of a uint16 tensor into a bfloat16 one (same memory)."""
    name = _api.PyCapsule_GetName(capsule)
    if name not in _DTYPE_OFFSET:
        raise ValueError(f"expected an unconsumed DLPack capsule, got one named {name!r}")
    dtype = _api.PyCapsule_GetPointer(capsule, name) + _DTYPE_OFFSET[name]
    code, bits = ctypes.c_uint8.from_address(dtype), ctypes.c_uint8.from_address(dtype + 1)
    if (code.value, bits.value) != (KDL_UINT, 16):
        raise ValueError(f"expected a uint16 DLPack tensor, got code {code.value} bits {bits.value}")
    code.value = KDL_BFLOAT
    return capsule


def bfloat16_tensor(view16_capsule: Any) -> tvm_ffi.Tensor:
    """A tvm_ffi.Tensor of dtype bfloat16 over the memory of a uint16 view's capsule."""
    return tvm_ffi.from_dlpack(retag_bfloat16(view16_capsule))
