"""The global cache daemon's refused writes on their way to the I/O daemons, and the bypass
hints they hold back.

A block the admission policy refuses to a write is received into a scratch buffer, the client
is answered at once, and the bytes are written through to the I/O daemons in the background
(:class:`_Through`): writes, write-back, truncation and removal of those blocks wait for it
(:meth:`WriteThrough.wait`), reads too unless the write covers the block whole (then its
buffer answers them: :meth:`WriteThrough.sources`), and its error comes with the file's next
flush (:meth:`WriteThrough.take_error`). No client is told to bypass a segment this daemon
holds dirty or in-flight written blocks of (:meth:`WriteThrough.hints`): its direct writes
would be overwritten by the older write.
"""

from __future__ import annotations

import errno
import logging

import trio

from pvfs.client.datapath import DataPath
from pvfs.layout.stripe import Stripe

from .store import BlockStore
from .transfer import write_extents

log = logging.getLogger("pvfs.gcache")


class _Through:
    """A refused write on its way to the I/O daemons in the background: requests that touch
    its blocks (writes, write-back, truncation, removal, and reads of blocks it covers only
    partly) wait for ``done`` first. A read of a block it writes whole takes the bytes from
    its buffer instead (``view``): they are what the I/O daemons will hold."""

    __slots__ = ("blocks", "done", "eof", "sbuf", "scratch", "whole")

    def __init__(self, blocks: set[int], sbuf: bytearray | None = None,
                 scratch: dict[int, int] | None = None, whole: set[int] | None = None) -> None:
        self.blocks = blocks
        self.done = trio.Event()
        self.sbuf = sbuf
        self.scratch = scratch or {}  # block -> its offset in sbuf
        self.whole = whole or set()  # the blocks this write covers from byte 0 to the end
        self.eof = None  # (read like a fetch's: whole blocks, never the end of the file)

    def view(self, b: int, bs: int) -> memoryview | None:
        """Block ``b``'s bytes if this write covers it whole, else None."""
        o = self.scratch.get(b)
        if b not in self.whole or o is None or self.sbuf is None:
            return None
        return memoryview(self.sbuf)[o:o + bs]


class WriteThrough:
    """The refused writes of one global cache daemon on their way to the I/O daemons.

    Its interface: :meth:`send` (write one through, in the background while the daemon
    serves), :meth:`wait` (until none of some blocks is on its way), :meth:`sources` (the
    writes a read may take whole blocks from), :meth:`take_error` (a failed one's error, for
    the file's next write-back), :meth:`files` and :meth:`busy` (which files have one on its
    way), and :meth:`hints` (the refused segments a client may be told to bypass). It needs
    nothing from the other parts.

    Args:
        store: the slab (:meth:`hints` looks for dirty blocks in it).
        data: the I/O daemons' data path.
        limiter: the threads the transfers run in.
        counters: the daemon's counters.
        segment_blocks: blocks per segment.

    Attributes:
        background: the nursery writes go through in while the daemon serves (set by the
            daemon; None: :meth:`send` writes in the caller's task).
    """

    def __init__(self, store: BlockStore, data: DataPath, limiter: trio.CapacityLimiter,
                 counters: dict[str, int], segment_blocks: int) -> None:
        self.store = store
        self.data = data
        self.limiter = limiter
        self.counters = counters
        self.sb = segment_blocks
        self.background: trio.Nursery | None = None
        self._pending: dict[int, list[_Through]] = {}
        # Errors of failed ones, raised by the file's next write-back (as a write-back error is).
        self._errors: dict[int, OSError] = {}

    def files(self) -> list[int]:
        """The files with a refused write on its way."""
        return list(self._pending)

    def busy(self, ino: int) -> bool:
        """Whether a refused write of ``ino`` is on its way."""
        return ino in self._pending

    def take_error(self, ino: int) -> OSError | None:
        """The error of a failed write-through of ``ino`` (once), if one failed."""
        return self._errors.pop(ino, None)

    async def send(self, ino: int, stripe: Stripe, ext: list, sbuf: bytearray,
                   th: _Through) -> None:
        """Write ``th`` (``ext``: its extents in ``sbuf``) through to the I/O daemons: in the
        background while the daemon serves, else now."""
        self._pending.setdefault(ino, []).append(th)
        if self.background is None:
            await self._write(ino, stripe, ext, sbuf, th)
        else:
            self.background.start_soon(self._write, ino, stripe, ext, sbuf, th)

    async def wait(self, ino: int, blocks: set[int] | None = None, *,
                   read: bool = False) -> None:
        """Wait until no refused write of ``blocks`` (None: of any block of the file) is on
        its way to the I/O daemons: what follows must see (or come after) it. For a
        ``read``, only for writes that cover one of its blocks partly: the others' bytes are
        in their buffers (see :meth:`sources`)."""
        t0 = None
        while True:
            th = next((t for t in self._pending.get(ino, ())
                       if any((blocks is None or b in blocks)
                              and not (read and b in t.whole) for b in t.blocks)),
                      None)
            if th is None:
                if t0 is not None:
                    self.counters["through_waits"] += 1
                    self.counters["through_wait_ms"] += round((trio.current_time() - t0) * 1e3)
                return
            if t0 is None:
                t0 = trio.current_time()
            await th.done.wait()

    async def _write(self, ino: int, stripe: Stripe, ext: list, sbuf: bytearray,
                     th: _Through) -> None:
        """A refused write's bytes to the I/O daemons (see :meth:`send`)."""
        try:
            await trio.to_thread.run_sync(write_extents, self.data, ino, stripe, ext, sbuf,
                                          limiter=self.limiter)
            log.debug("write-through ino %d done: %s", ino, [(o, n) for o, n, _ in ext])
        except Exception as exc:  # noqa: BLE001 - not into the daemon's nursery: the next flush raises it
            self.counters["flush_errors"] += 1
            log.warning("write-through of inode %d failed: %s", ino, exc)
            self._errors.setdefault(
                ino, exc if isinstance(exc, OSError) else OSError(errno.EIO, str(exc)))
        finally:
            pending = self._pending.get(ino, [])
            if th in pending:
                pending.remove(th)
            if not pending:
                self._pending.pop(ino, None)
            th.done.set()

    def sources(self, ino: int, blocks: list[int]) -> dict[int, _Through] | None:
        """For each of ``blocks`` a refused write on its way holds, that write, if it covers
        the block whole; None if one of them is covered only partly (wait for it first). At
        most one such write holds a block: a write waits for the one before it."""
        pending = self._pending.get(ino)
        if not pending:
            return {}
        out: dict[int, _Through] = {}
        wanted = set(blocks)
        for t in pending:
            for b in t.blocks & wanted:
                if b not in t.whole:
                    return None
                out[b] = t
        return out

    def _dirty_in(self, ino: int, seg: int) -> bool:
        """Whether a block of segment ``seg`` of ``ino`` is dirty here, or on its way to the
        I/O daemons as a refused write."""
        get = self.store.get
        blocks = range(seg * self.sb, (seg + 1) * self.sb)
        if any((s := get((ino, b))) is not None and s.dirty for b in blocks):
            return True
        return any(b in t.blocks for t in self._pending.get(ino, ()) for b in blocks)

    def hints(self, ino: int, refused: set[int]) -> list[int]:
        """The refused segments a client may be told to bypass: not those with a dirty block
        here. The client would send its next writes of such a segment straight to the I/O
        daemons, and this daemon's later write-back of the older dirty copy would land over
        them."""
        return sorted(s for s in refused if not self._dirty_in(ino, s))
