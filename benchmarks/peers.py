"""Fan-out side by side: lace, pydantic-ai, the OpenAI Agents SDK and a plain `AsyncOpenAI` loop,
each in its own process, against one OpenAI-compatible server (its own process) that waits L
per model call and stamps every request with its own clock.

    python -m benchmarks.peers [--tasks 10 40 100] [--runs 3] [--latency-ms 500]
                               [--systems lace pydantic-ai openai-agents plain] [--json FILE]
    python -m benchmarks.peers --tiny     # K=3, L=20 ms, one run, lace and plain only

A root agent hands out K jobs; each helper makes a note call and a completion call; the root
then makes its final request. Ideal: the root's final request starts 2L after its first reply
ends (ratio 1.00). The peers run from a virtual environment of their own (they need `openai`
3.x, which lace's litellm pin excludes), built once and cached.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import fcntl
import hashlib
import json
import multiprocessing
import os
import platform
import re
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from importlib import metadata
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from benchmarks.common import raised_limits, table
from lace.config import DEFAULT_SESSION_TOKENS

SYSTEMS = ("lace", "pydantic-ai", "openai-agents", "plain")
FRAMEWORKS = ("pydantic-ai", "openai-agents")
MODEL_SUFFIX = {"lace": "lace", "pydantic-ai": "pydantic", "openai-agents": "agents",
                "plain": "plain"}
SYSTEM_OF = {suffix: system for system, suffix in MODEL_SUFFIX.items()}
PEER_REQUIREMENTS = ("openai==3.54.0", "pydantic-ai-slim[openai]==2.68.0",
                     "openai-agents==0.24.0")
PEER_SCRIPT = Path(__file__).with_name("peer_systems.py")
API_KEY = "sk-bench-not-a-real-key"
DELEGATE_MAX = 10  # lace's delegate takes at most 10 tasks per call
BACKLOG = 1024  # the server's listen queue: no connection of a burst is dropped
PROCESS_TIMEOUT_S = 900.0
ROOT_PROMPT = "Fan out {tasks} jobs."
FAN_OUT = re.compile(r"Fan out (\d+) jobs")
JOB = re.compile(r"Do part (\d+)\.")
RESULT = re.compile(r"RESULT-(\d+)")
ASSIGNED = re.compile(r"You have been assigned task '([^']+)'")
NOTE_ACKS = ("Noted.", "Added note")  # the peers' note tool, lace's task_add_note
TOKENS_PER_HELPER = 50_000
"""lace's `[budgets] session_tokens` per helper. lace sets each model call's estimated input
plus `reserve_tokens` (about 10,000 tokens here) aside against the session's token cap (by
default 2,000,000 with a real provider) while the call is in flight, and a call that would
pass the cap waits: under the default cap a fan-out holds about 200 calls in flight. A person
fanning out this far must raise the cap anyway (K=1000's 2,000 calls send ~10 M tokens to a
real provider); `--default-budget` keeps it, to see that ceiling."""


class BenchmarkError(AssertionError):
    """A run did not do what the benchmark measures (so its figures would mean nothing)."""


# --- the server's side: who is calling, and what the model answers ---------------------------

def text_of(content: Any) -> str:
    """A message's text, whether a string or a list of parts."""
    if isinstance(content, list):
        return "\n".join(str(part.get("text", "")) if isinstance(part, dict) else str(part)
                         for part in content)
    return "" if content is None else str(content)


@dataclass(frozen=True)
class Caller:
    """Who made a request, read from the model name (`root-lace`, `worker-agents`, ...) and
    the conversation: the system, root or helper, the helper's job number, how many replies
    the agent already had (`step`), and for the root, K and the distinct results it holds."""

    system: str
    role: str  # "root" or "worker"
    job: int | None
    step: int
    tasks: int | None
    results: int
    note_acked: bool


