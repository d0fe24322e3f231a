"""The native client's creates made ahead (``pvfs.client.ahead``), without a cluster: what
a close sends, and what a refused create does to its file."""

from __future__ import annotations

import errno
import os
import time
from types import SimpleNamespace

import pytest

from pvfs.client.ahead import CreatesAhead, _Dir
from pvfs.client.file import File
from pvfs.layout.stripe import Stripe
from pvfs.protocol.cred import Cred

STRIPE = Stripe(0, 2, 65536).to_wire()


class FakeData:
    """The manager: ``ahead`` answers each item with ``result(item)``; sends recorded."""

    def __init__(self, result=lambda item: {"ino": item["ino"]}) -> None:
        self.result, self.calls, self.sent = result, [], []
        self.during = None  # called while a batch is "on its way"

    def call(self, key, header):
        self.calls.append(header)
        if self.during is not None:
            self.during()
        return {"results": [self.result(i) for i in header["items"]]}

    def send(self, key, header):
        self.sent.append(header)


class FakeFs:
    def __init__(self, data: FakeData) -> None:
        self.config = SimpleNamespace(request_timeout=1.0, niods=2)  # (no session started)
        self.data, self.cred = data, [1000, 1000, []]
        self.ahead: CreatesAhead | None = None

    def meta(self, op, **fields):
        return {}

    def closing(self, ino):
        return self.ahead.closing(ino)

    def failure(self, ino):
        return self.ahead.failure(ino)

    def behind(self, ino, stripe, off, data):
        return self.ahead.write_behind(ino, stripe, off, data)

    def settle(self, ino):
        self.ahead.settle(ino)


def _ready(data: FakeData) -> tuple[FakeFs, CreatesAhead]:
    fs = FakeFs(data)
    ca = CreatesAhead(fs, Cred(1000, 1000, ()))
    ca.session.until = time.monotonic() + 3600  # a session as if registered
    ca._attrs[7] = {"mode": 0o40755, "uid": 1000, "gid": 1000}
    ca._dirs[7] = _Dir(set(), STRIPE)
    ca.numbers = [101, 102, 103]
    ca._walk = lambda head: 7
    fs.ahead = ca
    return fs, ca


def _create(fs, ca, name: str) -> File:
    flags = os.O_WRONLY | os.O_CREAT
    attrs = ca.create("/d", name, 0o644, flags)
    assert attrs is not None and attrs["fresh"]
    return File(fs, f"/d/{name}", attrs, flags)


def test_a_close_before_the_create_left_sends_nothing_and_the_create_goes_unopened():
    data = FakeData()
    fs, ca = _ready(data)
    f = _create(fs, ca, "a")
    f.close()
    ca.flush()
    (batch,) = data.calls
    assert [(i["name"], i["open"], i["writing"]) for i in batch["items"]] == [("a", False, True)]
    assert data.sent == []  # no close: the manager never counted a handle


def test_a_close_while_the_create_is_on_its_way_follows_its_reply():
    data = FakeData()
    fs, ca = _ready(data)
    f, g = _create(fs, ca, "a"), _create(fs, ca, "b")
    data.during = lambda: (f.close(), g.close())  # both close while the batch is out
    ca.flush()
    assert [i["open"] for i in data.calls[0]["items"]] == [True, True]
    assert data.sent == [{"op": "closes", "cred": fs.cred, "inos": [f.ino, g.ino]}]


def test_a_refused_create_fails_its_file_and_is_not_closed():
    data = FakeData(lambda item: {"errno": errno.ENOSPC, "error": "no space"})
    fs, ca = _ready(data)
    f = _create(fs, ca, "a")
    data.during = f.close
    ca.flush()
    assert ca.failure(f.ino) == errno.ENOSPC and ca.status()["failed"] == 1
    assert ca.refused_since_sync() == 1 and ca.refused_since_sync() == 0
    assert data.sent == []  # its open was refused with it
    g = _create(fs, ca, "b")
    ca.flush()
    with pytest.raises(OSError) as exc:
        g.write(b"x")
    assert exc.value.errno == errno.EIO


def test_a_known_name_a_bad_name_or_no_session_is_left_to_the_manager():
    fs, ca = _ready(FakeData())
    _create(fs, ca, "a").close()
    assert ca.create("/d", "a", 0o644, os.O_WRONLY | os.O_CREAT) is None  # it is there
    assert ca.create("/d", "..", 0o644, os.O_WRONLY | os.O_CREAT) is None
    assert ca.create("/d", "x" * 256, 0o644, os.O_WRONLY | os.O_CREAT) is None
    ca.session.until = 0.0
    assert ca.create("/d", "b", 0o644, os.O_WRONLY | os.O_CREAT) is None


def test_a_recall_sends_the_queued_creates_then_forgets_the_directory():
    data = FakeData()
    fs, ca = _ready(data)
    _create(fs, ca, "a").close()
    ca._recalled([7])
    assert len(data.calls) == 1 and ca.pending == []
    assert 7 not in ca._dirs and 7 not in ca._attrs
