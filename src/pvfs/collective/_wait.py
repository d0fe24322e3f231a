"""Waiting without spinning: MPICH's blocking calls poll a core at 100 %.

On a node with fewer cores than ranks (2 cores, 4-8 ranks here) a rank that spins inside
``MPI_Recv`` or ``MPI_Barrier`` steals the core from the rank it waits for. Every wait in this
package therefore tests a nonblocking request and sleeps between tests, backing off from a
few microseconds to a millisecond; a wait also has a deadline so a lost message or a
deadlock becomes an error, not a hang.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

#: Seconds any single wait may take before it is declared a deadlock (env override for tests).
DEADLINE = float(os.environ.get("PVFS_COLLECTIVE_DEADLINE", "600"))


class CollectiveTimeout(TimeoutError):
    """A wait for a lock, a reply or a collective step passed its deadline."""


class Backoff:
    """Sleep lengths growing from ``start`` to ``cap`` seconds; ``reset`` after progress."""

    def __init__(self, start: float = 2e-5, cap: float = 1e-3) -> None:
        self.start, self.cap = start, cap
        self.delay = start
        self.spins = 0

    def pause(self) -> None:
        # A few quick retries first: a reply often arrives within microseconds.
        self.spins += 1
        if self.spins <= 3:
            return
        time.sleep(self.delay)
        self.delay = min(self.cap, self.delay * 2)

    def reset(self) -> None:
        self.delay = self.start
        self.spins = 0


def until(done: Callable[[], Any], what: str, deadline: float | None = None,
          cap: float = 1e-3) -> Any:
    """Call ``done()`` until it returns something truthy; sleep between calls.

    Raises:
        CollectiveTimeout: after ``deadline`` seconds (default :data:`DEADLINE`).
    """
    limit = time.monotonic() + (DEADLINE if deadline is None else deadline)
    backoff = Backoff(cap=cap)
    while True:
        value = done()
        if value:
            return value
        if time.monotonic() > limit:
            raise CollectiveTimeout(f"waited too long for {what}")
        backoff.pause()


def wait_request(req: Any, what: str) -> Any:
    """``req.wait()`` for an mpi4py request, without spinning; returns the received object."""
    box: list[Any] = []

    def test() -> bool:
        flag, value = req.test()
        if flag:
            box.append(value)
        return flag

    until(test, what)
    return box[0]


def barrier(comm: Any, what: str = "barrier") -> None:
    """``comm.Barrier()`` through ``Ibarrier`` and sleeping tests."""
    req = comm.Ibarrier()
    until(req.Test, what)


#: Python's thread switch interval while a helper thread (an I/O thread, a write-behind
#: receiver) must answer soon after a message arrives; the default is 5 ms.
SWITCH_INTERVAL = 5e-4
_switch_lock = threading.Lock()
_switch_users = 0
_switch_saved = 0.0


def lower_switch_interval() -> None:
    """Let a helper thread get the GIL within :data:`SWITCH_INTERVAL` of the main thread
    running Python code; nested users share one lowering, the last restores."""
    global _switch_users, _switch_saved
    with _switch_lock:
        if _switch_users == 0:
            _switch_saved = sys.getswitchinterval()
            sys.setswitchinterval(min(_switch_saved, SWITCH_INTERVAL))
        _switch_users += 1


def restore_switch_interval() -> None:
    global _switch_users
    with _switch_lock:
        _switch_users -= 1
        if _switch_users == 0:
            sys.setswitchinterval(_switch_saved)