def describe(model: str, messages: list[dict[str, Any]]) -> Caller:
    role, _, suffix = model.removeprefix("openai/").partition("-")
    if role not in ("root", "worker") or suffix not in SYSTEM_OF:
        raise ValueError(f"unexpected model {model!r}")
    users = "\n".join(text_of(m.get("content")) for m in messages if m.get("role") == "user")
    tools = [text_of(m.get("content")) for m in messages if m.get("role") == "tool"]
    step = sum(message.get("role") == "assistant" for message in messages)
    if role == "root":
        found = FAN_OUT.search(users)
        return Caller(SYSTEM_OF[suffix], role, None, step, int(found.group(1)) if found else None,
                      len({number for text in tools for number in RESULT.findall(text)}), False)
    job = JOB.search(users)
    return Caller(SYSTEM_OF[suffix], role, int(job.group(1)) if job else None, step, None, 0,
                  any(ack in text for text in tools for ack in NOTE_ACKS))


def lace_task_id(messages: list[dict[str, Any]]) -> str:
    """The task id in a lace helper's assignment notification."""
    return next(found.group(1) for message in messages
                if (found := ASSIGNED.search(text_of(message.get("content")))))


def script(model: str, messages: list[dict[str, Any]]) -> Any:
    """The model behind the server. A root fans K jobs out in its first reply (lace: K/10
    `delegate` calls; the peers: K `run_job` calls) and otherwise answers plain text; a
    helper notes, then completes with `RESULT-<job>`, then (if called again) answers text."""
    from lace.llm.types import ScriptedReply

    caller = describe(model, messages)
    if caller.role == "root":
        tasks = caller.tasks or 0
        if caller.step > 0:
            text = (f"All {tasks} jobs are done." if caller.results >= tasks else
                    f"{caller.results} of {tasks} results so far.")
            return ScriptedReply(text=text)
        jobs = range(1, tasks + 1)
        if caller.system == "lace":
            specs = [{"title": f"Part {job}", "prompt": f"Do part {job}.",
                      "expected_response": "One line: the result.",
                      "assigned_to": "new:openai/worker-lace"} for job in jobs]
            return ScriptedReply(tool_calls=[("delegate", {"tasks": specs[at:at + DELEGATE_MAX]})
                                             for at in range(0, tasks, DELEGATE_MAX)])
        argument = "input" if caller.system == "openai-agents" else "job"
        return ScriptedReply(tool_calls=[("run_job", {argument: f"Do part {job}."})
                                         for job in jobs])
    job = caller.job
    if caller.step == 0:
        note = f"Working on part {job}."
        if caller.system == "lace":
            return ScriptedReply(tool_calls=[("task_add_note", {
                "task_id": lace_task_id(messages), "note": note})])
        return ScriptedReply(tool_calls=[("note", {"note": note})])
    if caller.step == 1:
        if caller.system == "lace":
            return ScriptedReply(tool_calls=[("task_complete", {
                "task_id": lace_task_id(messages), "message": f"RESULT-{job}"})])
        return ScriptedReply(tool_calls=[("complete", {"result": f"RESULT-{job}"})])
    return ScriptedReply(text="Done.")


@dataclass(frozen=True)
class Call:
    """One model call as the server saw it: who, and when (time.monotonic(), server side)."""

    caller: Caller
    arrived: float
    sent: float
    tools: tuple[str, ...]  # the tool calls of the reply
    input_tokens: int  # of the request's messages and tools (see `input_tokens`)


def input_tokens(body: dict[str, Any]) -> int:
    """The input tokens of a request, estimated the same way for every system: a token per
    four characters of its messages and tool definitions as compact JSON (no tokenizer runs on
    a machine the systems share; counted after the run)."""
    sent = {"messages": body.get("messages"), "tools": body.get("tools")}
    return len(json.dumps(sent, separators=(",", ":"), ensure_ascii=False)) // 4


