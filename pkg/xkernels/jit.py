"""Build, cache and load the kernel modules: on first use (JIT) or ahead of time (`xkernels build`).

The cache (`cache_dir()`) holds one directory per xkernels version and arch list:

    <name>.lock          cross-process lock (fcntl.flock) held while checking and building
    <name>/build.ninja   regenerated for every build; objects and the link output in <name>/build/
    <name>/<name>.so     the published library, replaced atomically (a new inode each time)
    <name>/<name>.json   stamp: fingerprint of everything that went into the .so, and its sha256

A module whose stamp matches the current fingerprint is loaded without running ninja.

Environment: XKERNELS_CACHE_DIR, XKERNELS_CUDA_ARCH_LIST, XKERNELS_HOST_ONLY, XKERNELS_DISABLE_JIT,
XKERNELS_JIT_VERBOSE, XKERNELS_EXTRA_CUDA_FLAGS, XKERNELS_EXTRA_CXX_FLAGS, MAX_JOBS, CUDA_HOME, CXX.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from . import __version__, _toolchain
from ._paths import source_root
from .modules import MODULES, ModuleSpec

if TYPE_CHECKING:
    import tvm_ffi

    from .ops import Op

__all__ = ["BuildError", "JITDisabledError", "arch_list", "build", "cache_dir", "load",
           "load_spec", "module_status", "parse_arch_list", "plan"]

HOST = "host"  # the arch tag of the variant built without nvcc
_DEFAULT_ARCHS = ["90a"]


class BuildError(RuntimeError):
    """A module failed to build; the message holds the failing command and the compiler output."""


class JITDisabledError(RuntimeError):
    """XKERNELS_DISABLE_JIT=1 and the module is not built (or is stale) in the cache."""


_loaded: dict[object, tvm_ffi.Module] = {}
_load_lock = threading.Lock()  # one thread per process builds; the others wait for its module
_stats = {"ninja_runs": 0}  # how often this process ran ninja (observed by the tests)


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no", "off")


# ----------------------------------------------------------------------------------------------
# Arch list and cache location


def _arch_key(arch: str) -> tuple[int, str]:
    return (int(arch.rstrip("af")), arch)


def parse_arch_list(tokens: str | list[str]) -> list[str]:
    """Normalises "9.0a 8.0", "9.0a;8.0", "90a,80", "sm_90a" (or a list of such) to ["80", "90a"].

    "host" alone selects the host-only variant.
    """
    if isinstance(tokens, str):
        tokens = [tokens]
    archs = set()
    for token in (t for s in tokens for t in re.split(r"[\s,;]+", s) if t):
        t = token.lower()
        if t == HOST:
            archs.add(HOST)
            continue
        t = t.removeprefix("sm_").removeprefix("compute_")
        suffix = t[-1] if t[-1:] in ("a", "f") else ""
        digits = t[: len(t) - len(suffix)].replace(".", "")
        if not digits.isdigit() or len(digits) < 2:
            raise ValueError(f"xkernels: cannot parse CUDA arch {token!r}; expected e.g. 9.0a, 90a "
                             "or sm_90a")
        archs.add(digits + suffix)
    if HOST in archs and len(archs) > 1:
        raise ValueError(f"xkernels: 'host' cannot be combined with CUDA archs, got {tokens}")
    if not archs:
        raise ValueError(f"xkernels: empty CUDA arch list {tokens!r}")
    return [HOST] if HOST in archs else sorted(archs, key=_arch_key)


_detected: list[str] | None = None


def arch_list() -> list[str]:
    """The CUDA archs to build for: XKERNELS_CUDA_ARCH_LIST, else the visible GPUs, else 90a."""
    global _detected
    env = os.environ.get("XKERNELS_CUDA_ARCH_LIST", "").strip()
    if env:
        return parse_arch_list(env)
    if _detected is None:  # the driver probe costs a cuInit: once per process
        gpus = _toolchain.cuda_gpus()
        _detected = sorted({_toolchain.gpu_arch(g.major, g.minor) for g in gpus}, key=_arch_key)
    return list(_detected) or list(_DEFAULT_ARCHS)


def host_only() -> bool:
    """Build the host-only variant: forced by XKERNELS_HOST_ONLY=1, or because nvcc is missing."""
    return _env_flag("XKERNELS_HOST_ONLY") or _toolchain.find_nvcc() is None


def _targets(archs: str | list[str] | None) -> list[str]:
    if archs is not None:
        return parse_arch_list(archs)
    return [HOST] if host_only() else arch_list()


def cache_dir(arch_list: str | list[str] | None = None) -> Path:
    """`$XKERNELS_CACHE_DIR` (default ~/.cache/xkernels) / <version> / <arch tag>."""
    base = os.environ.get("XKERNELS_CACHE_DIR")
    base = Path(base).expanduser() if base else Path.home() / ".cache" / "xkernels"
    return base / __version__ / "_".join(_targets(arch_list))


# ----------------------------------------------------------------------------------------------
# One module's build: flags, fingerprint, ninja file


@dataclass(frozen=True)
class _Job:
    spec: ModuleSpec
    root: Path
    targets: tuple[str, ...]
    dir: Path  # <cache>/<name>
    nvcc: str | None
    cxx: str | None
    flags: dict[str, list[str]]
    fingerprint: str

    @property
    def host(self) -> bool:
        return self.targets == (HOST,)

    @property
    def so(self) -> Path:
        return self.dir / f"{self.spec.name}.so"

    @property
    def stamp(self) -> Path:
        return self.dir / f"{self.spec.name}.json"

    @property
    def lock(self) -> Path:
        return self.dir.parent / f"{self.spec.name}.lock"

    @property
    def built(self) -> Path:  # ninja's output, copied to `so` to publish it
        return self.dir / "build" / f"{self.spec.name}.so"


def _flags(spec: ModuleSpec, root: Path, targets: list[str],
           nvcc: str | None = None) -> tuple[dict, dict]:
    """Compile and link flags, and the absolute paths in them that the fingerprint abstracts."""
    from tvm_ffi import libinfo

    tvm_inc, dlpack_inc = libinfo.find_include_path(), libinfo.find_dlpack_include_path()
    libdir = str(Path(libinfo.find_libtvm_ffi()).parent)
    includes = [f"-I{p}" for p in dict.fromkeys(
        [str(root / "include"), str(root / "bindings"), tvm_inc, dlpack_inc])]
    extra_cxx = shlex.split(os.environ.get("XKERNELS_EXTRA_CXX_FLAGS", ""))
    host = targets == [HOST]
    # The host code (bindings/host) relies on the vectorizer: -O3 for loops of any trip count,
    # -fno-trapping-math so that branch-free selects over float math (conversions, exp) are
    # if-converted (no FP traps are ever enabled; results are unchanged), -ffp-contract=off
    # because g++ would otherwise fuse a * b + c into an FMA where the target has one (the
    # x86-64-v3/v4 clones) and results would differ between CPUs.
    cxx = ["-std=c++17", "-O3", "-fno-trapping-math", "-ffp-contract=off", "-fPIC",
           "-fvisibility=hidden", "-DNDEBUG",
           *(["-DXKERNELS_HOST_ONLY"] if host else []), *includes, *extra_cxx]
    if host:
        # nvcc-only flags (spec.extra_cuda_flags, XKERNELS_EXTRA_CUDA_FLAGS) do not apply to g++.
        cuda = [*cxx, "-x", "c++"]
        link = ["-shared", f"-L{libdir}", "-ltvm_ffi", f"-Wl,-rpath,{libdir}", "-lpthread"]
    else:
        gencode = [f"-gencode=arch=compute_{a},code=sm_{a}" for a in targets]
        gencode.append(f"-gencode=arch=compute_{targets[-1]},code=compute_{targets[-1]}")  # PTX
        # nvcc 11.8+ runs cicc's and ptxas's work on a translation unit's kernels in parallel, on
        # every core: the gemm module, then one .cu of 217 kernels, built in 137 s on 2 cores and
        # 107 s with it, each kernel's SASS the same (cuobjdump -sass, per function).
        release = _toolchain.nvcc_release(nvcc) if nvcc else None
        split = ["--split-compile=0"] if release and release >= (11, 8) else []
        cuda = ["-std=c++17", "-O3", "-DNDEBUG", "--expt-relaxed-constexpr",
                "-Xcompiler=-fPIC,-fvisibility=hidden", "-lineinfo",
                f"--threads={min(4, len(targets))}", *split, *gencode, *includes,
                *spec.extra_cuda_flags,
                *shlex.split(os.environ.get("XKERNELS_EXTRA_CUDA_FLAGS", ""))]
        # nvcc links cudart statically: the module loads without libcudart.so or a driver.
        link = ["-shared", f"-L{libdir}", "-ltvm_ffi", "-Xlinker", f"-rpath,{libdir}", "-lpthread"]
    paths = {str(root): "$ROOT", tvm_inc: "$TVM_FFI_INCLUDE", dlpack_inc: "$DLPACK_INCLUDE",
             libdir: "$TVM_FFI_LIB"}
    return {"cuda": cuda, "cxx": cxx, "link": link}, paths


def _portable(flags: dict[str, list[str]], paths: dict[str, str]) -> dict[str, list[str]]:
    """The flags with absolute paths replaced by placeholders (longest first), so that moving the
    venv or the sources does not by itself invalidate the cache."""
    subs = sorted(paths.items(), key=lambda kv: -len(kv[0]))

    def sub(flag: str) -> str:
        for path, name in subs:
            flag = flag.replace(path, name)
        return flag

    return {k: [sub(f) for f in v] for k, v in flags.items()}


def _source_files(spec: ModuleSpec, root: Path) -> list[tuple[str, Path]]:
    """Every file under include/ and bindings/ plus the spec's sources, as (relative path, path)."""
    files = {s: root / s for s in (*spec.cuda_sources, *spec.cxx_sources)}
    for sub in ("include", "bindings"):
        for dirpath, dirnames, filenames in os.walk(root / sub):
            dirnames[:] = [d for d in dirnames if d != "__pycache__"]
            for f in filenames:
                path = Path(dirpath, f)
                files[path.relative_to(root).as_posix()] = path
    return sorted(files.items())


