"""`python benchmarks/run.py [ARGS]` == `xkernels bench --out benchmarks/results [ARGS]`.

A later `--out DIR` in ARGS wins. See benchmarks/README.md.
"""

from __future__ import annotations

import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def main(argv: list[str] | None = None) -> int:
    try:
        from xkernels.bench import main as bench_main
    except ImportError as e:
        print(f"benchmarks/run.py: cannot import xkernels ({e}); `pip install -e .` first",
              file=sys.stderr)
        return 1
    args = sys.argv[1:] if argv is None else list(argv)
    return bench_main(["--out", str(RESULTS), *args])


if __name__ == "__main__":
    raise SystemExit(main())
