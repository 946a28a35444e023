"""Row verbs of the `subscriptions` table: which threads follow which topics."""

from __future__ import annotations

import sqlalchemy as sa

from lace.core.clock import now_iso
from lace.store import schema
from lace.store.rows import Rows

_subscriptions, _threads = schema.subscriptions, schema.threads


class SubscriptionRows(Rows):
    """A thread's topics, and a topic's subscribers in a session."""

    def insert(self, thread_id: str, topic: str) -> None:
        """Subscribe a thread to a topic (it must not be subscribed yet)."""
        self._execute(_subscriptions.insert().values(thread_id=thread_id, topic=topic,
                                                     created_at=now_iso()))

    def add(self, thread_id: str, topic: str) -> bool:
        """Subscribe; False if already subscribed."""
        exists = self._execute(sa.select(_subscriptions.c.topic).where(
            _subscriptions.c.thread_id == thread_id, _subscriptions.c.topic == topic)).first()
        if exists is None:
            self.insert(thread_id, topic)
        return exists is None

    def remove(self, thread_id: str, topic: str) -> bool:
        """Unsubscribe; False if not subscribed."""
        result = self._execute(_subscriptions.delete().where(
            _subscriptions.c.thread_id == thread_id, _subscriptions.c.topic == topic))
        return bool(result.rowcount)

    def subscribers(self, root_id: str, topic: str) -> list[str]:
        """Threads of a session subscribed to `topic`, oldest subscription first."""
        return list(self._execute(
            sa.select(_subscriptions.c.thread_id)
            .join(_threads, _threads.c.id == _subscriptions.c.thread_id)
            .where(_threads.c.root_id == root_id, _subscriptions.c.topic == topic)
            .order_by(_subscriptions.c.created_at, _subscriptions.c.thread_id)).scalars())
