"""Evict the stripe files' pages from the kernel's page cache (``pvfs-admin cache drop``).

Like ``pvfs2-drop-caches`` for one daemon: each stripe file is written back (``fdatasync``,
so no dirty page is left that DONTNEED would skip) and then dropped with
``posix_fadvise(POSIX_FADV_DONTNEED)``. Files are opened afresh by path (the page cache
belongs to the inode, not the descriptor), so this runs in a worker thread without touching
the daemon's open-file cache.
"""

from __future__ import annotations

import os


def drop_page_cache(root: str) -> dict:
    """Drop every file under ``root``; {"files": n, "bytes": their total size}."""
    files = nbytes = 0
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            try:
                fd = os.open(os.path.join(dirpath, name), os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:  # unlinked meanwhile
                continue
            try:
                os.fdatasync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                nbytes += os.fstat(fd).st_size
                files += 1
            finally:
                os.close(fd)
    return {"files": files, "bytes": nbytes}
