"""Group commit (daemons/mgr/group.py): many store calls per SQLite transaction.

What must hold: a batch of calls gives every call the same result (reply or errno) and leaves
the same tree as the calls applied one by one, each its own transaction -- a call that fails
inside a batch rolls back its own savepoint only --; no request is answered while the batch
it saw is open; a batch whose commit fails answers every request of it with an error and
leaves nothing of it.
"""

from __future__ import annotations

import errno
import random
import sqlite3

import hypothesis.strategies as st
import pytest
import trio
import trio.lowlevel
from hypothesis import HealthCheck, given, settings

from pvfs.daemons.mgr.group import GroupCommit
from pvfs.daemons.mgr.store import ROOT_INO, Cred, MetaStore
from pvfs.layout.stripe import Stripe

ROOT = Cred(0, 0)
USER = Cred(1000, 1000, (1000,))
STRIPE = Stripe(0, -1, 65536)


class CountingHook:
    """A BatchHook that commits after a chosen number of calls (or never, by itself)."""

    def __init__(self, store: MetaStore, every: int | None = None) -> None:
        self.store, self.every = store, every
        self.opened_n = self.joined_n = 0

    def opened(self) -> None:
        self.opened_n += 1

    def joined(self, n: int) -> None:
        self.joined_n += 1
        if self.every is not None and n >= self.every:
            self.store.txn.commit()


# ----------------------------------------------------------------------------- the store

def _snapshot(store: MetaStore) -> list:
    """The whole tree: (path, attrs without times) depth first, xattrs included."""
    out = []

    def walk(ino: int, path: str) -> None:
        for name, attrs, _ in store.readdir(ino, ROOT, 0, 65536):
            if name in (".", ".."):
                continue
            a = {k: v for k, v in attrs.items() if not k.endswith("time_ns")}
            xs = store.listxattr(a["ino"], ROOT)
            out.append((path + "/" + name, a, {x: store.getxattr(a["ino"], x, ROOT) for x in xs}))
            if a["type"] == "dir":
                walk(a["ino"], path + "/" + name)

    walk(ROOT_INO, "")
    return out


NAMES = ["a", "b", "c", "d"]
OPS = st.one_of(
    st.tuples(st.just("create"), st.sampled_from(NAMES), st.booleans(), st.booleans()),
    st.tuples(st.just("mkdir"), st.sampled_from(NAMES), st.booleans()),
    st.tuples(st.just("unlink"), st.sampled_from(NAMES), st.booleans()),
    st.tuples(st.just("rmdir"), st.sampled_from(NAMES), st.booleans()),
    st.tuples(st.just("rename"), st.sampled_from(NAMES), st.sampled_from(NAMES),
              st.sampled_from([0, 1, 2])),
    st.tuples(st.just("symlink"), st.sampled_from(NAMES), st.booleans()),
    st.tuples(st.just("link"), st.sampled_from(NAMES), st.sampled_from(NAMES)),
    st.tuples(st.just("setxattr"), st.sampled_from(NAMES), st.sampled_from([0, 1, 2]),
              st.booleans()),
    st.tuples(st.just("chmod"), st.sampled_from(NAMES), st.booleans()),
    st.tuples(st.just("reserve"), st.integers(1, 3)),
    # fails after it changed something: a file goes, then a non-empty directory refuses
    st.tuples(st.just("remove_inodes"), st.sampled_from(NAMES), st.booleans()),
    # a call that fails half way through its writes (an SQLite error after an insert)
    st.tuples(st.just("half"), st.sampled_from(NAMES)),
)