def _prepare(spec: ModuleSpec, root: Path, targets: list[str]) -> _Job:
    import tvm_ffi

    root = Path(root).resolve()
    host = targets == [HOST]
    nvcc = None if host else _toolchain.find_nvcc()
    cxx = _toolchain.find_cxx()
    flags, paths = _flags(spec, root, targets, str(nvcc) if nvcc else None)
    compilers = [_toolchain.tool_version(cxx, "cxx") if cxx else "no c++ compiler"]
    if not host:
        compilers.append(_toolchain.tool_version(str(nvcc), "nvcc") if nvcc else "no nvcc")

    h = hashlib.sha256()

    def put(data: bytes) -> None:  # length-prefixed, so concatenations cannot collide
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)

    put(json.dumps({"xkernels": __version__, "tvm_ffi": tvm_ffi.__version__,
                    "compilers": compilers, "targets": targets,
                    "spec": [spec.name, spec.cuda_sources, spec.cxx_sources],
                    "flags": _portable(flags, paths)}, sort_keys=True).encode())
    for rel, path in _source_files(spec, root):
        put(rel.encode())
        try:
            put(b"file" + path.read_bytes())
        except OSError:
            put(b"missing")
    return _Job(spec, root, tuple(targets), cache_dir(targets) / spec.name,
                str(nvcc) if nvcc else None, cxx, flags, h.hexdigest())


