"""The mount's cache backend with list I/O against real I/O daemons (no FUSE needed):
``AsyncClient.read_regions`` and ``ClientBackend.write_list``/``read_list``; and, through a
real mount, scattered 4 KiB writes and the cached ``security.capability`` lookups."""

from __future__ import annotations

import errno
import os
import random
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from pvfs.cache import BlockCache, WritebackPolicy
from pvfs.client.aclient import ROOT_INO, AsyncClient
from pvfs.fuse import cachewire
from pvfs.fuse.cachewire import ClientBackend
from pvfs.fuse.handles import HandleTable
from pvfs.layout.stripe import Stripe

sys.path.insert(0, str(Path(__file__).parent))
from test_mount_support import Mount, needs_fuse


async def _open(cfg_path: str, name: str) -> tuple[AsyncClient, ClientBackend, int]:
    client = await AsyncClient.connect(cfg_path)
    table = HandleTable()
    attrs = await client.create(ROOT_INO, name, 0o644, exclusive=True,
                                stripe=Stripe(0, 4, 4096))
    ino = attrs["ino"]
    table.info(ino).stripe = Stripe(*attrs["stripe"])

    async def stripe_of(i: int) -> Stripe:
        stripe = table.info(i).stripe
        assert stripe is not None
        return stripe

    return client, ClientBackend(client, table, stripe_of), ino


def test_client_backend_list_io(pvfs_cluster) -> None:
    async def main() -> None:
        client, be, ino = await _open(pvfs_cluster.config_path, "listio-a")
        try:
            regions = [(0, 100), (5000, 3000), (20000, 4096), (40960, 10)]
            chunks = [bytes([i + 1]) * n for i, (_, n) in enumerate(regions)]
            await be.write_list(ino, regions, b"".join(chunks))
            assert be.table.info(ino).wrote
            stripe = await be.stripe_of(ino)
            whole = await client.read(ino, stripe, 0, 1 << 20)
            assert len(whole) == 40970
            expect = bytearray(40970)
            for (off, n), c in zip(regions, chunks):
                expect[off:off + n] = c
            assert whole == bytes(expect)
            # list read: holes read as zeros, regions past the end are short or empty
            got = await be.read_list(ino, [(50, 100), (4000, 2000), (40900, 200),
                                           (50000, 10)])
            assert got == [bytes(expect[50:150]), bytes(expect[4000:6000]),
                           bytes(expect[40900:]), b""]
            assert await client.read_regions(ino, stripe, [(0, 0)]) == [b""]
            # more regions than one request header carries: split, in order
            many = [(100_000 + 2 * i, 1) for i in range(cachewire.MAX_LIST_REGIONS + 5)]
            await be.write_list(ino, many, bytes(i % 251 + 1 for i in range(len(many))))
            back = await be.read_list(ino, many)
            assert b"".join(back) == bytes(i % 251 + 1 for i in range(len(many)))
        finally:
            client.close()

    trio.run(main)


def test_block_cache_over_client_backend_random_blocks(pvfs_cluster) -> None:
    """Random 4 KiB writes: write-back in list writes, read back through scattered misses."""
    async def main() -> None:
        client, be, ino = await _open(pvfs_cluster.config_path, "listio-b")
        try:
            bs = 4096
            cache = BlockCache(be, block_size=bs, capacity=4 << 20,
                               writeback=WritebackPolicy(max_regions=64))
            rng = random.Random(7)
            model = bytearray(256 * bs)
            for _ in range(300):
                blk = rng.randrange(256)
                data = rng.randbytes(bs)
                model[blk * bs:(blk + 1) * bs] = data
                await cache.write(ino, blk * bs, data, file_size=len(model))
            await cache.flush(ino)
            s = cache.stats()
            assert s["list_writes"] >= 1 and s["dirty_blocks"] == 0
            stripe = await be.stripe_of(ino)
            assert await client.read(ino, stripe, 0, len(model)) == bytes(model)
            cache.invalidate(ino)
            for blk in range(0, 256, 3):  # every third block cached: misses are scattered
                await cache.read(ino, blk * bs, 1, file_size=len(model))
            got = await cache.read(ino, 0, 31 * bs, file_size=len(model))  # < stream_min
            assert got == bytes(model[:31 * bs]) and cache.stats()["list_reads"] >= 1
        finally:
            client.close()

    trio.run(main)


