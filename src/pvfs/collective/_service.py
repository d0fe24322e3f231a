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
on tag ``REQ``; replies go back on tag ``REPLY``. A client has at most one request waiting
for a reply *per destination* (it may wait for several destinations at once), so a reply
needs no request id: it is matched by its source.

Requests carry every page of a request that goes to one place in one message:

- ``("lock", items, around, try)``: a batch of ``(page, mode)`` of one home, in increasing
  page order (:meth:`~pvfs.collective._locks.LockManager.request_batch`, or ``try_batch``
  with ``try``); the reply is the list of the pages' metadata.
- ``("unlock", [(page, meta or None), ...])``: releases, no reply.
- ``("get", [(slot, [(off, n), ...]), ...])`` and ``("put", [(slot, [(off, bytes), ...]),
  ...])``: the pieces of every page of a request cached at one owner (``thread``).

A lock set over several homes is first asked of all of them at once with ``try`` batches; if
every page is granted (the common case) that is one parallel round instead of one round trip
per page. With the ``thread`` coordination the main thread locks and unlocks the pages its
own rank is home for directly in the lock table its I/O thread serves (under a mutex), with
no message.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from typing import Any

import numpy as np

from pvfs.collective._locks import AROUND_AFTER, BUSY, READ, LockManager
from pvfs.collective._pages import Dirty, Meta
from pvfs.collective._wait import (
    Backoff,
    Bells,
    lower_switch_interval,
    restore_switch_interval,
    until,
)

REQ, REPLY = 11, 12
_now = time.monotonic  # (the clock of a read's wait for loads; tests replace it)
#: Seconds a home keeps polling with ``sched_yield`` after its last request before it sleeps
#: (100 µs at most, 1 ms after 10 ms idle): requests come in bursts, and a sleeping home adds
#: its sleep to every round trip.
SERVICE_YIELD_S = float(os.environ.get("PVFS_COLLECTIVE_SERVICE_YIELD_US", "1000")) * 1e-6


