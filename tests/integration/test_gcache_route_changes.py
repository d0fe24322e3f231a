"""A segment's writes change route from the global cache to the I/O daemons (its ``wg`` bit
set by the API, an xattr or a plan) while the global cache holds a copy of it: the client's
next reads, and the file after write-back, show the bytes written last."""

from __future__ import annotations

import os

import trio
from test_gcache import STRIPE, gcache_cluster

from pvfs.cluster.launch import down
from pvfs.gcache.stack import CacheStack

SEG = 4 * 4096  # one bypass segment (4 blocks of 4 KiB)


def _run(tmp_path, first_via_global):
    """Through the global cache (``first_via_global`` writes or reads the segment), then the
    segment's writes bypass it and the client writes new bytes; what it reads back and what
    the I/O daemons hold after the cache's write-back."""
    cluster, _ = gcache_cluster(tmp_path, flush_interval=60.0)  # dirty data stays there
    old, new = os.urandom(2 * SEG), os.urandom(SEG)

    async def main():
        async with CacheStack.open(cluster.config, local=False) as a:
            f = await a.open_file("/r", create=True, stripe=STRIPE)
            await first_via_global(a, f, old)
            a.set_bypass(f, "0:wg")            # segment 0's writes go past the global cache
            await a.write(f, 0, new)
            seen = await a.read(f, 0, 2 * SEG)  # reads still go through it
            await a.fsync(f)
            return seen

    try:
        seen = trio.run(main)
        with cluster.connect() as fs, fs.open("/r", "rb") as fh:
            stored = fh.read()
    finally:
        down(cluster.config)
    want = new + old[SEG:]
    assert seen == want
    assert stored == want


def test_a_write_past_the_global_cache_replaces_its_dirty_copy(tmp_path):
    async def write_through_global(a, f, old):
        await a.write(f, 0, old)  # dirty in the global cache, not yet on the I/O daemons

    _run(tmp_path, write_through_global)


def test_a_write_past_the_global_cache_replaces_its_clean_copy(tmp_path):
    async def write_then_read_through_global(a, f, old):
        await a.write(f, 0, old)
        await a.fsync(f)               # written back: the copy is clean
        assert await a.read(f, 0, len(old)) == old

    _run(tmp_path, write_then_read_through_global)
