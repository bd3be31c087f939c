"""The compiled modules: one shared library per kernel family.

Each module is a CUDA translation unit of exported TVM-FFI functions (`bindings/<name>.cu`; gemm's
tile launches in units of their own, `bindings/gemm_tiles_*.cu`, built in parallel) plus the
host implementations (`bindings/host/ops.cc`, `attention.cc`, `gemm.cc`, `rope.cc`: plain C++;
the row ops' and attention's with the thread pool of `parallel.cc`), linked into `<name>.so`.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ModuleSpec:
    name: str
    cuda_sources: tuple[str, ...]  # relative to the source root; compiled by nvcc
    cxx_sources: tuple[str, ...] = ()  # relative to the source root; compiled by the host compiler
    extra_cuda_flags: tuple[str, ...] = field(default=())


_HOST = ("bindings/host/ops.cc", "bindings/host/parallel.cc")

MODULES: dict[str, ModuleSpec] = {
    spec.name: spec
    for spec in (
        ModuleSpec("activation", ("bindings/activation.cu",), _HOST),
        ModuleSpec("norm", ("bindings/norm.cu",), _HOST),
        ModuleSpec("softmax", ("bindings/softmax.cu",), _HOST),
        ModuleSpec("attention", ("bindings/attention.cu",),
                   ("bindings/host/attention.cc", "bindings/host/parallel.cc")),
        # (the tile launches in units of their own, compiled in parallel: bindings/gemm_tiles.h)
        ModuleSpec("gemm", ("bindings/gemm.cu", "bindings/gemm_tiles_f16.cu",
                            "bindings/gemm_tiles_bf16.cu", "bindings/gemm_tiles_e4m3.cu"),
                   ("bindings/host/gemm.cc", *_HOST)),
        ModuleSpec("rope", ("bindings/rope.cu",), ("bindings/host/rope.cc",)),
    )
}
