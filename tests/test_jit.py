"""The JIT/AOT build system on a tiny module (CPU-only: the module is built but never launches).

Freshness is judged from what the processes report (how often they ran ninja) and from the cache's
files, never from timings. Each test that needs a built module copies one template cache instead of
building again.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from xkernels import _toolchain, cli, jit
from xkernels.modules import ModuleSpec

CUDA = _toolchain.find_nvcc() is not None  # without nvcc every build is the host-only variant
TAG = "90a" if CUDA else "host"
SPEC = ModuleSpec("xk_answer", ("bindings/answer.cu",))

_ANSWER_CU = r"""
#include <tvm/ffi/function.h>

#include "xk_test/value.h"

#ifndef VALUE_OFFSET
#define VALUE_OFFSET 0
#endif

int64_t answer() { return XK_TEST_VALUE + VALUE_OFFSET; }

// Which compiler built this: 1 = host-only variant (g++), 2 = nvcc.
int64_t variant() {
#if defined(XKERNELS_HOST_ONLY)
  return 1;
#elif defined(__CUDACC__)
  return 2;
#else
  return 0;
#endif
}

TVM_FFI_DLL_EXPORT_TYPED_FUNC(answer, answer);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(variant, variant);
"""

# Loads SPEC in a fresh process; reports the result and how often that process ran ninja.
_LOAD = """
import json, sys
from pathlib import Path
from xkernels import jit
from xkernels.modules import ModuleSpec
mod = jit.load_spec(ModuleSpec(sys.argv[1], (sys.argv[2],)), Path(sys.argv[3]))
print(json.dumps({"value": mod.answer(), "variant": mod.variant(),
                  "ninja_runs": jit._stats["ninja_runs"]}))
"""


def _make_root(root: Path, value: int = 42, source: str = _ANSWER_CU) -> Path:
    (root / "include" / "xk_test").mkdir(parents=True)
    (root / "bindings").mkdir()
    (root / "include" / "xk_test" / "value.h").write_text(f"#define XK_TEST_VALUE {value}\n")
    (root / "bindings" / "answer.cu").write_text(source)
    return root


def _env(cache: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("XKERNELS_")}
    env.update(XKERNELS_CACHE_DIR=str(cache), XKERNELS_CUDA_ARCH_LIST="9.0a", **extra)
    return env


def _load_cmd(root: Path) -> list[str]:
    return [sys.executable, "-c", _LOAD, SPEC.name, SPEC.cuda_sources[0], str(root)]


def _load_in_subprocess(root: Path, cache: Path, **extra: str) -> dict:
    r = subprocess.run(_load_cmd(root), env=_env(cache, **extra), capture_output=True, text=True,
                       check=False)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.splitlines()[-1])


def _module_dir(cache: Path) -> Path:
    return cache / jit.__version__ / TAG / SPEC.name


def _links(cache: Path) -> int:
    """How many times ninja linked the module in its build dir, from ninja's own log."""
    log = _module_dir(cache) / ".ninja_log"
    entries = [line.split("\t") for line in log.read_text().splitlines()[1:]]  # start end mtime out hash
    return sum(e[3].endswith(f"/{SPEC.name}.so") for e in entries)