def _apply(store: MetaStore, op: tuple, sub: int) -> object:
    """One call; its reply without times, or its errno. ``sub`` is a directory that a
    non-root user may not write (mode 0o755, owned by root): calls there as USER fail."""
    kind = op[0]
    try:
        if kind == "create":
            _, name, exclusive, as_user = op
            parent = sub if as_user else ROOT_INO
            a, created = store.create(parent, name, 0o644, USER if as_user else ROOT,
                                      exclusive=exclusive)
            return ("ok", a["ino"], created)
        if kind == "mkdir":
            _, name, in_sub = op
            return ("ok", store.mkdir(sub if in_sub else ROOT_INO, name, 0o755, ROOT)["ino"])
        if kind == "unlink":
            _, name, as_user = op
            got = store.unlink(sub if as_user else ROOT_INO, name, USER if as_user else ROOT)
            return ("ok", got and got["ino"])
        if kind == "rmdir":
            _, name, in_sub = op
            store.rmdir(sub if in_sub else ROOT_INO, name, ROOT)
            return ("ok",)
        if kind == "rename":
            _, a, b, flags = op
            got = store.rename(ROOT_INO, a, sub, b, ROOT, flags)
            return ("ok", got and got["ino"])
        if kind == "symlink":
            _, name, as_user = op
            return ("ok", store.symlink(sub if as_user else ROOT_INO, name, "t",
                                        USER if as_user else ROOT)["ino"])
        if kind == "link":
            _, a, b = op
            target = store.lookup(ROOT_INO, a, ROOT)["ino"]
            return ("ok", store.link(target, sub, b, ROOT)["ino"])
        if kind == "setxattr":
            _, name, flags, as_user = op
            ino = store.lookup(ROOT_INO, name, ROOT)["ino"]
            store.setxattr(ino, "user.x", b"v", USER if as_user else ROOT, flags)
            return ("ok",)
        if kind == "chmod":
            _, name, as_user = op
            ino = store.lookup(ROOT_INO, name, ROOT)["ino"]
            return ("ok", store.setattr(ino, USER if as_user else ROOT, mode=0o600)["mode"])
        if kind == "reserve":
            return ("ok", store.admin.pool_reserve(op[1]))
        if kind == "remove_inodes":
            _, name, with_sub = op
            inos = [store.lookup(ROOT_INO, name, ROOT)["ino"]]
            store.admin.remove_inodes(inos + ([sub] if with_sub else []))
            return ("ok",)
        if kind == "half":
            with store._tx():
                db = store._db
                ino = db.execute("INSERT INTO inodes (mode, nlink, uid, gid, atime, mtime, "
                                 "ctime) VALUES (?, 1, 0, 0, 0, 0, 0)", (0o100644,)).lastrowid
                db.execute("INSERT INTO dentries (parent, name, ino) VALUES (?, ?, ?)",
                           (ROOT_INO, "half-" + op[1], ino))
                db.execute("UPDATE inodes SET nlink = 99 WHERE ino = ?", (sub,))
                db.execute("INSERT INTO dentries (parent, name, ino) VALUES (?, ?, ?)",
                           (ROOT_INO, "half-" + op[1], ino))  # UNIQUE (parent, name): fails
    except sqlite3.IntegrityError:
        return ("err", "integrity")
    except OSError as exc:
        return ("err", exc.errno)
    raise AssertionError(op)


def _fresh(path: str) -> tuple[MetaStore, int]:
    store = MetaStore(path, 4, STRIPE)
    sub = store.mkdir(ROOT_INO, "sub", 0o755, ROOT)["ino"]
    return store, sub


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(OPS, min_size=1, max_size=40), every=st.sampled_from([None, 1, 3, 7]),
       seed=st.integers(0, 2**16))
def test_a_batch_equals_the_calls_one_by_one(tmp_path_factory, ops, every, seed):
    """Each call's reply or errno, the inode numbers and the final tree are those of the
    same calls each in its own transaction, however the batch is cut into commits."""
    d = tmp_path_factory.mktemp("gc")
    one, sub1 = _fresh(str(d / "one.sqlite"))
    batched, sub2 = _fresh(str(d / "batched.sqlite"))
    hook = CountingHook(batched, every)
    batched.txn.batch_writes(hook)
    rnd = random.Random(seed)
    try:
        for op in ops:
            want = _apply(one, op, sub1)
            got = _apply(batched, op, sub2)
            assert got == want, (op, got, want)
            if every is None and rnd.random() < 0.2:
                batched.txn.commit()  # the queue drained here
        batched.txn.commit()
        assert not batched.txn.in_batch
        assert _snapshot(batched) == _snapshot(one)
        assert batched.admin.pool() == one.admin.pool()
        assert [a["ino"] for a in batched.admin.orphans()] == \
            [a["ino"] for a in one.admin.orphans()]
    finally:
        one.close()
        batched.close()
    # What was committed is what a new connection sees.
    again = MetaStore(str(d / "batched.sqlite"), 4, STRIPE)
    ref = MetaStore(str(d / "one.sqlite"), 4, STRIPE)
    try:
        assert _snapshot(again) == _snapshot(ref)
    finally:
        again.close()
        ref.close()