def serve(latency_s: float, connection: Connection) -> None:
    """The server process: send the base URL, then on each "collect" send the calls since the
    last one (and forget them), until "stop"."""
    from lace.llm.openai_fake import FakeOpenAI

    with FakeOpenAI(script, latency_s, backlog=BACKLOG) as server:
        connection.send(server.base_url)
        while connection.recv() == "collect":
            exchanges, server.exchanges = server.exchanges, []
            server.requests.clear()
            connection.send([
                Call(describe(exchange.body["model"], exchange.body["messages"]),
                     exchange.arrived, exchange.sent,
                     tuple(name for name, _ in exchange.reply.tool_calls),
                     input_tokens(exchange.body))
                for exchange in exchanges
                if exchange.reply is not None and exchange.sent is not None])


@contextmanager
def server_process(latency_s: float) -> Iterator[tuple[str, Connection]]:
    context = multiprocessing.get_context("spawn")
    ours, theirs = context.Pipe()
    process = context.Process(target=serve, args=(latency_s, theirs), daemon=True)
    process.start()
    try:
        if not ours.poll(60):
            raise RuntimeError("the server process did not start")
        yield ours.recv(), ours
    finally:
        with suppress(OSError):
            ours.send("stop")
        process.join(10)
        if process.is_alive():
            process.kill()


# --- the systems' processes -------------------------------------------------------------------

def cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "lace-bench"


def peer_venv() -> tuple[Path, str]:
    """The peers' virtual environment (python -m venv, pip from PyPI), built once per pinned
    requirement list and cached; its Python, and a line saying where it is."""
    key = hashlib.sha256("\n".join(PEER_REQUIREMENTS).encode()).hexdigest()[:12]
    venv = cache_dir() / f"peers-venv-{key}"
    python, done = venv / "bin" / "python", venv / ".lace-bench-complete"
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f"peers-venv-{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two benchmarks at once build it once
        if done.is_file():
            return python, f"peer venv {venv} (cached)"
        began = time.monotonic()
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-qq",
                        "--disable-pip-version-check", *PEER_REQUIREMENTS], check=True)
        done.write_text("\n".join(PEER_REQUIREMENTS) + "\n")
        return python, f"peer venv {venv} (built in {time.monotonic() - began:.0f} s)"


@dataclass(frozen=True)
class Launch:
    argv: list[str]
    env: dict[str, str]
    cwd: Path
    database: Path | None = None  # lace's


def base_env(base_url: str) -> dict[str, str]:
    env = {name: value for name, value in os.environ.items()
           if not name.startswith(("LACE_", "OPENAI_"))}
    env.update(OPENAI_BASE_URL=base_url, OPENAI_API_KEY=API_KEY)
    return env


def lace_command() -> list[str]:
    script_path = Path(sys.executable).with_name("lace")
    return [str(script_path)] if script_path.is_file() else [sys.executable, "-m", "lace"]


def session_tokens(tasks: int) -> int:
    return max(DEFAULT_SESSION_TOKENS, tasks * TOKENS_PER_HELPER)


def lace_launch(tasks: int, base_url: str, folder: Path, *, default_budget: bool = False,
                ) -> Launch:
    """`lace run` with a fresh LACE_HOME and an empty database made beforehand, its limits
    and session token cap raised in a configuration file (never in code), and `--yes`."""
    limits, _ = raised_limits(tasks)
    home = folder / "lace-home"
    home.mkdir()
    config = home / "config.toml"
    budgets = "" if default_budget else \
        f"[budgets]\nsession_tokens = {session_tokens(tasks)}\n"
    config.write_text("[limits]\n" + "".join(
        f"{key} = {getattr(limits, key)}\n"
        for key in ("max_running", "max_children", "spawns_per_minute")) + budgets)
    env = base_env(base_url)
    env.update(LACE_HOME=str(home), LACE_CONFIG=str(config))
    database = home / "lace.db"
    # the database exists, as it does after a person's first run (creating and migrating a
    # new one costs about 0.4 s more, once)
    subprocess.run([*lace_command(), "db", "upgrade", "--db", str(database)], env=env,
                   check=True, capture_output=True)
    return Launch([*lace_command(), "run", "--db", str(database), "--model",
                   "openai/root-lace", "--yes", "--timeout", f"{PROCESS_TIMEOUT_S:g}",
                   ROOT_PROMPT.format(tasks=tasks)], env, folder, database)


