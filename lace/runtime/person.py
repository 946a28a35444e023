"""The person's acts on a board from outside any runtime (`lace stop`, `lace resume`,
`lace session end`, `lace approvals`, `lace approve`): each one transaction, which the processes
running the agents notice within a second."""

from __future__ import annotations

from dataclasses import dataclass

from lace.core.assignee import HUMAN
from lace.core.errors import LaceError
from lace.core.ids import root_of
from lace.core.records import Approval, Thread
from lace.runtime.board import Board
from lace.store import Tx


@dataclass(frozen=True)
class PendingApproval:
    """An approval request, and whether nobody waits for its answer any more."""

    approval: Approval
    orphaned: bool


def orphaned(tx: Tx, approval: Approval, live: set[str]) -> bool:
    """Whether nobody waits for this pending request any more: its agent is not waiting, or
    the process that holds the agent is not in `live` (it was killed, or its lease expired)."""
    agent = tx.agents.find(approval.thread_id)
    return agent is None or agent.status != "waiting" or agent.lease_holder not in live


def pending_approvals(board: Board) -> list[PendingApproval]:
    """Every undecided approval request, oldest first."""
    with board.store.reading() as tx:
        live = tx.processes.live()
        return [PendingApproval(approval, orphaned(tx, approval, live))
                for approval in tx.approvals.pending()]


def decide_approval(board: Board, approval_id: int, status: str) -> PendingApproval:
    """The person's answer to an approval request; approving one that is orphaned (the
    process that asked is gone) is refused, since it would run nothing."""
    def decide(tx: Tx) -> PendingApproval:
        asked = tx.approvals.get(approval_id)
        orphan = asked.status == "pending" and orphaned(tx, asked, tx.processes.live())
        if orphan and status != "denied":
            raise LaceError(
                f"Approval request #{asked.id} is orphaned: the process that asked for it is "
                "gone, so approving it would run nothing. Resume with lace run --continue "
                f"{root_of(asked.thread_id)}; it asks again.")
        return PendingApproval(tx.approvals.decide(approval_id, status, HUMAN), orphan)

    return board.store.write(decide)


def stop_subtree(board: Board, thread_id: str, reason: str) -> list[str]:
    """Stop an agent and its subtree as the person (until a person resumes it); returns the
    agents stopped now."""
    def stop(tx: Tx) -> list[str]:
        tx.threads.get(thread_id)  # an id that names no thread is told as such
        tx.agents.get(thread_id)
        return tx.lifecycle.stop_subtree(thread_id, reason=reason, by_person=True)

    return board.store.write(stop)


def end_session(board: Board, root_id: str, reason: str) -> tuple[Thread, list[str]]:
    """Stop every agent of a session as the person (nothing is deleted)."""
    def end(tx: Tx) -> tuple[Thread, list[str]]:
        root = tx.threads.get_session(root_id)
        return root, tx.lifecycle.stop_subtree(root.id, reason=reason, by_person=True)

    return board.store.write(end)


def resume_stopped(board: Board, thread_id: str) -> None:
    """Let a stopped agent continue its conversation; UnknownThreadError for an id that names
    no thread, LaceError when it is not stopped."""
    def resume(tx: Tx) -> None:
        tx.threads.get(thread_id)
        if not tx.lifecycle.resume(thread_id):
            status = tx.agents.get(thread_id).status
            raise LaceError(f"{thread_id} is {status}, not stopped: nothing to resume.")

    board.store.write(resume)