class Caller:
    """The client side: send a request, wait (sleeping) for the reply."""

    def __init__(self, comm: Any, serve: Any = None, bells: Bells | None = None,
                 limit: Any = None) -> None:
        self.comm = comm
        self.bells = bells
        self._bell = bells.waiter("caller") if bells is not None else None
        self.rank = comm.Get_rank()
        self._pending: list[Any] = []
        self.messages = 0
        # thread coordination: while the main thread waits it serves its rank's requests
        # too (Service.poll_once), so a round trip to a rank whose main thread is waiting
        # does not wait for that rank's I/O thread to be scheduled and get the GIL.
        self.serve = serve
        self.limit = limit  # (with serve) seconds until the served table has a deadline

    def send(self, dest: int, msg: Any, tag: int = REQ) -> None:
        self.messages += 1
        self._pending.append(self.comm.isend(msg, dest=dest, tag=tag))
        # Test first (it progresses the send, so the message is there when the bell rings).
        self._pending = [r for r in self._pending if not r.Test()]
        if self.bells is not None:
            self.bells.ring("service" if tag == REQ else "caller", dest)

    def reply(self, src: int, what: str) -> Any:
        return self.replies([src], what)[src]

    def replies(self, srcs: list[int], what: str) -> dict[int, Any]:
        """One reply from each of ``srcs``, taken in the order they arrive."""
        waiting = list(srcs)
        out: dict[int, Any] = {}
        serve = self.serve

        def poll() -> bool:
            for src in list(waiting):
                if self.comm.iprobe(source=src, tag=REPLY):
                    out[src] = self.comm.recv(source=src, tag=REPLY)
                    waiting.remove(src)
            if waiting and serve is not None:
                while serve():
                    pass
            return not waiting

        until(poll, what, bell=self._bell, limit=self.limit if serve is not None else None)
        return out

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

    def __init__(self, comm: Any, pages: LocalPages | None, stops: int,
                 yield_s: float | None = None, bells: Bells | None = None) -> None:
        self.comm = comm
        self.bells = bells
        # A read that finds a page being loaded waits for the copy up to the wait its
        # request carries (the reader's LoadTimes), AROUND_AFTER for a bare True.
        self.locks = LockManager(grace=AROUND_AFTER)
        # The lock table is also used by this rank's main thread (thread coordination).
        self.mutex = threading.Lock()
        # Held while a request is taken and handled (see poll_once).
        self._serving = threading.Lock()
        self.pages = pages
        self.stops = stops
        self.stopped = 0
        self.served = 0
        self.yield_s = SERVICE_YIELD_S if yield_s is None else yield_s
        self._out: list[Any] = []
        self._out_lock = threading.Lock()
        self.error: BaseException | None = None
        self.rank = comm.Get_rank()
        # A queued batch's data wishes until its grant: src -> (items, wants, held)
        self._wants: dict[int, tuple[Any, Any, Any]] = {}

    def carry(self, who: int, items: list[tuple[int, Any]], results: list[Any],
              wants: dict[int, list[tuple[int, int]]] | None,
              held: list[tuple[int, int, list[tuple[int, int]]]] | None) -> dict[int, Any]:
        """The bytes a lock reply carries (``thread``): of every page of the batch granted
        shared while cached here (``wants``: the pieces the reader will read) and of pages
        the requester already holds that are cached here (``held``). Read while the
        requester holds the page, as its own get would be."""
        data: dict[int, Any] = {}
        if self.pages is None or who == self.rank:
            return data
        if wants:
            for (page, _), r in zip(items, results, strict=False):
                if r is not BUSY and r is not None and r.owner == self.rank and page in wants:
                    view = self.pages.slot(r.slot)
                    data[page] = [bytes(view[off:off + n]) for off, n in wants[page]]
        for page, slot, pieces in held or ():
            view = self.pages.slot(slot)
            data[page] = [bytes(view[off:off + n]) for off, n in pieces]
        return data

    def grant_payload(self, who: int, results: Any) -> Any:
        """What a release's grant of a queued batch sends (call under ``mutex``)."""
        items, wants, held = self._wants.pop(who, (None, None, None))
        if items is None:
            return (results, {})
        return (results, self.carry(who, items, results, wants, held))

    def _send(self, dest: int, obj: Any) -> None:
        req = self.comm.isend(obj, dest=dest, tag=REPLY)
        if not req.Test():  # (progresses the send before the bell rings)
            with self._out_lock:
                self._out.append(req)
        if self.bells is not None:
            self.bells.ring("caller", dest)

    def _reap(self) -> None:
        with self._out_lock:
            if self._out:
                self._out = [r for r in self._out if not r.Test()]

    def poll_once(self) -> bool:
        """Serve one waiting request, if any.

        The I/O thread and a main thread that serves while it waits both call this; one
        of them at a time takes and handles a request (``_serving``), so a rank's requests
        are handled in the order it sent them. (A matched probe alone keeps the two from
        taking the same message but not their order: the main thread could take a
        client's unlock, the I/O thread its next lock, and the lock be handled first —
        then a shared re-lock of a page is undone by the late unlock, and the page is
        read without a lock the home knows of.) A thread that finds the other serving
        returns False, as if nothing were waiting."""
        from mpi4py import MPI

        if not self._serving.acquire(blocking=False):
            return False
        try:
            if self.locks.timed:
                self._expire()
            msg = self.comm.improbe(source=MPI.ANY_SOURCE, tag=REQ,
                                    status=(status := MPI.Status()))
            if msg is None:
                return False
            req = msg.recv()
            src = status.Get_source()
            self.served += 1
            if req[0] == "stop":
                with self.mutex:
                    self.stopped += 1
            else:
                self._handle(src, req)
            return True
        finally:
            self._serving.release()

    def _expire(self) -> None:
        """Answer the batches whose wait for a page being loaded is over (they read it
        around; call holding ``_serving``)."""
        with self.mutex:
            grants = [(who, self.grant_payload(who, res))
                      for who, res in self.locks.expire()]
        for who, payload in grants:
            self._send(who, payload)

    def wait_limit(self) -> float | None:
        """Seconds until a wait for a load is due to end (None: no such wait): how long
        a thread that serves this table may block."""
        if not self.locks.timed:
            return None
        with self.mutex:
            due = self.locks.next_deadline()
        return None if due is None else due - self.locks.clock()

    def run(self) -> None:
        backoff = Backoff(cap=1e-4, yield_s=self.yield_s, idle_after=0.01,
                          bell=self.bells.waiter("service") if self.bells is not None else None)
        try:
            while self.stopped < self.stops:
                if self.poll_once():
                    backoff.reset()
                else:
                    self._reap()
                    backoff.pause(self.wait_limit())
            until(lambda: all(r.Test() for r in self._out), "service replies")
        except BaseException as exc:
            self.error = exc
            raise

    def _handle(self, src: int, msg: tuple) -> None:
        op = msg[0]
        if op == "lock":
            _, items, around, try_only, wants, held = msg
            with self.mutex:
                if try_only:
                    result: Any = self.locks.try_batch(src, items, around)
                else:
                    result = self.locks.request_batch(src, items, around)
                if result is None:
                    self._wants[src] = (items, wants, held)
                else:
                    reply = (result, self.carry(src, items, result, wants, held))
            if result is not None:
                self._send(src, reply)
        elif op == "unlock":
            with self.mutex:
                grants = [(who, self.grant_payload(who, res))
                          for who, res in release_all(self.locks, src, msg[1])]
            for who, payload in grants:
                self._send(who, payload)
        elif op == "get":
            assert self.pages is not None
            out = []
            for slot, pieces in msg[1]:
                view = self.pages.slot(slot)
                out.append([bytes(view[off:off + n]) for off, n in pieces])
            self._send(src, out)
        elif op == "put":
            assert self.pages is not None
            for slot, pieces in msg[1]:
                view = self.pages.slot(slot)
                for off, data in pieces:
                    view[off:off + len(data)] = data
                    self.pages.dirty_marks[slot].add(off, off + len(data))
            self._send(src, True)
        else:
            raise RuntimeError(f"unknown request {op!r} from rank {src}")