def peer_launch(system: str, tasks: int, base_url: str, folder: Path, python: Path) -> Launch:
    return Launch([str(python), str(PEER_SCRIPT), system, "--tasks", str(tasks),
                   "--base-url", base_url], base_env(base_url), folder)


@dataclass(frozen=True)
class Finished:
    began: float  # time.monotonic() just before Popen
    ended: float  # just after the process was reaped
    stdout: str
    peak_rss_mb: float  # the process's own peak resident memory (its children's not counted)
    cpu_s: float  # the process's own user + system CPU time (load does not inflate it)


def run_process(launch: Launch) -> Finished:
    out, err = launch.cwd / "stdout.txt", launch.cwd / "stderr.txt"
    with open(out, "wb") as stdout, open(err, "wb") as stderr:
        began = time.monotonic()
        process = subprocess.Popen(launch.argv, cwd=launch.cwd, env=launch.env,
                                   stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr)
        timed_out = threading.Event()

        def kill() -> None:
            timed_out.set()
            process.kill()

        late = threading.Timer(PROCESS_TIMEOUT_S + 60, kill)
        late.start()
        try:  # wait4, not wait: the process's own resource usage comes with it
            _, status, usage = os.wait4(process.pid, 0)
        finally:
            late.cancel()
        ended = time.monotonic()
        process.returncode = code = os.waitstatus_to_exitcode(status)
    if timed_out.is_set():
        raise BenchmarkError(f"{launch.argv[:3]} did not finish in time")
    if code != 0:
        tail = err.read_text(errors="replace")[-2000:]
        raise BenchmarkError(f"{launch.argv[:3]} exited {code}:\n{tail}")
    return Finished(began, ended, out.read_text(errors="replace"), usage.ru_maxrss / 1024,
                    usage.ru_utime + usage.ru_stime)


# --- measuring and checking one run -----------------------------------------------------------

@dataclass(frozen=True)
class Run:
    """One measured fan-out. Times in seconds; `*_at` are from Popen, on the shared clock."""

    system: str
    tasks: int
    run: int
    latency_s: float
    ratio: float
    root_calls: int
    helper_calls: int
    input_tokens: int  # every call's, estimated (`input_tokens`)
    root_input_tokens: int
    wall_s: float
    to_first_request_s: float
    last_reply_to_exit_s: float
    spawn_gap_median_s: float
    spawn_gap_max_s: float
    step_gap_median_s: float
    step_gap_max_s: float
    root_gap_s: float
    first_request_at: float
    root_reply_at: float
    last_helper_start_at: float
    last_result_at: float
    final_request_at: float
    last_reply_at: float
    helpers_in_flight_max: int
    peak_rss_mb: float
    cpu_s: float


def in_flight_max(calls: Sequence[Call]) -> int:
    """The most calls the server held at once (from arrival to the end of the reply)."""
    edges = sorted([(call.arrived, 1) for call in calls] + [(call.sent, -1) for call in calls])
    most = now = 0
    for _, change in edges:
        now += change
        most = max(most, now)
    return most


def check_output(system: str, tasks: int, launch: Launch, finished: Finished) -> None:
    """The process's own account: lace's answer and board, or the peer's JSON line."""
    answer = f"All {tasks} jobs are done."
    if system == "lace":
        if answer not in finished.stdout:
            raise BenchmarkError(f"lace answered {finished.stdout[-300:]!r}")
        assert launch.database is not None
        with sqlite3.connect(f"file:{launch.database}?mode=ro", uri=True) as connection:
            statuses = dict(connection.execute(
                "SELECT status, COUNT(*) FROM tasks GROUP BY status"))
            notes = connection.execute("SELECT COUNT(*) FROM task_notes WHERE content LIKE "
                                       "'Working on part %'").fetchone()[0]
        connection.close()
        if statuses != {"completed": tasks} or notes != tasks:
            raise BenchmarkError(f"lace's board: tasks {statuses}, {notes} notes; expected "
                                 f"{tasks} completed tasks with a note each")
        return
    lines = finished.stdout.strip().splitlines()
    report = json.loads(lines[-1]) if lines else {}
    if (report.get("output"), report.get("notes"), report.get("completions")) != (
            answer, tasks, tasks):
        raise BenchmarkError(f"{system} reported {report}")


