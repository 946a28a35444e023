"""Run the command line with `python -m lace`."""

from lace.cli import main

raise SystemExit(main())
