"""The global cache's block store: one preallocated slab, slots handed out by an LRU map.

Every block lives in a fixed slot of one ``bytearray`` allocated at start; the daemon moves
bytes straight between sockets and slots (``recvmsg_into``/``sendmsg`` with memoryviews of the
slab, and the native scatter/gather transfer to the I/O daemons with the slab as its buffer),
so no block is ever copied by Python code. This module only keeps the bookkeeping: which key
sits in which slot, LRU order, dirty blocks per file, and pins (a slot being sent, received or
transferred cannot be reused until it is unpinned).

Everything runs in the daemon's trio thread except the native transfers, which touch only the
bytes of pinned slots; the maps are never changed from another thread.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

from pvfs.cache import merge_range

__all__ = ["BlockStore", "Slot"]

Key = tuple[int, int]

#: How many of the least recently used blocks the victim scan looks at for one it prefers.
SCAN = 16


class Slot:
    """One block's place in the slab and its state."""

    __slots__ = ("dirty", "doomed", "hits", "idx", "pins", "ranges", "valid", "version")

    def __init__(self, idx: int) -> None:
        self.idx = idx
        self.valid = 0  # bytes of the block that exist (a short block ends the file)
        self.dirty = False
        # The byte ranges [lo, hi) clients wrote since the last write-back, sorted and merged
        # (the local cache's rule, ``pvfs.cache._table.Entry.ranges``): only these go back.
        # The rest of the slot holds bytes fetched earlier (read-modify-write) that another
        # client may have overwritten at the I/O daemons since.
        self.ranges: list[tuple[int, int]] = []
        self.pins = 0
        self.version = 0  # bumped on every modification (write-back checks it)
        self.hits = 0
        self.doomed = False  # removed while pinned: freed at the last unpin


class BlockStore:
    """Blocks keyed by ``(ino, block)`` in the slots of one slab.

    Args:
        capacity: bytes of slab (rounded down to whole blocks).
        block_size: bytes per block.

    Raises:
        ValueError: if the capacity holds fewer than two blocks.
    """

    def __init__(self, capacity: int, block_size: int) -> None:
        if capacity // block_size < 2:
            raise ValueError("the global cache needs room for at least two blocks")
        self.block_size = block_size
        self.nslots = capacity // block_size
        self.slab = bytearray(self.nslots * block_size)
        self.view = memoryview(self.slab)
        self._free = list(range(self.nslots - 1, -1, -1))
        self.map: OrderedDict[Key, Slot] = OrderedDict()  # least recently used first
        self.files: dict[int, set[int]] = {}
        self.dirty: dict[int, set[int]] = {}

    # ------------------------------------------------------------------ lookups
    def __len__(self) -> int:
        return len(self.map)

    def __contains__(self, key: Key) -> bool:
        return key in self.map

    def get(self, key: Key) -> Slot | None:
        return self.map.get(key)

    def touch(self, key: Key) -> None:
        self.map.move_to_end(key)

    def offset(self, slot: Slot) -> int:
        return slot.idx * self.block_size

    def block_view(self, slot: Slot, lo: int = 0, hi: int | None = None) -> memoryview:
        base = slot.idx * self.block_size
        return self.view[base + lo: base + (self.block_size if hi is None else hi)]

    @property
    def free_slots(self) -> int:
        return len(self._free)

    @property
    def dirty_blocks(self) -> int:
        return sum(len(b) for b in self.dirty.values())

    # ------------------------------------------------------------------ placement
    def victim(self, prefer: Callable[[Key], bool] | None = None) -> Key | None:
        """The block to evict next: among the :data:`SCAN` least recently used clean,
        unpinned blocks the first ``prefer`` likes, else the least recently used one."""
        fallback = None
        seen = 0
        for key, slot in self.map.items():
            if slot.dirty or slot.pins:
                continue
            if fallback is None:
                fallback = key
                if prefer is None:
                    break
            if prefer is not None and prefer(key):
                return key
            seen += 1
            if seen >= SCAN:
                break
        return fallback

    def has_room(self) -> bool:
        return bool(self._free)

    def insert(self, key: Key) -> Slot | None:
        """A pinned slot for the new block ``key`` from the free list (None if none is free:
        evict first)."""
        if key in self.map:
            raise KeyError(f"block {key} is already cached")
        if not self._free:
            return None
        slot = Slot(self._free.pop())
        slot.pins = 1
        self.map[key] = slot
        self.files.setdefault(key[0], set()).add(key[1])
        return slot

    def remove(self, key: Key) -> Slot | None:
        """Forget ``key`` (dirty or not); its slot is freed now, or at its last unpin. A
        pinned slot may be a write's, receiving bytes not yet marked dirty: only truncation
        and removal of the file drop those (what the write brings is past the end or gone)."""
        slot = self.map.pop(key, None)
        if slot is None:
            return None
        ino, blk = key
        blocks = self.files.get(ino)
        if blocks is not None:
            blocks.discard(blk)
            if not blocks:
                del self.files[ino]
        self._clean(key)
        slot.dirty = False
        slot.ranges = []
        if slot.pins:
            slot.doomed = True
        else:
            self._free.append(slot.idx)
        return slot

    def unpin(self, slot: Slot) -> None:
        slot.pins -= 1
        if slot.pins == 0 and slot.doomed:
            slot.doomed = False
            self._free.append(slot.idx)

    def unpin_all(self, slots: list[Slot]) -> None:
        for s in slots:
            self.unpin(s)

    # ------------------------------------------------------------------ dirty state
    def mark_dirty(self, key: Key, slot: Slot, lo: int, hi: int) -> None:
        """Bytes ``[lo, hi)`` of ``key``'s block were written: add them to its dirty ranges."""
        slot.ranges = merge_range(slot.ranges, lo, hi)
        slot.dirty = True
        slot.version += 1
        self.dirty.setdefault(key[0], set()).add(key[1])

    def mark_clean(self, key: Key, slot: Slot, version: int,
                   written: list[tuple[int, int]]) -> bool:
        """The ``written`` ranges of ``key`` reached the I/O daemons as of ``version``: clean
        the block, unless it was modified meanwhile (then it stays dirty with every range,
        and the next write-back sends them again with their current bytes)."""
        if self.map.get(key) is not slot or slot.version != version:
            return False
        slot.ranges = [r for r in slot.ranges if r not in written]
        if slot.ranges:
            return False
        slot.dirty = False
        self._clean(key)
        return True

    def clip(self, slot: Slot, size: int) -> None:
        """Forget dirty ranges at or past ``size`` bytes into the block (truncation)."""
        slot.ranges = [(a, min(b, size)) for a, b in slot.ranges if a < size]

    def _clean(self, key: Key) -> None:
        blocks = self.dirty.get(key[0])
        if blocks is not None:
            blocks.discard(key[1])
            if not blocks:
                del self.dirty[key[0]]

    def blocks_of(self, ino: int) -> list[int]:
        return sorted(self.files.get(ino, ()))
