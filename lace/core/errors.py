"""Errors that carry a message meant for whoever made the mistake (a model or a person)."""

from __future__ import annotations


class LaceError(Exception):
    """A domain error: its message says what was wrong and how to fix it."""


class NotFoundError(LaceError):
    """A task, thread or session that does not exist (or is not visible to the caller)."""


class UnknownThreadError(NotFoundError):
    """A thread id that names no thread: a person at the command line is told where the ids
    are listed, a model is not (its tools list them)."""


class PermissionDeniedError(LaceError):
    """The caller may not change this task."""


class InvalidTransitionError(LaceError):
    """A status change that the transition table forbids."""


class InvalidAssigneeError(LaceError):
    """An `assigned_to` value that does not parse or names nothing callable."""


class DependencyError(LaceError):
    """A dependency that cannot be: a cycle, a `#N` out of range, a blocker that will never
    complete, or an edge that is not there."""


class SpawnRefusedError(LaceError):
    """A spawn past `[limits] max_depth`, `max_children` or `spawns_per_minute`."""


class DatabaseRefusedError(LaceError):
    """A file that is not a lace database, or one written by a newer lace."""


class StorageError(Exception):
    """The disk refused lace's file: it is full, read-only or failing. Not a mistake in a call
    (so not a LaceError, which would go back to a model as a tool error): whoever runs lace
    frees space or fixes the disk, then resumes."""


class ServerRefusedError(StorageError):
    """The database server refused lace's work for a reason only its operator can change: a
    grant missing for lace's role, a server that only reads (a standby), a statement cancelled.
    Like a full disk it ends the run, leaving its agents for `lace run --continue`; its message
    names the fix."""
