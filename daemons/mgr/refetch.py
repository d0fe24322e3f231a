"""Sizes at the manager after a write: the files the I/O daemons reported changed are asked
again in the background, so the next ``stat`` finds their size cached (and leasable).

A report (``sizes_changed``) drops a file's cached size before the write it announces
(sizecache.py). Without more, the next ``stat`` of a file written once (``cp``, ``tar x``,
mdtest's hard phase) asks every I/O daemon of the file while the client waits. Instead the
manager collects the reported files for ``DELAY`` seconds -- a write usually ends within it --
and then asks each daemon once for all of them (one batched ``sizes`` call per daemon, with a
promise to report the next change). A file that keeps changing becomes *hot* (sizecache.py)
and is asked without a promise, which costs its writer nothing. A daemon declines the
promise while the reported change is still in progress there (a write slower than
``DELAY`` on a loaded node): such a file is asked again, ``DELAY`` × 2, × 4, ... later, up
to ``RETRIES`` times (about 1.5 s in all), so that a file written once still ends up cached.

A delegated file its writer is writing back (leases.py, ``flushing``) is not added on the
daemons' reports of that write-back but once, by the writer's ``written`` (or its session's
end): by then the write is done at the daemons, so the one fetch is not declined (an
mdtest-hard file was fetched 2.35-3.4 times before, s37).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable

import trio

log = logging.getLogger("pvfs.mgr")

__all__ = ["SizeRefetcher"]

DELAY = 0.05      # seconds between a report and the fetch of the reported files
BATCH_MAX = 4096  # files per fetch (the daemons' ``sizes`` limit)
RETRIES = 5       # fetches of a file whose promise a daemon declined, after its report


class SizeRefetcher:
    """Reported inodes, fetched in batches by :meth:`run`.

    Args:
        attrs_of: an inode's attributes from the store (raises OSError if it is gone).
        fill: fills files' sizes, fetching and caching those not cached (the manager's
            ``StripeFiles.with_sizes``); returns the files a daemon declined to watch.
        done: called with the files filled and the lease clock read before (the manager
            leases them again to the holders the reports recalled, leases.py).
    """

    def __init__(self, attrs_of: Callable[[int], dict],
                 fill: Callable[[list[dict]], Awaitable[None]],
                 done: Callable[[list[dict], int], Awaitable[None]],
                 clock: Callable[[], int]) -> None:
        self.attrs_of = attrs_of
        self.fill = fill
        self.done = done
        self.clock = clock
        self.pending: dict[int, None] = {}
        self._tries: dict[int, int] = {}  # ino -> fetches declined since its last report
        self._later: dict[int, float] = {}  # declined: ino -> when to fetch it again
        self._wake = trio.Event()
        self.fetched = 0

    def add(self, inos: list[int]) -> None:
        """These files were reported changed."""
        for ino in inos:
            self.pending[ino] = None
            self._tries.pop(ino, None)
        self._wake.set()

    def _again(self, fetched: list[dict], declined: set[int]) -> None:
        """Ask once more, later and later, for files whose promise a daemon declined."""
        now = trio.current_time()
        for a in fetched:
            ino = a["ino"]
            tries = self._tries.pop(ino, 0) + 1
            if ino in declined and tries < RETRIES:
                self._tries[ino] = tries
                self._later[ino] = now + DELAY * 2 ** (tries - 1)

    def _due(self) -> float:
        """Seconds until the next file asked again is due (inf: none waits)."""
        if not self._later:
            return math.inf
        return max(0.0, min(self._later.values()) - trio.current_time())

    async def run(self) -> None:
        while True:
            with trio.move_on_after(self._due()):
                await self._wake.wait()
            self._wake = trio.Event()
            await trio.sleep(DELAY)
            now = trio.current_time()
            for ino in [i for i, due in self._later.items() if due <= now]:
                del self._later[ino]
                self.pending[ino] = None
            while self.pending:
                inos = list(self.pending)[:BATCH_MAX]
                for ino in inos:
                    del self.pending[ino]
                await self._fetch(inos)

    async def _fetch(self, inos: list[int]) -> None:
        seen = self.clock()
        files = []
        for ino in inos:
            try:
                a = self.attrs_of(ino)
            except OSError:
                continue  # removed meanwhile
            if a.get("type") == "file" and a.get("stripe"):
                files.append(a)
        if not files:
            return
        try:
            declined = await self.fill(files)
            self.fetched += len(files)
        except OSError as exc:  # a daemon down: the next stat asks, as without this
            log.info("refetching %d files' sizes: %s", len(files), exc)
            return
        self._again(files, declined or set())
        await self.done(files, seen)
