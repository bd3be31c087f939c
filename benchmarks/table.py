"""`python benchmarks/table.py [GPU]`: the README's results table (markdown) from
benchmarks/results/{activation,norm,softmax}-GPU.jsonl (GPU: h100 by default).

One line per xkernels row: its time, its GB/s, and the fastest peer of the same op, shape and
form (`xkernels.bench.best_peers`: an in-place op's in-place form against in-place peers, its
`out=` form against the peers that write other tensors).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
FAMILIES = ("activation", "norm", "softmax")
HEADER = ("| op | shape | xkernels ms | xkernels GB/s | best peer | peer GB/s | "
          "xkernels / peer time |\n|---|---|---|---|---|---|---|")


def fmt_ratio(q: float) -> str:
    """Three decimals; four where three would read 1.000, so that a near tie shows its side."""
    return f"{q:.4f}" if f"{q:.3f}" == "1.000" else f"{q:.3f}"


def table(gpu: str = "h100") -> str:
    from xkernels.bench import best_peers, fmt_shape

    lines = [HEADER]
    for fam in FAMILIES:
        path = RESULTS / f"{fam}-{gpu}.jsonl"
        if not path.exists():
            continue
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        for i, j in best_peers(rows).items():
            r, p = rows[i], rows[j]
            op = r["op"] + (" (out=)" if r["impl"] == "xkernels out=" else "")
            lines.append(f"| {op} | {fmt_shape(r['shape'])} | {r['ms']:.4f} | {r['gbps']:.0f} | "
                         f"{p['impl']} | {p['gbps']:.0f} | {fmt_ratio(r['ms'] / p['ms'])} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table(*sys.argv[1:2]))
