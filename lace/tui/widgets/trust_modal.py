"""The question a workspace's own configuration needs before it acts: the whole of it, shown
literally and scrollable, then trust it as it is, or go on without it."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Footer, Label, Static

from lace.tui.literal import literal


class TrustModal(ModalScreen[bool]):
    """Dismissed with True (trust the folder as shown) or False (not now)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("t", "answer(True)", "Trust this folder"),
        Binding("n", "answer(False)", "Not now"),
        Binding("escape", "answer(False)", "Not now", show=False),
    ]

    def __init__(self, folder: str, lines: list[str]) -> None:
        super().__init__()
        self.folder, self.lines = folder, lines

    def compose(self) -> ComposeResult:
        with Vertical(id="approval-box"):
            yield Label(literal(f"{self.folder} brings its own configuration; lace ignores it "
                                "until you trust it as shown:"))
            with VerticalScroll(id="approval-scroll"):
                yield Static(literal("\n".join(self.lines)), id="trust-configuration")
            yield Label("t: trust this folder as shown · n: not now (go on without it) · "
                        "↑↓ PgUp PgDn: scroll")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#approval-scroll").focus()

    def action_answer(self, trusted: bool) -> None:
        self.dismiss(trusted)

