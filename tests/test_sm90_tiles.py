"""The sm90 attention kernel's tile arithmetic, checked on the host: tests/sm90_tiles.cu built with
nvcc against include/ and run (no GPU needed). Which keys each query token sees, and which rows a
tile writes, for tiles of 128 and 192 rows, 128 and 176 keys, causal, windows, dense and ragged."""

import shutil
import subprocess
from pathlib import Path

import pytest
from xkernels import jit

ROOT = Path(__file__).resolve().parents[1]
NVCC = jit._toolchain.find_nvcc() if hasattr(jit._toolchain, "find_nvcc") else shutil.which("nvcc")


@pytest.mark.skipif(not NVCC, reason="needs nvcc")
def test_sm90_tile_rows_and_keys_match_the_visibility_rule(tmp_path):
    exe = tmp_path / "sm90_tiles"
    subprocess.run([str(NVCC), "-std=c++17", "-O2", "-I", str(ROOT / "include"),
                    str(ROOT / "tests/sm90_tiles.cu"), "-o", str(exe)], check=True)
    res = subprocess.run([str(exe)], capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    assert " 0 mismatches" in res.stdout, res.stdout
