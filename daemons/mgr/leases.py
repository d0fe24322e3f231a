"""Leases: the manager lets a mount answer ``lookup``, ``getattr`` and negative lookups itself.

A mount that wants leases opens a *lease connection* to the manager (``lease_register``,
under a name unique to it) and names itself in its requests (the ``lease`` field). Replies
that carry an inode's attributes then also say which inodes it now holds a lease on
(``leased``). A lease on an inode covers its attributes; on a directory also its entries: the
names in it and the names *not* in it. The mount keeps what it learned of a leased inode and
answers from it until the lease is recalled.

The rules (NFSv4's client leases and delegations, CephFS's capabilities are the anchors):

- **Sessions.** A holder's leases live as long as its session: the mount renews it over the
  lease connection (``renew``, every ``term / 4``); the manager counts a session valid until
  ``term`` after the last renewal it received, the mount until ``term`` after the last
  renewal it *sent* that was answered — so the mount always gives up first.
- **Recall before change.** Every change of an inode's attributes or of a directory's
  entries goes through :meth:`LeaseTable.changing`: no new lease on those inodes is granted
  while it runs, and every other holder is called back (``recall``) and must answer before
  the change is made. The holder that makes the change keeps its lease: it applies its own
  change to what it knows (the kernel already orders a mount's changes in one directory).
  The I/O daemons' reports of size changes (``sizes_changed``) recall too, before the
  write they announce is acknowledged (the writer has given its lease up: ``writing``).
- **A holder that does not answer** within the recall timeout is *fenced*: the change waits
  until its session has expired (by then the mount has stopped answering from its leases on
  its own), then goes on. A fenced holder's later requests are refused (``ESTALE``) until it
  registers again, with nothing learned kept. A lease connection that closes (the mount
  process ended, or gave its leases up) ends its session at once.
- **Clock.** A counter moves at the start and at the end of every change, which stamps the
  inodes it changes; a grant compares those stamps with the clock read before its answer
  was built (:meth:`LeaseTable.now`), so an answer that a change overtook is never leased.

- **Leases given back after a write.** A size report recalls every holder of the file (the
  writer gave its lease up before it wrote). When the manager has the new size
  (refetch.py) it leases the file again to the holders that report took it from, the writer
  too, pushing the attributes over their lease connections (``grant``): the next ``stat`` on the writer's node, and the others', is answered there.
  A push travels the same connection as any later recall, so it can never arrive after one.

- **The writer gives its lease up itself.** A mount about to write a file's data drops its
  lease of the file's attributes and says so (``writing``) before the write leaves: the size
  report then recalls the other holders only, and the writer gets the lease back with them
  (the issue-29 profile: the writer's own recall was half of a small file's close).

- **Write delegations** (NFSv4's write delegations, CephFS's buffered-write capability). A
  file a mount creates ahead is *written* by it alone (:meth:`LeaseTable.write_delegate`):
  its data and size are the mount's until it writes them back, so it may close the file
  without writing back. Before another than the writer sees the file (its attributes in a
  lookup, getattr or listing, an open, a path that ends at it) or changes it, the writer is
  recalled (:meth:`LeaseTable.reading`, :meth:`LeaseTable.changing`) and answers once the
  data are on the I/O daemons. A writer that writes back on its own says ``writing`` first:
  the file is then *flushing* -- others' reads and changes of it wait for its ``written``
  (or its session's end), the I/O daemons' size reports do not (they come from that very
  write-back).

Lease frames (manager -> mount): ``{"op": "recall", "seq": n, "inos": [...]}``, answered
``{"seq": n}`` after the mount dropped them; ``{"op": "grant", "attrs": [...]}``, not
answered; ``{"op": "renewed", "term": t}`` answering the mount's ``{"op": "renew"}``. A mount
that forgets leases to bound its memory gives them back (``{"op": "release", "inos": [...]}``,
not answered), so the manager's table stays as small as what the mounts hold; one about to
write files gives theirs up (``{"op": "writing", "inos": [...]}``, not answered), and says
when the write-back of files it was delegated is done (``{"op": "written", "inos": [...]}``).
"""

from __future__ import annotations

import errno
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager

import trio

from pvfs.protocol import aio

log = logging.getLogger("pvfs.mgr")

__all__ = ["LeaseTable"]

_STAMPS_MAX = 1 << 17  # changed inodes remembered; past that the clock's floor moves up
_WRITER_SLACK = 3  # a recall of delegated files waits this many times the recall timeout


