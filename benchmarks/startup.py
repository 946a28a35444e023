"""Start-up: wall time of `python -c pass`, `lace --help`, and the app's first frame.

Each case is a fresh process (median of `--runs`). The first frame is timed from just before the
process starts to Textual's `Ready` event (the DOM is mounted and the first frame drawn), in a
headless app built by `lace.tui.factory.create_app`; the child also reports whether litellm was
in `sys.modules` by then. Run from the repo root: `python -m benchmarks.startup`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.common import table

HELP_TARGET_S = 0.3
FRAME_TARGET_S = 1.0

# Runs in the child: stamps after the imports, after create_app, and at the first frame.
FIRST_FRAME = """
import json, os, sys, time
from lace.tui.factory import create_app
imported = time.time()
client = None
if sys.argv[2] == "no-warm-up":
    from lace.llm.client import LiteLLMClient
    class NoWarmUp:
        complete = LiteLLMClient.complete
    client = NoWarmUp()
app = create_app(db=sys.argv[1], client=client)
created = time.time()
class FirstFrame(type(app)):
    def on_ready(self) -> None:
        print(json.dumps({"imported": imported, "created": created, "ready": time.time(),
                          "litellm": "litellm" in sys.modules}), flush=True)
        os._exit(0)
app.__class__ = FirstFrame
app.run(headless=True, size=(160, 45))
"""


@dataclass(frozen=True)
class Case:
    """One way to start a process, and its target in seconds (None: no target)."""

    name: str
    argv: list[str]
    target: float | None = None
    fresh_db: bool = False


@dataclass
class Result:
    """Wall times of the runs of one case, and what the first-frame child reported."""

    case: Case
    walls: list[float]
    litellm: list[bool]
    phases: list[tuple[float, float, float]]


def child_env(home: Path) -> dict[str, str]:
    """The environment without any LACE_ setting, with LACE_HOME in the temp dir."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("LACE_")}
    env["LACE_HOME"] = str(home)
    return env


def run_once(case: Case, db: Path, folder: Path) -> tuple[float, dict[str, object] | None]:
    """Start the process once; its wall time, and the first-frame report if it made one."""
    if case.fresh_db:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)
    argv = [part.replace("{db}", str(db)) for part in case.argv]
    started = time.time()
    done = subprocess.run(argv, capture_output=True, text=True, cwd=folder,
                          env=child_env(folder / "home"), timeout=120, check=False)
    wall = time.time() - started
    if done.returncode != 0:
        raise SystemExit(f"{case.name} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    if not done.stdout.startswith("{"):
        return wall, None
    report: dict[str, object] = json.loads(done.stdout)
    report["started"] = started
    return wall, report


def measure(case: Case, runs: int, folder: Path) -> Result:
    """One warm-up run (fills the OS file cache and .pyc files), then `runs` timed runs."""
    db = folder / "lace.db"
    result = Result(case, [], [], [])
    for number in range(runs + 1):
        wall, report = run_once(case, db, folder)
        if number == 0:
            continue
        if report is None:
            result.walls.append(wall)
            continue
        started, imported, created, ready = (float(report[key])  # type: ignore[arg-type]
                                             for key in ("started", "imported", "created",
                                                         "ready"))
        result.walls.append(ready - started)
        result.litellm.append(bool(report["litellm"]))
        result.phases.append((imported - started, created - imported, ready - created))
    return result


def cases() -> list[Case]:
    """The processes timed: a bare interpreter, the help, and the app's first frame."""
    python = sys.executable
    script = Path(python).with_name("lace")
    frame = [python, "-c", FIRST_FRAME, "{db}"]
    listed = [Case("python -c pass", [python, "-c", "pass"]),
              Case("python -m lace --help", [python, "-m", "lace", "--help"], HELP_TARGET_S)]
    if script.exists():
        listed.append(Case("lace --help (script)", [str(script), "--help"], HELP_TARGET_S))
    return [
        *listed,
        Case("first frame, existing db", [*frame, "warm-up"], FRAME_TARGET_S),
        Case("first frame, new db", [*frame, "warm-up"], FRAME_TARGET_S, fresh_db=True),
        Case("first frame, no litellm warm-up", [*frame, "no-warm-up"], FRAME_TARGET_S),
    ]


def row(result: Result) -> tuple[object, ...]:
    """One table line: median, min, max, target, the child's phases and litellm."""
    median = statistics.median(result.walls)
    target = result.case.target
    verdict = "" if target is None else "ok" if median < target else "SLOW"
    phases = ["", "", ""]
    if result.phases:
        phases = [f"{statistics.median(phase[i] for phase in result.phases):.3f}"
                  for i in range(3)]
    litellm = "" if not result.litellm else "yes" if any(result.litellm) else "no"
    return (result.case.name, f"{median:.3f}", f"{min(result.walls):.3f}",
            f"{max(result.walls):.3f}", "" if target is None else f"< {target:g}", verdict,
            *phases, litellm)


def main(argv: list[str] | None = None) -> int:
    """Time every case and print the table."""
    parser = argparse.ArgumentParser(description="Start-up wall times of lace.")
    parser.add_argument("--runs", type=int, default=7, help="timed runs per case (median)")
    parser.add_argument("--tiny", action="store_true",
                        help="1 run per case after the warm-up (the test)")
    args = parser.parse_args(argv)
    runs = 1 if args.tiny else args.runs
    with tempfile.TemporaryDirectory(prefix="lace-startup-") as name:
        folder = Path(name)
        results = [measure(case, runs, folder) for case in cases()]
    print(f"Start-up, seconds, median of {runs} runs after one warm-up run "
          f"({sys.executable}; headless app, 160x45)\n")
    print(table(("case", "median s", "min s", "max s", "target", "", "imports s",
                 "create_app s", "to frame s", "litellm at frame"),
                [row(result) for result in results]))
    print("\nimports: process start to `lace.tui.factory` imported; create_app: opening (and "
          "for a new db, migrating) the database and building the app; to frame: app.run to "
          "Textual's Ready event. 'litellm at frame' is yes if any run had it in sys.modules.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
