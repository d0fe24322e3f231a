"""Creates made ahead of the manager for the native API (``pvfs.connect(..., ahead=True)``).

The mount's design (``fuse/creates.py``, ``daemons/mgr/ahead.py``) for a program that writes
many small files through ``pvfs.connect``. The client keeps a lease session
(``leasesession.py``) and walks the directories it creates in through leased lookups, so it
knows each one's inode, permission bits and owner until the manager recalls them. In a
directory it holds alone and has listed to the end under its lease (it knows every name
there), it asks to create ahead (``delegate``) and gets numbers of the manager's precreated
pool, whose stripe files every I/O daemon already holds. ``open(path, "wb")`` of a new name
there is then answered here: the file takes the next number, its create is queued and sent
with the others made within :data:`DELAY` in one ``ahead`` request, in order; its small
writes wait with it and go first, many files' in one request per I/O daemon (``behind.py``),
larger ones at once (all ``fresh``: the daemons drop the pool's size promise unreported, the
manager, told ``writing``, does not count the file empty); a close before the create left
sends nothing. A small file costs the program no round trip, only its share of the batches.

What keeps it correct:

- **Nobody sees the directory before the creates are there.** Another client's read or
  change of it recalls this client's lease first, and the recall is answered only after the
  queued creates are sent (:meth:`CreatesAhead._recalled`).
- **This client's own requests come after its creates**: every other manager request of
  the file system sends them first (``FileSystem.meta``); its own changes in the directory
  recall its lease like anyone's (they do not name the session), so it lists again.
- **A name is made ahead only where it is known not to be**, and only where this client
  may search every directory on the path and write in the last (the manager's rules,
  ``pvfs.protocol.attrrules``); anything else (an existing name, a symlink on the way, a
  layout other than the pool's, the session ending) is asked of the manager as before.

A create the manager refuses (the session was fenced; a full disk) is logged; the file's
``fsync`` raises ``EIO``, as its later writes do. Creates not yet sent are lost with the
process (``kill -9``), as a mount's are; ``fsync`` of the file sends them first, and
``FileSystem.sync`` does for all.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Any, Protocol

from pvfs.client.behind import MOST as BEHIND_MOST
from pvfs.client.behind import WritesBehind
from pvfs.client.datapath import MGR, DataPath
from pvfs.client.leasesession import LeaseSession
from pvfs.client.modes import writable
from pvfs.config import Config
from pvfs.protocol.attrrules import permitted
from pvfs.protocol.cred import Cred

log = logging.getLogger("pvfs.client")

__all__ = ["CreatesAhead"]

DELAY = 0.02      # seconds a create waits for others to share its request (5 ms: batches of 2-4)
WANT = 64         # numbers asked for at once at first; doubled (up to WANT_MOST) each time
WANT_MOST = 1024  # the program found none left: a fast creator is not kept waiting, a slow
#                   one does not hold hundreds it never uses (they are discarded at its end)
MOST = 1024       # creates per request (the schema's bound)
_PAGE = 4096      # names per listing request
_NAME_MAX = 255
_ROOT = 1
_MARGIN = 1.0     # seconds of session left that a create ahead needs
_STAMPS_MAX = 1 << 16  # recall stamps kept; past that every older answer is refused


class Client(Protocol):
    """What the creates need of the file system (``FileSystem`` is one)."""

    config: Config
    data: DataPath
    cred: Any


@dataclass
class _Dir:
    """A directory created in ahead: every name in it, its new files' layout."""
    names: set[str]
    stripe: list
    made: int = 0  # files created ahead in it


