"""What the global cache does with the blocks its admission policy refuses.

* A refused *write* is answered once the daemon has the bytes and written through to the I/O
  daemons in the background, without taking a slot (before 2026-11-26 the client waited for
  the disks: every write-back of a refused segment did).
* A read of a block such a write covers whole, while it is still on its way, is answered
  from that write's bytes (before 2026-11-26, s10, it waited for the write to reach the disks
  and then read the block back from them); a block it covers partly still waits for it.
* A request that waited for another's fetch of blocks the policy refused takes that fetch's
  bytes instead of reading the disks again.
* A read that reaches the daemon while a write of its blocks is being received waits for the
  write: it does not fetch a refused block's old bytes and keep them in a slot after the
  write went through (nor send a slot still being received).
* A client is never told to bypass a segment of which the daemon holds dirty blocks: its next
  write of that segment would go straight to the I/O daemons, and the daemon's later
  write-back of the older copy would land on top of it.
* A hint is about reads: the client's writes of a hinted segment still go through the global
  cache, and end the hint (the I/O daemons hold the old bytes until the write reaches them).
"""

from __future__ import annotations

import os
import signal
from contextlib import contextmanager

import pytest
import trio
from conftest import start_cluster
from test_gcache import STRIPE, gcache_cluster

from pvfs.cluster.launch import down, free_ports, request
from pvfs.config import Endpoint
from pvfs.gcache.config import gcache_table
from pvfs.gcache.stack import CacheStack
from pvfs.protocol import aio
from pvfs.protocol.framing import frame

BS = 4096


@pytest.fixture
def runtime_cluster(tmp_path):
    """Runtime bypass with a threshold no segment reaches here (every re-miss is refused);
    write-back only when asked, so dirty blocks stay put."""
    cluster, ep = gcache_cluster(tmp_path, policy="runtime", threshold=50, capacity=64 << 10,
                                 flush_interval=60.0)
    try:
        yield cluster, ep
    finally:
        down(cluster.config)


async def _prepare(config, name: str, data: bytes) -> None:
    async with CacheStack.open(config, local=False, gcache=False) as prep:
        f = await prep.open_file(name, create=True, stripe=STRIPE)
        await prep.write(f, 0, data)
        await prep.fsync(f)


async def _read_direct(config, name: str, n: int) -> bytes:
    async with CacheStack.open(config, local=False, gcache=False) as c:
        f = await c.open_file(name)
        return await c.read(f, 0, n)


async def _fill(a: CacheStack, f) -> None:
    """Make the 16-block global cache full with segments 4-7 of ``f``: 0-3 evicted."""
    await a.read(f, 0, 16 * BS)  # segments 0-3, first touch: admitted, cache full
    await a.read(f, 16 * BS, 16 * BS)  # segments 4-7 likewise: 0-3 evicted


@contextmanager
def _iods_stopped(cluster):
    """The I/O daemons stopped (SIGSTOP) for the block, resumed even if it fails: a
    write-through cannot finish meanwhile."""
    pids = [cluster.pid(f"iod{i}") for i in range(2)]
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)


def test_refused_write_is_answered_at_once_and_takes_no_slot(runtime_cluster):
    cluster, ep = runtime_cluster
    old = b"o" * (32 * BS)

    async def main():
        await _prepare(cluster.config, "/wr", old)
        async with CacheStack.open(cluster.config, local=False) as a:
            f = await a.open_file("/wr")
            await _fill(a, f)
            before = request(ep, {"op": "stats"})
            with _iods_stopped(cluster):
                # segment 0 again, counter 1 <= 50: refused. The answer does not wait for
                # the (stopped) I/O daemons, as a buffered write's does not: it comes from
                # the global cache while they cannot write anything (waiting for them would
                # end in the client's request timeout, a failover and an error).
                await a.write(f, 0, b"w" * BS)
                mid = request(ep, {"op": "stats"})
            await a.fsync(f)
            after = request(ep, {"op": "stats"})
            return a.stats()["global_client"], before, mid, after

    client, before, mid, after = trio.run(main)
    assert mid["bypasses"] > before["bypasses"]  # the policy did refuse the write's segment
    assert mid["write_through_blocks"] == 1  # written through, not cached...
    assert mid["evictions"] == before["evictions"] and mid["blocks_cached"] == 16  # ...no slot
    assert client["hints"] == 0  # on its way to the I/O daemons: no hint yet
    assert client["failovers"] == 0 and client["direct_writes"] == 0  # the cache answered
    assert after["dirty_blocks"] == 0
    assert trio.run(_read_direct, cluster.config, "/wr", 2 * BS) == b"w" * BS + b"o" * BS


