"""Settings from the environment (and, later, lace.toml): the default model and the like."""

from __future__ import annotations

import os

DEMO_MODEL = "demo/coordinator"


def default_model() -> str:
    """The root agent's model: `$LACE_MODEL`, else lace's offline demo model."""
    return os.environ.get("LACE_MODEL") or DEMO_MODEL