class CreatesAhead:
    """The session, the leased directories, the numbers and the queued creates."""

    def __init__(self, fs: Client, cred: Cred, delay: float = DELAY) -> None:
        self.fs, self.cred, self.delay = fs, cred, delay
        self.session = LeaseSession(fs.config, self._recalled, self._ended)
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()  # one batch at a time, in order
        self._clock = 0
        self._floor = 0
        self._recalled_at: dict[int, int] = {}
        self._entries: dict[tuple[int, str], int] = {}  # leased directory entries walked
        self._attrs: dict[int, dict] = {}  # leased directories' attributes
        self._dirs: dict[int, _Dir] = {}  # directories created in ahead
        self._last = 0  # the directory created in last (numbers are asked for with it)
        self.numbers: list[int] = []
        self.pending: list[dict] = []
        self._pending_inos: dict[int, dict] = {}
        self._in_flight: set[int] = set()
        self._close_after: list[int] = []  # closed while their create was on its way
        self.failed: dict[int, int] = {}  # ino -> errno of its refused create
        self._refused_told = 0  # of them, reported by ``FileSystem.sync``
        self._work = threading.Event()
        self._low = threading.Event()  # numbers running low: ask before the batch's delay
        self._want = WANT
        # Small writes of the files made here, sent behind the program (behind.py), while
        # their directory stays delegated: ino -> its directory, until the handle closes.
        self.behind = WritesBehind(fs.data, fs.config.niods, self.failed, self._work.set)
        self._made: dict[int, int] = {}
        self._stopping = False
        self._threads: list[threading.Thread] = []
        self.counters = dict.fromkeys(("created_ahead", "sent", "requests", "delegations",
                                       "refused", "failed", "closes_saved", "listings",
                                       "recalls"), 0)

    def start(self) -> bool:
        """Open the session; False if the manager grants no leases."""
        if not self.session.start():
            return False
        self._threads = [threading.Thread(target=self._run, name="pvfs-creates-ahead",
                                          daemon=True),
                         threading.Thread(target=self._supply, name="pvfs-ahead-numbers",
                                          daemon=True)]
        for t in self._threads:
            t.start()
        return True

    def close(self) -> None:
        """Send what is queued, then end the session."""
        try:
            self.flush()
        finally:
            self._stopping = True
            self._work.set()
            self._low.set()
            for t in self._threads:
                t.join(self.fs.config.request_timeout)
            self.session.close()

    # ------------------------------------------------------------------ creating
    def create(self, head: str, name: str, perm: int, flags: int) -> dict | None:
        """The attributes of file ``name`` created ahead in directory ``head`` (a path),
        or None: ask the manager."""
        if not self.session.valid(_MARGIN) or not _creatable(name):
            return None
        try:
            parent = self._walk(head)
            if parent is None or not self._delegated(parent):
                return None
        except OSError:
            return None  # (the manager's own answer follows: ENOENT, EACCES...)
        writing = writable(flags)
        with self._lock:
            d, a = self._dirs.get(parent), self._attrs.get(parent)
            if d is None or a is None or name in d.names or not self.numbers or \
                    not permitted(a["mode"], a["uid"], a["gid"], os.W_OK | os.X_OK, self.cred):
                return None
            ino = self.numbers.pop()
            d.names.add(name)
            d.made += 1
            item = {"op": "create", "parent": parent, "name": name, "mode": perm, "ino": ino,
                    "cred": self.fs.cred, "now": time.time_ns(), "open": True,
                    "deleg": False, "writing": writing}
            self.pending.append(item)
            self._pending_inos[ino] = item
            if writing:
                self._made[ino] = parent
            self._last = parent
            self.counters["created_ahead"] += 1
        self._work.set()
        return {"ino": ino, "type": "file", "stripe": d.stripe, "size": 0, "fresh": writing}

    def closing(self, ino: int) -> bool:
        """A handle of ``ino`` closes: True if the caller must send no ``close``: its
        create has not left yet and now goes unopened, or is on its way and the close
        follows its reply (in one ``closes`` with the others'), or was refused."""
        with self._lock:
            self._made.pop(ino, None)
            item = self._pending_inos.get(ino)
            if item is not None and ino not in self._in_flight:
                item["open"] = False
                self.counters["closes_saved"] += 1
                return True
            if ino in self._in_flight:
                self._close_after.append(ino)
                return True
            return ino in self.failed

    def write_behind(self, ino: int, stripe, off: int, data) -> bool:
        """Queue a small write of a file made here (True), or leave it to the caller: not
        small, across a stripe unit, or its directory no longer delegated (behind.py)."""
        iod = self.behind.place(stripe, off, len(data))
        if iod is None:
            return False
        with self._lock:
            if self._made.get(ino) not in self._dirs:
                return False
            self.behind.queue(iod, ino, stripe, off, bytes(data))
        if self.behind.nbytes >= BEHIND_MOST:
            self.behind.flush(self._lock)
        return True

    def settle(self, ino: int) -> None:
        """Return once no write of ``ino`` waits here (a read or sync of it follows)."""
        if self.behind.holds(ino):
            self.behind.flush(self._lock)

    def refused_since_sync(self) -> int:
        """Creates the manager refused since the last call."""
        with self._lock:
            n, self._refused_told = len(self.failed) - self._refused_told, len(self.failed)
        return n

    def failure(self, ino: int) -> int | None:
        """The errno of the refused create of ``ino`` (None: made, or not made ahead)."""
        return self.failed.get(ino)

    def _walk(self, path: str) -> int | None:
        """The inode of directory ``path``, through leased entries (those not known are
        looked up under the session), or None: not a directory all the way, or a
        directory on the way this client may not search."""
        ino = _ROOT
        if ino not in self._attrs:
            self._learn(None, "", self._ask("getattr", ino=_ROOT))
        for comp in (c for c in path.split("/") if c):
            a = self._attrs.get(ino)
            if a is None or comp in (".", "..") or \
                    not permitted(a["mode"], a["uid"], a["gid"], os.X_OK, self.cred):
                return None
            child = self._entries.get((ino, comp))
            if child is None:
                child = self._learn(ino, comp, self._ask("lookup", parent=ino, name=comp))
                if child is None:
                    return None
            ino = child
        return ino if ino in self._attrs else None

    def _learn(self, parent: int | None, name: str, reply: dict) -> int | None:
        """Keep a leased directory from a lookup's (or the root's getattr) reply."""
        ino = reply["ino"]
        t, leased = reply.pop("_tick"), set(reply.get("leased") or ())
        if reply.get("type") != "dir" or ino not in leased or \
                (parent is not None and parent not in leased):
            return None
        with self._lock:
            if self._overtaken([ino] if parent is None else [ino, parent], t):
                return None
            self._attrs[ino] = {k: reply[k] for k in ("mode", "uid", "gid")}
            if parent is not None:
                self._entries[(parent, name)] = ino
        return ino

    def _delegated(self, parent: int) -> bool:
        """Whether this client creates ahead in ``parent`` and holds a number for it."""
        if parent in self._dirs and self.numbers:
            if len(self.numbers) < self._want // 2 and not self._low.is_set():
                self._low.set()  # more are asked for in the background, now
                self._work.set()
            return True
        if parent not in self._dirs:
            return self._take_dir(parent)
        self._want = min(2 * self._want, WANT_MOST)  # (none left: the supply was too slow)
        return self._more_numbers(parent)

    def _take_dir(self, parent: int) -> bool:
        """List ``parent`` to the end under its lease, then ask to create ahead in it."""
        t = self._tick()
        names: set[str] = set()
        cookie = 0
        while True:
            entries = self._ask("readdir", ino=parent, cookie=cookie, limit=_PAGE,
                                attrs=False)["entries"]
            names.update(n for n, _a, _c in entries if n not in (".", ".."))
            if len(entries) < _PAGE:
                break
            cookie = entries[-1][2]
        self.counters["listings"] += 1
        want = self._want if len(self.numbers) < self._want else 0
        reply = self._ask("delegate", dir=parent, want=want)
        self.counters["delegations"] += 1
        with self._lock:
            self.numbers += reply.get("inos", [])
            if parent in self._dirs:  # another thread of this client took it meanwhile
                return bool(self.numbers)
            if not reply.get("exclusive") or parent not in self._attrs or \
                    self._overtaken([parent], t):
                self.counters["refused"] += 1
                return False
            self._dirs[parent] = _Dir(names, reply["stripe"])
            return bool(self.numbers)

    def _more_numbers(self, parent: int) -> bool:
        reply = self._ask("delegate", dir=parent, want=self._want)
        self.counters["delegations"] += 1
        with self._lock:
            self.numbers += reply.get("inos", [])
            return bool(self.numbers)

    def _ask(self, op: str, **fields) -> dict:
        """A manager request naming the session (its answers are leased to it), stamped
        with the tick it was sent at (``_tick``)."""
        t = self._tick()
        reply = self.fs.data.call(MGR, {"op": op, "cred": self.fs.cred,
                                        "lease": self.session.name, **fields})
        reply["_tick"] = t
        return reply

    # ------------------------------------------------------------------ recalls
    def _tick(self) -> int:
        with self._lock:
            self._clock += 1
            return self._clock

    def _overtaken(self, inos: list[int], t: int) -> bool:
        """Whether a recall of any of ``inos`` came after tick ``t`` (lock held)."""
        return t <= self._floor or any(self._recalled_at.get(i, 0) >= t for i in inos)

    def _recalled(self, inos: list[int]) -> None:
        """The manager recalls these leases: what this client knew of them goes (no create
        is made ahead there from now on), the queued creates are sent, and answers learned
        meanwhile are refused too (in the session's thread; answered when this returns)."""
        self.counters["recalls"] += 1
        self._forget(set(inos))
        self.flush()
        self._forget(set(inos))  # (a listing that ran beside the creates sent may miss them)

    def _forget(self, gone: set[int]) -> None:
        with self._lock:
            self._clock += 1
            if len(self._recalled_at) > _STAMPS_MAX:
                self._recalled_at.clear()
                self._floor = self._clock
            for i in gone:
                self._recalled_at[i] = self._clock
                self._attrs.pop(i, None)
                self._dirs.pop(i, None)
            self._entries = {k: v for k, v in self._entries.items()
                             if k[0] not in gone and v not in gone}

    def _ended(self) -> None:
        """The session is over: nothing leased is known any more."""
        with self._lock:
            self._clock += 1
            self._floor = self._clock
            self._recalled_at.clear()
            self._attrs.clear()
            self._dirs.clear()
            self._entries.clear()
        self._work.set()

    # ------------------------------------------------------------------ sending
    def flush(self) -> None:
        """Send every queued write, then every queued create, in order; return once the
        daemons and the manager have them all."""
        self.behind.flush(self._lock)
        with self._send_lock:
            while True:
                with self._lock:
                    items = self.pending[:MOST]
                    del self.pending[:MOST]
                    self._in_flight.update(i["ino"] for i in items)
                if not items:
                    return
                self._send(items)

    def _send(self, items: list[dict]) -> None:
        try:
            results = self.fs.data.call(MGR, {"op": "ahead", "cred": self.fs.cred,
                                              "lease": self.session.name, "brief": True,
                                              "items": items})["results"]
        except OSError as exc:
            results = [{"errno": exc.errno or errno.EIO, "error": str(exc)}] * len(items)
        self.counters["requests"] += 1
        self.counters["sent"] += len(items)
        with self._lock:
            for item, result in zip(items, results):
                ino = item["ino"]
                self._pending_inos.pop(ino, None)
                self._in_flight.discard(ino)
                if "errno" in result:
                    self.failed[ino] = result["errno"]
                    self.counters["failed"] += 1
                    log.error("create of %r made ahead was refused by the manager: %s",
                              item["name"], result.get("error") or os.strerror(result["errno"]))
            closes = [i for i in self._close_after if i not in self.failed]
            self._close_after.clear()
        if closes:  # (not waited for: DataPath.send)
            self.fs.data.send(MGR, {"op": "closes", "cred": self.fs.cred, "inos": closes})

    def _run(self) -> None:
        """Send the queued writes and creates every ``delay``."""
        while not self._stopping:
            self._work.wait()
            if self._stopping:
                return
            time.sleep(self.delay)
            self._work.clear()
            try:
                self.flush()
            except OSError as exc:
                log.warning("creates ahead: %s", exc)

    def _supply(self) -> None:
        """Keep numbers in hand: asked for as soon as half are gone (a thread of its own:
        a batch's reply can take longer than the numbers left last)."""
        while True:
            self._low.wait()
            if self._stopping:
                return
            self._low.clear()
            try:
                if len(self.numbers) < self._want // 2 and self._last in self._dirs:
                    self._more_numbers(self._last)
            except OSError as exc:
                log.warning("creates ahead: numbers: %s", exc)

    def status(self) -> dict:
        return {"session": self.session.name, "valid": self.session.valid(),
                "numbers": len(self.numbers), "queued": len(self.pending),
                "dirs": len(self._dirs), **self.counters, **self.session.counters,
                "behind": dict(self.behind.counters, enabled=self.behind.enabled)}


def _creatable(name: str) -> bool:
    """Whether ``name`` is one the manager would create (else it is asked, and says why)."""
    if name in (".", "..") or "/" in name or "\0" in name:
        return False
    try:
        return 0 < len(name.encode("utf-8")) <= _NAME_MAX
    except UnicodeEncodeError:
        return False
