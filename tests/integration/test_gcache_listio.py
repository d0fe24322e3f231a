"""List I/O through the global cache: the local cache's ``read_list``/``write_list`` reach
the global cache daemon as one request for many regions (and the bypassed pieces the I/O
daemons as one list request), as they reach the I/O daemons without a global cache."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import trio
from test_gcache import gcache_cluster

from pvfs.client.aclient import ROOT_INO, AsyncClient
from pvfs.cluster.launch import down, request
from pvfs.fuse.cachewire import ClientBackend
from pvfs.fuse.handles import HandleTable
from pvfs.gcache.backend import GcacheBackend
from pvfs.gcache.config import gcache_config
from pvfs.layout.stripe import Stripe

sys.path.insert(0, str(Path(__file__).parent))

REGIONS = [(0, 100), (5000, 3000), (20000, 4096), (40960, 10)]


@pytest.fixture
def gcluster(tmp_path):
    cluster, ep = gcache_cluster(tmp_path, flush_interval=60.0)
    try:
        yield cluster, ep
    finally:
        down(cluster.config)


class CountingBackend(ClientBackend):
    """The mount's backend (list I/O to the I/O daemons), counting its list calls."""

    def __init__(self, *args) -> None:
        super().__init__(*args)
        self.list_calls: list[tuple[str, list[tuple[int, int]]]] = []

    async def read_list(self, ino, regions):
        self.list_calls.append(("read", list(regions)))
        return await super().read_list(ino, regions)

    async def write_list(self, ino, regions, data):
        self.list_calls.append(("write", list(regions)))
        await super().write_list(ino, regions, data)


async def _setup(cluster, name):
    client = await AsyncClient.connect(cluster.config_path)
    table = HandleTable()
    attrs = await client.create(ROOT_INO, name, 0o644, exclusive=True, stripe=Stripe(0, 2, 8192))
    ino = attrs["ino"]
    table.info(ino).stripe = Stripe(*attrs["stripe"])

    async def stripe_of(i):
        return table.info(i).stripe

    direct = CountingBackend(client, table, stripe_of)
    g = GcacheBackend(direct, client.config, gcache_config(client.config), stripe_of)
    return client, direct, g, ino


def _expect(regions, chunks, size):
    out = bytearray(size)
    for (off, n), c in zip(regions, chunks):
        out[off:off + n] = c
    return out


def test_list_io_is_one_request_at_the_global_cache(gcluster):
    cluster, ep = gcluster
    chunks = [bytes([i + 1]) * n for i, (_, n) in enumerate(REGIONS)]

    async def main():
        client, direct, g, ino = await _setup(cluster, "gl-a")
        try:
            s0 = request(ep, {"op": "stats"})
            await g.write_list(ino, REGIONS, b"".join(chunks))
            s1 = request(ep, {"op": "stats"})
            assert s1["writes"] - s0["writes"] == 1  # one request for four regions
            assert not direct.list_calls
            expect = _expect(REGIONS, chunks, 40970)
            # read back from the global cache (dirty there, not yet on the servers): holes
            # are zeros, a region past the end is short, one past it empty
            regs = [(50, 100), (4000, 2000), (40900, 200), (50000, 10)]
            got = await g.read_list(ino, regs)
            assert got == [bytes(expect[50:150]), bytes(expect[4000:6000]),
                           bytes(expect[40900:]), b""]
            s2 = request(ep, {"op": "stats"})
            assert s2["reads"] - s1["reads"] == 1
            await g.flush(ino)
            stripe = await direct.stripe_of(ino)
            assert await client.read(ino, stripe, 0, 1 << 20) == bytes(expect)
        finally:
            g.close()
            client.close()

    trio.run(main)


def test_list_io_splits_by_route(gcluster):
    """Bypassed segments go to the I/O daemons in one list request, the rest to the global
    cache in one: a region crossing the boundary is cut and put together again."""
    cluster, ep = gcluster
    regions = [(0, 100), (15000, 3000), (20000, 4096), (40960, 10)]  # 2nd crosses 16 KiB
    chunks = [bytes([i + 7]) * n for i, (_, n) in enumerate(regions)]

    async def main():
        client, direct, g, ino = await _setup(cluster, "gl-b")
        try:
            g.bypass.set_xattr(ino, "1:rg,wg")  # segment 1: bytes 16 KiB..32 KiB
            s0 = request(ep, {"op": "stats"})
            await g.write_list(ino, regions, b"".join(chunks))
            assert direct.list_calls == [("write", [(16384, 1616), (20000, 4096)])]
            s1 = request(ep, {"op": "stats"})
            assert s1["writes"] - s0["writes"] == 1
            got = await g.read_list(ino, regions)
            assert got == chunks
            assert direct.list_calls[-1] == ("read", [(16384, 1616), (20000, 4096)])
            assert request(ep, {"op": "stats"})["reads"] - s1["reads"] == 1
            await g.flush(ino)
            stripe = await direct.stripe_of(ino)
            expect = _expect(regions, chunks, 40970)
            assert await client.read(ino, stripe, 0, 1 << 20) == bytes(expect)
        finally:
            g.close()
            client.close()

    trio.run(main)
