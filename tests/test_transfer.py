"""`lace export` and `lace import`: a session moved to a new database is the same row by row; a
session imported twice gets new ids the second time, rewritten everywhere; keys never leave;
a bad file is one line, exit 2, and writes nothing."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

from lace.cli.transfer import MAX_IMPORT_BYTES
from lace.store import Store, open_database
from tests.conftest import query, run_cli
from tests.lace_forks import lace_popen
from tests.processes import lace_env
from tests.workers import wait_for

pytestmark = pytest.mark.both_engines

KEY = "sk-planted-0123456789abcdefKEY"
LOCAL_COLUMNS = ("lease_holder", "lease_epoch", "host", "workspace", "inert")
TABLES = ("threads", "agent_metadata", "tasks", "task_notes", "events", "inbox", "llm_calls",
          "subscriptions", "task_dependencies")
"""Every table an import writes (approvals never travel: hostile/test_import.py)."""


def demo_session(capsys: pytest.CaptureFixture[str], db: Path) -> str:
    """A session run by the offline demo, with a subscription, an approval and a pending
    message besides."""
    code, _out, err = run_cli(capsys, "run", "Write the announcement and list the risks.",
                              "--db", str(db))
    assert code == 0, err
    root = err.split("Session ", 1)[1].split()[0]
    opened = Store(open_database(str(db)))
    with opened.transaction() as tx:
        tx.subscriptions.add(f"{root}.1", "launch")
        tx.approvals.request(f"{root}.2", "bash", {"command": "echo hi"})
        tx.inbox.post(root, sender="human", kind="message", text="one more thing")
    opened.close()
    return root


def post_and_append(db: Path | str, thread_id: str, times: int = 1) -> None:
    """Write an inbox row and an event of `thread_id`, `times` times, as lace does after an
    import."""
    opened = Store(open_database(str(db)))
    try:
        for _ in range(times):
            with opened.transaction() as tx:
                tx.inbox.post(thread_id, sender="human", kind="message", text="and another")
                tx.events.append(thread_id, "user_message", {"text": "and another"})
    finally:
        opened.close()


def rows(db: Path, table: str, where: str = "1", *params: Any) -> list[dict[str, Any]]:
    """Every row of a table as a dict, without its lease columns and its own integer id (for
    tables nothing refers to by id)."""
    with sqlite3.connect(db) as connection:
        connection.row_factory = sqlite3.Row
        found = [dict(row) for row in connection.execute(
            f"SELECT * FROM {table} WHERE {where} ORDER BY rowid", params)]
    dropped = (*LOCAL_COLUMNS, *(("id",) if table in ("task_notes", "llm_calls", "approvals")
                                  else ()))
    return [{key: value for key, value in row.items() if key not in dropped} for row in found]


def _ordered(table: str, found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    if table in ("threads", "tasks"):
        return sorted(found, key=lambda row: str(row["id"]))
    if table == "task_dependencies":
        return sorted(found, key=lambda row: (row["task_id"], row["blocked_by"]))
    return found


def export(capsys: pytest.CaptureFixture[str], db: Path, root: str, *argv: str) -> str:
    code, out, err = run_cli(capsys, "export", root, "--db", str(db), *argv)
    assert code == 0, err
    return out


def test_an_export_imported_into_a_new_database_is_the_same_row_by_row(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source, target, file = tmp_path / "a.db", tmp_path / "b.db", tmp_path / "session.json"
    root = demo_session(capsys, source)
    export(capsys, source, root, "-o", str(file))
    assert os.stat(file).st_mode & 0o777 == 0o600
    code, out, err = run_cli(capsys, "import", str(file), "--db", str(target))
    assert (code, err) == (0, f"Nothing of it runs until you resume it: lace run --continue "
                              f"{root}; left out its 1 approval (permissions never travel in "
                              "an import)\n")
    assert out.startswith(f"Imported session {root}: 4 threads")
    assert len(rows(target, "task_dependencies")) == 2
    assert query(target, "SELECT DISTINCT inert FROM agent_metadata") == [(1,)]
    assert rows(target, "approvals") == []
    for table in TABLES:  # rows with a text id in any order, the others in order
        assert _ordered(table, rows(target, table)) == _ordered(table, rows(source, table))
    for thread in (root, f"{root}.1", f"{root}.2"):  # what a person reads is the same too
        assert json.loads(export(capsys, target, root))["events"] == json.loads(
            export(capsys, source, root))["events"]
        code_a, show_a, _ = run_cli(capsys, "show", thread, "--db", str(source))
        code_b, show_b, _ = run_cli(capsys, "show", thread, "--db", str(target))
        assert code_a == code_b == 0 and show_a == show_b
    _, board_a, _ = run_cli(capsys, "tasks", "--all", "--db", str(source))
    _, board_b, _ = run_cli(capsys, "tasks", "--all", "--db", str(target))
    assert board_a == board_b


def test_a_session_imported_twice_gets_new_ids_rewritten_everywhere(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source, file = tmp_path / "a.db", tmp_path / "session.json"
    root = demo_session(capsys, source)
    export(capsys, source, root, "-o", str(file))
    code, out, err = run_cli(capsys, "import", str(file), "--db", str(source))
    assert code == 0, err
    new_root = out.split(" as ", 1)[1].split()[0]
    assert new_root != root and re.fullmatch(r"lace_\d{8}_[0-9a-z]{6}", new_root)
    old_tasks = [task for (task,) in query(source, "SELECT id FROM tasks WHERE thread_id = ?",
                                           root)]
    new_tasks = [task for (task,) in query(source, "SELECT id FROM tasks WHERE thread_id = ?",
                                           new_root)]
    assert len(new_tasks) == len(old_tasks) == 3 and not set(new_tasks) & set(old_tasks)
    copy = json.loads(export(capsys, source, new_root))
    text = json.dumps(copy)
    for old in (root, *old_tasks):
        assert old not in text  # no reference, in a column or in a text, names the original
    original = json.loads(export(capsys, source, root))
    renamed = json.dumps(original)
    new_ids = {(task["title"], task["created_at"]): task["id"] for task in copy["tasks"]}
    mapping = {task["id"]: new_ids[task["title"], task["created_at"]]
               for task in original["tasks"]}
    batches = {task["batch"]: copied["batch"] for task in original["tasks"]
               for copied in copy["tasks"] if copied["id"] == mapping[task["id"]]
               and task["batch"] is not None}
    assert batches and all(old != new for old, new in batches.items())  # none joins the first
    for old, new in [(root, new_root), *mapping.items(), *batches.items()]:
        renamed = renamed.replace(old, new)
    assert _without_row_ids(json.loads(renamed)) == _without_row_ids(copy)
    # the copy is a session lace runs: the pending message is delivered, the root answers
    code, _out, err = run_cli(capsys, "run", "--continue", new_root, "--db", str(source))
    assert code == 0, err
    assert query(source, "SELECT COUNT(*) FROM inbox WHERE thread_id = ? AND consumed_at IS "
                         "NULL", new_root) == [(0,)]


def test_a_session_imported_beside_its_original_leaves_room_for_new_rows(
        db_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The imported rows take ids after the database's own; every row written after them gets
    an id of its own too (on PostgreSQL an id given explicitly does not move the table's
    sequence: the rows written next took the imported ids, and failed)."""
    file = tmp_path / "session.json"
    root = demo_session(capsys, db_path)
    export(capsys, db_path, root, "-o", str(file))
    code, out, err = run_cli(capsys, "import", str(file), "--db", str(db_path))
    assert code == 0, err
    copy = out.split(" as ", 1)[1].split()[0]
    before = {table: query(db_path, f"SELECT MAX(id) FROM {table}")[0][0]
              for table in ("inbox", "events")}
    code, _out, err = run_cli(capsys, "task", "add", "Check it", "--assign", f"{copy}.1",
                              "--session", copy, "--db", str(db_path))
    assert code == 0, err
    post_and_append(db_path, copy, times=3)
    for table, highest in before.items():
        added = query(db_path, f"SELECT id FROM {table} WHERE id > ? ORDER BY id", highest)
        assert len(added) >= 3, (table, added)


