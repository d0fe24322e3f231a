"""The global cache daemon through the native cache stack: data, write-back, bypass, failure."""

from __future__ import annotations

import os
import signal

import pytest
import trio
from conftest import start_cluster

from pvfs.cluster.launch import down, free_ports, request
from pvfs.config import Endpoint
from pvfs.gcache.config import gcache_table
from pvfs.gcache.stack import CacheStack
from pvfs.layout.stripe import Stripe

STRIPE = Stripe(0, 2, 8192)


def gcache_cluster(path, **table):
    port = free_ports(1)[0]
    values = {"capacity": 1 << 20, "flush_interval": 0.2}
    values.update(table)
    cluster = start_cluster(path, iods=2, connect_timeout=1.0, request_timeout=3.0,
                            extra={"gcache": gcache_table([f"127.0.0.1:{port}"], **values)})
    return cluster, Endpoint("127.0.0.1", port, "")


@pytest.fixture
def gcluster(tmp_path):
    cluster, ep = gcache_cluster(tmp_path)
    try:
        yield cluster, ep
    finally:
        down(cluster.config)


@pytest.fixture
def slow_flush_cluster(tmp_path):
    """The global cache writes back only every 60 s: dirty data stays in it."""
    cluster, ep = gcache_cluster(tmp_path, flush_interval=60.0)
    try:
        yield cluster, ep
    finally:
        down(cluster.config)


def run(fn, *args):
    return trio.run(fn, *args)


def test_gcache_started_by_up_and_answers(gcluster):
    cluster, ep = gcluster
    assert cluster.pid("gcache0")
    reply = request(ep, {"op": "ping"})
    assert reply["role"] == "gcache"
    stats = request(ep, {"op": "stats"})
    assert stats["policy"] == "all" and stats["capacity_blocks"] == 256


def test_two_nodes_share_the_global_cache(gcluster):
    cluster, ep = gcluster
    data = os.urandom(200_001)

    async def main():
        async with CacheStack.open(cluster.config, local_size=64 << 10) as a, \
                CacheStack.open(cluster.config, local_size=64 << 10) as b:
            fa = await a.open_file("/f", create=True, stripe=STRIPE)
            for off in range(0, len(data), 10_000):  # small writes: through the block path
                await a.write(fa, off, data[off:off + 10_000])
            await a.fsync(fa)
            fb = await b.open_file("/f")
            assert await b.refresh(fb) == len(data)
            for off in range(0, len(data), 4096):
                assert await b.read(fb, off, 4096) == data[off:off + 4096]
            assert await b.read(fb, len(data) - 10, 100) == data[-10:]  # short at the end
            return b.stats()

    stats = run(main)
    assert stats["global_client"]["global_reads"] > 0
    g = request(ep, {"op": "stats"})
    assert g["hits"] > 0 and g["flushed_blocks"] > 0 and g["dirty_blocks"] == 0
    with cluster.connect() as fs, fs.open("/f", "rb") as f:
        assert f.read() == data  # the global cache wrote everything back


def test_truncate_and_holes_through_global_cache(gcluster):
    cluster, _ = gcluster

    async def main():
        async with CacheStack.open(cluster.config, local=False) as a:
            f = await a.open_file("/t", create=True, stripe=STRIPE)
            await a.write(f, 0, b"x" * 20000)
            await a.write(f, 30000, b"y" * 10)  # a hole between
            await a.truncate(f, 25000)
            await a.write(f, 26000, b"z")
            await a.fsync(f)
            return await a.read(f, 0, 40000)

    got = run(main)
    want = b"x" * 20000 + bytes(6000) + b"z"
    assert got == want
    with cluster.connect() as fs, fs.open("/t", "rb") as f:
        assert f.read() == want



def test_read_in_a_truncation_window_caches_nothing_past_the_end(gcluster):
    """A read that reaches the global cache after it cut a file but before the I/O daemons
    are cut (a read-ahead sent before the truncation) waits for them; before, it fetched the
    old bytes and kept them past the new end, where a truncation up showed them (fsx, seed
    5091, gcache=on: READ BAD DATA at op 257,785)."""
    cluster, _ = gcluster

    async def main():
        async with CacheStack.open(cluster.config, local=False) as a:
            f = await a.open_file("/w", create=True, stripe=STRIPE)
            await a.write(f, 0, b"x" * 65536)
            await a.fsync(f)  # on the I/O daemons, and a clean copy in the global cache
            g = a.gbackend
            stripe = (await g.stripe_of(f.ino)).to_wire()
            got: dict = {}

            async def late_read() -> None:
                _, got["data"] = await g.channels[0].call_bulk(
                    {"op": "read", "ino": f.ino, "stripe": stripe, "offset": 0,
                     "length": 65536, "client": None})

            async with trio.open_nursery() as nursery, g.truncation(f.ino, 0):
                nursery.start_soon(late_read)
                await trio.sleep(0.3)
                got["held"] = "data" not in got
                await a.client.setattr(f.ino, size=0)  # now the I/O daemons are cut
            await a.truncate(f, 65536)  # and up again: a hole
            _, cached = await g.channels[0].call_bulk(
                {"op": "read", "ino": f.ino, "stripe": stripe, "offset": 0, "length": 65536,
                 "client": None})
            return got, cached, await a.read(f, 0, 65536)

    got, cached, read = run(main)
    assert got["held"]
    assert got["data"] == b""  # served after the I/O daemons were cut: the file is empty
    assert cached == bytes(65536)
    assert read == bytes(65536)

