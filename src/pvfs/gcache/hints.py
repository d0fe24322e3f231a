"""The client's runtime hints from the global caches, and when to take one (SPEC §6).

A global cache that refuses a read's blocks tells the client to read that segment from the
I/O daemons (the reply's ``bypass``, for ``ttl`` reads or for ever). That judgement holds
when the daemon answers; the client may have written the segment since, and until the
daemon has written that back the I/O daemons hold the old bytes. :class:`RuntimeHints` keeps
the table of hints and a write clock, so that a hint is taken only for segments whose writes
were all answered before the request that brought it went out (fsx, gcache=on with a
refusing policy, 2026-11-26). :func:`via_global` routes one access by the table.
"""

from __future__ import annotations

import contextlib
import logging

log = logging.getLogger("pvfs.gcache")

__all__ = ["WRITTEN_MAX", "RuntimeHints", "via_global"]

#: Segments whose latest write is remembered while replies are due (``RuntimeHints.take``).
WRITTEN_MAX = 65536

Key = tuple[int, int]


def via_global(bypassed: int, hints: dict[tuple[int, int], int], key: tuple[int, int],
               write: bool = False) -> bool:
    """Whether an access of segment ``key`` goes through the global cache: not if its bits
    bypass it, nor while a runtime hint from the global cache says so (``hints[key]``
    accesses left, -1 for ever); this access counts against the hint.

    A hint concerns reads only (``write`` False): the daemon declined to keep the segment's
    blocks for the reads that miss them. A write goes through the global cache all the same,
    which answers it once it has the bytes (a refused one is written through in the
    background), where a write past it waits for the disks while the local cache's written
    buffers stay dirty. The write ends the hint: until the daemon has written the bytes back,
    the I/O daemons hold the old ones, so the client's next reads of the segment go through
    the global cache again (which hints them anew once nothing of the segment is dirty
    there)."""
    if bypassed:
        return False
    if write:
        hints.pop(key, None)
        return True
    left = hints.get(key)
    if left is None:
        return True
    if left > 0:
        if left == 1:
            del hints[key]
        else:
            hints[key] = left - 1
    return False


class RuntimeHints:
    """The hints one client holds, and the writes that make a reply's hint stale.

    A clock of the writes through global caches ticks when one is sent and when it is
    answered; while requests to them are out, each segment's latest tick is kept.

    Args:
        seg_bytes: bytes per bypass segment (``segment_blocks`` x the block size).
    """

    def __init__(self, seg_bytes: int) -> None:
        self.seg_bytes = seg_bytes
        self.hints: dict[Key, int] = {}  # (ino, seg) -> accesses left, -1: for ever
        self._wclock = 0
        self._written: dict[Key, int] = {}
        self._written_all = 0  # past WRITTEN_MAX segments: the clock counts for every segment
        self._unanswered: dict[Key, int] = {}  # (ino, seg) -> its writes out
        self._out = 0

    def forget(self, ino: int) -> None:
        for key in [k for k in self.hints if k[0] == ino]:
            del self.hints[key]

    def take(self, ino: int, reply: dict, sent: int) -> tuple[int, int]:
        """Take the runtime hints of a reply to a request sent at write clock ``sent``
        (``asking``), except for segments of which this client had a write through the
        global cache unanswered then or sent since: the daemon may have judged the segment
        before that write reached it (``_hints`` there keeps hints from segments with
        written blocks it holds), the write ended the segment's hint (``via_global``), and
        until the daemon has written it back the I/O daemons hold the old bytes. A read's
        reply that came back after such a write put the hint back, and the segment's next
        reads went to the I/O daemons while the refused write was still on its way there
        (fsx, gcache=on with a refusing policy: zeros where a write had extended the file,
        2026-11-26). Returns (hints taken, hints dropped as stale)."""
        segs = reply.get("bypass") or ()
        ttl = int(reply.get("ttl") or 0)
        taken = stale = 0
        for seg in segs:
            key = (ino, int(seg))
            if max(self._written.get(key, 0), self._written_all) > sent \
                    or key in self._unanswered:
                stale += 1
                log.debug("stale hint ino %d segment %d not taken", ino, key[1])
                continue
            log.debug("hint ino %d segment %d taken (ttl %d)", ino, key[1], ttl)
            self.hints[key] = ttl if ttl > 0 else -1
            taken += 1
        return taken, stale

    @contextlib.contextmanager
    def asking(self):
        """Around a request to a global cache: yields the write clock it is sent at."""
        self._out += 1
        try:
            yield self._wclock
        finally:
            self._out -= 1
            if not self._out:
                self._written.clear()
                self._written_all = 0

    @contextlib.contextmanager
    def writing(self, ino: int, regions):
        """Around a write of ``regions`` of ``ino``, from before its route is chosen (which
        ends the segments' hints, ``via_global``) until it is answered: a reply taken
        meanwhile must not bring the hints back (``take``)."""
        segs = self._segments(ino, regions)
        self._tick(segs)  # sent
        for key in segs:
            self._unanswered[key] = self._unanswered.get(key, 0) + 1
        try:
            yield
        finally:
            self._tick(segs)  # answered (or failed)
            for key in segs:
                if self._unanswered[key] <= 1:
                    del self._unanswered[key]
                else:
                    self._unanswered[key] -= 1

    def _segments(self, ino: int, regions) -> set[Key]:
        seg_bytes = self.seg_bytes
        return {(ino, seg) for off, n in regions if n > 0
                for seg in range(off // seg_bytes, (off + n - 1) // seg_bytes + 1)}

    def _tick(self, segs: set[Key]) -> None:
        """Tick the write clock for a write of ``segs`` and, if replies to requests are still
        to come, note them."""
        self._wclock += 1
        if not self._out:
            return
        for key in segs:
            self._written[key] = self._wclock
        if len(self._written) > WRITTEN_MAX:  # requests always out: forget which, not when
            self._written.clear()
            self._written_all = self._wclock
