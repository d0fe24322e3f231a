"""Waiting without spinning: MPICH's blocking calls poll a core at 100 %.

On a node with fewer cores than ranks (2 cores, 4-8 ranks here) a rank that spins inside
``MPI_Recv`` or ``MPI_Barrier`` steals the core from the rank it waits for. Every wait in this
package therefore tests a nonblocking request and sleeps between tests, backing off from a
few microseconds to a millisecond; a wait also has a deadline so a lost message or a
deadlock becomes an error, not a hang.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from pvfs.collective import _prof

#: Seconds any single wait may take before it is declared a deadlock (env override for tests).
DEADLINE = float(os.environ.get("PVFS_COLLECTIVE_DEADLINE", "600"))


class CollectiveTimeout(TimeoutError):
    """A wait for a lock, a reply or a collective step passed its deadline."""


_precise = threading.local()
#: Timer slack asked for (ns): Linux lets a sleep overrun by the thread's slack, 50 µs by
#: default, so a 20 µs sleep took ~70 µs; a waiting thread asks for 1 µs instead.
TIMER_SLACK_NS = int(os.environ.get("PVFS_COLLECTIVE_TIMER_SLACK_NS", "1000"))
#: Seconds of ``sched_yield`` polling before the first sleep (env override for measurements).
YIELD_S = float(os.environ.get("PVFS_COLLECTIVE_YIELD_US", "200")) * 1e-6


def precise_sleeps() -> None:
    """Lower this thread's timer slack (Linux ``prctl(PR_SET_TIMERSLACK)``) once."""
    if getattr(_precise, "done", False):
        return
    _precise.done = True
    if TIMER_SLACK_NS <= 0 or not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(29, ctypes.c_ulong(TIMER_SLACK_NS), 0, 0, 0)  # PR_SET_TIMERSLACK
    except (OSError, AttributeError):
        pass


class Backoff:
    """Waits between polls.

    A few immediate retries; then, for ``yield_s`` seconds, ``sched_yield`` (it hands the
    core to a runnable thread or process — often the one waited for — and returns at once
    when there is none); then sleeps growing from ``start`` to ``cap``, and to ``idle_cap``
    once ``idle_after`` seconds have passed without progress. Doubling sleeps overshoot the
    event by up to a sleep; a low ``cap`` keeps that small (a round trip used to cost ~2.4 ms
    of it, measured), the idle cap keeps a long wait cheap. ``reset`` after progress.
    ``spins``: the immediate retries (0 with ``yield_s`` 0 and a ``bell``: block at once,
    what the message back ends do with doorbells, issue 32).
    """

    def __init__(self, start: float = 1e-5, cap: float = 2e-4, yield_s: float | None = None,
                 idle_after: float = 0.02, idle_cap: float = 1e-3,
                 bell: Callable[[float], Any] | None = None, spins: int = 3) -> None:
        self.start, self.cap = start, cap
        self.quick = spins
        self.yield_s = YIELD_S if yield_s is None else yield_s
        self.idle_after, self.idle_cap = idle_after, max(cap, idle_cap)
        # With a doorbell (Bells) the wait after the yields blocks in the kernel until rung,
        # for at most idle_cap (a ring is a hint: the message itself comes through MPI).
        self.bell = bell
        precise_sleeps()
        self.reset()

    def pause(self, limit: float | None = None) -> None:
        """Wait a little; ``limit``: block at most this many seconds (a deadline is due)."""
        # A few quick retries first: a reply often arrives within microseconds.
        self.spins += 1
        if self.spins <= self.quick:
            return
        waited = time.monotonic() - self.since
        if waited < self.yield_s:
            os.sched_yield()
            return
        began = _prof.mark()  # (issue 32's get profile; None unless it is on)
        if self.bell is not None:
            rung = self.bell(self.idle_cap if limit is None else max(0.0, min(self.idle_cap, limit)))
            _prof.record("bell", began)
            if rung:
                self.since = time.monotonic()  # rung: the message is due, yield again
            return
        time.sleep(self.delay if limit is None else max(0.0, min(self.delay, limit)))
        _prof.record("sleep", began)
        cap = self.idle_cap if waited > self.idle_after else self.cap
        self.delay = min(cap, self.delay * 2)

    def reset(self) -> None:
        self.delay = self.start
        self.spins = 0
        self.since = time.monotonic()


