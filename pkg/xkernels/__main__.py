"""`python -m xkernels`: the `xkernels` command."""

from .cli import main

raise SystemExit(main())
