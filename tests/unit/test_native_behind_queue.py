"""Small writes of files made ahead, sent behind the program (``pvfs.client.behind``),
without a cluster: what is queued, in what order it leaves, and what a refusal does."""

from __future__ import annotations

import errno
import os
import sys
import time
from pathlib import Path

import pytest

from pvfs.client.ahead import CreatesAhead, _Dir
from pvfs.client.file import File
from pvfs.layout.stripe import Stripe
from pvfs.protocol.cred import Cred

sys.path.insert(0, str(Path(__file__).parent))
from test_native_ahead_batches import FakeFs as AheadFs

UNIT = 65536
STRIPE = Stripe(0, 2, UNIT).to_wire()   # unit 0 on I/O daemon 0, unit 1 on daemon 1


class FakeData:
    """The manager and two I/O daemons; every call recorded in order in ``log``."""

    def __init__(self) -> None:
        self.log: list[tuple] = []
        self.refuse: dict[int, int] = {}   # iod -> errno its ``writes`` answer with

    def call(self, key, header):
        self.log.append(("mgr", header["op"]))
        return {"results": [{"ino": i["ino"]} for i in header.get("items", [])]}

    def send(self, key, header):
        self.log.append(("mgr", header["op"]))

    def run(self, calls):
        for iod, header, bulk, _segs, _direction in calls:
            if iod in self.refuse:
                raise OSError(self.refuse[iod], os.strerror(self.refuse[iod]))
        for iod, header, bulk, _segs, _direction in calls:
            items = [(i["ino"], i["off"], i["len"]) for i in header["items"]]
            self.log.append(("writes", iod, items, bytes(bulk)))
        return [{"nbytes": [i["len"] for i in h["items"]]} for _k, h, *_ in calls]

    def write(self, ino, stripe, desc, view, fresh=False):
        self.log.append(("write", ino, desc.regions, bytes(view)))
        return len(view)

    def read(self, ino, stripe, desc, buf, hint=None):
        from pvfs.client.datapath import ReadResult

        self.log.append(("read", ino))
        return ReadResult({}, False)


class FakeFs(AheadFs):
    """The batches' fake file system, whose manager requests send the queue first."""

    def meta(self, op, **fields):
        self.ahead.flush()
        return {}


def _ready() -> tuple[FakeData, FakeFs, CreatesAhead]:
    data = FakeData()
    fs = FakeFs(data)
    ca = CreatesAhead(fs, Cred(1000, 1000, ()))
    ca.session.until = time.monotonic() + 3600  # a session as if registered
    ca._attrs[7] = {"mode": 0o40755, "uid": 1000, "gid": 1000}
    ca._dirs[7] = _Dir(set(), STRIPE)
    ca.numbers = list(range(120, 100, -1))
    ca._walk = lambda head: 7
    fs.ahead = ca
    return data, fs, ca


def _create(fs, ca, name: str, flags: int = os.O_RDWR | os.O_CREAT) -> File:
    attrs = ca.create("/d", name, 0o644, flags)
    assert attrs is not None and attrs["fresh"]
    return File(fs, f"/d/{name}", attrs, flags)


def test_small_writes_wait_and_leave_in_one_request_per_daemon_before_the_creates():
    data, fs, ca = _ready()
    for name in ("a", "b"):
        with _create(fs, ca, name) as f:
            f.write(name.encode() * 10)
    f = _create(fs, ca, "c")
    f.pwrite(b"z" * 5, UNIT + 3)   # its second unit: daemon 1
    f.close()
    assert data.log == []          # nothing has left yet: every call was answered here
    ca.flush()
    writes = [e for e in data.log if e[0] == "writes"]
    assert writes == [("writes", 0, [(101, 0, 10), (102, 0, 10)], b"a" * 10 + b"b" * 10),
                      ("writes", 1, [(103, UNIT + 3, 5)], b"z" * 5)]
    assert data.log.index(writes[-1]) < data.log.index(("mgr", "ahead"))
    assert not ca.behind and ca.behind.counters["sent"] == 3