def release_all(locks: LockManager, src: int,
                pairs: list[tuple[int, tuple | None]]) -> list[tuple[int, Any]]:
    """Release ``src``'s pages (recording their new metadata); the waiters to answer."""
    grants: list[tuple[int, Any]] = []
    for page, meta in pairs:
        grants.extend(locks.release(page, src, None if meta is None else Meta(*meta)))
    return grants


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
    """Page locks and metadata held by homes reached with messages.

    ``local``: this rank's own :class:`Service` (``thread`` coordination), whose lock table
    the main thread uses directly for the pages this rank is home for.
    """

    def __init__(self, caller: Caller, homes: list[int], local: Service | None = None) -> None:
        self.caller = caller
        self.homes = homes
        self.local = local
        self.me = caller.rank
        self.lock_calls = 0  # pages asked for (a page asked again after a busy try counts twice)
        self.retries = 0  # pages asked again in order after a try round found a busy page
        self.lock_rounds = 0  # waits for lock replies (a parallel round counts once)
        self.direct = 0  # lock and unlock batches served without a message (own home)
        # thread coordination: page -> bytes that came with this lock set's replies
        self.carried: dict[int, list[bytes]] = {}
        self.carried_pages = 0

    def home(self, page: int) -> int:
        return self.homes[page % len(self.homes)]

    # -------------------------------------------------------------- batches to homes
    def _ask(self, home: int, items: list[tuple[int, Any]], around: bool | float,
             try_only: bool,
             wants: Any = None, held: Any = None) -> list[Any] | None:
        """Send one batch; its results if answered at once (own home), else None."""
        if self.local is not None and home == self.me:
            self.direct += 1
            with self.local.mutex:
                if try_only:
                    return self.local.locks.try_batch(self.me, items, around)
                got = self.local.locks.request_batch(self.me, items, around)
                if got is None:
                    self.local._wants[self.me] = (items, None, None)
                return got
            # (queued at our own home: the I/O thread answers when a release grants it)
        if self.local is None:
            wants = held = None  # lock servers hold no pages
        self.caller.send(home, ("lock", items, around, try_only, wants, held))
        return None

    def _round(self, asks: dict[int, list[tuple[int, Any]]], around: bool | float,
               try_only: bool, wants: dict[int, Any] | None = None,
               held: Any = None) -> dict[int, list[Any]]:
        """One batch to each home at once (this rank's own home first, so the pages it
        grants can ask for their bytes in the other homes' messages); every home's results.

        ``wants``: page -> pieces a read will take; ``held(home)``: pages already held
        whose bytes that home can send with its reply."""
        out: dict[int, list[Any]] = {}
        waiting = []
        for home in sorted(asks, key=lambda h: h != self.me):
            items = asks[home]
            mine = None if wants is None else \
                {p: wants[p] for p, _ in items if p in wants} or None
            got = self._ask(home, items, around, try_only, mine,
                            held(home, out) if held is not None else None)
            if got is None:
                waiting.append(home)
            else:
                out[home] = got
        if waiting:
            self.lock_rounds += 1
            for home, (results, data) in self.caller.replies(waiting, "lock grants").items():
                out[home] = results
                self.carried.update(data)
        return out

    def _release(self, back: dict[int, list[tuple[int, tuple | None]]]) -> None:
        for home, pairs in back.items():
            if self.local is not None and home == self.me:
                self.direct += 1
                with self.local.mutex:
                    grants = release_all(self.local.locks, self.me, pairs)
                    payloads = [(who, self.local.grant_payload(who, res))
                                for who, res in grants]
                for who, payload in payloads:
                    self.caller.send(who, payload, tag=REPLY)
            else:
                self.caller.send(home, ("unlock", pairs))

    def lock_set(self, pages: list[int], write: bool, around: bool | float,
                 wants: dict[int, list[tuple[int, int]]] | None = None,
                 ) -> list[tuple[Meta | None, bool]]:
        """Lock ``pages`` (increasing) for a write (exclusive) or a read (the read mode:
        exclusive while the page is cached nowhere, the reader caches it); per page
        ``(metadata, exclusive)``, ``(None, False)`` for a page to read around.

        Pages of several homes: first one ``try`` batch to every home at once. Pages
        below the first busy one are kept, the ones above it released, and the rest are
        asked for in order, one queued batch per run of consecutive pages of one home
        (a waiter holds only pages below the one it waits for).

        ``wants`` (reads, ``thread``): page -> ``(offset, length)`` pieces to read. A home
        that grants a page cached on its own rank sends those bytes with the grant, and
        pages already held whose copy is on a home asked later are read in the same
        message; what came is in :attr:`carried` (no data round trip for those)."""
        mode: Any = True if write else READ
        items = [(p, mode) for p in pages]
        homes = [self.home(p) for p in pages]
        self.lock_calls += len(pages)
        self.carried = {}
        results: list[Any] = [BUSY] * len(pages)

        def held(home: int, got: dict[int, list[Any]]) -> list[Any] | None:
            # pages already granted (shared: cached somewhere) whose copy is on ``home``
            if wants is None or self.local is None:
                return None
            out = []
            for h, res in got.items():
                for (p, _), r in zip(asks_now[h], res, strict=False):
                    if r is not BUSY and r is not None and r[0] == home and p in wants \
                            and p not in self.carried:
                        out.append((p, r[1], wants[p]))
            for i, r in enumerate(results):
                p = pages[i]
                if r is not BUSY and r is not None and r[0] == home and wants and \
                        p in wants and p not in self.carried:
                    out.append((p, r[1], wants[p]))
            return out or None

        start = 0
        if len(set(homes)) > 1:
            where: dict[int, list[int]] = {}
            for i, h in enumerate(homes):
                where.setdefault(h, []).append(i)
            asks_now = {h: [items[i] for i in ix] for h, ix in where.items()}
            got = self._round(asks_now, around, try_only=True, wants=wants, held=held)
            for h, ix in where.items():
                for i, r in zip(ix, got[h], strict=False):
                    results[i] = r
            start = next((i for i, r in enumerate(results) if r is BUSY), len(pages))
            back: dict[int, list[tuple[int, tuple | None]]] = {}
            for i in range(start + 1, len(pages)):
                if results[i] is not BUSY and results[i] is not None:
                    back.setdefault(homes[i], []).append((pages[i], None))
                results[i] = BUSY
                self.carried.pop(pages[i], None)
            self._release(back)
            self.retries += len(pages) - start
            self.lock_calls += len(pages) - start
        i = start
        # The reader's wait for loads is one budget for the whole set: each queued batch
        # carries what is left of it (a home starts a batch's clock at its first wait).
        wait_end = _now() + around \
            if isinstance(around, float) and not write else None
        while i < len(pages):
            j = i + 1
            while j < len(pages) and homes[j] == homes[i]:
                j += 1
            asks_now = {}
            left = around if wait_end is None else max(0.0, wait_end - _now())
            results[i:j] = self._round({homes[i]: items[i:j]}, left, try_only=False,
                                       wants=wants, held=held)[homes[i]]
            i = j
        self.carried_pages += len(self.carried)
        out: list[tuple[Meta | None, bool]] = []
        for r in results:
            if r is None:
                out.append((None, False))
            else:
                meta = Meta(*r)
                out.append((meta, True if write else meta.owner < 0))
        return out

    def unlock_set(self, held: list[tuple[int, bool, Meta | None]]) -> None:
        """Release pages; one message per home (none for this rank's own home)."""
        back: dict[int, list[tuple[int, tuple | None]]] = {}
        for page, _, meta in held:
            back.setdefault(self.home(page), []).append(
                (page, None if meta is None else tuple(meta)))
        self._release(back)

    # -------------------------------------------------------------- single pages
    def lock(self, page: int, excl: bool, around: bool = False) -> Meta | None:
        self.lock_calls += 1
        self.carried = {}
        got = self._round({self.home(page): [(page, excl)]}, around, try_only=False)
        r = got[self.home(page)][0]
        return None if r is None else Meta(*r)

    def lock_read(self, page: int, around: bool | float) -> tuple[Meta | None, bool]:
        """A read's lock in one round trip: the home grants it exclusive when, at the time
        of the grant, the page is cached nowhere (the reader will cache it), else shared."""
        return self.lock_set([page], False, around)[0]

    def try_lock(self, page: int) -> Meta | None:
        self.lock_calls += 1
        got = self._round({self.home(page): [(page, True)]}, False, try_only=True)
        r = got[self.home(page)][0]
        return None if r is BUSY or r is None else Meta(*r)

    def unlock(self, page: int, excl: bool, meta: Meta | None) -> None:
        self.unlock_set([(page, excl, meta)])

    def close(self) -> None:
        self.caller.drain()