def test_a_plan_exported_while_a_task_waits_goes_on_where_it_is_imported(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A task waiting for the person's, with its agent planned: imported (into a new database,
    and a second time beside the first), completing the copy's blocker spawns the copy's
    agent under the copy's root."""
    source, target, file = tmp_path / "a.db", tmp_path / "b.db", tmp_path / "plan.json"
    code, out, err = run_cli(capsys, "task", "add", "Sign off", "--assign", "human", "--db",
                             str(source))
    assert code == 0, err
    root, first = err.split()[-1], out.split()[2].rstrip(":")
    code, out, err = run_cli(capsys, "task", "add", "Announce", "--assign", "new:demo/worker",
                             "--blocked-by", first, "--db", str(source))
    assert code == 0 and "waits for" in out, err
    export(capsys, source, root, "-o", str(file))
    for db in (target, source):
        code, out, err = run_cli(capsys, "import", str(file), "--db", str(db))
        assert code == 0, err
        copy = out.split(" as ", 1)[1].split()[0] if " as " in out else root
        (blocker,), = query(db, "SELECT id FROM tasks WHERE thread_id = ? AND title = "
                                "'Sign off'", copy)
        code, _, err = run_cli(capsys, "task", "complete", blocker, "Yes", "--db", str(db))
        assert code == 0, err
        assert query(db, "SELECT a.thread_id, a.parent_thread_id FROM agent_metadata a JOIN "
                         "tasks t ON t.id = a.created_for_task WHERE t.thread_id = ?", copy) == [
            (f"{copy}.1", copy)]
    assert query(source, "SELECT COUNT(*) FROM agent_metadata WHERE created_for_task IS NOT "
                         "NULL") == [(1,)]  # the original still waits


