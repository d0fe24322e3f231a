"""The hypothesis state machine: every step is one call of one client, checked at once.

Steps run one after the other (a global order the model can reason about), but handles stay
open across steps and clients, so many clients hold the same file open at the same time, the
way the nodes of a parallel program do. Names come from a small set so that creates, links,
renames and unlinks collide often; offsets and lengths cross block and stripe boundaries.
"""

from __future__ import annotations

import errno
import os
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule

from pvfs.check.clients import SYNC_XATTR, Client, Handle, errno_name
from pvfs.check.model import MAX_FILE, FileModel, Mismatch, Model
from pvfs.check.world import World

NAMES = ("a", "b", "c")
# steps name "a" most often, so that clients meet on one file; "b" and "c" make the name
# space operations collide
NAME = st.sampled_from(["a", "b", "a", "c", "a"])
MAX_HANDLES = 6
PAUSE_ONE_IN = 4  # a pause step (only with leasing mounts) waits in one draw of this many
EDGES = [0, 1, 4095, 4096, 4097, 16383, 16384, 65535 - 4096, 32768]
OFFSETS = st.one_of(st.integers(0, 48 << 10), st.sampled_from(EDGES))
IO_KINDS = st.sampled_from(["pwrite", "pread", "fsync", "pwrite", "pread"])
SIZES = st.one_of(st.integers(0, 20 << 10), st.sampled_from([1, 4096, 8192, 65536]))
TRUNC_SIZES = st.one_of(st.integers(0, 48 << 10), st.sampled_from([0, 4096, 65536]))
STRIPES = [(0, 1, 4096), (1, 2, 4096), (0, 4, 4096), (2, 3, 16384), (0, -1, 65536)]

