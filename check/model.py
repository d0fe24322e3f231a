"""What a read may return: the reference model of the checker.

The checker runs every step of every client one after the other, so the file system's
mutations have one global order. Each file keeps the list of its *states* (content and size
after each mutation). A read is not compared with one expected content: a client with a cache
may legally return older bytes. Instead each client holds, per file and per byte, a *floor*:
the oldest state whose byte it may still return. A byte read is right when it equals that byte
in some state at or after the floor ("old or new bytes, never garbage"); the floors are what
the coherence mode promises:

* a client without a cache (the native API, a plain directory in ``--target`` mode) reads
  what the daemons hold: floor ``D``, the daemons' floor;
* a mount node's floor ``V`` rises to a state when the node itself writes it (its own writes),
  when it reopens a file whose ``(size, mtime)`` changed since its last open while it had
  nothing dirty and no other handle open (both modes), and -- ``sync`` only -- when another
  node's sync write returns (the written range);
* a mount's write-behind blocks may reach the daemons at any moment until the node's next
  ``close``/``fsync`` of the file, with the stale bytes of the rest of the block, so while a
  node has dirty blocks ``D`` is lowered to that node's floor there; the node's close/fsync
  then raises ``D`` to the node's floor where it wrote (everything it wrote is at the
  daemons). Only there: the rest of its dirty blocks may or may not have been written with
  them (the block cache writes back its dirty byte ranges, not whole blocks), so another
  node's write-behind that landed there meanwhile may stay. And only where nothing else
  landed since it wrote: its bytes may have gone early (the flusher), and a write that
  reached the daemons after that -- another node's write-back, a sync or native write --
  may lie over them; there its later flush promises nothing (``_landed_over``).

After a mount node's flush (and after sync writes) the model *resyncs*: it reads the file
through its own native connection, checks every byte and the size against the floors, and
takes what it read as the new state, so the model never drifts from a real interleaving of
write-backs it could not predict. Sizes are checked as intervals over the allowed states (the
kernel may hold attributes ``attr_timeout`` long).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

MAX_FILE = 1 << 16  # bytes a checked file may grow to (offsets and sizes stay below)


@dataclass
class Mismatch:
    """Why a read (or a resync) broke the model."""

    what: str
    offset: int = 0
    got: bytes = b""
    expected: bytes = b""  # the newest allowed content of the range
    allowed: list[int] | None = None  # allowed values of the first wrong byte
    first_bad: int | None = None  # absolute offset of the first wrong byte
    lengths: tuple[int, int] | None = None  # allowed (min, max) read length


@dataclass
class View:
    """One mount node's knowledge of one file."""

    floor: np.ndarray  # per byte: oldest state it may return
    dirty: np.ndarray  # per byte: inside a block the node has dirty (write-behind)
    pending: np.ndarray | None = None  # per byte: written by the node, not yet written back
    owed: np.ndarray | None = None  # pending, and nothing landed over it since (``_landed_over``)
    pending_floor: int | None = None  # size floor while dirty blocks may land
    wrote_since_open: bool = False
    stamp: tuple[int, int] | None = None  # (size, mtime_ns) at its last open, if known
    own_size_index: int | None = None  # state of its last own size-changing operation
    sync_xattr: bool = False  # user.pvfs.sync=1 set through this node


@dataclass
class FileModel:
    """One file (an inode): its states and the floors of every client."""

    id: int
    ino: int
    states: list[np.ndarray] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    daemon_floor: np.ndarray = field(default_factory=lambda: np.zeros(MAX_FILE, np.int32))
    views: dict[int, View] = field(default_factory=dict)  # by client index (mount nodes)
    names: set[str] = field(default_factory=set)
    handles: int = 0
    xattrs: dict[str, bytes] = field(default_factory=dict)
    last_mtime: int | None = None  # newest mtime a direct client saw
    landed_end: int = 0  # end of the write-behind blocks flushed since the last resync
    stripe: tuple[int, int, int] | None = None

    @property
    def current(self) -> int:
        return len(self.states) - 1

    def content(self, index: int | None = None) -> np.ndarray:
        return self.states[self.current if index is None else index]

    def alive(self) -> bool:
        return bool(self.names) or self.handles > 0


