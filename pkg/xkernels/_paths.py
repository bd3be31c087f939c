"""Where the C++/CUDA sources live: the repository (editable install) or the installed package."""

from __future__ import annotations

from pathlib import Path

_PKG = Path(__file__).resolve().parent


def source_root() -> Path:
    """Directory holding `include/xkernels/` and `bindings/`."""
    for root in (_PKG / "_csrc", _PKG.parents[1]):
        if (root / "include" / "xkernels").is_dir() and (root / "bindings").is_dir():
            return root
    raise FileNotFoundError(
        f"xkernels: cannot find the kernel sources (include/xkernels, bindings) near {_PKG}"
    )
