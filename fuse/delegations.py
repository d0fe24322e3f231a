"""Write delegations (``-o write_delegations``, with leases and creates ahead): a close that
does not wait for the write-back.

A small file's close used to wait for its data to reach the I/O daemons, and they for the
manager to hear of the new size (the issue-29 profile: three serial round trips per
``mdtest -w 3901`` file). NFSv4's write delegations and CephFS's buffered-write capability
are the anchors. A file this mount creates ahead (fuse/creates.py) is *written by it alone*:
the manager makes the mount its one writer when the create arrives
(``LeaseTable.write_delegate``), and until the mount writes the data back its size and data
are the mount's. Its ``close`` then writes nothing back: the flusher does within
``dirty_age``, ``fsync`` at once, and an unlink before that drops the data unwritten.

What keeps it correct:

- **Nobody else sees the file before its data are on the I/O daemons.** Another's lookup,
  getattr, listing, open or change of the file recalls the mount's lease of it first
  (daemons/mgr/leases.py), and the recall is answered only once the data are written back
  (:meth:`WriteDelegations._before_recall_answer`).
- **A write-back the mount starts itself** says ``writing`` over the lease connection
  before the data leave (the manager then lets others' reads wait, and the I/O daemons'
  size reports need not call the mount back) and ``written`` once they are all there.
- **This mount's own truncate, open with ``O_TRUNC`` and new layout** write it back first
  (:meth:`WriteDelegations.end`): the manager's truncation of the daemons would otherwise
  report sizes while the mount holds the data. A rename over it, or an unlink of its last
  name, drops its data unwritten (removals.py).
- **Times set explicitly** (``tar x``, ``cp -p``) on a file none of whose data have left
  go with its data: the manager keeps the times (its stripe files, all empty, do not
  count, daemons/mgr/stripefiles.py), and the write-back's data requests carry the mtime,
  which each I/O daemon sets after the bytes (:meth:`WriteDelegations.mtime_with_data`;
  else it is set before ``written``, :meth:`WriteDelegations.times_later`); a later
  write here moves the mtime on as usual. Once some data have left, explicit times write
  the file back first, then the manager sets them on the stripe files. (Setting them at
  once and again after the write-back doubled the stripe files' utimes, the costliest
  request of ``tar x``.) ``fsync`` sets them too before it returns.
- **A lease session that ends** ends every delegation: the data are written back at once
  (others may see the file meanwhile: the one window, as in NFSv4 after a lost lease).

With the C front end the flush of each close(2) of a file kept here is answered in C
(csrc/front/writes.c): the mount marks it in the front end's ``kept`` set (``mirror``)
when a write of it is done and :meth:`keeps` would hold it, and takes the mark away before
anything that could end or change that takes effect (the file leaves ``held``: its
write-back begins, a recall's too, or it is dropped; the session ends; the files' bound is
reached); the C side checks the session's deadline itself and drops the mark on every write
or size change before Python sees it.

Data not yet written back are lost with the mount (``kill -9``), as any not yet written
back; ``fsync`` makes them durable. Kept small: a file over :data:`FILE_BYTES_MAX` is
written back at its close, and past :data:`FILES_MAX` kept files written here the oldest
go in the background (a recall must be answered within a few seconds). Files never written
here cost a recall nothing; they are as many as the leases the mount keeps (leases.py:
a lease it forgets to bound its memory is written back and given up first).
"""

from __future__ import annotations

import itertools
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol

import trio

from .leases import LeaseCache

if TYPE_CHECKING:
    from pvfs.cache import BlockCache

log = logging.getLogger("pvfs.fuse")

__all__ = ["KeptMirror", "WriteDelegations"]

FILE_BYTES_MAX = 1 << 20  # a file larger than this is written back at its close
FILES_MAX = 1024          # files written here kept past their close; past that the oldest go
_PARALLEL = 32            # write-backs at once (a recall of many files, the background)
_LAST_WRITES = 1 << 16    # files whose last write time here is remembered


