"""The page-lock state machine run by lock servers and I/O threads (message back ends).

A home (a dedicated lock server, or a rank's I/O thread) keeps, for every page it is home
for, the page's :class:`~pvfs.collective._pages.Meta` and a shared/exclusive lock with a FIFO
queue of waiters (DAChe §5.2: "the mutex servers service locks in the order they come,
queuing requests"). Requests are served in arrival order; a release hands the lock to the
longest waiter (and to every shared waiter right behind it). ``try`` requests (eviction
asks whether a page is pinned) never queue.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from pvfs.collective._pages import UNCACHED, Meta

#: A lock mode besides shared (False) and exclusive (True): a read that caches the page if
#: nobody does — exclusive when granted while the page is cached nowhere, else shared.
READ = "read"

Mode = bool | str


@dataclass
class _PageLock:
    readers: set[int] = field(default_factory=set)
    writer: int | None = None
    queue: deque[tuple[int, Mode]] = field(default_factory=deque)
    meta: Meta = UNCACHED

    def exclusive(self, mode: Mode) -> bool:
        """Whether ``mode`` asks for the page exclusively, decided now (at the grant)."""
        return self.meta.owner < 0 if mode == READ else bool(mode)


class LockManager:
    """Locks and metadata for the pages one home serves; pure logic, no MPI."""

    def __init__(self) -> None:
        self._pages: dict[int, _PageLock] = {}
        self.requests = 0
        self.queued = 0

    def _get(self, page: int) -> _PageLock:
        entry = self._pages.get(page)
        if entry is None:
            entry = self._pages[page] = _PageLock()
        return entry

    @staticmethod
    def _free_for(entry: _PageLock, mode: Mode) -> bool:
        if entry.writer is not None:
            return False
        return not entry.readers if entry.exclusive(mode) else True

    def acquire(self, page: int, src: int, excl: Mode, try_only: bool = False,
                around: bool = False) -> tuple[bool, Meta | None]:
        """``(granted, meta)``; not granted means queued, or refused for ``try_only`` and,
        with ``around``, when the page is locked but cached nowhere (see :meth:`request`)."""
        status, meta = self.request(page, src, excl, try_only, around)
        return status == "granted", meta

    def request(self, page: int, src: int, excl: Mode, try_only: bool = False,
                around: bool = False) -> tuple[str, Meta | None]:
        """``("granted", meta)``, ``("queued", None)`` or ``("refused", None)``.

        ``around``: a non-atomic reader that would rather read the file than wait while
        the page is loaded (locked, cached nowhere) is refused instead of queued.
        """
        self.requests += 1
        entry = self._get(page)
        # FIFO fairness: a new shared request does not overtake a queued exclusive one.
        if not entry.queue and self._free_for(entry, excl):
            self._grant(entry, src, excl)
            return "granted", entry.meta
        if try_only or (around and entry.meta.owner < 0):
            return "refused", None
        entry.queue.append((src, excl))
        self.queued += 1
        return "queued", None

    @staticmethod
    def _grant(entry: _PageLock, src: int, mode: Mode) -> None:
        if entry.exclusive(mode):
            entry.writer = src
        else:
            entry.readers.add(src)

    def release(self, page: int, src: int, meta: Meta | None) -> list[tuple[int, Meta]]:
        """Drop ``src``'s lock (recording ``meta`` if given); the waiters granted now.

        Raises:
            RuntimeError: when ``src`` does not hold the page (a protocol bug).
        """
        entry = self._get(page)
        if entry.writer == src:
            entry.writer = None
        elif src in entry.readers:
            entry.readers.discard(src)
        else:
            raise RuntimeError(f"rank {src} released page {page} it does not hold")
        if meta is not None:
            entry.meta = meta
        granted = []
        while entry.queue and self._free_for(entry, entry.queue[0][1]):
            who, mode = entry.queue.popleft()
            excl = entry.exclusive(mode)
            self._grant(entry, who, mode)
            granted.append((who, entry.meta))
            if excl:
                break
        if entry.writer is None and not entry.readers and not entry.queue \
                and entry.meta == UNCACHED:
            del self._pages[page]
        return granted

    def holders(self, page: int) -> tuple[int | None, set[int]]:
        entry = self._get(page)
        return entry.writer, set(entry.readers)
