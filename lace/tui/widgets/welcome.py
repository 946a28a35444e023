"""The first screen of a new session: what lace is, the root's model and how to change it,
whether its key is present, three requests that show delegation, and the main keys."""

from __future__ import annotations

from dataclasses import dataclass

from textual.content import Content
from textual.widgets import Static

from lace.core.text import printable

ABOUT = ("a task board for LLM agents. You give a request to a root agent; it splits the work "
         "into tasks and hands each to a helper agent it spawns, in its own thread.")
EXAMPLES = (
    "Plan a small launch: write the announcement and list the risks.",
    "Review this README: one helper checks the commands, another the wording.",
    "Compare SQLite and PostgreSQL for a small app, a helper for each, then pick one.",
)
KEYS_PER_LINE = 6


@dataclass(frozen=True)
class ModelReadiness:
    """The root's model for a new session, where that choice came from, and whether it can be
    called now (`problem` says why not: the key variable that is missing, never a key)."""

    model: str
    source: str
    config_file: str
    key: str
    problem: str | None = None


def _line(label: str, text: str, style: str = "") -> Content:
    return Content.assemble((f"{label:<7}", "bold"), (printable(text), style))


def welcome_content(readiness: ModelReadiness, keys: list[tuple[str, str]]) -> Content:
    """The first screen's text; every value from outside is shown literally."""
    key_style = "$error" if readiness.problem else "$success"
    key_text = f"✗ {readiness.problem}" if readiness.problem else f"✓ {readiness.key}"
    shown_keys = ["  ·  ".join(f"{key} {what}" for key, what in keys[start:start + KEYS_PER_LINE])
                  for start in range(0, len(keys), KEYS_PER_LINE)]
    parts = [
        Content.assemble(("lace", "bold $accent"), f" · {ABOUT}"),
        Content(""),
        Content.assemble(_line("Model", readiness.model, "bold"),
                         (f"  ({printable(readiness.source)})", "dim")),
        _line("", "to change it:  lace --model provider/model", "dim"),
        _line("", "           or  LACE_MODEL=provider/model in the environment", "dim"),
        _line("", f'           or  model = "provider/model" in {readiness.config_file}', "dim"),
        _line("Key", key_text, key_style),
        Content(""),
        Content.styled("Try one of these (type it below and press Enter):", "bold"),
        *(Content(f"  → {example}") for example in EXAMPLES),
        Content(""),
        *(_line("Keys" if index == 0 else "", line) for index, line in enumerate(shown_keys)),
    ]
    return Content("\n").join(parts)


class Welcome(Static):
    """Shown in the conversation area until the first message is sent."""

    def __init__(self, readiness: ModelReadiness, keys: list[tuple[str, str]]) -> None:
        super().__init__(welcome_content(readiness, keys), id="welcome")
