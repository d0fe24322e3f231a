"""The global cache writes back only the byte ranges clients wrote, never whole blocks.

Two native clients write disjoint ranges of one 4 KiB block: A through the global cache
(which reads the block first to complete its slot, read-modify-write, and holds it dirty), B
past it — because its segment bits say so (as after a runtime bypass hint) or because it does
not use the global cache at all. When A's global cache then writes back, B's bytes must
survive: a whole-block write-back would put the bytes it fetched before B wrote back on top.
"""

from __future__ import annotations

import pytest
import trio
from test_gcache import STRIPE, gcache_cluster

from pvfs.cluster.launch import down
from pvfs.gcache.stack import CacheStack

BS = 4096


@pytest.fixture
def slow_flush_cluster(tmp_path):
    """The global cache writes back only when asked (flush/fsync): A's block stays dirty."""
    cluster, ep = gcache_cluster(tmp_path, flush_interval=60.0)
    try:
        yield cluster, ep
    finally:
        down(cluster.config)


@pytest.mark.parametrize("b_route", ["wg-bit", "gcache-off"])
@pytest.mark.parametrize("a_local", [False, True])
def test_disjoint_writes_of_one_block_both_survive(slow_flush_cluster, b_route, a_local):
    cluster, _ = slow_flush_cluster
    name = f"/ranges-{b_route}-{a_local}"
    old = b"x" * (2 * BS)

    async def main():
        async with CacheStack.open(cluster.config, local=False, gcache=False) as prep:
            f = await prep.open_file(name, create=True, stripe=STRIPE)
            await prep.write(f, 0, old)
            await prep.fsync(f)
        async with CacheStack.open(cluster.config, local=a_local, local_size=64 << 10) as a, \
                CacheStack.open(cluster.config, local=False,
                                gcache=False if b_route == "gcache-off" else None) as b:
            fa = await a.open_file(name)
            fb = await b.open_file(name)
            if b_route == "wg-bit":
                b.set_bypass(fb, "*:wg")
            await a.write(fa, 100, b"a" * 100)
            await a.cache.flush(fa.ino)  # in the global cache now, dirty, whole block read
            await b.write(fb, 300, b"b" * 100)  # straight to the I/O daemons
            await b.fsync(fb)
            await a.fsync(fa)  # the global cache writes its dirty block back
            return a.stats()["global_client"]

    st = trio.run(main)
    assert st["global_writes"] >= 1  # A's write went through the global cache
    expect = bytearray(old)
    expect[100:200] = b"a" * 100
    expect[300:400] = b"b" * 100
    with cluster.connect() as fs, fs.open(name, "rb") as fh:
        assert fh.read() == bytes(expect)


def test_truncate_drops_dirty_ranges_past_the_end(slow_flush_cluster):
    """A dirty range cut by a truncate is not written back past the new end."""
    cluster, _ = slow_flush_cluster

    async def main():
        async with CacheStack.open(cluster.config, local=False) as a:
            f = await a.open_file("/ranges-trunc", create=True, stripe=STRIPE)
            await a.write(f, 0, b"y" * 1000)
            await a.write(f, 3000, b"z" * 1000)
            await a.truncate(f, 2000)
            await a.fsync(f)

    trio.run(main)
    with cluster.connect() as fs, fs.open("/ranges-trunc", "rb") as fh:
        assert fh.read() == b"y" * 1000 + bytes(1000)