def test_read_of_a_refused_write_on_its_way_takes_its_bytes(runtime_cluster):
    """The I/O daemons are stopped, so the write-through cannot finish: the read of the block
    it writes whole is answered from its buffer (without that it waits for the stopped
    daemons, past the client's request timeout, and fails)."""
    cluster, ep = runtime_cluster
    old = b"o" * (32 * BS)

    async def main():
        await _prepare(cluster.config, "/rd", old)
        async with CacheStack.open(cluster.config, local=False) as a:
            f = await a.open_file("/rd")
            await _fill(a, f)
            before = request(ep, {"op": "stats"})
            with _iods_stopped(cluster):
                await a.write(f, 0, b"w" * BS)  # segment 0 again: refused, written through
                got = await a.read(f, 0, BS)  # refused again, but the bytes are here
                mid = request(ep, {"op": "stats"})
            await a.fsync(f)
            return got, a.stats()["global_client"], before, mid

    got, client, before, mid = trio.run(main)
    assert got == b"w" * BS
    assert mid["through_blocks"] == 1 and mid["through_waits"] == 0
    assert mid["fetched_blocks"] == before["fetched_blocks"]  # nothing read from the disks
    assert mid["blocks_cached"] == 16 and client["hints"] == 0  # refused, no slot, no hint
    assert trio.run(_read_direct, cluster.config, "/rd", 2 * BS) == b"w" * BS + b"o" * BS


def test_read_of_a_partly_written_refused_block_waits_for_the_write(runtime_cluster):
    """A refused write covering only part of a block: its buffer does not hold the rest, so a
    read of the block waits for the write to reach the I/O daemons and reads it from them."""
    cluster, ep = runtime_cluster
    old = b"o" * (32 * BS)

    async def main():
        await _prepare(cluster.config, "/part", old)
        async with CacheStack.open(cluster.config, local=False) as a:
            f = await a.open_file("/part")
            await a.read(f, 0, 16 * BS)
            await a.read(f, 16 * BS, 16 * BS)
            await a.write(f, BS + 100, b"p" * 1000)  # part of block 1, refused
            got = await a.read(f, 0, 2 * BS)
            await a.fsync(f)
            return got

    got = trio.run(main)
    assert got == b"o" * (BS + 100) + b"p" * 1000 + b"o" * (BS - 1100)
    assert request(ep, {"op": "stats"})["through_blocks"] == 0


def test_a_list_write_waits_only_for_its_own_blocks(runtime_cluster):
    """A refused write on its way to the (stopped) I/O daemons holds up requests for its own
    blocks only: a list write of the blocks on either side is answered at once. (Until
    2026-11-26 the span from a request's first to its last block counted: LU's write-back of
    two slabs waited seconds for the write-through of the slab between them; here it would
    wait for the stopped daemons, past the client's request timeout, and fail.)"""
    cluster, ep = runtime_cluster
    old = b"o" * (32 * BS)

    async def main():
        await _prepare(cluster.config, "/gap", old)
        async with CacheStack.open(cluster.config, local=False) as a:
            f = await a.open_file("/gap")
            await _fill(a, f)
            with _iods_stopped(cluster):
                await a.write(f, 4 * BS, b"m" * BS)  # segment 1 again: refused
                await a.gbackend.write_list(f.ino, [(0, BS), (8 * BS, BS)],
                                            b"a" * BS + b"b" * BS)  # segments 0 and 2
                mid = request(ep, {"op": "stats"})
            await a.fsync(f)
            return mid

    mid = trio.run(main)
    assert mid["write_through_blocks"] == 3 and mid["through_waits"] == 0
    got = trio.run(_read_direct, cluster.config, "/gap", 9 * BS)
    assert got == b"a" * BS + b"o" * 3 * BS + b"m" * BS + b"o" * 3 * BS + b"b" * BS


def test_no_hint_for_a_segment_with_dirty_blocks(runtime_cluster):
    cluster, ep = runtime_cluster
    old = b"o" * (4 * BS)

    async def main():
        await _prepare(cluster.config, "/dirty", old)
        async with CacheStack.open(cluster.config, local=False) as a:
            f = await a.open_file("/dirty")
            await a.write(f, 0, b"1" * BS)  # first access: admitted, dirty here
            await a.read(f, BS, BS)  # block 1 misses, counter 1 <= 50: refused
            await a.write(f, 0, b"2" * BS)  # a hint would send this one past the cache
            await a.fsync(f)  # the daemon writes its dirty block 0 back
            return a.stats()["global_client"]

    client = trio.run(main)
    assert request(ep, {"op": "stats"})["bypasses"] >= 1
    assert client["hints"] == 0
    assert trio.run(_read_direct, cluster.config, "/dirty", 2 * BS) == b"2" * BS + b"o" * BS


