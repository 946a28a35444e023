"""Each process of a run in a CPU cgroup of its own, limited to a share of a core: how lace's
workers run in containers with a CPU limit (Kubernetes' `resources.limits.cpu`, Docker's
`--cpus`), each with its own CPU, on a machine that has fewer cores than the processes.

Linux only, as root, with the cgroup v1 `cpu` controller (/sys/fs/cgroup/cpu) or cgroup v2
(/sys/fs/cgroup with `cpu` in cgroup.controllers). The run's process joins its group before it
executes lace (`join_first`); every process it starts is moved to a group of its own within
milliseconds (`PerProcessLimits.watch` reads /proc/PID/task/TID/children)."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

V1, V2 = Path("/sys/fs/cgroup/cpu"), Path("/sys/fs/cgroup")
PERIOD_US = 100_000
WATCH_S = 0.002


class CpuLimitsUnavailable(RuntimeError):
    pass


def _base() -> tuple[Path, bool]:
    """The folder to make groups in, and whether it is cgroup v2."""
    if (V1 / "cpu.cfs_quota_us").is_file():
        return V1, False
    controllers = V2 / "cgroup.controllers"
    if controllers.is_file() and "cpu" in controllers.read_text().split():
        return V2, True
    raise CpuLimitsUnavailable("--cpu-per-process needs Linux cgroups with the cpu controller "
                               "(v1 at /sys/fs/cgroup/cpu, or v2), as root")


class PerProcessLimits:
    """Groups named lace-bench-N, each limited to `cores` of a core; `join_first` for the
    process started first, `watch(pid)` to give each process it starts a group of its own."""

    def __init__(self, cores: float) -> None:
        self.base, self.v2 = _base()
        self.cores = cores
        self.groups: list[Path] = []
        self.placed: set[int] = set()
        self._stop = threading.Event()

    def _group(self) -> Path:
        group = self.base / f"lace-bench-{os.getpid()}-{len(self.groups)}"
        group.mkdir(exist_ok=True)
        quota = int(self.cores * PERIOD_US)
        if self.v2:
            (group / "cpu.max").write_text(f"{quota} {PERIOD_US}")
        else:
            (group / "cpu.cfs_period_us").write_text(str(PERIOD_US))
            (group / "cpu.cfs_quota_us").write_text(str(quota))
        self.groups.append(group)
        return group

    def _procs(self, group: Path) -> Path:
        return group / ("cgroup.procs" if self.v2 else "tasks")

    def join_first(self) -> Path:
        """The file the first process writes its pid into before it runs lace (a
        `preexec_fn`): its group."""
        return self._procs(self._group())

    def watch(self, pid: int) -> threading.Thread:
        """Move each process `pid` starts (and those start) to a group of its own, until
        `close`."""
        self.placed.add(pid)

        def place() -> None:
            while not self._stop.is_set():
                for child in _children_of(sorted(self.placed)):
                    if child not in self.placed:
                        self.placed.add(child)
                        with contextlib.suppress(OSError):  # it ended meanwhile
                            self._procs(self._group()).write_text(str(child))
                time.sleep(WATCH_S)

        thread = threading.Thread(target=place, name="cpu-limits", daemon=True)
        thread.start()
        return thread

    def close(self) -> None:
        self._stop.set()
        for group in self.groups:
            for _ in range(100):  # a process moved out of it may still be leaving
                try:
                    group.rmdir()
                    break
                except OSError:
                    time.sleep(0.01)


def _children_of(pids: list[int]) -> Iterator[int]:
    for pid in pids:
        try:
            threads = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for thread in threads:
            try:
                text = Path(f"/proc/{pid}/task/{thread}/children").read_text()
            except OSError:
                continue
            yield from (int(child) for child in text.split())


@contextmanager
def per_process_limits(cores: float | None) -> Iterator[PerProcessLimits | None]:
    """`PerProcessLimits(cores)` for the block, removed after; None without `cores`."""
    if cores is None:
        yield None
        return
    limits = PerProcessLimits(cores)
    try:
        yield limits
    finally:
        limits.close()