class MsgData:
    """Page data reached through the owners' I/O threads (the ``thread`` coordination)."""

    def __init__(self, caller: Caller, rank: int, pages: LocalPages) -> None:
        self.caller = caller
        self.rank = rank
        self.pages = pages
        self.remote_gets = self.remote_puts = 0
        self.data_rounds = 0

    def view(self, slot: int) -> memoryview:
        return self.pages.slot(slot)

    def transfer(self, write: bool,
                 by_owner: dict[int, list[tuple[int, list[tuple[int, memoryview]]]]]) -> None:
        """Pieces of remote slots, ``{owner: [(slot, [(offset, buffer)])]}``: one message to
        each owner's I/O thread, all sent before any reply is awaited (a put is answered once
        its bytes and dirty marks are in place, before the caller unlocks)."""
        for owner, slots in by_owner.items():
            n = sum(len(parts) for _, parts in slots)
            if write:
                self.remote_puts += n
                msg: tuple = ("put", [(slot, [(off, bytes(d)) for off, d in parts])
                                      for slot, parts in slots])
            else:
                self.remote_gets += n
                msg = ("get", [(slot, [(off, len(out)) for off, out in parts])
                               for slot, parts in slots])
            self.caller.send(owner, msg)
        self.data_rounds += 1
        replies = self.caller.replies(list(by_owner), "page data")
        if not write:
            for owner, slots in by_owner.items():
                for (_, parts), blobs in zip(slots, replies[owner], strict=True):
                    for (_, out), blob in zip(parts, blobs, strict=True):
                        out[:] = blob

    def get_many(self, owner: int, slot: int, parts: list[tuple[int, memoryview]]) -> None:
        """Pieces of a slot at its owner's I/O thread: one request for all of them."""
        self.transfer(False, {owner: [(slot, parts)]})

    def put_many(self, owner: int, slot: int, parts: list[tuple[int, memoryview]]) -> None:
        self.transfer(True, {owner: [(slot, parts)]})

    def dirty(self, slot: int) -> Dirty:
        return self.pages.dirty_marks[slot]

    def mark(self, slot: int, lo: int, hi: int) -> None:
        self.pages.dirty_marks[slot].add(lo, hi)

    def clean(self, slot: int) -> None:
        self.pages.dirty_marks[slot].clear()

    def close(self) -> None:
        self.caller.drain()
