"""What the client of the global caches does when one fails (SPEC §6; docs/caching.md,
"Failure"): mark it down and go direct, keep every write sent through it in a *journal* until
it is written back, write the journal directly when the daemon fails or comes back with a new
epoch (it lost its dirty blocks), and before a daemon that was only slow is used again, have
it drop its copies of what this client wrote directly meanwhile.

``Failover`` is a mixin of :class:`~.backend.GcacheBackend`: it uses the backend's
``channels``, ``direct``, ``journal``, ``journal_bytes``, ``rejoin``, ``epochs``,
``down_until``, ``retry_after``, ``counters``, ``_index``, ``_up`` and ``flush``.
"""

from __future__ import annotations

import errno
import logging
import time

import trio

log = logging.getLogger("pvfs.gcache")


class Failover:
    def _fail(self, idx: int, exc: BaseException) -> None:
        # A daemon that was only slow may still hold (even dirty) copies of what this client
        # now writes directly: remember those writes until the daemon is used again.
        self.rejoin.setdefault(idx, {})
        self.down_until[idx] = time.monotonic() + self.retry_after
        self.counters["failovers"] += 1
        log.warning("global cache %d failed (%s): direct I/O for %g s", idx, exc,
                    self.retry_after)

    async def _ensure(self, idx: int) -> None:
        """Before a failed daemon is used again: have it write back and drop its copies of
        the files this client wrote directly meanwhile, then write those writes again (the
        daemon's write-back may have been older data)."""
        pending = self.rejoin.get(idx)
        if pending is None or not self._up(idx):
            return
        del self.rejoin[idx]
        try:
            for ino, entries in pending.items():
                lo = min(o for o, _ in entries)
                hi = max(o + len(b) for o, b in entries)
                await self.channels[idx].call({"op": "invalidate", "ino": ino, "offset": lo,
                                               "length": hi - lo})
                for off, blob in entries:
                    await self.direct.write(ino, off, blob)
        except (OSError, trio.TooSlowError) as exc:
            merged = self.rejoin.setdefault(idx, {})
            for ino, entries in pending.items():
                merged[ino] = entries + merged.get(ino, [])
            if daemon_said(exc):
                raise
            self._fail(idx, exc)

    def _unjournal(self, ino: int, entry: list) -> None:
        entries = self.journal.get(ino, [])
        if entries and entries[-1] is entry:
            entries.pop()
            self.journal_bytes -= len(entry[1])

    def _drop_journal(self, ino: int) -> None:
        for entry in self.journal.pop(ino, []):
            self.journal_bytes -= len(entry[1])

    async def _trim_journal(self) -> None:
        """Have the global cache write back the file with the most journalled bytes."""
        ino = max(self.journal, key=lambda i: sum(len(e[1]) for e in self.journal[i]))
        await self.flush(ino)

    async def _check_epoch(self, idx: int, epoch: int | None) -> bool:
        """Note daemon ``idx``'s epoch from a reply. When it changed (the daemon restarted and
        lost its dirty blocks), every journalled file of that daemon is dropped there (blocks it
        fetched since may predate our lost writes) and its journal written directly; True
        then, if there was any."""
        old, self.epochs[idx] = self.epochs[idx], epoch
        if old is None or epoch is None or old == epoch:
            return False
        inos = [i for i in self.journal if self._index(i) == idx]
        log.warning("global cache %d restarted: writing the journal of %d files directly",
                    idx, len(inos))
        for ino in inos:
            try:
                await self.channels[idx].call({"op": "forget", "ino": ino})
            except (OSError, trio.TooSlowError):
                pass
        await self._replay(idx)
        return bool(inos)

    async def _replay(self, idx: int) -> None:
        """Write every journalled write of files of global cache ``idx`` to the I/O daemons
        (that daemon failed: what it had not written back is gone)."""
        for ino in [i for i in self.journal if self._index(i) == idx]:
            entries = self.journal.get(ino, [])
            for off, blob, _ in list(entries):
                await self.direct.write(ino, off, blob)
            self._drop_journal(ino)
            self.counters["journal_replays"] += 1


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
