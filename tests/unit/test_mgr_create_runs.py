"""Runs of creates made ahead in one directory, stored in one go (daemons/mgr/createrun.py):
the same rows as one by one, nothing kept when one of them fails."""

from __future__ import annotations

import errno

import pytest

from pvfs.daemons.mgr.perms import Cred
from pvfs.daemons.mgr.store import ROOT_INO, MetaStore
from pvfs.layout.stripe import Stripe

ROOT = Cred(0, 0)
USER = Cred(1000, 1000)


@pytest.fixture
def store(tmp_path):
    s = MetaStore(str(tmp_path / "meta.sqlite"), 4, Stripe(0, -1, 65536))
    yield s
    s.close()


def ready(store, n: int) -> list[int]:
    pool = store.admin.pool_reserve(n)
    store.admin.pool_ready(pool)
    return pool


def shown(a: dict) -> tuple:
    return tuple(a[k] for k in ("mode", "nlink", "uid", "gid", "size", "atime_ns",
                                "mtime_ns", "ctime_ns", "stripe", "type"))


def test_a_run_stores_what_one_by_one_stores(store, tmp_path):
    d = store.mkdir(ROOT_INO, "d", 0o2777, ROOT)["ino"]
    store.setattr(d, ROOT, gid=4321)
    pool = ready(store, 6)
    items = [(f"f{i}", 0o640 + i, USER, pool[i], 1000 + i) for i in range(3)]
    before, made = store.runs.create(d, items)
    assert [r.ino for r in made] == pool[:3] and before.nent == 0
    one = MetaStore(str(tmp_path / "one.sqlite"), 4, Stripe(0, -1, 65536))
    d1 = one.mkdir(ROOT_INO, "d", 0o2777, ROOT)["ino"]
    one.setattr(d1, ROOT, gid=4321)
    p1 = ready(one, 3)
    for i in range(3):
        one.create(d1, f"f{i}", 0o640 + i, USER, exclusive=True, precreated=p1[i], now=1000 + i)
    for i in range(3):
        assert shown(store.lookup(d, f"f{i}", ROOT)) == shown(one.lookup(d1, f"f{i}", ROOT))
        assert store.lookup(d, f"f{i}", ROOT)["gid"] == 4321  # setgid: the directory's group
    da, d1a = store.getattr(d), one.getattr(d1)
    assert (da["size"], da["mtime_ns"], da["ctime_ns"]) == \
        (d1a["size"], d1a["mtime_ns"], d1a["ctime_ns"]) == (da["size"], 1002, 1002)
    one.close()


@pytest.mark.parametrize("why", ["name there", "name twice", "not the pool's", "no right"])
def test_a_run_with_one_bad_create_stores_nothing(store, why):
    d = store.mkdir(ROOT_INO, "d", 0o755, ROOT)["ino"]
    pool = ready(store, 3)
    store.create(d, "taken", 0o644, ROOT)
    names = ["a", "b", {"name there": "taken", "name twice": "a"}.get(why, "c")]
    inos = pool[:2] + [999999 if why == "not the pool's" else pool[2]]
    cred = USER if why == "no right" else ROOT
    with pytest.raises(OSError) as e:
        store.runs.create(d, [(n, 0o644, cred, i, 5) for n, i in zip(names, inos)])
    assert e.value.errno == {"name there": errno.EEXIST, "name twice": errno.EEXIST,
                             "not the pool's": errno.ESTALE, "no right": errno.EACCES}[why]
    for name in ("a", "b", "c"):
        with pytest.raises(OSError) as gone:
            store.lookup(d, name, ROOT)
        assert gone.value.errno == errno.ENOENT
    # the numbers are still the pool's: one by one, they are taken
    a, _ = store.create(d, "a", 0o644, ROOT, exclusive=True, precreated=pool[0])
    assert a["ino"] == pool[0]
