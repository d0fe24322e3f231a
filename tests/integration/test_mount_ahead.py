"""Creates made ahead of the manager (``-o leases``: fuse/creates.py, daemons/mgr/ahead.py).

A leasing mount creating in a directory it holds alone answers ``create`` itself and sends the
creates in batches. Nobody may see the directory without them: another mount's lookup or
listing, a native client's path, must find every file created before it; the creating
mount's own later requests come after them; ``fsync`` makes them durable; a mount killed
with creates unsent leaves nothing half-made (``fsck`` clean)."""

from __future__ import annotations

import errno
import json
import os
import signal
import stat
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_mount_support import Mount, needs_fuse

sys.path.insert(0, str(Path(__file__).parent.parent))
from conftest import start_cluster

import pvfs
from pvfs.cluster.launch import down

pytestmark = [pytest.mark.fuse, needs_fuse]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = start_cluster(tmp_path_factory.mktemp("ahead"))
    try:
        yield c
    finally:
        down(c.config)


def _leasing(m: Mount) -> Mount:
    """``m`` once its lease session runs and the manager's pool has numbers (until then it
    creates at the manager)."""
    deadline = time.monotonic() + 10
    while not m.stats()["leases"]["valid"]:
        assert time.monotonic() < deadline, "no lease session"
        time.sleep(0.05)
    with pvfs.connect(m.config_path) as fs:
        while fs.meta("status")["precreated"] < 128:
            assert time.monotonic() < deadline, "the manager's pool stays empty"
            time.sleep(0.05)
    return m


@pytest.fixture
def nodes(cluster, tmp_path):
    # A's creates wait up to a minute to be sent: what B sees, it sees by the recall
    a = Mount(cluster.config_path, tmp_path / "a", "leases,ahead_delay=60")
    b = Mount(cluster.config_path, tmp_path / "b", "leases")
    with a, b:
        yield _leasing(a), _leasing(b)


def _ahead(m: Mount) -> dict:
    return m.stats()["creates_ahead"]


def _fsck_clean(cluster) -> None:
    """``pvfs-admin fsck`` finds nothing (exit 0)."""
    import subprocess

    env = {k: v for k, v in os.environ.items() if k != "PVFS_CONFIG"}
    out = subprocess.run([sys.executable, "-m", "pvfs.cli.main", "--config",
                          cluster.config_path, "fsck"], capture_output=True, text=True,
                         env=env, timeout=300, check=False)
    assert out.returncode == 0, out.stdout + out.stderr