def test_a_write_that_cannot_wait_goes_at_once_after_the_queued_ones():
    data, fs, ca = _ready()
    f = _create(fs, ca, "a")
    f.pwrite(b"1" * 100, 0)
    f.pwrite(b"2" * 100, UNIT - 50)     # across a stripe unit: sent now, after the first
    f.pwrite(b"3" * (64 * 1024 + 1), 2 * UNIT)  # too big to wait
    assert [e[0] for e in data.log] == ["writes", "write", "write"]
    assert data.log[0][2] == [(101, 0, 100)]
    assert data.log[1][2] == ((UNIT - 50, 100),)


def test_a_read_or_size_of_the_file_sends_its_queued_writes_first():
    data, fs, ca = _ready()
    f = _create(fs, ca, "a")
    f.write(b"x" * 10)
    f.pread(10, 0)
    assert [e[0] for e in data.log] == ["writes", "read"]


def test_after_a_recall_of_the_directory_writes_are_not_queued():
    data, fs, ca = _ready()
    f = _create(fs, ca, "a")
    f.write(b"x" * 10)
    ca._recalled([7])              # another client looks into the directory
    assert [e[0] for e in data.log] == ["writes", "mgr"]  # its writes, then the create
    f.write(b"y" * 10)
    assert data.log[-1] == ("write", 101, ((10, 10),), b"y" * 10)
    assert not ca.behind


def test_a_refused_write_fails_its_file_and_the_next_sync():
    data, fs, ca = _ready()
    data.refuse[0] = errno.ENOSPC
    f = _create(fs, ca, "a")
    f.write(b"x" * 10)
    ca.flush()
    assert ca.failure(101) == errno.ENOSPC
    with pytest.raises(OSError) as exc:
        f.fsync()
    assert exc.value.errno == errno.EIO
    assert ca.refused_since_sync() == 1


def test_a_daemon_that_cannot_take_them_gets_them_one_by_one_from_then_on():
    data, fs, ca = _ready()
    data.refuse[0] = errno.EOPNOTSUPP   # an emulated disk
    f = _create(fs, ca, "a")
    f.write(b"x" * 10)
    ca.flush()
    assert data.log[0] == ("write", 101, ((0, 10),), b"x" * 10)
    assert ca.failure(101) is None and not ca.behind.enabled
    f.write(b"y" * 10)
    assert data.log[-1] == ("write", 101, ((10, 10),), b"y" * 10)


def test_the_queue_keeps_a_copy_not_the_callers_buffer():
    data, fs, ca = _ready()
    f = _create(fs, ca, "a")
    buf = bytearray(b"before")
    f.write(buf)
    buf[:] = b"after!"
    ca.flush()
    assert data.log[0][3] == b"before"


def test_a_write_through_another_handle_of_the_file_does_not_overtake_the_queued_ones():
    data, fs, ca = _ready()
    f = _create(fs, ca, "a")
    f.pwrite(b"1" * 10, 0)
    other = File(fs, "/d/a", {"ino": 101, "stripe": STRIPE, "size": 0}, os.O_RDWR)
    other.pwrite(b"2" * 10, 0)
    assert [e[0] for e in data.log] == ["writes", "write"]


def test_a_daemons_writes_are_cut_into_requests_it_takes(monkeypatch):
    from pvfs.client import smallwrites

    monkeypatch.setattr(smallwrites, "REQUEST", 100)
    monkeypatch.setattr(smallwrites, "ITEMS", 3)
    data, fs, ca = _ready()
    for i, n in enumerate((60, 60, 10, 10, 10, 10)):
        with _create(fs, ca, f"f{i}") as f:
            f.write(b"x" * n)
    ca.flush()
    sizes = [[n for _ino, _off, n in e[2]] for e in data.log if e[0] == "writes"]
    assert sizes == [[60], [60, 10, 10], [10, 10]]
