"""The last name of a file going: ``unlink``, and ``rename`` over a file.

A file's cached data must never land on the I/O daemons after the manager removed it (the
write-back would make its stripe files again: orphans ``fsck`` finds), and what is kept of
it here must go with it. Who decides what, by case:

- **Answered here** (``-o leases`` with creates ahead: creates.py): an unlink of a name this
  mount knows in a directory it leases alone is queued behind the creates -- not of a file
  open here, nor with global caches, nor of one with unwritten data unless this mount
  writes it alone and it is its last name (delegations.py: the data go unwritten). With
  the C front end's workers, those of files closed and clean here are answered by a worker
  (csrc/front/unlinks.c; :meth:`Removals.closed_clean` says which, :meth:`Removals.
  unlinked_by_worker` makes each Python's).
- **At the manager**, knowing the inode from the names this mount gave the kernel
  (``named``): nothing cached needs more than dropping its clean blocks.
- **At the manager**, after a lookup: the last name of a file with unwritten data removes
  them with it (no write-back meanwhile, none after); with global caches their write-back
  goes first (``FileOperations.removing``); a file open here keeps its data until its last
  close (``FileOperations.removed``).
- **A rename over a file** this mount writes alone drops its unwritten data with it when
  that was its only name (else writes it back first); with global caches the replaced
  file's write-back goes first, as for an unlink.

``Removals`` is a part of :class:`~.operations.Operations` (``ops.removals``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pvfs.protocol.cred import Cred

if TYPE_CHECKING:
    from pvfs.cache import BlockCache
    from pvfs.client.aclient import AsyncClient
    from pvfs.gcache.backend import GcacheBackend

    from .creates import CreatesAhead
    from .delegations import WriteDelegations
    from .fileops import FileOperations
    from .handles import HandleTable
    from .leases import LeaseCache

__all__ = ["Removals"]

_NAMES_MAX = 65536  # (parent, name) -> inode entries remembered for unlink
_RENAME_NOREPLACE_OR_EXCHANGE = 3  # renameat2's flags: no file is replaced
_RENAME_EXCHANGE = 2


def last_name_of_file(a: dict | None) -> int | None:
    """The inode of a regular file whose attributes ``a`` show its only name, else None."""
    if a is not None and a.get("type") == "file" and a.get("nlink", 0) <= 1:
        return a["ino"]
    return None


class Removals:
    """Unlinks and renames over files, with the caches' side of each (module docstring).

    Args:
        client: the manager (``unlink``, ``lookup``, ``rename``).
        table: the open files; their per-inode state goes with the file.
        cache: the node's block cache.
        files: the open files' part (``removing``, ``removed``).
        gbackend: the global caches, or None.
        leases, ahead, delegations: with ``-o leases``: what the mount leases, the creates
            and unlinks it makes ahead, the files it writes alone (or None each).
    """

    def __init__(self, *, client: AsyncClient, table: HandleTable, cache: BlockCache,
                 files: FileOperations, gbackend: GcacheBackend | None,
                 leases: LeaseCache | None, ahead: CreatesAhead | None,
                 delegations: WriteDelegations | None) -> None:
        self.client, self.table, self.cache, self.files = client, table, cache, files
        self.gbackend, self.leases, self.ahead = gbackend, leases, ahead
        self.delegations = delegations
        # (parent, name) -> inode of the regular files this mount has named to the kernel
        # (lookup, create, readdirplus, link, rename): the kernel looks a name up before it
        # unlinks it, so unlink learns which inode's cache to drop without asking the
        # manager (a lookup there costs a manager and an I/O daemon round trip per file).
        self.names: dict[tuple[int, str], int] = {}

    def named(self, parent: int, name: str, ino: int) -> None:
        """``name`` in ``parent`` names the regular file ``ino`` (told to the kernel)."""
        if len(self.names) >= _NAMES_MAX:
            self.names.clear()
        self.names[(parent, name)] = ino

    # ------------------------------------------------------------------ unlink
    async def unlink(self, parent: int, name: str, cred: Cred) -> dict:
        """Remove ``name`` from ``parent``; the reply (the parent's new attributes)."""
        if self.ahead is not None and (ino := self.names.get((parent, name))):
            self.ahead.workers.unmark(ino)  # (unlinked by Python: creates.py unmarks the rest)
        reply = self._unlink_ahead(parent, name, cred) if self.ahead is not None else None
        if reply is None:
            reply = await self._unlink(parent, name, cred)
        return reply

    def _unlink_ahead(self, parent: int, name: str, cred: Cred) -> dict | None:
        """An unlink answered here (creates.py), or None: ask the manager."""
        d = self.leases.dirs.get(parent)
        ino = d.names.get(name) if d is not None else None
        if not ino or self.table.is_open(ino) or self.gbackend is not None:
            return None
        if self.cache.has_dirty(ino) and not self._drops_unwritten(ino):
            return None
        reply = self.ahead.unlink(parent, name, cred)
        if reply is not None:
            self.names.pop((parent, name), None)
            self.cache.forget(ino)  # (no write-back of it is under way: _drops_unwritten)
            if self.delegations is not None:
                self.delegations.dropped(ino)
            self.table.inodes.pop(ino, None)
        return reply

    def closed_clean(self, ino: int) -> bool:
        """Whether a C worker may answer an unlink of ``ino`` from now until an open or a
        setattr of it arrives (csrc/front/unlinks.c): no handle of it is open here, nothing
        of it is dirty or being written back, no global caches, its create not refused --
        what :meth:`_unlink_ahead` asks of a file, less what the worker checks itself."""
        return self.ahead is not None and self.gbackend is None and \
            not self.table.is_open(ino) and not self.cache.has_dirty(ino) and \
            not self.cache.writing_back(ino) and ino not in self.ahead.failed

    def unlinked_by_worker(self, parent: int, name: str, ino: int, cred: Cred,
                           now: int) -> dict | None:
        """An unlink of ``ino`` a C worker answered at ``now`` (the kernel has its reply):
        made this mount's as :meth:`_unlink_ahead` makes one. The reply, or None if it could
        not be made ahead after all (then it goes to the manager now)."""
        assert self.ahead is not None  # (the workers unlink only where creates go ahead)
        reply = self.ahead.unlink(parent, name, cred, now=now)
        if reply is None:
            return None
        self.names.pop((parent, name), None)
        self.cache.forget(ino)
        if self.delegations is not None:
            self.delegations.dropped(ino)
        self.table.inodes.pop(ino, None)
        return reply

    def _drops_unwritten(self, ino: int) -> bool:
        """Whether an unlink of ``ino`` here may drop its unwritten data: a file this mount
        writes alone (nobody else has seen it), this its only name, no write-back of it
        under way (one could land after the manager removed the file)."""
        a = self.leases.attrs.get(ino)
        return self.delegations is not None and self.delegations.holds(ino) and \
            a is not None and a.get("nlink") == 1 and not self.cache.writing_back(ino)

    async def at_manager(self, parent: int, name: str, cred: Cred) -> dict:
        """An unlink the manager makes now (not answered here)."""
        return await self._unlink(parent, name, cred)

    async def _unlink(self, parent: int, name: str, cred: Cred) -> dict:
        ino = self.names.pop((parent, name), None)
        if ino is not None and self.gbackend is None and not self.cache.has_dirty(ino):
            # Known inode, nothing dirty: no lookup needed. Its clean blocks may go whatever
            # its link count was (dropping clean blocks is always safe).
            reply = await self.client.unlink(parent, name, cred)
            if not self.table.is_open(ino):
                self.cache.forget(ino)
                self.table.inodes.pop(ino, None)
            return reply
        try:
            a = await self.client.lookup(parent, name, cred)
        except OSError:
            a = None
        last = last_name_of_file(a)
        if last is not None:
            await self.files.removing(last)
        if last is not None and not self.table.is_open(last) and self.cache.has_dirty(last):
            # Its unwritten data go with it: none is written back while the manager removes
            # it (the write-back would make its stripe files again), none after.
            async with self.cache.truncation(last, 0):
                reply = await self.client.unlink(parent, name, cred)
            if self.delegations is not None:
                self.delegations.dropped(last)
        else:
            reply = await self.client.unlink(parent, name, cred)
        if last is not None:
            await self.files.removed(last)
        return reply

    # ------------------------------------------------------------------ rename
    async def rename(self, old: tuple[int, str], new: tuple[int, str], flags: int,
                     cred: Cred) -> None:
        """Rename ``old`` (parent, name) to ``new`` (renameat2 ``flags``)."""
        moved, replaced = self.names.pop(old, None), self.names.pop(new, None)
        replacing = not flags & _RENAME_NOREPLACE_OR_EXCHANGE
        if self.delegations is not None and replacing:
            d = self.leases.dirs.get(new[0])
            target = replaced or (d.names.get(new[1]) if d is not None else None)
            if target and target != moved and not self.table.is_open(target) and \
                    self.delegations.holds(target) and self._drops_unwritten(target):
                # A file this mount writes alone, replaced (git's index.lock over index):
                # its unwritten data go with it, none written back while the manager
                # removes it; a refused rename cuts nothing.
                async with self.cache.truncation(target, 0):
                    await self.client.rename(old[0], old[1], new[0], new[1], cred, flags)
                self.delegations.dropped(target)
                self.cache.forget(target)
                self.table.inodes.pop(target, None)
                if moved is not None:
                    self.names[new] = moved
                return
            if target:  # written back first: a write-back after the removal would make it again
                await self.delegations.end(target)
        last = None
        if self.gbackend is not None and replacing:  # a file it replaces goes (unlink)
            try:
                last = last_name_of_file(await self.client.lookup(new[0], new[1], cred))
            except OSError:
                last = None
            if last is not None:
                await self.files.removing(last)
        await self.client.rename(old[0], old[1], new[0], new[1], cred, flags)
        if last is not None and last != moved:
            await self.files.removed(last)
        if moved is not None:
            self.names[new] = moved
        if replaced is not None and flags & _RENAME_EXCHANGE:
            self.names[old] = replaced
