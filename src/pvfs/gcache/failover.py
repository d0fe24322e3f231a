"""What the client of the global caches does when one fails (SPEC §6; docs/caching.md,
"Failure"): mark it down and go direct, keep every write sent through it in a *journal* until
it is written back, write the journal directly when the daemon fails or comes back with a new
epoch (it lost its dirty blocks), and before a daemon that was only slow is used again, have
it drop its copies of what this client wrote directly meanwhile.

:class:`Failover` is a part of :class:`~.backend.GcacheBackend`; every request the backend
sends to a global cache runs under its :meth:`Failover.guard`, the one place a daemon's
failure is caught.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import trio

log = logging.getLogger("pvfs.gcache")

#: One journalled write: ``[offset, data, epoch of the daemon that took it]`` (None: no
#: answer yet).
Entry = list


class Attempt:
    """What became of the requests under one :meth:`Failover.guard`: ``failed`` when the
    daemon failed (it is marked down; the caller goes direct)."""

    __slots__ = ("failed",)

    def __init__(self) -> None:
        self.failed = False


class Failover:
    """The failure handling of one client of the global caches: which daemons are down, the
    journal of writes sent through them, and the direct writes a down daemon must drop.

    Its interface: :meth:`guard` (around requests to a daemon: catches its failure),
    :meth:`up`, :meth:`ensure` (before a daemon that failed is used again),
    :meth:`check_epoch` (every reply's epoch), :meth:`replay`; the journal: ``journal``,
    ``journal_bytes``, :meth:`add`, :meth:`refused`, :meth:`drop`, :meth:`largest`,
    :meth:`written_back`; :meth:`wrote_direct` (a direct write a down daemon must drop).

    Args:
        count: how many global caches there are.
        call: ``call(idx, header)``, a request without bulk to global cache ``idx``
            (``invalidate``, ``forget``).
        direct: the I/O daemons' backend (its ``write``: the journal written directly).
        index: the global cache of an inode.
        counters: the backend's counters (``failovers``, ``journal_replays`` counted here).
        enabled: False: no global cache is ever up (mount option ``gcache=off``).
        retry_after: seconds a failed global cache is left alone.
    """

    def __init__(self, count: int, call: Callable[[int, dict], Awaitable[dict]], direct,
                 index: Callable[[int], int], counters: dict[str, int], *,
                 enabled: bool = True, retry_after: float = 5.0) -> None:
        self.call = call
        self.direct = direct
        self.index = index
        self.counters = counters
        self.enabled = enabled
        self.retry_after = retry_after
        self.down_until = [0.0] * count
        self.epochs: list[int | None] = [None] * count  # last seen per daemon
        # daemon -> ino -> [(offset, data)] written directly since the daemon failed
        self.rejoin: dict[int, dict[int, list[tuple[int, bytes]]]] = {}
        self.journal: dict[int, list[Entry]] = {}
        self.journal_bytes = 0

    # ------------------------------------------------------------------ failure
    def up(self, idx: int) -> bool:
        return self.enabled and time.monotonic() >= self.down_until[idx]

    @contextlib.asynccontextmanager
    async def guard(self, idx: int, *, replay: bool = True,
                    refused: Callable[[], None] | None = None) -> AsyncIterator[Attempt]:
        """Around requests to global cache ``idx``. If it fails (no answer in time, the
        connection lost or refused) it is marked down for ``retry_after`` seconds, the
        journal of its files is written directly (unless ``replay`` is False: the next
        flush does it), and the failure ends here with ``failed`` set on the yielded
        :class:`Attempt`: the caller goes direct. An error the daemon answered with
        (:func:`daemon_said`) is the caller's: it passes, after ``refused()``."""
        attempt = Attempt()
        try:
            yield attempt
        except (OSError, trio.TooSlowError) as exc:
            if daemon_said(exc):
                if refused is not None:
                    refused()
                raise
            attempt.failed = True
            self._fail(idx, exc)
            if replay:
                await self.replay(idx)

    def _fail(self, idx: int, exc: BaseException) -> None:
        # A daemon that was only slow may still hold (even dirty) copies of what this client
        # now writes directly: remember those writes until the daemon is used again.
        self.rejoin.setdefault(idx, {})
        self.down_until[idx] = time.monotonic() + self.retry_after
        self.counters["failovers"] += 1
        log.warning("global cache %d failed (%s): direct I/O for %g s", idx, exc,
                    self.retry_after)

    def wrote_direct(self, ino: int, writes) -> None:
        """``writes`` (``(offset, data)``) of ``ino`` went to the I/O daemons: if its global
        cache failed, it must drop its copies of them before it is used again
        (:meth:`ensure`)."""
        pending = self.rejoin.get(self.index(ino))
        if pending is not None:
            pending.setdefault(ino, []).extend((off, bytes(data)) for off, data in writes)

    async def ensure(self, idx: int) -> None:
        """Before a failed daemon is used again: have it write back and drop its copies of
        the files this client wrote directly meanwhile, then write those writes again (the
        daemon's write-back may have been older data)."""
        pending = self.rejoin.get(idx)
        if pending is None or not self.up(idx):
            return
        del self.rejoin[idx]

        def restore() -> None:
            merged = self.rejoin.setdefault(idx, {})
            for ino, entries in pending.items():
                merged[ino] = entries + merged.get(ino, [])

        async with self.guard(idx, replay=False, refused=restore) as attempt:
            for ino, entries in pending.items():
                lo = min(o for o, _ in entries)
                hi = max(o + len(b) for o, b in entries)
                await self.call(idx, {"op": "invalidate", "ino": ino, "offset": lo,
                                      "length": hi - lo})
                for off, blob in entries:
                    await self.direct.write(ino, off, blob)
        if attempt.failed:
            restore()

    async def check_epoch(self, idx: int, epoch: int | None) -> bool:
        """Note daemon ``idx``'s epoch from a reply. When it changed (the daemon restarted and
        lost its dirty blocks), every journalled file of that daemon is dropped there (blocks it
        fetched since may predate our lost writes) and its journal written directly; True
        then, if there was any."""
        old, self.epochs[idx] = self.epochs[idx], epoch
        if old is None or epoch is None or old == epoch:
            return False
        inos = [i for i in self.journal if self.index(i) == idx]
        log.warning("global cache %d restarted: writing the journal of %d files directly",
                    idx, len(inos))
        for ino in inos:
            try:
                await self.call(idx, {"op": "forget", "ino": ino})
            except (OSError, trio.TooSlowError):
                pass
        await self.replay(idx)
        return bool(inos)

    async def replay(self, idx: int) -> None:
        """Write every journalled write of files of global cache ``idx`` to the I/O daemons
        (that daemon failed: what it had not written back is gone)."""
        for ino in [i for i in self.journal if self.index(i) == idx]:
            entries = self.journal.get(ino, [])
            for off, blob, _ in list(entries):
                await self.direct.write(ino, off, blob)
            self.drop(ino)
            self.counters["journal_replays"] += 1

    # ------------------------------------------------------------------ the journal
    def add(self, ino: int, writes: list[tuple[int, bytes]]) -> list[Entry]:
        """Journal ``writes`` of ``ino`` about to go through its global cache; their entries
        (the caller sets each one's epoch from the reply that took it)."""
        entries: list[Entry] = [[off, blob, None] for off, blob in writes]
        self.journal.setdefault(ino, []).extend(entries)
        self.journal_bytes += sum(len(blob) for _, blob in writes)
        return entries

    def refused(self, ino: int, entries: list[Entry]) -> None:
        """The daemon answered ``entries`` with an error: forget those it did not take (no
        epoch), they are not to be written again."""
        if ino in self.journal:
            self.journal[ino] = self._without(ino, {id(e) for e in entries if e[2] is None})

    def drop(self, ino: int) -> None:
        for entry in self.journal.pop(ino, []):
            self.journal_bytes -= len(entry[1])

    def largest(self) -> int:
        """The file with the most journalled bytes."""
        return max(self.journal, key=lambda i: sum(len(e[1]) for e in self.journal[i]))

    async def written_back(self, idx: int, ino: int, entries: list[Entry],
                           epoch: int | None) -> None:
        """Global cache ``idx`` answered a flush of ``ino`` with ``epoch``: ``entries`` (the
        file's journal when the flush was sent) are on the I/O daemons, or written there now
        if the daemon took them before it restarted; they leave the journal."""
        if await self.check_epoch(idx, epoch):
            return
        lost = [e for e in entries if e[2] != epoch]
        if lost:
            # The daemon restarted since it took these (or never answered them): write them.
            log.warning("global cache %d restarted: writing %d journalled writes directly",
                        idx, len(lost))
            self.counters["journal_replays"] += 1
            for off, blob, _ in lost:
                await self.direct.write(ino, off, blob)
        # Drop what was written back; writes that arrived during the flush stay journalled.
        keep = self._without(ino, {id(e) for e in entries})
        if keep:
            self.journal[ino] = keep
        else:
            self.journal.pop(ino, None)

    def _without(self, ino: int, gone: set[int]) -> list[Entry]:
        """The journal of ``ino`` without the entries whose ids are ``gone`` (their bytes
        no longer counted)."""
        current = self.journal.get(ino, [])
        keep = [e for e in current if id(e) not in gone]
        self.journal_bytes -= sum(len(e[1]) for e in current) - sum(len(e[1]) for e in keep)
        return keep


def daemon_said(exc: BaseException) -> bool:
    """An error reply from a daemon that answered (EINVAL, ENOSPC, ...) as opposed to a
    daemon that is gone or silent: only the latter is a reason to fail over."""
    if isinstance(exc, (TimeoutError, trio.TooSlowError)):
        return False
    return getattr(exc, "errno", None) not in (None, errno.ECONNRESET, errno.EPIPE,
                                               errno.ECONNABORTED, errno.ENOTCONN,
                                               errno.ECONNREFUSED, errno.EHOSTUNREACH,
                                               errno.ENETUNREACH, errno.ETIMEDOUT, errno.EIO,
                                               errno.EBADF)
