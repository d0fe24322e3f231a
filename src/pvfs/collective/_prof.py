"""Where a remote page's time goes (issue 32): a per-process timeline, off unless asked for.

Over the netns harness ``servers`` spends 70-86 % of its clients' read time moving remote
pages by RMA gets, 34-108 ms per access, and neither doorbells nor a ring to the owner moved
it. To see where a get's time goes, a process with the profile on (:func:`start`; the bench
does it with ``PVFS_COLLECTIVE_TRACE``) records

- every RMA transfer to an owner (``"get"``/``"put"``: from the first ``Get`` issued to the
  end of its ``Flush``, the owner, the bytes),
- every sleep of a wait (``"sleep"``: ``time.sleep``; ``"bell"``: blocked on a doorbell),

each with its thread, its start and end (``time.monotonic``: one clock for every process on
one kernel, namespaces included), the thread's *run delay* over it — the nanoseconds it
was runnable but waited for a CPU (``/proc/thread-self/schedstat``, second field) — and the
CPU the thread used meanwhile (``time.thread_time_ns``). For a sleep the run delay is the
time from its wake-up to running again; for a get, the time the origin itself waited for a
core, and its CPU what it burnt in MPI's progress while it waited (a blocking ``Flush``
polls). Reading the file costs a few microseconds a call, so a profiled
run is not a measurement of bandwidth.
"""

from __future__ import annotations

import threading
import time

#: the events, ``(kind, thread id, start, end, run delay ns, peer, bytes, CPU ns)``; None: off
events: list[tuple[str, int, float, float, int, int, int, int]] | None = None
_lock = threading.Lock()


def start() -> None:
    """Turn the profile on for this process (an empty timeline)."""
    global events
    events = []


def stop() -> list[tuple[str, int, float, float, int, int, int, int]]:
    """Turn it off; the timeline recorded."""
    global events
    got, events = events or [], None
    return got


def run_delay_ns() -> int:
    """This thread's run delay so far (ns; 0 where ``schedstat`` is missing)."""
    try:
        with open("/proc/thread-self/schedstat", "rb") as f:
            return int(f.read().split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def mark() -> tuple[float, int, int] | None:
    """The start of an event (None with the profile off)."""
    if events is None:
        return None
    return time.monotonic(), run_delay_ns(), time.thread_time_ns()


def record(kind: str, began: tuple[float, int, int] | None, peer: int = -1,
           nbytes: int = 0) -> None:
    """The end of an event begun with :func:`mark` (nothing with the profile off)."""
    if began is None or events is None:
        return
    cpu, end, delay = time.thread_time_ns(), time.monotonic(), run_delay_ns()
    with _lock:
        events.append((kind, threading.get_native_id(), began[0], end, delay - began[1],
                       peer, nbytes, cpu - began[2]))