# (label, flags); O_SYNC opens make every write a sync write. Creating opens come first
# (hypothesis shrinks towards the front) and twice (most opens should find a file).
OPEN_FLAGS = [
    ("rw,creat", os.O_RDWR | os.O_CREAT),
    ("r", os.O_RDONLY),
    ("w", os.O_WRONLY),
    ("rw", os.O_RDWR),
    ("rw,creat", os.O_RDWR | os.O_CREAT),
    ("w,creat,trunc", os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
    ("rw,creat,excl", os.O_RDWR | os.O_CREAT | os.O_EXCL),
    ("rw,sync", os.O_RDWR | os.O_SYNC),
    ("rw,creat,sync", os.O_RDWR | os.O_CREAT | os.O_SYNC),
    ("rw,creat", os.O_RDWR | os.O_CREAT),
    ("rw,creat,sync", os.O_RDWR | os.O_CREAT | os.O_SYNC),
]
GONE = (errno.ENOENT, errno.ESTALE)
SETUP_OPENS = [None, ("rw,creat", os.O_RDWR | os.O_CREAT), ("r", os.O_RDONLY),
               ("rw,creat,sync", os.O_RDWR | os.O_CREAT | os.O_SYNC)]


class Violation(AssertionError):
    """The file system broke a promise of the mode; carries what the report needs."""

    def __init__(self, message: str, *, client: str = "", mismatch: Mismatch | None = None,
                 steps: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.client = client
        self.mismatch = mismatch
        self.steps = steps or []


@dataclass
class Slot:
    """An open handle of one client."""

    client: int
    fid: int
    name: str
    flags: int
    h: Handle
    label: str = ""

    @property
    def readable(self) -> bool:
        return self.flags & os.O_ACCMODE in (os.O_RDONLY, os.O_RDWR)

    @property
    def writable(self) -> bool:
        return self.flags & os.O_ACCMODE in (os.O_WRONLY, os.O_RDWR)


@dataclass
class Step:
    client: str
    op: str
    args: dict[str, Any] = field(default_factory=dict)
    result: str = "ok"


def build_machine(world: World) -> type[RuleBasedStateMachine]:
    """A state machine class bound to ``world`` (the clients, the mode, the options).

    Its rules are the steps of :class:`_Machine` of the same names, each with the
    strategies that draw its arguments (a client: one of ``world``'s)."""
    nclients = len(world.clients)
    CLIENT = st.integers(0, nclients - 1)
    SLOT = st.integers(0, MAX_HANDLES - 1)

    class Check(_Machine):
        setup = initialize(c=CLIENT, size=st.one_of(st.integers(1, 32 << 10), st.just(0)),
                           opens=st.lists(st.sampled_from(SETUP_OPENS), min_size=nclients,
                                          max_size=nclients))(_Machine.setup)
        open = rule(c=CLIENT, name=NAME, how=st.sampled_from(OPEN_FLAGS))(_Machine.open)
        close = rule(k=SLOT)(_Machine.close)
        io = rule(k=SLOT, kind=IO_KINDS, off=OFFSETS, n=SIZES)(_Machine.io)
        io_more = rule(k=SLOT, kind=IO_KINDS, off=OFFSETS, n=SIZES)(_Machine.io_more)
        read_back = rule(k=SLOT)(_Machine.read_back)
        read_back_more = rule(k=SLOT)(_Machine.read_back_more)
        meta = rule(c=CLIENT, kind=st.sampled_from(["truncate", "stat", "unlink", "rename",
                                                    "link", "setxattr", "getxattr", "sync",
                                                    "setstripe"]),
                    src=NAME, dst=NAME, size=TRUNC_SIZES,
                    which=st.integers(0, len(STRIPES) - 1))(_Machine.meta)
        fault = precondition(lambda self: world.faults is not None)(
            rule(which=st.integers(0, 1 << 16))(_Machine.fault))
        if world.pauses:  # (only then a rule: the draws of every other run stay as they were)
            pause = rule(p=st.integers(0, PAUSE_ONE_IN - 1))(_Machine.pause)

    Check.world = world
    return Check


class _Machine(RuleBasedStateMachine):
    """The checker's steps and their checks, against ``world``. It has no rules of its
    own: :func:`build_machine` makes a subclass whose rules are these methods."""

    world: World  # set by build_machine

    def setup(self, c: int, size: int, opens: list[tuple[str, int] | None]) -> None:
        """A fresh directory; ``a`` exists with ``size`` bytes, written by client ``c``
        and closed; then client i opens it as ``opens[i]`` says (None: not at all) and
        reads it whole, so that clients share the file, and hold it in their caches, from
        the first step on."""
        self.clients: list[Client] = self.world.clients
        self.model = Model([c.caches for c in self.clients], self.world.mode == "sync")
        self.slots: list[Slot] = []
        self.steps: list[Step] = []
        self.writes = 0
        self.last_write: tuple[int, int, int, int] | None = None
        self.root = self.world.new_example()
        for client in self.clients:
            client.set_root(self.root)
        if size:
            self.open(c, "a", ("w,creat", os.O_WRONLY | os.O_CREAT))
            self.pwrite(0, 0, size)
            self.close(0)
        for i, how in enumerate(opens):
            if how is not None:
                self.open(i, "a", how)
        for k, slot in enumerate(list(self.slots)):  # as a program reads its input
            if slot.readable:
                self.pread(k, 0, size)

    def teardown(self) -> None:
        if not hasattr(self, "root"):
            return
        for s in self.slots:
            try:
                s.h.close()
            except OSError:
                pass
        self.world.end_example(self.root, list(NAMES))

    # ------------------------------------------------------------------ helpers
    def log(self, c: int, op: str, result: str = "ok", **args: Any) -> Step:
        step = Step(self.clients[c].label if c >= 0 else "checker", op, args, result)
        self.steps.append(step)
        self.world.ops[op] = self.world.ops.get(op, 0) + 1
        return step

    def fail(self, c: int, message: str, mismatch: Mismatch | None = None) -> None:
        self.steps[-1].result += "  <-- VIOLATION"
        if self.world.first_failure is None:
            self.world.first_failure = (self.world.examples, time.monotonic())
        raise Violation(message, client=self.clients[c].label if c >= 0 else "checker",
                        mismatch=mismatch,
                        steps=[s.__dict__ for s in self.steps])

    def call(self, c: int, fn, *args) -> tuple[Any, int | None]:
        """``(result, None)`` or ``(None, errno)`` of a client call. Anything but an
        ``OSError`` breaks the API's promise (errors are OSErrors with an errno)."""
        try:
            return fn(*args), None
        except OSError as exc:
            return None, exc.errno
        except Exception as exc:
            self.log(c, getattr(fn, "__name__", "call"), type(exc).__name__)
            self.fail(c, f"{getattr(fn, '__name__', 'a call')} raised "
                         f"{type(exc).__name__}: {exc} (errors must be OSErrors)")
            raise  # not reached: fail() raises

    def expect_errno(self, c: int, got: int | None, allowed: set[int | None],
                     what: str) -> None:
        if got not in allowed:
            want = " or ".join(sorted(errno_name(a) for a in allowed))
            self.fail(c, f"{what}: got {errno_name(got)}, expected {want}")

    def candidates(self, c: int, name: str) -> list[FileModel | None]:
        return self.model.recent_bindings(name, c, self.clients[c].name_window)

    def ambiguous(self, c: int, name: str) -> bool:
        """The client's name cache may still hold another binding of ``name``."""
        return len(self.candidates(c, name)) > 1

    def pick(self, k: int) -> Slot | None:
        return self.slots[k % len(self.slots)] if self.slots else None

    def payload(self, n: int) -> bytes:
        """Bytes no other write of the run has at the same offsets (never zero)."""
        self.writes += 1
        return ((np.arange(n, dtype=np.int64) * 7 + self.writes * 131) % 251 + 1) \
            .astype(np.uint8).tobytes()

    def resync(self, c: int, f: FileModel) -> None:
        if not self.model.quiet(f):
            return  # another node's write-behind may land while we read: wait for it
        try:
            got = self.world.read_back(f)
        except Exception as exc:  # noqa: BLE001 - the file system's answer is checked
            self.log(c, "read back", type(exc).__name__, file=f.id)
            self.fail(c, f"reading the file back through a native connection raised "
                         f"{type(exc).__name__}: {exc}")
        if got is None:
            return
        content, size = got
        bad = self.model.resync(f, content, size)
        if bad is not None:
            self.fail(c, bad.what, bad)

    def after_flush(self, c: int, f: FileModel, err: int | None) -> None:
        if err is None:
            self.model.flushed(c, f)
            if self.clients[c].caches:
                self.resync(c, f)
        elif self.world.fault_epoch:
            self.model.flush_failed(c, f)
            self.resync(c, f)
        else:
            self.fail(c, f"write-back failed with {errno_name(err)}")

    def handles_of(self, c: int, f: FileModel) -> int:
        return sum(1 for s in self.slots if s.client == c and s.fid == f.id)

    # ------------------------------------------------------------------ rules
    def open(self, c: int, name: str, how: tuple[str, int]) -> None:
        if len(self.slots) >= MAX_HANDLES:
            return
        label, flags = how
        client = self.clients[c]
        current = self.model.binding(name)
        cands = self.candidates(c, name)
        before = self.world.stamp(name) if client.caches else None
        handle, err = self.call(c, client.open, name, flags)
        after = self.world.stamp(name) if client.caches else None
        step = self.log(c, "open", errno_name(err), name=name, flags=label)
        creat, excl = bool(flags & os.O_CREAT), bool(flags & os.O_EXCL)
        ok_files: set[int] = set()
        ok_new = False
        ok_err: set[int] = set()
        for b in cands:
            stale = b is not current
            if b is None:
                if not creat:
                    ok_err.add(errno.ENOENT)
                elif not stale:
                    ok_new = True
            elif excl:
                ok_err.add(errno.EEXIST)
            else:
                # a stale name may still reach its old file, even an unlinked one that
                # the node's kernel still holds (FUSE keeps inodes until forget)
                if b.alive() or stale:
                    ok_files.add(b.id)
                if stale:
                    ok_err.update(GONE)
        if creat and current is None and not excl and len(cands) > 1:
            ok_new = True
        if err is not None:
            if err not in ok_err:
                want = sorted(errno_name(e) for e in ok_err) + (["ok"] if ok_files or ok_new
                                                                else [])
                self.fail(c, f"open({name!r}, {label}) failed with {errno_name(err)}, "
                             f"expected {' or '.join(want)}")
            return
        ino = handle.ino()
        f = self.model.by_ino.get(ino)
        if f is not None and f.id not in ok_files and not f.alive():
            f = None  # an inode number used again by a new file
        if f is None:
            if not ok_new:
                handle.close()
                self.fail(c, f"open({name!r}, {label}) reached an unknown file "
                             f"(inode {ino})")
            f = self.model.new_file(ino)
            self.model.rebind(name, f, c)
        elif f.id not in ok_files:
            handle.close()
            self.fail(c, f"open({name!r}, {label}) reached inode {ino}, which the name "
                         f"does not name")
        step.args["file"] = f.id
        others = self.handles_of(c, f)
        if flags & os.O_TRUNC and flags & os.O_ACCMODE:
            self.model.truncate(c, f, 0, client.block_size)
        stamp = before if before == after else None
        self.model.reopened(c, f, stamp, others)
        f.handles += 1
        self.slots.append(Slot(c, f.id, name, flags, handle, label))

    def close(self, k: int) -> None:
        s = self.pick(k)
        if s is None:
            return
        self.slots.remove(s)
        f = self.model.files[s.fid]
        f.handles -= 1
        _, err = self.call(s.client, s.h.close)
        self.log(s.client, "close", errno_name(err), name=s.name, file=f.id)
        if err is None and s.flags & os.O_ACCMODE == os.O_RDONLY and self.clients[s.client].caches:
            return  # a mount's reader writes nothing back at close (docs/mount.md)
        self.after_flush(s.client, f, err)

    def fsync(self, k: int) -> None:
        s = self.pick(k)
        f = self.model.files[s.fid]
        _, err = self.call(s.client, s.h.fsync)
        self.log(s.client, "fsync", errno_name(err), name=s.name, file=f.id)
        self.after_flush(s.client, f, err)

    def pread(self, k: int, off: int, n: int) -> None:
        s = self.pick(k)
        f = self.model.files[s.fid]
        off = min(off, MAX_FILE)
        got, err = self.call(s.client, s.h.pread, n, off)
        step = self.log(s.client, "pread", errno_name(err), name=s.name, file=f.id,
                        offset=off, length=n)
        if not s.readable:
            self.expect_errno(s.client, err, {errno.EBADF},
                              f"pread on a handle opened {s.label}")
            return
        self.expect_errno(s.client, err, {None}, "pread")
        step.result = f"{len(got)} bytes"
        bad = self.model.check_read(s.client, f, off, n, got,
                                    self.clients[s.client].attr_window)
        if bad is not None:
            self.fail(s.client, bad.what, bad)

    def pwrite(self, k: int, off: int, n: int) -> None:
        s = self.pick(k)
        f = self.model.files[s.fid]
        client = self.clients[s.client]
        off = min(off, MAX_FILE - 1)
        n = min(n, MAX_FILE - off)
        data = self.payload(n)
        view = f.views.get(s.client)
        sync = bool(s.flags & os.O_SYNC) or bool(view and view.sync_xattr)
        _, err = self.call(s.client, s.h.pwrite, data, off)
        self.log(s.client, "pwrite", errno_name(err), name=s.name, file=f.id, offset=off,
                 length=n, sync=sync, data=data[:16].hex())
        if not s.writable:
            self.expect_errno(s.client, err, {errno.EBADF},
                              f"pwrite on a handle opened {s.label}")
            return
        self.expect_errno(s.client, err, {None}, "pwrite")
        self.last_write = (f.id, off, n, s.client)
        self.model.write(s.client, f, off, data, sync and client.caches, client.block_size)
        if sync and client.caches:
            self.world.ops["sync pwrite (mount)"] = self.world.ops.get("sync pwrite (mount)", 0) + 1
            self.resync(s.client, f)
            self.model.invalidated(s.client, f, off, off + n)

    def truncate(self, c: int, name: str, size: int) -> None:
        if self.ambiguous(c, name):
            return
        f = self.model.binding(name)
        _, err = self.call(c, self.clients[c].truncate, name, size)
        self.log(c, "truncate", errno_name(err), name=name, size=size)
        if f is None:
            self.expect_errno(c, err, {errno.ENOENT}, f"truncate({name!r})")
            return
        self.expect_errno(c, err, {None}, f"truncate({name!r})")
        self.model.truncate(c, f, size, self.clients[c].block_size)

    def unlink(self, c: int, name: str) -> None:
        f = self.model.binding(name)
        stale_none = None in self.candidates(c, name)
        _, err = self.call(c, self.clients[c].unlink, name)
        self.log(c, "unlink", errno_name(err), name=name)
        if f is None:
            self.expect_errno(c, err, {errno.ENOENT}, f"unlink({name!r})")
            return
        self.expect_errno(c, err, {None, errno.ENOENT} if stale_none else {None},
                          f"unlink({name!r})")
        if err is None:
            self.model.rebind(name, None, c)

    def rename(self, c: int, src: str, dst: str) -> None:
        f = self.model.binding(src)
        stale_none = None in self.candidates(c, src)
        _, err = self.call(c, self.clients[c].rename, src, dst)
        self.log(c, "rename", errno_name(err), src=src, dst=dst)
        if f is None:
            self.expect_errno(c, err, {errno.ENOENT}, f"rename({src!r}, {dst!r})")
            return
        self.expect_errno(c, err, {None, errno.ENOENT} if stale_none else {None},
                          f"rename({src!r}, {dst!r})")
        # rename between two links of one file does nothing (POSIX)
        if err is None and self.model.binding(dst) is not f:
            self.model.rebind(src, None, c)
            self.model.rebind(dst, f, c)

    def link(self, c: int, src: str, dst: str) -> None:
        if self.ambiguous(c, src):
            return  # the kernel links the inode its name cache holds
        f, g = self.model.binding(src), self.model.binding(dst)
        _, err = self.call(c, self.clients[c].link, src, dst)
        self.log(c, "link", errno_name(err), src=src, dst=dst)
        allowed: set[int | None] = {errno.ENOENT if f is None else
                                    errno.EEXIST if g is not None else None}
        if any(b is not None for b in self.candidates(c, dst)):
            allowed.add(errno.EEXIST)  # a name the kernel still believes in
        self.expect_errno(c, err, allowed, f"link({src!r}, {dst!r})")
        if err is None:
            self.model.rebind(dst, f, c)

    def stat(self, c: int, name: str) -> None:
        if self.ambiguous(c, name):
            return
        client = self.clients[c]
        f = self.model.binding(name)
        st_, err = self.call(c, client.stat, name)
        step = self.log(c, "stat", errno_name(err), name=name)
        if f is None:
            self.expect_errno(c, err, {errno.ENOENT}, f"stat({name!r})")
            return
        self.expect_errno(c, err, {None}, f"stat({name!r})")
        step.result = f"size {st_.size}"
        if st_.ino != f.ino:
            self.fail(c, f"stat({name!r}) gave inode {st_.ino}, the name is inode {f.ino}")
        lo, hi = self.model.size_range(f, self.model.size_floor(c, f, client.attr_window))
        if not lo <= st_.size <= hi:
            self.fail(c, f"stat({name!r}).st_size is {st_.size}, allowed {lo}..{hi}",
                      Mismatch("size", lengths=(lo, hi)))
        if not client.caches:
            if f.last_mtime is not None and st_.mtime_ns < f.last_mtime:
                self.fail(c, f"mtime of {name!r} went back from {f.last_mtime} to "
                             f"{st_.mtime_ns}")
            f.last_mtime = st_.mtime_ns
            if self.world.checks_nlink and st_.nlink != len(f.names):
                self.fail(c, f"stat({name!r}).st_nlink is {st_.nlink}, the file has "
                             f"{len(f.names)} names")

    def xattr(self, c: int, name: str, key: str, write: bool) -> None:
        client = self.clients[c]
        if self.ambiguous(c, name) or not self.world.xattrs:
            return
        f = self.model.binding(name)
        full = f"user.check.{key}"
        if write:
            value = self.payload(8)
            _, err = self.call(c, client.setxattr, name, full, value)
            self.log(c, "setxattr", errno_name(err), name=name, key=full, value=value.hex())
        else:
            value, err = self.call(c, client.getxattr, name, full)
            self.log(c, "getxattr", errno_name(err), name=name, key=full)
        if err in (errno.ENOTSUP, errno.EOPNOTSUPP):
            self.world.xattrs = False
            self.world.notes.append(f"{client.label}: user.* extended attributes are not "
                               f"supported ({errno_name(err)}); xattr steps skipped")
            return
        if f is None:
            self.expect_errno(c, err, {errno.ENOENT}, f"{'set' if write else 'get'}xattr")
            return
        if write:
            self.expect_errno(c, err, {None}, "setxattr")
            f.xattrs[full] = value
            return
        want = f.xattrs.get(full)
        self.expect_errno(c, err, {errno.ENODATA} if want is None else {None}, "getxattr")
        if want is not None and value != want:
            self.fail(c, f"getxattr({name!r}, {full}) = {value.hex()}, set to {want.hex()}")

    def sync_xattr(self, c: int, name: str) -> None:
        client = self.clients[c]
        f = self.model.binding(name)
        if not (client.caches and client.supports_stripe()) or f is None \
                or self.ambiguous(c, name):
            return
        _, err = self.call(c, client.setxattr, name, SYNC_XATTR, b"1")
        self.log(c, "setxattr", errno_name(err), name=name, key=SYNC_XATTR, value="1")
        self.expect_errno(c, err, {None}, f"setxattr({SYNC_XATTR})")
        f.views[c].sync_xattr = True

    def setstripe(self, c: int, name: str, which: int) -> None:
        client = self.clients[c]
        f = self.model.binding(name)
        if not client.supports_stripe() or f is None or f.handles \
                or self.ambiguous(c, name):
            return
        stripe = self.world.fit_stripe(STRIPES[which])
        _, err = self.call(c, self.world.setstripe, client, name, stripe)
        self.log(c, "setstripe", errno_name(err), name=name, stripe=stripe)
        lo, hi = self.model.size_range(f, self.model.daemon_size_floor(f))
        allowed: set[int | None] = set()
        if lo == 0:
            allowed.add(None)
        if hi > 0:
            allowed.add(errno.EBUSY)
        self.expect_errno(c, err, allowed, f"setstripe({name!r})")
        if err is None:
            got = self.world.getstripe(name)
            if got is not None and got != stripe:
                self.fail(c, f"getstripe({name!r}) = {got}, set to {stripe}")
            f.stripe = stripe

    def io(self, k: int, kind: str, off: int, n: int) -> None:
        """Data through an open handle (reads and writes four times as often as fsync)."""
        self.io_step(k, kind, off, n)

    def io_more(self, k: int, kind: str, off: int, n: int) -> None:
        """The same rule again: hypothesis picks rules evenly, and data steps should be
        the common case (open, close and the name space have a rule each)."""
        self.io_step(k, kind, off, n)

    def io_step(self, k: int, kind: str, off: int, n: int) -> None:
        if not self.slots:
            return  # (no precondition: whether an open worked is the file system's
            #         doing, and hypothesis wants the same draws on every replay)
        if kind == "pwrite":
            self.pwrite(k, off, n)
        elif kind == "pread":
            self.pread(k, off, n)
        else:
            self.fsync(k)

    def read_back(self, k: int) -> None:
        """Read where the last write landed, through another client's handle of the file:
        where coherence bugs live."""
        self.read_back_step(k)

    def read_back_more(self, k: int) -> None:
        """The same rule again (see ``io_more``)."""
        self.read_back_step(k)

    def read_back_step(self, k: int) -> None:
        if self.last_write is None:
            return
        fid, off, n, writer = self.last_write
        others = [i for i, s in enumerate(self.slots) if s.fid == fid and s.client != writer]
        if others:
            self.pread(others[k % len(others)], off, n)

    def pause(self, p: int) -> None:
        """Wait out every client's cache windows (one draw in PAUSE_ONE_IN): what a node
        answers after it must be what its leases were recalled for, not a window's slack."""
        if p:
            return
        wait = max(max(c.name_window, c.attr_window) for c in self.clients) + 0.1
        self.log(-1, "pause", f"{wait:.1f} s")
        time.sleep(wait)

    def meta(self, c: int, kind: str, src: str, dst: str, size: int, which: int) -> None:
        """Names and attributes: one rule, so that data steps stay the common case."""
        if kind == "truncate":
            self.truncate(c, src, size)
        elif kind == "stat":
            self.stat(c, src)
        elif kind == "unlink":
            self.unlink(c, src)
        elif kind == "rename":
            self.rename(c, src, dst)
        elif kind == "link":
            self.link(c, src, dst)
        elif kind in ("setxattr", "getxattr"):
            self.xattr(c, src, f"k{which % 2}", kind == "setxattr")
        elif kind == "sync":
            self.sync_xattr(c, src)
        else:
            self.setstripe(c, src, which)

    def fault(self, which: int) -> None:
        victim = self.world.faults.kill_and_restart(which)
        self.log(-1, "fault", f"killed -9 and restarted {victim}", daemon=victim)
        self.world.fault_epoch = True
        # everything that reached the daemons must still be there
        for f in list(self.model.files.values()):
            if f.names:
                self.resync(-1, f)