def _without_row_ids(document: dict[str, Any]) -> dict[str, Any]:
    """The document with its integer ids replaced by their place in it."""
    inbox = {item["id"]: number for number, item in enumerate(document["inbox"])}
    for number, item in enumerate(document["inbox"]):
        item["id"] = number
    for number, event in enumerate(document["events"]):
        event["id"] = number
        if "inbox_id" in event["data"]:
            event["data"]["inbox_id"] = inbox[event["data"]["inbox_id"]]
        if "inbox_ids" in event["data"]:
            event["data"]["inbox_ids"] = [inbox[i] for i in event["data"]["inbox_ids"]]
    document.pop("exported_at")
    document.pop("approvals")  # never imported
    return document


def test_keys_never_appear_in_an_export(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "a.db"
    root = demo_session(capsys, db)
    with sqlite3.connect(db) as connection:  # as an earlier lace, before the key was set
        connection.execute("INSERT INTO inbox (thread_id, sender, kind, text, priority, "
                           "created_at, wakes) VALUES (?, 'human', 'message', ?, 'normal', "
                           "'2026-01-01T00:00:00Z', 1)", (root, f"my key is {KEY}"))
        connection.execute("INSERT INTO events (thread_id, type, data, created_at) VALUES "
                           "(?, 'agent_message', ?, '2026-01-01T00:00:00Z')",
                           (root, json.dumps({"message": {"role": "assistant",
                                                          "content": f"I saw {KEY}"}})))
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    for form in ("json", "markdown"):
        out = export(capsys, db, root, "--format", form)
        assert KEY not in out and out.count("[redacted]") >= 2, form
    export(capsys, db, root, "-o", str(tmp_path / "out.json"))
    assert KEY not in (tmp_path / "out.json").read_text()


def test_the_transcript_keeps_model_text_inside_its_fences(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "a.db"
    root = demo_session(capsys, db)
    hostile = "done\n````\n# Forged heading\n<script>alert(1)</script>\n```"
    with sqlite3.connect(db) as connection:
        connection.execute("UPDATE task_notes SET content = ?", (hostile,))
        connection.execute("UPDATE tasks SET title = ?", ("a `title` ``` with ticks",))
    out = export(capsys, db, root, "--format", "markdown")
    outside, fence = [], None
    for line in out.splitlines():
        ticks = len(line) - len(line.lstrip("`"))
        if fence is None and ticks >= 3:
            fence = ticks
        elif fence is not None and line == "`" * fence:
            fence = None
        elif fence is None:
            outside.append(line)
    assert fence is None and outside
    assert not any("Forged" in line or "<script>" in line for line in outside)
    assert all(not line.startswith("#") or line.startswith(("# lace session", "## ", "### "))
               for line in outside)
    assert "# Forged heading" in out  # kept, inside a fence


def test_the_transcript_says_what_its_cost_leaves_out_only_when_something_is(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "a.db"
    root = demo_session(capsys, db)
    head = export(capsys, db, root, "--format", "markdown").splitlines()[3]
    assert head.endswith(" tokens, $0.00"), head  # the demo's calls are all priced (free)
    with sqlite3.connect(db) as connection:
        connection.execute("UPDATE llm_calls SET cost_usd = NULL WHERE id IN "
                           "(SELECT id FROM llm_calls ORDER BY id LIMIT 2)")
    head = export(capsys, db, root, "--format", "markdown").splitlines()[3]
    assert head.endswith(" tokens, $0.00 (and 2 model call(s) of no known price)"), head


@pytest.fixture
def valid_export(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    db = tmp_path / "source.db"
    root = demo_session(capsys, db)
    return dict(json.loads(export(capsys, db, root)))


def _edited(document: dict[str, Any], edit: Callable[[dict[str, Any]], None]) -> str:
    copy = json.loads(json.dumps(document))
    edit(copy)
    return json.dumps(copy)


EXPECTED = {
    "not JSON": "is not JSON", "not UTF-8": "is not UTF-8", "null": "not a lace session export",
    "wrong version": "a version 2 export; this lace reads version 1",
    "a missing field": "events: Field required", "an unknown field": "extra: Extra inputs",
    "a bad thread id": "threads.1.id: String should match pattern",
    "a task assigned to nothing": "names assignee", "an event of no thread": "names thread",
    "an inbox row named by nothing": "names inbox row 999999",
    "an agent for no task": "names task 'task_20260101_abcdef'",
    "a helper with a tool its creator lacks": "has tools its creator lacks",
    "an unknown tool": "unknown tool 'rm_rf'", "a model name with a newline": "Expected provider",
    "a bad status": "tasks.0.status", "nested past the decoder": "nested deeper than 72",
    "nested past the limit": "nested deeper than 72",
    "huge": "lace import reads files of at most 32 MB",
    "a folder": "is not a file", "missing": "is not a file",
    "a dependency on no task": "a dependency names task 'task_20260101_abcdef'",
    "a dependency cycle": "the dependencies make a cycle",
    "a planned agent with an unknown tool": "plans: unknown tool 'rm_rf'",
    "a held assignment of no agent": "holds agent",
}


def test_a_bad_file_is_one_line_exit_2_and_writes_nothing(
        store: Store, db_path: Path, tmp_path: Path, valid_export: dict[str, Any],
        capsys: pytest.CaptureFixture[str], unchanged: Callable[[], Any]) -> None:
    root = valid_export["session"]
    huge = tmp_path / "huge.json"
    with huge.open("wb") as file:
        file.truncate(MAX_IMPORT_BYTES + 1)  # sparse: no disk spent
    cases: dict[str, bytes | str | Path] = {
        "not JSON": "{",
        "not UTF-8": b'{"format": "\xff"}',
        "null": "null",
        "another format": '{"format": "other"}',
        "wrong version": _edited(valid_export, lambda d: d.update(version=2)),
        "a missing field": _edited(valid_export, lambda d: d.pop("events")),
        "an unknown field": _edited(valid_export, lambda d: d.update(extra=1)),
        "a bad thread id": _edited(valid_export, lambda d: d["threads"][1].update(
            id="../../etc")),
        "a task assigned to nothing": _edited(valid_export, lambda d: d["tasks"][0].update(
            assigned_to=f"{root}.9")),
        "an event of no thread": _edited(valid_export, lambda d: d["events"][0].update(
            thread_id=f"{root}.7")),
        "an inbox row named by nothing": _edited(valid_export, lambda d: next(
            e for e in d["events"] if "inbox_id" in e["data"])["data"].update(inbox_id=999999)),
        "an agent for no task": _edited(valid_export, lambda d: d["agents"][1].update(
            current_task="task_20260101_abcdef")),
        "a helper with a tool its creator lacks": _edited(valid_export, lambda d: (
            d["agents"][0].update(tools=["task_list"]))),
        "an unknown tool": _edited(valid_export, lambda d: d["agents"][1]["tools"].append(
            "rm_rf")),
        "a model name with a newline": _edited(valid_export, lambda d: d["agents"][1].update(
            model="worker\nlace: fake line")),
        "a bad status": _edited(valid_export, lambda d: d["tasks"][0].update(status="nope")),
        "a dependency on no task": _edited(valid_export, lambda d: d["task_dependencies"][0]
                                           .update(blocked_by="task_20260101_abcdef")),
        "a dependency cycle": _edited(valid_export, lambda d: d["task_dependencies"].append(
            {"task_id": d["task_dependencies"][0]["blocked_by"],
             "blocked_by": d["task_dependencies"][0]["task_id"],
             "created_at": "2026-11-01T10:00:00.000000Z", "satisfied_at": None})),
        "a planned agent with an unknown tool": _edited(valid_export, lambda d: d["tasks"][0]
                                                        .update(held_assignment={"agent": {
            "parent_id": root, "provider": "demo", "model": "worker", "profile": None,
            "tools": ["rm_rf"], "type": "persistent", "instructions": None, "budget": None,
            "topics": [], "limits": None}})),
        "a held assignment of no agent": _edited(valid_export, lambda d: d["tasks"][0].update(
            held_assignment={"thread": f"{root}.9"})),
        "nested past the decoder": "[" * 100_000 + "]" * 100_000,
        "nested past the limit": '{"format": ' + "[" * 200 + "]" * 200 + "}",
        "huge": huge,
        "a folder": tmp_path,
        "missing": tmp_path / "nowhere.json",
    }
    with unchanged():
        for name, content in cases.items():
            if isinstance(content, Path):
                path = content
            else:
                path = tmp_path / "bad.json"
                path.write_bytes(content if isinstance(content, bytes) else content.encode())
            code, out, err = run_cli(capsys, "import", str(path), "--db", str(db_path))
            assert (code, out) == (2, ""), name
            assert err.startswith("lace: error: ") and len(err.splitlines()) == 1, (name, err)
            assert EXPECTED.get(name, "") in err, (name, err)
    good = tmp_path / "good.json"
    good.write_text(json.dumps(valid_export))
    code, _out, err = run_cli(capsys, "import", str(good), "--db", str(db_path))
    assert code == 0, err


def test_the_documented_schema_is_the_one_lace_import_checks() -> None:
    from lace.store.export_format import SessionDocument

    pinned = Path(__file__).parent.parent / "docs" / "export.schema.json"
    assert json.loads(pinned.read_text()) == SessionDocument.model_json_schema(), (
        "regenerate docs/export.schema.json and describe the change in docs/export.md")


def test_an_import_beside_a_live_writer_leaves_the_writer_ids_of_its_own(
        postgres_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """PostgreSQL: a process posting to an inbox while an import into the same database is
    under way (its rows written, not yet committed) gets an id no imported row takes, and
    both commit: neither fails with a duplicate key."""
    file = tmp_path / "session.json"
    root = demo_session(capsys, postgres_url)
    export(capsys, postgres_url, root, "-o", str(file))
    assert query(postgres_url, "SELECT COUNT(*) FROM llm_calls")[0][0] > 0  # the import's last
    with psycopg.connect(postgres_url, autocommit=True) as holder:
        holder.execute("BEGIN")
        holder.execute("LOCK TABLE llm_calls IN EXCLUSIVE MODE")  # the import waits there
        importing = lace_popen([sys.executable, "-m", "lace", "import", str(file), "--db",
                                postgres_url], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               env=lace_env(tmp_path / "home"), text=True)
        try:
            wait_for(lambda: waiting_on_locks(postgres_url) == 1, "the import to wait")
            writer = Store(open_database(postgres_url))
            posted: list[object] = []
            posting = threading.Thread(target=lambda: posted.append(_post_or_fail(writer, root)))
            posting.start()
            wait_for(lambda: posted or waiting_on_locks(postgres_url) == 2,
                     "the post to be written or to wait")
            holder.execute("ROLLBACK")
            posting.join(60)
            writer.close()
            _out, err = importing.communicate(timeout=60)
        finally:
            importing.kill()
    assert importing.returncode == 0, err
    assert posted == [None], posted
    for table in ("inbox", "events"):
        ids = [row[0] for row in query(postgres_url, f"SELECT id FROM {table}")]
        assert len(ids) == len(set(ids)), table


def waiting_on_locks(url: str) -> int:
    """How many connections to `url`'s database wait for a lock."""
    return int(query(url, "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = "
                          "current_database() AND wait_event_type = 'Lock'")[0][0])


def _post_or_fail(store: Store, root: str) -> object:
    """A message posted to `root` as a live process posts one: None, or the error it met."""
    try:
        store.write(lambda tx: tx.inbox.post(root, sender="human", kind="message",
                                             text="while it imports"))
    except Exception as error:  # what the test reports
        return error
    return None


def test_an_import_into_a_postgres_database_whose_sequences_ran_ahead_takes_ids_past_them(
        migrated_postgres_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """PostgreSQL: rows deleted (or rolled back) leave a sequence past MAX(id); an import takes
    ids after the sequence, and rows written after it take ids after the import's."""
    source = tmp_path / "source.db"
    root = demo_session(capsys, source)
    file = tmp_path / "session.json"
    export(capsys, source, root, "-o", str(file))
    url = migrated_postgres_url
    for table in ("inbox", "events"):
        query(url, f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), 500)")
    code, _out, err = run_cli(capsys, "import", str(file), "--db", url)
    assert code == 0, err
    imported = {table: [row[0] for row in query(url, f"SELECT id FROM {table} ORDER BY id")]
                for table in ("inbox", "events")}
    assert all(ids and ids[0] > 500 for ids in imported.values()), imported
    post_and_append(url, root)
    for table, ids in imported.items():
        added = query(url, f"SELECT id FROM {table} WHERE id > ?", max(ids))
        assert len(added) == 1, (table, added)
