"""The manager's background removal of deleted files' stripe files (daemons/mgr/reaper.py)."""

from __future__ import annotations

import errno
import os

import pytest
import trio
import trio.lowlevel

from pvfs.daemons.mgr.reaper import Reaper
from pvfs.daemons.mgr.store import ROOT_INO, Cred, MetaStore
from pvfs.layout.stripe import Stripe

ROOT = Cred(0, 0)


@pytest.fixture
def store(tmp_path):
    s = MetaStore(str(tmp_path / "meta.sqlite"), 4, Stripe(0, -1, 65536))
    yield s
    s.close()


class FakeDaemons:
    def __init__(self) -> None:
        self.calls: list[list[tuple[int, dict]]] = []
        self.down = False

    async def each(self, calls):
        await trio.lowlevel.checkpoint()
        if self.down:
            raise ConnectionRefusedError(errno.ECONNREFUSED, "iod down")
        self.calls.append(calls)
        return [{"removed": len(h["inos"])} for _, h in calls]


def iods_of(attrs: dict) -> list[int]:
    s = Stripe(*attrs["stripe"])
    return [s.iod_of_rank(r, 4) for r in range(s.pcount)]


def make(store, name: str, stripe: Stripe | None = None) -> int:
    return store.create(ROOT_INO, name, 0o644, ROOT, stripe=stripe)[0]["ino"]


async def settle(reaper: Reaper) -> None:
    with trio.fail_after(5):
        await trio.lowlevel.checkpoint()
        await reaper.idle()


def run_with(reaper: Reaper, body) -> None:
    async def main():
        async with trio.open_nursery() as n:
            n.start_soon(reaper.run)
            await body()
            n.cancel_scope.cancel()

    trio.run(main)


def test_deleted_files_go_in_one_request_per_daemon(store):
    daemons = FakeDaemons()
    reaper = Reaper(store, iods_of, daemons.each)
    wide = [make(store, f"w{i}") for i in range(3)]
    narrow = make(store, "n", Stripe(1, 2, 65536))

    async def body():
        await settle(reaper)  # nothing to do yet
        for i in range(3):
            reaper.add(store.unlink(ROOT_INO, f"w{i}", ROOT))
        reaper.add(store.unlink(ROOT_INO, "n", ROOT))
        assert reaper.pending == 4
        await settle(reaper)

    run_with(reaper, body)
    assert len(daemons.calls) == 1
    sent = {iod: h["inos"] for iod, h in daemons.calls[0]}
    assert sent == {0: wide, 1: wide + [narrow], 2: wide + [narrow], 3: wide}
    assert all(h["op"] == "unlinks" for _, h in daemons.calls[0])
    for ino in wide + [narrow]:
        with pytest.raises(OSError):
            store.getattr(ino)
    assert reaper.pending == 0 and reaper.removed == 4


def test_a_file_open_again_keeps_its_data(store):
    daemons = FakeDaemons()
    reaper = Reaper(store, iods_of, daemons.each)
    ino = make(store, "f")
    store.open(ino, os.O_RDONLY, ROOT)
    assert store.unlink(ROOT_INO, "f", ROOT) is None  # open: nothing to remove yet
    attrs = store.getattr(ino)
    store.open(ino, os.O_RDONLY, ROOT)  # a second handle, by inode, before the reaper ran

    async def body():
        reaper.add(store.release(ino))  # None: one handle is left
        reaper.add(attrs | {"type": "file"})  # queued by a racing path: must be refused
        await settle(reaper)
        assert store.getattr(ino)["nlink"] == 0
        reaper.add(store.release(ino))  # the last handle: now it goes
        await settle(reaper)

    run_with(reaper, body)
    with pytest.raises(OSError):
        store.getattr(ino)
    assert [h["inos"] for _, h in daemons.calls[-1]] == [[ino]] * 4


def test_a_daemon_down_is_retried_and_nothing_is_forgotten_before(store):
    daemons = FakeDaemons()
    daemons.down = True
    reaper = Reaper(store, iods_of, daemons.each)
    ino = make(store, "f")

    async def body():
        reaper.add(store.unlink(ROOT_INO, "f", ROOT))
        await trio.sleep(0.2)
        assert reaper.pending == 1 and store.getattr(ino)["nlink"] == 0
        daemons.down = False
        await settle(reaper)

    run_with(reaper, body)
    with pytest.raises(OSError):
        store.getattr(ino)


def test_what_a_crash_left_is_removed_at_the_start(tmp_path):
    path = str(tmp_path / "meta.sqlite")
    s = MetaStore(path, 4, Stripe(0, -1, 65536))
    ino = make(s, "f")
    s.unlink(ROOT_INO, "f", ROOT)  # the manager died before the data went
    s.close()
    s = MetaStore(path, 4, Stripe(0, -1, 65536))
    daemons = FakeDaemons()
    reaper = Reaper(s, iods_of, daemons.each)

    async def body():
        await settle(reaper)

    run_with(reaper, body)
    assert [h["inos"] for _, h in daemons.calls[0]] == [[ino]] * 4
    assert s.admin.orphans() == []
    s.close()


def test_an_inode_fsck_removed_meanwhile_is_skipped(store):
    a, b = make(store, "a"), make(store, "b")
    store.unlink(ROOT_INO, "a", ROOT)
    store.unlink(ROOT_INO, "b", ROOT)
    store.admin.remove_inode(a)
    store.admin.remove_inodes([a, b])
    assert store.admin.orphans() == []
    with pytest.raises(OSError) as ei:
        store.admin.remove_inode(a)
    assert ei.value.errno == errno.ENOENT
