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
    assert c.lost[100] == ["a", "gone"]  # the names the kernel may hold, missing ones too
    assert 1 not in c.attrs and c.kernel_timeout(1, 1.0) == 1.0
    # a recall of one of them meanwhile still drops the kernel's copies of its names
    assert c._drop([100]) == [(100, "a"), (100, "gone")] and 100 not in c.lost


def test_the_kernel_caches_names_the_mount_knows_in_a_leased_directory_until_the_session_ends():
    c = cache()
    c.learn({**attrs(10), "leased": [1, 10]}, c.tick(), parent=1, name="f")
    assert 59 < c.name_timeout(1, "f", 10, 1.0) <= 60
    assert c.name_timeout(1, "f", 11, 1.0) == 1.0  # not what the mount knows the name as
    assert c.name_timeout(1, "other", 12, 1.0) == 1.0  # a name it does not know
    assert c.name_timeout(2, "f", 10, 1.0) == 1.0  # a directory not leased
    assert c.name_timeout(1, "f", 10, 0.0) == 0.0  # entry_timeout=0 stays 0
    c.until = time.monotonic() - 1
    assert c.name_timeout(1, "f", 10, 1.0) == 1.0


def test_a_missing_name_answered_from_a_complete_directory_is_remembered_for_its_recall():
    c = cache()
    t = c.changing(1)
    c.made(1, "d", {"ino": 20, "type": "dir", "leased": [20]}, t, is_dir=True)
    assert c.lookup(20, "absent") is MISSING
    assert c.name_timeout(20, "absent", 0, 1.0) > 59  # the kernel may cache "no such name"
    assert (20, "absent") in c._drop([20])  # ... and the recall drops it from the kernel


def test_names_the_mount_stops_knowing_are_still_dropped_from_the_kernel_by_a_recall():
    c = cache()
    t = c.changing(1)
    c.made(1, "d", {"ino": 20, "type": "dir", "leased": [20]}, t, is_dir=True)
    for name, ino in (("a", 21), ("b", 22), ("c", 23)):
        c.made(20, name, {**attrs(ino), "leased": [ino]}, c.changing(20))
    c.renamed((20, "a"), (20, "z"), c.changing(20), 0)  # the kernel moved its dentry to "z"
    c.unknown(20, "b")  # (a create refused after the kernel had its entry)
    assert c.name_timeout(20, "z", 21, 1.0) == 1.0  # unknown here: not extended
    assert sorted(n for _p, n in c._drop([20])) == ["a", "b", "c", "z"]


def _recall_order(monkeypatch, drop_takes: float) -> list[str]:
    """What a recall does, in order, when the kernel's names take ``drop_takes`` s to go."""
    import trio

    from pvfs.fuse import leases, leasesession

    events: list[str] = []

    async def send_frame(_sock, header, *_a, **_kw):
        events.append(f"answer {header['seq']}")

    async def on_recall(inos, names):
        await trio.sleep(drop_takes)  # (a directory's lock held by a waiting process)
        events.append(f"names dropped {names}")

    monkeypatch.setattr(leasesession.aio, "send_frame", send_frame)
    c = cache()
    c.on_recall = on_recall
    c.dirs[20] = leases._Dir()
    c.dirs[20].names["f"] = 21

    async def main():
        async with trio.open_nursery() as nursery:
            await c.session._recalled(None, trio.Lock(), {"op": "recall", "seq": 7, "inos": [20]},
                              nursery)
            events.append("recall returned")

    trio.run(main)
    return events


def test_a_recall_is_answered_after_the_kernel_dropped_the_names(monkeypatch):
    assert _recall_order(monkeypatch, 0.01) == [
        "names dropped [(20, 'f')]", "answer 7", "recall returned"]


def test_a_recall_whose_names_cannot_go_yet_is_answered_anyway(monkeypatch):
    from pvfs.fuse import leasesession

    monkeypatch.setattr(leasesession, "_NAMES_WAIT", 0.05)
    assert _recall_order(monkeypatch, 0.3) == [
        "answer 7", "recall returned", "names dropped [(20, 'f')]"]


