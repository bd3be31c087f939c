"""The `xkernels` command: `build` (AOT), `doctor` (what is installed and built), `bench`."""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import importlib.util
import os
import platform
import sys

from . import __version__, _toolchain

_FRAMEWORKS = ("torch", "jax", "cupy", "numpy")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="xkernels", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build the modules ahead of time into the cache")
    b.add_argument("--arch", nargs="+", metavar="ARCH",
                   help="CUDA archs, e.g. 9.0a 8.0 (default: XKERNELS_CUDA_ARCH_LIST, else the "
                        "visible GPUs); 'host' for the host-only variant")
    b.add_argument("--module", nargs="+", action="extend", metavar="NAME",
                   help="modules to build (default: all)")
    b.add_argument("--jobs", "-j", type=int, help="parallel jobs (default: MAX_JOBS or all CPUs)")
    b.add_argument("--verbose", "-v", action="store_true", help="print every command and output")
    sub.add_parser("doctor", help="report versions, compilers, GPUs and the cache")
    sub.add_parser("bench", help="benchmark the kernels (arguments go to xkernels.bench)",
                   add_help=False)
    sub.add_parser("profile", help="profile one decoder layer: a Chrome trace and the per-kernel "
                   "table (arguments go to xkernels.bench_model.profile_main)", add_help=False)
    return p


def _build(args: argparse.Namespace) -> int:
    from . import jit

    try:
        built = jit.build(args.module, args.arch, args.jobs, args.verbose or None)
    except (jit.BuildError, ValueError) as e:
        print(e, file=sys.stderr)
        return 1
    for name, path in built.items():
        print(f"{name}: {path}")
    return 0


def _dist_version(module: str) -> str:
    """A module's distribution version without importing it (cupy ships as cupy-cuda12x etc.)."""
    for dist in importlib.metadata.packages_distributions().get(module, [module]):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            pass
    return "unknown version"


def _doctor() -> int:
    problems = []
    rows = [("xkernels", __version__), ("python", f"{platform.python_version()} ({sys.executable})")]
    try:
        import tvm_ffi

        rows.append(("tvm_ffi", tvm_ffi.__version__))
    except Exception as e:  # noqa: BLE001 (report any import failure)
        rows.append(("tvm_ffi", f"NOT IMPORTABLE: {e}"))
        problems.append("apache-tvm-ffi cannot be imported: `pip install apache-tvm-ffi`")
    nvcc, cxx, ninja = _toolchain.find_nvcc(), _toolchain.find_cxx(), _toolchain.find_ninja()
    rows.append(("nvcc", f"{_toolchain.tool_version(str(nvcc), 'nvcc')} ({nvcc})" if nvcc
                 else "not found: only the host-only variant can be built"))
    rows.append(("c++", f"{_toolchain.tool_version(cxx, 'cxx')} ({cxx})" if cxx else "not found"))
    rows.append(("ninja", f"{_toolchain.tool_version(ninja, 'ninja')} ({ninja})" if ninja
                 else "not found"))
    if cxx is None:  # nvcc needs it as its host compiler, and the host sources are plain C++
        problems.append("no C++ compiler ($CXX, g++, c++): install g++")
    if ninja is None:
        problems.append("ninja not found: `pip install ninja`")
    for fw in _FRAMEWORKS:
        present = importlib.util.find_spec(fw) is not None
        rows.append((fw, _dist_version(fw) if present else "not installed"))

    gpus = _toolchain.cuda_gpus()
    for g in gpus:
        rows.append((f"gpu {g.index}", f"{g.name} (sm_{_toolchain.gpu_arch(g.major, g.minor)})"))
    if not gpus:
        rows.append(("gpu", "no GPU: kernels run on the host path"))

    if "tvm_ffi" in sys.modules:
        from . import jit

        try:
            if jit.host_only():
                archs = "host (no nvcc, or XKERNELS_HOST_ONLY=1)"
            else:
                archs = " ".join(jit.arch_list()) + (
                    " (XKERNELS_CUDA_ARCH_LIST)" if os.environ.get("XKERNELS_CUDA_ARCH_LIST")
                    else " (the visible GPUs)" if gpus else " (default: no GPU found)")
            rows.append(("arch list", archs))
            rows.append(("cache", str(jit.cache_dir())))
            rows += [(f"module {n}", s) for n, s in jit.module_status().items()]
        except (ValueError, OSError) as e:
            rows.append(("cache", f"error: {e}"))
            problems.append(str(e))

    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k.ljust(width)}  {v}")
    for p in problems:
        print(f"error: {p}", file=sys.stderr)
    return 1 if problems else 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["bench"]:  # everything after `bench` belongs to the benchmark's own parser
        try:
            bench = importlib.import_module(f"{__package__}.bench")
        except ModuleNotFoundError as e:
            if e.name != f"{__package__}.bench":
                raise
            print("xkernels: the benchmarks (xkernels.bench) are not in this install",
                  file=sys.stderr)
            return 1
        return bench.main(argv[1:]) or 0
    if argv[:1] == ["profile"]:
        from . import bench_model

        return bench_model.profile_main(argv[1:])
    args = _parser().parse_args(argv)
    return _build(args) if args.command == "build" else _doctor()