class KeptMirror(Protocol):
    """The files whose flush the front end answers itself (fuse/cfront.py): each marked one
    is a file :meth:`WriteDelegations.keeps` holds now."""

    def keep(self, ino: int) -> None: ...
    def drop(self, ino: int) -> None: ...
    def drop_all(self) -> None: ...


class WriteDelegations:
    """The files this mount writes alone, and the write-backs that end delegations.

    Args:
        cache: the node's block cache (the data kept, written back through it).
        leases: the lease session (its connection carries ``writing``/``written``; a
            recall's answer waits here; the session's end ends every delegation).
        data_mtime: ``(ino, size, mtime_ns)`` sets the mtime of the stripe files holding a
            file's ``size`` bytes (explicit times carried by the write-back).
    """

    def __init__(self, cache: BlockCache, leases: LeaseCache,
                 data_mtime: Callable[[int, int, int], Awaitable[None]]) -> None:
        self.cache, self.leases, self.data_mtime = cache, leases, data_mtime
        # ino -> ns of its last write here, also after its delegation ended (its lease and
        # the kernel's copy of its attributes stay: the mtime shown must not go back until
        # the manager pushes the file's attributes); dropped when a recall takes the lease.
        self.last_write: OrderedDict[int, int] = OrderedDict()
        self.held: dict[int, int] = {}   # ino -> ns of its last write here (0: none yet)
        # Of those, the ones written here, oldest first: what a recall may have to write
        # back (bounded by FILES_MAX; the others are bounded with the leases, leases.py).
        self.written: dict[int, None] = {}
        self.flushing: set[int] = set()  # written back now; ``written`` told when done
        self._untold: set[int] = set()   # of those, ``writing`` not yet told the manager
        self._gathered: set[int] = set()  # of those, begun by a gathered write-back
        # Explicit times that go with the data: ino -> (mtime, size) to set on the stripe
        # files the write-back fills; and the mtime shown here until the lease goes (the
        # manager's pushes during the write-back may show its data's mtime before it is set).
        self.times: dict[int, tuple[int, int]] = {}
        self.shown: OrderedDict[int, int] = OrderedDict()
        self._setting: dict[int, trio.Event] = {}  # times being set now
        self.carried: dict[int, int] = {}  # ino -> the mtime its written data carried
        self._queue_in, self._queue = trio.open_memory_channel[int](float("inf"))
        self._limit = trio.CapacityLimiter(_PARALLEL)
        # The C front end's set of files kept at close (None: pyfuse3, or a test option).
        self.mirror: KeptMirror | None = None
        self.counters = dict.fromkeys(("delegated", "refused", "kept_closes",
                                       "closes_written", "written_back", "dropped",
                                       "recalled", "lost", "times_later"), 0)
        leases.before_answer.append(self._before_recall_answer)
        leases.on_session_end.append(self._session_ended)

    # ------------------------------------------------------------------ the mount's side
    def start(self, ino: int) -> None:
        """``ino`` was just created ahead here: nobody else can see it until its create is
        at the manager, which then makes this mount its writer (or not: :meth:`landed`)."""
        self.held[ino] = 0

    def landed(self, ino: int, delegated: bool) -> None:
        """The manager made the create of ``ino``; it did or did not delegate the writes."""
        if delegated:
            self.counters["delegated"] += 1
        elif self._pop(ino):
            self.counters["refused"] += 1
            self._queue_in.send_nowait(ino)  # others may see it now: its data go at once

    def forget(self, ino: int) -> None:
        """The create of ``ino`` was refused: there is nothing to write back."""
        self.drop_times(ino)
        self._pop(ino)

    def holds(self, ino: int) -> bool:
        return ino in self.held

    def wrote(self, ino: int) -> None:
        """A write of ``ino`` is done here (before its reply: the flush after it finds the
        mark, writes.c; the C side dropped the mark when the write came in)."""
        self.drop_times(ino)  # (a write after explicit times moves the mtime on)
        if ino in self.held:
            self.held[ino] = now = time.time_ns()
            if ino not in self.written:
                self._growing()
            self.written[ino] = None
            self.last_write[ino] = now
            self.last_write.move_to_end(ino)
            if len(self.last_write) > _LAST_WRITES:
                self.last_write.popitem(last=False)
            if self.mirror is not None and self._would_keep(ino):
                self.mirror.keep(ino)

    def mtime(self, ino: int, mtime: int) -> int:
        """The mtime shown here for ``ino`` whose manager's is ``mtime``: its last write here,
        if later (until the write-back, and until the manager pushes the file's attributes
        after it); or its explicit mtime set here."""
        shown = self.shown.get(ino)
        return shown if shown is not None else max(mtime, self.last_write.get(ino, 0))

    def times_later(self, ino: int, before: int | None, mtime: int, size: int) -> bool:
        """The manager took an explicit ``mtime`` of ``ino`` (``data_sets_mtime``) while it
        was held here with its last write at ``before``. If it still is -- no data left and
        nothing written meanwhile -- its write-back sets the mtime of the stripe files it
        fills; else (False) the caller writes it back and sets the times as for any file."""
        if before is None or self.held.get(ino) != before:
            return False
        self.times[ino] = (mtime, size)
        self.last_write.pop(ino, None)
        self.shown[ino] = mtime
        self.shown.move_to_end(ino)
        if len(self.shown) > _LAST_WRITES:
            self.shown.popitem(last=False)
        self.counters["times_later"] += 1
        return True

    def times_here(self, ino: int, mtime: int) -> None:
        """An explicit mtime of ``ino``, held here, set ahead of the manager (creates.py):
        its write-back sets it on the stripe files it fills."""
        self.times_later(ino, self.held[ino], mtime, self.cache.size_hint(ino))

    def drop_times(self, ino: int) -> None:
        """The explicit times of ``ino`` set here no longer go with its data (a later write,
        the file gone, refused at the manager)."""
        self.times.pop(ino, None)
        self.carried.pop(ino, None)
        self.shown.pop(ino, None)

    def mtime_with_data(self, ino: int) -> int | None:
        """The backend's hook: the explicit mtime ``ino``'s data leaving now carry to the
        stripe files they fill (set there after them, before the reply), if any. Its data
        all leave in the write-back that ends its delegation (none had left before the
        times were set), so no stripe file holding data misses it."""
        got = self.times.get(ino)
        if got is None:
            return None
        self.carried[ino] = got[0]
        return got[0]

    async def settle(self, ino: int) -> None:
        """``fsync``: explicit times carried by ``ino``'s written-back data are set now."""
        event = self._setting.get(ino)
        if event is not None:
            await event.wait()
        elif ino in self.times and ino not in self.held:
            await self._set_times(ino)

    async def settle_all(self) -> None:
        """Unmount, after the cache's last write-back: every explicit times still to set."""
        for ino in [i for i in self.times if i not in self.held]:
            await self.settle(ino)

    async def _set_times(self, ino: int) -> None:
        got = self.times.pop(ino, None)
        if got is None or self.carried.pop(ino, None) == got[0]:
            return  # (none, or the data carried them)
        self._setting[ino] = event = trio.Event()
        try:
            await self.data_mtime(ino, got[1], got[0])
        except OSError as exc:  # (the data are there; only their mtime is not)
            log.warning("explicit mtime of delegated inode %d: %s", ino, exc)
        finally:
            del self._setting[ino]
            event.set()

    def keeps(self, ino: int, count: bool = True) -> bool:
        """Whether a close of ``ino`` may leave its data unwritten (``count``: a release,
        counted; not the ``flush`` of each close(2) before it)."""
        if not self._would_keep(ino):
            if count:
                self.counters["closes_written"] += ino in self.held
            return False
        if len(self.written) > FILES_MAX:  # the oldest go in the background, together
            # (a quarter of them: they go in one gathered write-back, not one per close)
            for oldest in list(itertools.islice(self.written, max(1, FILES_MAX // 4))):
                if oldest != ino:
                    self._begin(oldest)
                    self._queue_in.send_nowait(oldest)
        self.counters["kept_closes"] += count
        return True

    def _would_keep(self, ino: int) -> bool:
        return ino in self.held and self.leases.valid() and \
            self.cache.size_hint(ino) <= FILE_BYTES_MAX and \
            len(self.written) + len(self.flushing) < 2 * FILES_MAX

    def _growing(self) -> None:
        """One more file is about to be written here or written back: at the bound no close
        is kept (:meth:`keeps`), so the front end answers no flush from now on."""
        if self.mirror is not None and len(self.written) + len(self.flushing) + 1 >= \
                2 * FILES_MAX:
            self.mirror.drop_all()

    def dropped(self, ino: int) -> None:
        """The last name of ``ino`` went here before its data were written back: the caller
        dropped them (nothing is written for a removed file)."""
        self.drop_times(ino)
        if self._pop(ino):
            self.counters["dropped"] += 1

    async def end(self, ino: int) -> None:
        """Write ``ino`` back and end its delegation now (before this mount truncates it,
        renames over it, or opens it with ``O_TRUNC``)."""
        if ino in self.held or ino in self.flushing:
            await self._write_back(ino)
        await self.settle(ino)
        self.last_write.pop(ino, None)  # (the change that follows sets what is shown)
        self.shown.pop(ino, None)

    # ------------------------------------------------------------------ write-backs
    def before_write(self, ino: int) -> bool:
        """A file's data are about to leave for the I/O daemons (the cache's write-back, a
        write-through). Whether the manager must be told ``writing`` first, even if a
        recall dropped the lease meanwhile: the delegation ends (``written`` follows once
        the write-back is done), and others who would see the file wait for that."""
        if ino in self.held:
            self._begin(ino)
            self._queue_in.send_nowait(ino)  # (its ``written``: once this write-back is done)
        self._untold.discard(ino)
        return ino in self.flushing

    def before_writes(self, inos: list[int]) -> set[int]:
        """Many files' data leave at once (a gathered write-back, fuse/cachewire.py): those
        of them held here begin their write-back; the returned files keep their lease
        (:meth:`before_write`'s answer for each). Their ``writing`` goes in one word, the
        caller's; their ``written`` in one more, :meth:`after_writes`."""
        keep = set()
        for ino in inos:
            if ino in self.held:
                self._begin(ino)
                self._gathered.add(ino)
            self._untold.discard(ino)
            if ino in self.flushing:
                keep.add(ino)
        return keep

    async def after_writes(self, inos: list[int]) -> None:
        """The gathered write-back of ``inos`` is done: the delegations it began end."""
        done = [i for i in inos if i in self._gathered]
        self._gathered.difference_update(done)
        done = [i for i in done if i in self.flushing]  # (else ended meanwhile: end())
        for ino in done:  # (its lease stays; the manager knows the blocks)
            self.leases.written_here(ino)
            self.flushing.discard(ino)
        if done:
            self.counters["written_back"] += len(done)
            await self.leases.tell("written", done)

    def carries_times(self, ino: int) -> bool:
        """Whether explicit times go with ``ino``'s data (its write-back is one by one)."""
        return ino in self.times

    def _pop(self, ino: int) -> bool:
        if self.mirror is not None:  # (first: its close is no longer kept)
            self.mirror.drop(ino)
        self.written.pop(ino, None)
        return self.held.pop(ino, None) is not None

    def _begin(self, ino: int) -> None:
        self._pop(ino)
        self._growing()
        self.flushing.add(ino)
        self._untold.add(ino)  # ``writing`` not said yet

    async def _write_back(self, ino: int) -> None:
        """Write ``ino`` back (after a write-back in progress), then say ``written``."""
        if ino in self.held:
            self._begin(ino)
        if ino in self._untold:
            self._untold.discard(ino)
            await self.leases.tell("writing", [ino])
        async with self._limit:
            try:
                await self.cache.flush(ino)
                await self._set_times(ino)  # (before ``written``: others wait for it)
            except OSError as exc:  # (parked: its next fsync or close reports it too)
                log.warning("write-back of delegated inode %d: %s", ino, exc)
            finally:
                if ino in self.flushing:  # (its lease stays; the manager knows the blocks)
                    self.leases.written_here(ino)
                    self.flushing.discard(ino)
                    self.counters["written_back"] += 1
                    await self.leases.tell("written", [ino])

    async def _write_back_many(self, inos: list[int]) -> None:
        """:meth:`_write_back` for many files at once: one ``writing``, the small ones
        gathered into one request per I/O daemon (``BlockCache.flush_many``), one
        ``written``."""
        for ino in inos:
            if ino in self.held:
                self._begin(ino)
        untold = [i for i in inos if i in self._untold]
        self._untold.difference_update(untold)
        try:
            if untold:
                await self.leases.tell("writing", untold)
            async with self._limit:
                errors = await self.cache.flush_many(inos)
                for ino, exc in errors.items():  # (parked: its next fsync or close too)
                    log.warning("write-back of delegated inode %d: %s", ino, exc)
                for ino in inos:
                    await self._set_times(ino)  # (before ``written``: others wait for it)
        finally:
            done = [i for i in inos if i in self.flushing]
            for ino in done:
                self.leases.written_here(ino)
                self.flushing.discard(ino)
            self.counters["written_back"] += len(done)
            if done:
                await self.leases.tell("written", done)

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Finish the write-backs begun elsewhere (the flusher's, ``keeps``' oldest, the
        session's end): those queued together go together."""
        async with trio.open_nursery() as nursery:
            task_status.started()
            async for ino in self._queue:
                inos = [ino]
                while True:
                    try:
                        inos.append(self._queue.receive_nowait())
                    except trio.WouldBlock:
                        break
                if len(inos) == 1:
                    nursery.start_soon(self._write_back, ino)
                else:
                    nursery.start_soon(self._write_back_many, list(dict.fromkeys(inos)))

    # ------------------------------------------------------------------ leases
    async def _before_recall_answer(self, inos: list[int]) -> None:
        """Another is about to see or change these files. Those kept here are written back
        before the answer; for those being written back now, ``writing`` goes before the
        answer (the manager then holds the other until ``written``): waiting here for that
        write-back could wait for the answer itself."""
        for ino in inos:  # (the lease goes: what the manager answers next is the file's)
            self.last_write.pop(ino, None)
            self.shown.pop(ino, None)
        # (the write-back of those kept begins with ``_begin``, which takes their mark in
        # the front end away first: their closes go to Python before the data leave)
        kept = [i for i in inos if i in self.held]
        going = [i for i in inos if i in self.flushing]
        if going:
            self._untold.difference_update(going)
            await self.leases.tell("writing", going)
        if not kept:
            return
        self.counters["recalled"] += len(kept)
        await self._write_back_many(kept)

    def _session_ended(self) -> None:
        """The delegations went with the session: every kept file is written back now."""
        if self.mirror is not None:  # (first: no close is kept from now on)
            self.mirror.drop_all()
        lost = [*self.held, *self.flushing]
        self.counters["lost"] += len(self.held)
        self.held.clear()
        self.written.clear()
        self.flushing.clear()
        self._untold.clear()
        self._gathered.clear()
        self.last_write.clear()  # (the leases and the kernel's copies went with the session)
        self.shown.clear()  # (the times still to set go with the write-backs queued here)
        for ino in lost:
            self._queue_in.send_nowait(ino)

    def status(self) -> dict:
        return {**self.counters, "held": len(self.held), "written": len(self.written),
                "flushing": len(self.flushing), "times_pending": len(self.times)}