def test_a_read_hint_leaves_the_clients_writes_to_the_global_cache(runtime_cluster):
    """A read refusal's hint is about reads: the client still writes the segment through the
    global cache (answered once the daemon has the bytes; a refused write goes through in the
    background) and reads it through the global cache again afterwards, since the I/O daemons
    hold the old bytes until the write has reached them. The I/O daemons are stopped: until
    2026-11-26 (s11) the hint sent the write past the global cache, where it waited for them
    past the client's request timeout."""
    cluster, ep = runtime_cluster
    old = b"o" * (32 * BS)

    async def main():
        await _prepare(cluster.config, "/hinted", old)
        async with CacheStack.open(cluster.config, local=False) as a:
            f = await a.open_file("/hinted")
            await _fill(a, f)
            await a.read(f, 0, BS)  # segment 0 again, counter 1 <= 50: refused, hinted
            hinted = a.stats()["global_client"]
            with _iods_stopped(cluster):  # both answered by the global cache meanwhile
                await a.write(f, 0, b"w" * BS)
                got = await a.read(f, 0, BS)
                mid = request(ep, {"op": "stats"})
            await a.fsync(f)
            return hinted, got, a.stats()["global_client"], mid

    hinted, got, client, mid = trio.run(main)
    assert hinted["hints"] == 1 and hinted["direct_reads"] == 0
    assert got == b"w" * BS
    assert client["direct_writes"] == 0 and client["direct_reads"] == 0
    assert client["failovers"] == 0  # no request timed out: nothing waited for the daemons
    assert mid["write_through_blocks"] == 1 and mid["through_blocks"] == 1
    assert trio.run(_read_direct, cluster.config, "/hinted", 2 * BS) == b"w" * BS + b"o" * BS


def test_waiting_read_shares_a_refused_fetch(tmp_path):
    """Two clients miss the same refused blocks at once: the second waits for the first's
    fetch (as for any block being fetched) and then takes its bytes, instead of reading the
    disks a second time (LU under runtime10 read ~500-800 blocks twice this way)."""
    port = free_ports(1)[0]
    cluster = start_cluster(
        tmp_path, iods=2, connect_timeout=1.0, request_timeout=10.0,
        extra={"gcache": gcache_table([f"127.0.0.1:{port}"], capacity=64 << 10,
                                      policy="runtime", threshold=50, flush_interval=60.0),
               # a slow disk keeps the first fetch in flight while the second request comes
               "storage": {"default": "emulated:ide-2000", "cache_bytes": 256 << 10}})
    gep = Endpoint("127.0.0.1", port, "")
    data = b"".join(bytes([i]) * BS for i in range(32))  # 128 KiB, every block different
    try:
        async def main():
            await _prepare(cluster.config, "/shared", data)
            async with CacheStack.open(cluster.config, local=False) as a, \
                    CacheStack.open(cluster.config, local=False) as b:
                fa, fb = await a.open_file("/shared"), await b.open_file("/shared")
                await a.read(fa, 0, 64 << 10)  # first touch: admitted, the cache is full
                await a.read(fa, 64 << 10, 64 << 10)  # first touch: evicts the first half
                for iod in cluster.config.iods:
                    request(iod, {"op": "disk_drop"})
                got = {}

                async def rd(name, node, f):
                    got[name] = await node.read(f, 0, 64 << 10)

                async with trio.open_nursery() as n:  # both re-miss, both refused
                    n.start_soon(rd, "a", a, fa)
                    n.start_soon(rd, "b", b, fb)
                return got

        got = trio.run(main)
        assert got["a"] == got["b"] == data[:64 << 10]
        g = request(gep, {"op": "stats"})
        assert g["bypasses"] >= 2 and g["inflight_waits"] >= 1
        assert g["refetched_blocks"] == 0 and g["shared_blocks"] == 16
    finally:
        down(cluster.config)


