"""The native API's data path (``_native.stripe_transfer``) on real daemons, against a
bytearray model: odd alignments, list and strided I/O over holes, short reads at the end of
file, and one daemon dead while the others answer (issue 30)."""

from __future__ import annotations

import errno
import random
import time

import pytest

from pvfs import Stripe
from pvfs.layout.describe import Strided


def put(model: bytearray, off: int, data: bytes) -> None:
    if len(model) < off + len(data):
        model.extend(bytes(off + len(data) - len(model)))
    model[off:off + len(data)] = data


def get(model: bytearray, off: int, n: int) -> bytes:
    """What a read returns: zeros in holes and past the end of a region list's file."""
    return bytes(model[off:off + n]).ljust(n, b"\0")


@pytest.mark.parametrize("stripe", [Stripe(1, 3, 512), Stripe(0, 4, 4096), Stripe(2, 2, 65536)])
def test_list_and_strided_io_over_holes_match_the_model(fs, stripe):
    rng = random.Random(stripe.ssize + stripe.pcount)
    model = bytearray()
    path = f"/dp-{stripe.base}-{stripe.pcount}-{stripe.ssize}"
    span = 6 * stripe.ssize * stripe.pcount
    with fs.open(path, "w+b", stripe=stripe) as f:
        for _ in range(6):
            regions, data = [], b""
            pos = rng.randrange(0, span // 2)
            for _ in range(rng.randrange(1, 6)):
                n = rng.randrange(1, 2 * stripe.ssize + 3)
                regions.append((pos, n))
                data += rng.randbytes(n)
                pos += n + rng.randrange(0, 3 * stripe.ssize)  # holes between the regions
            assert f.write_list(regions, data) == len(data)
            at = 0
            for off, n in regions:
                put(model, off, data[at:at + n])
                at += n
        for _ in range(8):
            regions = [(rng.randrange(0, span), rng.randrange(0, 3 * stripe.ssize))
                       for _ in range(rng.randrange(1, 5))]
            assert f.read_list(regions) == b"".join(get(model, o, n) for o, n in regions)
        off, g, s, c = 3, stripe.ssize + 1, 2 * stripe.ssize + 5, 7
        data = rng.randbytes(g * c)
        assert f.write_strided(off, g, s, c, data) == len(data)
        for i in range(c):
            put(model, off + i * s, data[i * g:(i + 1) * g])
        assert f.read_desc(Strided(1, g + 2, s, c)) == b"".join(
            get(model, 1 + i * s, g + 2) for i in range(c))
        assert f.size() == len(model)


@pytest.mark.parametrize("end", [0, 1, 4095, 4096, 4097, 3 * 4096 * 4 + 11])
def test_short_reads_at_end_of_file_with_odd_alignments(fs, end):
    rng = random.Random(end)
    data = rng.randbytes(end)
    with fs.open(f"/eof-{end}", "w+b", stripe=Stripe(0, 4, 4096)) as f:
        if end:
            f.pwrite(data, 0)
        for off in (0, 1, 4095, max(0, end - 3), end, end + 5000):
            for n in (1, 4097, 70_001):
                buf = bytearray(b"\xff" * n)
                got = f.preadinto(buf, off)
                assert got == max(0, min(n, end - off))
                assert bytes(buf[:got]) == data[off:off + got]
                assert f.pread(n, off) == data[off:off + n]


def test_a_dead_daemon_is_a_clear_errno_within_the_timeout(fresh_cluster):
    """Kill one I/O daemon of four: a read or write touching it fails with a connection
    errno (never a hang, never a partial success) within the request timeout; one not
    touching it still works."""
    with fresh_cluster.connect() as fs, fs.open("/dead", "w+b", stripe=Stripe(0, 4, 4096)) as f:
        data = random.Random(3).randbytes(4 * 4096 * 8)
        f.pwrite(data, 0)
        fresh_cluster.kill("iod2")
        for call in (lambda: f.pwrite(data, 0), lambda: f.pread(len(data), 0)):
            t0 = time.monotonic()
            with pytest.raises(OSError) as info:
                call()
            assert time.monotonic() - t0 < fresh_cluster.config.request_timeout + 2
            assert info.value.errno in (errno.ECONNREFUSED, errno.ECONNRESET, errno.EPIPE,
                                        errno.ETIMEDOUT, errno.EHOSTUNREACH)
            assert "iod2" in str(info.value)
        assert f.pread(4096, 0) == data[:4096]  # rank 0 only: iod0 answers
        assert f.pwrite(b"z" * 10, 4096 + 5) == 10  # rank 1 only


def test_reads_and_writes_ask_no_poll_of_their_pooled_connections(fs, monkeypatch):
    """A data request goes out on its pooled connections at once: a connection the daemon
    closed meanwhile fails it and it is resent on a fresh one (next test), so no poll(2) per
    connection is asked before every request (issue 30, thirty-eighth session)."""
    import select

    from pvfs.client import datapath

    data = random.Random(38).randbytes(1 << 20)
    with fs.open("/nopoll", "w+b", stripe=Stripe(0, 4, 65536)) as f:
        f.pwrite(data, 0)
        assert f.pread(len(data), 0) == data    # every daemon's connection is pooled now
        polls = []
        real = select.poll
        monkeypatch.setattr(datapath.select, "poll", lambda: polls.append(1) or real())
        for k in range(3):
            f.pwrite(data, k << 20)
            buf = bytearray(len(data))
            assert f.preadinto(buf, k << 20) == len(data) and buf == data
        assert polls == []


def test_writes_go_on_over_restarted_daemons(fresh_cluster):
    """Every pooled connection of a write is dead after its daemons restarted: the write
    breaks on them and is sent again on fresh ones, once, and lands."""
    import signal

    from pvfs.cluster.launch import up

    data = random.Random(39).randbytes(300_000)
    with fresh_cluster.connect() as fs:
        f = fs.open("/restarted", "w+b", stripe=Stripe(0, 4, 4096))
        f.pwrite(b"x" * 300_000, 0)
        for name in ("iod0", "iod1", "iod2", "iod3"):
            fresh_cluster.kill(name, signal.SIGKILL)
        up(fresh_cluster.config)
        assert f.pwrite(data, 0) == len(data)
        assert f.pread(len(data), 0) == data
        f.close()
