"""Creates made ahead of the manager by a native client (``pvfs.connect(..., ahead=True)``,
``pvfs.client.ahead``; issue 29's native small files): a new file in a directory the client
holds alone is answered by the client and sent in batches, and nobody can tell -- another
client sees every name, size and byte, an existing name is opened as before, a recall
sends the queued creates first, ``fsync`` makes them durable and a killed client leaves
nothing half made."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_mount_ahead_crash import _settled_and_clean
from test_precreate import pool_of

from pvfs.client.ahead import DELAY


def _mgr_requests(fs, op: str) -> int:
    for fam in fs.meta("metrics")["families"]:
        if fam["name"] == "pvfs_requests_total":
            return int(sum(v for _, labels, v in fam["samples"] if labels["op"] == op))
    return 0


@pytest.fixture
def ahead(pvfs_cluster, fs):
    pool_of(fs, least=256)  # (an empty pool has no numbers to delegate: then the manager creates)
    with pvfs_cluster.connect(ahead=True) as client:
        assert client.ahead is not None, "the manager granted no lease session"
        yield client


def _payload(i: int) -> bytes:
    return bytes([i % 251]) * (100 + 97 * i)


def test_files_created_ahead_are_seen_by_another_client_with_their_bytes(ahead, fs):
    ahead.mkdir("/na-seen")
    creates = _mgr_requests(fs, "create")
    for i in range(40):
        with ahead.open(f"/na-seen/f{i}", "wb") as f:
            f.write(_payload(i))
    st = ahead.ahead.status()
    assert st["created_ahead"] == 40 and st["failed"] == 0
    assert _mgr_requests(fs, "create") == creates  # none asked of the manager one by one
    assert sorted(fs.listdir("/na-seen")) == sorted(f"f{i}" for i in range(40))
    for i in range(40):
        assert fs.stat(f"/na-seen/f{i}").st_size == len(_payload(i))
        with fs.open(f"/na-seen/f{i}", "rb") as f:
            assert f.read() == _payload(i)
    assert ahead.ahead.status()["recalls"] >= 1  # the other's listing recalled the directory


def test_an_existing_name_is_opened_through_the_manager(ahead):
    ahead.mkdir("/na-exist")
    with ahead.open("/na-exist/x", "wb") as f:
        f.write(b"first version, longer")
    made = ahead.ahead.status()["created_ahead"]
    with ahead.open("/na-exist/x", "wb") as f:  # truncates the file that is there
        f.write(b"second")
    assert ahead.ahead.status()["created_ahead"] == made
    with pytest.raises(FileExistsError):
        ahead.open("/na-exist/x", os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    with ahead.open("/na-exist/x", "rb") as f:
        assert f.read() == b"second"


def test_a_recall_sends_the_queued_creates_before_it_is_answered(ahead, fs):
    ahead.mkdir("/na-recall")
    ahead.ahead.delay = 60.0  # nothing leaves on its own during this test
    try:
        for i in range(10):
            with ahead.open(f"/na-recall/q{i}", "wb") as f:
                f.write(b"queued %d" % i)
        assert ahead.ahead.status()["queued"] == 10
        # another client's listing recalls the lease: the names are there when it answers
        assert sorted(fs.listdir("/na-recall")) == [f"q{i}" for i in range(10)]
        assert ahead.ahead.status()["queued"] == 0
        with fs.open("/na-recall/q3", "rb") as f:
            assert f.read() == b"queued 3"
    finally:
        ahead.ahead.delay = DELAY


def test_two_clients_creating_in_one_directory_never_make_one_name_twice(pvfs_cluster, fs):
    pool_of(fs, least=256)
    fs.mkdir("/na-two")
    with pvfs_cluster.connect(ahead=True) as a, pvfs_cluster.connect(ahead=True) as b:
        for i in range(15):
            with a.open(f"/na-two/a{i}", "wb") as f:
                f.write(b"a")
            with b.open(f"/na-two/b{i}", "wb") as f:
                f.write(b"bb")
        with a.open("/na-two/same", "wb") as f:
            f.write(b"from a")
        with pytest.raises(FileExistsError):
            b.open("/na-two/same", os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        assert a.ahead.status()["failed"] == 0 and b.ahead.status()["failed"] == 0
    names = fs.listdir("/na-two")
    assert sorted(names) == sorted([f"a{i}" for i in range(15)] + [f"b{i}" for i in range(15)]
                                   + ["same"])
    assert {fs.stat(f"/na-two/b{i}").st_size for i in range(15)} == {2}


def test_creates_where_the_client_may_not_write_are_refused_as_before(pvfs_cluster, fs):
    fs.mkdir("/na-perm", 0o755)  # root's; the client below is another user
    with pvfs_cluster.connect(ahead=True, uid=4321, gid=4321) as user:
        with pytest.raises(PermissionError):
            user.open("/na-perm/nope", "wb")
        with pytest.raises(FileNotFoundError):
            user.open("/na-perm/missing/nope", "wb")
        assert user.ahead.status()["created_ahead"] == 0
    assert fs.listdir("/na-perm") == []


_CHILD = textwrap.dedent("""
    import sys, time, pvfs
    fs = pvfs.connect(sys.argv[1], ahead=True)
    fs.mkdir("/na-kill")
    for i in range(10):
        f = fs.open(f"/na-kill/d{i}", "wb")
        f.write(b"durable %d" % i)
        if i == 9:
            f.fsync()  # sends every queued create, then the manager's sync
        f.close()
    fs.ahead.delay = 600.0  # the rest stay queued until the kill
    time.sleep(0.5)  # (the sender done with its last wait of 5 ms)
    for i in range(10):
        with fs.open(f"/na-kill/lost{i}", "wb") as f:
            f.write(b"never named")
    print("ready", fs.ahead.status()["created_ahead"], fs.ahead.status()["queued"], flush=True)
    time.sleep(600)
