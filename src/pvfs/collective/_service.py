"""Message back ends: a lock/data service loop and the client calls that talk to it.

Two of the three coordinations use it:

- ``thread`` (the MPI-IO caching paper, §3): every rank runs an I/O thread that is home for
  the locks and metadata of pages ``rank mod n`` and serves other ranks' reads and writes of
  the pages cached in its memory; the main thread talks to threads, its own included, only
  through messages. Needs ``MPI_THREAD_MULTIPLE`` (mpi4py asks for it by default and the
  mpich wheel grants it).
- ``servers`` (DAChe as published, §5.2): ``k`` ranks are taken from the group for the life
  of the open and do nothing but serve locks and metadata; page data moves through RMA.

The loop probes with ``MPI_Improbe`` (the paper's I/O thread polls with ``MPI_Iprobe``; a
blocking receive would spin a core at 100 %) and, when nothing is waiting, blocks in the
kernel on its doorbell (:class:`~pvfs.collective._wait.Bells`, rung after every request
sent to it) — or yields and sleeps where there are no doorbells or with
``PVFS_COLLECTIVE_BLOCK=0`` (:data:`BLOCK`). Requests are pickled tuples
on tag ``REQ``; replies go back on tag ``REPLY``. A client has at most one request waiting
for a reply *per destination* (it may wait for several destinations at once), so a reply
needs no request id: it is matched by its source.

Requests carry every page of a request that goes to one place in one message:

- ``("lock", items, around, try)``: a batch of ``(page, mode)`` of one home, in increasing
  page order (:meth:`~pvfs.collective._locks.LockManager.request_batch`, or ``try_batch``
  with ``try``); the reply is the list of the pages' metadata.
- ``("unlock", [(page, meta or None), ...])``: releases, no reply (also of read-ahead
  claims, sent by the claimer's helper thread).
- ``("claim", pages, owner, lead)``: read-ahead claims of one home's pages
  (:meth:`~pvfs.collective._locks.LockManager.claim_batch`); the reply is each page's
  flushed bit or None — with the victim copies the claims took, ``(that list,
  {page: bytes})``.
- ``("get", [(slot, [(off, n), ...]), ...])`` and ``("put", [(slot, [(off, bytes), ...]),
  ...])``: the pieces of every page of a request cached at one owner (``thread``).

A lock set over several homes is first asked of all of them at once with ``try`` batches; if
every page is granted (the common case) that is one parallel round instead of one round trip
per page. With the ``thread`` coordination the main thread locks and unlocks the pages its
own rank is home for directly in the lock table its I/O thread serves (under a mutex), with
no message. The client side (``MsgLocks``, ``MsgData``) is :mod:`._msgclient`.
"""

from __future__ import annotations

import contextlib
import os
import threading
from typing import Any

import numpy as np

from pvfs.collective._loadwaits import AROUND_AFTER
from pvfs.collective._locks import BUSY, LockManager
from pvfs.collective._pages import Dirty, Meta
from pvfs.collective._wait import (
    Backoff,
    Bells,
    lower_switch_interval,
    restore_switch_interval,
    until,
)

REQ, REPLY = 11, 12
#: Seconds a home keeps polling with ``sched_yield`` after its last request before it sleeps
#: (100 µs at most, 1 ms after 10 ms idle): requests come in bursts, and a sleeping home adds
#: its sleep to every round trip.
SERVICE_YIELD_S = float(os.environ.get("PVFS_COLLECTIVE_SERVICE_YIELD_US", "1000")) * 1e-6
#: Seconds an idle home with a doorbell blocks in ``select()`` before it probes MPI again
#: (a request rings it awake at once; the probe is only for a lost ring). Issue 32 tried
#: 20 ms: CPU per byte after / before 0.94 for thread and servers, 0.88 for the unchanged
#: rma in the same interleaved run (bench/results/collective-cpu-ab2-2026-11-28.json) —
#: noise, no gain — so the default stays 1 ms, where a lost ring costs little.
SERVICE_IDLE_S = float(os.environ.get("PVFS_COLLECTIVE_SERVICE_IDLE_US", "1000")) * 1e-6
#: With doorbells (every rank on one host), a waiting caller or an idle home blocks in
#: the kernel as soon as its poll finds nothing: no quick retries, no ``sched_yield``
#: phase (issue 32: the yields and the polls between them were most of the message back
#: ends' CPU, and in ``thread`` an I/O thread that yields fights its own main thread for
#: the GIL; measured in docs/collective.md, issue 32). ``PVFS_COLLECTIVE_BLOCK=0``: yield
#: first, as before. Without doorbells the waits yield and sleep as before (a sleep is
#: not woken by a message).
BLOCK = os.environ.get("PVFS_COLLECTIVE_BLOCK", "1") != "0"