def until(done: Callable[[], Any], what: str, deadline: float | None = None,
          cap: float = 2e-4, bell: Callable[[float], Any] | None = None,
          limit: Callable[[], float | None] | None = None, spins: int = 3,
          yield_s: float | None = None) -> Any:
    """Call ``done()`` until it returns something truthy; sleep between calls (or wait
    for ``bell``, see :class:`Bells`), never longer than ``limit()`` seconds if given.
    ``spins`` and ``yield_s`` as in :class:`Backoff` (``yield_s`` None: :data:`YIELD_S`).

    Raises:
        CollectiveTimeout: after ``deadline`` seconds (default :data:`DEADLINE`).
    """
    give_up = time.monotonic() + (DEADLINE if deadline is None else deadline)
    backoff = Backoff(cap=cap, idle_cap=max(cap, 1e-3), bell=bell, spins=spins,
                      yield_s=yield_s)
    while True:
        value = done()
        if value:
            return value
        if time.monotonic() > give_up:
            raise CollectiveTimeout(f"waited too long for {what}")
        backoff.pause(None if limit is None else limit())


def host_key() -> str:
    """Where this process can ring another's doorbell: the host name and the network
    namespace (an abstract UNIX socket bound in one namespace cannot be reached from
    another: over the netns harness every rank shares the host name, and before issue 32
    every ring to another host was refused and lost — each wait ran to its timeout)."""
    import socket

    try:
        ns = os.stat("/proc/self/ns/net").st_ino
    except OSError:
        ns = 0
    return f"{socket.gethostname()}:{ns}"