def _ninja_path(p: Path | str) -> str:
    return str(p).replace("$", "$$").replace(" ", "$ ").replace(":", "$:")


def _ninja_args(args: list[str]) -> str:
    return " ".join(shlex.quote(a) for a in args).replace("$", "$$")


def _ninja_file(job: _Job) -> str:
    """A self-contained build.ninja with absolute paths, so it also works as a subninja."""
    name, out = job.spec.name, job.dir / "build"
    lines = [
        "ninja_required_version = 1.3",
        f"cuda_cc = {_ninja_args([job.cxx if job.host else job.nvcc])}",
        f"cxx = {_ninja_args([job.cxx])}",
        f"cuda_flags = {_ninja_args(job.flags['cuda'])}",
        f"cxx_flags = {_ninja_args(job.flags['cxx'])}",
        f"link_flags = {_ninja_args(job.flags['link'])}",
        "",
        "rule cuda_compile",
        "  command = $cuda_cc $cuda_flags -MD -MF $out.d -c $in -o $out",
        "  depfile = $out.d",
        "  deps = gcc",
        f"  description = {'c++' if job.host else 'nvcc'} {name}: $src",
        "rule cxx_compile",
        "  command = $cxx $cxx_flags -MD -MF $out.d -c $in -o $out",
        "  depfile = $out.d",
        "  deps = gcc",
        f"  description = c++ {name}: $src",
        "rule link",
        "  command = $linker $in -o $out $link_flags",
        f"  description = link {name}.so",
        "",
    ]
    objs = []
    for rule, sources in (("cuda_compile", job.spec.cuda_sources),
                          ("cxx_compile", job.spec.cxx_sources)):
        for src in sources:
            obj = out / (src.replace("/", "_").replace("..", "_") + ".o")
            objs.append(_ninja_path(obj))
            lines += [f"build {objs[-1]}: {rule} {_ninja_path(job.root / src)}", f"  src = {src}"]
    linker = job.cxx if job.host else job.nvcc
    lines += [f"build {_ninja_path(job.built)}: link {' '.join(objs)}",
              f"  linker = {_ninja_args([linker])}", ""]
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------
# Cache state, locking, publishing


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _state(job: _Job) -> str:
    """"built" (fresh), "stale" (inputs changed), "corrupt" (.so differs from its stamp), "missing"."""
    if not job.so.is_file():
        return "missing"
    try:
        stamp = json.loads(job.stamp.read_text())
    except (OSError, ValueError):
        return "stale"
    if stamp.get("fingerprint") != job.fingerprint:
        return "stale"
    return "built" if stamp.get("so_sha256") == _sha256(job.so) else "corrupt"