def measure(system: str, tasks: int, number: int, latency_s: float, calls: list[Call],
            finished: Finished) -> Run:
    """The run's figures from the server's stamps; raise BenchmarkError unless every helper
    noted and completed and the root's final request held every result."""
    mine = sorted((call for call in calls if call.caller.system == system),
                  key=lambda call: call.arrived)
    if len(mine) != len(calls):
        raise BenchmarkError(f"calls from another system during {system}'s run")
    roots = [call for call in mine if call.caller.role == "root"]
    helpers = [call for call in mine if call.caller.role == "worker"]
    first = next((call for call in roots if call.caller.step == 0), None)
    final = next((call for call in roots if call.caller.results >= tasks and call.caller.step),
                 None)
    if first is None or final is None:
        raise BenchmarkError(f"{system}: the root's final request never held all {tasks} "
                             "results")
    by_job: dict[int | None, list[Call]] = {}
    for call in helpers:
        by_job.setdefault(call.caller.job, []).append(call)
    if set(by_job) != set(range(1, tasks + 1)):
        raise BenchmarkError(f"{system}: helpers for jobs {sorted(map(str, by_job))}, "
                             f"expected 1..{tasks}")
    starts, step_gaps, results = [], [], []
    for job, own in by_job.items():
        note = next((call for call in own if call.caller.step == 0), None)
        done = next((call for call in own if call.caller.step == 1), None)
        if note is None or done is None or not note.tools or not done.tools \
                or not done.caller.note_acked:
            raise BenchmarkError(f"{system}: helper {job} did not note then complete")
        starts.append(note.arrived)
        step_gaps.append(done.arrived - note.sent)
        results.append(done.sent)
    spawn_gaps = [start - first.sent for start in starts]
    began = finished.began
    last_reply = max(call.sent for call in mine)
    return Run(
        system=system, tasks=tasks, run=number, latency_s=latency_s,
        ratio=(final.arrived - first.sent) / (2 * latency_s),
        root_calls=len(roots), helper_calls=len(helpers),
        input_tokens=sum(call.input_tokens for call in mine),
        root_input_tokens=sum(call.input_tokens for call in roots),
        wall_s=finished.ended - began, to_first_request_s=mine[0].arrived - began,
        last_reply_to_exit_s=finished.ended - last_reply,
        spawn_gap_median_s=statistics.median(spawn_gaps), spawn_gap_max_s=max(spawn_gaps),
        step_gap_median_s=statistics.median(step_gaps), step_gap_max_s=max(step_gaps),
        root_gap_s=final.arrived - max(results),
        first_request_at=mine[0].arrived - began, root_reply_at=first.sent - began,
        last_helper_start_at=max(starts) - began, last_result_at=max(results) - began,
        final_request_at=final.arrived - began, last_reply_at=last_reply - began,
        helpers_in_flight_max=in_flight_max(helpers), peak_rss_mb=finished.peak_rss_mb,
        cpu_s=finished.cpu_s)


def run_system(system: str, tasks: int, number: int, latency_s: float, base_url: str,
               server: Connection, pythons: dict[str, Path], *,
               default_budget: bool = False) -> Run:
    with tempfile.TemporaryDirectory(prefix=f"lace-peers-{system}-") as name:
        folder = Path(name)
        launch = (lace_launch(tasks, base_url, folder, default_budget=default_budget)
                  if system == "lace" else
                  peer_launch(system, tasks, base_url, folder, pythons[system]))
        server.send("collect")  # forget anything earlier
        server.recv()
        finished = run_process(launch)
        check_output(system, tasks, launch, finished)
        server.send("collect")
        calls: list[Call] = server.recv()
    return measure(system, tasks, number, latency_s, calls, finished)