class Caller:
    """The client side: send a request, wait (sleeping) for the reply."""

    def __init__(self, comm: Any, serve: Any = None, bells: Bells | None = None,
                 limit: Any = None) -> None:
        self.comm = comm
        self.bells = bells
        self._bell = bells.waiter("caller") if bells is not None else None
        self.rank = comm.Get_rank()
        self._pending: list[Any] = []
        self._lock = threading.Lock()  # sends come from the main and read-ahead threads
        self.messages = 0
        # thread coordination: while the main thread waits it serves its rank's requests
        # too (Service.poll_once), so a round trip to a rank whose main thread is waiting
        # does not wait for that rank's I/O thread to be scheduled and get the GIL.
        self.serve = serve
        self.limit = limit  # (with serve) seconds until the served table has a deadline
        from mpi4py import MPI

        self._any_source = MPI.ANY_SOURCE
        self._status = MPI.Status()  # (replies: one waiting thread)
        self._early: dict[int, Any] = {}
        #: blocks on its doorbell at once (:data:`BLOCK`)
        self.blocks = BLOCK and self._bell is not None

    def send(self, dest: int, msg: Any, tag: int = REQ) -> None:
        # (read-ahead's helper thread sends its releases through the same caller)
        with self._lock:
            self.messages += 1
            self._pending.append(self.comm.isend(msg, dest=dest, tag=tag))
            # Test first (it progresses the send, so the message is there when the bell
            # rings).
            self._pending = [r for r in self._pending if not r.Test()]
        if self.bells is not None:
            self.bells.ring("service" if tag == REQ else "caller", dest)

    def reply(self, src: int, what: str) -> Any:
        return self.replies([src], what)[src]

    def replies(self, srcs: list[int], what: str) -> dict[int, Any]:
        """One reply from each of ``srcs``, taken in the order they arrive.

        One matched probe of any source per poll, not one per awaited source (issue 32:
        the probes of a waiting rank were most of the message back ends' CPU). Only one
        thread of a rank waits for replies (the main thread), so a reply from a source
        not awaited now can only be one a later call awaits: it is kept for that call."""
        early = self._early
        out: dict[int, Any] = {src: early.pop(src) for src in srcs if src in early}
        waiting = {src for src in srcs if src not in out}
        if not waiting:
            return out
        serve = self.serve
        comm, status, any_source = self.comm, self._status, self._any_source

        def poll() -> bool:
            while waiting:
                msg = comm.improbe(source=any_source, tag=REPLY, status=status)
                if msg is None:
                    # MPICH's first probe after a quiet spell moves what arrived meanwhile
                    # to its match queue but reports nothing (measured: after a doorbell
                    # the first probe missed the message in 600 of 600 trials, the
                    # second found it); a waiter that blocked after one empty probe
                    # would sleep until its timeout with the reply there.
                    msg = comm.improbe(source=any_source, tag=REPLY, status=status)
                    if msg is None:
                        break
                src = status.Get_source()
                value = msg.recv()
                if src in waiting:
                    out[src] = value
                    waiting.discard(src)
                else:
                    early[src] = value
            if waiting and serve is not None:
                while serve():
                    pass
            return not waiting

        until(poll, what, bell=self._bell, limit=self.limit if serve is not None else None,
              spins=0 if self.blocks else 3, yield_s=0.0 if self.blocks else None)
        return out

    def call(self, dest: int, msg: tuple) -> Any:
        self.send(dest, msg)
        return self.reply(dest, f"reply to {msg[0]} from rank {dest}")

    def drain(self) -> None:
        def sent() -> bool:
            with self._lock:
                self._pending = [r for r in self._pending if not r.Test()]
                return not self._pending

        until(sent, "outgoing requests")


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
        from mpi4py import MPI

        self._any_source = MPI.ANY_SOURCE
        self._status = MPI.Status()
        self.contended = False

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
        """What a release's grant of a queued batch sends (call under ``mutex``): the
        results, the bytes carried (``thread``) and the victims handed over with the
        grants (issue 32's victim cache, :meth:`LockManager.keep_victim`)."""
        items, wants, held = self._wants.pop(who, (None, None, None))
        handed = self.locks.handed.pop(who, {})
        carried = {} if items is None else self.carry(who, items, results, wants, held)
        loans = self.locks.lent.pop(who, None)  # (issue 32's loan slots, with the grants)
        return (results, carried, handed) if loans is None else \
            (results, carried, handed, loans)

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
        if not self._serving.acquire(blocking=False):
            self.contended = True  # (the other thread serves: do not block long after)
            return False
        try:
            if self.locks.timed:
                self._expire()
            # (one Status, reused under _serving: a poll is most of an idle home's CPU)
            msg = self.comm.improbe(source=self._any_source, tag=REQ,
                                    status=(status := self._status))
            if msg is None:  # (probe twice before reporting none: see Caller.replies)
                msg = self.comm.improbe(source=self._any_source, tag=REQ, status=status)
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
        bell = self.bells.waiter("service") if self.bells is not None else None
        blocks = BLOCK and bell is not None  # (then a request rings it awake)
        backoff = Backoff(cap=1e-4, yield_s=0.0 if blocks else self.yield_s, idle_after=0.01,
                          bell=bell, idle_cap=SERVICE_IDLE_S if bell is not None else 1e-3,
                          spins=0 if blocks else 3)
        try:
            while self.stopped < self.stops:
                if self.poll_once():
                    backoff.reset()
                else:
                    self._reap()
                    limit = self.wait_limit()
                    if self.contended:  # a ring drained while the main thread served:
                        self.contended = False  # requests may be left, probe again soon
                        limit = 1e-3 if limit is None else min(limit, 1e-3)
                    backoff.pause(limit)
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
                    reply = (result, self.carry(src, items, result, wants, held),
                             self.locks.handed.pop(src, {}))
                    if (loans := self.locks.lent.pop(src, None)) is not None:
                        reply = (*reply, loans)  # (issue 32's loan slots)
            if result is not None:
                self._send(src, reply)
        elif op == "claim":  # read-ahead: never queued, answered at once
            _, pages, owner, lead, room = msg
            with self.mutex:
                claimed = self.locks.claim_batch(src, owner, pages, lead, room)
                copies = self.locks.claim_copies.pop(src, None)
            # (victim copies the claims took go with the reply: ``(claimed, copies)``)
            self._send(src, claimed if not copies else (claimed, copies))
        elif op == "lend":  # issue 32's loan slots: a rank's slots for this home's pool
            with self.mutex:
                self.locks.lend(msg[1], list(msg[2]))
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
                pairs: list[tuple[Any, ...]]) -> list[tuple[int, Any]]:
    """Release ``src``'s pages (recording their new metadata); the waiters to answer. A
    pair is ``(page, meta or None)``, or ``(page, meta or None, (bytes, room))`` with the
    page's bytes for the victim cache (an eviction, or a victim given back unused)."""
    grants: list[tuple[int, Any]] = []
    for page, meta, *victim in pairs:
        grants.extend(locks.release(page, src, None if meta is None else Meta(*meta),
                                    victim[0] if victim else None))
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