def test_runtime_bypass_tells_client(tmp_path):
    cluster, ep = gcache_cluster(tmp_path, policy="runtime", threshold=50, capacity=64 << 10)
    try:
        async def main():
            async with CacheStack.open(cluster.config, local=False) as a:
                f = await a.open_file("/r", create=True, stripe=STRIPE)
                await a.write(f, 0, os.urandom(1 << 20))
                await a.fsync(f)
                for _ in range(3):
                    for off in range(0, 1 << 20, 4096):
                        await a.read(f, off, 4096)
                return a.stats()["global_client"]

        st = run(main)
        g = request(ep, {"op": "stats"})
        assert g["bypasses"] > 0 and st["hints"] > 0 and st["direct_reads"] > 0
        assert g["policy"] == "runtime" and g["threshold"] == 50
    finally:
        down(cluster.config)


def test_killed_gcache_loses_nothing_and_degrades(gcluster):
    cluster, _ = gcluster
    data = os.urandom(100_000)
    more = os.urandom(50_000)

    async def main():
        async with CacheStack.open(cluster.config, local=False) as a:
            f = await a.open_file("/k", create=True, stripe=STRIPE)
            await a.write(f, 0, data)
            await a.fsync(f)
            await a.write(f, 100_000, more)  # not fsync'd, only in the global cache
            cluster.kill("gcache0", signal.SIGKILL)
            with trio.fail_after(10):  # degrade within the timeout, never hang
                got = await a.read(f, 0, 150_000)
                await a.fsync(f)
            return got, a.stats()["global_client"]

    got, st = run(main)
    assert got == data + more
    assert st["failovers"] >= 1 and st["journal_replays"] >= 1
    with cluster.connect() as fs, fs.open("/k", "rb") as f:
        assert f.read() == data + more


def test_restarted_gcache_loses_nothing(slow_flush_cluster):
    """Written through, held dirty by the daemon, daemon killed and restarted before the
    client notices: the flush answers with a new epoch and the client writes its journal."""
    from pvfs.cluster.launch import up

    cluster, _ = slow_flush_cluster
    data = os.urandom(40_000)

    async def main():
        async with CacheStack.open(cluster.config, local=False) as a:
            f = await a.open_file("/e", create=True, stripe=STRIPE)
            await a.write(f, 0, data)  # in the global cache only (dirty)
            cluster.kill("gcache0", signal.SIGKILL)
            up(cluster.config)
            # A fresh connection (no broken pooled one to give the restart away): only the
            # epoch in the flush reply tells the client the daemon lost its dirty blocks.
            a.gbackend.channels[0]._drop_idle()
            await a.fsync(f)
            return a.stats()["global_client"]

    st = run(main)
    assert st["journal_replays"] >= 1 and st["failovers"] == 0
    with cluster.connect() as fs, fs.open("/e", "rb") as f:
        assert f.read() == data


def test_down_writes_the_global_caches_dirty_blocks_back_first(slow_flush_cluster):
    """``pvfs-admin down`` while the daemon holds a client's written blocks dirty (answered,
    not fsync'd): the daemon writes them back on SIGTERM, before the I/O daemons stop."""
    from pvfs.cluster.launch import up

    cluster, _ = slow_flush_cluster
    data = os.urandom(40_000)

    async def main():
        async with CacheStack.open(cluster.config, local=False) as a:
            f = await a.open_file("/d", create=True, stripe=STRIPE)
            await a.write(f, 0, data)  # in the global cache only (dirty)
            a.gbackend.journal.clear()  # the client is gone (its exit would flush it)

    run(main)
    down(cluster.config)
    up(cluster.config)
    with cluster.connect() as fs, fs.open("/d", "rb") as f:
        assert f.read() == data


def test_frozen_gcache_comes_back_without_stale_data(slow_flush_cluster):
    """A daemon that was only frozen (timeouts, not dead) still holds older dirty data when
    it answers again: the client's direct writes meanwhile must win."""
    cluster, _ = slow_flush_cluster
    a_data, b_data, c_data = b"A" * 8192, b"B" * 8192, b"C" * 8192

    async def main():
        async with CacheStack.open(cluster.config, local=False) as a:
            a.gbackend.failover.retry_after = 0.5
            f = await a.open_file("/z", create=True, stripe=STRIPE)
            await a.write(f, 0, a_data)  # dirty in the global cache
            cluster.kill("gcache0", signal.SIGSTOP)
            try:
                await a.write(f, 0, b_data)  # times out: fails over, journal written directly
                await a.write(f, 0, c_data)  # direct while the daemon is down
            finally:
                cluster.kill("gcache0", signal.SIGCONT)
            await trio.sleep(0.6)
            got = await a.read(f, 0, 8192)  # through the global cache again
            await a.fsync(f)
            return got, a.stats()["global_client"]

    got, st = run(main)
    assert st["failovers"] >= 1
    assert got == c_data
    with cluster.connect() as fs, fs.open("/z", "rb") as f:
        assert f.read() == c_data
