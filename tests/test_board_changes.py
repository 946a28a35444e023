"""The signal waiting calls sleep on: a change wakes the waits on the tasks it names, the
general waiters, and (naming none in particular) every wait."""

from __future__ import annotations

from lace.runtime.board_changes import BoardChanges


async def test_a_change_of_one_task_wakes_only_the_waits_on_it() -> None:
    changes = BoardChanges()
    general = changes.next
    with changes.watching(["t1", "t2"]) as on_mine, changes.watching(["t3"]) as on_other:
        changes.changed(["t2"])
        assert on_mine.is_set() and not on_other.is_set()
        assert general.is_set()  # the general waiters hear every change
        assert not changes.next.is_set()  # a new signal for the next change


async def test_a_change_that_names_no_tasks_wakes_the_general_waiters_only() -> None:
    changes = BoardChanges()
    general = changes.next
    with changes.watching(["t1"]) as on_task:
        changes.changed(())
        assert general.is_set() and not on_task.is_set()


async def test_a_change_of_any_task_wakes_every_wait_and_watchers_are_forgotten() -> None:
    changes = BoardChanges()
    with changes.watching(["t1"]) as first, changes.watching(["t1", "t2"]) as second:
        pass
    changes.changed()
    assert not first.is_set() and not second.is_set()  # left: no longer watched
    with changes.watching(["t1"]) as first, changes.watching(["t2"]) as second:
        changes.changed()
        assert first.is_set() and second.is_set()
