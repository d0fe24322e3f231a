"""The mount's side of the manager's leases (``daemons/mgr/leases.py``): what it may answer
itself, and the session that keeps that true.

With ``-o leases`` the mount registers a lease connection with the manager under a name of
its own, names itself in its requests, and keeps what the replies lease it:

- an inode's attributes (``getattr`` answered here);
- a directory's entries: the names it learned there and the names it learned are *not* there;
  a directory it made itself, or listed to the end under one lease, is *complete*: every
  name it does not know is not there (the ``lookup`` before each ``O_CREAT`` answered here).

Until the manager recalls them: a recall drops what the mount knew of those inodes and the
kernel's copies, then is answered. The kernel caches what the mount answers from a lease
until the session's end (``kernel_timeout``, ``name_timeout``): the names the mount knows in
a directory, missing ones included, are exactly those a recall of it drops from the kernel.
The session with the manager -- registering, renewing, recalls, pushes -- is the part
``self.session`` (leasesession.py): when it ends the mount forgets everything.

**Replies racing recalls.** A reply and a recall come over different connections. Every
request takes a tick of a local clock when it is sent; a recall stamps the inodes it drops
with a tick, and so does every change this mount sends. What a reply says about an inode is
kept only if no recall (or, for whole attributes, no later own change) stamped the inode
after the request was sent. A change this mount made is applied to what it knows of the
directory from the change's own reply (the manager does not call back the holder that made
the change).
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Awaitable, Callable

from pvfs.client.aclient import AsyncClient

from .leasesession import LeaseSession
from .leasetables import LeaseMirror, _Attrs, _Dir, _Dirs

log = logging.getLogger("pvfs.fuse")

__all__ = ["MISSING", "LeaseCache", "LeaseMirror"]

MISSING = object()  # lookup's answer for a name known not to be there
_STAMPS_MAX = 1 << 16  # recall/change stamps remembered; past that all older replies refused
_DIR_NAMES_MAX = 1 << 16  # names remembered per directory (past that: not complete)
_ATTRS_MAX = 1 << 17  # inodes' attributes kept; past that the oldest learned go
_DIRS_MAX = 1 << 14   # directories' entries kept; past that the oldest learned go
_PARENTS_MAX = 1 << 16  # leased directories' parents kept (a listing's ``..``)
_ROOT = 1
_RENAME_EXCHANGE = 2  # renameat2's flag


class LeaseCache:
    """The leased attributes and entries, the stamps, the session.

    Args:
        client: the mount's client (its requests name this holder while the session runs).
        on_recall: called with the inodes recalled and the names the kernel may cache in
            them, after they were dropped here (the kernel's names are dropped there; the
            recall is answered when it returns, or after ``leasesession._NAMES_WAIT``).
    """

    def __init__(self, client: AsyncClient,
                 on_recall: Callable[[list[int], list[tuple[int, str]]], Awaitable[None]]
                 ) -> None:
        self.client = client
        self.on_recall = on_recall
        self.attrs = _Attrs()
        self.dirs = _Dirs()
        self.until = 0.0  # monotonic end of the session as this mount counts it
        # A leased directory's parent, as this mount learned it (a listing's ``..``): a
        # rename of the directory elsewhere recalls its lease, and the entry with it.
        self.parents: dict[int, int] = {}
        self.clock = 0
        self.recalled: dict[int, int] = {}  # ino -> tick of the last recall
        self.changed: dict[int, int] = {}   # ino -> tick of this mount's last change sent
        self.floor = 0
        self.released: list[int] = []  # leases forgotten here, to give back to the manager
        # Leases forgotten here (memory bound) whose copies in the kernel must go before they
        # are given back: ino -> the names the mount knew in it (a directory's).
        self.lost: dict[int, list[str]] = {}
        # Awaited with a recall's inodes before it is answered: the kernel's cached
        # attributes of them go (operations.py), the creates made ahead go to the manager
        # (creates.py). Names the kernel cached go after the answer (``on_recall``).
        self.before_answer: list[Callable[[list[int]], Awaitable[None]]] = []
        # Drops the kernel's cached attributes of inodes (operations.py: kernelview.py).
        self.kernel_attrs_gone: Callable[[list[int]], Awaitable[None]] | None = None
        # Called when the session ends (creates.py: the delegations went with it).
        self.on_session_end: list[Callable[[], None]] = []
        # Before a recall or the session's end drops a directory: the C front end's workers
        # stop creating in it and what they made is applied (fuse/workercreates.py), so the
        # names dropped from the kernel include theirs.
        self.stop_creates: Callable[[list[int] | None], None] = lambda inos: None
        client.on_fenced = self.fenced
        self.counters = dict.fromkeys(("lease_hits", "lease_negative_hits", "lease_misses",
                                       "recalls_received", "pushed", "sessions", "writing",
                                       "listings_here"), 0)
        # The connection to the manager that keeps all this true (leasesession.py).
        self.session = LeaseSession(self)

    @property
    def until(self) -> float:
        """The monotonic end of the session as this mount counts it (0: none)."""
        return self._until

    @until.setter
    def until(self, t: float) -> None:
        self._until = t
        if self.attrs.mirror is not None:
            self.attrs.mirror.until(t)

    def mirror_to(self, mirror: LeaseMirror | None) -> None:
        """Keep the leased directories' attributes and names and the session's end in
        ``mirror`` too (None: no more), starting with what is leased now."""
        old = self.attrs.mirror
        self.attrs.mirror = mirror
        self.dirs.mirror_to(mirror)
        if old is not None:
            old.drop_all()
        if mirror is not None:
            mirror.until(self._until)
            for ino, a in self.attrs.items():
                if a.get("type") == "dir":
                    mirror.keep(ino, a)

    # ------------------------------------------------------------------ answers
    def valid(self) -> bool:
        return time.monotonic() < self.until

    def remaining(self) -> float:
        return max(0.0, self.until - time.monotonic())

    def kernel_timeout(self, ino: int, floor: float) -> float:
        """The kernel's attribute timeout for an answer about ``ino``: the session's
        remaining time while a lease covers its attributes -- a recall drops the kernel's
        copy before it is answered (``before_answer``), and the kernel's copy ends with the
        session at the latest --, else ``floor`` (the mount option's)."""
        left = self.remaining()
        return max(floor, left) if left > 0 and ino in self.attrs else floor

    def name_timeout(self, parent: int, name: str, ino: int, floor: float) -> float:
        """The kernel's entry timeout for ``name`` in ``parent`` naming ``ino`` (0: no such
        name): the session's remaining time while the directory's lease covers it and this
        mount knows the name -- then a recall names it among those the kernel drops
        (``on_recall``; the drop takes the directory's lock, so it cannot overtake a lookup
        whose reply was written before it) --, else ``floor``.
        ``entry_timeout=0`` stays 0."""
        if not floor:
            return floor
        left = self.remaining()
        d = self.dirs.get(parent)
        if left <= 0 or d is None or d.names.get(name) != ino:
            return floor
        return max(floor, left)

    def getattr(self, ino: int) -> dict | None:
        if not self.valid():
            return None
        a = self.attrs.get(ino)
        self.counters["lease_hits" if a is not None else "lease_misses"] += 1
        return a

    def lookup(self, parent: int, name: str) -> dict | object | None:
        """The attributes ``name`` names in ``parent``, :data:`MISSING`, or None (unknown)."""
        if not self.valid():
            return None
        d = self.dirs.get(parent)
        if d is None:
            return None
        ino = d.names.get(name)
        if ino == 0 or (ino is None and d.complete):
            self.counters["lease_negative_hits"] += 1
            if ino is None and len(d.names) < _DIR_NAMES_MAX:
                d.put(name, 0)  # so the kernel may cache the answer (name_timeout)
            return MISSING
        if ino is None:
            return None
        a = self.attrs.get(ino)
        if a is not None:
            self.counters["lease_hits"] += 1
        return a

    # ------------------------------------------------------------------ the clock
    def listing(self, ino: int) -> list[tuple[str, int]] | None:
        """The names of directory ``ino`` with their inodes (``.`` and ``..`` first), if
        this mount leases it complete with every entry's attributes; else None."""
        if not self.valid():
            return None
        d = self.dirs.get(ino)
        parent = _ROOT if ino == _ROOT else self.parents.get(ino)
        if d is None or not d.complete or parent is None or ino not in self.attrs or \
                parent not in self.attrs:
            return None
        out = [(".", ino), ("..", parent)]
        for name, child in d.names.items():
            if child:
                if child not in self.attrs:
                    return None
                out.append((name, child))
        self.counters["listings_here"] += 1
        return out

    def current(self, parent: int, name: str, ino: int) -> dict | object | None:
        """Whether ``name`` in ``parent`` still names ``ino`` (a listing served here goes
        on): its attributes, :data:`MISSING` (gone), or None (not known here now)."""
        if not self.valid():
            return None
        if name in (".", ".."):
            return self.attrs.get(ino)
        d = self.dirs.get(parent)
        if d is None:
            return None
        now = d.names.get(name)
        if now == 0 or (now is None and d.complete):
            return MISSING
        if now is None:
            return None
        return self.attrs.get(now)  # (another inode may have taken the name meanwhile)

    def _parent_is(self, ino: int, parent: int, reply: dict) -> None:
        if reply.get("type") == "dir" and ino:
            if len(self.parents) >= _PARENTS_MAX:
                self.parents.clear()
            self.parents[ino] = parent

    def tick(self) -> int:
        """A request is about to be sent: its tick."""
        self.clock += 1
        return self.clock

    def changing(self, *inos: int) -> int:
        """This mount is about to send a change of ``inos``: its tick (older replies about
        their attributes are not kept after it)."""
        t = self.tick()
        self._stamp(self.changed, inos, t)
        return t

    def _stamp(self, stamps: dict[int, int], inos, t: int) -> None:
        if len(stamps) > _STAMPS_MAX:
            self.recalled.clear()
            self.changed.clear()
            self.floor = t
        for ino in inos:
            stamps[ino] = t

    def _fresh(self, ino: int, t: int) -> bool:
        """Whether a whole answer about ``ino`` sent at tick ``t`` is still true."""
        return t >= self.floor and self.recalled.get(ino, 0) < t and \
            self.changed.get(ino, 0) <= t

    def _delta_ok(self, ino: int, t: int) -> bool:
        """Whether this mount's own change sent at ``t`` may be applied to what it knows."""
        return t >= self.floor and self.recalled.get(ino, 0) < t

    # ------------------------------------------------------------------ learning
    def learn(self, reply: dict, t: int, parent: int | None = None,
              name: str | None = None) -> None:
        """Keep the leased parts of a reply with attributes (lookup, getattr, create, ...);
        ``parent``/``name``: the entry it answered (a lookup's)."""
        leased = reply.get("leased")
        if not leased or not self.valid():
            return
        leased = set(leased)
        ino = reply.get("ino", 0)
        if ino and ino in leased and self._fresh(ino, t):
            self._keep(ino, reply)
            if parent is not None and name not in (None, ".", ".."):
                self._parent_is(ino, parent, reply)
        if parent is not None and parent in leased and self._fresh(parent, t):
            self._set_name(self._dir(parent), name, ino)

    def learn_listing(self, parent: int, entries: list, leased: list[int] | None,
                      t: int) -> bool:
        """Keep a readdir page's leased entries; whether its names were kept (the
        directory's lease came with it)."""
        if not leased or not self.valid():
            return False
        leased = set(leased)
        keep_dir = parent in leased and self._fresh(parent, t)
        d = self._dir(parent) if keep_dir else None
        for name, a, _cookie in entries:
            ino = a["ino"]
            if ino in leased and self._fresh(ino, t):
                self._keep(ino, a)
                if name not in (".", ".."):
                    self._parent_is(ino, parent, a)
            if d is not None and name not in (".", ".."):
                self._set_name(d, name, ino)
        return keep_dir

    def _keep(self, ino: int, attrs: dict) -> None:
        attrs_ = self.attrs
        if len(attrs_) >= _ATTRS_MAX and ino not in attrs_:
            # the oldest learned go, and their leases back to the manager (with the next
            # renewal), which then stops calling this mount back for them
            for old in list(itertools.islice(attrs_, _ATTRS_MAX // 8)):
                del attrs_[old]
                if old not in self.dirs:
                    self.lost.setdefault(old, [])
        attrs_[ino] = attrs

    def _dir(self, ino: int) -> _Dir:
        d = self.dirs.get(ino)
        if d is None:
            if len(self.dirs) >= _DIRS_MAX:
                olds = list(itertools.islice(self.dirs, _DIRS_MAX // 8))
                self.stop_creates(olds)
                for old in olds:
                    gone = self.dirs.pop(old, None)
                    self.attrs.pop(old, None)
                    if gone is not None:
                        self.lost[old] = gone.kernel_names()
            d = self.dirs[ino] = _Dir()
        return d

    def _set_name(self, d: _Dir, name: str | None, ino: int) -> None:
        if name is None or name in (".", ".."):
            return
        if len(d.names) >= _DIR_NAMES_MAX and name not in d.names:
            d.complete = False
            return
        d.put(name, ino)

    # ------------------------------------------------------------------ own changes
    def made(self, parent: int, name: str, reply: dict, t: int, is_dir: bool = False) -> None:
        """This mount made ``name`` in ``parent`` (create, mkdir, mknod, symlink, link)."""
        d = self.dirs.get(parent)
        if d is not None and self._delta_ok(parent, t):
            self._set_name(d, name, reply["ino"])
        self.learn(reply, t)
        if is_dir and reply["ino"] in (reply.get("leased") or ()):
            self.dirs[reply["ino"]] = _Dir(complete=True)  # new: nothing in it
            self._parent_is(reply["ino"], parent, {"type": "dir"})
        self.parent_now(parent, reply, t)

    def removed(self, parent: int, name: str, t: int, reply: dict | None = None) -> None:
        """This mount removed ``name`` from ``parent`` (unlink, rmdir)."""
        d = self.dirs.get(parent)
        if d is not None and self._delta_ok(parent, t):
            old = d.names.get(name)
            d.put(name, 0)
            if old:
                self.attrs.pop(old, None)  # its link count and ctime changed
                self.dirs.pop(old, None)
                self.parents.pop(old, None)
        self.parent_now(parent, reply or {}, t)

    def renamed(self, old: tuple[int, str], new: tuple[int, str], t: int, flags: int,
                done: bool = False) -> None:
        """This mount renamed ``old`` to ``new`` (``done``: the manager said it did). A plain
        rename between directories it leases, of a name it knows, is applied here: ``old``
        is missing now and ``new`` names the moved inode (``git`` and editors write a
        temporary file and rename it: the directory stays complete, its creates stay
        ahead). Otherwise -- an exchange, a name not known, an outcome not known -- both
        directories' entries and attributes are re-learned from the manager. Names inside a
        moved directory stay what they were (only its ``..`` changed, which the kernel
        keeps)."""
        d_old, d_new = self.dirs.get(old[0]), self.dirs.get(new[0])
        moved = d_old.names.get(old[1]) if d_old is not None else None
        if done and not flags & _RENAME_EXCHANGE and moved and d_new is not None and \
                self._delta_ok(old[0], t) and self._delta_ok(new[0], t):
            replaced = d_new.names.get(new[1])
            if replaced == moved:  # two links of one file: POSIX's rename does nothing
                return
            d_old.put(old[1], 0)
            self._set_name(d_new, new[1], moved)
            for ino in (moved, replaced):  # their ctime (and a replaced one's link count)
                if ino:
                    self.attrs.pop(ino, None)
            if replaced:
                self.dirs.pop(replaced, None)  # (an empty directory renamed over: gone)
                self.parents.pop(replaced, None)
            if moved in self.parents:
                self.parents[moved] = new[0]
            self.attrs.pop(old[0], None)
            self.attrs.pop(new[0], None)
            return
        self.parents.clear()  # (what moved where is not known here)
        for parent, name in (old, new):
            d = self.dirs.get(parent)
            if d is not None:
                ino = d.pop(name)
                if ino:
                    self.attrs.pop(ino, None)
                d.stale.add(name)
                d.complete = False
            self.attrs.pop(parent, None)

    def unknown(self, parent: int, name: str) -> None:
        """What this mount knew of ``name`` in ``parent`` (and of every other name there not
        known) no longer holds: ask the manager again."""
        d = self.dirs.get(parent)
        if d is not None:
            if d.pop(name) is not None:
                d.stale.add(name)
            d.complete = False

    def parent_now(self, parent: int, reply: dict, t: int) -> None:
        """A change's reply with the directory's attributes after it ("parent"), or none."""
        now = reply.get("parent")
        held = parent in self.attrs or parent in self.dirs
        if now is not None and held and self._delta_ok(parent, t):
            self.attrs[parent] = now
        else:
            self.attrs.pop(parent, None)

    def attrs_now(self, ino: int, reply: dict | None, t: int) -> None:
        """A change of ``ino``'s attributes this mount made: its reply's, or forget them."""
        if reply and ino in self.attrs and self._fresh(ino, t):
            self.attrs[ino] = reply
        else:
            self.attrs.pop(ino, None)

    def forget(self, ino: int) -> None:
        self.attrs.pop(ino, None)

    def changed_here(self, ino: int) -> None:
        """A write of ``ino`` was applied here (its size or mtime as this node shows them may
        have moved, its lease entry not): a copy of its answer kept beside the tables (the
        C front end's, cmirrors.DirMirror) goes; the next getattr computes it again."""
        if self.attrs.mirror is not None:
            self.attrs.mirror.drop(ino)

    def written_here(self, ino: int) -> None:
        """This mount wrote a file it held alone back (delegations.py) and keeps its lease:
        its attributes here (the create's) go -- the next getattr asks the manager, which
        now has the file's size and blocks (``st_blocks`` of a sparse file is not its size),
        until the manager pushes them."""
        self.attrs.pop(ino, None)

    async def not_leased(self, inos: list[int]) -> None:
        """Attributes this mount kept as leased (and the kernel cached as such: creates
        ahead) that the manager did not lease after all: dropped here and from the kernel
        (``kernel_attrs_gone``)."""
        self._stamp(self.recalled, inos, self.tick())
        for ino in inos:
            self.attrs.pop(ino, None)
        if self.kernel_attrs_gone is not None:
            await self.kernel_attrs_gone(inos)

    async def writing(self, ino: int, keep: bool = False) -> None:
        """This mount is about to write ``ino``'s data to the I/O daemons, whose size report
        would recall its lease of the attributes: it gives the lease up itself -- dropped
        here and from the kernel (``before_answer``), then said to the manager, which then
        calls back the other holders only and leases the file back to all of them once it
        has the new size (``pushed``). If the report overtakes the word, the recall is
        answered as any (nothing is left to drop). ``keep``: only said, the lease kept (a
        file this mount wrote alone: the manager holds others until ``written``,
        delegations.py)."""
        if keep:  # a file it wrote alone: the lease stays (delegations.py)
            if await self.tell("writing", [ino]):
                self.counters["writing"] += 1
            return
        if ino not in self.attrs or self.session.sock is None or not self.valid():
            return
        self._stamp(self.recalled, [ino], self.tick())  # an older reply is not kept
        if self.attrs.pop(ino, None) is not None:
            for hook in self.before_answer:
                await hook([ino])
        if await self.tell("writing", [ino]):
            self.counters["writing"] += 1

    async def writing_many(self, inos: list[int], keep: set[int]) -> None:
        """:meth:`writing` for many files whose data leave at once, in one word per kind
        (``keep``: those written alone here, whose lease stays)."""
        kept = [i for i in inos if i in keep]
        if kept and await self.tell("writing", kept):
            self.counters["writing"] += len(kept)
        if self.session.sock is None or not self.valid():
            return
        given = [i for i in inos if i not in keep and i in self.attrs]
        if not given:
            return
        self._stamp(self.recalled, given, self.tick())  # an older reply is not kept
        dropped = [i for i in given if self.attrs.pop(i, None) is not None]
        for hook in self.before_answer:
            await hook(dropped)
        if await self.tell("writing", given):
            self.counters["writing"] += len(given)

    async def tell(self, op: str, inos: list[int]) -> bool:
        """Send ``{"op": op, "inos": inos}`` to the manager over the session
        (``LeaseSession.tell``); whether it went."""
        return await self.session.tell(op, inos)

    def listed(self, parent: int, since: int) -> None:
        """A listing of ``parent`` begun at tick ``since`` reached its end with no recall of
        it meanwhile: every name not known there is not there."""
        d = self.dirs.get(parent)
        if d is not None and self._delta_ok(parent, since) and len(d.names) < _DIR_NAMES_MAX:
            d.complete = True

    # ------------------------------------------------------------------ recalls, the session's end
    def _drop(self, inos: list[int]) -> list[tuple[int, str]]:
        """Drop ``inos``; the names the mount knew in those that were directories."""
        self.stop_creates(inos)
        t = self.tick()
        self._stamp(self.recalled, inos, t)
        names = []
        for ino in inos:
            self.attrs.pop(ino, None)
            self.parents.pop(ino, None)
            d = self.dirs.pop(ino, None)
            if d is not None:
                names += [(ino, n) for n in d.kernel_names()]
            names += [(ino, n) for n in self.lost.pop(ino, ())]
        return names

    def fenced(self) -> None:
        """The manager refused a request as from a fenced holder: forget every lease and
        name no holder until the session is registered again."""
        log.warning("leases: fenced by the manager; forgetting every lease")
        self.drop_all()
        self.client.lease_name = None

    def drop_all(self) -> None:
        self.stop_creates(None)
        for hook in self.on_session_end:
            hook()
        self.until = 0.0
        self.session.sock = None
        self.released.clear()  # the session's leases are gone with it
        self.lost.clear()  # (the kernel's copies end with the session: kernel_timeout)
        self.attrs.clear()
        self.dirs.clear()
        self.parents.clear()
        self.floor = self.tick() + 1  # nothing sent before now is kept

    def drop_recalled(self, inos: list[int]) -> list[tuple[int, str]]:
        """The manager recalled ``inos``: dropped here; the names the mount knew in those
        that were directories (the kernel's to drop)."""
        self.counters["recalls_received"] += 1
        return self._drop(inos)

    def pushed(self, files: list[dict]) -> None:
        """The manager leased these files again after a write (their new attributes): kept
        unless this mount changed one's attributes itself (its own reply may be newer)."""
        if not self.valid():
            return
        for a in files:
            ino = a["ino"]
            if ino not in self.changed:
                self._keep(ino, a)
        self.counters["pushed"] += len(files)

    def status(self) -> dict:
        return {"name": self.session.name, "valid": self.valid(),
                "remaining": round(self.remaining(), 1), "attrs": len(self.attrs), "dirs": len(self.dirs), **self.counters}
