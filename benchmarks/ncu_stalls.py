"""Where a kernel's warps wait, per SASS instruction, from Nsight Compute's source page.

Profile one launch with the source counters, export the page as CSV, then summarise it here:

    ncu --set full --import-source no -k regex:Sm90Kernel --launch-count 1 -o rep ./binary
    ncu -i rep.ncu-rep --page source --csv --print-source sass > rep_src.csv
    python benchmarks/ncu_stalls.py rep_src.csv            # totals, top lines, by execution count
    python benchmarks/ncu_stalls.py rep_src.csv 6000 7500  # every line in that offset range

The totals are the warp-state samples by stall reason; the top lines are the SASS lines with the
most samples (offset from the kernel's start, samples, share, warp-level executions, the three
largest reasons). Lines run the same number of times belong to the same loop level (per k block,
per unit, per block), so the samples summed by execution count say which level the time goes to.
How GEMM v9 and v10 were found (benchmarks/README.md, GEMM kernel versions).
"""

from __future__ import annotations

import csv
import sys
from collections import Counter, defaultdict


def load(path: str) -> tuple[list[str], list[list[str]]]:
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    # the first row names the kernel, the second is the header
    for i, row in enumerate(rows):
        if row and row[0] == "Address":
            return row, rows[i + 1:]
    raise SystemExit(f"{path}: no 'Address' header row (not an ncu --page source --csv export)")


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 4):
        print(__doc__)
        return 2
    hdr, data = load(argv[1])
    ix = {h: i for i, h in enumerate(hdr)}
    samples_col, exec_col = "Warp Stall Sampling (All Samples)", "Instructions Executed"
    stalls = [h for h in hdr if h.startswith("stall_") and "Not Issued" not in h]
    base = int(data[0][0], 16)

    def num(row: list[str], col: str) -> int:
        v = row[ix[col]]
        return int(v) if v not in ("", "-") else 0

    lines = []
    reasons: Counter[str] = Counter()
    by_exec: defaultdict[int, int] = defaultdict(int)
    for row in data:
        s, ex = num(row, samples_col), num(row, exec_col)
        top = sorted(((num(row, h), h[len("stall_"):]) for h in stalls), reverse=True)[:3]
        for h in stalls:
            reasons[h[len("stall_"):]] += num(row, h)
        by_exec[ex] += s
        lines.append((int(row[0], 16) - base, s, ex, row[ix["Source"]].strip(), top))
    total = sum(line[1] for line in lines) or 1
    print(f"samples {total}")
    print(", ".join(f"{k} {v / total:.3f}" for k, v in reasons.most_common(12)))
    if len(argv) == 4:
        lo, hi = int(argv[2], 16), int(argv[3], 16)
        for off, s, ex, src, top in lines:
            if lo <= off <= hi:
                print(f"{off:05x} {s:7d} {ex:9d} {src[:64]:64s} {top}")
        return 0
    print("by execution count (share of samples):",
          ", ".join(f"{ex}: {s / total:.3f}" for ex, s in
                    sorted(by_exec.items(), key=lambda kv: -kv[1])[:8]))
    for off, s, ex, src, top in sorted(lines, key=lambda line: -line[1])[:40]:
        print(f"{off:05x} {s:7d} {s / total:.3f} {ex:9d} {src[:64]:64s} {top}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
