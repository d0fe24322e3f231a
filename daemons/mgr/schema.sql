-- The manager's metadata (daemons/mgr/store.py). Applied on every open; idempotent.
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS inodes (
    ino INTEGER PRIMARY KEY AUTOINCREMENT,   -- AUTOINCREMENT: numbers are never reused
    mode INTEGER NOT NULL, nlink INTEGER NOT NULL,
    uid INTEGER NOT NULL, gid INTEGER NOT NULL,
    atime INTEGER NOT NULL, mtime INTEGER NOT NULL, ctime INTEGER NOT NULL,
    nent INTEGER NOT NULL DEFAULT 0,         -- dirs: entries besides . and ..
    target TEXT,                             -- symlinks
    sbase INTEGER, spcount INTEGER, sssize INTEGER,  -- file layout / dir default (NULL)
    rdev INTEGER NOT NULL DEFAULT 0          -- device nodes (schema 2; store.py migrates 1)
);
CREATE INDEX IF NOT EXISTS inodes_unlinked ON inodes(nlink) WHERE nlink = 0;
CREATE TABLE IF NOT EXISTS dentries (
    cookie INTEGER PRIMARY KEY AUTOINCREMENT,  -- readdir position, stable and never reused
    parent INTEGER NOT NULL, name TEXT NOT NULL, ino INTEGER NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS dentries_name ON dentries(parent, name);
CREATE INDEX IF NOT EXISTS dentries_cookie ON dentries(parent, cookie);
CREATE INDEX IF NOT EXISTS dentries_ino ON dentries(ino);
CREATE TABLE IF NOT EXISTS xattrs (
    ino INTEGER NOT NULL, name TEXT NOT NULL, value BLOB NOT NULL,
    PRIMARY KEY (ino, name)
) WITHOUT ROWID;
-- Inode numbers reserved ahead of any create (schema 3; daemons/mgr/precreate.py): ready (1)
-- once every daemon promised to watch their empty shares; fsck counts a stripe file of them
-- as expected; 3: being discarded. (2 was a create whose stripe files were being made, before
-- stripe files were made at first write: store_admin.forget_making drops such rows.)
CREATE TABLE IF NOT EXISTS precreated (ino INTEGER PRIMARY KEY, ready INTEGER NOT NULL);
