"""Creates and unlinks answered by the C front end's workers, from Python's side
(``-o frontend=c``).

A mount that creates ahead of the manager in a directory (creates.py) answered each create
there from Python: one trip through its loop per file, most of what an empty create cost
it. With the C front end, Python lends the workers the directories it creates ahead in and
some of the inode numbers the manager delegated, and a worker answers a create there itself
(csrc/front/creates.c says how, and what it leaves to Python); each such create reaches
Python as a record it applies without replying (``CFront``, :func:`apply_made`):
the same create queued for the manager, lease tables, open handle as if Python had made it.

What keeps them equal is in creates.c. This side's part: before Python changes anything a
worker's create depends on -- the directory's lease (a recall, the session's end), whether
it creates ahead there, the numbers -- it turns the directories off (:meth:`dirs_off`), under
the workers' lock, and applies every record made before (``catch_up``), in one step.

Unlinks there too (csrc/front/unlinks.c): of a file Python said was closed and clean when a
release of it ended (``Removals.closed_clean``), until an open or setattr of it arrives.
Each reaches Python as a record (:func:`apply_unlinked`), as a create's does.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from pyfuse3 import EntryAttributes

if TYPE_CHECKING:
    from .operations import Operations

log = logging.getLogger("pvfs.fuse")

__all__ = ["LEND", "NoWorkers", "WorkerCreates", "apply_made", "apply_unlinked"]

LEND = 64  # numbers the workers hold at most
LOW = 16  # below this many, they get more (from creates.py's supply)


class NoWorkers:
    """No worker creates (pyfuse3, or the C front end with ``-o worker_creates=0``)."""

    def dir_on(self, parent: int) -> None:
        pass

    def dirs_off(self, inos: list[int] | None = None) -> None:
        pass

    def lend(self, numbers: list[int]) -> None:
        pass

    def take_back(self) -> list[int]:
        return []

    def left(self) -> int:
        return 0

    def unmark(self, ino: int) -> None:
        pass


class WorkerCreates(NoWorkers):
    """The directories and numbers lent to the C workers (a ``_fusefront.Session``);
    ``catch_up()`` applies every record they queued (``CFront.catch_up``)."""

    def __init__(self, session: Any, catch_up: Callable[[], None]) -> None:
        self.session, self.catch_up = session, catch_up
        self.on: set[int] = set()
        self.closed = False

    def dir_on(self, parent: int) -> None:
        """The workers may create in ``parent`` (this mount creates ahead there)."""
        if not self.closed and parent not in self.on:
            self.session.create_dir(parent, True)
            self.on.add(parent)

    def dirs_off(self, inos: list[int] | None = None) -> None:
        """The workers create no more in ``inos`` (None: anywhere), and what they made is
        Python's before this returns."""
        if self.closed:
            return
        if inos is None:
            was = bool(self.on)
            self.session.create_dirs_off()
            self.on.clear()
        else:
            was = False
            for ino in inos:
                if ino in self.on:
                    self.session.create_dir(ino, False)
                    self.on.discard(ino)
                    was = True
        if was:
            self.catch_up()

    def lend(self, numbers: list[int]) -> None:
        """Top the workers' numbers up from ``numbers`` (taken from its end) when low."""
        if self.closed or not numbers:
            return
        left = self.session.numbers_left()
        if left >= LOW:
            return
        give = numbers[-(LEND - left):]
        del numbers[-len(give):]
        self.session.lend_numbers(give)

    def take_back(self) -> list[int]:
        """The numbers lent and not used (the workers hold none after)."""
        return [] if self.closed else self.session.take_numbers()

    def left(self) -> int:
        """How many lent numbers the workers hold."""
        return 0 if self.closed else self.session.numbers_left()

    def unmark(self, ino: int) -> None:
        """The workers no longer take ``ino`` for a file closed and clean here: Python
        unlinks a name of it itself, or gives its number to a new file (a number whose
        create and unlink were never sent goes back to the pool: a mark left from the old
        file would let a worker unlink the new one with its unwritten data)."""
        if not self.closed:
            self.session.unlinkable_drop(ino)

    def close(self) -> None:
        self.closed = True
        self.on.clear()


def apply_made(ops: Operations, ctx: Any, parent: int, name: bytes, mode: int, flags: int,
               ino: int, fh: int, now: int, perm: int, gid: int) -> EntryAttributes:
    """A create a C worker made ahead and answered (csrc/front/creates.c: file ``ino``,
    handle ``fh``, times ``now``, the permission bits and group it gave): made the mount's
    as ``Operations.create`` makes one, without a reply and without waiting (records are
    applied in order, before any later request: cfront.py). Returns the entry Python would
    have answered."""
    cred = ops.cred(ctx)
    n = os.fsdecode(name)
    assert ops.ahead is not None  # (the workers create only for creates made ahead)
    a = ops.ahead.made(parent, n, stat.S_IMODE(mode), cred, ino, now, (perm, gid))
    ops._named(parent, n, a)
    ops.probed.learn(a, ops.probed.gen)
    ops.dirattrs.learn(parent, a)
    return ops.view.named(ops.files.made(a, flags, cred, fh), parent, n)


def apply_unlinked(ops: Operations, ctx: Any, parent: int, name: bytes, ino: int,
                   now: int) -> Awaitable[Any] | None:
    """An unlink of file ``ino`` a C worker answered at ``now`` (csrc/front/unlinks.c): made
    the mount's as ``Operations.unlink`` makes one answered ahead, without a reply. If it can
    no longer be made ahead (it cannot while the tables are mirrored: ``unlinked_mismatch``
    counts it, 0 in the tests), the unlink at the manager, for the caller to run."""
    n = os.fsdecode(name)
    cred = ops.cred(ctx)
    t = ops._tick(parent)
    reply = ops.removals.unlinked_by_worker(parent, n, ino, cred, now)
    if reply is None:
        log.error("an unlink of %r in directory %d answered by a worker could not be made "
                  "ahead; sent to the manager", n, parent)
        ops.counters["unlinked_mismatch"] += 1
        return ops.removals.at_manager(parent, n, cred)
    if ops.leases is not None:  # (before dirattrs, which takes the parent's out)
        ops.leases.removed(parent, n, t, reply)
    ops.dirattrs.learn(parent, reply)
    return None