def test_a_file_about_to_be_written_gives_its_lease_up_here_and_at_the_manager(monkeypatch):
    import trio

    from pvfs.fuse import leasesession

    sent, hooked = [], []

    async def send_frame(_sock, header, *_a, **_kw):
        sent.append(header)

    async def hook(inos):
        hooked.append(inos)  # (the kernel's copy of the attributes goes there)

    monkeypatch.setattr(leasesession.aio, "send_frame", send_frame)
    c = cache()
    c.before_answer.append(hook)
    c.session.sock = object()  # a session runs
    c.learn({**attrs(10), "leased": [10]}, c.tick())
    old = c.tick()  # a getattr sent before the write ...

    async def main():
        await c.writing(10)
        await c.writing(10)  # given up already: nothing more to say
        await c.writing(11)  # never leased

    trio.run(main)
    assert sent == [{"op": "writing", "inos": [10]}] and hooked == [[10]]
    assert c.getattr(10) is None
    c.learn({**attrs(10), "leased": [10]}, old)  # ... whose answer comes after: not kept
    assert c.getattr(10) is None


def _complete_dir(c: LeaseCache, ino: int = 20) -> None:
    c.made(1, f"d{ino}", {"ino": ino, "type": "dir", "leased": [ino]}, c.changing(1),
           is_dir=True)


def test_a_rename_this_mount_made_keeps_its_directories_complete():
    c = cache()
    _complete_dir(c, 20)
    _complete_dir(c, 30)
    for name, ino in (("tmp", 21), ("old", 22)):
        c.made(20, name, {**attrs(ino), "leased": [ino]}, c.changing(20))
    c.renamed((20, "tmp"), (20, "old"), c.changing(20), 0, done=True)  # over "old"
    assert c.lookup(20, "tmp") is MISSING and c.lookup(20, "old") is None  # (ctime: asked)
    assert c.dirs[20].complete and c.dirs[20].names["old"] == 21
    c.renamed((20, "old"), (30, "new"), c.changing(20, 30), 0, done=True)  # across
    assert c.lookup(20, "old") is MISSING and c.dirs[30].names["new"] == 21
    assert c.dirs[20].complete and c.dirs[30].complete


def test_a_rename_not_known_to_have_happened_or_an_exchange_forgets_the_names():
    c = cache()
    _complete_dir(c, 20)
    for name, ino in (("a", 21), ("b", 22), ("c", 23)):
        c.made(20, name, {**attrs(ino), "leased": [ino]}, c.changing(20))
    c.renamed((20, "a"), (20, "z"), c.changing(20), 0)  # it failed, or timed out
    assert not c.dirs[20].complete and c.lookup(20, "z") is None
    _complete_dir(c, 40)
    for name, ino in (("a", 41), ("b", 42)):
        c.made(40, name, {**attrs(ino), "leased": [ino]}, c.changing(40))
    c.renamed((40, "a"), (40, "b"), c.changing(40), 2, done=True)  # RENAME_EXCHANGE
    assert not c.dirs[40].complete and c.lookup(40, "a") is None


def test_a_rename_of_a_link_onto_another_link_of_the_same_file_changes_nothing():
    c = cache()
    _complete_dir(c, 20)
    t = c.changing(20)
    c.made(20, "a", {**attrs(21), "leased": [21]}, t)
    c.made(20, "b", {**attrs(21), "leased": [21]}, c.changing(20))
    c.renamed((20, "a"), (20, "b"), c.changing(20), 0, done=True)
    assert c.dirs[20].names == {"a": 21, "b": 21}


def test_a_recall_overtaking_a_rename_is_not_undone_by_it():
    c = cache()
    _complete_dir(c, 20)
    c.made(20, "a", {**attrs(21), "leased": [21]}, c.changing(20))
    t = c.changing(20)  # the rename is sent ...
    c._drop([20])  # ... a recall of the directory comes first ...
    c.learn({"ino": 0, "leased": [20]}, c.tick(), parent=20, name="x")  # (leased again)
    c.renamed((20, "a"), (20, "b"), t, 0, done=True)  # ... then its reply
    assert "b" not in c.dirs[20].names and not c.dirs[20].complete