class Bells:
    """Doorbells beside MPI messages, so a waiting thread sleeps in the kernel and wakes
    when rung instead of polling with sleeps (collective over ``comm``).

    MPI has no blocking wait that does not poll a core (MPICH's blocking calls spin), so a
    waiter either spins, which starves the rank it waits for on an oversubscribed node, or
    sleeps, which adds up to a sleep to every round trip. The I/O daemons do better with
    sockets: ``poll(2)`` sleeps until data arrives. Each rank binds two datagram sockets in
    the abstract UNIX namespace: ``service`` (rung after a request is sent to the rank) and
    ``caller`` (rung after a reply). A ring is one byte and only a hint — the message
    travels through MPI, and a waiter that finds nothing waits again, at most ``idle_cap``
    at a time, so a lost ring costs at most that. Only when every rank of ``comm`` is on one
    host *and in one network namespace* (:func:`host_key`: abstract sockets are scoped to
    the network namespace). Across hosts (or namespaces), with ``PVFS_COLLECTIVE_BELLS_UDP=1``
    (:func:`udp_wanted`, issue 32), the same two sockets are UDP sockets bound to an address of the
    rank's own host (:func:`bell_address`), checked at set-up by one ring round the group
    (``udp``); else ``enabled`` is False and waits poll as before.
    ``PVFS_COLLECTIVE_BELLS=0`` turns them off.
    """

    def __init__(self, comm: Any) -> None:
        import socket

        self.rank = comm.Get_rank()
        token = comm.bcast(os.urandom(8).hex() if self.rank == 0 else None, root=0)
        hosts = comm.allgather(host_key())
        wanted = os.environ.get("PVFS_COLLECTIVE_BELLS", "1") != "0"
        usable = wanted and sys.platform.startswith("linux") and len(set(hosts)) == 1
        # decided together: every rank must take the same path through the collectives
        self.enabled = bool(comm.allreduce(int(usable), op=_min_op()))
        self.rings = 0
        self.udp = False
        self._socks: dict[str, Any] = {}
        self._names: dict[str, list[Any]] = {}
        if not self.enabled:
            if wanted and udp_wanted() and len(set(hosts)) > 1:
                self._udp(comm)
            return
        ok = True
        for kind in ("service", "caller"):
            names = [f"\0pvfs-collective-{token}-{kind}-{r}".encode()
                     for r in range(comm.Get_size())]
            self._names[kind] = names
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            try:
                sock.bind(names[self.rank])
            except OSError:
                ok = False
            sock.setblocking(False)
            self._socks[kind] = sock
        self.enabled = bool(comm.allreduce(int(ok), op=_min_op())) and ok
        self._out = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._out.setblocking(False)
        self._out_lock = threading.Lock()

    def _udp(self, comm: Any) -> None:
        """UDP doorbells (collective): two sockets on this host's address, the group's
        addresses gathered, then one ring to the next rank checked by every rank within
        :data:`UDP_CHECK_S`; ``enabled`` only if every rank bound and heard its ring."""
        import select
        import socket

        addr = bell_address()
        socks: dict[str, Any] = {}
        for kind in ("service", "caller"):
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            sock.setblocking(False)
            socks[kind] = sock
            if addr is not None:
                try:
                    sock.bind((addr, 0))
                except OSError:
                    addr = None
        mine = None if addr is None else {k: s.getsockname() for k, s in socks.items()}
        every = comm.allgather(mine)
        self._socks = socks
        if any(e is None for e in every):
            self.close()
            return
        self._names = {k: [tuple(e[k]) for e in every] for k in ("service", "caller")}
        self._out = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._out.setblocking(False)
        self._out_lock = threading.Lock()
        self.enabled = True  # (for ring)
        n = comm.Get_size()
        self.ring("service", (self.rank + 1) % n)
        heard = bool(select.select([socks["service"]], [], [], UDP_CHECK_S)[0])
        if heard:
            with contextlib.suppress(OSError):
                while socks["service"].recv(64):
                    pass
        self.rings = 0
        self.enabled = bool(comm.allreduce(int(heard), op=_min_op()))
        self.udp = self.enabled
        if not self.enabled:
            self.close()

    def ring(self, kind: str, dest: int) -> None:
        """Wake ``dest``'s ``kind`` waiter (after the MPI message to it was sent)."""
        if not self.enabled:
            return
        self.rings += 1
        try:
            with self._out_lock:
                self._out.sendto(b"!", self._names[kind][dest])
        except OSError:
            pass  # queue full (a ring is pending anyway) or the peer has closed

    def waiter(self, kind: str) -> Callable[[float], bool] | None:
        """The ``bell`` for :class:`Backoff`: wait up to a timeout for a ring, then drain."""
        if not self.enabled:
            return None
        import select

        sock = self._socks[kind]

        def wait(timeout: float) -> bool:
            ready, _, _ = select.select([sock], [], [], timeout)
            if ready:
                try:
                    while sock.recv(64):
                        pass
                except OSError:
                    pass
            return bool(ready)

        return wait

    def close(self) -> None:
        for sock in self._socks.values():
            sock.close()
        self._socks.clear()
        out = getattr(self, "_out", None)
        if out is not None:
            out.close()
            self._out = None


def udp_wanted() -> bool:
    """Doorbells over UDP between ranks on different hosts or network namespaces (issue
    32: over the netns harness the message back ends polled instead): off unless
    ``PVFS_COLLECTIVE_BELLS_UDP=1`` (read at each open)."""
    return os.environ.get("PVFS_COLLECTIVE_BELLS_UDP", "0") == "1"

#: Seconds every rank waits for the set-up's test ring before UDP bells are given up.
UDP_CHECK_S = 2.0


def bell_address() -> str | None:
    """The IPv4 address a rank's UDP doorbells bind: ``PVFS_COLLECTIVE_BELL_ADDR``, else the
    first address of an interface of this host that is not loopback (``SIOCGIFADDR``), else
    None (no UDP doorbells)."""
    given = os.environ.get("PVFS_COLLECTIVE_BELL_ADDR")
    if given:
        return given
    import fcntl
    import socket
    import struct

    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        for _, name in socket.if_nameindex():
            if name == "lo":
                continue
            try:
                raw = fcntl.ioctl(probe.fileno(), 0x8915,  # SIOCGIFADDR
                                  struct.pack("256s", name[:15].encode()))
            except OSError:
                continue  # no IPv4 address on it
            addr = socket.inet_ntoa(raw[20:24])
            if not addr.startswith("127."):
                return addr
    finally:
        probe.close()
    return None


def _min_op() -> Any:
    from mpi4py import MPI

    return MPI.MIN


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
SWITCH_INTERVAL = float(os.environ.get("PVFS_COLLECTIVE_SWITCH_US", "500")) * 1e-6
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
