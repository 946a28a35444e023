"""The store driven from asyncio, without ever making the event loop wait on the write lock.

Writes asked for in the same turn of the event loop commit together: each runs in its own
SAVEPOINT (so one that fails undoes only itself), and all of them in one transaction, whose
COMMIT (the costly part: making the changes durable) is paid once. Every caller
resumes only after that COMMIT, so a write awaited is a write made durable.

A transaction whose lock is free at once runs right on the event loop: lace's transactions are
short (a few statements, well under a millisecond), and a trip to a thread and back costs more
than the work (about 75 us, plus the two threads taking turns with the GIL). When another
process holds SQLite's write lock, or (PostgreSQL) a row the batch needs or a write that
conflicts with it (`Engine.is_conflict`), the batch goes to one store thread instead, which
waits for the lock or runs the batch again (`Store.write`) while the loop goes on; the batches
asked for after it follow it there, so a process's writes commit in the order asked. Work that
opens its own transactions (`call`) always runs on that thread.

What each committed batch caused (the `Effects` its verbs recorded in the `EffectLog` each work
is given here) goes to `on_commit` before the callers resume: the runtime wakes, announces and
cancels there, so no caller has to.

On a PostgreSQL server every transaction runs on the store thread instead, never on the loop:
its driver waits on the network, and while the server is slow, restarting or unreachable the
loop must go on (the app answers keys, the worker's other turns run). There each transaction is
run again until it commits (`lace.store.retry`), so a dropped connection costs a wait, not the
work that was using it; and the writes asked for while the thread runs one transaction commit
together in the next (`_drain`), since each COMMIT there costs a round trip and a flush."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from typing import Any, TypeVar

import sqlalchemy as sa

from lace.core.effects import NO_EFFECTS, EffectLog, Effects
from lace.store import Store, Tx
from lace.store.agent_rows import AgentCache
from lace.store.engines import LockBusyError, driver
from lace.store.engines.reconnect import is_retried
from lace.store.prepared import (
    AbortedTransactionError,
    carried_writes,
    commit,
    deferred_writes,
    queued_write_failed,
    transaction_aborted,
)
from lace.store.retry import KeptConnection, run_transaction

T = TypeVar("T")
MAX_BATCH = 32  # writes per COMMIT: more saves little, and every caller waits for the whole batch
Work = Callable[[Tx], Any]
Outcome = tuple["asyncio.Future[Any]", Any, BaseException | None, Effects]
EffectHandler = Callable[[Effects], None]


def _run_batch(connection: sa.Connection, batch: list[tuple[Work, asyncio.Future[Any]]],
               undoes_all: Callable[[BaseException], bool]) -> list[Outcome]:
    """Run each work in its own SAVEPOINT inside the open transaction of `connection`; an
    error that `undoes_all` (a conflict with another writer) ends the whole batch."""
    if len(batch) == 1:  # nothing to keep apart: a failure rolls the transaction back
        work, future = batch[0]
        log = EffectLog()
        return [(future, work(Tx(connection, log)), None, log.collect())]
    raw = driver(connection)
    outcomes: list[Outcome] = []
    for work, future in batch:
        raw.execute("SAVEPOINT lace_work")
        log = EffectLog()
        try:
            result = work(Tx(connection, log))
        except Exception as error:  # only this work is undone; the others still commit
            if undoes_all(error):
                raise
            raw.execute("ROLLBACK TO lace_work")
            outcomes.append((future, None, error, NO_EFFECTS))
        else:
            outcomes.append((future, result, None, log.collect()))
        raw.execute("RELEASE lace_work")
    return outcomes


class _WorkFailed(Exception):
    """A work of a batch on a server failed with an error of its own: the batch is undone,
    and runs again without it."""

    def __init__(self, index: int, error: Exception) -> None:
        super().__init__(str(error))
        self.index, self.error = index, error


class _Unattributed(Exception):
    """A statement sent with writes carried from earlier works (or the COMMIT) failed: the
    batch is undone, and runs again with each work's writes sent before it ends, where an
    error shows whose it is."""


def _run_together(connection: sa.Connection, batch: list[tuple[Work, asyncio.Future[Any]]],
                  undoes_all: Callable[[BaseException], bool], *,
                  carried: bool) -> list[Outcome]:
    """On a server: each work in the open transaction of `connection`, with no SAVEPOINT
    between them (each would cost a round trip) and its writes sent with its next statement
    (`deferred_writes`), or, when `carried`, with the next statement of any work or the
    COMMIT (`carried_writes`, `_commit_carried`); a work's own error undoes the batch
    (`_WorkFailed`); one that `undoes_all`, or a fault, is raised as it is; one that may be
    another work's, `_Unattributed`."""
    outcomes: list[Outcome] = []
    agents = AgentCache()  # one transaction, undone whole: the works share what they read
    raw = driver(connection)
    with carried_writes(raw) if carried else nullcontext():
        for index, (work, future) in enumerate(batch):
            log = EffectLog()
            try:
                with deferred_writes(raw):  # its writes ride with its reads: fewer round trips
                    result = work(Tx(connection, log, agents))
            except Exception as error:
                if undoes_all(error) or is_retried(error):
                    raise
                if queued_write_failed(raw):
                    raise _Unattributed(str(error)) from error
                if len(batch) == 1:
                    raise
                raise _WorkFailed(index, error) from error
            if queued_write_failed(raw):  # the work went on after such an error
                raise _Unattributed("a work ignored an error of a statement")
            if transaction_aborted(raw):  # it caught its own statement's error and went on
                if len(batch) == 1:
                    raise AbortedTransactionError
                raise _WorkFailed(index, AbortedTransactionError())
            outcomes.append((future, result, None, log.collect()))
    return outcomes


