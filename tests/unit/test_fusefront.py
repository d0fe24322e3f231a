"""The C front end's bridge (pvfs._fusefront) without a kernel: fake requests queued from a C
thread as libfuse's workers queue them, drained through the eventfd, answered by reply_*;
the argument checks of the replies; the Python dispatch of cfront.py over fake requests."""

from __future__ import annotations

import errno
import gc
import os
import select

import pyfuse3
import pytest
import trio

ff = pytest.importorskip("pvfs._fusefront")

from pvfs.fuse.cfront import CFront, SetattrFields


def readable(s) -> bool:
    return bool(select.select([s.fileno()], [], [], 0)[0])


def entry(ino: int = 9, **kw) -> pyfuse3.EntryAttributes:
    e = pyfuse3.EntryAttributes()
    e.st_ino, e.st_mode, e.st_nlink, e.st_size = ino, 0o100644, 1, 5
    e.entry_timeout, e.attr_timeout = 2.0, 3.0
    e.st_mtime_ns = -1  # before 1970: floored, not truncated
    for k, v in kw.items():
        setattr(e, k, v)
    return e


def test_queue_wakes_once_per_burst_and_drains_in_order():
    s = ff.Session()
    assert not readable(s)
    s._inject(ff.OP_LOOKUP, n=5, ino=7, name=b"abc")
    assert readable(s)
    reqs, forgets = s.drain()
    assert not readable(s) and forgets == []
    assert [r.op for r in reqs] == [ff.OP_LOOKUP] * 5
    assert [r.args for r in reqs] == [(7, b"abc")] * 5
    assert (reqs[0].uid, reqs[0].gid, reqs[0].pid, reqs[0].umask) == (1000, 1000, 4242, 0o22)
    assert s.stats()["wakeups"] == 1 and s.stats()["inflight"] == 5
    for r in reqs:
        ff.reply_err(r, 0)
    assert s.stats()["inflight"] == 0
    assert s.drain() == ([], [])   # nothing left; a spurious wakeup drains nothing


def test_arguments_of_each_op():
    s = ff.Session()
    s._inject(ff.OP_WRITE, ino=3, off=4096, data=b"\0bytes\0")
    s._inject(ff.OP_READ, ino=3, off=10, size=4096)
    s._inject(ff.OP_RENAME, ino=5, name=b"n")
    s._inject(ff.OP_SETATTR, ino=6)
    s._inject(ff.OP_READDIRPLUS, ino=4, size=4096)
    w, r, rn, sa, rd = s.drain()[0]
    assert w.args == (3, 4096, b"\0bytes\0")
    assert r.args == (3, 10, 4096)
    assert rn.args == (5, b"n", 6, b"n", 0)
    assert sa.args[:2] == (6, 6) and len(sa.args) == 9
    assert rd.args[:2] == (4, 0) and isinstance(rd.args[2], ff.DirBuf)
    for q in (w, r, rn, sa, rd):
        ff.reply_err(q, errno.EIO)


def test_a_writes_bytes_reach_python_without_a_copy_and_outlive_the_request():
    # The worker's block itself (a WriteData), seen through a read-only memoryview: the
    # bytes stay valid after the request is answered and gone, while a view holds them.
    s = ff.Session()
    s._inject(ff.OP_WRITE, ino=3, off=0, data=b"queued bytes")
    s._inject(ff.OP_SETXATTR, ino=3, name=b"user.a", data=b"value")
    (w, x), _ = s.drain()
    data = w.args[2]
    assert isinstance(data, memoryview) and data.readonly and data == b"queued bytes"
    assert type(data.obj).__name__ == "WriteData"
    assert x.args[2] == b"value" and isinstance(x.args[2], bytes)  # other ops: bytes
    ff.reply_write(w, len(data))
    ff.reply_err(x, 0)
    del w, x
    gc.collect()
    assert bytes(data[7:]) == b"bytes"  # (freed with the last view: ASan would see a slip)
    with pytest.raises(TypeError):
        data[0] = 0


def test_reply_conversions():
    s = ff.Session()
    s._inject(ff.OP_LOOKUP, n=6, name=b"x")
    a, b, c, d, e_, f = s.drain()[0]
    ff.reply_entry(a, entry())
    assert a.answered and a.reply == ("entry", (9, 0, 2.0, 3.0, 0o100644, 1, 0, 0, 0, 5,
                                                4096, 0, 0, -1, 0))
    ff.reply_attr(b, entry(st_size=7))
    assert b.reply[1][9] == 7
    ff.reply_open(c, pyfuse3.FileInfo(fh=11, direct_io=True, keep_cache=False))
    assert c.reply == ("open", 11, 1, 0, 0)
    ff.reply_create(d, entry(), pyfuse3.FileInfo(fh=12))
    assert d.reply[0] == "create" and d.reply[2] == 12
    ff.reply_data(e_, memoryview(b"payload"))
    assert e_.reply == ("data", b"payload")
    st = pyfuse3.StatvfsData()
    st.f_bsize, st.f_blocks, st.f_namemax = 4096, 100, 255
    ff.reply_statfs(f, st)
    assert f.reply[:2] == ("statfs", 4096) and f.reply[-1] == 255


