"""The sidebar: the session's threads as a tree, each with its mark, task and usage."""

from __future__ import annotations

from collections.abc import Iterator

from textual.widgets import Tree
from textual.widgets.tree import TreeNode

from lace.tui.literal import literal_line
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
                node = parent.add(literal_line(row.label), data=thread_id, expand=True,
                                  allow_expand=False)
                parent.allow_expand = True
                parent.expand()
                self.nodes_by_thread[thread_id] = node
                self.labels[thread_id] = row.label
            elif self.labels[thread_id] != row.label:
                node.set_label(literal_line(row.label))
                self.labels[thread_id] = row.label

    def select_thread(self, thread_id: str) -> None:
        """Put the cursor on a thread's line, opening any folded parent above it."""
        node = self.nodes_by_thread.get(thread_id)
        if node is None:
            return
        for parent in _ancestors(node):
            if not parent.is_expanded:
                parent.expand()
        _ = self.last_line  # lays out nodes added or unfolded since, so `node.line` is current
        self.move_cursor(node)

    def ordered_threads(self) -> list[str]:
        """Thread ids as the tree draws them, each parent before its children (folded ones
        included), for next/previous."""
        return list(_depth_first(self.root))


def _depth_first(node: TreeNode[str]) -> Iterator[str]:
    if node.data is not None:
        yield node.data
    for child in node.children:
        yield from _depth_first(child)


def _ancestors(node: TreeNode[str]) -> Iterator[TreeNode[str]]:
    """The nodes above `node`, nearest first, up to the hidden root."""
    parent = node.parent
    while parent is not None and not parent.is_root:
        yield parent
        parent = parent.parent
