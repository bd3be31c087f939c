"""`python benchmarks/table.py [GPU]`: the README's results tables (markdown) from
benchmarks/results/{activation,norm,softmax,attention}-GPU.jsonl (GPU: h100 by default).

First table: one line per xkernels row of the memory-bound families: its time, its GB/s, and the
fastest peer of the same op, shape and form (`xkernels.bench.best_peers`: an in-place op's in-place
form against in-place peers, its `out=` form against the peers that write other tensors).

Then the attention family (`xkernels.bench_attention`), one table for prefill (TFLOP/s) and one for
decode (GB/s): per case, xkernels's figure, each peer's, and xkernels's time over the fastest
cp.async peer's and over the fastest peer's (TMA + wgmma designs included). The SDPA row on a
contiguous cache is shown but is no peer of the paged decode.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
FAMILIES = ("activation", "norm", "softmax")
HEADER = ("| op | shape | xkernels ms | xkernels GB/s | best peer | peer GB/s | "
          "xkernels / peer time |\n|---|---|---|---|---|---|---|")
ATTENTION_NOTE = ("Designs: cp.async = cp.async + mma.sync (FlashAttention-2 class: xkernels, SDPA "
                  "flash, FlashInfer fa2 and decode, flash_attn); TMA = TMA + wgmma (SDPA cuDNN, "
                  "FlashInfer fa3); ref = not paged (a contiguous cache), no peer. Ratios: "
                  "xkernels time / the peer's (< 1: xkernels faster).")


def fmt_ratio(q: float) -> str:
    """Three decimals; four where three would read 1.000, so that a near tie shows its side."""
    return f"{q:.4f}" if f"{q:.3f}" == "1.000" else f"{q:.3f}"


def _read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def table(gpu: str = "h100") -> str:
    from xkernels.bench import best_peers, fmt_shape

    lines = [HEADER]
    for fam in FAMILIES:
        path = RESULTS / f"{fam}-{gpu}.jsonl"
        if not path.exists():
            continue
        rows = _read(path)
        for i, j in best_peers(rows).items():
            r, p = rows[i], rows[j]
            op = r["op"] + (" (out=)" if r["impl"] == "xkernels out=" else "")
            lines.append(f"| {op} | {fmt_shape(r['shape'])} | {r['ms']:.4f} | {r['gbps']:.0f} | "
                         f"{p['impl']} | {p['gbps']:.0f} | {fmt_ratio(r['ms'] / p['ms'])} |")
    return "\n".join(lines)


_DESIGN = {"cp.async": "cp.async", "TMA+wgmma": "TMA", "reference": "ref"}


def attention_tables(rows: list[dict]) -> str:
    """The prefill and decode tables of attention rows (as the JSONL holds them)."""
    from xkernels.bench import impl_group
    from xkernels.bench_attention import FAMILY, best_peers

    rows = [r for r in rows if r.get("family") == FAMILY and r.get("case")]
    best = best_peers(rows)
    out = []
    for kind, unit, key in (("prefill", "TFLOP/s", "tflops"), ("decode", "GB/s", "gbps")):
        mine = [(i, r) for i, r in enumerate(rows) if r.get("kind") == kind]
        if not mine:
            continue
        peers: dict[str, str] = {}  # impl -> its design, in order of appearance
        for _, r in mine:
            if impl_group(r["impl"]) != "xkernels":
                peers.setdefault(r["impl"], r.get("design") or "")
        cases = list(dict.fromkeys(r["case"] for _, r in mine))
        head = (["case", f"xkernels {unit}"]
                + [f"{p} ({_DESIGN.get(d, d)})" if d else p for p, d in peers.items()]
                + ["xkernels / best cp.async", "xkernels / best"])
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for case in cases:
            by = {r["impl"]: (i, r) for i, r in mine if r["case"] == case}

            def fig(impl, by=by, key=key):  # bound now: called within this iteration
                if impl not in by:
                    return "-"
                r = by[impl][1]
                if r.get("ms") is None:
                    return "failed"
                v = "-" if r.get(key) is None else format(r[key], ".1f" if r[key] >= 10 else ".3g")
                return v + (" (CHECK FAILED)" if r.get("check") == "failed" else "")

            xi = by.get("xkernels", (None, None))[0]
            a, c = best.get(xi, (None, None)) if xi is not None else (None, None)

            def ratio(j, xi=xi):
                if j is None:
                    return "-"
                return f"{fmt_ratio(rows[xi]['ms'] / rows[j]['ms'])} ({rows[j]['impl']})"

            cells = [case, fig("xkernels"), *(fig(p) for p in peers), ratio(c), ratio(a)]
            lines.append("| " + " | ".join(cells) + " |")
        out.append("\n".join(lines))
    return "\n\n".join(out + ([ATTENTION_NOTE] if out else []))


def attention_table(gpu: str = "h100") -> str:
    path = RESULTS / f"attention-{gpu}.jsonl"
    return attention_tables(_read(path)) if path.exists() else ""


if __name__ == "__main__":
    gpu = sys.argv[1] if len(sys.argv) > 1 else "h100"
    print(table(gpu))
    att = attention_table(gpu)
    if att:
        print("\n" + att)
