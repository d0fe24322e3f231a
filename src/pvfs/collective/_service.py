"""Message back ends: a lock/data service loop and the client calls that talk to it.

Two of the three coordinations use it:

- ``thread`` (the MPI-IO caching paper, §3): every rank runs an I/O thread that is home for
  the locks and metadata of pages ``rank mod n`` and serves other ranks' reads and writes of
  the pages cached in its memory; the main thread talks to threads, its own included, only
  through messages. Needs ``MPI_THREAD_MULTIPLE`` (mpi4py asks for it by default and the
  mpich wheel grants it).
- ``servers`` (DAChe as published, §5.2): ``k`` ranks are taken from the group for the life
  of the open and do nothing but serve locks and metadata; page data moves through RMA.

The loop probes with ``Iprobe`` and sleeps when idle (the paper's I/O thread also polls with
``MPI_Iprobe``; a blocking receive would spin a core at 100 %). Requests are pickled tuples
on tag ``REQ``; replies go back on tag ``REPLY``. Every client has at most one request
waiting for a reply, so a reply needs no request id.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any

import numpy as np

from pvfs.collective._locks import READ, LockManager
from pvfs.collective._pages import Dirty, Meta
from pvfs.collective._wait import (
    Backoff,
    lower_switch_interval,
    restore_switch_interval,
    until,
)

REQ, REPLY = 11, 12


class Caller:
    """The client side: send a request, wait (sleeping) for the reply."""

    def __init__(self, comm: Any) -> None:
        self.comm = comm
        self._pending: list[Any] = []
        self.messages = 0

    def send(self, dest: int, msg: tuple) -> None:
        self.messages += 1
        self._pending.append(self.comm.isend(msg, dest=dest, tag=REQ))
        self._pending = [r for r in self._pending if not r.Test()]

    def reply(self, src: int, what: str) -> Any:
        until(lambda: self.comm.iprobe(source=src, tag=REPLY), what)
        return self.comm.recv(source=src, tag=REPLY)

    def call(self, dest: int, msg: tuple) -> Any:
        self.send(dest, msg)
        return self.reply(dest, f"reply to {msg[0]} from rank {dest}")

    def drain(self) -> None:
        until(lambda: all(r.Test() for r in self._pending), "outgoing requests")
        self._pending.clear()


class LocalPages:
    """This rank's cache slots and dirty marks, as the I/O thread serves them."""

    def __init__(self, nslots: int, page_size: int) -> None:
        self.page_size = page_size
        self.mem = np.zeros(max(1, nslots) * page_size, dtype=np.uint8)
        self.dirty_marks = [Dirty() for _ in range(max(1, nslots))]

    def slot(self, slot: int) -> memoryview:
        base = slot * self.page_size
        return memoryview(self.mem[base:base + self.page_size])


class Service:
    """The loop of a lock server or an I/O thread; ``run`` returns after ``stops`` stops."""

    def __init__(self, comm: Any, pages: LocalPages | None, stops: int) -> None:
        self.comm = comm
        self.locks = LockManager()
        self.pages = pages
        self.stops = stops
        self.served = 0
        self._out: list[Any] = []
        self.error: BaseException | None = None

    def _send(self, dest: int, obj: Any) -> None:
        self._out.append(self.comm.isend(obj, dest=dest, tag=REPLY))

    def run(self) -> None:
        from mpi4py import MPI

        status = MPI.Status()
        backoff = Backoff(start=2e-5, cap=5e-4)
        stopped = 0
        try:
            while stopped < self.stops:
                if not self.comm.iprobe(source=MPI.ANY_SOURCE, tag=REQ, status=status):
                    if self._out:
                        self._out = [r for r in self._out if not r.Test()]
                    backoff.pause()
                    continue
                backoff.reset()
                src = status.Get_source()
                msg = self.comm.recv(source=src, tag=REQ)
                self.served += 1
                if msg[0] == "stop":
                    stopped += 1
                else:
                    self._handle(src, msg)
            until(lambda: all(r.Test() for r in self._out), "service replies")
        except BaseException as exc:
            self.error = exc
            raise

    def _handle(self, src: int, msg: tuple) -> None:
        op = msg[0]
        if op == "lock":
            _, page, excl, try_only, around = msg
            status, meta = self.locks.request(page, src, excl, try_only, around)
            if status != "queued":
                self._send(src, meta)
        elif op == "unlock":
            _, page, meta = msg
            for who, m in self.locks.release(page, src, None if meta is None else Meta(*meta)):
                self._send(who, m)
        elif op == "get":
            _, slot, pieces = msg
            assert self.pages is not None
            view = self.pages.slot(slot)
            self._send(src, [bytes(view[off:off + n]) for off, n in pieces])
        elif op == "put":
            _, slot, pieces = msg
            assert self.pages is not None
            view = self.pages.slot(slot)
            for off, data in pieces:
                view[off:off + len(data)] = data
                self.pages.dirty_marks[slot].add(off, off + len(data))
            self._send(src, True)
        else:
            raise RuntimeError(f"unknown request {op!r} from rank {src}")


