"""Creates made ahead of the manager (``-o leases``): ``create`` answered here, sent in batches.

A file create used to wait for the manager (the issue-29 profile: 0.4-0.6 ms of a create's
1.1 ms). A mount that holds a directory's lease alone, and knows all its names (the
directory is *complete*), may instead ask to create ahead in it (``delegate``, once per
directory and lease): the manager makes it the directory's one creator and hands it numbers
of its precreated pool, whose stripe files every I/O daemon already holds
(``daemons/mgr/ahead.py``). Then a ``create`` there is answered at once: the file gets the
next number, the owner, permission bits and times the manager would give it
(``pvfs.protocol.inodes``), and the directory its new times and size; the create is queued
and sent with the others made within :data:`DELAY` in one ``creates`` request, in order.

The order that keeps it correct:

- Every other request of this mount to the manager waits until the queued creates are sent
  (``AsyncClient.before_meta``): a ``stat`` of the directory by the manager, a rename, an
  unlink, a close all come after the creates they may depend on.
- A file's first write waits for its create (the manager counts a pooled file empty when it
  creates it), and so do ``fsync`` and ``fsyncdir``.
- A recall of the directory's lease -- another node or client is about to read or change it
  -- is answered only after the queued creates are sent (``LeaseCache.before_answer``), so
  nobody ever sees the directory without them; creating ahead there ends with the lease.

A create the manager refuses (its number held past its time after the session ended --
the manager holds such numbers a while and never gives them out again, daemons/mgr/
precreate.py --; a full disk) is logged as an error; the file's later reads and writes fail
with ``EIO`` and the name is dropped. So are the queued creates of a mount the manager
fenced (a recall it did not answer in time: the manager went on without them, and another
node may have acted on the directory as it was): they are refused (``ESTALE``), never
applied late. Creates not yet sent are lost with the mount (``kill
-9``), as data not yet written back is; ``fsync`` of the file or of its directory makes them
durable.
"""

from __future__ import annotations

import errno
import logging
import stat
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import trio

from pvfs.client.aclient import AsyncClient
from pvfs.protocol.attrrules import setattr_values
from pvfs.protocol.cred import Cred
from pvfs.protocol.inodes import dir_size, new_owner

from .leases import LeaseCache
from .workercreates import NoWorkers

if TYPE_CHECKING:
    from .closes import DeferredCloses
    from .delegations import WriteDelegations

log = logging.getLogger("pvfs.fuse")

__all__ = ["CreatesAhead"]

DELAY = 0.005  # seconds a create waits for others to share its request (-o ahead_delay)
MOST = 1024  # creates per request (the schema's bound)
WANT = 64  # numbers asked for at once (a few: the pool serves everyone's creates)
REFUSED_FOR = 1.0  # seconds a directory the manager refused is not asked about again
DIRS_WANT = 32  # numbers for directories asked for at once (``tar x``: a directory per ~14 files)


