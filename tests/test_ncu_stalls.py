"""benchmarks/ncu_stalls.py (the summary of ncu's source page that found GEMM v9 and v10) on a
synthetic export: the totals by stall reason, the samples by execution count, the top lines and
an offset range, and a file that is not a source-page export."""

from __future__ import annotations

import csv
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _module():
    spec = importlib.util.spec_from_file_location("ncu_stalls", ROOT / "benchmarks/ncu_stalls.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


HEADER = ["Address", "Source", "Warp Stall Sampling (All Samples)", "Instructions Executed",
          "stall_long_sb", "stall_wait", "stall_long_sb (Not Issued)"]
# (offset, source, samples, executions, long_sb, wait)
LINES = [(0x00, "LDC R1, c[0x0][0x28]", 2, 100, 0, 2),
         (0x10, "LDG.E R2, desc[UR4][R6.64]", 30, 6400, 25, 5),
         (0x20, "FSETP.GE.AND P0, PT, |R2|, 1, PT", 50, 6400, 45, 5),
         (0x30, "@!P0 BRA 0x10", 18, 100, 0, 18)]


def _export(path: Path, base: int = 0x7F0000001000) -> Path:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["Kernel Name", "void kernel()"])
        w.writerow(HEADER)
        for off, src, s, ex, lsb, wait in LINES:
            w.writerow([hex(base + off), src, s, ex, lsb, wait, lsb])
    return path


def test_summary(tmp_path, capsys):
    mod = _module()
    assert mod.main(["ncu_stalls.py", str(_export(tmp_path / "rep_src.csv"))]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "samples 100"
    # long_sb 70 of 100 samples, wait 30; the "(Not Issued)" column is not counted twice
    assert out[1] == "long_sb 0.700, wait 0.300"
    assert out[2] == "by execution count (share of samples): 6400: 0.800, 100: 0.200"
    # the top line first: FSETP at offset 0x20 with 50 samples
    assert out[3].split()[:4] == ["00020", "50", "0.500", "6400"]
    assert "FSETP.GE.AND" in out[3] and "(45, 'long_sb')" in out[3]


def test_range(tmp_path, capsys):
    mod = _module()
    assert mod.main(["ncu_stalls.py", str(_export(tmp_path / "rep_src.csv")), "10", "20"]) == 0
    lines = capsys.readouterr().out.splitlines()[2:]
    assert [line.split()[0] for line in lines] == ["00010", "00020"]


def test_not_an_export(tmp_path):
    mod = _module()
    bad = tmp_path / "details.csv"
    bad.write_text('"ID","Kernel Name"\n"0","k"\n')
    with pytest.raises(SystemExit, match="no 'Address' header row"):
        mod.main(["ncu_stalls.py", str(bad)])


def test_usage(capsys):
    assert _module().main(["ncu_stalls.py"]) == 2
    assert "ncu -i rep.ncu-rep --page source --csv --print-source sass" in capsys.readouterr().out
