"""The global cache daemon's small fetches (daemons/gcache/iodlink.py) read what the native
transfer reads (daemons/gcache/transfer.py), from real I/O daemons: the same bytes at the same
places of the buffers and the same end of file, over holes, the file's last block and blocks
past it; and a dead daemon fails both the same way."""

from __future__ import annotations

import os

import pytest
import trio

from pvfs.client.datapath import DataPath
from pvfs.daemons.gcache.iodlink import IodLinks
from pvfs.daemons.gcache.transfer import read_extents
from pvfs.layout.stripe import Stripe

BS = 4096
STRIPE = Stripe(0, 4, 8192)
SIZE = 40 * BS + 1234  # a hole from block 6 to 30, the last block short

CASES = {
    "one block": [[0]],
    "a hole": [[7, 8]],
    "scattered over every daemon": [[1, 3, 4, 9, 10, 13]],
    "the last block and past it": [[40, 41]],
    "only past the end": [[44]],
    "two buffers": [[2, 40], [5, 31, 43]],
}


async def _small(config, ino: int, stripe: Stripe, groups: list) -> int | None:
    links = IodLinks(config)
    try:
        return await links.read_extents(ino, stripe, groups)
    finally:
        links.close()  # trio sockets: closed inside trio


def _extents(blocks: list[int]) -> list[tuple[int, int, int]]:
    """Each block at a slot of its own, in reverse order (as scattered as a slab's)."""
    return [(b * BS, BS, (len(blocks) - 1 - i) * BS) for i, b in enumerate(blocks)]


@pytest.fixture(scope="module")
def striped_file(pvfs_cluster):
    head, tail = os.urandom(6 * BS), os.urandom(SIZE - 30 * BS)
    with pvfs_cluster.connect() as fs, fs.open("/iodlink", "w+b", stripe=STRIPE) as f:
        f.pwrite(head, 0)
        f.pwrite(tail, 30 * BS)
        return f.ino, f.stripe


@pytest.mark.parametrize("case", CASES)
def test_small_fetch_reads_what_the_native_transfer_reads(pvfs_cluster, striped_file, case):
    ino, stripe = striped_file
    groups = [_extents(blocks) for blocks in CASES[case]]
    native = [bytearray(b"\xee" * len(g) * BS) for g in groups]
    small = [bytearray(b"\xee" * len(g) * BS) for g in groups]
    data = DataPath(pvfs_cluster.config)
    try:
        sizes = [read_extents(data, ino, stripe, g, buf) for g, buf in zip(groups, native)]
    finally:
        data.close()
    known = [s for s in sizes if s is not None]
    eof = trio.run(_small, pvfs_cluster.config, ino, stripe, list(zip(groups, small)))
    assert small == native
    assert eof == (max(known) if known else None)
    if case.startswith(("the last", "only past")):
        assert eof == SIZE


def test_a_dead_daemon_fails_the_small_fetch_as_the_native_one(fresh_cluster):
    with fresh_cluster.connect() as fs, fs.open("/dead", "w+b", stripe=STRIPE) as f:
        f.pwrite(os.urandom(8 * BS), 0)
        ino, stripe = f.ino, f.stripe
    fresh_cluster.kill("iod1")
    ext = _extents([0, 1, 2, 3, 4, 5, 6, 7])  # every daemon
    data = DataPath(fresh_cluster.config)
    try:
        with pytest.raises(OSError):
            read_extents(data, ino, stripe, ext, bytearray(8 * BS))
    finally:
        data.close()
    with pytest.raises(OSError):
        trio.run(_small, fresh_cluster.config, ino, stripe, [(ext, bytearray(8 * BS))])


def test_the_daemon_fetches_a_small_miss_from_its_trio_thread(tmp_path):
    """Through a global cache daemon: a miss of two blocks is a small fetch, one of 32
    blocks (past ``SMALL_BYTES``) goes through the native transfer; both read the file."""
    from conftest import start_cluster

    from pvfs.cluster.launch import down, free_ports, request
    from pvfs.config import Endpoint
    from pvfs.daemons.gcache.iodlink import SMALL_BYTES
    from pvfs.gcache.config import gcache_table
    from pvfs.gcache.stack import CacheStack

    port = free_ports(1)[0]
    cluster = start_cluster(tmp_path, iods=2, connect_timeout=1.0, request_timeout=3.0,
                            extra={"gcache": gcache_table([f"127.0.0.1:{port}"],
                                                          capacity=1 << 20)})
    ep = Endpoint("127.0.0.1", port, "")
    data = os.urandom(48 * BS)
    assert 32 * BS > SMALL_BYTES >= 2 * BS

    async def main():
        async with CacheStack.open(cluster.config, local=False, gcache=False) as d:
            f = await d.open_file("/small", create=True, stripe=Stripe(0, 2, 8192))
            await d.write(f, 0, data)
            await d.fsync(f)
        async with CacheStack.open(cluster.config, local=False) as g:
            f = await g.open_file("/small")
            before = request(ep, {"op": "stats"})
            small = await g.read(f, 2 * BS, 2 * BS)
            large = await g.read(f, 16 * BS, 32 * BS)
            after = request(ep, {"op": "stats"})
            return small, large, before, after

    try:
        small, large, before, after = trio.run(main)
    finally:
        down(cluster.config)
    assert small == data[2 * BS:4 * BS] and large == data[16 * BS:]
    assert after["fetches"] - before["fetches"] == 2
    assert after["small_fetches"] - before["small_fetches"] == 1
