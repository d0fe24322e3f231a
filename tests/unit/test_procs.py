"""pvfs.procs: the one pidfile / liveness / stop helper of daemons, pvfs-admin and benchmarks."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from pvfs.procs import (
    PidfileBusy,
    claim_pidfile,
    pid_alive,
    read_pidfile,
    release_pidfile,
    terminate,
)


def _wait_exited(proc: subprocess.Popen) -> None:
    """Wait until ``proc`` has exited without reaping it (it stays a zombie)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with open(f"/proc/{proc.pid}/stat", "rb") as fh:
            if fh.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                return
        time.sleep(0.01)
    raise AssertionError("child did not exit")


def test_pid_alive_self_and_missing() -> None:
    assert pid_alive(os.getpid())
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    assert not pid_alive(proc.pid)


def test_zombie_counts_as_gone() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        _wait_exited(proc)
        os.kill(proc.pid, 0)  # a zombie still answers signal 0 ...
        assert not pid_alive(proc.pid)  # ... but is not alive
    finally:
        proc.wait()


def test_read_pidfile(tmp_path) -> None:
    path = tmp_path / "x.pid"
    assert read_pidfile(path) is None  # no file
    path.write_text("garbage\n")
    assert read_pidfile(path) is None
    path.write_text("0\n")
    assert read_pidfile(path) is None
    path.write_text(f"{os.getpid()}\n")
    assert read_pidfile(path) == os.getpid()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    path.write_text(f"{dead.pid}\n")
    assert read_pidfile(path) is None


def test_claim_release(tmp_path) -> None:
    path = str(tmp_path / "run" / "d.pid")
    claim_pidfile(path)  # creates the directory too
    assert read_pidfile(path) == os.getpid()
    claim_pidfile(path)  # our own claim again is fine
    release_pidfile(path)
    assert not os.path.exists(path)
    release_pidfile(path)  # already gone: nothing to do
    release_pidfile(None)


def test_claim_refuses_a_live_holder_and_release_keeps_it(tmp_path) -> None:
    path = str(tmp_path / "d.pid")
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        with open(path, "w") as fh:
            fh.write(f"{other.pid}\n")
        with pytest.raises(PidfileBusy, match=f"pid {other.pid}") as info:
            claim_pidfile(path)
        assert info.value.pid == other.pid
        release_pidfile(path)  # not ours: stays
        assert read_pidfile(path) == other.pid
    finally:
        other.kill()
        other.wait()


def test_terminate_term_then_kill() -> None:
    polite = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    ignore_term = ("import signal, time\n"
                   "signal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('ready', flush=True)\n"
                   "time.sleep(30)")
    stubborn = subprocess.Popen([sys.executable, "-c", ignore_term], stdout=subprocess.PIPE)
    assert stubborn.stdout is not None and stubborn.stdout.readline() == b"ready\n"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    try:
        got = terminate([polite.pid, stubborn.pid, dead.pid, 1, 0], timeout=0.5)
        assert got == [polite.pid, stubborn.pid]  # the dead one and pid <= 1 never signalled
        assert not pid_alive(polite.pid) and not pid_alive(stubborn.pid)
        assert polite.wait(5) is not None and stubborn.wait(5) is not None
    finally:
        for p in (polite, stubborn):
            if p.poll() is None:
                p.kill()
                p.wait()
