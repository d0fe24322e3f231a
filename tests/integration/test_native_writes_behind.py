"""Small writes of files made ahead, sent behind the program (``pvfs.client.behind``) in one
``writes`` request per I/O daemon (``daemons/iod/smallwrites.py``): another client sees
every byte at once, the daemons refuse a malformed batch and go on serving."""

from __future__ import annotations

import errno
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_precreate import pool_of

from pvfs.client.datapath import pack_regions


def _iod_requests(fs, op: str) -> int:
    total = 0
    for i in range(fs.config.niods):
        for fam in fs.data.call(i, {"op": "metrics"})["families"]:
            if fam["name"] == "pvfs_requests_total":
                total += sum(v for _, labels, v in fam["samples"] if labels["op"] == op)
    return int(total)


@pytest.fixture
def ahead(pvfs_cluster, fs):
    pool_of(fs, least=256)
    with pvfs_cluster.connect(ahead=True) as client:
        assert client.ahead is not None, "the manager granted no lease session"
        yield client


def _payload(i: int, n: int) -> bytes:
    return bytes((i * 7 + k) % 251 for k in range(n))


def test_small_files_go_in_batches_and_another_client_reads_every_byte(ahead, fs):
    ahead.mkdir("/wb-batch")
    writes, batches = _iod_requests(fs, "write"), _iod_requests(fs, "writes")
    sizes = [1 + 997 * i for i in range(30)] + [70_000, 200_000]  # the last two cannot wait
    for i, n in enumerate(sizes):
        with ahead.open(f"/wb-batch/f{i}", "wb") as f:
            f.write(_payload(i, n))
    ahead.ahead.flush()
    behind = ahead.ahead.status()["behind"]
    assert behind["queued"] >= 30 and behind["refused"] == 0
    sent_one_by_one = _iod_requests(fs, "write") - writes
    assert sent_one_by_one <= 2 * fs.config.niods  # only the two large files' pieces
    assert 1 <= _iod_requests(fs, "writes") - batches <= 10
    for i, n in enumerate(sizes):
        assert fs.stat(f"/wb-batch/f{i}").st_size == n
        with fs.open(f"/wb-batch/f{i}", "rb") as f:
            assert f.read() == _payload(i, n), f"f{i}"


def test_another_client_opening_the_file_at_once_reads_its_bytes(ahead, fs):
    ahead.mkdir("/wb-now")
    for i in range(5):
        with ahead.open(f"/wb-now/f{i}", "wb") as f:
            f.write(_payload(i, 3901))
        # at once, well inside the batch's delay: the lookup recalls the directory, and
        # the recall sends the queued writes before it is answered
        with fs.open(f"/wb-now/f{i}", "rb") as f:
            assert f.read() == _payload(i, 3901)


def test_the_writer_reads_its_own_queued_writes(ahead):
    ahead.mkdir("/wb-own")
    with ahead.open("/wb-own/f", "w+b") as f:
        f.write(b"hello, behind")
        assert f.pread(100, 0) == b"hello, behind"
        assert f.size() == 13


def _bad(fs, iod: int, items: list[dict], bulk: bytes) -> int:
    with pytest.raises(OSError) as exc:
        fs.data.run([(iod, {"op": "writes", "items": items}, bulk,
                      pack_regions([(0, len(bulk))]), 1)])
    return exc.value.errno


def test_a_daemon_refuses_a_malformed_batch_and_goes_on_serving(fs):
    with fs.open("/wb-bad", "wb") as f:
        f.write(b"0" * 10)
    ino, unit = fs.stat("/wb-bad").st_ino, 65536
    stripe = fs.stat("/wb-bad").stripe.to_wire()
    item = {"ino": ino, "stripe": stripe, "off": 0, "len": 4, "fresh": False}
    assert _bad(fs, 0, [item], b"abc") == errno.EINVAL                # bytes short
    assert _bad(fs, 0, [dict(item, off=unit - 2)], b"abcd") == errno.EINVAL  # across a unit
    assert _bad(fs, 1, [item], b"abcd") == errno.EINVAL                # not its share
    assert _bad(fs, 0, [dict(item, extra=1)], b"abcd") == errno.EINVAL  # unknown field
    reply = fs.data.run([(0, {"op": "writes", "items": [item]}, b"abcd",
                          pack_regions([(0, 4)]), 1)])[0]
    assert reply["nbytes"] == [4]
    with fs.open("/wb-bad", "rb") as f:
        assert f.read() == b"abcd" + b"0" * 6


def test_over_an_emulated_disk_the_writes_go_one_by_one_and_arrive(tmp_path):
    from conftest import start_cluster

    from pvfs.cluster.launch import down

    cluster = start_cluster(tmp_path, iods=2, extra={"storage": {
        "default": "posix", "iod0": "emulated:ide-2000"}})
    try:
        with cluster.connect() as fs:
            pool_of(fs, least=64)
            with cluster.connect(ahead=True) as client:
                assert client.ahead is not None
                client.mkdir("/wb-emu")
                for i in range(5):
                    with client.open(f"/wb-emu/f{i}", "wb") as f:
                        f.write(_payload(i, 500))
                client.sync()
                behind = client.ahead.status()["behind"]
                assert not behind["enabled"] and behind["refused"] == 0
            for i in range(5):
                with fs.open(f"/wb-emu/f{i}", "rb") as f:
                    assert f.read() == _payload(i, 500)
    finally:
        down(cluster.config)