def _commit_carried(raw: Any, undoes_all: Callable[[BaseException], bool]) -> None:
    """COMMIT with the writes still carried (`commit`); an error of theirs (not a conflict
    or a fault) is `_Unattributed`."""
    try:
        commit(raw)
    except Exception as error:
        if undoes_all(error) or is_retried(error) or not queued_write_failed(raw):
            raise
        raise _Unattributed(str(error)) from error


def _read_batch(connection: sa.Connection, batch: list[tuple[Work, asyncio.Future[Any]]],
                begin: Callable[[], object]) -> list[Outcome]:
    """Run each work in the open read transaction of `connection`: one snapshot for reads
    asked at once. After a work fails (its error may have ended the transaction), the rest
    read in a new one (`begin`)."""
    outcomes: list[Outcome] = []
    agents = AgentCache()  # the agent rows of the snapshot, read once for all
    for work, future in batch:
        try:
            outcomes.append((future, work(Tx(connection, agents=agents)), None, NO_EFFECTS))
        except Exception as error:
            if is_retried(error):
                raise  # a fault: the whole batch reads again
            outcomes.append((future, None, error, NO_EFFECTS))
            driver(connection).rollback()
            if connection.in_transaction():
                connection.rollback()
            begin()
            agents = AgentCache()
    return outcomes


def _ignore(_effects: Effects) -> None:
    """The effect handler of a process that runs no agents (the command line)."""


def _settle(outcomes: list[Outcome], on_commit: EffectHandler) -> None:
    """After COMMIT: act on what the works caused, then resume their callers."""
    caused = NO_EFFECTS
    for _future, _result, _error, effects in outcomes:
        caused = caused | effects
    if caused:
        on_commit(caused)
    for future, result, error, _effects in outcomes:
        if future.cancelled():
            continue
        if error is None:
            future.set_result(result)
        else:
            future.set_exception(error)


def _fail_all(batch: list[tuple[Work, asyncio.Future[Any]]], error: BaseException) -> None:
    for _work, future in batch:
        if not future.cancelled():
            future.set_exception(error)


