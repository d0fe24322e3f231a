"""The store's SQLite connection and its transactions: one per call, or group commit.

Each mutating call of the store is one ``BEGIN IMMEDIATE`` transaction -- or, with group
commit on (:meth:`Transactions.batch_writes`, the server's ``group.py``), one savepoint of a
transaction shared by the calls that arrive together, which :meth:`Transactions.commit`
ends: a call that fails rolls back its own savepoint only. WAL, ``synchronous=NORMAL``: a
committed call survives ``kill -9``; checkpoints run off the serving thread.
"""

from __future__ import annotations

import errno
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

from .perms import fail

__all__ = ["BatchHook", "Transactions"]


class BatchHook(Protocol):
    """What group commit tells its owner (the server's ``GroupCommit``)."""

    def opened(self) -> None: ...
    def joined(self, n: int) -> None: ...


class Transactions:
    """The store's connection (``db``, autocommit: transactions are explicit in :meth:`tx`)
    and the way its calls commit (a part of the store, ``store.txn``)."""

    def __init__(self, path: str) -> None:
        self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False,
                                  cached_statements=128)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        # No checkpoint from a commit: with synchronous=NORMAL a commit only appends to the
        # WAL, but an automatic checkpoint would fsync on the server's trio thread. The server
        # runs checkpoint() in a worker thread instead, on a connection of its own.
        self.db.execute("PRAGMA wal_autocheckpoint=0")
        self._path = path
        self._ckpt: sqlite3.Connection | None = None
        # Group commit (batch_writes): the hook told of a batch's opening and its calls, and
        # whether a batch transaction is open now and how many calls joined it.
        self._hook: BatchHook | None = None
        self._in_batch = False
        self._batch_ops = 0

    def close(self) -> None:
        if self._ckpt is not None:
            self._ckpt.close()
        self.db.close()

    def checkpoint(self) -> tuple[int, int]:
        """Copy the WAL's committed frames into the database file and fsync it (SQLite's
        PASSIVE checkpoint: never waits for the store's own transactions). Blocking: call it
        from a worker thread, one at a time. Returns ``(frames in the WAL, frames copied)``."""
        if self._ckpt is None:
            self._ckpt = sqlite3.connect(self._path, isolation_level=None,
                                         check_same_thread=False)
        _, log, done = self._ckpt.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        return log, done

    def batch_writes(self, hook: BatchHook) -> None:
        """Turn group commit on: from now on a mutating call runs as a savepoint (``SAVEPOINT
        op`` ... ``RELEASE``; ``ROLLBACK TO`` if it fails, leaving the others' changes) in one
        ``BEGIN IMMEDIATE`` transaction that stays open until :meth:`commit`. ``hook.opened()``
        is called when a call opens such a transaction, ``hook.joined(n)`` after each call
        that completed in it (``n`` so far); either may call :meth:`commit`."""
        if self._in_batch:
            raise fail(errno.EBUSY, "a batch is open")
        self._hook = hook

    @property
    def in_batch(self) -> bool:
        """Whether a group-commit transaction is open (changes not yet committed)."""
        return self._in_batch

    def commit(self) -> int:
        """End the open group-commit transaction: ``COMMIT``, the number of calls it held
        (0 if none was open). If the commit fails, every change of the batch is rolled back
        and the error raised."""
        if not self._in_batch:
            return 0
        n, self._in_batch, self._batch_ops = self._batch_ops, False, 0
        try:
            self.db.execute("COMMIT")
        except BaseException:
            if self.db.in_transaction:
                self.db.execute("ROLLBACK")
            raise
        return n

    @contextmanager
    def tx(self) -> Iterator[None]:
        if self._hook is None:  # one transaction per call
            self.db.execute("BEGIN IMMEDIATE")
            try:
                yield
            except BaseException:
                self.db.execute("ROLLBACK")
                raise
            self.db.execute("COMMIT")
            return
        db = self.db
        if not self._in_batch:
            db.execute("BEGIN IMMEDIATE")
            self._in_batch = True
            self._hook.opened()
        db.execute("SAVEPOINT op")
        try:
            yield
        except BaseException:
            db.execute("ROLLBACK TO op")
            db.execute("RELEASE op")
            raise
        db.execute("RELEASE op")
        self._batch_ops += 1
        self._hook.joined(self._batch_ops)
