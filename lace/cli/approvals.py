"""`lace approvals`, `lace approve ID` and `lace deny ID`: answer agents' approval requests,
from any terminal (the running process sees the answer within a second)."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict

from lace.cli.board import board_of
from lace.cli.output import print_json, report, say
from lace.core.ids import root_of
from lace.core.records import Approval
from lace.core.shown import shown
from lace.core.text import printable
from lace.runtime.person import decide_approval, pending_approvals

SHOWN_CHARACTERS = 200
SEE_ALL = "lace approvals --full shows all"


def _orphan_note(approval: Approval) -> str:
    return (f"(orphaned: the process that asked is gone; lace run --continue "
            f"{root_of(approval.thread_id)} asks again)")


def approvals_command(args: argparse.Namespace) -> int:
    """`lace approvals`."""
    with board_of(args) as board:
        requests = pending_approvals(board)
    pending = [request.approval for request in requests]
    orphans = {request.approval.id for request in requests if request.orphaned}
    if args.json:
        print_json([{**asdict(approval), "orphaned": approval.id in orphans}
                    for approval in pending])
    elif not pending:
        print("No approval requests wait.")
    for approval in [] if args.json else pending:
        arguments = json.dumps(approval.arguments, ensure_ascii=False)
        if not args.full:
            arguments = shown(arguments, SHOWN_CHARACTERS, SEE_ALL)
        note = f"  {_orphan_note(approval)}" if approval.id in orphans else ""
        say(f"#{approval.id}  {approval.thread_id}  {approval.tool}  {arguments}{note}",
            one_line=True)
    return 0


def _decide(args: argparse.Namespace, status: str) -> int:
    with board_of(args) as board:
        decided = decide_approval(board, args.approval_id, status)
    approval, orphan = decided.approval, decided.orphaned
    note = f" {_orphan_note(approval)}" if orphan else ""
    report(args, {**asdict(approval), "orphaned": orphan}, printable(
        f"#{approval.id} {approval.tool} for {approval.thread_id}: {approval.status}{note}",
        one_line=True))
    return 0


def approve_command(args: argparse.Namespace) -> int:
    """`lace approve ID [--session]`."""
    return _decide(args, "approved_session" if args.session else "approved")


def deny_command(args: argparse.Namespace) -> int:
    """`lace deny ID`."""
    return _decide(args, "denied")