@contextlib.contextmanager
def _flock(path: Path, verbose: bool = False):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if verbose:
                print(f"xkernels: waiting for {path} (another process is building)",
                      file=sys.stderr, flush=True)
            fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f"{path.name}.tmp.{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _discard(job: _Job) -> None:
    """Forget a module whose published library cannot be trusted; relink it from its objects."""
    for p in (job.stamp, job.so, job.built):
        p.unlink(missing_ok=True)


def _publish(job: _Job) -> None:
    # Copy rather than rename, so ninja keeps its output for incremental rebuilds; os.replace gives
    # the published file a new inode, so processes that mapped the old one are unaffected. The
    # stamp is written last: a .so without a matching stamp is never loaded.
    tmp = job.so.with_name(f"{job.so.name}.tmp.{os.getpid()}")
    shutil.copy(job.built, tmp)
    digest = _sha256(tmp)
    os.replace(tmp, job.so)
    stamp = {"fingerprint": job.fingerprint, "so_sha256": digest, "flags": job.flags,
             "targets": list(job.targets)}
    _atomic_write(job.stamp, json.dumps(stamp, indent=1).encode())


# ----------------------------------------------------------------------------------------------
# Running ninja


def _run_ninja(ninja_dir: Path, outputs: list[Path], label: str, jobs: int | None,
               verbose: bool) -> None:
    ninja = _toolchain.find_ninja()
    if ninja is None:
        raise BuildError("xkernels: ninja not found (neither on PATH nor the `ninja` package); "
                         "install it with `pip install ninja`")
    jobs = jobs or int(os.environ.get("MAX_JOBS") or os.cpu_count() or 1)
    cmd = [ninja, "-C", str(ninja_dir), "-f", "build.ninja", f"-j{jobs}",
           *(["-v"] if verbose else []), *map(str, outputs)]
    _stats["ninja_runs"] += 1
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            errors="replace", env={**os.environ, "NINJA_STATUS": "[%f/%t] "})
    lines: list[str] = []
    progress = [""]  # "[finished/total] ", once ninja has reported it

    def read() -> None:
        for line in proc.stdout:
            lines.append(line)
            if m := re.match(r"\[(\d+/\d+)\] ", line):
                progress[0] = f"[{m.group(1)}] "
            if verbose:
                sys.stderr.write(line)
                sys.stderr.flush()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    start, shown, width = time.monotonic(), False, 0
    tty = sys.stderr.isatty()
    try:
        while True:
            try:
                rc = proc.wait(timeout=0.2)
                break
            except subprocess.TimeoutExpired:
                pass
            elapsed = time.monotonic() - start
            if verbose or elapsed < 1.0:  # quick builds stay silent; verbose prints everything
                continue
            if tty:
                msg = f"xkernels: building {label} {progress[0]}{elapsed:.1f}s"
                sys.stderr.write("\r" + msg.ljust(width))
                width = len(msg)
                sys.stderr.flush()
            elif not shown:
                print(f"xkernels: building {label} ...", file=sys.stderr, flush=True)
            shown = True
    except BaseException:  # e.g. Ctrl-C: SIGTERM lets ninja stop the compilers it started
        proc.terminate()
        proc.wait()
        raise
    finally:
        reader.join()
    if shown:
        done = "built" if rc == 0 else "failed to build"
        msg = f"xkernels: {done} {label} in {time.monotonic() - start:.1f}s"
        sys.stderr.write(("\r" + msg.ljust(width) if tty else msg) + "\n")
        sys.stderr.flush()
    if rc != 0:
        raise BuildError(f"xkernels: building {label} failed (ninja exited with {rc})\n"
                         f"$ {shlex.join(cmd)}\n{''.join(lines)}")