class ServiceThread:
    """A :class:`Service` on a daemon thread (the ``thread`` coordination's I/O thread)."""

    def __init__(self, service: Service) -> None:
        self.service = service
        self.thread = threading.Thread(target=self._run, name="pvfs-collective-io",
                                       daemon=True)
        # Other ranks wait on this thread's replies: it must get the GIL soon after a
        # request arrives, not after the main thread's 5 ms slice (restored at join).
        lower_switch_interval()
        self.thread.start()

    def _run(self) -> None:
        # The loop stores its exception in service.error for join(); nothing else to do.
        with contextlib.suppress(BaseException):
            self.service.run()

    def join(self) -> None:
        self.thread.join()
        restore_switch_interval()
        if self.service.error is not None:
            raise RuntimeError(f"I/O thread failed: {self.service.error!r}")


class MsgLocks:
    """Page locks and metadata held by homes reached with messages."""

    def __init__(self, caller: Caller, homes: list[int]) -> None:
        self.caller = caller
        self.homes = homes
        self.lock_calls = 0
        self.retries = 0

    def home(self, page: int) -> int:
        return self.homes[page % len(self.homes)]

    def lock(self, page: int, excl: bool, around: bool = False) -> Meta | None:
        self.lock_calls += 1
        meta = self.caller.call(self.home(page), ("lock", page, excl, False, around))
        return None if meta is None else Meta(*meta)

    def lock_read(self, page: int, around: bool) -> tuple[Meta | None, bool]:
        """A read's lock in one round trip: the home grants it exclusive when, at the time
        of the grant, the page is cached nowhere (the reader will cache it), else shared."""
        self.lock_calls += 1
        meta = self.caller.call(self.home(page), ("lock", page, READ, False, around))
        if meta is None:
            return None, False
        meta = Meta(*meta)
        return meta, meta.owner < 0

    def try_lock(self, page: int) -> Meta | None:
        self.lock_calls += 1
        meta = self.caller.call(self.home(page), ("lock", page, True, True, False))
        return None if meta is None else Meta(*meta)

    def unlock(self, page: int, excl: bool, meta: Meta | None) -> None:
        self.caller.send(self.home(page), ("unlock", page, None if meta is None else tuple(meta)))

    def close(self) -> None:
        self.caller.drain()


class MsgData:
    """Page data reached through the owners' I/O threads (the ``thread`` coordination)."""

    def __init__(self, caller: Caller, rank: int, pages: LocalPages) -> None:
        self.caller = caller
        self.rank = rank
        self.pages = pages
        self.remote_gets = self.remote_puts = 0

    def view(self, slot: int) -> memoryview:
        return self.pages.slot(slot)

    def get_many(self, owner: int, slot: int, parts: list[tuple[int, memoryview]]) -> None:
        """Pieces of a slot at its owner's I/O thread: one request for all of them."""
        self.remote_gets += len(parts)
        replies = self.caller.call(owner, ("get", slot, [(off, len(out)) for off, out in parts]))
        for (_, out), blob in zip(parts, replies, strict=True):
            out[:] = blob

    def put_many(self, owner: int, slot: int, parts: list[tuple[int, memoryview]]) -> None:
        self.remote_puts += len(parts)
        self.caller.call(owner, ("put", slot, [(off, bytes(data)) for off, data in parts]))

    def dirty(self, slot: int) -> Dirty:
        return self.pages.dirty_marks[slot]

    def mark(self, slot: int, lo: int, hi: int) -> None:
        self.pages.dirty_marks[slot].add(lo, hi)

    def clean(self, slot: int) -> None:
        self.pages.dirty_marks[slot].clear()

    def close(self) -> None:
        self.caller.drain()
