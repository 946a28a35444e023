"""The board-scale, start-up and app-under-load benchmarks run at a tiny size and report what
they measured; only the structure of their results is checked, never a timing."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from benchmarks import board_scale, startup, tui_load


def table_rows(output: str, header: str) -> list[str]:
    """The lines of the table whose header starts with `header`, below its rule."""
    lines = output.splitlines()
    start = next(number for number, line in enumerate(lines) if line.startswith(header))
    rows = []
    for line in lines[start + 2:]:
        if not line.strip():
            break
        rows.append(line)
    return rows


def test_board_scale_builds_the_file_once_and_times_every_read(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "scale.db"
    assert board_scale.main(["--tiny", "--db", str(db), "--runs", "1"]) == 0
    first = capsys.readouterr().out
    shape = board_scale.Shape.tiny()
    with sqlite3.connect(db) as connection:
        counts = {table: connection.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
                  for table in ("tasks", "events", "threads", "agent_metadata")}
        longest = connection.execute("SELECT COUNT(*) FROM events GROUP BY thread_id "
                                     "ORDER BY 1 DESC LIMIT 1").fetchone()[0]
        orphans = connection.execute("PRAGMA foreign_key_check").fetchall()
    assert counts["tasks"] == shape.tasks and counts["events"] == shape.events
    assert counts["threads"] == counts["agent_metadata"] > shape.sessions
    assert longest == shape.long_thread_events
    assert orphans == []
    rows = table_rows(first, "read")
    names = [row.split("  ")[0] for row in rows]
    assert "task_list (root)" in names and "app: open long thread" in names
    assert all(row.rstrip().endswith(("ok", "SLOW")) for row in rows)
    assert "Query plans" in first and "(cached" not in first

    assert board_scale.main(["--tiny", "--db", str(db), "--runs", "1"]) == 0
    assert "(cached; --rebuild to build again)" in capsys.readouterr().out


def test_board_scale_never_replaces_a_file_it_did_not_build(tmp_path: Path) -> None:
    db = tmp_path / "mine.db"
    db.write_bytes(b"not ours")
    with pytest.raises(SystemExit, match="not built by this benchmark"):
        board_scale.main(["--tiny", "--db", str(db)])
    assert db.read_bytes() == b"not ours"


def test_startup_times_help_and_the_first_frame(capsys: pytest.CaptureFixture[str]) -> None:
    assert startup.main(["--tiny"]) == 0
    rows = table_rows(capsys.readouterr().out, "case")
    by_name = {row.split("  ")[0]: row for row in rows}
    first_frames = ("first frame, existing db", "first frame, new db",
                    "first frame, no litellm warm-up")
    assert {"python -c pass", "python -m lace --help", *first_frames} <= set(by_name)
    for name in first_frames:  # the last column: was litellm in sys.modules at the first frame?
        assert by_name[name].split()[-1] == "no", f"{name}: litellm imported before the frame"


def test_tui_load_presses_keys_while_the_agents_write(tmp_path: Path) -> None:
    outcome = asyncio.run(tui_load.run(agents=5, presses=2, rate=20.0, call_s=0.5, ramp_s=0.3,
                                       folder=tmp_path))
    assert len(outcome.next_thread) == len(outcome.board_open) == len(outcome.board_close) == 2
    assert outcome.model.deltas > 0 and outcome.lag
    with sqlite3.connect(tmp_path / "lace.db") as connection:
        helpers = dict(connection.execute(
            "SELECT status, COUNT(*) FROM agent_metadata WHERE thread_id LIKE '%.%' "
            "GROUP BY status").fetchall())
        worked = connection.execute("SELECT COUNT(DISTINCT thread_id) FROM llm_calls "
                                    "WHERE thread_id LIKE '%.%'").fetchone()[0]
    assert helpers == {"interrupted": 5}  # cut off mid-call when the app stopped
    assert worked == 5
