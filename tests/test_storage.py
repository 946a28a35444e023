"""Storage errors on real small file systems (a tmpfs): a read-only folder and a full disk are
named as such, exit with their own code (4), and the agents a full disk cut off resume."""

from __future__ import annotations

import contextlib
import errno
import os
import re
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import query, run_cli
from tests.lace_forks import lace_popen, run_lace
from tests.processes import lace_env

CaptureFixture = pytest.CaptureFixture[str]


@contextlib.contextmanager
def small_disk(where: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` mounted at `where` (root only: skipped otherwise)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    where.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs",
                              str(where)], capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=True)


@contextlib.contextmanager
def read_only_view(folder: Path, where: Path) -> Iterator[Path]:
    """`folder` seen through a read-only bind mount at `where`."""
    where.mkdir()
    subprocess.run(["mount", "--bind", str(folder), str(where)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(where)], check=True)
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=True)


def fill(disk: Path) -> Path:
    """Write a file until the disk has no byte left."""
    filler = disk / "filler"
    descriptor = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        for chunk in (65536, 1):
            with contextlib.suppress(OSError):
                while os.write(descriptor, b"\0" * chunk):
                    pass
        with pytest.raises(OSError) as full:
            os.write(descriptor, b"\0")
        assert full.value.errno == errno.ENOSPC
    finally:
        os.close(descriptor)
    return filler


def test_a_read_only_folder_is_named_not_called_a_foreign_file(capsys: CaptureFixture,
                                                               tmp_path: Path) -> None:
    with small_disk(tmp_path / "disk", "4M") as writable, \
            read_only_view(writable, tmp_path / "read-only") as disk:
        code, _, err = run_cli(capsys, "task", "add", "first", "--db", str(writable / "lace.db"))
        assert code == 0, err
        db = disk / "lace.db"
        code, out, err = run_cli(capsys, "task", "add", "second", "--db", str(db))
        assert (code, out) == (4, "") and err.count("\n") == 1, err
        assert err.startswith(f"lace: storage error: cannot use {db}: "), err
        assert "read-only" in err and "not a lace database" not in err
        code, out, err = run_cli(capsys, "task", "add", "third", "--db", str(disk / "new.db"))
        assert (code, out) == (4, "") and err.count("\n") == 1, err
        assert err.startswith(f"lace: storage error: cannot use {disk / 'new.db'}: it is on a "
                              "read-only file system"), err


@pytest.mark.slow
def test_a_full_disk_exits_with_its_own_code_and_continue_resumes(tmp_path: Path) -> None:
    """`lace run` waits on an approval; the disk fills (a reader holds its snapshot, so the WAL
    cannot be reused and the next commit needs new space); the approval times out and its
    write fails: exit 4, one line naming the full disk, no agent marked `error`. With space
    freed, `lace run --continue` resumes the cut-off agents and they complete their tasks."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with small_disk(tmp_path / "disk", "8M") as disk:
        env = lace_env(disk / "home", LACE_LIMITS__APPROVAL_TIMEOUT_S="3")
        lace = [sys.executable, "-m", "lace"]
        db = disk / "home" / "lace.db"
        run = lace_popen([*lace, "run", "--workspace", str(workspace), "Write a file"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=env)
        assert run.stderr is not None
        lines: list[str] = []
        deadline = time.monotonic() + 60
        while not any(line.startswith("? approval #") for line in lines):
            assert time.monotonic() < deadline and run.poll() is None, lines
            lines.append(run.stderr.readline())
        root = re.search(r"Session (\S+)", "".join(lines))[1]  # type: ignore[index]
        reader = sqlite3.connect(db)
        reader.execute("BEGIN")
        reader.execute("SELECT COUNT(*) FROM threads").fetchone()
        filler = fill(disk)
        _, rest = run.communicate(timeout=60)
        reader.close()
        errors = "".join(lines) + rest
        assert run.returncode == 4, errors
        assert "Traceback" not in errors, errors
        assert errors.splitlines()[-1] == (
            f"lace: storage error: cannot use {db}: the disk is full (database or disk is full); "
            "free space or fix the disk, then run the command again (lace run --continue "
            "resumes the agents it cut off)"), errors
        statuses = query(db, "SELECT thread_id, status FROM agent_metadata ORDER BY thread_id")
        assert statuses and "error" not in {status for _, status in statuses}, statuses
        filler.unlink()
        resumed = run_lace(["run", "--continue", root, "--read-only"], env=env)
        assert resumed.returncode == 0, resumed.stderr
        waiting = sorted(thread for thread, status in statuses if status == "waiting")
        assert f"Resuming {len(waiting)} interrupted agent(s): {', '.join(waiting)}" in \
            resumed.stderr, resumed.stderr
        assert query(db, "SELECT DISTINCT status FROM agent_metadata") == [("idle",)]
        assert query(db, "SELECT DISTINCT status FROM tasks") == [("completed",)]
