"""The sidebar: the session's threads as a tree, each with its mark, task and usage."""

from __future__ import annotations

from textual.widgets import Tree
from textual.widgets.tree import TreeNode

from lace.tui.session_view import SessionView


class ThreadTree(Tree[str]):
    """Threads by parent; new ones are added in place without moving the cursor."""

    def __init__(self) -> None:
        super().__init__("session", id="threads")
        self.show_root = False
        self.guide_depth = 2
        self.nodes_by_thread: dict[str, TreeNode[str]] = {}
        self.labels: dict[str, str] = {}
        self.session_id: str | None = None

    def sync(self, view: SessionView) -> None:
        """Add new threads and relabel changed ones."""
        if view.root.id != self.session_id:
            self.clear()
            self.nodes_by_thread.clear()
            self.labels.clear()
            self.session_id = view.root.id
        for row in view.rows:
            thread_id = row.thread.id
            node = self.nodes_by_thread.get(thread_id)
            if node is None:
                parent = self.nodes_by_thread.get(row.thread.parent_id or "", self.root)
                node = parent.add(row.label, data=thread_id, expand=True, allow_expand=False)
                parent.allow_expand = True
                parent.expand()
                self.nodes_by_thread[thread_id] = node
                self.labels[thread_id] = row.label
            elif self.labels[thread_id] != row.label:
                node.set_label(row.label)
                self.labels[thread_id] = row.label

    def select_thread(self, thread_id: str) -> None:
        """Put the cursor on a thread's line."""
        node = self.nodes_by_thread.get(thread_id)
        if node is not None:
            self.move_cursor(node)

    def ordered_threads(self) -> list[str]:
        """Thread ids in the order they are shown, for next/previous."""
        return list(self.nodes_by_thread)
