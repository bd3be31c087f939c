"""`python benchmarks/plot_sweep.py RESULTS.jsonl [...] [--out benchmarks/sweep]`: the sweep's plots
and summary (`xkernels bench --sweep`, benchmarks/README.md, Sweep).

Writes OUT/<op>.png per op: xkernels' time over the best peer's (same op, shape and form) against
the width, one line per row count (in-place ops: solid in place, dashed `xkernels out=`), a dashed
line at the goal (1.02); softmax adds a panel of GB/s with the 2,800 GB/s goal. Prints the summary
(per op the worst ratio over the sweep and where, the median, the points over the goal; softmax's
lowest GB/s over rows of >= 32,000 elements) and writes it to OUT/summary.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

try:
    from xkernels import bench_sweep
except ImportError:  # run from a checkout without xkernels installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pkg"))
    from xkernels import bench_sweep

OUT = Path(__file__).resolve().parent / "sweep"


def load(paths: list[str]) -> list[dict]:
    """The rows of the JSONL files (the copy rows dropped; rows marked `sweep` kept when any is)."""
    rows = []
    for p in paths:
        with open(p) as f:
            rows += [json.loads(line) for line in f if line.strip()]
    rows = [r for r in rows if r.get("op") != "copy"]
    if any(r.get("sweep") for r in rows):
        rows = [r for r in rows if r.get("sweep")]
    return rows


def plot(rows: list[dict], out: Path, goal: float = bench_sweep.GOAL_RATIO) -> list[Path]:
    """One PNG per op in `out`; returns their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pts = bench_sweep.ratio_points(rows)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for op in dict.fromkeys(p["op"] for p in pts):
        mine = [p for p in pts if p["op"] == op]
        softmax = op == "softmax"
        fig, axes = plt.subplots(1, 2 if softmax else 1, figsize=(13 if softmax else 8, 4.8),
                                 squeeze=False)
        ax = axes[0][0]
        row_counts = sorted({p["rows"] for p in mine})
        cmap = plt.get_cmap("viridis", max(2, len(row_counts)))
        for k, n in enumerate(row_counts):
            for impl, style in (("xkernels", "-"), ("xkernels out=", "--")):
                line = sorted((p["cols"], p["ratio"]) for p in mine
                              if p["rows"] == n and p["impl"] == impl)
                if line:
                    ax.plot([c for c, _ in line], [r for _, r in line], style, marker="o",
                            markersize=3, color=cmap(k),
                            label=f"{n} rows" + (" (out=)" if impl != "xkernels" else ""))
        ax.axhline(goal, color="red", linestyle="--", linewidth=1, label=f"goal {goal:g}")
        ax.axhline(1.0, color="gray", linewidth=0.8)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("width (hidden size, MLP width d, vocabulary)")
        ax.set_ylabel("xkernels time / best peer's")
        worst = max(mine, key=lambda p: p["ratio"])
        ax.set_title(f"{op}: worst {worst['ratio']:.3f} at {bench_sweep._shape(worst['shape'])} "
                     f"(vs {worst['peer']})", fontsize=10)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, ncol=2)
        if softmax:
            ax2 = axes[0][1]
            ours = [r for r in rows if r["op"] == op and r["impl"] == "xkernels"
                    and r.get("gbps") is not None]
            for k, n in enumerate(row_counts):
                line = sorted((r["shape"][-1], r["gbps"]) for r in ours if r["shape"][0] == n)
                if line:
                    ax2.plot([c for c, _ in line], [g for _, g in line], "-", marker="o",
                             markersize=3, color=cmap(k), label=f"{n} rows")
            ax2.axhline(bench_sweep.SOFTMAX_GOAL_GBPS, color="red", linestyle="--", linewidth=1,
                        label=f"goal {bench_sweep.SOFTMAX_GOAL_GBPS:.0f} GB/s")
            ax2.axvline(bench_sweep.SOFTMAX_MIN_COLS, color="gray", linestyle=":", linewidth=1)
            ax2.set_xscale("log", base=2)
            ax2.set_xlabel("vocabulary (row length)")
            ax2.set_ylabel("xkernels GB/s")
            ax2.grid(True, alpha=0.3)
            ax2.legend(fontsize=7)
        device = next((r.get("device") for r in rows if r.get("device")), "")
        fig.suptitle(f"{op} sweep, {device}", fontsize=9)
        fig.tight_layout()
        path = out / f"{op}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("results", nargs="+", help="sweep JSONL file(s) (DIR/sweep-<gpu>.jsonl)")
    p.add_argument("--out", default=str(OUT), help=f"plots and summary.md here (default {OUT})")
    p.add_argument("--no-plots", action="store_true", help="only the summary")
    args = p.parse_args(argv)
    rows = load(args.results)
    if not rows:
        print("plot_sweep: no rows", file=sys.stderr)
        return 1
    summary = bench_sweep.summarize(rows)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    device = next((r.get("device") for r in rows if r.get("device")), "?")
    # each card (rows of several runs: which ops each measured) and the dates
    by_card: dict[str, list[str]] = {}
    for r in rows:
        if r.get("card"):
            ops = by_card.setdefault(r["card"], [])
            if r["op"] not in ops:
                ops.append(r["op"])
    card = "; ".join(f"{c} ({', '.join(o)})" if len(by_card) > 1 else c
                     for c, o in by_card.items())
    date = ", ".join(sorted({r["date"] for r in rows if r.get("date")}))
    md = (f"# Sweep summary\n\n{device} {card}; {date}; from {', '.join(args.results)}.\n"
          f"Ratio: xkernels' time / the fastest peer's for the same op, shape and form "
          f"(below 1: xkernels wins).\n\n" + bench_sweep.format_summary(summary, markdown=True)
          + "\n")
    (out / "summary.md").write_text(md)
    print(bench_sweep.format_summary(summary))
    if not args.no_plots:
        for path in plot(rows, out):
            print(f"wrote {path}")
    print(f"wrote {out / 'summary.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