class Model:
    """Every file the checker knows, and the floors of each client."""

    def __init__(self, caching: list[bool], sync_mode: bool) -> None:
        self.caching = caching  # per client: a mount node with a cache
        self.sync_mode = sync_mode
        self.files: dict[int, FileModel] = {}
        self.by_ino: dict[int, FileModel] = {}
        self.names: dict[str, int | None] = {}
        # per name: [(time it stopped being current, client that changed it, old file id)]
        self.name_history: dict[str, list[tuple[float, int, int | None]]] = {}
        self._next = 0

    # ----------------------------------------------------------------------- names
    def binding(self, name: str) -> FileModel | None:
        fid = self.names.get(name)
        return self.files[fid] if fid is not None else None

    def rebind(self, name: str, f: FileModel | None, client: int) -> None:
        """Point ``name`` at ``f`` (None: remove it), remembering the old binding."""
        old = self.names.get(name)
        if old == (f.id if f else None):
            return
        self.name_history.setdefault(name, []).append((time.monotonic(), client, old))
        if old is not None:
            self.files[old].names.discard(name)
        if f is None:
            self.names.pop(name, None)
        else:
            self.names[name] = f.id
            f.names.add(name)

    def recent_bindings(self, name: str, client: int, window: float) -> list[FileModel | None]:
        """Bindings of ``name`` that ``client`` may still see (its name cache is ``window``
        seconds long; changes made by the client itself are seen at once)."""
        out: list[FileModel | None] = [self.binding(name)]
        if window <= 0:
            return out
        now = time.monotonic()
        for when, who, old in self.name_history.get(name, []):
            if now - when <= window and who != client:
                f = self.files.get(old) if old is not None else None
                if f not in out:
                    out.append(f)
        return out

    # ----------------------------------------------------------------------- files
    def new_file(self, ino: int) -> FileModel:
        f = FileModel(self._next, ino)
        self._next += 1
        f.states.append(np.zeros(MAX_FILE, np.uint8))
        f.sizes.append(0)
        f.times.append(time.monotonic())
        for c, caching in enumerate(self.caching):
            if caching:
                f.views[c] = View(np.zeros(MAX_FILE, np.int32), np.zeros(MAX_FILE, bool))
        self.files[f.id] = f
        self.by_ino[ino] = f
        return f

    def _append(self, f: FileModel, content: np.ndarray, size: int) -> int:
        f.states.append(content)
        f.sizes.append(size)
        f.times.append(time.monotonic())
        return f.current

    def _lower_daemon(self, f: FileModel, lo: int, hi: int) -> None:
        """Let ``D`` fall to every dirty node's floor in [lo, hi), and clean nodes' floors to
        ``D`` (they may evict a block and fetch what a write-back just left there)."""
        d = f.daemon_floor[lo:hi]
        for v in f.views.values():
            mask = v.dirty[lo:hi]
            if mask.any():
                np.minimum(d, np.where(mask, v.floor[lo:hi], d), out=d)
        for v in f.views.values():
            mask = ~v.dirty[lo:hi]
            fl = v.floor[lo:hi]
            np.minimum(fl, np.where(mask, d, fl), out=fl)

    def _landed_over(self, f: FileModel, c: int, where) -> None:
        """Client ``c``'s bytes reached the daemons at ``where`` (a write through, or its
        write-back): what other nodes wrote there and still hold dirty may have gone before
        and now lie under them, so their flush no longer promises those bytes (the daemons'
        floor, lowered to theirs while dirty, still allows them); they may still land later,
        over anything (``pending``)."""
        for other, v in f.views.items():
            if other != c and v.owed is not None:
                v.owed[where] = False

    def quiet(self, f: FileModel) -> bool:
        """No node has write-behind data of ``f`` that could land at any moment."""
        return not any(v.dirty.any() for v in f.views.values())

    def daemon_size_floor(self, f: FileModel) -> int:
        floors = [v.pending_floor for v in f.views.values() if v.pending_floor is not None]
        return min([f.current, *floors])

    # ----------------------------------------------------------------------- mutations
    def write(self, c: int, f: FileModel, off: int, data: bytes, sync: bool,
              block: int) -> int:
        """A write of ``data`` at ``off`` by client ``c``; the new state's index."""
        content = f.content().copy()
        end = off + len(data)
        content[off:end] = np.frombuffer(data, np.uint8)
        # a write of nothing changes nothing, not even the size (POSIX)
        v = self._append(f, content, max(f.sizes[-1], end) if data else f.sizes[-1])
        view = f.views.get(c)
        if view is None:  # straight to the daemons
            f.daemon_floor[off:end] = v
            self._landed_over(f, c, slice(off, end))
            self._lower_daemon(f, off, end)
            return v
        view.floor[off:end] = v
        view.wrote_since_open = True
        view.own_size_index = v
        lo, hi = off // block * block, min(MAX_FILE, -(-end // block) * block)
        if view.owed is None:
            view.pending, view.owed = np.zeros(MAX_FILE, bool), np.zeros(MAX_FILE, bool)
        if sync:
            f.daemon_floor[off:end] = v
            view.pending[off:end] = view.owed[off:end] = False  # (written through)
            self._landed_over(f, c, slice(off, end))
        else:
            if view.pending_floor is None:
                view.pending_floor = v - 1
            view.dirty[lo:hi] = True
            view.pending[off:end] = view.owed[off:end] = True
        # the node's blocks around the range may reach the daemons with its older bytes
        d = f.daemon_floor[lo:hi]
        np.minimum(d, view.floor[lo:hi], out=d)
        self._lower_daemon(f, lo, hi)
        return v

    def truncate(self, c: int, f: FileModel, size: int, block: int) -> int:
        content = f.content().copy()
        content[size:] = 0
        v = self._append(f, content, size)
        f.daemon_floor[size:] = v
        view = f.views.get(c)
        if view is not None:
            view.floor[size:] = v
            view.wrote_since_open = True
            view.own_size_index = v
            view.dirty[-(-size // block) * block:] = False  # blocks past the end are cut
            if view.owed is not None:
                view.pending[size:] = view.owed[size:] = False
        self._lower_daemon(f, 0, MAX_FILE)
        return v

    def flushed(self, c: int, f: FileModel) -> None:
        """Client ``c`` closed or fsync'd ``f`` successfully: its dirty blocks are at the
        daemons (the daemons' floor rises to the node's there)."""
        view = f.views.get(c)
        if view is None or not view.dirty.any():
            return
        if view.pending is not None and view.pending.any():
            owed = view.owed
            f.daemon_floor[owed] = view.floor[owed]
            f.landed_end = max(f.landed_end, int(np.flatnonzero(view.pending)[-1]) + 1)
            self._landed_over(f, c, view.pending)
            view.pending[:] = view.owed[:] = False
        view.dirty[:] = False
        view.pending_floor = None
        self._lower_daemon(f, 0, MAX_FILE)

    def flush_failed(self, c: int, f: FileModel) -> None:
        """A flush returned an error (after a fault): its blocks may or may not have landed."""
        view = f.views.get(c)
        if view is None:
            return
        mask = view.dirty
        np.minimum(view.floor, np.where(mask, f.daemon_floor, view.floor), out=view.floor)
        view.dirty[:] = False
        if view.owed is not None:
            view.pending[:] = view.owed[:] = False
        self._lower_daemon(f, 0, MAX_FILE)

    def invalidated(self, writer: int, f: FileModel, off: int, end: int) -> None:
        """A sync write by ``writer`` returned: in ``sync`` mode no other node may return
        older bytes of the range (nodes with dirty blocks there keep their own)."""
        if not self.sync_mode:
            return
        for c, v in f.views.items():
            if c == writer:
                continue
            mask = ~v.dirty[off:end]
            fl = v.floor[off:end]
            fl[mask] = np.maximum(fl[mask], f.daemon_floor[off:end][mask])

    def reopened(self, c: int, f: FileModel, stamp: tuple[int, int] | None,
                 other_handles: int) -> None:
        """Client ``c`` opened ``f``; ``stamp`` is ``(size, mtime)`` at the manager then
        (None when it moved during the open). A node that saw the stamp change, wrote nothing
        since its last open, has no dirty block and no other handle drops its cached blocks."""
        view = f.views.get(c)
        if view is None:
            return
        changed = stamp is not None and view.stamp is not None and stamp != view.stamp
        if changed and not view.wrote_since_open and not view.dirty.any() \
                and other_handles == 0:
            np.maximum(view.floor, f.daemon_floor, out=view.floor)
        view.stamp = stamp
        view.wrote_since_open = False

    def resync(self, f: FileModel, content: bytes, size: int) -> Mismatch | None:
        """The daemons hold ``content`` (``size`` bytes): check it, then take it as the
        newest state."""
        bad = self.check_extent(f, content, size)
        f.landed_end = 0
        if bad is not None:
            return bad
        new = np.zeros(MAX_FILE, np.uint8)
        n = min(len(content), MAX_FILE)
        new[:n] = np.frombuffer(content[:n], np.uint8)
        v = self._append(f, new, size)
        f.daemon_floor[:] = v
        self._lower_daemon(f, 0, MAX_FILE)
        return None

    # ----------------------------------------------------------------------- checks
    def size_range(self, f: FileModel, floor: int) -> tuple[int, int]:
        sizes = f.sizes[max(0, floor):]
        return min(sizes), max(sizes)

    def index_at(self, f: FileModel, t: float) -> int:
        """The state that was current at monotonic time ``t``."""
        k = 0
        for i, when in enumerate(f.times):
            if when <= t:
                k = i
        return k

    def size_floor(self, c: int, f: FileModel, attr_window: float) -> int:
        """Oldest state whose size client ``c`` may report."""
        dsf = self.daemon_size_floor(f)
        view = f.views.get(c)
        if view is None:
            return dsf
        floor = min(dsf, self.index_at(f, time.monotonic() - attr_window))
        if view.own_size_index is not None:
            floor = min(floor, view.own_size_index)
        return floor

    def floors(self, c: int, f: FileModel) -> np.ndarray:
        view = f.views.get(c)
        return f.daemon_floor if view is None else view.floor

    def check_bytes(self, floors: np.ndarray, f: FileModel, off: int,
                    got: bytes) -> Mismatch | None:
        """Every byte of ``got`` (read at ``off``) equals that byte of a state at or after
        its floor."""
        n = min(len(got), MAX_FILE - off)
        if n <= 0:
            return None
        fl = floors[off:off + n]
        kmin = int(fl.min())
        stack = np.stack([s[off:off + n] for s in f.states[kmin:]])
        idx = np.arange(kmin, len(f.states), dtype=np.int32)[:, None]
        have = np.frombuffer(got[:n], np.uint8)
        ok = ((stack == have[None, :]) & (idx >= fl[None, :])).any(axis=0)
        if ok.all():
            return None
        i = int(np.argmin(ok))
        allowed = sorted({int(stack[k - kmin, i]) for k in range(int(fl[i]), len(f.states))})
        return Mismatch("read returned bytes no allowed state has", offset=off, got=got,
                        expected=f.content()[off:off + len(got)].tobytes(),
                        allowed=allowed, first_bad=off + i)

    def check_extent(self, f: FileModel, content: bytes, size: int) -> Mismatch | None:
        """The whole file as the daemons hold it: every byte position up to ``MAX_FILE`` --
        present with its value, or absent past the end -- must be what some state at or
        after the daemons' floor has there. So a byte that every allowed state has (written
        and flushed, or fsync'd) must be there, and nothing may appear that no state had."""
        if size > MAX_FILE:
            return Mismatch(f"the file grew to {size} bytes; no step wrote past {MAX_FILE}")
        have = np.full(MAX_FILE, -1, np.int16)
        n = min(size, len(content))
        have[:n] = np.frombuffer(content[:n], np.uint8)
        fl = f.daemon_floor
        kmin = int(fl.min())
        ok = np.zeros(MAX_FILE, bool)
        absent_ok = np.zeros(MAX_FILE, bool)
        pos = np.arange(MAX_FILE)
        for k in range(kmin, len(f.states)):
            state = np.where(pos < f.sizes[k], f.states[k].astype(np.int16), -1)
            ok |= (state == have) & (k >= fl)
            absent_ok |= (state == -1) & (k >= fl)
        # A write-back that landed after another client's truncate extends the file again:
        # what lies below it and was absent reads as a hole (zeros) -- the write, reordered
        # after the truncate, as write-behind may (it is only due at close/fsync).
        ok |= absent_ok & (have == 0) & (pos < f.landed_end)
        if ok.all():
            return None
        i = int(np.argmin(ok))
        allowed = sorted({int(f.states[k][i]) if i < f.sizes[k] else -1
                          for k in range(int(fl[i]), len(f.states))})
        lo = max(0, i - 8)
        got = content[lo:min(n, lo + 32)]
        if i >= n and -1 not in allowed:
            what = (f"after a flush byte {i} is missing (the file has {size} bytes), but it "
                    "was written and flushed")
        else:
            what = f"after a flush byte {i} of the file is one no allowed state has there"
        return Mismatch(what, offset=lo, got=got,
                        expected=f.content()[lo:min(lo + 32, f.sizes[-1])].tobytes(),
                        allowed=[a for a in allowed if a >= 0], first_bad=i)

    def check_read(self, c: int, f: FileModel, off: int, length: int, got: bytes,
                   attr_window: float) -> Mismatch | None:
        lo, hi = self.size_range(f, self.size_floor(c, f, attr_window))
        want_lo = min(length, max(0, lo - off))
        want_hi = min(length, max(0, hi - off))
        if not want_lo <= len(got) <= want_hi:
            return Mismatch(f"read of {length} at {off} returned {len(got)} bytes, allowed "
                            f"{want_lo}..{want_hi} (file sizes {lo}..{hi})", offset=off,
                            got=got, expected=f.content()[off:off + want_hi].tobytes(),
                            lengths=(want_lo, want_hi))
        return self.check_bytes(self.floors(c, f), f, off, got)
