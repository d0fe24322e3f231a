"""The mount's handlers called directly, over an in-memory client (no kernel, no daemons).

S3QL tests its ``Operations`` this way before the few real-mount tests: here setattr
(truncate, chmod, utimens), the ``security.capability`` cache, ``keep_cache`` on reopen and
the errno mapping of ``guard`` are checked call by call.
"""

from __future__ import annotations

import errno
import os
import time
from types import SimpleNamespace

import pyfuse3
import pytest
import trio
from fake_client import ROOT_INO, FakeClient

from pvfs.fuse.operations import Operations
from pvfs.fuse.options import MountOptions
from pvfs.fuse.xattrs import CAPS_XATTR

pytestmark = pytest.mark.trio


def ctx(uid: int = 0, gid: int = 0) -> SimpleNamespace:
    """A request context (pyfuse3's cannot be built from Python): this process asks."""
    return SimpleNamespace(uid=uid, gid=gid, pid=os.getpid(), umask=0o022)


def fields(**kw: bool) -> SimpleNamespace:
    names = ("update_atime", "update_mtime", "update_ctime", "update_mode", "update_uid",
             "update_gid", "update_size")
    return SimpleNamespace(**{n: kw.get(n.removeprefix("update_"), False) for n in names})


def attr(**kw: int) -> pyfuse3.EntryAttributes:
    a = pyfuse3.EntryAttributes()
    for k, v in kw.items():
        setattr(a, k, v)
    return a


def mount(**opts) -> tuple[Operations, FakeClient]:
    client = FakeClient()
    opts.setdefault("leases", False)  # FakeClient is a manager that grants none
    return Operations(client, MountOptions(**opts)), client


async def new_file(ops: Operations, name: bytes = b"f", data: bytes = b"") -> tuple[int, int]:
    info, entry = await ops.create(ROOT_INO, name, 0o644, os.O_RDWR, ctx())
    if data:
        assert await ops.write(info.fh, 0, data) == len(data)
    return entry.st_ino, info.fh


# ---------------------------------------------------------------------- setattr
async def test_truncate_through_setattr_cuts_servers_and_cache() -> None:
    ops, client = mount()
    ino, fh = await new_file(ops, data=b"x" * 10000)
    await ops.flush(fh)
    assert bytes(client.nodes[ino].data) == b"x" * 10000
    e = await ops.setattr(ino, attr(st_size=100), fields(size=True), None, ctx())
    assert e.st_size == 100
    assert client.setattr_calls[-1] == {"size": 100, "handle": False}
    assert client.calls["access"] == 1  # a path truncate checks write permission first
    assert await ops.read(fh, 0, 10000) == b"x" * 100
    # ftruncate through a writable handle: the open already checked access
    await ops.setattr(ino, attr(st_size=5), fields(size=True), fh, ctx())
    assert client.setattr_calls[-1] == {"size": 5, "handle": True}
    assert client.calls["access"] == 1
    assert await ops.read(fh, 0, 100) == b"xxxxx"


async def test_truncate_refused_leaves_cache_and_servers() -> None:
    ops, client = mount()
    ino, fh = await new_file(ops, data=b"y" * 5000)
    await ops.flush(fh)
    client.fail_next("setattr", PermissionError(errno.EPERM, "no"))
    with pytest.raises(pyfuse3.FUSEError) as info:
        await ops.setattr(ino, attr(st_size=0), fields(size=True), fh, ctx())
    assert info.value.errno == errno.EPERM
    assert await ops.read(fh, 0, 5000) == b"y" * 5000


async def test_chmod_sends_permission_bits_only() -> None:
    ops, client = mount()
    ino, _ = await new_file(ops)
    e = await ops.setattr(ino, attr(st_mode=0o100640 | 0o4000), fields(mode=True), None, ctx())
    assert client.setattr_calls[-1] == {"mode": 0o4640}
    assert e.st_mode == 0o104640


async def test_utimens_now_and_explicit() -> None:
    ops, client = mount()
    ino, _ = await new_file(ops)
    now = time.time_ns()
    await ops.setattr(ino, attr(st_atime_ns=now, st_mtime_ns=now),
                      fields(atime=True, mtime=True), None, ctx())
    assert client.setattr_calls[-1] == {"now": True}  # utimensat(NULL): the "now" rule
    await ops.setattr(ino, attr(st_mtime_ns=123), fields(mtime=True), None, ctx())
    assert client.setattr_calls[-1] == {"mtime_ns": 123}


# ---------------------------------------------------------------------- capability cache
async def test_capability_is_cached_for_attr_timeout() -> None:
    ops, client = mount(attr_timeout=60.0)
    ino, _ = await new_file(ops)
    for _ in range(3):
        with pytest.raises(pyfuse3.FUSEError) as info:
            await ops.getxattr(ino, CAPS_XATTR.encode(), ctx())
        assert info.value.errno == errno.ENODATA
    assert client.calls["getxattr"] == 1
    assert ops.counters["capability_hits"] == 2
    # this node's own setxattr drops the cached answer
    await ops.setxattr(ino, CAPS_XATTR.encode(), b"\x01cap", ctx())
    assert await ops.getxattr(ino, CAPS_XATTR.encode(), ctx()) == b"\x01cap"
    assert await ops.getxattr(ino, CAPS_XATTR.encode(), ctx()) == b"\x01cap"
    assert client.calls["getxattr"] == 2
    await ops.removexattr(ino, CAPS_XATTR.encode(), ctx())
    with pytest.raises(pyfuse3.FUSEError):
        await ops.getxattr(ino, CAPS_XATTR.encode(), ctx())
    assert client.calls["getxattr"] == 3