def _unless_lost(connection: sa.Connection | None) -> sa.Connection | None:
    """`connection`, or None (after discarding it) once its server ended the session (a
    PostgreSQL restart, a network cut): the next use connects again."""
    if connection is None or not getattr(driver(connection), "closed", False):
        return connection
    connection.invalidate()
    connection.close()
    return None


class AsyncStore:
    """Runs store work on the event loop when the write lock is free, else on a thread."""

    def __init__(self, store: Store, on_commit: EffectHandler = _ignore) -> None:
        self.store = store
        self.on_commit = on_commit
        """Called with what each batch caused, once it committed (the runtime's wake-ups)."""
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lace-store")
        self._writer: sa.Connection | None = None  # the event loop's own connections
        self._reader: sa.Connection | None = None
        self._pending: list[tuple[Work, asyncio.Future[Any]]] = []
        self._waiting: set[asyncio.Future[None]] = set()  # batches on the thread
        self._draining: asyncio.Future[None] | None = None  # a server's writes (`_drain`)
        self._reads: list[tuple[Work, asyncio.Future[Any]]] = []  # and its reads
        self._reading: asyncio.Future[None] | None = None
        self._on_server = store.database.path is None  # PostgreSQL: never on the loop
        self._thread_connection = KeptConnection(store.database)  # used on the thread only
        self._read_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lace-read")
        self._read_connection = KeptConnection(store.database)  # a server's reads (`read`)
        self._closing = False

    async def call(self, work: Callable[[], T]) -> T:
        """Run `work` (which opens its own transactions) on the store thread."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, work)

    async def write(self, work: Callable[[Tx], T]) -> T:
        """Run `work` in a write transaction, with the other writes asked for in this turn of
        the event loop; returns once they are committed."""
        return await self.submit(work)

    def submit(self, work: Callable[[Tx], T]) -> asyncio.Future[T]:
        """`write`, asked for now (not when a task made of it first runs): done once it is
        committed. A process's writes commit in the order asked."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._pending.append((work, future))
        if self._on_server:
            if self._draining is None or self._draining.done():
                self._draining = asyncio.ensure_future(self._drain())
        elif len(self._pending) == 1:
            loop.call_soon(self._flush)
        return future

    async def _drain(self) -> None:
        """On a server: commit the writes asked for so far in one transaction on the store
        thread, then those asked for meanwhile in the next, until none are left; a write
        waits for one COMMIT (a round trip, and the server's flush to disk) with all the
        others that came while the previous one ran, instead of one each."""
        while self._pending:
            batch, self._pending = self._pending[:MAX_BATCH], self._pending[MAX_BATCH:]
            await self._flush_there(batch)

    def _flush(self) -> None:
        batch, self._pending = self._pending[:MAX_BATCH], self._pending[MAX_BATCH:]
        if self._pending:  # the rest commit next, after these callers had their turn
            asyncio.get_running_loop().call_soon(self._flush)
        if self._waiting:  # after a batch waiting on the thread, never before it: a write
            self._flush_later(batch)  # may undo what a later one assumes (a grant given back)
            return
        conflict = self.store.database.kind.is_conflict
        try:
            writer = self._writer_connection()
            with self.store.database.raw_transaction(writer, write=True):
                outcomes = _run_batch(writer, batch, conflict)
        except Exception as error:
            if isinstance(error, LockBusyError) or conflict(error):
                # another process holds the lock, or committed first: the thread waits for it
                # and runs the batch again
                self._flush_later(batch)
                return
            _fail_all(batch, error)  # the batch is rolled back: every caller hears why
            return
        _settle(outcomes, self.on_commit)

    def _flush_later(self, batch: list[tuple[Work, asyncio.Future[Any]]]) -> None:
        task = asyncio.ensure_future(self._flush_there(batch))
        self._waiting.add(task)
        task.add_done_callback(self._waiting.discard)

    async def _flush_there(self, batch: list[tuple[Work, asyncio.Future[Any]]]) -> None:
        conflict = self.store.database.kind.is_conflict
        carried = True
        while True:
            def run(batch: list[tuple[Work, asyncio.Future[Any]]] = batch,
                    carried: bool = carried) -> list[Outcome]:
                if self._on_server:
                    return self._retried(
                        lambda connection: _run_together(connection, batch, conflict,
                                                         carried=carried),
                        write=True, commit=lambda raw: _commit_carried(raw, conflict))
                return self.store.write(lambda tx: _run_batch(tx.connection, batch, conflict))

            try:
                outcomes = await self.call(run)
            except _WorkFailed as failed:  # undone with the batch: the others run again
                _fail_all([batch[failed.index]], failed.error)
                batch = [*batch[:failed.index], *batch[failed.index + 1:]]
                continue
            except _Unattributed:  # undone: again, each work's errors kept to itself
                carried = False
                continue
            except Exception as error:
                _fail_all(batch, error)
                return
            _settle(outcomes, self.on_commit)
            return

    async def read(self, work: Callable[[Tx], T]) -> T:
        """Run `work` in one read transaction (one consistent snapshot). Readers never wait
        for writers (WAL on SQLite, snapshots on PostgreSQL), so reads run here (on SQLite),
        and on a server on a thread and connection of their own, beside the writes: while
        one waits for the server the other goes on."""
        if self._on_server:
            future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
            self._reads.append((work, future))
            if self._reading is None or self._reading.done():
                self._reading = asyncio.ensure_future(self._drain_reads())
            return await future
        self._reader = _unless_lost(self._reader)
        if self._reader is None:
            self._reader = self.store.database.engine.connect()
        with self.store.database.raw_transaction(self._reader, write=False):
            return work(Tx(self._reader))

    async def _drain_reads(self) -> None:
        """On a server: the reads asked for so far in one snapshot on the read thread, then
        those asked for meanwhile in the next, until none are left (a BEGIN and a COMMIT
        for many)."""
        kind, loop = self.store.database.kind, asyncio.get_running_loop()
        while self._reads:
            batch, self._reads = self._reads[:MAX_BATCH], self._reads[MAX_BATCH:]

            def run(batch: list[tuple[Work, asyncio.Future[Any]]] = batch) -> list[Outcome]:
                def read(connection: sa.Connection) -> list[Outcome]:
                    return _read_batch(connection, batch,
                                       lambda: kind.begin(connection, write=False))

                return run_transaction(self.store.database, read, write=False,
                                       stopping=lambda: self._closing,
                                       kept=self._read_connection)

            try:
                outcomes = await loop.run_in_executor(self._read_executor, run)
            except Exception as error:
                _fail_all(batch, error)
                continue
            _settle(outcomes, self.on_commit)

    def _retried(self, work: Callable[[sa.Connection], T], *, write: bool,
                 commit: Callable[[Any], None]) -> T:
        """`work` in one transaction on the server, run again after each fault until it
        commits or this store closes."""
        return run_transaction(self.store.database, work, write=write,
                               stopping=lambda: self._closing, kept=self._thread_connection,
                               commit=commit)

    def _writer_connection(self) -> sa.Connection:
        """The loop's connection for writes, which fails at once instead of waiting for the
        lock (`Engine.fail_fast`)."""
        self._writer = _unless_lost(self._writer)
        if self._writer is None:
            self._writer = self.store.database.engine.connect()
            self.store.database.kind.fail_fast(self._writer)
        return self._writer

    def close(self) -> None:
        """Finish queued work (a transaction the server keeps refusing is given up), stop the
        thread and close the loop's connections."""
        self._closing = True
        self._executor.shutdown(wait=True)
        self._read_executor.shutdown(wait=True)
        self._thread_connection.close()
        self._read_connection.close()
        for connection in (self._writer, self._reader):
            if connection is not None:
                connection.close()
        self._writer = self._reader = None