class _Holder:
    """One mount's session: its lease connection, the inodes it holds, its renewals."""

    def __init__(self, name: str, sock, now: float) -> None:
        self.name = name
        self.sock = sock
        self.send_lock = trio.Lock()
        self.waiting: dict[int, trio.Event] = {}
        self.seq = 0
        self.renewed = now
        self.inos: set[int] = set()
        self.fenced = False
        self.closed = trio.Event()
        self.exclusive: set[int] = set()  # directories it creates in ahead of the manager
        self.delegated: set[int] = set()  # pool numbers it may give the files it creates
        self.dir_numbers: set[int] = set()  # numbers it may give the directories it makes


class LeaseTable:
    """Who holds which inode, the recalls, the sessions.

    Args:
        term: a session's length without renewal, seconds (0: no leases are granted).
        recall: False only in tests: changes do not call holders back (``pvfs-admin check``
            must then fail, which shows it can).
        timeout: how long a recall waits for an answer before the holder is fenced.
    """

    def __init__(self, term: float, recall: bool = True, timeout: float = 2.0) -> None:
        self.term = term
        self.recall_enabled = recall
        self.timeout = min(timeout, term) if term else timeout
        self.holders: dict[str, _Holder] = {}
        self.by_ino: dict[int, set[str]] = {}
        self.busy: dict[int, int] = {}     # ino -> changes in progress (no grants meanwhile)
        self.clock = 0
        self.changed: dict[int, int] = {}   # ino -> clock of its last change's start or end
        self.floor = 0                      # answers read before this clock: no grants
        self.fenced: set[str] = set()       # names refused until they register again
        self.reported: dict[int, set[str]] = {}  # ino -> holders a size report recalled
        self.exclusive: dict[int, str] = {}  # directory -> the one holder creating in it
        # Called with a session's unused delegated numbers when it ends (back to the pool).
        self.on_undelegated: Callable[[set[int]], None] | None = None
        # Called with delegated files written back (their sizes fetched again, pushed).
        self.on_written: Callable[[list[int]], None] | None = None
        # Write delegations: file -> the one holder whose data and size it is (not written
        # back yet); file -> (holder, set when its write-back is done) while it writes back.
        self.writers: dict[int, str] = {}
        self.flushing: dict[int, tuple[str, trio.Event]] = {}
        self.counters = dict.fromkeys(("granted", "recalls", "recalled", "fenced", "pushed",
                                       "writing", "write_delegations", "written",
                                       "flush_waits"), 0)

    # ------------------------------------------------------------------ sessions
    def _valid(self, h: _Holder, now: float) -> bool:
        return not h.fenced and now - h.renewed < self.term

    def check(self, name: str | None) -> None:
        """Refuse a request from a fenced holder (its leases were taken away unanswered)."""
        if name is not None and name in self.fenced:
            raise OSError(errno.ESTALE, f"lease holder {name} was fenced after an unanswered "
                                        "recall; register again")

    async def serve_holder(self, name: str, sock) -> None:
        """Own a registered lease connection until it closes (runs in its request task)."""
        old = self.holders.pop(name, None)
        if old is not None:
            self._drop(old)
        self.fenced.discard(name)
        h = _Holder(name, sock, time.monotonic())
        self.holders[name] = h
        log.info("leases: holder %s registered (term %.1f s)", name, self.term)
        try:
            await aio.send_frame(sock, {"ok": True, "term": self.term})
            while True:
                got = await aio.recv_frame(sock, self.term * 2)
                if got is None:
                    break
                header, _ = got
                if header.get("op") == "release":  # leases the mount forgot
                    self._release(h, [i for i in header.get("inos", ()) if isinstance(i, int)])
                    continue
                if header.get("op") == "writing":  # files the mount is about to write
                    self._writing(h, [i for i in header.get("inos", ()) if isinstance(i, int)])
                    continue
                if header.get("op") == "written":  # delegated files now on the daemons
                    self._written(h, [i for i in header.get("inos", ()) if isinstance(i, int)])
                    continue
                if header.get("op") == "renew":
                    if h.fenced:
                        break
                    h.renewed = time.monotonic()
                    async with h.send_lock:
                        await aio.send_frame(sock, {"op": "renewed", "term": self.term})
                    continue
                ev = h.waiting.pop(header.get("seq", -1), None)
                if ev is not None:
                    ev.set()
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError,
                ValueError) as exc:
            log.info("leases: holder %s dropped: %s", name, exc)
        finally:
            if self.holders.get(name) is h:
                del self.holders[name]
            self._drop(h)

    def _drop(self, h: _Holder) -> None:
        """A session ended: its leases go (its waiting recalls are answered by that), and
        its delegated numbers back to the pool."""
        h.closed.set()
        for ev in h.waiting.values():
            ev.set()
        h.waiting.clear()
        if h.delegated and self.on_undelegated is not None:
            self.on_undelegated(h.delegated)
        h.delegated = set()
        for ino in h.exclusive:
            if self.exclusive.get(ino) == h.name:
                del self.exclusive[ino]
            if self.writers.get(ino) == h.name:
                del self.writers[ino]
        h.exclusive.clear()
        self._written(h, [i for i, (name, _) in list(self.flushing.items()) if name == h.name])
        for ino in h.inos:
            names = self.by_ino.get(ino)
            if names is not None:
                names.discard(h.name)
                if not names:
                    del self.by_ino[ino]
        h.inos.clear()

    # ------------------------------------------------------------------ grants
    def now(self) -> int:
        """The clock, read before an answer is built (for :meth:`grant`)."""
        return self.clock

    def _stamp(self, inos: list[int]) -> None:
        self.clock += 1
        if len(self.changed) > _STAMPS_MAX:
            self.changed.clear()
            self.floor = self.clock
        for ino in inos:
            self.changed[ino] = self.clock

    def grant(self, name: str | None, inos: Iterable[int], seen: int) -> list[int]:
        """Lease ``inos`` to ``name``, their answer built from what the store held at clock
        ``seen``; the inodes granted (none while a change of one runs or overtook it)."""
        if name is None or not self.term or seen < self.floor:
            return []
        h = self.holders.get(name)
        if h is None or not self._valid(h, time.monotonic()):
            return []
        out = []
        for ino in inos:
            if self.busy.get(ino) or self.changed.get(ino, 0) > seen or \
                    self.exclusive.get(ino, name) != name or \
                    self.writers.get(ino, name) != name or ino in self.flushing:
                continue
            h.inos.add(ino)
            self.by_ino.setdefault(ino, set()).add(name)
            out.append(ino)
        self.counters["granted"] += len(out)
        return out

    def _writing(self, h: _Holder, inos: list[int]) -> None:
        """``h`` is about to write these files' data: it dropped its leases of them itself,
        so the I/O daemons' size reports need not call it back; it gets them back with the
        others the reports recalled, once the new sizes are known (:meth:`push`). Not
        directories it creates in (those are given up by a recall only)."""
        files = [i for i in inos if i in h.inos and
                 (i not in h.exclusive or self.writers.get(i) == h.name)]
        if len(self.reported) > _STAMPS_MAX:
            self.reported.clear()
        given_up = []
        for ino in files:
            self.reported.setdefault(ino, set()).add(h.name)
            if self.writers.get(ino) == h.name:
                # Its delegated data leave: others wait for ``written``; it keeps its lease
                # (what it shows of the file is its own writes), not called back by the
                # reports of this write-back.
                del self.writers[ino]
                h.exclusive.discard(ino)
                self.flushing[ino] = (h.name, trio.Event())
            else:
                given_up.append(ino)
        self._release(h, given_up)
        self.counters["writing"] += len(files)

    def _written(self, h: _Holder, inos: list[int]) -> None:
        """``h``'s write-back of these delegated files is done: what waited goes on, and
        their sizes are fetched again (the I/O daemons' reports of this write-back leave
        that to this call: server.op_sizes_changed) and pushed to ``h`` where it kept its
        lease."""
        done = []
        for ino in inos:
            got = self.flushing.get(ino)
            if got is not None and got[0] == h.name:
                del self.flushing[ino]
                got[1].set()
                self.counters["written"] += 1
                if ino in h.inos:
                    self.reported.setdefault(ino, set()).add(h.name)
                done.append(ino)
        if done and self.on_written is not None:
            self.on_written(done)

    def write_delegate(self, name: str | None, ino: int) -> bool:
        """Make ``name`` the one writer of file ``ino``, which it just created and leases
        alone: its data and size are the holder's until it writes them back or is recalled.
        """
        h = self.holders.get(name) if name is not None else None
        if h is None or not self._valid(h, time.monotonic()) or self.busy.get(ino) or \
                self.by_ino.get(ino) != {h.name}:
            return False
        self.writers[ino] = h.name
        h.exclusive.add(ino)
        self.counters["write_delegations"] += 1
        return True

    def writes_alone(self, name: str | None, ino: int) -> bool:
        """Whether holder ``name`` is file ``ino``'s delegated writer (none of its data on
        the I/O daemons yet: the delegation ends when they leave, ``writing``)."""
        return name is not None and self.writers.get(ino) == name

    def gone(self, ino: int) -> None:
        """Inode ``ino`` was removed: no one writes it any more."""
        name = self.writers.pop(ino, None)
        h = self.holders.get(name) if name is not None else None
        if h is not None:
            h.exclusive.discard(ino)

    async def settle(self) -> None:
        """Let the lease connections' tasks read the frames that arrived by now (two
        scheduling rounds: one to poll the sockets, one to run their readers)."""
        if self.holders:
            await trio.lowlevel.checkpoint()
            await trio.lowlevel.checkpoint()

    def note_reported(self, inos: list[int]) -> None:
        """A size report of ``inos`` is about to recall their holders: remember them, to
        lease the files again once the new sizes are known (:meth:`push`)."""
        if len(self.reported) > _STAMPS_MAX:
            self.reported.clear()
        for ino in inos:
            names = self.by_ino.get(ino)
            if names:
                self.reported.setdefault(ino, set()).update(names)

    async def push(self, files: list[dict], seen: int) -> None:
        """Lease ``files`` (attributes as the store and the daemons had them at clock
        ``seen``) again to the holders a size report recalled, sending them the attributes."""
        out: dict[str, list[dict]] = {}
        for a in files:
            for name in self.reported.pop(a["ino"], ()):
                if self.grant(name, [a["ino"]], seen):
                    out.setdefault(name, []).append(a)
        for name, attrs in out.items():
            h = self.holders.get(name)
            if h is None:
                continue
            try:
                async with h.send_lock:
                    await aio.send_frame(h.sock, {"op": "grant", "attrs": attrs})
                self.counters["pushed"] += len(attrs)
            except (OSError, trio.BrokenResourceError, trio.ClosedResourceError):
                self._release(h, [a["ino"] for a in attrs])

    # ------------------------------------------------------------------ creates ahead
    def delegate(self, name: str | None, directory: int) -> bool:
        """Let ``name`` create in ``directory`` ahead of the manager: only while it is the
        directory's one holder and nothing changes it. Ends with the lease (a recall,
        which :meth:`reading` sends before anyone else reads the directory)."""
        h = self.holders.get(name) if name is not None else None
        if h is None or not self._valid(h, time.monotonic()) or self.busy.get(directory):
            return False
        if self.by_ino.get(directory) != {h.name}:
            return False
        self.exclusive[directory] = h.name
        h.exclusive.add(directory)
        return True

    def holder(self, name: str | None) -> _Holder | None:
        return self.holders.get(name) if name is not None else None

    async def reading(self, inos: Iterable[int], actor: str | None = None) -> None:
        """Before another than the creating holder reads a directory it creates in (its
        names, its attributes, a path through it), or than the writer a file it was
        delegated: recall that holder's lease, whose answer waits until its creates are
        made here (fuse/creates.py) or its data are on the I/O daemons
        (fuse/delegations.py); a file being written back is waited for."""
        if not (self.exclusive or self.writers or self.flushing):
            return
        inos = list(inos)
        wanted = [i for i in inos if self.exclusive.get(i, actor) != actor or
                  self.writers.get(i, actor) != actor]
        if wanted:
            await self.recall(wanted, actor)
        await self.flushed(inos, actor)

    async def flushed(self, inos: Iterable[int], actor: str | None = None) -> None:
        """Wait until no holder but ``actor`` is writing back a delegated file of ``inos``
        (its ``written``, or its session's end; at most ``term``)."""
        if not self.flushing:
            return
        with trio.move_on_after(self.term or self.timeout):
            for ino in inos:
                got = self.flushing.get(ino)
                if got is not None and got[0] != actor:
                    self.counters["flush_waits"] += 1
                    await got[1].wait()

    def created_in(self, inos: Iterable[int], actor: str | None = None) -> list[int]:
        """Those of ``inos`` another holder than ``actor`` creates in ahead of the manager,
        or writes alone: an answer that shows their attributes must recall it first
        (:meth:`reading`)."""
        if not (self.exclusive or self.writers or self.flushing):
            return []
        return [i for i in inos if self.exclusive.get(i, actor) != actor or
                self.writers.get(i, actor) != actor or
                self.flushing.get(i, (actor,))[0] != actor]

    async def reading_all(self, actor: str | None = None) -> None:
        """Before a read that may pass through any directory (a path walked by the
        manager): every directory created in ahead of the manager, but ``actor``'s (files
        delegated are recalled only when an answer shows them: :meth:`created_in`)."""
        if self.exclusive:
            await self.reading(list(self.exclusive), actor)

    # ------------------------------------------------------------------ changes
    @asynccontextmanager
    async def changing(self, inos: Iterable[int], actor: str | None = None,
                       report: bool = False) -> AsyncIterator[None]:
        """Around a change of ``inos``: no grants on them, every holder but ``actor``
        called back first, delegated files' write-backs waited for -- not by an I/O
        daemon's size ``report``, which such a write-back itself sends."""
        inos = [i for i in dict.fromkeys(inos) if i]
        for ino in inos:
            self.busy[ino] = self.busy.get(ino, 0) + 1
        self._stamp(inos)
        try:
            await self.recall(inos, actor, report)
            if not report:
                await self.flushed(inos, actor)
            yield
        finally:
            for ino in inos:
                left = self.busy[ino] - 1
                if left:
                    self.busy[ino] = left
                else:
                    del self.busy[ino]
            self._stamp(inos)

    async def recall(self, inos: list[int], actor: str | None = None,
                     report: bool = False) -> None:
        """Call back every holder of ``inos`` but ``actor`` and wait for each to answer (or
        to be fenced and its session over). A size ``report`` does not call back a file's
        delegated writer: only its own write-back can have sent it."""
        if not self.recall_enabled:
            return
        targets: dict[str, list[int]] = {}
        for ino in inos:
            for name in self.by_ino.get(ino, ()):
                if name != actor and not (report and (
                        self.writers.get(ino) == name or
                        self.flushing.get(ino, (None,))[0] == name)):
                    targets.setdefault(name, []).append(ino)
        if not targets:
            return
        self.counters["recalls"] += 1
        async with trio.open_nursery() as nursery:
            for name, held in targets.items():
                h = self.holders.get(name)
                if h is not None:
                    nursery.start_soon(self._recall_one, h, held)

    async def _recall_one(self, h: _Holder, inos: list[int]) -> None:
        h.seq += 1
        seq = h.seq
        ev = trio.Event()
        h.waiting[seq] = ev
        answered = False
        # A writer's answer waits for its write-back (small files: the mount keeps few).
        limit = self.timeout
        if any(self.writers.get(i) == h.name for i in inos):
            limit = min(self.term or limit, limit * _WRITER_SLACK)
        with trio.move_on_after(limit):
            try:
                async with h.send_lock:
                    await aio.send_frame(h.sock, {"op": "recall", "seq": seq, "inos": inos})
                await ev.wait()  # set by the answer, or by the session's end
                answered = True
            except (OSError, trio.BrokenResourceError, trio.ClosedResourceError):
                pass
        h.waiting.pop(seq, None)
        if answered or h.closed.is_set():
            self._release(h, inos)
            self.counters["recalled"] += len(inos)
            return
        # Unanswered: fence it, and wait out its session (the mount stops by itself by then).
        log.warning("leases: holder %s did not answer a recall of %d inodes; fenced",
                    h.name, len(inos))
        self.counters["fenced"] += 1
        h.fenced = True
        self.fenced.add(h.name)
        left = h.renewed + self.term - time.monotonic()
        if left > 0:
            await trio.sleep(left)
        self._drop(h)
        if self.holders.get(h.name) is h:
            del self.holders[h.name]
        try:
            h.sock.close()
        except OSError:
            pass

    def _release(self, h: _Holder, inos: list[int]) -> None:
        for ino in inos:
            h.inos.discard(ino)
            if self.exclusive.get(ino) == h.name:
                del self.exclusive[ino]
                h.exclusive.discard(ino)
            if self.writers.get(ino) == h.name:
                del self.writers[ino]
                h.exclusive.discard(ino)
            names = self.by_ino.get(ino)
            if names is not None:
                names.discard(h.name)
                if not names:
                    del self.by_ino[ino]

    def status(self) -> dict:
        return {"term": self.term, "holders": len(self.holders),
                "leased": sum(len(h.inos) for h in self.holders.values()),
                "writers": len(self.writers), "flushing": len(self.flushing),
                "recall": self.recall_enabled, **self.counters}