# --- the report -------------------------------------------------------------------------------

def medians(runs: Sequence[Run]) -> list[tuple[int, str, dict[str, float]]]:
    """Per (K, system) in order of appearance: the median of each figure over its runs."""
    keys = list(dict.fromkeys((run.tasks, run.system) for run in runs))
    figures = [field.name for field in dataclasses.fields(Run)
               if field.name not in ("system", "tasks", "run")]
    return [(tasks, system, {name: statistics.median(
                float(getattr(run, name)) for run in runs
                if (run.tasks, run.system) == (tasks, system)) for name in figures})
            for tasks, system in sorted(keys, key=lambda key: (key[0], SYSTEMS.index(key[1])))]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f}"


def report(runs: Sequence[Run]) -> str:
    rows = medians(runs)
    calls = table(
        ["K", "system", "ratio", "root calls", "helper calls", "input ktok", "root input ktok",
         "in flight max", "wall s", "start->1st req s", "last reply->exit s", "peak RSS MB",
         "CPU s"],
        [[tasks, system, f"{m['ratio']:.2f}", f"{m['root_calls']:g}",
          f"{m['helper_calls']:g}", f"{m['input_tokens'] / 1000:.0f}",
          f"{m['root_input_tokens'] / 1000:.1f}", f"{m['helpers_in_flight_max']:g}",
          f"{m['wall_s']:.2f}",
          f"{m['to_first_request_s']:.2f}", f"{m['last_reply_to_exit_s']:.2f}",
          f"{m['peak_rss_mb']:.0f}", f"{m['cpu_s']:.1f}"] for tasks, system, m in rows])
    gaps = table(
        ["K", "system", "spawn med ms", "spawn max ms", "step med ms", "step max ms",
         "root gap ms"],
        [[tasks, system, ms(m["spawn_gap_median_s"]), ms(m["spawn_gap_max_s"]),
          ms(m["step_gap_median_s"]), ms(m["step_gap_max_s"]), ms(m["root_gap_s"])]
         for tasks, system, m in rows])
    timeline = table(
        ["K", "system", "1st req", "root reply", "last helper start", "last result",
         "root final req", "last reply", "exit"],
        [[tasks, system, *(f"{m[name]:.2f}" for name in (
            "first_request_at", "root_reply_at", "last_helper_start_at", "last_result_at",
            "final_request_at", "last_reply_at", "wall_s"))] for tasks, system, m in rows])
    return (f"Medians over runs.\n{calls}\n\nGaps on the server's clock (medians over runs):\n"
            f"{gaps}\n\nTimeline, seconds from Popen (medians over runs):\n{timeline}")