def _build(jobs: list[_Job], n_jobs: int | None, verbose: bool) -> None:
    """Builds and publishes the modules with one ninja run. The caller holds their locks."""
    for job in jobs:
        if job.cxx is None:
            raise BuildError("xkernels: no C++ compiler found ($CXX, g++, c++)")
        if not job.host and job.nvcc is None:
            raise BuildError(f"xkernels: nvcc not found (CUDA_HOME, CUDA_PATH, /usr/local/cuda, "
                             f"PATH); cannot build {job.spec.name} for {', '.join(job.targets)}. "
                             "Set CUDA_HOME, or XKERNELS_HOST_ONLY=1 for the host-only variant")
        (job.dir / "build").mkdir(parents=True, exist_ok=True)
        (job.dir / "build.ninja").write_text(_ninja_file(job))
    if len(jobs) == 1:
        ninja_dir = jobs[0].dir
    else:  # one ninja run over all modules, so they compile in parallel
        ninja_dir = jobs[0].dir.parent
        text = "".join(f"subninja {_ninja_path(j.dir / 'build.ninja')}\n" for j in jobs)
        (ninja_dir / "build.ninja").write_text("ninja_required_version = 1.3\n" + text)
    _run_ninja(ninja_dir, [j.built for j in jobs], ", ".join(j.spec.name for j in jobs),
               n_jobs, verbose)
    for job in jobs:
        _publish(job)


# ----------------------------------------------------------------------------------------------
# Public entry points


def _verbose(verbose: bool | None) -> bool:
    return _env_flag("XKERNELS_JIT_VERBOSE") if verbose is None else verbose


def _load(spec: ModuleSpec, root: Path) -> tvm_ffi.Module:
    import tvm_ffi

    job = _prepare(spec, root, _targets(None))
    state = _state(job)
    load_error = None
    if state == "built":
        try:
            return tvm_ffi.load_module(str(job.so))
        except Exception as e:  # noqa: BLE001 (the stamp matched, yet it does not load: rebuild)
            load_error, state = e, "corrupt"
    if _env_flag("XKERNELS_DISABLE_JIT"):
        raise JITDisabledError(
            f"xkernels: module {spec.name!r} is {state} in {job.dir.parent} and "
            "XKERNELS_DISABLE_JIT=1 forbids building it; build it ahead of time with "
            f"`xkernels build --arch {' '.join(job.targets)}`"
            + (f" (loading the cached library failed: {load_error})" if load_error else ""))
    verbose = _verbose(None)
    with _flock(job.lock, verbose):
        if load_error is None:  # another process may have built it while we waited
            state = _state(job)
        if state == "corrupt":
            _discard(job)
        if state != "built":
            _build([job], None, verbose)
        try:
            return tvm_ffi.load_module(str(job.so))
        except Exception as e:
            raise BuildError(f"xkernels: built {job.so} but it does not load: {e}") from e


