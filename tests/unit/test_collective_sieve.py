"""Two-phase with data sieving (issue 32's ROMIO-style baseline): an aggregator's I/O
phase over its runs, against a file in memory."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pvfs.collective._fsio import CountingFile
from pvfs.collective._pages import merge_runs
from pvfs.collective._twophase import sieved_write


class _MemFile:
    def __init__(self, data: bytes) -> None:
        self.data = bytearray(data)

    def pwrite(self, data, offset):
        end = offset + len(data)
        if end > len(self.data):
            self.data.extend(bytes(end - len(self.data)))
        self.data[offset:end] = data

    def preadinto(self, buf, offset):
        got = self.data[offset:offset + len(buf)]
        buf[:len(got)] = got
        return len(got)


def test_holes_are_read_and_written_back_whole_runs_only_written():
    mem = _MemFile(b"." * 40)
    f = CountingFile(mem, unit=16)
    sieved_write(f, [(2, b"ab"), (6, b"cd")], cb_buffer=16)  # one window with a hole
    assert bytes(mem.data[:10]) == b"..ab..cd.." and f.reads == 1 and f.writes == 1
    f2 = CountingFile(_MemFile(b""), unit=16)
    sieved_write(f2, [(0, b"x" * 40)], cb_buffer=16)  # no holes: three writes, no read
    assert f2.reads == 0 and f2.writes == 3


@settings(max_examples=200, deadline=None)
@given(base=st.binary(min_size=0, max_size=120),
       runs=st.lists(st.tuples(st.integers(0, 150), st.binary(min_size=1, max_size=40)),
                     min_size=1, max_size=8),
       cb=st.integers(1, 64))
def test_sieved_write_leaves_what_writing_each_run_leaves(base, runs, cb):
    runs = merge_runs(runs)
    want = _MemFile(base)
    for off, blob in runs:
        want.pwrite(blob, off)
    mem = _MemFile(base)
    f = CountingFile(mem, unit=16)
    sieved_write(f, runs, cb)
    assert bytes(mem.data) == bytes(want.data)
    assert f.writes <= sum(-(-len(b) // cb) for _, b in runs)  # never more writes
    assert f.bytes_written <= f.writes * cb