def _cap_hits(stats: dict) -> int:
    return stats["capability_hits"] + stats.get("frontend", {}).get("caps_here", 0)


@pytest.mark.fuse
@needs_fuse
def test_random_writes_through_mount(pvfs_cluster, tmp_path) -> None:
    """Scattered 4 KiB writes reach the daemons as list writes; the kernel's per-write
    ``security.capability`` lookup is answered from the mount's cache, and this node's
    capability changes (incl. the kernel stripping it on write) show at once."""
    m = Mount(pvfs_cluster.config_path, tmp_path / "mnt").start()
    try:
        p = m.path / "scattered"
        rng = random.Random(5)
        model = bytearray(rng.randbytes(1 << 20))
        p.write_bytes(model)
        s0 = m.stats()
        fd = os.open(p, os.O_RDWR)
        try:
            for _ in range(200):
                blk = rng.randrange(256)
                data = rng.randbytes(4096)
                model[blk * 4096:(blk + 1) * 4096] = data
                os.pwrite(fd, data, blk * 4096)
            os.fsync(fd)
        finally:
            os.close(fd)
        s1 = m.stats()
        assert s1["list_writes"] > s0["list_writes"]
        assert s1["backend_writes"] - s0["backend_writes"] < 20
        # answered from the mount's cache: by Python, or (C front end) by its workers
        assert _cap_hits(s1) - _cap_hits(s0) >= 150
        with open(p, "rb") as fh:
            assert fh.read() == model
        cap = struct.pack("<5I", 0x02000000, 1 << 10, 0, 0, 0)  # VFS_CAP_REVISION_2
        os.setxattr(p, "security.capability", cap)
        assert os.getxattr(p, "security.capability") == cap
        os.removexattr(p, "security.capability")
        with pytest.raises(OSError) as info:
            os.getxattr(p, "security.capability")
        assert info.value.errno == errno.ENODATA
        os.setxattr(p, "security.capability", cap)
        with open(p, "r+b") as fh:  # the kernel strips file capabilities on write
            fh.write(b"w")
        with pytest.raises(OSError) as info:
            os.getxattr(p, "security.capability")
        assert info.value.errno == errno.ENODATA
    finally:
        m.stop()


@pytest.mark.fuse
@needs_fuse
@pytest.mark.parametrize("opts", ["", "frontend=pyfuse3"])
def test_writers_taking_turns_are_written_back_gathered(pvfs_cluster, tmp_path, opts) -> None:
    """IOR hard's pattern: two writers of one file, 47,008-byte transfers in turns, one
    behind the other. The transfers are stream writes (``stream_write_min``, 32 KiB) queued
    out of the file's order, written back gathered when they queue faster than one write-back
    (how many do is timing: the gathering itself is checked by tests/unit/
    test_cache_stream_gather.py and the cache model's ``writes_in_turns``); the bytes on the
    daemons are the file's either way."""
    m = Mount(pvfs_cluster.config_path, tmp_path / "mnt", opts).start()
    try:
        p = m.path / "turns"
        t, segs = 47008, 60
        p.write_bytes(b"")
        s0 = m.stats()
        fds = [os.open(p, os.O_WRONLY) for _ in range(2)]
        model = bytearray(2 * segs * t)
        try:
            order = [(s, 0) for s in range(5)]  # rank 1 starts five transfers late
            order += [x for s in range(segs) for x in ((s + 5, 0), (s, 1)) if x[0] < segs]
            for seg, rank in order:
                data = bytes([(seg * 2 + rank) % 251 + 1]) * t
                off = (seg * 2 + rank) * t
                os.pwrite(fds[rank], data, off)
                model[off:off + t] = data
            for fd in fds:
                os.fsync(fd)
        finally:
            for fd in fds:
                os.close(fd)
        s1 = m.stats()
        assert s1["stream_writes"] - s0["stream_writes"] >= 2 * segs
        out = tmp_path / "turns.copy"  # read from the daemons, not through the mount
        subprocess.run([sys.executable, "-m", "pvfs.cli.main", "--config",
                        pvfs_cluster.config_path,
                        "cp", "pvfs:/turns", str(out)], check=True, capture_output=True)
        assert out.read_bytes() == model
    finally:
        m.stop()
