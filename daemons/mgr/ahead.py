"""Creates made ahead of the manager: a leasing mount names new files itself, sends them later.

CephFS's asynchronous creates are the anchor. A mount that holds a directory's lease alone
asks to *create ahead* in it (``delegate``): the manager then counts it the directory's one
creator (:meth:`LeaseTable.delegate`) and hands it numbers of the precreated pool (no
stripe file is made for them: a file's first write makes its own). The mount answers ``create`` at once with one
of them, names and times the file as the manager would (``pvfs.protocol.cred.new_owner``),
and sends its creates in batches (``creates``), in order, each made here as if it had been
asked then, with the times the mount already showed (fuse/creates.py).

What keeps it correct:

- **Nobody else sees the directory before the creates are here.** Any read of it by another
  -- a lookup or listing in it, its attributes, a path the manager walks -- first recalls the
  creating mount's lease (:meth:`LeaseTable.reading`), and the mount sends its creates
  before it answers the recall. A change by another recalls it anyway.
- **The creating mount's own requests come after its creates.** It sends its pending creates
  before any other request to the manager, and before a created file's first write reaches
  an I/O daemon (the size cache counts a pooled file empty when it is created).
- **Numbers are the pool's, and given out once.** A number in a batch must be one
  delegated to that mount's session, or one the pool holds (a session that ended, a
  manager that restarted, a create of it refused: precreate.py holds such numbers for a
  while, claimable by a create ahead but never delegated again, then discards them);
  otherwise the create is refused (``ESTALE``).

Directories too (``mkdir``): with its numbers the mount may ask for numbers for directories
(``dirs``), reserved from the inode sequence with nothing made for them (one never used is a
gap). A directory made ahead is made here under such a number with the times the mount
showed, leased to the mount and delegated to it as a ``delegate`` of it would be: the mount
creates in it ahead from the start (``tar x``: a directory, then its files).

Unlinks and rmdirs the mount answered itself in such a directory ride in the same batches,
in order (an rmdir only of a directory it knew empty under its lease), and so do the mode,
owner and times it set on a file it created ahead and still writes alone (``tar x``: each
file's ``fchown``, ``fchmod``, ``futimens``), with the time it showed; an explicit mtime of
such a file is not set on its stripe files here (none holds data yet: the mount sets it on
those its write-back fills, fuse/delegations.py). Each item of a batch succeeds or fails on
its own; the reply lists the results in order, each only what the sender acts on (its
errno; a create's and a mkdir's leases and delegation): a batch of 800 unlinks once carried
800 directories' attributes nobody read, ~10 us each to build here and as much to decode there.
"""

from __future__ import annotations

import errno
import logging
import os

from pvfs.layout.stripe import Stripe
from pvfs.protocol.cred import Cred

log = logging.getLogger("pvfs.mgr")

__all__ = ["CreatesAhead"]

WANT_MAX = 1024  # numbers a session may hold at once
DIRS_MAX = 256   # numbers for directories a session may hold at once