""")


def test_a_killed_client_loses_only_what_it_did_not_fsync(pvfs_cluster, fs):
    pool_of(fs, least=256)
    child = subprocess.Popen([sys.executable, "-c", _CHILD, pvfs_cluster.config_path],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().split() == ["ready", "20", "10"]
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(30)
    assert sorted(fs.listdir("/na-kill")) == [f"d{i}" for i in range(10)]
    for i in range(10):
        with fs.open(f"/na-kill/d{i}", "rb") as f:
            assert f.read() == b"durable %d" % i
    # the lost creates' numbers (their data written) are the manager's pool's to discard
    _settled_and_clean(pvfs_cluster)


def test_sync_sends_the_queued_creates_and_makes_them_durable(ahead, fs):
    ahead.mkdir("/na-sync")
    ahead.ahead.delay = 60.0
    try:
        for i in range(5):
            with ahead.open(f"/na-sync/s{i}", "wb") as f:
                f.write(b"s")
        batches = _mgr_requests(fs, "ahead")
        assert ahead.ahead.status()["queued"] == 5
        ahead.sync()
        assert ahead.ahead.status()["queued"] == 0
        assert _mgr_requests(fs, "ahead") == batches + 1  # all five in one request
    finally:
        ahead.ahead.delay = DELAY


def test_stats_of_its_own_files_leave_the_client_creating_ahead(ahead):
    """The client's own path walks name its session: a stat between creates recalls
    nothing, and the creates after it are made ahead still (not listed again)."""
    ahead.mkdir("/na-stat")
    for i in range(6):
        with ahead.open(f"/na-stat/s{i}", "wb") as f:
            f.write(b"z" * (i + 1))
        assert ahead.stat(f"/na-stat/s{i}").st_size == i + 1
    st = ahead.ahead.status()
    assert st["created_ahead"] == 6 and st["recalls"] == 0 and st["listings"] == 1


def test_a_path_walk_recalls_only_the_creators_of_directories_it_reads(ahead, fs):
    """Another client's path call recalls a creator ahead only when its walk reads the
    directory created in (``PathWalks.walk``); then it finds the names queued there."""
    ahead.mkdir("/na-walk")
    fs.mkdir("/na-elsewhere")
    with fs.open("/na-elsewhere/e", "wb") as f:
        f.write(b"e")
    ahead.ahead.delay = 60.0
    try:
        with ahead.open("/na-walk/w", "wb") as f:
            f.write(b"queued")
        recalls = ahead.ahead.status()["recalls"]
        assert fs.stat("/na-elsewhere/e").st_size == 1
        fs.chmod("/na-elsewhere/e", 0o600)
        assert ahead.ahead.status()["recalls"] == recalls  # not on the way: left alone
        assert fs.stat("/na-walk/w").st_size == 6  # through it: recalled, the name is there
        assert ahead.ahead.status()["recalls"] > recalls
    finally:
        ahead.ahead.delay = DELAY


def test_creates_interleaved_over_two_directories_are_stored_as_a_run_each(ahead, fs):
    """Two directories' creates alternating in one batch (two processes creating, as
    mdtest's ranks do): one run per directory (daemons/mgr/ahead.py ``_creates``), each
    file written or left open as the one-by-one path leaves it."""
    ahead.mkdir("/na-runs-a")
    ahead.mkdir("/na-runs-b")
    ahead.sync()
    before = fs.meta("status")["creates_ahead"]
    ahead.ahead.delay = 60.0  # one batch, sent by sync
    kept = []
    try:
        for i in range(6):
            for d in ("a", "b"):
                f = ahead.open(f"/na-runs-{d}/f{i}", "wb")
                f.write(b"%s%d" % (d.encode(), i))
                if i == 5:
                    kept.append(f)  # open when the batch goes
                else:
                    f.close()
        ahead.sync()
        after = fs.meta("status")["creates_ahead"]
        assert after["created"] - before["created"] == 12
        assert after["runs"] - before["runs"] == 2
        for d in ("a", "b"):  # the manager counts the handles still open
            assert fs.meta("nfile", ino=fs.stat(f"/na-runs-{d}/f5").st_ino)["nfile"] == 1
        for d in ("a", "b"):
            for i in range(6):
                with fs.open(f"/na-runs-{d}/f{i}", "rb") as g:
                    assert g.read() == b"%s%d" % (d.encode(), i)
    finally:
        for f in kept:
            f.close()
        ahead.ahead.delay = DELAY
