"""The approval prompt: which agent wants to run which tool with what; allow once, allow for
the session, or deny."""

from __future__ import annotations

import json
from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Footer, Label, Static

from lace.core.records import Approval
from lace.core.shown import shown
from lace.tui.literal import literal


class ApprovalModal(ModalScreen[str]):
    """Dismissed with `approved`, `approved_session` or `denied`."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("a", "answer('approved')", "Allow once"),
        Binding("s", "answer('approved_session')", "Allow for this session"),
        Binding("d", "answer('denied')", "Deny"),
    ]

    def __init__(self, approval: Approval, waiting: int) -> None:
        super().__init__()
        self.approval, self.waiting = approval, waiting

    def compose(self) -> ComposeResult:
        approval = self.approval
        arguments = json.dumps(approval.arguments, ensure_ascii=False, indent=2)
        with Vertical(id="approval-box"):
            yield Label(literal(f"Approval #{approval.id}: {approval.thread_id} wants to run "
                                f"{approval.tool}" + (f"  ({self.waiting} waiting)"
                                                      if self.waiting > 1 else "")))
            with VerticalScroll(id="approval-scroll"):
                yield Static(literal(shown(arguments, 100_000, "lace approvals --full shows all")),
                             id="approval-arguments")
            yield Label("a: allow once · s: allow for this session · d: deny · "
                        "↑↓ PgUp PgDn: scroll")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#approval-scroll").focus()

    def action_answer(self, status: str) -> None:
        self.dismiss(status)
