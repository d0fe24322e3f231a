"""Processes named by pid and pidfile: whether one runs, claiming a pidfile, stopping one.

The daemons claim and release their pidfiles here, ``pvfs-admin up|down`` (and the test
fixtures through it) read them here, and the benchmarks stop their peer file systems' daemons
here, so every part agrees on when a process counts as gone: an exited child that nobody has
reaped yet (a zombie) still answers signal 0, and counting it as alive made ``down`` wait out
its whole timeout and ``up`` refuse to start.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterable

__all__ = ["PidfileBusy", "claim_pidfile", "pid_alive", "read_pidfile", "release_pidfile",
           "terminate"]

_POLL = 0.05


class PidfileBusy(RuntimeError):
    """The pidfile names another live process (a second copy of a daemon must not start)."""

    def __init__(self, path: str, pid: int) -> None:
        super().__init__(f"refusing to start: pid {pid} in {path} is still running")
        self.path = path
        self.pid = pid


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` runs; an exited process not yet reaped (a zombie) counts as gone."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: it exists
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            # The command name in parentheses may itself hold spaces or ")": split after it.
            state = fh.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state not in (b"Z", b"X")


def read_pidfile(path: str | os.PathLike[str]) -> int | None:
    """The pid in ``path`` if that process runs; None for no file, garbage or a dead pid."""
    try:
        with open(path) as fh:
            pid = int(fh.read().strip() or 0)
    except (OSError, ValueError):
        return None
    return pid if pid > 0 and pid_alive(pid) else None


def claim_pidfile(path: str) -> None:
    """Write our pid to ``path`` atomically (write, then rename over).

    Raises:
        PidfileBusy: another live process holds ``path``.
    """
    other = read_pidfile(path)
    if other and other != os.getpid():
        raise PidfileBusy(path, other)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.{os.getpid()}"
    with open(tmp, "w") as fh:
        fh.write(f"{os.getpid()}\n")
    os.replace(tmp, path)


def release_pidfile(path: str | None) -> None:
    """Remove ``path`` unless it now names another live process (a successor's claim)."""
    if path and read_pidfile(path) in (None, os.getpid()):
        try:
            os.unlink(path)
        except OSError:
            pass


def terminate(pids: Iterable[int], timeout: float = 10.0) -> list[int]:
    """SIGTERM each live pid, wait up to ``timeout`` for all, SIGKILL the stragglers.

    Our own children are reaped while waiting (else they linger as zombies). Returns the pids
    that were signalled, in order. pid 1 and below are never signalled.
    """
    signalled = []
    for pid in pids:
        if pid <= 1 or not pid_alive(pid):
            continue
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            continue
        signalled.append(pid)
    deadline = time.monotonic() + timeout
    for pid in signalled:
        while pid_alive(pid) and time.monotonic() < deadline:
            _reap(pid)
            time.sleep(_POLL)
        if pid_alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
            time.sleep(0.1)
            _reap(pid)
    return signalled


def _reap(pid: int) -> None:
    """Collect ``pid`` if it is a child of ours that has exited; else do nothing."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