def machine() -> dict[str, Any]:
    load = os.getloadavg()
    return {"cores": os.cpu_count(), "load_average": [round(value, 2) for value in load],
            "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "platform": platform.platform(), "python": platform.python_version()}


def lace_versions() -> dict[str, str | None]:
    found: dict[str, str | None] = {}
    for package in ("lace", "litellm", "openai"):
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = None
    return found


def peer_versions(python: Path) -> dict[str, Any]:
    done = subprocess.run([str(python), str(PEER_SCRIPT), "--versions"], capture_output=True,
                          text=True, check=True)
    versions: dict[str, Any] = json.loads(done.stdout)
    return versions


def main(argv: Sequence[str] | None = None) -> list[Run]:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.peers", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, nargs="+", default=[10, 40, 100], metavar="K")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--latency-ms", type=float, default=500.0)
    parser.add_argument("--systems", nargs="+", choices=SYSTEMS, default=list(SYSTEMS))
    parser.add_argument("--tiny", action="store_true",
                        help="K=3, L=20 ms, one run, lace and plain only, no peer venv")
    parser.add_argument("--no-warm-up", dest="warm_up", action="store_false",
                        help="skip the unrecorded K=2 run of each system before measuring")
    parser.add_argument("--plain-here", action="store_true",
                        help="run plain with this Python (lace's venv: the openai SDK lace "
                             "itself uses), so no peer venv is built")
    parser.add_argument("--default-budget", action="store_true",
                        help="run lace under its default session token cap (see "
                             "TOKENS_PER_HELPER), not one raised for the fan-out")
    parser.add_argument("--json", metavar="FILE", help="save the settings and every run")
    args = parser.parse_args(argv)
    if args.tiny:
        sizes, runs, latency_ms, systems, warm_up = [3], 1, 20.0, ["lace", "plain"], False
    else:
        sizes, runs, latency_ms = args.tasks, args.runs, args.latency_ms
        systems, warm_up = list(dict.fromkeys(args.systems)), args.warm_up
    if min(sizes) < 1 or runs < 1 or latency_ms <= 0:
        parser.error("--tasks, --runs and --latency-ms must be positive")
    latency_s = latency_ms / 1000
    about = machine()
    versions: dict[str, Any] = {"lace venv": lace_versions()}
    pythons: dict[str, Path] = {"plain": Path(sys.executable)}
    print(f"machine: {about['cores']} cores, load average {about['load_average']} at start, "
          f"{about['date']}, {about['platform']}")
    if any(system in FRAMEWORKS for system in systems) or (
            "plain" in systems and not (args.tiny or args.plain_here)):
        python, where = peer_venv()
        print(where)
        pythons = {system: python for system in ("pydantic-ai", "openai-agents", "plain")}
        versions["peer venv"] = peer_versions(python)
    for place, found in versions.items():
        print(f"{place}: " + ", ".join(f"{name} {version}" for name, version in found.items()))
    print(f"plain runs with {pythons['plain']}")
    for tasks in sizes:
        budget = (f"the default session token cap ({DEFAULT_SESSION_TOKENS:,})"
                  if args.default_budget else f"session_tokens={session_tokens(tasks):,}")
        print(f"{raised_limits(tasks)[1]}; {budget} (lace, in $LACE_HOME/config.toml)")
    print(f"L = {latency_ms:g} ms per call; K = {' '.join(map(str, sizes))}; {runs} run(s), "
          f"interleaved; systems: {' '.join(systems)}; the server runs in its own process; "
          "nothing streams; ideal ratio 1.00 (the root's final request 2L after its first "
          "reply)")
    results: list[Run] = []
    with server_process(latency_s) as (base_url, server):
        if warm_up:  # disk caches and first-run costs, paid once for every system
            for system in systems:
                run_system(system, 2, 0, latency_s, base_url, server, pythons,
                           default_budget=args.default_budget)
        try:
            for number in range(1, runs + 1):
                for tasks in sizes:
                    for system in systems:
                        run = run_system(system, tasks, number, latency_s, base_url, server,
                                         pythons, default_budget=args.default_budget)
                        print(f"  run {number} K={tasks} {system}: ratio {run.ratio:.2f}, "
                              f"wall {run.wall_s:.2f} s", flush=True)
                        results.append(run)
        except BenchmarkError:
            if results:
                print(f"Stopped by a failed run; the {len(results)} runs before it:\n"
                      f"{report(results)}", flush=True)
            raise
    about["load_average_at_end"] = [round(value, 2) for value in os.getloadavg()]
    print(f"load average at end {about['load_average_at_end']}")
    print(report(results))
    if args.json:
        Path(args.json).write_text(json.dumps({
            "machine": about, "versions": versions, "latency_ms": latency_ms, "tasks": sizes,
            "runs": runs, "systems": systems, "default_budget": args.default_budget,
            "results": [dataclasses.asdict(run) for run in results]}, indent=2) + "\n")
    return results


if __name__ == "__main__":
    main()
