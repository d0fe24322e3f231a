"""Group commit: the mutations that arrive together share one SQLite transaction.

Every mutating store call used to be its own ``BEGIN IMMEDIATE`` ... ``COMMIT``: with WAL and
``synchronous=NORMAL`` a commit is no fsync, but it appends every page the call changed to the
WAL (a create touches 6-8 pages: about 30 KiB of ``write``s) and costs the statements
around it. With group commit on, the store runs each call as a savepoint of one open
transaction (``Transactions.batch_writes``, txn.py); a call that fails rolls back its savepoint alone.
The batch is committed by one task, :meth:`GroupCommit.run`, when the manager has nothing
else to do -- every task blocked and no socket ready (trio's ``wait_all_tasks_blocked``: the
queue of requests drained) --, or after ``max_wait`` seconds, or at once when ``max_ops``
calls joined it. N creates that arrive together cost one commit and write each shared page
(the directory's, the index leaves) once.

Durable before any reply: the request loop sends no reply while a batch is open
(:meth:`settled`, which the server's ``dispatch`` awaits for every request, errors included:
a reply may show what an uncommitted call did, e.g. EEXIST for its name). A reply is sent
only after the batch that was open when its request finished is committed, so a reply means
its change survives ``kill -9`` of the manager (the WAL's pages are in the kernel), and a
``sync`` request fsyncs the WAL after the commit. Work outside the store that depends on a
change -- the I/O daemons' stripe files of a create, the removal of a deleted file's stripe
files, the precreated pool's numbers -- waits for :meth:`durable` first, so a crash never
leaves stripe files for a change that was rolled back.

A commit that fails (the disk is full, an I/O error) rolls the whole batch back; every
request that ran while it was open is answered with that error (``EIO`` unless it carries an
errno), never with success.
"""

from __future__ import annotations

import errno
import logging
import sqlite3

import trio
from trio.testing import wait_all_tasks_blocked

from .store import MetaStore

log = logging.getLogger("pvfs.mgr")

__all__ = ["Batch", "GroupCommit"]


class Batch:
    """One open transaction: ``done`` when it committed or failed (``error``)."""

    __slots__ = ("done", "error", "ops")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.error: BaseException | None = None
        self.ops = 0


def _as_oserror(exc: BaseException) -> OSError:
    if isinstance(exc, OSError):
        return exc
    code = errno.ENOSPC if isinstance(exc, sqlite3.OperationalError) and "full" in str(exc) \
        else errno.EIO
    return OSError(code, f"metadata commit failed: {exc}")


class GroupCommit:
    """The one writer path of the manager's store (see the module docstring).

    ``max_ops``: a batch is committed at once when this many calls joined it;
    ``max_wait``: at the latest this many seconds after it opened, even if the manager
    never runs out of work.
    """

    def __init__(self, store: MetaStore, max_ops: int = 1024, max_wait: float = 0.002) -> None:
        self.store = store
        self.max_ops, self.max_wait = max_ops, max_wait
        self.current: Batch | None = None
        self.failures = 0        # batches whose commit failed (requests compare it)
        self.last_error: OSError | None = None
        self.commits = 0         # batches committed (metrics, tests)
        self.ops = 0             # store calls those batches held
        self._wake = trio.Event()
        store.txn.batch_writes(self)

    # -- the store's hook ---------------------------------------------------------------

    def opened(self) -> None:
        self.current = Batch()
        self._wake.set()

    def joined(self, n: int) -> None:
        assert self.current is not None
        self.current.ops = n
        if n >= self.max_ops:
            self.commit_now()

    # -- committing ---------------------------------------------------------------------

    def commit_now(self) -> None:
        """Commit the open batch (if any) and wake every request that waits for it."""
        batch, self.current = self.current, None
        if batch is None:
            return
        try:
            n = self.store.txn.commit()
        except Exception as exc:  # noqa: BLE001 - every waiter gets it
            batch.error = self.last_error = _as_oserror(exc)
            self.failures += 1
            log.error("group commit of %d operations failed: %s", batch.ops, exc)
        else:
            self.commits += 1
            self.ops += n
        batch.done.set()

    async def run(self) -> None:
        """Commit each batch when the manager has drained its queue (or ``max_wait``)."""
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            if self.current is None:
                continue
            with trio.move_on_after(self.max_wait):
                await wait_all_tasks_blocked()
            self.commit_now()

    # -- waiting for it -----------------------------------------------------------------

    async def durable(self) -> None:
        """Wait until every change made so far is committed; raise the commit's error."""
        batch = self.current
        if batch is None:
            return
        await batch.done.wait()
        if batch.error is not None:
            raise batch.error

    async def settled(self, failures: int) -> None:
        """Before a reply: wait for the open batch; raise if any batch failed since the
        request began (``failures`` was :attr:`failures` then)."""
        batch = self.current
        if batch is not None:
            await batch.done.wait()
        if self.failures != failures:
            raise self.last_error or OSError(errno.EIO, "metadata commit failed")

    def close(self) -> None:
        """Commit what is open (an orderly stop)."""
        self.commit_now()

    def status(self) -> dict:
        return {"commits": self.commits, "ops": self.ops, "failures": self.failures,
                "open": self.current.ops if self.current is not None else 0}