def test_a_request_is_answered_once_and_bad_arguments_leave_it_open():
    s = ff.Session()
    s._inject(ff.OP_GETATTR, n=2)
    a, b = s.drain()[0]
    with pytest.raises(AttributeError):
        ff.reply_entry(a, object())          # not entry-like: nothing sent
    assert not a.answered
    with pytest.raises(ValueError):
        ff.reply_entry(a, entry(st_size=-1))
    with pytest.raises(ValueError):
        ff.reply_err(a, -5)
    with pytest.raises(ValueError):
        ff.reply_readlink(a, b"a\0b")
    ff.reply_err(a, errno.ENOENT)
    with pytest.raises(ValueError, match="answered already"):
        ff.reply_err(a, 0)
    with pytest.raises(TypeError):
        ff.reply_err(object(), 0)
    ff.reply_none(b)
    assert b.reply == ("none",)


def test_readdir_token_fills_until_full():
    s = ff.Session()
    s._inject(ff.OP_READDIRPLUS, size=512)
    (req,) = s.drain()[0]
    token = req.args[2]
    added = 0
    while ff.readdir_reply(token, f"name{added}".encode(), entry(ino=100 + added), added + 1):
        added += 1
    assert 0 < added < 10 and token.entries == added and token.used <= 512
    with pytest.raises(ValueError):
        ff.readdir_reply(token, b"a\0b", entry(), 1)
    ff.reply_dir(req, token)
    assert req.reply[:2] == ("dir", added) and len(req.reply[2]) == token.used


def test_unanswered_fake_requests_are_dropped_quietly_and_close_is_idempotent():
    s = ff.Session()
    s._inject(ff.OP_STATFS, n=3)
    reqs, _ = s.drain()
    del reqs
    gc.collect()
    assert s.stats()["inflight"] == 0 and s.stats()["unanswered"] == 0
    s._inject(ff.OP_STATFS)
    s.close()
    s.close()
    with pytest.raises(ValueError):
        s.drain()
    assert s.ended


def test_session_argument_checks():
    with pytest.raises(ValueError):
        ff.Session(max_threads=0)
    with pytest.raises(ValueError):
        ff.Session(max_write=100)
    with pytest.raises(TypeError):
        ff.Session(b"/mnt")
    with pytest.raises(ValueError):
        ff.Session()._inject(0)
    with pytest.raises(ValueError, match="without a session"):
        ff.Session().mount("/nonexistent")


def test_setattr_fields_from_bits():
    f = SetattrFields(ff.SET_MODE | ff.SET_MTIME, ff)
    assert f.update_mode and f.update_mtime
    assert not (f.update_uid or f.update_gid or f.update_size or f.update_atime)


class _Ops:
    """Handlers with Operations' signatures (FUSEError for failures)."""

    enable_writeback_cache = False
    supports_dot_lookup = True
    enable_acl = False

    def __init__(self) -> None:
        self.forgotten: list = []

    async def lookup(self, parent, name, ctx):
        if name == b"missing":
            raise pyfuse3.FUSEError(errno.ENOENT)
        assert ctx.uid == 1000
        return entry(ino=parent + 1)

    async def write(self, fh, off, buf):
        return len(buf)

    async def getxattr(self, ino, name, ctx):
        if name == b"boom":
            raise RuntimeError("a bug")
        return b"value"

    async def readdir(self, fh, off, token):
        for i in range(off, 3):
            if not ff.readdir_reply(token, f"e{i}".encode(), entry(ino=50 + i), i + 1):
                return

    def forget(self, pairs):
        self.forgotten += pairs


def test_cfront_dispatch_over_fake_requests():
    front = CFront()
    front.ops = _Ops()
    front.session = ff.Session()
    front._handlers = front._table()
    s = front.session
    s._inject(ff.OP_LOOKUP, ino=1, name=b"here")
    s._inject(ff.OP_LOOKUP, ino=1, name=b"missing")
    s._inject(ff.OP_WRITE, ino=5, data=b"12345")
    s._inject(ff.OP_GETXATTR, ino=5, name=b"user.x", size=0)
    s._inject(ff.OP_GETXATTR, ino=5, name=b"user.x", size=2)
    s._inject(ff.OP_GETXATTR, ino=5, name=b"boom", size=100)
    s._inject(ff.OP_READDIRPLUS, ino=5, size=4096)
    reqs, _ = s.drain()

    async def run():
        async with trio.open_nursery() as n:
            for r in reqs:
                n.start_soon(front._serve, r)

    trio.run(run)
    got = [r.reply for r in reqs]
    assert got[0][0] == "entry" and got[0][1][0] == 2
    assert got[1] == ("err", errno.ENOENT)
    assert got[2] == ("write", 5)
    assert got[3] == ("xattr", 5)
    assert got[4] == ("err", errno.ERANGE)
    assert got[5] == ("err", errno.EIO)    # an unexpected exception: EIO, logged
    assert got[6][:2] == ("dir", 3)
    assert all(r.answered for r in reqs)


