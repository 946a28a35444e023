"""The first screen of a new session: what lace is, the root's model and how to change it,
whether its key is present, three requests that show delegation, and the main keys."""

from __future__ import annotations

from dataclasses import dataclass

from textual.app import ComposeResult
from textual.containers import Grid, Vertical
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


def welcome_rows(readiness: ModelReadiness,
                 keys: list[tuple[str, str]]) -> list[tuple[str, Content]]:
    """The first screen as (label, text) rows; every value from outside is shown literally."""
    key_style = "$error" if readiness.problem else "$success"
    key_text = f"✗ {readiness.problem}" if readiness.problem else f"✓ {readiness.key}"
    shown_keys = ["  ·  ".join(f"{key} {what}" for key, what in keys[start:start + KEYS_PER_LINE])
                  for start in range(0, len(keys), KEYS_PER_LINE)]
    model = Content.assemble((printable(readiness.model), "bold"),
                             (f"  ({printable(readiness.source)})", "dim"))
    change = Content.styled(
        "to change it:  lace --model provider/model\n"
        "           or  LACE_MODEL=provider/model in the environment\n"
        f'           or  model = "provider/model" in {printable(readiness.config_file)}', "dim")
    return [
        ("Model", Content("\n").join([model, change])),
        ("Key", Content.styled(printable(key_text), key_style)),
        ("Try", Content("\n").join([Content.styled("type one of these below and press Enter:",
                                                   "bold"),
                                    *(Content(f"→ {example}") for example in EXAMPLES)])),
        ("Keys", Content("\n".join(shown_keys))),
    ]


class Welcome(Vertical):
    """Shown in the conversation area until the first message is sent."""

    def __init__(self, readiness: ModelReadiness, keys: list[tuple[str, str]]) -> None:
        super().__init__(id="welcome")
        self.rows = welcome_rows(readiness, keys)

    def compose(self) -> ComposeResult:
        yield Static(Content.assemble(("lace", "bold $accent"), f" · {ABOUT}"),
                     classes="welcome-about")
        with Grid(classes="welcome-rows"):
            for label, text in self.rows:
                yield Static(Content.styled(label, "bold"), classes="welcome-label")
                yield Static(text)

    @property
    def text(self) -> str:
        """Everything it says, as plain text."""
        return "\n".join([f"lace · {ABOUT}", *(f"{label}  {text.plain}"
                                                 for label, text in self.rows)])
