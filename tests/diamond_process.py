"""`lace` in a child process whose `scripted/...` models run the diamond of `tests.diamond`
(`python -m tests.diamond_process run ...`, with `LACE_TEST_PROVIDERS=1`), so a crash point can
cut it anywhere and `run --continue` pick it up."""

from __future__ import annotations

import sys

from lace.cli import main
from lace.llm.scripted import install_script
from tests.diamond import script

if __name__ == "__main__":
    install_script(script)
    sys.exit(main(sys.argv[1:]))