def test_eventfd_is_nonblocking_and_cloexec():
    s = ff.Session()
    fd = s.fileno()
    assert os.get_blocking(fd) is False and os.get_inheritable(fd) is False


def test_quiet_handle_set_survives_growth_and_deletion():
    s = ff.Session()
    keys = list(range(1, 3000, 3)) + [0, 2**63]
    for k in keys:
        s.quiet(k)
    assert s.stats()["quiet_handles"] == len(keys)
    for k in keys[::2]:
        assert s.is_quiet(k, True)
    for i, k in enumerate(keys):
        assert s.is_quiet(k) == (i % 2 == 1), k
    assert not s.is_quiet(2)
    with pytest.raises(ValueError):
        s.quiet(2**64 - 1)
    assert s.stats()["quiet_handles"] == len(keys) // 2


class _OpenOps(_Ops):
    class opts:  # the attribute Operations has
        testing_lose_close_writes = False

    async def open(self, ino, flags, ctx):
        return pyfuse3.FileInfo(fh=ino * 10)


def test_read_only_handles_are_marked_quiet_before_the_reply():
    front = CFront()
    front.ops = _OpenOps()
    front.session = ff.Session()
    front._handlers = front._table()
    s = front.session
    s._inject(ff.OP_OPEN, ino=3)   # flags 0: O_RDONLY
    reqs, _ = s.drain()

    async def run():
        await front._serve(reqs[0])

    trio.run(run)
    assert reqs[0].reply[:2] == ("open", 30) and s.is_quiet(30)


class _Wrote:
    """An ``OP_WROTE`` record as ``CFront._apply_wrote`` reads it."""

    def __init__(self, fh: int, off: int, data: bytes) -> None:
        self.args = (fh, off, data)


class _WroteOps:
    def __init__(self, fail_at: int | None = None) -> None:
        self.writes: list[tuple[int, int, bytes]] = []
        self.parked: list[tuple[int, int]] = []
        self.fail_at = fail_at
        self.files = self
        self.counters = {"fuse_writes": 0, "writes_joined": 0}

    async def write(self, fh, off, buf):
        self.counters["fuse_writes"] += 1
        self.writes.append((fh, off, bytes(buf)))
        if off == self.fail_at:
            raise pyfuse3.FUSEError(errno.ENOSPC)
        return len(buf)

    def park_write_error(self, fh, exc):
        self.parked.append((fh, exc.errno))


class _AppliedSession:
    def __init__(self) -> None:
        self.applied: list[int] = []

    def behind_applied(self, n: int) -> None:
        self.applied.append(n)


def _apply(records: list, ops: _WroteOps) -> tuple[CFront, _AppliedSession]:
    front = CFront()
    front.ops = ops
    front.session = _AppliedSession()
    front._wrote.extend(records)

    async def run():
        front._applying = True
        await front._apply_wrote()

    trio.run(run)
    return front, front.session


def test_records_that_continue_one_another_are_applied_as_one_write():
    # The kernel cuts a write(2) that starts inside a page it must not mark up to date in
    # two requests (IOR hard: every 47,008-byte transfer); both arrive as OP_WROTE records
    # and were two trips through the write handler. Joined: one, the same bytes.
    from pvfs.fuse import writerecords

    a, b, c = b"a" * 100, b"b" * 50, b"c" * 10
    big = b"x" * (writerecords.JOIN_BYTES - 60)
    records = [_Wrote(1, 0, a), _Wrote(1, 100, b),      # joined
               _Wrote(2, 150, c),                       # another handle
               _Wrote(1, 150, c), _Wrote(1, 200, c),    # a gap: not joined
               _Wrote(1, 210, big), _Wrote(1, 210 + len(big), b"y" * 61)]  # past JOIN_BYTES
    ops = _WroteOps()
    front, session = _apply(records, ops)
    assert ops.writes == [(1, 0, a + b), (2, 150, c), (1, 150, c), (1, 200, c + big),
                          (1, 210 + len(big), b"y" * 61)]
    assert session.applied == [len(r.args[2]) for r in records]  # each record's bytes, in order
    assert front._wrote_done == len(records) and not front._wrote and not front._applying
    assert ops.counters == {"fuse_writes": len(records), "writes_joined": 2}


def test_a_joined_write_that_fails_parks_once_and_counts_every_record_applied():
    ops = _WroteOps(fail_at=0)
    records = [_Wrote(4, 0, b"1" * 10), _Wrote(4, 10, b"2" * 10), _Wrote(4, 40, b"3")]
    front, session = _apply(records, ops)
    assert ops.writes == [(4, 0, b"1" * 10 + b"2" * 10), (4, 40, b"3")]
    assert ops.parked == [(4, errno.ENOSPC)]
    assert session.applied == [10, 10, 1] and front._wrote_done == 3
