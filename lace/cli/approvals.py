"""`lace approvals`, `lace approve ID` and `lace deny ID`: answer agents' approval requests,
from any terminal (the running process sees the answer within a second)."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict

from lace.cli.board import open_store, print_json, say
from lace.core.assignee import HUMAN
from lace.core.errors import LaceError
from lace.core.ids import root_of
from lace.core.records import Approval
from lace.core.shown import shown
from lace.store import Tx

SHOWN_CHARACTERS = 200
SEE_ALL = "lace approvals --full shows all"


def orphaned(tx: Tx, approval: Approval, live: set[str]) -> bool:
    """Whether nobody waits for this pending request any more: its agent is not waiting, or
    the process that holds the agent is not in `live` (it was killed, or its lease expired)."""
    agent = tx.agents.find(approval.thread_id)
    return agent is None or agent.status != "waiting" or agent.lease_holder not in live


def _orphan_note(approval: Approval) -> str:
    return (f"(orphaned: the process that asked is gone; lace run --continue "
            f"{root_of(approval.thread_id)} asks again)")


def approvals_command(args: argparse.Namespace) -> int:
    """`lace approvals`."""
    with open_store(args).reading() as tx:
        pending = tx.approvals.pending()
        live = tx.processes.live()
        orphans = {approval.id for approval in pending if orphaned(tx, approval, live)}
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
    with open_store(args).transaction() as tx:
        asked = tx.approvals.get(args.approval_id)
        orphan = asked.status == "pending" and orphaned(tx, asked, tx.processes.live())
        if orphan and status != "denied":
            raise LaceError(f"Approval request #{asked.id} is orphaned: the process that asked "
                            "for it is gone, so approving it would run nothing. Resume with "
                            f"lace run --continue {root_of(asked.thread_id)}; it asks again.")
        approval = tx.approvals.decide(args.approval_id, status, HUMAN)
    note = f" {_orphan_note(approval)}" if orphan else ""
    say(f"#{approval.id} {approval.tool} for {approval.thread_id}: {approval.status}{note}",
        one_line=True)
    return 0


def approve_command(args: argparse.Namespace) -> int:
    """`lace approve ID [--session]`."""
    return _decide(args, "approved_session" if args.session else "approved")


def deny_command(args: argparse.Namespace) -> int:
    """`lace deny ID`."""
    return _decide(args, "denied")