def test_a_directory_counts_the_names_known_to_be_there_as_they_change():
    c = cache()
    _complete_dir(c, 20)
    for name, ino in (("a", 21), ("b", 22), ("c", 23)):
        c.made(20, name, {**attrs(ino), "leased": [ino]}, c.changing(20))
    assert c.lookup(20, "missing") is MISSING  # remembered as 0: not counted
    c.removed(20, "b", c.changing(20), {})
    c.renamed((20, "a"), (20, "c"), c.changing(20), 0, done=True)  # over "c"
    d = c.dirs[20]
    assert d.entries == sum(1 for i in d.names.values() if i) == 1
    c.unknown(20, "c")
    assert d.entries == 0


def _listed_dir(c: LeaseCache) -> None:
    """Directory 20 made here in the root (both leased), with a file and a subdirectory."""
    c.learn({"ino": 1, "type": "dir", "mode": 0o40755, "leased": [1]}, c.tick())
    t = c.changing(1)
    c.made(1, "d", {"ino": 20, "type": "dir", "mode": 0o40755, "leased": [20],
                    "parent": {"ino": 1, "type": "dir", "mode": 0o40755}}, t, is_dir=True)
    t = c.changing(20)
    c.made(20, "f", {**attrs(21), "leased": [21]}, t)
    t = c.changing(20)
    c.made(20, "sub", {"ino": 22, "type": "dir", "mode": 0o40755, "leased": [22]}, t,
           is_dir=True)
    c.attrs[20] = {"ino": 20, "type": "dir", "mode": 0o40755}  # (its attributes now)


def test_a_complete_leased_directory_is_listed_here_with_its_parent():
    c = cache()
    _listed_dir(c)
    assert c.listing(20) == [(".", 20), ("..", 1), ("f", 21), ("sub", 22)]
    assert c.listing(22) == [(".", 22), ("..", 20)]  # made here: empty
    assert c.counters["listings_here"] == 2


def test_a_directory_is_not_listed_here_without_its_lease_parent_or_an_entrys_attributes():
    c = cache()
    _listed_dir(c)
    c.attrs.pop(21)  # an entry's attributes not known: the manager lists it
    assert c.listing(20) is None
    c = cache()
    _listed_dir(c)
    c._drop([20])  # recalled
    assert c.listing(20) is None
    c = cache()
    c.learn({**attrs(30, type="dir"), "leased": [30]}, c.tick())
    assert c.listing(30) is None  # its names are not known, nor its parent
    c = cache()
    _listed_dir(c)
    c.renamed((20, "sub"), (20, "sub2"), c.changing(20), 2)  # an exchange: not applied
    assert c.listing(22) is None  # where it went is not known here


def test_a_listing_served_here_leaves_out_names_removed_since_and_asks_for_the_unknown():
    c = cache()
    _listed_dir(c)
    names = c.listing(20)
    c.removed(20, "f", c.changing(20), {})
    assert c.current(20, "f", 21) is MISSING  # not linked again by the listing
    assert c.current(20, "sub", 22)["ino"] == 22
    c.renamed((20, "sub"), (20, "moved"), c.changing(20), 0, done=True)
    assert c.parents[22] == 20  # (a rename applied here keeps its parent known)
    c._drop([20])  # a recall in the middle of the listing: the rest is asked
    assert c.current(20, "sub", 22) is None and names[3] == ("sub", 22)


def test_the_c_workers_stop_creating_before_a_recall_or_the_sessions_end_drops_a_directory():
    """What they made there must be applied while the tables still hold the directory, so
    the names the kernel drops at a recall include theirs (fuse/workercreates.py)."""
    c = cache()
    t = c.tick()
    c.learn({"ino": 0, "leased": [1]}, t, parent=1, name="g")
    seen = []
    c.stop_creates = lambda inos: seen.append((inos, 1 in c.dirs))
    names = c.drop_recalled([1])
    assert seen == [([1], True)] and 1 not in c.dirs and (1, "g") in names
    c.learn({"ino": 0, "leased": [1]}, c.tick(), parent=1, name="h")
    c.drop_all()
    assert seen[-1] == (None, True) and not c.dirs