@pytest.fixture
def env(tmp_path, monkeypatch):
    """In-process environment matching `_env`: a private cache, arch 9.0a."""
    for k in [k for k in os.environ if k.startswith("XKERNELS_")]:
        monkeypatch.delenv(k)
    monkeypatch.setenv("XKERNELS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("XKERNELS_CUDA_ARCH_LIST", "9.0a")
    return tmp_path


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    """A source root and a cache holding its built module, and what the building process said."""
    base = tmp_path_factory.mktemp("template")
    root, cache = _make_root(base / "src"), base / "cache"
    first = _load_in_subprocess(root, cache)
    return base, first


@pytest.fixture
def built(template, tmp_path):
    """A private copy of the template (sources and cache) for a test that changes it."""
    shutil.copytree(template[0], tmp_path / "copy")
    return tmp_path / "copy" / "src", tmp_path / "copy" / "cache"


@pytest.mark.slow
def test_build_then_load_without_ninja(template):
    base, first = template
    assert first == {"value": 42, "variant": 2 if CUDA else 1, "ninja_runs": 1}
    d = _module_dir(base / "cache")
    so, log = d / f"{SPEC.name}.so", d / ".ninja_log"
    before = (so.stat().st_ino, so.stat().st_mtime_ns, log.read_bytes())
    stamp = json.loads((d / f"{SPEC.name}.json").read_text())
    assert stamp["so_sha256"] == jit._sha256(so) and stamp["fingerprint"]

    again = _load_in_subprocess(base / "src", base / "cache")
    assert again == {**first, "ninja_runs": 0}
    assert (so.stat().st_ino, so.stat().st_mtime_ns, log.read_bytes()) == before


@pytest.mark.slow
def test_rebuilds_when_header_or_flags_change(built):
    root, cache = built
    (root / "include" / "xk_test" / "value.h").write_text("#define XK_TEST_VALUE 43\n")
    assert _load_in_subprocess(root, cache) == {"value": 43, "variant": 2 if CUDA else 1,
                                                 "ninja_runs": 1}
    flag = "XKERNELS_EXTRA_CUDA_FLAGS" if CUDA else "XKERNELS_EXTRA_CXX_FLAGS"
    assert _load_in_subprocess(root, cache, **{flag: "-DVALUE_OFFSET=1"})["value"] == 44
    assert _load_in_subprocess(root, cache, **{flag: "-DVALUE_OFFSET=1"})["ninja_runs"] == 0
    assert _load_in_subprocess(root, cache)["value"] == 43  # the flag went away: rebuilt again


@pytest.mark.slow
def test_two_processes_build_once(tmp_path):
    root, cache = _make_root(tmp_path / "src"), tmp_path / "cache"
    procs = [subprocess.Popen(_load_cmd(root), env=_env(cache), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = []
    for p in procs:
        out, err = p.communicate()
        assert p.returncode == 0, err
        results.append(json.loads(out.splitlines()[-1]))
    assert [r["value"] for r in results] == [42, 42]
    assert sorted(r["ninja_runs"] for r in results) == [0, 1]
    assert _links(cache) == 1


@pytest.mark.slow
def test_corrupted_library_is_rebuilt(built):
    root, cache = built
    d = _module_dir(cache)
    so, stamp_path = d / f"{SPEC.name}.so", d / f"{SPEC.name}.json"
    so.write_bytes(b"garbage" * 100)  # no longer matches the stamp's sha256
    assert _load_in_subprocess(root, cache)["ninja_runs"] == 1
    assert json.loads(stamp_path.read_text())["so_sha256"] == jit._sha256(so)

    # A stamp that matches a library that does not load (e.g. written by a broken tool).
    so.write_bytes(b"\x7fELF garbage")
    stamp = json.loads(stamp_path.read_text())
    stamp_path.write_text(json.dumps({**stamp, "so_sha256": jit._sha256(so)}))
    assert _load_in_subprocess(root, cache) == {"value": 42, "variant": 2 if CUDA else 1,
                                                 "ninja_runs": 1}


@pytest.mark.slow
def test_disable_jit(env, built, monkeypatch):
    monkeypatch.setenv("XKERNELS_DISABLE_JIT", "1")
    root = _make_root(env / "empty_src")
    with pytest.raises(jit.JITDisabledError, match="xkernels build") as e:
        jit.load_spec(SPEC, root)
    assert f"--arch {TAG}" in str(e.value) and str(env / "cache") in str(e.value)
    assert not (env / "cache" / jit.__version__ / TAG / SPEC.name / f"{SPEC.name}.so").exists()

    root, cache = built
    monkeypatch.setenv("XKERNELS_CACHE_DIR", str(cache))
    runs = jit._stats["ninja_runs"]
    assert jit.load_spec(SPEC, root).answer() == 42
    assert jit._stats["ninja_runs"] == runs


@pytest.mark.slow
def test_compile_error_is_reported_verbatim(env):
    root = _make_root(env / "src", source=_ANSWER_CU + "\n#error xkernels_test_marker\n")
    with pytest.raises(jit.BuildError) as e:
        jit.load_spec(SPEC, root)
    msg = str(e.value)
    assert "#error xkernels_test_marker" in msg and "answer.cu" in msg
    assert "FAILED" in msg and ("-gencode=arch=compute_90a,code=sm_90a" in msg if CUDA else True)
    d = env / "cache" / jit.__version__ / TAG / SPEC.name
    assert not (d / f"{SPEC.name}.so").exists() and not (d / f"{SPEC.name}.json").exists()


@pytest.mark.parametrize("text", ["9.0a 8.0", "9.0a;8.0", "90a,80", "sm_90a sm_80", " 8.0 , 9.0a "])
def test_arch_list_parsing(env, monkeypatch, text):
    monkeypatch.setenv("XKERNELS_CUDA_ARCH_LIST", text)
    assert jit.arch_list() == ["80", "90a"]
    if CUDA:
        assert jit.cache_dir() == env / "cache" / jit.__version__ / "80_90a"


def test_arch_tags_and_flags(env, monkeypatch):
    assert jit.parse_arch_list("10.0a 9.0a 8.6 sm_120f") == ["86", "90a", "100a", "120f"]
    assert jit.parse_arch_list(["host"]) == ["host"]
    for bad in ("9", "sm_x", "host 9.0a", ""):
        with pytest.raises(ValueError):
            jit.parse_arch_list(bad)
    assert jit.cache_dir(["8.0", "9.0a"]) == env / "cache" / jit.__version__ / "80_90a"
    monkeypatch.setenv("XKERNELS_HOST_ONLY", "1")
    assert jit.cache_dir().name == "host"
    monkeypatch.delenv("XKERNELS_HOST_ONLY")
    monkeypatch.setattr(_toolchain, "find_nvcc", lambda: None)  # no CUDA toolkit: host variant
    assert jit.cache_dir().name == "host" and jit.cache_dir(["9.0a"]).name == "90a"

    flags, _ = jit._flags(SPEC, env, ["80", "90a"])
    gencode = [f for f in flags["cuda"] if f.startswith("-gencode")]
    assert gencode == ["-gencode=arch=compute_80,code=sm_80",
                       "-gencode=arch=compute_90a,code=sm_90a",
                       "-gencode=arch=compute_90a,code=compute_90a"]
    assert not any(f.startswith("--split-compile") for f in flags["cuda"])  # nvcc unknown
    # nvcc 11.8+ compiles a translation unit's kernels in parallel (--split-compile)
    for release, split in (((13, 0), True), ((11, 8), True), ((11, 7), False), (None, False)):
        monkeypatch.setattr(_toolchain, "nvcc_release", lambda exe, r=release: r)
        flags, _ = jit._flags(SPEC, env, ["90a"], "/opt/cuda/bin/nvcc")
        assert ("--split-compile=0" in flags["cuda"]) == split, release


def test_nvcc_release(monkeypatch):
    line = "release 12.4, V12.4.131, Build cuda_12.4.r12.4/compiler.34097967_0"
    monkeypatch.setattr(_toolchain, "tool_version", lambda exe, kind: line)
    assert _toolchain.nvcc_release("nvcc") == (12, 4)
    monkeypatch.setattr(_toolchain, "tool_version", lambda exe, kind: "unknown (no such file)")
    assert _toolchain.nvcc_release("nvcc") is None


def test_doctor(env):
    r = subprocess.run([sys.executable, "-m", "xkernels", "doctor"], capture_output=True,
                       text=True, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    for word in ("tvm_ffi", "ninja", "arch list", str(env / "cache")):
        assert word in r.stdout


def test_host_only_aot_build(env, monkeypatch, capsys):
    """XKERNELS_HOST_ONLY=1: g++ compiles the .cu as C++; build() runs one ninja for two modules."""
    monkeypatch.setenv("XKERNELS_HOST_ONLY", "1")
    root = _make_root(env / "src")
    specs = {n: ModuleSpec(n, ("bindings/answer.cu",)) for n in ("xk_one", "xk_two")}
    monkeypatch.setattr(jit, "MODULES", specs)
    monkeypatch.setattr(jit, "source_root", lambda: root.resolve())

    runs = jit._stats["ninja_runs"]
    paths = jit.build()
    assert jit._stats["ninja_runs"] == runs + 1
    cache = env / "cache" / jit.__version__ / "host"
    assert paths == {n: cache / n / f"{n}.so" for n in specs}
    assert (cache / "build.ninja").read_text().count("subninja") == 2
    assert "nvcc" not in (cache / "xk_one" / "build.ninja").read_text()
    assert jit.module_status() == {"xk_one": "built", "xk_two": "built"}

    mod = jit.load_spec(specs["xk_one"], root)
    assert (mod.answer(), mod.variant()) == (42, 1)
    assert jit._stats["ninja_runs"] == runs + 1

    assert cli.main(["build", "--module", "xk_two"]) == 0  # fresh: prints the path, builds nothing
    assert str(paths["xk_two"]) in capsys.readouterr().out
    assert jit._stats["ninja_runs"] == runs + 1