async def test_capability_not_cached_without_attr_timeout() -> None:
    ops, client = mount(attr_timeout=0.0)
    ino, _ = await new_file(ops)
    client.nodes[ino].xattrs[CAPS_XATTR] = b"c"
    for _ in range(3):
        assert await ops.getxattr(ino, CAPS_XATTR.encode(), ctx()) == b"c"
    assert client.calls["getxattr"] == 3 and ops.counters["capability_hits"] == 0


async def test_a_manager_that_marks_security_names_saves_the_probes() -> None:
    """``secx`` False in a create/lookup reply: the probes are answered ENODATA locally;
    True: asked (and the value returned)."""
    ops, client = mount(attr_timeout=60.0)
    client.marks_security = True
    ino, _ = await new_file(ops)
    for n in (CAPS_XATTR, "security.selinux"):
        with pytest.raises(pyfuse3.FUSEError) as info:
            await ops.getxattr(ino, n.encode(), ctx())
        assert info.value.errno == errno.ENODATA
    assert client.calls["getxattr"] == 0
    ino2, _ = await new_file(ops, b"labelled")
    client.nodes[ino2].xattrs["security.selinux"] = b"label"
    await ops.lookup(ROOT_INO, b"labelled", ctx())
    assert await ops.getxattr(ino2, b"security.selinux", ctx()) == b"label"
    assert client.calls["getxattr"] == 1


async def test_a_mark_taken_before_this_nodes_own_xattr_change_is_not_learned() -> None:
    from pvfs.fuse.xattrs import ProbedCache

    probed = ProbedCache(60.0, {"capability_hits": 0})
    gen = probed.gen
    probed.changed(7)                   # this node set an xattr while the lookup was out
    probed.learn({"ino": 7, "secx": False}, gen)
    assert not probed._answers
    probed.learn({"ino": 7, "secx": False}, probed.gen)
    assert len(probed._answers) == 2


async def test_a_big_directorys_marks_are_all_kept() -> None:
    """An `ls -l` of 10,000 entries learns 20,000 answers; the newest are never all lost
    (they were: the cache used to be cleared wholesale at 4,096)."""
    from pvfs.fuse import xattrs

    probed = xattrs.ProbedCache(60.0, {"capability_hits": 0})
    for ino in range(1, 10_001):
        probed.learn({"ino": ino, "secx": False}, probed.gen)
    assert len(probed._answers) == 20_000
    for ino in range(1, xattrs._PROBED_MAX):
        probed.learn({"ino": 100_000 + ino, "secx": False}, probed.gen)
    assert xattrs._PROBED_MAX * 7 // 8 <= len(probed._answers) <= xattrs._PROBED_MAX
    assert (100_000 + xattrs._PROBED_MAX - 1, "security.selinux") in probed._answers


# ---------------------------------------------------------------------- keep_cache
async def test_keep_cache_only_when_the_file_is_unchanged() -> None:
    ops, client = mount()
    ino, fh = await new_file(ops, data=b"a" * 4096)
    await ops.release(fh)
    first = await ops.open(ino, os.O_RDONLY, ctx())
    assert first.keep_cache  # our own write: what we cached is what the servers hold
    assert await ops.read(first.fh, 0, 4096) == b"a" * 4096
    await ops.release(first.fh)
    same = await ops.open(ino, os.O_RDONLY, ctx())
    assert same.keep_cache  # (size, mtime) as seen at the last open
    await ops.release(same.fh)
    client.touch_elsewhere(ino, b"b" * 4096)
    changed = await ops.open(ino, os.O_RDONLY, ctx())
    assert not changed.keep_cache
    assert ops.counters["reopen_invalidations"] == 1
    assert await ops.read(changed.fh, 0, 4096) == b"b" * 4096  # not the stale cached block
    await ops.release(changed.fh)


async def test_direct_io_never_keeps_cache() -> None:
    ops, _ = mount(direct_io=True)
    ino, fh = await new_file(ops)
    await ops.release(fh)
    info = await ops.open(ino, os.O_RDONLY, ctx())
    assert info.direct_io and not info.keep_cache


# ---------------------------------------------------------------------- errno mapping
@pytest.mark.parametrize(("exc", "code", "counter"), [
    (FileNotFoundError(errno.ENOENT, "gone"), errno.ENOENT, None),
    (PermissionError(errno.EACCES, "no"), errno.EACCES, None),
    (ConnectionRefusedError(errno.ECONNREFUSED, "down"), errno.EIO, "backend_errors"),
    (OSError(errno.EPROTO, "garbled"), errno.EIO, "backend_errors"),
    (TimeoutError(errno.ETIMEDOUT, "slow"), errno.ETIMEDOUT, "backend_errors"),
    (trio.TooSlowError(), errno.ETIMEDOUT, "backend_errors"),
    (ValueError("bad field"), errno.EINVAL, None),
    (RuntimeError("a bug"), errno.EIO, "internal_errors"),
])
async def test_errors_become_one_errno(exc: BaseException, code: int, counter: str | None) -> None:
    ops, client = mount()
    client.fail_next("getattr", exc)
    with pytest.raises(pyfuse3.FUSEError) as info:
        await ops.getattr(ROOT_INO, ctx())
    assert info.value.errno == code
    for name in ("backend_errors", "internal_errors"):
        assert ops.counters[name] == (1 if name == counter else 0)


async def test_credentials_reach_the_client() -> None:
    ops, client = mount()
    ino, _ = await new_file(ops)
    client.nodes[ino].mode = 0o100644
    with pytest.raises(pyfuse3.FUSEError) as info:
        await ops.setattr(ino, attr(st_size=0), fields(size=True), None, ctx(uid=1234))
    assert info.value.errno == errno.EACCES
    assert ops.cred(ctx(uid=1234, gid=99)).uid == 1234
