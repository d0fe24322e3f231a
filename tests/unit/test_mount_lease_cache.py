"""The mount's lease cache (fuse/leases.py) without a manager: what it answers, and which
replies it refuses because a recall or its own change overtook them."""

from __future__ import annotations

import time
from types import SimpleNamespace

from pvfs.fuse.leases import MISSING, LeaseCache


def cache() -> LeaseCache:
    c = LeaseCache(SimpleNamespace(lease_name=None, on_fenced=None), on_recall=None)
    c.until = time.monotonic() + 60  # a session
    return c


def attrs(ino: int, **kw) -> dict:
    return {"ino": ino, "type": "file", "mode": 0o100644, "size": 0, **kw}


def test_a_leased_lookup_and_a_leased_missing_name_are_answered():
    c = cache()
    t = c.tick()
    c.learn({**attrs(10), "leased": [1, 10]}, t, parent=1, name="f")
    t = c.tick()
    c.learn({"ino": 0, "leased": [1]}, t, parent=1, name="g")
    assert c.lookup(1, "f")["ino"] == 10
    assert c.lookup(1, "g") is MISSING
    assert c.lookup(1, "h") is None  # not complete: unknown names are asked
    assert c.getattr(10)["ino"] == 10


def test_nothing_is_answered_once_the_session_ran_out():
    c = cache()
    c.learn({**attrs(10), "leased": [10]}, c.tick())
    c.until = time.monotonic() - 1
    assert c.getattr(10) is None


def test_a_reply_sent_before_a_recall_is_not_kept():
    c = cache()
    t = c.tick()            # getattr sent ...
    c._drop([10])           # ... the recall of 10 arrives first ...
    c.learn({**attrs(10), "leased": [10]}, t)  # ... then the (stale) reply
    assert c.getattr(10) is None


def test_an_older_reply_does_not_undo_this_mounts_own_change():
    c = cache()
    c.learn({**attrs(10), "leased": [10]}, c.tick())
    old = c.tick()          # a getattr sent ...
    t = c.changing(10)      # ... then a chmod ...
    c.attrs_now(10, attrs(10, mode=0o100600), t)  # ... whose reply lands first
    c.learn({**attrs(10), "leased": [10]}, old)    # the getattr's older answer
    assert c.getattr(10)["mode"] == 0o100600


def test_own_creates_and_removes_update_a_complete_directory():
    c = cache()
    t = c.changing(1)
    c.made(1, "d", {"ino": 20, "type": "dir", "leased": [20]}, t, is_dir=True)
    assert c.lookup(20, "anything") is MISSING  # made here: complete and empty
    t = c.changing(20)
    c.made(20, "f", {**attrs(21), "leased": [21]}, t)
    assert c.lookup(20, "f")["ino"] == 21
    t = c.changing(20)
    c.removed(20, "f", t, {})
    assert c.lookup(20, "f") is MISSING
    assert c.getattr(21) is None  # its link count changed


def test_a_recall_of_a_directory_forgets_its_names_and_says_which():
    c = cache()
    t = c.changing(1)
    c.made(1, "d", {"ino": 20, "type": "dir", "leased": [20]}, t, is_dir=True)
    t = c.changing(20)
    c.made(20, "f", {**attrs(21), "leased": [21]}, t)
    assert c._drop([20]) == [(20, "f")]
    assert c.lookup(20, "f") is None and c.lookup(20, "x") is None


def test_forgetting_the_oldest_gives_their_leases_back(monkeypatch):
    import pvfs.fuse.leases as leases_mod

    monkeypatch.setattr(leases_mod, "_ATTRS_MAX", 16)
    c = cache()
    for ino in range(100, 117):
        c.learn({**attrs(ino), "leased": [ino]}, c.tick())
    # forgotten here; given back with the next renewal, once the kernel forgot them too
    assert len(c.attrs) <= 16 and list(c.lost) == [100, 101] and c.released == []
    assert c.getattr(100) is None and c.getattr(116)["ino"] == 116


def test_the_kernel_caches_leased_attributes_until_the_session_ends():
    c = cache()
    c.learn({**attrs(10), "leased": [1, 10]}, c.tick(), parent=1, name="f")
    c.learn({**attrs(11), "leased": [1]}, c.tick(), parent=1, name="g")  # attrs not leased
    assert 59 < c.kernel_timeout(10, 1.0) <= 60
    assert c.kernel_timeout(11, 1.0) == 1.0
    c._drop([10])
    assert c.kernel_timeout(10, 1.0) == 1.0
    c.learn({**attrs(12), "leased": [12]}, c.tick())
    c.until = time.monotonic() - 1
    assert c.kernel_timeout(12, 1.0) == 1.0


def test_leases_forgotten_for_memory_drop_the_kernels_copies_before_they_are_given_back(
        monkeypatch):
    from pvfs.fuse import leases

    monkeypatch.setattr(leases, "_ATTRS_MAX", 8)
    monkeypatch.setattr(leases, "_DIRS_MAX", 8)
    c = cache()
    c.dirs[100] = leases._Dir()
    c.dirs[100].names.update({"a": 5, "gone": 0})
    for ino in range(1, 10):
        c.learn({**attrs(ino), "leased": [ino]}, c.tick())
    for ino in range(200, 208):
        c._dir(ino)
    assert 1 in c.lost and c.released == []  # not given back before the kernel forgot it
    assert c.lost[100] == ["a"]  # the directory's names the kernel may hold
    assert 1 not in c.attrs and c.kernel_timeout(1, 1.0) == 1.0
    # a recall of one of them meanwhile still drops the kernel's copies of its names
    assert c._drop([100]) == [(100, "a")] and 100 not in c.lost
