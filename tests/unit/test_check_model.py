"""The checker's model (``pvfs.check.model``) and trace writer without any file system:
what each mode allows a node to read, and what a flush must leave at the daemons."""

from __future__ import annotations

import numpy as np

from pvfs.check.model import Model
from pvfs.check.report import format_mismatch, to_trace

NATIVE, A, B = 0, 1, 2
BLOCK = 4096


def model(sync: bool) -> Model:
    return Model([False, True, True], sync_mode=sync)


def test_stale_read_after_a_sync_write_breaks_sync_but_not_none():
    for sync in (False, True):
        m = model(sync)
        f = m.new_file(7)
        m.write(NATIVE, f, 0, b"old!", sync=False, block=BLOCK)
        m.reopened(A, f, (4, 1), 0)
        m.write(B, f, 0, b"new!", sync=True, block=BLOCK)
        m.invalidated(B, f, 0, 4)
        bad = m.check_read(A, f, 0, 4, b"old!", attr_window=0)
        assert (bad is not None) == sync
        assert m.check_read(A, f, 0, 4, b"new!", attr_window=0) is None


def test_own_writes_are_seen_and_garbage_never():
    m = model(False)
    f = m.new_file(7)
    m.write(A, f, 10, b"abc", sync=False, block=BLOCK)
    assert m.check_read(A, f, 10, 3, b"abc", attr_window=0) is None
    bad = m.check_read(A, f, 10, 3, b"abX", attr_window=0)
    assert bad is not None and bad.first_bad == 12 and bad.allowed == [ord("c")]
    assert any("first wrong byte at offset 12" in line for line in format_mismatch(bad))


def test_write_behind_may_or_may_not_have_landed_until_close():
    m = model(False)
    f = m.new_file(7)
    m.write(A, f, 0, b"xyz", sync=False, block=BLOCK)
    # before A's close a native read may see the old (absent) or the new bytes
    assert m.check_read(NATIVE, f, 0, 3, b"", attr_window=0) is None
    assert m.check_read(NATIVE, f, 0, 3, b"xyz", attr_window=0) is None
    m.flushed(A, f)
    # after it the bytes must be at the daemons
    assert m.check_extent(f, b"", 0) is not None
    assert m.check_extent(f, b"xyz", 3) is None
    assert m.resync(f, b"xyz", 3) is None and f.sizes[-1] == 3


def test_reopen_after_a_change_drops_stale_blocks():
    m = model(False)
    f = m.new_file(7)
    m.write(NATIVE, f, 0, b"1111", sync=False, block=BLOCK)
    m.reopened(A, f, (4, 100), 0)
    m.write(NATIVE, f, 0, b"2222", sync=False, block=BLOCK)
    assert m.check_read(A, f, 0, 4, b"1111", attr_window=0) is None  # still held open
    m.reopened(A, f, (4, 200), 0)  # the stamp changed: the reopen must see the change
    assert m.check_read(A, f, 0, 4, b"1111", attr_window=0) is not None
    # ...unless it did not change (mtime granularity): then nothing is promised
    g = m.new_file(8)
    m.write(NATIVE, g, 0, b"1111", sync=False, block=BLOCK)
    m.reopened(A, g, (4, 100), 0)
    m.write(NATIVE, g, 0, b"2222", sync=False, block=BLOCK)
    m.reopened(A, g, (4, 100), 0)
    assert m.check_read(A, g, 0, 4, b"1111", attr_window=0) is None


def test_a_truncate_makes_bytes_absent():
    m = model(False)
    f = m.new_file(7)
    m.write(NATIVE, f, 0, b"abcdef", sync=False, block=BLOCK)
    m.truncate(NATIVE, f, 2, BLOCK)
    assert m.check_read(NATIVE, f, 0, 6, b"ab", attr_window=0) is None
    assert m.check_read(NATIVE, f, 0, 6, b"abcdef", attr_window=0) is not None
    assert np.all(f.content()[2:6] == 0)


def test_steps_become_a_valid_trace_with_what_it_cannot_express():
    steps = [
        {"client": "n", "op": "open", "args": {"name": "a", "flags": "rw,creat"}, "result": "ok"},
        {"client": "A", "op": "pwrite", "args": {"name": "a", "offset": 5, "length": 3,
                                                 "sync": True}, "result": "ok"},
        {"client": "A", "op": "rename", "args": {"src": "a", "dst": "b"}, "result": "ok"},
        {"client": "n", "op": "pread", "args": {"name": "a", "offset": 0, "length": 9},
         "result": "9 bytes  <-- VIOLATION"},
        {"client": "n", "op": "open", "args": {"name": "c", "flags": "r"}, "result": "ENOENT"},
    ]
    trace, lost = to_trace(steps, ["n", "A"], seed=1)
    trace.validate()
    ops = [(r.rank, r.op.label) for r in trace.records if r.op.label != "barrier"]
    assert ops == [(0, "open"), (1, "write"), (0, "read")]
    assert len(lost) == 2 and "rename" in lost[0] and "ENOENT" in lost[1]
