"""The C front end's bridge under random use (hypothesis): fake requests of every op queued
from a C thread, drained, answered by any reply function with good or bad arguments,
dropped, the session closed at any point -- the C side never crashes, every request is
answered at most once, and the counters add up."""

from __future__ import annotations

import errno
import gc

import pyfuse3
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

ff = pytest.importorskip("pvfs._fusefront")

OPS = sorted(v for k, v in vars(ff).items() if k.startswith("OP_"))


def _entry(size: int) -> pyfuse3.EntryAttributes:
    e = pyfuse3.EntryAttributes()
    e.st_ino, e.st_mode, e.st_size = 5, 0o100644, size
    return e


def _statvfs() -> pyfuse3.StatvfsData:
    s = pyfuse3.StatvfsData()
    s.f_bsize, s.f_namemax = 4096, 255
    return s


REPLIES = {
    "err": lambda r, a: ff.reply_err(r, a % 200),
    "none": lambda r, a: ff.reply_none(r),
    "entry": lambda r, a: ff.reply_entry(r, _entry(a - 50)),   # negative sizes refused
    "attr": lambda r, a: ff.reply_attr(r, _entry(a)),
    "open": lambda r, a: ff.reply_open(r, pyfuse3.FileInfo(fh=a)),
    "open_fh": lambda r, a: ff.reply_open(r, a),
    "create": lambda r, a: ff.reply_create(r, _entry(a), pyfuse3.FileInfo(fh=a)),
    "data": lambda r, a: ff.reply_data(r, b"x" * a),
    "write": lambda r, a: ff.reply_write(r, a),
    "statfs": lambda r, a: ff.reply_statfs(r, _statvfs()),
    "xattr": lambda r, a: ff.reply_xattr(r, a),
    "readlink": lambda r, a: ff.reply_readlink(r, b"t\0" if a % 2 else b"target"),
    "dir": lambda r, a: ff.reply_dir(r, r.args[2]) if r.op == ff.OP_READDIRPLUS
    else ff.reply_dir(r, object()),
    "bad": lambda r, a: ff.reply_entry(r, object()),
}

actions = st.one_of(
    st.tuples(st.just("inject"), st.sampled_from(OPS), st.integers(0, 5),
              st.binary(max_size=40), st.integers(0, 8192)),
    st.tuples(st.just("drain")),
    st.tuples(st.just("reply"), st.integers(0, 50), st.sampled_from(sorted(REPLIES)),
              st.integers(0, 300)),
    st.tuples(st.just("dirent"), st.integers(0, 50), st.binary(min_size=0, max_size=300)),
    st.tuples(st.just("drop"), st.integers(0, 50)),
    st.tuples(st.just("quiet"), st.integers(0, 2**64 - 1), st.booleans()),
    st.tuples(st.just("close")),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(actions, max_size=40))
def test_bridge_survives_any_sequence(steps):
    s = ff.Session()
    held: list = []
    queued = drained = 0
    closed = False
    for step in steps:
        kind = step[0]
        try:
            if kind == "inject":
                _, op, n, name, size = step
                s._inject(op, n=n, name=name.replace(b"\0", b"-"), data=name, size=size)
                queued += n
            elif kind == "drain":
                reqs, forgets = s.drain()
                assert forgets == []
                drained += len(reqs)
                held += reqs
            elif kind == "reply" and held:
                _, i, how, arg = step
                req = held[i % len(held)]
                was = req.answered
                try:
                    REPLIES[how](req, arg)
                except (ValueError, TypeError, AttributeError, OverflowError):
                    assert req.answered == was   # a refused reply sends nothing
                else:
                    assert not was and req.answered
            elif kind == "dirent" and held:
                _, i, name = step
                req = held[i % len(held)]
                if req.op == ff.OP_READDIRPLUS:
                    token = req.args[2]
                    try:
                        ok = ff.readdir_reply(token, name, _entry(1), 1)
                    except ValueError:
                        assert not name or b"\0" in name
                    else:
                        assert ok in (True, False)
            elif kind == "drop" and held:
                held.pop(step[1] % len(held))
            elif kind == "quiet":
                _, fh, remove = step
                if fh == 2**64 - 1:
                    with pytest.raises(ValueError):
                        s.quiet(fh)
                else:
                    s.quiet(fh)
                    assert s.is_quiet(fh, remove)
                    assert s.is_quiet(fh) == (not remove)
            elif kind == "close":
                s.close()
                closed = True
        except ValueError:
            assert closed or kind == "inject" and step[1] not in OPS
    stats = s.stats()
    assert stats["queued"] == queued
    assert stats["unanswered"] == 0 and stats["reply_failures"] == 0   # fake requests
    assert stats["inflight"] <= drained
    del held
    gc.collect()
    if not closed:
        s.close()
    assert s.stats()["inflight"] == 0


def test_reply_err_code_range():
    s = ff.Session()
    s._inject(ff.OP_STATFS, n=2)
    a, b = s.drain()[0]
    with pytest.raises(ValueError):
        ff.reply_err(a, 5000)
    ff.reply_err(a, errno.ENOSPC)
    ff.reply_err(b, 0)
    assert (a.reply, b.reply) == (("err", errno.ENOSPC), ("err", 0))