def test_read_during_a_refused_write_keeps_no_old_bytes(tmp_path):
    """A write of block 0 arrives with half its bytes (a raw connection holds it there); the
    policy refuses it (segment counter 1 <= threshold 1). A read of block 0 comes meanwhile,
    counter 2 > 1: admitted. Before 2026-11-26 (s10) the read fetched the old bytes from the
    disks into a slot at once, and after the write went through that slot kept serving them.
    Now the read waits for the write and takes its bytes."""
    cluster, ep = gcache_cluster(tmp_path, policy="runtime", threshold=1, capacity=64 << 10,
                                 flush_interval=60.0)
    old, new = b"o" * (32 * BS), b"n" * BS
    try:
        async def main():
            await _prepare(cluster.config, "/race", old)
            async with CacheStack.open(cluster.config, local=False) as a, \
                    CacheStack.open(cluster.config, local=False) as b:
                fa, fb = await a.open_file("/race"), await b.open_file("/race")
                await a.read(fa, 0, 16 * BS)  # segments 0-3, first touch: admitted
                await a.read(fa, 16 * BS, 16 * BS)  # segments 4-7: 0-3 evicted
                stripe = await a.gbackend.stripe_of(fa.ino)
                sock = await aio.connect("127.0.0.1", ep.port, 5.0)
                head = {"op": "write", "ino": fa.ino, "stripe": stripe.to_wire(), "offset": 0,
                        "sync": False, "invalidate": False, "client": None}
                await aio.sendall(sock, frame(head, BS) + new[:BS // 2])
                r0 = request(ep, {"op": "stats"})
                got = {}

                async def rd():
                    got["during"] = await b.read(fb, 0, BS)

                async with trio.open_nursery() as n:
                    n.start_soon(rd)
                    while request(ep, {"op": "stats"})["reads"] == r0["reads"]:
                        await trio.sleep(0.01)  # until the read has reached the daemon
                    await aio.sendall(sock, new[BS // 2:])
                    reply = await aio.recv_frame(sock, 5.0)
                sock.close()
                assert reply is not None and not reply[0].get("err")
                async with CacheStack.open(cluster.config, local=False) as c:
                    fc = await c.open_file("/race")
                    got["after"] = await c.read(fc, 0, BS)
                await a.fsync(fa)
                return got

        got = trio.run(main)
        assert got["after"] == new  # no slot kept the old bytes
        assert got["during"] == new  # the read waited for the write
        g = request(ep, {"op": "stats"})
        assert g["write_through_blocks"] == 1 and g["admissions"] > 32  # refused, then admitted
        assert trio.run(_read_direct, cluster.config, "/race", 2 * BS) == new + b"o" * BS
    finally:
        down(cluster.config)


def test_a_refused_read_does_not_drop_a_block_a_write_is_filling(tmp_path):
    """A write of block 32 (segment 8, first access: admitted) arrives with half its bytes;
    a read of block 33, the same segment, is refused meanwhile (a re-miss, counter 1 <= 50)
    and drops the segment's clean blocks. Until 2026-11-26 (s13) that took the slot the write
    was being received into: the write's bytes went into a freed slot and never reached the
    I/O daemons (fsx: the first segment of a write lost, with refusing policies)."""
    cluster, ep = gcache_cluster(tmp_path, policy="runtime", threshold=50, capacity=64 << 10,
                                 flush_interval=60.0)
    old, new = b"o" * (48 * BS), b"n" * BS
    try:
        async def main():
            await _prepare(cluster.config, "/fill", old)
            async with CacheStack.open(cluster.config, local=False) as a:
                fa = await a.open_file("/fill")
                await _fill(a, fa)
                stripe = await a.gbackend.stripe_of(fa.ino)
                sock = await aio.connect("127.0.0.1", ep.port, 5.0)
                head = {"op": "write", "ino": fa.ino, "stripe": stripe.to_wire(),
                        "offset": 32 * BS, "sync": False, "invalidate": False, "client": None}
                w0 = request(ep, {"op": "stats"})
                await aio.sendall(sock, frame(head, BS) + new[:BS // 2])
                with trio.fail_after(10):
                    while request(ep, {"op": "stats"})["admissions"] == w0["admissions"]:
                        await trio.sleep(0.01)  # until the write has its slot
                    got = await a.read(fa, 33 * BS, BS)
                await aio.sendall(sock, new[BS // 2:])
                reply = await aio.recv_frame(sock, 5.0)
                sock.close()
                assert reply is not None and not reply[0].get("err")
                return got

        assert trio.run(main) == b"o" * BS
        assert request(ep, {"op": "stats"})["bypasses"] >= 1  # the read was refused
        request(ep, {"op": "flush", "ino": 0})  # the daemon's write-back of all it holds
        got = trio.run(_read_direct, cluster.config, "/fill", 34 * BS)
        assert got[32 * BS:33 * BS] == new
    finally:
        down(cluster.config)
