"""Client access hints (pvfs.AccessHint, thesis §5.8): validated on the client with the same
rules as the daemon's schema, and carried in every read header of a hinted handle."""

from __future__ import annotations

import pytest

import pvfs
from pvfs.client.file import File
from pvfs.client.hints import AccessHint
from pvfs.layout.stripe import Stripe
from pvfs.protocol.schema import IOD_SCHEMAS


def test_collective_describes_the_whole_operation():
    h = AccessHint.collective(tasks=14, per_task=1 << 20)
    assert h.to_wire() == {"size": 14 << 20, "requests": 14, "regions": 14,
                           "range": 14 << 20}
    # random-block tasks read 16 blocks one after the other: one block each in service
    r = AccessHint.collective(tasks=14, per_task=1 << 20, at_once=16)
    assert (r.size, r.requests, r.regions, r.range) == (14 << 16, 14, 14, 14 << 20)
    s = AccessHint.collective(tasks=4, per_task=4096, regions_per_task=16, extent=1 << 30)
    assert (s.regions, s.range) == (64, 1 << 30)
    assert pvfs.AccessHint is AccessHint


@pytest.mark.parametrize("fields", [
    {"size": -1, "requests": 1, "regions": 1, "range": 0},
    {"size": 1, "requests": 0, "regions": 1, "range": 0},
    {"size": True, "requests": 1, "regions": 1, "range": 0},
    {"size": 1.5, "requests": 1, "regions": 1, "range": 0},
    {"size": 1, "requests": 1, "regions": 1, "range": 1 << 70},
])
def test_bad_hints_are_refused_as_the_daemon_would(fields):
    with pytest.raises(ValueError):
        AccessHint(**fields)
    with pytest.raises(ValueError):
        IOD_SCHEMAS["read"]["hint"].check(fields)


def test_bad_collective_arguments_are_refused():
    with pytest.raises(ValueError):
        AccessHint.collective(tasks=0, per_task=1)
    with pytest.raises(ValueError):
        AccessHint.collective(tasks=1, per_task=1, at_once=0)


class RecordingData:
    """The slice of DataPath a File reads through; records what each read sends."""

    def __init__(self) -> None:
        self.sent: list[dict | None] = []

    def read(self, ino, stripe, desc, buf, hint=None):
        from pvfs.client.datapath import ReadResult

        self.sent.append(hint)
        return ReadResult({}, False)


class FakeFs:
    def __init__(self) -> None:
        self.data = RecordingData()

    def meta(self, op, **fields):
        return {}

    def closing(self, ino):
        return False

    def failure(self, ino):
        return None

    def behind(self, ino, stripe, off, data):
        return False

    def settle(self, ino):
        pass


def test_a_hinted_handle_sends_its_hint_with_every_read_until_cleared():
    fs = FakeFs()
    f = File(fs, "/x", {"ino": 3, "stripe": Stripe(0, 2, 65536).to_wire(), "size": 0},
             0)  # O_RDONLY
    f.pread(10, 0)
    hint = AccessHint(size=100, requests=2, regions=4, range=1000)
    f.set_hint(hint)
    f.pread(10, 0)
    f.read_list([(0, 5), (50, 5)])
    f.set_hint(None)
    f.pread(10, 0)
    assert fs.data.sent == [None, hint.to_wire(), hint.to_wire(), None]
    with pytest.raises(TypeError):
        f.set_hint({"size": 1})            # a plain dict skips validation: refused