class CreatesAhead:
    """The numbers and directories delegated to this mount, and the creates not yet sent."""

    def __init__(self, client: AsyncClient, leases: LeaseCache, timeout: float,
                 delay: float = DELAY, refused: Callable[[int], None] | None = None) -> None:
        self.client, self.leases, self.timeout, self.delay = client, leases, timeout, delay
        self.dirs: dict[int, list[int]] = {}   # directory -> new files' stripe
        self.numbers: list[int] = []
        self.dir_numbers: list[int] = []  # for directories made ahead (no stripe files)
        self._unsent_dirs: set[int] = set()  # made ahead, their mkdir not yet landed there
        self.pending: list[dict] = []
        self.pending_inos: dict[int, dict] = {}  # ino -> its queued create
        self._in_flight: set[int] = set()  # queued creates being sent now
        self.failed: dict[int, int] = {}       # ino -> errno of its refused create
        # told of each refused create before its I/O is refused (reads answered in C stop)
        self.refused = refused
        self._refused: dict[int, float] = {}   # directory -> until when not asked again
        self._lock = trio.Lock()
        self._work = trio.Event()
        self._low = trio.Event()  # numbers are running out
        self._last = 0  # the directory created in last (asked about when numbers run out)
        self.delegations: WriteDelegations | None = None  # its writes too (set by Operations)
        self.opens: DeferredCloses | None = None  # creates' opens told later (set likewise)
        self.workers: NoWorkers = NoWorkers()  # the C front end's worker creates (cfront.py)
        self.counters = dict.fromkeys(("created_ahead", "unlinked_ahead", "cancelled", "sent",
                                       "requests", "refused", "delegations", "closes_saved",
                                       "failed_unlinks", "not_leased", "rmdirs_ahead",
                                       "set_ahead", "failed_sets", "mkdirs_ahead",
                                       "failed_mkdirs", "made_by_workers"), 0)
        client.before_meta.insert(0, self._before_meta)  # (first: a later request may name them)
        leases.before_answer.append(self._before_recall_answer)
        leases.on_session_end.append(self._session_ended)

    # ------------------------------------------------------------------ creating
    def _may_make(self, parent: int, name: str) -> bool:
        """Whether ``name`` can be made ahead in ``parent``: leased complete, not there."""
        leases = self.leases
        d = leases.dirs.get(parent)
        if d is None or not d.complete or parent not in leases.attrs or not leases.valid() \
                or d.names.get(name):
            return False
        try:
            name.encode("utf-8")  # (its length the caller checked, on the kernel's bytes)
        except UnicodeEncodeError:
            return False  # the manager refuses it (EINVAL): let it say so
        return True

    async def create(self, parent: int, name: str, mode: int, cred: Cred) -> dict | None:
        """Attributes of a file created ahead in ``parent``, or None: ask the manager."""
        leases = self.leases
        if not self._may_make(parent, name) or not await self._delegated(parent):
            return None
        # (asking may have lost the lease meanwhile)
        if not self._may_make(parent, name) or not self.numbers or parent not in self.dirs:
            return None
        above = leases.attrs[parent]
        owner = new_owner(above["mode"], above["gid"], mode, False, cred)
        ino = self.numbers.pop()
        self.workers.unmark(ino)  # (a number back from a cancelled create: a new file now;
        #                           a worker's create drops it itself, creates.c)
        a = self._make_file(parent, name, mode, cred, ino, time.time_ns(), owner)
        self.workers.dir_on(parent)
        self._lend()
        return a

    def made(self, parent: int, name: str, mode: int, cred: Cred, ino: int, now: int,
             owner: tuple[int, int]) -> dict:
        """A create a C worker made and answered (csrc/front/creates.c) with a number lent
        to it, its clock and the permission bits and group it gave the file (``owner``):
        made this mount's as :meth:`create` makes one. The directory was one this mount
        creates ahead in, leased and complete, when the worker made it; whatever changes
        that first turns the workers off there and applies what they made
        (``workers.dirs_off``), so the tables are still as the worker saw them -- and if
        not, the create is still sent, its name and the directory's attributes not kept."""
        self.counters["made_by_workers"] += 1
        a = self._make_file(parent, name, mode, cred, ino, now, owner)
        self._lend()
        return a

    def _make_file(self, parent: int, name: str, mode: int, cred: Cred, ino: int,
                   now: int, owner: tuple[int, int]) -> dict:
        """File ``ino`` made ahead in ``parent``, with (permission bits, group) ``owner``:
        its attributes (the directory's new ones under ``"parent"``), the lease tables told,
        its create queued."""
        leases = self.leases
        d, above = leases.dirs.get(parent), leases.attrs.get(parent)
        perm, gid = owner
        a = {"ino": ino, "type": "file", "mode": stat.S_IFREG | perm, "nlink": 1,
             "uid": cred.uid, "gid": gid, "size": 0, "atime_ns": now, "mtime_ns": now,
             "ctime_ns": now, "stripe": self.dirs.get(parent), "rdev": 0, "blocks": 0,
             "created": True, "secx": False}
        if d is not None and above is not None:
            a["parent"] = {**above, "mtime_ns": now, "ctime_ns": now,
                           "size": dir_size(d.entries + 1)}  # (the name is not in it yet)
        t = leases.changing(parent)
        leases.made(parent, name, {**a, "leased": [ino]}, t)
        item = {"op": "create", "parent": parent, "name": name, "mode": mode, "ino": ino,
                "cred": cred.to_wire(), "now": now, "open": True,
                "deleg": self.delegations is not None, "writing": False}
        if self.delegations is not None:
            self.delegations.start(ino)
        self.pending.append(item)
        self.pending_inos[ino] = item
        self.counters["created_ahead"] += 1
        self._work.set()
        return a

    async def mkdir(self, parent: int, name: str, mode: int, cred: Cred) -> dict | None:
        """Attributes of a directory made ahead in ``parent``, or None: ask the manager.
        Its number is one the manager reserved for this mount's directories; the mount
        leases it complete and empty and creates ahead in it at once, as the manager
        makes it this mount's when the ``mkdir`` arrives (daemons/mgr/ahead.py)."""
        leases = self.leases
        if not self._may_make(parent, name) or not await self._delegated(parent):
            return None
        if not self.dir_numbers:
            await self._there(parent)
            reply = await self.client.delegate(parent, 0, dirs=DIRS_WANT)
            self.counters["delegations"] += 1
            if not reply.get("exclusive"):
                self._drop_dir(parent)
                return None
            self.dir_numbers += reply.get("dir_inos", [])
        if not self._may_make(parent, name) or not self.dir_numbers or parent not in self.dirs:
            return None
        d, above = leases.dirs[parent], leases.attrs[parent]
        ino = self.dir_numbers.pop()
        now = time.time_ns()
        perm, gid = new_owner(above["mode"], above["gid"], mode, True, cred)
        parent_now = {**above, "mtime_ns": now, "ctime_ns": now, "nlink": above["nlink"] + 1,
                      "size": dir_size(d.entries + 1)}  # (the name is not in it yet)
        a = {"ino": ino, "type": "dir", "mode": stat.S_IFDIR | perm, "nlink": 2,
             "uid": cred.uid, "gid": gid, "size": dir_size(0), "atime_ns": now,
             "mtime_ns": now, "ctime_ns": now, "stripe": above.get("stripe"), "rdev": 0,
             "secx": False, "parent": parent_now}
        t = leases.changing(parent)
        leases.made(parent, name, {**a, "leased": [ino]}, t, is_dir=True)
        self.dirs[ino] = self.dirs[parent]  # (it inherits the parent's layout)
        self._unsent_dirs.add(ino)
        self.pending.append({"op": "mkdir", "parent": parent, "name": name, "mode": mode,
                             "ino": ino, "cred": cred.to_wire(), "now": now})
        self.counters["mkdirs_ahead"] += 1
        self._work.set()
        return a

    def unlink(self, parent: int, name: str, cred: Cred, now: int | None = None
               ) -> dict | None:
        """The reply of an unlink made ahead in ``parent`` (the directory's new attributes),
        or None: ask the manager. The name must be one this mount knows there (the kernel
        has made sure it is no directory, and that the caller may remove it); the caller
        makes sure no handle of this mount holds it and nothing of it waits to be written
        back. Whether it was the file's last name is the manager's to find when the unlink
        arrives: the data go then (its reaper), or with the last handle elsewhere. ``now``:
        a C worker answered it then, the session valid (csrc/front/unlinks.c)."""
        leases = self.leases
        d = leases.dirs.get(parent)
        above = leases.attrs.get(parent)
        if now is None and d is not None and d.names.get(name):
            self.workers.unmark(d.names[name])  # (Python unlinks it: see WorkerCreates)
        if parent not in self.dirs or d is None or not d.complete or above is None or \
                (now is None and not leases.valid()):
            return None
        ino = d.names.get(name)
        if not ino or ino in self.failed:
            return None
        now = time.time_ns() if now is None else now
        parent_now = {**above, "mtime_ns": now, "ctime_ns": now,
                      "size": dir_size(d.entries - 1)}  # (the name goes after: removed)
        item = self.pending_inos.get(ino)
        if item is not None and ino not in self._in_flight and not item["open"]:
            # made and removed before either was sent: neither is (the number is unused),
            # nor the changes made ahead to it (the number may name another file next)
            self.pending = [i for i in self.pending
                            if i is not item and not (i["op"] == "setattr" and i["ino"] == ino)]
            del self.pending_inos[ino]
            self.workers.unmark(ino)  # (before the number names another file)
            self.numbers.append(ino)
            self.counters["cancelled"] += 1
        else:
            self.pending.append({"op": "unlink", "parent": parent, "name": name,
                                 "cred": cred.to_wire(), "now": now})
            self.counters["unlinked_ahead"] += 1
            self._work.set()
        return {"parent": parent_now}

    async def rmdir(self, parent: int, name: str, cred: Cred) -> dict | None:
        """The reply of an rmdir made ahead in ``parent`` (the directory's new attributes),
        or None: ask the manager. The directory removed must be one this mount knows empty
        under its lease (complete, no name there): nobody else can have made a name in it
        without recalling that lease, and this mount's own creates and unlinks in it go
        before, in order. The kernel has checked the caller may remove it. A parent this
        mount does not create in yet is asked for once (``rm -r`` of directories that
        hold only directories)."""
        if not self._empty_dir_known(parent, name):
            return None
        if parent not in self.dirs:
            await self._delegated(parent)
            if parent not in self.dirs or not self._empty_dir_known(parent, name):
                return None
        leases = self.leases
        d = leases.dirs[parent]
        above = leases.attrs[parent]
        ino = d.names[name]
        now = time.time_ns()
        self.pending.append({"op": "rmdir", "parent": parent, "name": name,
                             "cred": cred.to_wire(), "now": now})
        self._drop_dir(ino)
        self.counters["rmdirs_ahead"] += 1
        self._work.set()
        return {"parent": {**above, "mtime_ns": now, "ctime_ns": now,
                           "nlink": above["nlink"] - 1, "size": dir_size(d.entries - 1)}}

    def setattr(self, ino: int, kw: dict, cred: Cred) -> dict | None:
        """The attributes after a change of mode, owner or times made ahead (``kw``: the
        manager's setattr arguments, no size), or None: ask the manager. Only of a file
        created ahead here and written alone, none of its data on the I/O daemons yet
        (delegations.py), or of a directory this mount creates in (its lease is this
        mount's alone): nobody else can see or change it before this mount sends its
        changes, so its attributes here are the manager's; the same rules decide
        (``pvfs.protocol.attrrules``), and the change goes in the next batch, after the
        creates before it. ``tar x`` sets three per file and per directory."""
        dels = self.delegations
        a = self.leases.attrs.get(ino)
        if a is None or not self.leases.valid() or ino in self.failed:
            return None
        if a.get("type") == "file":
            if dels is None or not dels.holds(ino):
                return None
        elif a.get("type") != "dir" or ino not in self.dirs:
            return None
        now = time.time_ns()
        uid, gid = kw.get("uid"), kw.get("gid")
        mode, uid, gid, atime, mtime = setattr_values(
            (a["mode"], a["uid"], a["gid"], a["atime_ns"], a["mtime_ns"]), cred, now,
            perm=kw.get("mode"), uid=None if uid == -1 else uid,
            gid=None if gid == -1 else gid, atime_ns=kw.get("atime_ns"),
            mtime_ns=kw.get("mtime_ns"), size=None, now=kw.get("now", False), what=ino)
        self.pending.append({"op": "setattr", "ino": ino, "cred": cred.to_wire(), "now": now,
                             "mode": kw.get("mode"), "uid": kw.get("uid"),
                             "gid": kw.get("gid"), "atime_ns": kw.get("atime_ns"),
                             "mtime_ns": kw.get("mtime_ns"),
                             "times_now": kw.get("now", False)})
        if a["type"] == "file" and ("mtime_ns" in kw or kw.get("now")):
            dels.times_here(ino, mtime)  # (its write-back sets it on the data)
        self.counters["set_ahead"] += 1
        self._work.set()
        return {**a, "mode": mode, "uid": uid, "gid": gid, "atime_ns": atime,
                "mtime_ns": mtime, "ctime_ns": now}

    def _empty_dir_known(self, parent: int, name: str) -> bool:
        """Whether ``name`` in ``parent`` is a directory this mount knows empty, both
        leased complete."""
        leases = self.leases
        d = leases.dirs.get(parent)
        if d is None or not d.complete or parent not in leases.attrs or not leases.valid():
            return False
        ino = d.names.get(name)
        gone = leases.dirs.get(ino) if ino else None
        a = leases.attrs.get(ino) if ino else None
        return gone is not None and gone.complete and not gone.entries and a is not None \
            and a.get("type") == "dir"

    async def _delegated(self, parent: int) -> bool:
        """Whether this mount may create ahead in ``parent`` and holds a number for it."""
        self._last = parent
        if parent in self.dirs and self.numbers:
            if len(self.numbers) < WANT // 2:
                self._low.set()  # asked for in the background
            return True
        if self._refused.get(parent, 0.0) > time.monotonic():
            return False
        await self._there(parent)
        reply = await self.client.delegate(parent, WANT if len(self.numbers) < WANT else 0)
        self.counters["delegations"] += 1
        self._add_numbers(reply.get("inos", []))
        if not reply.get("exclusive"):
            self._refused[parent] = time.monotonic() + REFUSED_FOR
            self.counters["refused"] += 1
            return False
        self.dirs[parent] = reply["stripe"]
        self.workers.dir_on(parent)
        return bool(self.numbers)

    async def _there(self, directory: int) -> None:
        """Before a request names ``directory`` (asking for numbers): if this mount made it
        ahead, its ``mkdir`` goes first (a delegation is not a request that sends them)."""
        if directory in self._unsent_dirs:
            await self.send_pending()

    def _add_numbers(self, inos: list[int]) -> None:
        """Numbers delegated to this mount, less those whose create it saw refused (the
        manager never delegates such a number again; this is the mount's own guard: its
        kernel may still hold the refused file under that number)."""
        self.numbers += [i for i in inos if i not in self.failed]

    def _lend(self) -> None:
        """Some numbers to the C workers when theirs run low; more asked for when these do."""
        self.workers.lend(self.numbers)
        if len(self.numbers) < WANT // 2:
            self._low.set()

    def _drop_dir(self, parent: int) -> None:
        """This mount no longer creates ahead in ``parent``; nor do the workers, and what
        they made there is applied."""
        self.workers.dirs_off([parent])  # (first: what they made there needs its stripe)
        self.dirs.pop(parent, None)

    # ------------------------------------------------------------------ sending
    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Send the queued creates every ``delay``; keep a supply of numbers."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._supply)
            task_status.started()
            while True:
                await self._work.wait()
                self._work = trio.Event()
                if self.pending and len(self.pending) < MOST:
                    await trio.sleep(self.delay)
                await self.send_pending()

    async def _supply(self) -> None:
        """Ask for more numbers when they run low (the pool may be empty: try later)."""
        while True:
            await self._low.wait()
            self._low = trio.Event()
            parent = self._last
            if parent not in self.dirs or len(self.numbers) >= WANT // 2:
                continue
            with trio.move_on_after(self.timeout):
                try:
                    await self._there(parent)
                    reply = await self.client.delegate(parent, WANT)
                    self._add_numbers(reply.get("inos", []))
                    self.workers.lend(self.numbers)
                    if not reply.get("exclusive"):
                        self._drop_dir(parent)  # (removed, or another reads it now)
                except OSError as exc:
                    self._drop_dir(parent)
                    log.info("creates ahead: asking for numbers: %s", exc)
            if len(self.numbers) < WANT // 2:
                await trio.sleep(0.05)  # the pool is being refilled

    async def _before_meta(self, _op: str) -> None:
        await self.send_pending()

    async def send_pending(self) -> None:
        """Send every queued create (before any other request to the manager)."""
        if not self.pending:
            return
        told_now: list[int] = []
        async with self._lock:
            while self.pending:
                batch = self.pending[:MOST]
                self._in_flight.update(item["ino"] for item in batch if item["op"] == "create")
                self._opens_told_later(batch)
                results = await self._send(batch)
                del self.pending[:len(batch)]
                unleased = [item["ino"] for item, r in zip(batch, results, strict=True)
                            if self._landed(item, r)]
                if unleased:  # the kernel was told they were leased: its copies go too
                    await self.leases.not_leased(unleased)
                    told_now += unleased
        if told_now and self.opens is not None:  # nobody recalls them: their opens now
            await self.opens.send_opens(told_now)

    def _opens_told_later(self, batch: list[dict]) -> None:
        """The creates of files still open go unopened, each open as one answered here
        (closes.py): told when a recall of the file or this mount's own unlink or rename
        needs it, else after OPEN_DELAY, and not at all when the file is closed first --
        so creating, writing and closing a file sends nothing but its create."""
        if self.opens is None:
            return
        for item in batch:
            if item["op"] == "create" and item["open"]:
                item["open"] = False
                self.opens.opened(item["ino"])

    async def _send(self, batch: list[dict]) -> list[dict]:
        delay = 0.1
        with trio.move_on_after(self.timeout):
            while True:
                try:
                    results = await self.client.ahead(batch)
                    self.counters["requests"] += 1
                    return results
                except OSError as exc:
                    if exc.errno == errno.ESTALE:  # fenced: the manager went on without them
                        return [{"errno": errno.ESTALE, "error": str(exc)}] * len(batch)
                    log.info("creates ahead: sending %d: %s (again in %.1f s)", len(batch),
                             exc, delay)
                await trio.sleep(delay)
                delay = min(delay * 2, 2.0)
        return [{"errno": errno.EIO, "error": "the manager did not take them"}] * len(batch)

    def _landed(self, item: dict, r: dict) -> bool:
        """A queued change's result; whether it was a create the manager did not lease (its
        size is not watched: sizecache.py), whose attributes must be asked again."""
        if item["op"] == "setattr":
            if "errno" in r:  # (shown here, refused there: what this mount knew is wrong)
                self.counters["failed_sets"] += 1
                log.error("setattr of inode %d made ahead of the manager was refused: %s",
                          item["ino"], r.get("error"))
                self.leases.forget(item["ino"])
                if self.delegations is not None:
                    self.delegations.drop_times(item["ino"])
            return False
        if item["op"] == "mkdir":
            return self._made_dir(item, r)
        if item["op"] in ("unlink", "rmdir"):
            if "errno" in r:
                self.counters["failed_unlinks"] += 1
                log.error("%s of %r in directory %d made ahead of the manager was "
                          "refused: %s", item["op"], item["name"], item["parent"],
                          r.get("error"))
                self._forget_dir(item["parent"])
            return False
        ino = item["ino"]
        self.pending_inos.pop(ino, None)
        self._in_flight.discard(ino)
        if "errno" not in r:
            self.counters["sent"] += 1
            if self.delegations is not None:
                self.delegations.landed(ino, bool(r.get("deleg")))
            if ino not in (r.get("leased") or ()):
                self.counters["not_leased"] += 1
                return True
            return False
        if self.refused is not None:
            self.refused(ino)
        self.failed[ino] = r["errno"]
        if self.opens is not None:
            self.opens.cancel_opens(ino)
        if self.delegations is not None:
            self.delegations.forget(ino)
        log.error("create of %r in directory %d (inode %d) made ahead of the manager was "
                  "refused: %s; the file is gone", item["name"], item["parent"], ino,
                  r.get("error"))
        self.leases.forget(ino)
        self._forget_dir(item["parent"], item["name"])
        return False

    def _made_dir(self, item: dict, r: dict) -> bool:
        """A directory made ahead landed (True: the manager did not lease it after all, so
        what the kernel keeps of it must go) or was refused (gone, and what was made in it
        with it: those creates are refused in turn)."""
        ino = item["ino"]
        self._unsent_dirs.discard(ino)
        if "errno" not in r:
            if not r.get("exclusive"):
                self._drop_dir(ino)  # (made; not created in ahead from now on)
            if ino in (r.get("leased") or ()):
                return False
            self.leases.dirs.pop(ino, None)
            return True
        self.counters["failed_mkdirs"] += 1
        log.error("mkdir of %r in directory %d (inode %d) made ahead of the manager was "
                  "refused: %s; the directory is gone", item["name"], item["parent"], ino,
                  r.get("error"))
        self._drop_dir(ino)
        self.leases.dirs.pop(ino, None)
        self.leases.forget(ino)
        self._forget_dir(item["parent"], item["name"])
        return False

    def _forget_dir(self, parent: int, name: str | None = None) -> None:
        """What this mount knew of ``parent`` no longer holds: ask the manager again."""
        self.workers.dirs_off([parent])
        if name is not None:
            self.leases.unknown(parent, name)
        elif (d := self.leases.dirs.get(parent)) is not None:
            d.complete = False
        self.leases.attrs.pop(parent, None)

    def closed(self, ino: int) -> bool:
        """The last handle of ``ino`` closed: if its create is still queued, it goes as a
        file nobody holds open and the close need not be told (True)."""
        item = self.pending_inos.get(ino)
        if item is None or ino in self._in_flight or not item["open"]:
            return False
        item["open"] = False
        self.counters["closes_saved"] += 1
        return True

    def alive(self, ino: int) -> None:
        """``ino`` names a file again (the manager took a refused create's number back into
        its pool after a restart, and gave it to a new file): its I/O is no longer refused."""
        self.failed.pop(ino, None)

    def check(self, ino: int) -> None:
        """Refuse I/O to a file whose create the manager refused."""
        code = self.failed.get(ino)
        if code is not None:
            raise OSError(errno.EIO, f"the create of inode {ino} was refused "
                                     f"({errno.errorcode.get(code, code)})")

    async def before_io(self, ino: int) -> None:
        """A file's first write (and fsync) waits for its create."""
        if ino in self.pending_inos:
            await self.send_pending()
        self.check(ino)

    # ------------------------------------------------------------------ leases
    async def _before_recall_answer(self, inos: list[int]) -> None:
        """A recall of a directory this mount creates in: the creates go first (the
        workers' too: the lease tables turned them off and applied theirs already)."""
        lost = [i for i in inos if i in self.dirs]
        self.workers.dirs_off(lost)
        if lost or any(item.get("parent") in inos or item.get("ino") in inos
                       for item in self.pending):
            await self.send_pending()
        for i in lost:  # (the session may have ended meanwhile, taking them all)
            self._drop_dir(i)

    def _session_ended(self) -> None:
        """The lease session is gone: so are the delegations (the manager holds the unused
        numbers). Queued creates are still sent: the manager claims their held numbers."""
        self.workers.dirs_off(None)
        self.workers.take_back()
        self.dirs.clear()
        self.numbers.clear()
        self.dir_numbers.clear()
        self._unsent_dirs.clear()

    def status(self) -> dict:
        return {**self.counters, "pending": len(self.pending), "numbers": len(self.numbers) + self.workers.left(),
                "dirs": len(self.dirs), "failed": len(self.failed)}
