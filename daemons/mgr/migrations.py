"""The metadata store's schema: creating it, and upgrading a store an older manager wrote.

``schema.sql`` is the current schema (idempotent: ``IF NOT EXISTS``); the ``meta`` table
records its version. An existing store is brought up to :data:`SCHEMA_VERSION` by the
statements of :data:`MIGRATIONS`, run inside the caller's transaction together with the
update of the recorded version, so a crash leaves the old schema intact.
"""

from __future__ import annotations

import errno
import sqlite3
from pathlib import Path

from .perms import fail

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "create", "stored_version", "upgrade"]

SCHEMA_VERSION = 3
#: Upgrades of an existing store, by the version they start from.
MIGRATIONS: dict[int, list[str]] = {
    1: ["ALTER TABLE inodes ADD COLUMN rdev INTEGER NOT NULL DEFAULT 0"],  # special files
    # the pool of precreated inode numbers (schema.sql makes the table on every open)
    2: [("CREATE TABLE IF NOT EXISTS precreated (ino INTEGER PRIMARY KEY, "
         "ready INTEGER NOT NULL)")],
}

_SCHEMA = Path(__file__).with_name("schema.sql")


def create(db: sqlite3.Connection) -> None:
    """Create the tables a new store lacks (an existing store's are left as they are)."""
    db.executescript(_SCHEMA.read_text())


def stored_version(db: sqlite3.Connection) -> int | None:
    """The schema version the store records; None for a new store (then recorded as
    :data:`SCHEMA_VERSION`)."""
    row = db.execute("SELECT value FROM meta WHERE key = 'version'").fetchone()
    if row is None:
        db.execute("INSERT INTO meta VALUES ('version', ?)", (SCHEMA_VERSION,))
        return None
    return row[0]


def upgrade(db: sqlite3.Connection, version: int) -> None:
    """Bring a store at ``version`` up to SCHEMA_VERSION (inside the caller's transaction).

    Raises:
        OSError: EINVAL for a store newer than this manager or with no known upgrade path.
    """
    if version > SCHEMA_VERSION or any(v not in MIGRATIONS
                                       for v in range(version, SCHEMA_VERSION)):
        raise fail(errno.EINVAL, f"metadata schema {version}, need {SCHEMA_VERSION}")
    for v in range(version, SCHEMA_VERSION):
        for sql in MIGRATIONS[v]:
            db.execute(sql)
    db.execute("UPDATE meta SET value = ? WHERE key = 'version'", (SCHEMA_VERSION,))
