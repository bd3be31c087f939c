"""DLPack glue for array libraries whose exporter refuses a dtype TVM-FFI takes (bfloat16 and
float8_e4m3fn from NumPy and CuPy with ml_dtypes): export an unsigned view of the same width and
retag the capsule's dtype, in place, zero-copy.

NumPy's ``__dlpack__`` raises ``BufferError: DLPack only supports signed/unsigned integers, float
and complex dtypes`` for ``ml_dtypes.bfloat16`` and ``ml_dtypes.float8_e4m3fn``; CuPy's exporter
knows bfloat16 (from CuPy 14) but refuses every other ml_dtypes type (``get_dlpack_dtype_code``
special-cases the name "bfloat16" only; CuPy holds float8 arrays as containers: ``view`` accepts
the dtype, ``empty`` refuses it). The retagged capsule points at the same memory, with DLPack's
code for the type (kDLBfloat 4, kDLFloat8_e4m3fn 10: dlpack.h 1.1).

The other frameworks need none of this. PyTorch: TVM-FFI takes a torch tensor through the DLPack
exchange API (torch's own, or, where torch lacks it, the extension tvm_ffi._optional_torch_c_dlpack
builds, its code copied from torch's DLConvertor), which maps Float8_e4m3fn to kDLFloat8_e4m3fn,
as torch's own ``__dlpack__`` does in recent releases (older DLConvertors raised "float8 types are
not supported by dlpack"); checked with torch 2.13 and tvm-ffi 0.1.15: both give float8_e4m3fn. JAX: jax-tvm-ffi (0.1.3) maps XLA's F8E4M3FN
buffers to kDLFloat8_e4m3fn (``DecodeDataType`` in src/jax_tvm_ffi.cc; checked with jax 0.10).

This runs once per such array per call, so it is kept to one ctypes call
(``PyCapsule_GetPointer``) and one 16-bit read and write of the dtype's (code, bits) bytes.
"""

from __future__ import annotations

import ctypes
import sys
from typing import Any

import tvm_ffi

KDL_UINT, KDL_BFLOAT, KDL_FLOAT8_E4M3FN = 1, 4, 10
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
_UINT8, _FLOAT8_E4M3FN = _code_bits(KDL_UINT, 8), _code_bits(KDL_FLOAT8_E4M3FN, 8)

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


def _retag(capsule: Any, expect: int, to: int, what: str) -> Any:
    try:  # NumPy's __dlpack__(max_version=(1, 0)): the common case, one ctypes call
        dtype = _u16_at(_get_pointer(capsule, _VERSIONED) + _VERSIONED_OFFSET)
    except (ValueError, TypeError):
        dtype = _u16_at(_dtype_address(capsule))
    if dtype.value != expect:
        code, bits = dtype.value.to_bytes(2, sys.byteorder)
        raise ValueError(f"expected a {what} DLPack tensor, got code {code} bits {bits}")
    dtype.value = to
    return capsule


def retag_bfloat16(capsule: Any) -> Any:
    """Turn an unconsumed DLPack capsule of a uint16 tensor into a bfloat16 one (same memory)."""
    return _retag(capsule, _UINT16, _BFLOAT16, "uint16")


def retag_float8_e4m3fn(capsule: Any) -> Any:
    """Turn an unconsumed DLPack capsule of a uint8 tensor into a float8_e4m3fn one (same
    memory)."""
    return _retag(capsule, _UINT8, _FLOAT8_E4M3FN, "uint8")


def bfloat16_tensor(view16_capsule: Any) -> tvm_ffi.Tensor:
    """A tvm_ffi.Tensor of dtype bfloat16 over the memory of a uint16 view's capsule."""
    return tvm_ffi.from_dlpack(retag_bfloat16(view16_capsule))


def float8_e4m3fn_tensor(view8_capsule: Any) -> tvm_ffi.Tensor:
    """A tvm_ffi.Tensor of dtype float8_e4m3fn over the memory of a uint8 view's capsule."""
    return tvm_ffi.from_dlpack(retag_float8_e4m3fn(view8_capsule))


# dtype name -> (the unsigned dtype of its view, the tvm_ffi.Tensor of that view's capsule)
RETAGGED = {"bfloat16": ("uint16", bfloat16_tensor),
            "float8_e4m3fn": ("uint8", float8_e4m3fn_tensor)}
