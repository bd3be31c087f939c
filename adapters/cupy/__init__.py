"""xkernels.cupy: every op of the table as a function on cupy.ndarray.

The same exported TVM-FFI functions as every other adapter. A call runs on CuPy's current stream
of the arrays' device (``tvm_ffi.use_raw_stream``; TVM-FFI does not read CuPy's stream itself),
under the exported function's device guard, so arrays on a second GPU run there whatever the
current device; outputs are allocated on that device. Arrays cross through DLPack without a copy
and without a stream handshake (``__dlpack__(stream=-1)``: the kernel is queued on the stream
that produced them, so there is nothing to wait for, and nothing is recorded on other streams,
which keeps the call capturable in a CUDA graph). bfloat16 is ``ml_dtypes.bfloat16`` (CuPy >= 14);
where CuPy's DLPack export refuses it, it crosses as a uint16 view whose DLPack dtype is retagged.
float8 is ``ml_dtypes.float8_e4m3fn``: CuPy holds such arrays only as containers (make one with
``cupy.empty(shape, cupy.uint8).view(ml_dtypes.float8_e4m3fn)``, as this adapter does for its
outputs; ``cupy.empty`` refuses the dtype) and its DLPack export refuses them, so they cross as a
uint8 view, retagged.

Functional ops take an optional ``out=`` and return it; in-place ops (``fused_add_rmsnorm``)
overwrite their inputs and return None, as in ``xkernels.torch``.
"""

from __future__ import annotations

import numpy as np
import tvm_ffi

import cupy

from .. import _arrays, _dlpack
from ..ops import OPS

__all__ = sorted(OPS)  # noqa: PLE0605 (generated from the op table)

try:
    import ml_dtypes

    _BF16, _F8 = np.dtype(ml_dtypes.bfloat16), np.dtype(ml_dtypes.float8_e4m3fn)
except ImportError:
    _BF16 = _F8 = None

_current_stream = cupy.cuda.get_current_stream
_current_device = cupy.cuda.runtime.getDevice
_devices: dict[int, tvm_ffi.Device] = {}


_bf16_exports: list[bool] = []  # [whether CuPy's own DLPack export takes bfloat16], once known


def _bf16_export_works(x: cupy.ndarray) -> bool:
    try:
        return str(tvm_ffi.from_dlpack(x.__dlpack__(stream=-1)).dtype) == "bfloat16"
    except Exception:  # noqa: BLE001 (BufferError, TypeError: not supported by this CuPy)
        return False


def _arg(x: cupy.ndarray):
    dtype = x.dtype
    if dtype == _BF16:
        if not _bf16_exports:
            _bf16_exports.append(_bf16_export_works(x))
        if not _bf16_exports[0]:
            return _dlpack.bfloat16_tensor(x.view(np.uint16).__dlpack__(stream=-1))
    elif dtype == _F8:  # CuPy's exporter refuses it (BufferError), up to CuPy's main of 2026-08
        return _dlpack.float8_e4m3fn_tensor(x.view(np.uint8).__dlpack__(stream=-1))
    return tvm_ffi.from_dlpack(x.__dlpack__(stream=-1))


def _empty(shape, dtype, like: cupy.ndarray):
    if dtype == _F8:  # a container of bytes: cupy.empty refuses the dtype, view takes it
        return _empty(shape, np.uint8, like).view(dtype)
    if like.device.id == _current_device():
        return cupy.empty(shape, dtype)
    with like.device:
        return cupy.empty(shape, dtype)


def _stream(like: cupy.ndarray):
    """The call's stream: CuPy's current stream of the arrays' device."""
    dev = like.device.id
    d = _devices.get(dev)
    if d is None:
        d = _devices[dev] = tvm_ffi.device("cuda", dev)
    return tvm_ffi.use_raw_stream(d, _current_stream(dev).ptr)


def _device_id(like: cupy.ndarray) -> int:
    return like.device.id


globals().update(_arrays.generate(_arrays.Backend(
    module=__name__, array=cupy.ndarray, array_name="cupy.ndarray", empty=_empty, arg=_arg,
    stream=_stream, device_id=_device_id)))