def test_a_failing_call_rolls_back_alone(tmp_path):
    store, _ = _fresh(str(tmp_path / "m.sqlite"))
    hook = CountingHook(store)
    store.txn.batch_writes(hook)
    store.create(ROOT_INO, "a", 0o644, ROOT)
    with pytest.raises(OSError) as e:
        store.create(ROOT_INO, "a", 0o644, ROOT, exclusive=True)
    assert e.value.errno == errno.EEXIST
    with pytest.raises(OSError) as e:
        store.rmdir(ROOT_INO, "nothing", ROOT)
    assert e.value.errno == errno.ENOENT
    store.mkdir(ROOT_INO, "d", 0o755, ROOT)
    assert store.txn.in_batch and hook.opened_n == 1 and hook.joined_n == 2  # failures not counted
    assert store.txn.commit() == 2
    names = [n for n, _, _ in store.readdir(ROOT_INO, ROOT)]
    assert names == [".", "..", "sub", "a", "d"]
    store.close()


def test_uncommitted_changes_are_not_on_disk(tmp_path):
    """Until ``commit``, another connection (a restarted manager) sees none of the batch."""
    path = str(tmp_path / "m.sqlite")
    store, _ = _fresh(path)
    store.txn.batch_writes(CountingHook(store))
    store.create(ROOT_INO, "a", 0o644, ROOT)
    other = sqlite3.connect(path)
    count = "SELECT count(*) FROM dentries WHERE name = 'a'"
    assert other.execute(count).fetchone() == (0,)
    store.txn.commit()
    assert other.execute(count).fetchone() == (1,)
    other.close()
    store.close()


def test_batch_writes_refuses_while_a_batch_is_open(tmp_path):
    store, _ = _fresh(str(tmp_path / "m.sqlite"))
    store.txn.batch_writes(CountingHook(store))
    store.mkdir(ROOT_INO, "x", 0o755, ROOT)
    with pytest.raises(OSError):
        store.txn.batch_writes(CountingHook(store))
    store.txn.commit()
    store.close()


# ----------------------------------------------------------------------------- GroupCommit

def test_concurrent_requests_share_one_commit_and_wait_for_it(tmp_path):
    store, _ = _fresh(str(tmp_path / "m.sqlite"))
    group = GroupCommit(store, max_wait=5.0)
    replied: list[bool] = []

    async def request(i: int) -> None:
        failures = group.failures
        store.create(ROOT_INO, f"f{i}", 0o644, ROOT)
        await trio.lowlevel.checkpoint()  # the request's other awaits
        await group.settled(failures)
        replied.append(store.txn.in_batch)  # never answered while its batch is open

    async def main() -> None:
        async with trio.open_nursery() as n:
            n.start_soon(group.run)
            async with trio.open_nursery() as reqs:
                for i in range(20):
                    reqs.start_soon(request, i)
            n.cancel_scope.cancel()

    trio.run(main)
    assert replied == [False] * 20
    assert group.commits == 1 and group.ops == 20
    assert len(store.readdir(ROOT_INO, ROOT)) == 2 + 1 + 20
    store.close()


def test_max_ops_commits_at_once(tmp_path):
    store, _ = _fresh(str(tmp_path / "m.sqlite"))
    group = GroupCommit(store, max_ops=5)
    for i in range(12):
        store.mkdir(ROOT_INO, f"d{i}", 0o755, ROOT)
    assert group.commits == 2 and group.ops == 10 and group.current is not None
    group.close()
    assert group.commits == 3 and not store.txn.in_batch
    store.close()