def load_spec(spec: ModuleSpec, root: Path | None = None) -> tvm_ffi.Module:
    """Loads `spec` (sources relative to `root`, default the package's sources), building it first
    if the cache holds no fresh copy. Memoized per process."""
    key = (spec, str(root))
    mod = _loaded.get(key)
    if mod is None:
        with _load_lock:
            mod = _loaded.get(key)
            if mod is None:
                mod = _loaded[key] = _load(spec, source_root() if root is None else Path(root))
    return mod


def load(name: str) -> tvm_ffi.Module:
    """Loads module `name` of MODULES, building it first if needed. Memoized per process."""
    mod = _loaded.get(name)
    if mod is None:
        if name not in MODULES:
            raise ValueError(f"xkernels: unknown module {name!r}; modules: {', '.join(MODULES)}")
        mod = _loaded[name] = load_spec(MODULES[name])
    return mod


def build(names: list[str] | None = None, arch_list: list[str] | None = None,
          jobs: int | None = None, verbose: bool | None = None) -> dict[str, Path]:
    """AOT: builds all (or the named) modules in one parallel ninja run; returns name -> .so path.

    Modules already fresh in the cache are not rebuilt.
    """
    names = list(MODULES) if names is None else list(dict.fromkeys(names))
    if unknown := [n for n in names if n not in MODULES]:
        raise ValueError(f"xkernels: unknown module(s) {', '.join(unknown)}; "
                         f"modules: {', '.join(MODULES)}")
    targets, root, verbose = _targets(arch_list), source_root(), _verbose(verbose)
    todo = [_prepare(MODULES[n], root, targets) for n in names]
    with contextlib.ExitStack() as stack:
        # The top-level build.ninja and its .ninja_log are shared: one AOT build at a time. Module
        # locks are taken in name order, so concurrent builders cannot deadlock.
        stack.enter_context(_flock(cache_dir(targets) / "aot.lock", verbose))
        for job in sorted(todo, key=lambda j: j.spec.name):
            stack.enter_context(_flock(job.lock, verbose))
        stale = []
        for job in todo:
            state = _state(job)
            if state == "corrupt":
                _discard(job)
            if state != "built":
                stale.append(job)
        if stale:
            _build(stale, jobs, verbose)
    return {job.spec.name: job.so for job in todo}


def module_status() -> dict[str, str]:
    """Per module of MODULES: "built", "stale", "corrupt" or "missing" in the current cache dir."""
    root, targets = source_root(), _targets(None)
    return {name: _state(_prepare(spec, root, targets)) for name, spec in MODULES.items()}


class Functions(dict):
    """Exported TVM-FFI functions by op name (and `<op>_plan`, the planner of an op with a
    workspace, from the op's module), loaded (and built if needed) on first use; one table per
    process, shared by every adapter."""

    def __missing__(self, name: str):
        from .ops import OPS

        op = OPS.get(name)
        if op is None and name.endswith("_plan"):
            op = OPS.get(name[: -len("_plan")])
            op = op if op is not None and op.workspace else None
        if op is None:
            raise KeyError(name)
        fn = load(op.module)[name]
        self[name] = fn
        return fn


FUNCTIONS = Functions()

_plans: dict[tuple, tuple[tuple, int]] = {}


def plan(op: Op, device_id: int, shapes: tuple, attrs: tuple) -> tuple[tuple, int]:
    """The exported `<op>_plan` for a call of an op with a workspace on device `device_id` (-1:
    host memory) with inputs of `shapes` (tuples of ints, in the op's input order) and encoded
    `attrs`: (the attrs to pass, num_splits resolved; the workspace's float32 elements). Cached
    per key: the planner may query the GPU."""
    key = (op.name, device_id, shapes, attrs)
    got = _plans.get(key)
    if got is None:
        res = FUNCTIONS[op.plan_name](device_id, *[[int(d) for d in s] for s in shapes], *attrs)
        i = next(i for i, a in enumerate(op.attrs) if a.name == "num_splits")
        got = _plans[key] = ((*attrs[:i], int(res[0]), *attrs[i + 1:]), int(res[1]))
    return got
