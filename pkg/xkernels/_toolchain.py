"""The tools a build needs (nvcc, a host C++ compiler, ninja) and the GPUs present.

Nothing here imports a framework: GPUs are found through the CUDA driver with ctypes.
"""

from __future__ import annotations

import ctypes
import functools
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path


def find_nvcc() -> Path | None:
    """nvcc from CUDA_HOME / CUDA_PATH, /usr/local/cuda, then PATH."""
    candidates = [Path(os.environ[v]) / "bin" / "nvcc" for v in ("CUDA_HOME", "CUDA_PATH")
                  if os.environ.get(v)]
    candidates.append(Path("/usr/local/cuda/bin/nvcc"))
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return c
    found = shutil.which("nvcc")
    return Path(found) if found else None


def find_cxx() -> str | None:
    """The host C++ compiler: $CXX, else g++, else c++."""
    for name in (os.environ.get("CXX"), "g++", "c++"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def find_ninja() -> str | None:
    """ninja on PATH, else the one shipped by the `ninja` pip package."""
    found = shutil.which("ninja")
    if found:
        return found
    try:
        import ninja
    except ImportError:
        return None
    exe = Path(ninja.BIN_DIR) / "ninja"
    return str(exe) if exe.is_file() else None


@functools.cache
def tool_version(exe: str, kind: str) -> str:
    """One line naming a compiler's exact version; cached because every fingerprint needs it."""
    args = {"nvcc": [exe, "--version"], "cxx": [exe, "-dumpfullversion", "-dumpversion"],
            "ninja": [exe, "--version"]}[kind]
    try:
        out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        return f"unknown ({e})"
    lines = [line.strip() for line in out.strip().splitlines()]
    if kind == "nvcc":  # "Cuda compilation tools, release 13.0, V13.0.88" + "Build cuda_13.0..."
        return ", ".join(line.removeprefix("Cuda compilation tools, ") for line in lines[-2:])
    return lines[-1] if lines else "unknown"


def nvcc_release(exe: str) -> tuple[int, int] | None:
    """nvcc's release, e.g. (13, 0), from its version line; None where it cannot be read."""
    m = re.search(r"release (\d+)\.(\d+)", tool_version(exe, "nvcc"))
    return (int(m.group(1)), int(m.group(2))) if m else None


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    major: int
    minor: int


_CU_ATTR_CC_MAJOR, _CU_ATTR_CC_MINOR = 75, 76


def cuda_gpus() -> list[Gpu]:
    """The visible GPUs (honours CUDA_VISIBLE_DEVICES); [] without a driver or a GPU.

    Uses the driver API, not NVML, because NVML ignores CUDA_VISIBLE_DEVICES.
    """
    try:
        cu = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return []
    if cu.cuInit(0) != 0:
        return []
    count = ctypes.c_int(0)
    if cu.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return []
    gpus = []
    for i in range(count.value):
        dev, major, minor = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
        name = ctypes.create_string_buffer(256)
        if (cu.cuDeviceGet(ctypes.byref(dev), i) != 0
                or cu.cuDeviceGetAttribute(ctypes.byref(major), _CU_ATTR_CC_MAJOR, dev) != 0
                or cu.cuDeviceGetAttribute(ctypes.byref(minor), _CU_ATTR_CC_MINOR, dev) != 0):
            continue
        cu.cuDeviceGetName(name, len(name), dev)
        gpus.append(Gpu(i, name.value.decode(errors="replace"), major.value, minor.value))
    return gpus


def gpu_arch(major: int, minor: int) -> str:
    """The arch to compile for a compute capability: the arch-specific ("a") target on 9.0 and
    10.0, so wgmma/tcgen05 are available."""
    return f"{major}{minor}" + ("a" if (major, minor) in ((9, 0), (10, 0)) else "")