class CreatesAhead:
    """The ``delegate`` and ``ahead`` requests (a part of the manager, ``server.ahead``)."""

    def __init__(self, server) -> None:
        self.server = server
        self.counters = dict.fromkeys(("delegations", "refused", "numbers", "created",
                                       "unlinked", "removed_dirs", "set", "failed",
                                       "dir_numbers", "made_dirs", "runs"), 0)

    def _pool_layout(self, directory: int) -> Stripe | None:
        """The layout a new file in ``directory`` takes, if the pool's numbers fit it."""
        s = self.server
        layout = s.store.layouts.for_new_file(directory)
        return layout if layout.pcount == s.config.niods and s.pool.batch else None

    async def delegate(self, f: dict, cred: Cred) -> dict:
        s = self.server
        name = f["lease"]
        h = s.leases.holder(name)
        if h is None:
            self.counters["refused"] += 1
            return {"exclusive": False, "inos": []}
        d = s.store.getattr(f["dir"])
        layout = self._pool_layout(f["dir"]) if d.get("type") == "dir" else None
        exclusive = layout is not None and (s.leases.exclusive.get(f["dir"]) == name or
                                            s.leases.delegate(name, f["dir"]))
        if not exclusive:
            self.counters["refused"] += 1
        inos = []
        for _ in range(min(f["want"], WANT_MAX - len(h.delegated))):
            ino = s.pool.take()
            if ino is None:
                break
            inos.append(ino)
        h.delegated.update(inos)
        self.counters["delegations"] += 1
        self.counters["numbers"] += len(inos)
        if not exclusive:
            return {"exclusive": False, "inos": inos}
        dirs = min(f["dirs"], DIRS_MAX - len(h.dir_numbers))
        dir_inos = s.store.admin.reserve_numbers(dirs) if dirs > 0 else []
        h.dir_numbers.update(dir_inos)
        self.counters["dir_numbers"] += len(dir_inos)
        return {"exclusive": True, "inos": inos, "stripe": layout.to_wire(),
                "dir_inos": dir_inos}

    async def apply(self, f: dict, cred: Cred) -> dict:
        """A batch of creates, unlinks and rmdirs, in order; each succeeds or fails on its
        own. Consecutive creates go together, a run per directory (``_creates``)."""
        results: list[dict] = []
        layouts: dict[int, Stripe | None] = {}  # (a directory's layout, asked once a batch)
        items = f["items"]
        i = 0
        while i < len(items):
            j = i
            while j < len(items) and items[j]["op"] == "create":
                j += 1
            if j - i > 1:
                results += await self._creates(items[i:j], f, layouts)
                i = j
                continue
            await self._apply_one(items[i], f, layouts, results)
            i += 1
        return {"results": results}

    async def _creates(self, items: list[dict], f: dict,
                       layouts: dict[int, Stripe | None]) -> list[dict]:
        """Consecutive creates: each directory's in one run (``_create_run``), in their
        order, the directories one after another -- creates in different directories do
        not depend on each other, and two processes creating in two directories interleave
        theirs in one batch (mdtest's ranks: runs of a few creates, not of the batch).
        Results in the items' order."""
        by_dir: dict[int, list[int]] = {}
        for k, item in enumerate(items):
            by_dir.setdefault(item["parent"], []).append(k)
        out: list[dict] = [{}] * len(items)
        for ks in by_dir.values():
            run = [items[k] for k in ks]
            made = await self._create_run(run, f["lease"], layouts, f["brief"]) \
                if len(run) > 1 else None
            if made is not None:
                self.counters["created"] += len(made)
                self.counters["runs"] += 1
            else:
                made = []
                for item in run:
                    await self._apply_one(item, f, layouts, made)
            for k, result in zip(ks, made, strict=True):
                out[k] = result
        return out

    async def _apply_one(self, item: dict, f: dict, layouts: dict, results: list) -> None:
        """One item of a batch; its result (or error) appended to ``results``."""
        try:
            if item["op"] == "create":
                results.append(await self._create(item, f["lease"], layouts, f["brief"]))
                self.counters["created"] += 1
            elif item["op"] == "unlink":
                results.append(await self._unlink(item, f["lease"]))
                self.counters["unlinked"] += 1
            elif item["op"] == "setattr":
                results.append(await self._setattr(item, f["lease"]))
                self.counters["set"] += 1
            elif item["op"] == "mkdir":
                results.append(await self._mkdir(item, f["lease"]))
                self.counters["made_dirs"] += 1
            else:
                results.append(await self._rmdir(item, f["lease"]))
                self.counters["removed_dirs"] += 1
        except OSError as exc:
            self.counters["failed"] += 1
            log.warning("%s ahead of %r in %d: %s", item["op"], item.get("name"),
                        item.get("parent", item.get("ino")), exc)
            results.append({"errno": exc.errno or errno.EIO, "error": str(exc)})

    async def _create_run(self, run: list[dict], name: str | None,
                          layouts: dict[int, Stripe | None], brief: bool) -> list[dict] | None:
        """Creates in one directory, all under numbers delegated to this holder, made in one
        transaction (``store.runs``); their results as ``_create`` gives them. None: they go
        one by one (a number not delegated, a layout the pool does not fit, any of them
        refused -- then nothing of the run was made)."""
        s = self.server
        parent = run[0]["parent"]
        h = s.leases.holder(name)
        if h is None or any(item["ino"] not in h.delegated for item in run):
            return None
        if parent not in layouts:
            layouts[parent] = self._pool_layout(parent)
        if layouts[parent] is None:
            return None
        try:
            async with s.leases.changing([parent], name):
                _, made = s.store.runs.create(parent, [
                    (item["name"], item["mode"], Cred(*item["cred"]), item["ino"], item["now"])
                    for item in run])
        except OSError:
            return None
        h.delegated.difference_update(item["ino"] for item in run)
        for item, r in zip(run, made, strict=True):
            self._sized(item, r.ino, r.spcount)
        s.store.opened_new([item["ino"] for item in run if item["open"]])
        if brief:
            return [{} for _ in made]
        return [self._created_reply(item["ino"], item, name) for item in run]

    def _created_reply(self, ino: int, item: dict, name: str | None) -> dict:
        """A create's reply: the file's lease and delegation (a new file is a regular file:
        leased while its size is cached, ``server._grantable``)."""
        s = self.server
        if name is None or s.sizes.get(ino) is None:
            return {}
        leased = s.leases.grant(name, [ino], s.leases.now())
        # its data may stay with the mount past close (fuse/delegations.py)
        return {"leased": leased, "deleg": bool(item["deleg"] and leased and
                                                s.leases.write_delegate(name, ino))}

    async def _unlink(self, item: dict, name: str | None) -> dict:
        s = self.server
        parent = item["parent"]
        async with s.leases.changing([parent, s.store.child_ino(parent, item["name"])], name):
            s._reap(s.store.unlink(parent, item["name"], Cred(*item["cred"]), now=item["now"]))
        return {}

    async def _rmdir(self, item: dict, name: str | None) -> dict:
        s = self.server
        parent = item["parent"]
        async with s.leases.changing([parent, s.store.child_ino(parent, item["name"])], name):
            s.store.rmdir(parent, item["name"], Cred(*item["cred"]), now=item["now"])
        return {}

    async def _mkdir(self, item: dict, name: str | None) -> dict:
        """A directory made ahead: under a number delegated to this session for directories,
        leased to it and created in by it alone from then on (it already creates in it:
        its creates there follow in this batch or the next), as a ``delegate`` would have."""
        s = self.server
        ino, parent = item["ino"], item["parent"]
        h = s.leases.holder(name)
        if h is not None and ino in h.dir_numbers:
            h.dir_numbers.discard(ino)
        elif not s.store.admin.number_unused(ino):
            # (a session that ended, a manager that restarted: a number reserved and never
            # used may still be claimed -- nothing was made for it -- but no other)
            raise OSError(errno.ESTALE, f"inode {ino} is not delegated to this mount")
        async with s.leases.changing([parent], name):
            s.store.mkdir(parent, item["name"], item["mode"], Cred(*item["cred"]), ino=ino,
                          now=item["now"])
        leased = s.leases.grant(name, [ino], s.leases.now())
        return {"leased": leased, "exclusive": bool(leased) and s.leases.delegate(name, ino)}

    async def _setattr(self, item: dict, name: str | None) -> dict:
        s = self.server
        ino = item["ino"]
        async with s.leases.changing([ino], name):
            attrs = s.store.setattr(ino, Cred(*item["cred"]), mode=item["mode"],
                                    uid=item["uid"], gid=item["gid"],
                                    atime_ns=item["atime_ns"], mtime_ns=item["mtime_ns"],
                                    now=item["times_now"], stamp=item["now"])
        if item["mtime_ns"] is not None and attrs["type"] == "file" and \
                not s.leases.writes_alone(name, ino):  # (then as any explicit mtime)
            await s.stripes.set_mtime(attrs)
        return {}

    async def _create(self, item: dict, name: str | None,
                      layouts: dict[int, Stripe | None], brief: bool) -> dict:
        s = self.server
        ino, parent = item["ino"], item["parent"]
        h = s.leases.holder(name)
        if h is not None and ino in h.delegated:
            h.delegated.discard(ino)
        elif not s.pool.claim(ino):
            raise OSError(errno.ESTALE, f"inode {ino} is not delegated to this mount")
        cred = Cred(*item["cred"])
        try:
            if parent not in layouts:
                layouts[parent] = self._pool_layout(parent)
            if layouts[parent] is None:
                raise OSError(errno.EXDEV, "the directory's layout is not the pool's")
            async with s.leases.changing([parent], name):
                attrs, _ = s.store.create(parent, item["name"], item["mode"], cred,
                                          exclusive=True, precreated=ino, now=item["now"])
        except BaseException:
            s.pool.hold([ino])  # the mount's kernel may hold a file under it: never reused
            raise
        if attrs["ino"] != ino:  # cannot happen with the pool's layout; never leave it
            s.store.admin.remove_inode(attrs["ino"])
            raise OSError(errno.EIO, f"create ahead of {item['name']!r} took inode "
                                     f"{attrs['ino']}, not {ino}")
        self._sized(item, ino, Stripe(*attrs["stripe"]).pcount)
        if item["open"]:
            s.store.open(ino, os.O_RDWR, cred, created=True)
        return {} if brief else self._created_reply(ino, item, name)

    def _sized(self, item: dict, ino: int, pcount: int) -> None:
        """A new file's size in the size cache: empty, unless it was written already (its
        writer's data may be on the daemons, the pool's size promise dropped unreported --
        a native client's ``fresh`` writes: not counted empty)."""
        if item["writing"]:
            self.server.sizes.forget([ino], reported=False)
        else:
            self.server.sizes.created(ino, pcount)

    def status(self) -> dict:
        return dict(self.counters)
