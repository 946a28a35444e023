"""The runtime benchmarks at tiny sizes: they run, check their boards, and report well-formed
figures. Nothing here asserts on timing."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from benchmarks import (
    fanout,
    memory,
    per_event,
    prompt_cache,
    shared_board,
    spawn_latency,
    tasks_scale,
)
from benchmarks.common import percentile, raised_limits, table
from lace.store import Store, open_database
from tests.postgres import PostgresServer, query


def positive(value: float) -> bool:
    return math.isfinite(value) and value > 0


def test_fanout_tiny(capsys: pytest.CaptureFixture[str]) -> None:
    (run,) = fanout.main(["--tiny"])
    assert (run.tasks, run.worker_calls) == (3, 3 * fanout.WORKER_CALLS)
    assert run.root_calls >= 3  # create, answer the tool results, sum up
    assert positive(run.ideal_s) and positive(run.ratio)
    out = capsys.readouterr().out
    assert "limits raised for 3 children" in out and "ideal = (2 + T) x L" in out
    header, rule, row = out.strip().splitlines()[-3:]
    assert header.split()[:4] == ["K", "ideal", "ms", "actual"]
    assert set(rule) <= {"-", " "} and row.split()[0] == "3"


def test_fanout_refuses_an_unfinished_board(tmp_path: Path) -> None:
    store = Store(open_database(str(tmp_path / "lace.db")))
    with store.transaction() as tx:
        root = tx.threads.create_session(provider="scripted", model="root")
        tx.board.create_task(session_id=root.id, actor=root.id, title="Open", prompt="p")
    store.close()
    with pytest.raises(fanout.BenchmarkError, match="completed tasks"):
        fanout.check_board(str(tmp_path / "lace.db"), root.id, 1)


def test_spawn_latency_tiny(capsys: pytest.CaptureFixture[str]) -> None:
    run = spawn_latency.main(["--tiny"])
    assert len(run.latencies_ms) == 3 and all(positive(value) for value in run.latencies_ms)
    figures = run.figures()
    assert list(figures) == ["median", "p90", "p99", "max"]
    assert figures["median"] <= figures["p90"] <= figures["p99"] <= figures["max"]
    assert "spawn latency" in capsys.readouterr().out


def test_per_event_tiny(capsys: pytest.CaptureFixture[str]) -> None:
    result = per_event.main(["--tiny"])
    assert len(result.lace_ms) == len(result.bare_ms) == 5
    assert all(positive(value) for value in result.lace_ms + result.bare_ms)
    assert positive(result.ratio)
    assert result.lace_mix["BEGIN IMMEDIATE"] >= 1 and result.lace_mix["COMMIT"] >= 1
    for kind in ("BEGIN DEFERRED", "BEGIN IMMEDIATE", "COMMIT", "INSERT"):
        assert result.bare_mix[kind] == result.lace_mix[kind]  # same transactions and rows
    out = capsys.readouterr().out
    assert "ratio lace/bare" in out and "bare sqlite3 loop" in out


def test_shared_board_tiny(postgres_server: PostgresServer,
                           capsys: pytest.CaptureFixture[str]) -> None:
    result = shared_board.main(["--tiny"], server=postgres_server)
    assert list(result.tool_call_us) == [shared_board.SQLITE, shared_board.POSTGRES,
                                         shared_board.ASYNC_COMMIT]
    assert all(len(values) == 5 and all(positive(value) for value in values)
               for values in result.tool_call_us.values())
    assert all(positive(result.tool_call_ratio(fraction, name))
               for name in result.tool_call_us for fraction in (0.50, 0.95))
    baseline, shared, asynchronous = result.fanout
    assert (baseline.database, baseline.workers, baseline.holders) == (shared_board.SQLITE, 0, 1)
    assert (shared.database, shared.workers) == (shared_board.POSTGRES, 1)
    assert (asynchronous.database, asynchronous.workers) == (shared_board.ASYNC_COMMIT, 1)
    assert 1 <= shared.holders <= 2 and 1 <= asynchronous.holders <= 2  # the run, its worker
    assert baseline.server_cpu_s == 0
    assert positive(shared.server_cpu_s) and positive(asynchronous.server_cpu_s)
    assert all(positive(ratio) for run in result.fanout for ratio in result.fanout_ratios(run))
    assert result.fanout_ratios(baseline) == (1.0, 1.0, 1.0)
    out = capsys.readouterr().out
    assert "PostgreSQL on 127.0.0.1:" in out and "p50 ratio" in out and "fan-out ratio" in out
    assert out.strip().splitlines()[-3].split()[:2] == ["PostgreSQL", "1"]
    assert out.strip().splitlines()[-2].split()[:4] == ["PostgreSQL,", "async", "commit", "1"]


def test_async_commit_is_the_databases_own_setting(postgres_server: PostgresServer) -> None:
    with postgres_server.fresh_database() as url:
        name = url.rsplit("/", 1)[1]
        settings = ("SELECT setconfig FROM pg_db_role_setting JOIN pg_database "
                    "ON pg_database.oid = setdatabase WHERE datname = ?")
        assert query(url, settings, name) == []
        shared_board.commit_asynchronously(postgres_server, url)
        assert query(url, settings, name) == [(["synchronous_commit=off"],)]


def test_memory_tiny(capsys: pytest.CaptureFixture[str]) -> None:
    baseline, running, idle, more = memory.main(["--tiny"])
    assert all(shot.rss > 0 and shot.peak_rss > 0 for shot in (baseline, running, idle, more))
    assert max(idle.tasks, more.tasks) <= baseline.tasks + 1  # idle agents hold no coroutine
    assert running.tasks >= idle.tasks + 3  # each held agent has its turn's task
    assert set(memory.per_agent([baseline, running, idle, more], 3)) == {
        "rss per idle agent", "rss per running agent"}
    assert "asyncio tasks" in capsys.readouterr().out


def test_helpers() -> None:
    limits, line = raised_limits(500)
    assert (limits.max_running, limits.max_children, limits.spawns_per_minute) == (501, 500, 500)
    assert "max_children=500 (default 20)" in line
    assert percentile([3.0, 1.0, 2.0, 4.0], 0.5) == 2.0
    assert percentile([3.0, 1.0, 2.0, 4.0], 0.99) == 4.0
    assert table(["name", "n"], [["a", 1], ["bb", 22]]).splitlines() == [
        "name   n", "----  --", "a      1", "bb    22"]


def test_profile_runtime_tiny(capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks import profile_runtime

    profile_runtime.main(["per_event", "--tiny", "--top", "5"])
    out = capsys.readouterr().out
    assert out.count("lace function") == 2 and "store/" in out


@pytest.mark.slow
def test_peers_tiny(capsys: pytest.CaptureFixture[str]) -> None:
    """lace (`lace run` in a child) and the plain loop against the server; no peer venv."""
    from benchmarks import peers

    runs = peers.main(["--tiny"])
    assert [(run.system, run.tasks) for run in runs] == [("lace", 3), ("plain", 3)]
    by_system = {run.system: run for run in runs}
    assert by_system["plain"].helper_calls == 2 * 3 and by_system["plain"].root_calls == 2
    assert by_system["lace"].helper_calls >= 2 * 3 and by_system["lace"].root_calls >= 2
    for run in runs:
        assert positive(run.ratio) and positive(run.wall_s)
        assert 0 < run.to_first_request_s < run.wall_s and run.last_reply_to_exit_s > 0
        assert run.spawn_gap_median_s <= run.spawn_gap_max_s
        assert run.root_input_tokens > 0 and run.input_tokens > run.root_input_tokens
        assert run.cpu_s > 0
    out = capsys.readouterr().out
    assert "cores, load average" in out and "lace venv: lace" in out
    header = next(line for line in out.splitlines() if line.startswith("K ") and "ratio" in line)
    assert header.split()[:4] == ["K", "system", "ratio", "root"]
    rows = [line.split() for line in out.splitlines() if line.split()[:1] == ["3"]]
    assert [row[1] for row in rows] == ["lace", "plain"] * 3  # calls, gaps, timeline


def test_peers_refuses_a_run_that_missed_a_helper() -> None:
    from benchmarks import peers

    def call(role: str, job: int | None, step: int, at: float, tools: tuple[str, ...] = (),
             results: int = 0) -> peers.Call:
        caller = peers.Caller("plain", role, job, step, 2 if role == "root" else None,
                              results, step == 1)
        return peers.Call(caller, at, at + 0.5, tools, 100 if role == "root" else 10)

    finished = peers.Finished(0.0, 3.0, "", 0.0, 1.0)
    calls = [call("root", None, 0, 0.1, ("run_job", "run_job")),
             call("worker", 1, 0, 0.7, ("note",)), call("worker", 1, 1, 1.3, ("complete",)),
             call("root", None, 1, 2.0, results=2)]
    with pytest.raises(peers.BenchmarkError, match="helpers for jobs"):
        peers.measure("plain", 2, 1, 0.5, calls, finished)
    calls[3:3] = [call("worker", 2, 0, 0.7, ("note",)), call("worker", 2, 1, 1.3, ("complete",))]
    run = peers.measure("plain", 2, 1, 0.5, calls, finished)
    assert (run.root_calls, run.helper_calls) == (2, 4) and positive(run.ratio)
    assert (run.input_tokens, run.root_input_tokens, run.cpu_s) == (240, 200, 1.0)


def test_prompt_cache_tiny(capsys: pytest.CaptureFixture[str]) -> None:
    runs = prompt_cache.main(["--tiny"])
    assert [(run.shape, run.marks) for run in runs] == [
        ("fan-out of 1", False), ("fan-out of 1", True),
        ("3-level tree (2 x 2)", False), ("3-level tree (2 x 2)", True)]
    for run in runs:
        assert run.calls > 0 and run.tokens_in > 0 and positive(run.cost_usd)
        assert (run.cache_read > 0) == run.marks  # the scripted cache reads only marked prefixes
    out = capsys.readouterr().out
    assert "cache marks" in out and out.strip().splitlines()[-1].split()[-1].endswith("%")


def test_tasks_scale_tiny(postgres_server: PostgresServer,
                          capsys: pytest.CaptureFixture[str]) -> None:
    found = tasks_scale.main(["--tiny"], server=postgres_server)
    assert [(row[0], row[1]) for row in found] == [
        (engine, shown) for engine in ("SQLite", "PostgreSQL")
        for shown in ("--limit 50", "--limit 50 --json", "no limit")]
    by_engine = {engine: [row[2] for row in found if row[0] == engine]
                 for engine in ("SQLite", "PostgreSQL")}
    assert by_engine["SQLite"] == by_engine["PostgreSQL"]  # the same board, the same output
    lines = [int(count.replace(",", "")) for count in by_engine["SQLite"]]
    assert lines[0] == 52 and lines[2] > lines[0]  # a heading, a page of 50, "… N more"
    assert all(positive(float(row[3])) and positive(float(row[4])) for row in found)
    assert "lace tasks on 1,000 tasks (300 in the latest session)" in capsys.readouterr().out


def test_shared_board_ratios_are_over_the_same_rounds_sqlite_run_and_medians_span_rounds(
) -> None:
    def run(database: str, workers: int, wall: float, round_: int) -> shared_board.FanoutRun:
        return shared_board.FanoutRun(database, workers, wall, wall / 2, 1.0, 0.0, 1, round_)

    result = shared_board.SharedBoardResult(fanout=[
        run(shared_board.SQLITE, 0, 4.0, 0), run(shared_board.POSTGRES, 3, 6.0, 0),
        run(shared_board.SQLITE, 0, 5.0, 1), run(shared_board.POSTGRES, 3, 6.0, 1),
        run(shared_board.SQLITE, 0, 6.0, 2), run(shared_board.POSTGRES, 3, 9.0, 2)])
    assert [result.fanout_ratios(one)[0] for one in result.fanout] == [
        1.0, 1.5, 1.0, 1.2, 1.0, 1.5]
    assert result.medians() == [
        [shared_board.SQLITE, "0", "3", "5.00", "1.00 (1.00 to 1.00)", "1.00 (1.00 to 1.00)"],
        [shared_board.POSTGRES, "3", "3", "6.00", "1.50 (1.20 to 1.50)", "1.50 (1.20 to 1.50)"]]
    assert "median over rounds" in shared_board.report(result)
