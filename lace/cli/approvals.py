"""`lace approvals`, `lace approve ID` and `lace deny ID`: answer agents' approval requests,
from any terminal (the running process sees the answer within a second)."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict

from lace.cli.board import open_store, print_json
from lace.core.assignee import HUMAN


def approvals_command(args: argparse.Namespace) -> int:
    """`lace approvals`."""
    with open_store(args).reading() as tx:
        pending = tx.pending_approvals()
    if args.json:
        print_json([asdict(approval) for approval in pending])
    elif not pending:
        print("No approval requests wait.")
    for approval in [] if args.json else pending:
        arguments = json.dumps(approval.arguments, ensure_ascii=False)
        print(f"#{approval.id}  {approval.thread_id}  {approval.tool}  {arguments[:120]}")
    return 0


def _decide(args: argparse.Namespace, status: str) -> int:
    with open_store(args).transaction() as tx:
        approval = tx.decide_approval(args.approval_id, status, HUMAN)
    print(f"#{approval.id} {approval.tool} for {approval.thread_id}: {approval.status}")
    return 0


def approve_command(args: argparse.Namespace) -> int:
    """`lace approve ID [--session]`."""
    return _decide(args, "approved_session" if args.session else "approved")


def deny_command(args: argparse.Namespace) -> int:
    """`lace deny ID`."""
    return _decide(args, "denied")