def test_creates_are_answered_by_the_mount_and_seen_at_once_elsewhere(nodes, cluster):
    a, b = nodes
    d = a.path / "seen"
    d.mkdir()
    # held open: no close (which goes to the manager after the creates) sends them
    fds = [os.open(d / f"f{i}", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
           for i in range(50)]
    try:
        assert _ahead(a)["created_ahead"] == 50, json.dumps([_ahead(a), a.stats()["leases"]])
        assert _ahead(a)["pending"] == 50
        # another mount sees every one of them at once: its lookup recalls A's lease first
        assert (b.path / "seen" / "f49").exists()
        assert sorted(os.listdir(b.path / "seen")) == sorted(f"f{i}" for i in range(50))
    finally:
        for fd in fds:
            os.close(fd)
    (d / "late").touch()  # A lost the delegation to B's reads: a create at the manager
    with pvfs.connect(cluster.config_path) as fs:  # a native client's path walk, too
        assert fs.stat("/seen/late").st_size == 0
        assert len(fs.listdir("/seen")) == 51
    assert _ahead(a)["failed"] == 0


def test_a_create_ahead_shows_what_the_manager_makes(nodes):
    a, b = nodes
    d = a.path / "same"
    d.mkdir()
    os.chmod(d, 0o2775)  # setgid: new files take the directory's group
    os.chown(d, 0, 4242)
    (d / "warm").touch()
    before = _ahead(a)["created_ahead"]
    fd = os.open(d / "f", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o640)
    here = os.fstat(fd)
    parent_here = os.stat(d)
    os.close(fd)
    assert _ahead(a)["created_ahead"] == before + 1, (_ahead(a), a.stats()["leases"])
    there = os.stat(b.path / "same" / "f")  # the manager's, after A sent it
    for field in ("st_mode", "st_uid", "st_gid", "st_nlink", "st_size", "st_mtime_ns",
                  "st_ctime_ns"):
        assert getattr(here, field) == getattr(there, field), field
    assert here.st_gid == 4242 and stat.S_IMODE(here.st_mode) == 0o640
    parent_there = os.stat(b.path / "same")
    assert (parent_here.st_mtime_ns, parent_here.st_size) == \
        (parent_there.st_mtime_ns, parent_there.st_size)


def test_a_file_created_ahead_can_be_written_renamed_and_removed(nodes):
    a, b = nodes
    d = a.path / "life"
    d.mkdir()
    (d / "warm").touch()
    with open(d / "f", "wb") as f:
        f.write(b"x" * 10000)
    assert (d / "f").stat().st_size == 10000
    (d / "f").rename(d / "g")
    assert (b.path / "life" / "g").read_bytes() == b"x" * 10000
    (d / "g").unlink()
    assert not (b.path / "life" / "g").exists()
    for i in range(20):
        (d / f"n{i}").touch()
    for i in range(20):
        (d / f"n{i}").unlink()  # each unlink goes after the creates it follows
    assert sorted(os.listdir(b.path / "life")) == ["warm"]


def test_creates_stay_ahead_after_renames_in_the_directory(nodes):
    """Write a temporary file, rename it over the final name (git, editors, package
    managers): the rename this mount made is applied to what it knows of the directory, so
    the directory stays complete and the next creates are still answered here."""
    a, b = nodes
    d = a.path / "renames"
    d.mkdir()
    (d / "warm").touch()
    for i in range(10):
        (d / f"tmp{i}").write_bytes(b"v1")
        (d / f"tmp{i}").rename(d / "final")  # over the last one, from the second on
        (d / f"new{i}").touch()
    assert _ahead(a)["created_ahead"] >= 21, (_ahead(a), a.stats()["leases"])
    assert not (d / "tmp9").exists() and (d / "final").read_bytes() == b"v1"
    assert sorted(os.listdir(b.path / "renames")) == sorted(
        ["warm", "final"] + [f"new{i}" for i in range(10)])


def test_fsync_makes_creates_durable_and_a_killed_mount_leaves_nothing_half_made(
        cluster, tmp_path):
    a = Mount(cluster.config_path, tmp_path / "k", "leases")
    a.start()
    _leasing(a)
    try:
        d = a.path / "killed"
        d.mkdir()
        (d / "warm").touch()
        for i in range(10):
            (d / f"kept{i}").touch()
        fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
        os.fsync(fd)  # the directory's creates so far: at the manager, durable
        os.close(fd)
        for i in range(200):
            (d / f"maybe{i}").touch()  # some of these may still be queued ...
        os.kill(a.proc.pid, signal.SIGKILL)  # ... when the mount dies
        a.proc.wait(10)
    finally:
        a.stop()
    with pvfs.connect(cluster.config_path) as fs:
        names = set(fs.listdir("/killed"))
    assert {f"kept{i}" for i in range(10)} <= names
    _fsck_clean(cluster)


def test_creates_ahead_can_be_switched_off(cluster, tmp_path):
    m = Mount(cluster.config_path, tmp_path / "off", "leases,create_ahead=0")
    with m:
        d = m.path / "off"
        d.mkdir()
        for i in range(5):
            (d / f"f{i}").touch()
        assert "creates_ahead" not in m.stats()
        assert len(os.listdir(d)) == 5


def test_the_numbers_of_a_session_that_ended_are_held_never_given_out_again(cluster,
                                                                            tmp_path):
    """A mount that ends holding numbers it never used: the manager holds them (a create
    ahead may still claim one) and never delegates them again (daemons/mgr/precreate.py)."""
    m = Mount(cluster.config_path, tmp_path / "pool", "leases")
    with m:
        _leasing(m)
        d = m.path / "pool"
        d.mkdir()
        (d / "one").touch()
        (d / "two").touch()
        unused = _ahead(m)["numbers"]
        assert unused > 0
    deadline = time.monotonic() + 10
    with pvfs.connect(cluster.config_path) as fs:
        while time.monotonic() < deadline:
            st = fs.meta("status")
            if not st["leases"]["holders"]:
                break
            time.sleep(0.1)
        assert st["leases"]["holders"] == 0
        held = set(fs.meta("precreated")["held"])
        assert len(held) >= unused
    m2 = Mount(cluster.config_path, tmp_path / "pool2", "leases")
    with m2:
        _leasing(m2)
        (m2.path / "pool2").mkdir()
        for i in range(20):
            (m2.path / "pool2" / f"f{i}").touch()
        assert _ahead(m2)["created_ahead"] >= 19
        made = {os.stat(m2.path / "pool2" / f"f{i}").st_ino for i in range(20)}
    assert made.isdisjoint(held)
    _fsck_clean(cluster)


def test_a_file_closed_before_its_create_was_sent_is_sent_unopened(nodes, cluster):
    """The manager's count of open handles: 0 for a file created and closed within the
    batch (no close is sent for it), 1 for one still open when the batch went."""
    a, _b = nodes
    d = a.path / "unopened"
    d.mkdir()
    (d / "closed").touch()  # created and closed: both before the batch (ahead_delay=60)
    fd = os.open(d / "open", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    try:
        assert _ahead(a)["closes_saved"] >= 1
        dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
        os.fsync(dfd)  # sends them
        os.close(dfd)
        with pvfs.connect(cluster.config_path) as fs:
            closed = fs.stat("/unopened/closed").st_ino
            still = fs.stat("/unopened/open").st_ino
            assert fs.meta("nfile", ino=closed)["nfile"] == 0
            assert fs.meta("nfile", ino=still)["nfile"] == 1
    finally:
        os.close(fd)


def test_a_file_open_when_its_create_went_tells_its_open_only_when_needed(nodes, cluster):
    """A create sent while its file is open goes unopened, the open kept as one answered
    here (closes.py): closed before anyone needs the count, nothing but the create reaches
    the manager; unlinked by another node while open, the recall tells the open first, so
    the manager keeps the file until it is closed here."""
    a, b = nodes
    d = a.path / "toldlater"
    d.mkdir()
    before = a.stats()["handle_counts"]
    fd = os.open(d / "brief", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    os.fsync(dfd)  # its create goes while it is open
    os.close(fd)
    time.sleep(0.1)  # (closes wait 5 ms for company)
    after = a.stats()["handle_counts"]
    assert after["closes_sent"] == before["closes_sent"]
    assert after["opens_sent"] == before["opens_sent"]
    assert after["opens_cancelled"] - before["opens_cancelled"] == 1

    fd = os.open(d / "kept", os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o644)
    os.write(fd, b"kept data")
    os.fsync(dfd)
    os.close(dfd)
    ino = os.fstat(fd).st_ino
    (b.path / "toldlater" / "kept").unlink()  # recalls A's lease: the open is told first
    try:
        with pvfs.connect(cluster.config_path) as fs:
            assert fs.meta("nfile", ino=ino)["nfile"] == 1
        assert os.pread(fd, 9, 0) == b"kept data"
    finally:
        os.close(fd)
    _fsck_clean(cluster)


def test_a_fenced_mounts_queued_creates_are_refused_not_applied(tmp_path):
    """A mount frozen with creates queued: another node's read waits out its session and
    goes on without them; thawed, the mount's batch is refused (ESTALE), not applied, and
    its files fail with EIO; nothing is half made."""
    c = start_cluster(tmp_path / "fs", lease_term=3.0)
    try:
        a = Mount(c.config_path, tmp_path / "a", "leases,ahead_delay=60")
        b = Mount(c.config_path, tmp_path / "b", "leases")
        with a, b:
            _leasing(a)
            d = a.path / "frozen"
            d.mkdir()
            (d / "warm").touch()
            dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
            os.fsync(dfd)  # "warm" is at the manager
            os.close(dfd)
            fd = os.open(d / "late", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            assert _ahead(a)["pending"] == 1
            os.kill(a.proc.pid, signal.SIGSTOP)
            try:
                assert sorted(os.listdir(b.path / "frozen")) == ["warm"]  # went on
            finally:
                os.kill(a.proc.pid, signal.SIGCONT)
            # Its create goes before its data, and is refused: the write fails with EIO, or,
            # answered write-behind by the C front end (docs/mount.md), the close does.
            with pytest.raises(OSError) as err:
                try:
                    os.write(fd, b"x")
                finally:
                    os.close(fd)
            assert err.value.errno == errno.EIO
            assert _ahead(a)["failed"] == 1
            assert sorted(os.listdir(b.path / "frozen")) == ["warm"]
        _fsck_clean(c)
    finally:
        down(c.config)


def test_unlinks_are_answered_by_the_mount_and_seen_at_once_elsewhere(nodes, cluster):
    a, b = nodes
    d = a.path / "gone"
    d.mkdir()
    for i in range(30):
        (d / f"f{i}").write_bytes(b"data")
    dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    os.fsync(dfd)  # their creates go (their data may stay here: delegations.py)
    os.close(dfd)
    (d / "kept-open").touch()
    fd = os.open(d / "kept-open", os.O_RDONLY)
    before = _ahead(a)
    for i in range(30):
        (d / f"f{i}").unlink()
    (d / "kept-open").unlink()  # open here: waits for the manager
    (d / "brief").touch()
    (d / "brief").unlink()  # made and removed before either was sent: neither is
    after = _ahead(a)
    assert after["unlinked_ahead"] - before["unlinked_ahead"] == 30
    assert after["cancelled"] - before["cancelled"] == 1
    assert os.listdir(d) == []
    assert os.listdir(b.path / "gone") == []  # B's listing recalls A's lease first
    assert os.read(fd, 10) == b""  # unlinked while open: still readable here
    os.close(fd)
    with pvfs.connect(cluster.config_path) as fs:
        assert fs.listdir("/gone") == []
    _fsck_clean(cluster)  # no stripe file left behind, none missing


def test_rmdirs_of_empty_directories_known_here_are_answered_by_the_mount(nodes, cluster):
    """``rm -r`` of a tree this node made: each directory it knows empty under its lease
    goes without waiting, in order behind the creates and unlinks in it."""
    import shutil

    a, b = nodes
    top = a.path / "tree"
    top.mkdir()
    (top / "warm").touch()  # (the first create asks for the delegation)
    for i in range(5):
        sub = top / f"d{i}"
        sub.mkdir()
        (sub / "inner").mkdir()
        for j in range(3):
            (sub / f"f{j}").write_bytes(b"data")
    os.listdir(top)  # (a listing here makes nothing incomplete)
    before = _ahead(a)
    shutil.rmtree(top / "d0")  # its files, "inner" and "d0" itself: all queued here
    assert _ahead(a)["rmdirs_ahead"] - before["rmdirs_ahead"] == 2
    (top / "only-dirs" / "x" / "y").mkdir(parents=True)  # no file made in them
    shutil.rmtree(top / "only-dirs")  # (their parents are asked for once each)
    assert _ahead(a)["rmdirs_ahead"] - before["rmdirs_ahead"] == 5
    (b.path / "tree" / "d1" / "from-b").touch()  # recalls A's lease of d1 (not empty now)
    with pytest.raises(OSError) as exc:
        os.rmdir(top / "d1")
    assert exc.value.errno == errno.ENOTEMPTY
    shutil.rmtree(top)
    assert not (b.path / "tree").exists()  # B's lookup recalls A's lease: all sent first
    with pvfs.connect(cluster.config_path) as fs:
        assert "tree" not in fs.listdir("/")
    assert _ahead(a)["failed_unlinks"] == before["failed_unlinks"]
    _fsck_clean(cluster)


def test_mkdirs_are_answered_by_the_mount_and_created_in_ahead(nodes, cluster):
    """``tar x``: a directory, then files in it, then deeper directories. A leasing mount
    makes each directory ahead under a number the manager reserved for it, creates ahead
    in it at once, and another mount or a native client sees the whole tree as made --
    owner, mode, setgid group, times, link counts -- with nothing half-made (fsck)."""
    a, b = nodes
    top = a.path / "mk"
    top.mkdir()
    os.chmod(top, 0o2775)
    os.chown(top, 0, 4343)
    (top / "warm").touch()  # (the first create asks for the delegation)
    before = _ahead(a)
    for i in range(3):
        sub = top / f"d{i}"
        sub.mkdir(0o750)
        for j in range(4):
            (sub / f"f{j}").write_bytes(b"payload")
        (sub / "deeper").mkdir()
        (sub / "deeper" / "leaf").write_bytes(b"leaf")
    made = _ahead(a)
    assert made["mkdirs_ahead"] - before["mkdirs_ahead"] == 6, (made, a.stats()["leases"])
    assert made["created_ahead"] - before["created_ahead"] == 15
    here = {p: os.stat(top / p) for p in ("d0", "d2/deeper")}
    parent_here = os.stat(top)
    # B's lookup recalls A's lease of "mk": A's queued mkdirs and creates go first
    for i in range(3):
        assert sorted(os.listdir(b.path / "mk" / f"d{i}")) == ["deeper", "f0", "f1", "f2",
                                                               "f3"]
        assert (b.path / "mk" / f"d{i}" / "deeper" / "leaf").read_bytes() == b"leaf"
    for p, st in here.items():
        there = os.stat(b.path / "mk" / p)
        for field in ("st_ino", "st_mode", "st_uid", "st_gid", "st_nlink", "st_size",
                      "st_mtime_ns", "st_ctime_ns"):
            assert getattr(st, field) == getattr(there, field), (p, field)
    assert stat.S_IMODE(here["d0"].st_mode) == 0o2750 and here["d0"].st_gid == 4343
    parent_there = os.stat(b.path / "mk")
    assert (parent_here.st_nlink, parent_here.st_mtime_ns, parent_here.st_size) == \
        (parent_there.st_nlink, parent_there.st_mtime_ns, parent_there.st_size) == \
        (5, parent_here.st_mtime_ns, parent_here.st_size)
    with pvfs.connect(cluster.config_path) as fs:
        assert fs.stat("/mk/d1/deeper/leaf").st_size == 4
    assert _ahead(a)["failed_mkdirs"] == 0 and _ahead(a)["failed"] == 0
    import shutil

    shutil.rmtree(top)
    assert not (b.path / "mk").exists()
    _fsck_clean(cluster)


def test_mkdirs_past_the_numbers_delegated_ask_for_more_after_theirs_landed(nodes):
    """``mkdir -p`` deeper than the numbers delegated at once (pjdfstest's PATH_MAX trees):
    asking for more names the newest directory, made ahead: its mkdir must go first, or the
    manager does not know it (ENOENT), and so do the files' numbers asked for there."""
    import shutil

    a, _ = nodes
    from pvfs.fuse.creates import DIRS_WANT

    before = _ahead(a)
    for rnd in range(2):
        chain = a.path / "deep"
        (a.path / "deep").mkdir()
        for i in range(DIRS_WANT + 8):
            chain = chain / f"l{i}"
            chain.mkdir()
        (chain / "leaf").write_bytes(b"x")
        assert (chain / "leaf").read_bytes() == b"x"
        shutil.rmtree(a.path / "deep")
    after = _ahead(a)
    assert after["mkdirs_ahead"] - before["mkdirs_ahead"] >= 2 * DIRS_WANT
    assert after["failed_mkdirs"] == before["failed_mkdirs"]