def test_a_failed_commit_fails_every_request_of_the_batch(tmp_path):
    path = str(tmp_path / "m.sqlite")
    store, _ = _fresh(path)
    group = GroupCommit(store, max_wait=5.0)
    real_commit = store.txn.commit

    def broken() -> int:
        store._db.execute("ROLLBACK")  # what SQLite leaves after a failed COMMIT
        store.txn._in_batch = False
        raise sqlite3.OperationalError("database or disk is full")

    outcome: list[object] = []

    async def request(i: int) -> None:
        failures = group.failures
        store.create(ROOT_INO, f"f{i}", 0o644, ROOT)
        try:
            await group.settled(failures)
        except OSError as exc:
            outcome.append(exc.errno)
        else:
            outcome.append("ok")

    async def main() -> None:
        async with trio.open_nursery() as n:
            n.start_soon(group.run)
            store.txn.commit = broken  # type: ignore[method-assign]
            async with trio.open_nursery() as reqs:
                for i in range(5):
                    reqs.start_soon(request, i)
            store.txn.commit = real_commit  # type: ignore[method-assign]
            # durable() raises the batch's error for work that depends on it
            store.mkdir(ROOT_INO, "later", 0o755, ROOT)
            await group.durable()
            n.cancel_scope.cancel()

    trio.run(main)
    assert outcome == [errno.ENOSPC] * 5
    assert group.failures == 1
    names = [n for n, _, _ in store.readdir(ROOT_INO, ROOT)]
    assert names == [".", "..", "sub", "later"]  # nothing of the failed batch
    store.close()


def test_durable_waits_for_the_open_batch(tmp_path):
    store, _ = _fresh(str(tmp_path / "m.sqlite"))
    group = GroupCommit(store, max_wait=5.0)
    seen: list[bool] = []

    async def main() -> None:
        async with trio.open_nursery() as n:
            n.start_soon(group.run)
            await group.durable()  # nothing open: at once
            store.mkdir(ROOT_INO, "x", 0o755, ROOT)
            assert store.txn.in_batch
            await group.durable()
            seen.append(store.txn.in_batch)
            n.cancel_scope.cancel()

    trio.run(main)
    assert seen == [False]
    store.close()


# ----------------------------------------------------------------------------- fewer queries

def test_attributes_built_without_a_query_equal_the_stored_rows(tmp_path):
    """create/mkdir/symlink/mknod answer with the inode as written and, with ``parent_out``,
    the parent as the change left it (no query back): both equal what a query returns."""
    import stat as st_

    store, sub = _fresh(str(tmp_path / "m.sqlite"))
    store.setattr(sub, ROOT, mode=0o2775)  # setgid: new entries take the directory's group
    out: list[dict] = []
    a, _ = store.create(sub, "f", 0o4755, ROOT, parent_out=out)
    assert a == store.getattr(a["ino"]) and out[-1] == store.getattr(sub)
    d = store.mkdir(sub, "d", 0o755, ROOT, parent_out=out)
    assert d == store.getattr(d["ino"]) and out[-1] == store.getattr(sub)
    assert store.getattr(sub)["nlink"] == 3
    link = store.symlink(sub, "l", "target", ROOT)
    assert link == store.getattr(link["ino"])
    node = store.mknod(sub, "p", st_.S_IFIFO | 0o640, 0, ROOT)
    assert node == store.getattr(node["ino"])
    store.open(a["ino"], 0, ROOT)  # a handle keeps the data: nothing to reap yet
    assert store.unlink(sub, "f", ROOT, parent_out=out) is None
    assert out[-1] == store.getattr(sub)
    gone = store.release(a["ino"])
    assert gone is not None and gone["nlink"] == 0
    b, _ = store.create(sub, "g", 0o644, ROOT)
    reaped = store.unlink(sub, "g", ROOT, parent_out=out)
    assert reaped == store.getattr(b["ino"]) and out[-1] == store.getattr(sub)
    store.rmdir(sub, "d", ROOT, parent_out=out, now=12345)  # (an rmdir made ahead)
    assert out[-1] == store.getattr(sub) and out[-1]["nlink"] == 2
    assert out[-1]["mtime_ns"] == out[-1]["ctime_ns"] == 12345
    store.close()
