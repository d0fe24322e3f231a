"""Leases (``-o leases``, daemons/mgr/leases.py, fuse/leases.py): two mounts ("two nodes")
whose kernels cache nothing (``attr_timeout=0,entry_timeout=0``), so every stat reaches the
mount, which answers from its leases. A change on one node must be seen at once on the other:
the manager recalls the other's lease before it makes the change. With recalls switched off
(``lease_recall = false``, a test switch) the other node answers stale, which shows these
tests can fail. The change test runs again with the kernel's default timeouts, under which
the kernel keeps leased attributes until the session's end, and with the default ones, under
which it keeps leased names (and missing names) too: the recall must drop the kernel's copies
before it is answered."""

from __future__ import annotations

import os
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

OPTS = "leases,attr_timeout=0,entry_timeout=0"
KERNEL_CACHING = "leases,entry_timeout=0"  # the kernel keeps leased attributes (kernel_timeout)
DEFAULTS = "leases"  # ... and leased names, missing ones too (name_timeout)


def _two_nodes(cluster, tmp_path, opts=OPTS):
    a = Mount(cluster.config_path, tmp_path / "a", opts)
    b = Mount(cluster.config_path, tmp_path / "b", opts)
    return a, b


@pytest.fixture(scope="module")
def leasing_cluster(tmp_path_factory):
    cluster = start_cluster(tmp_path_factory.mktemp("leases"))
    try:
        yield cluster
    finally:
        down(cluster.config)


@pytest.fixture
def nodes(leasing_cluster, tmp_path):
    a, b = _two_nodes(leasing_cluster, tmp_path)
    with a, b:
        yield a, b


@pytest.fixture(params=[OPTS, KERNEL_CACHING, DEFAULTS])
def any_nodes(leasing_cluster, tmp_path, request):
    a, b = _two_nodes(leasing_cluster, tmp_path, request.param)
    with a, b:
        yield a, b


def _leases(m: Mount) -> dict:
    return m.stats()["leases"]


def _hits(m: Mount) -> int:
    """Lookups and getattrs the mount answered from its leases: in Python (``lease_hits``),
    or in the C front end's workers (a name found, a leased file's or directory's
    attributes)."""
    st = m.stats()
    front = st["frontend"]
    return st["leases"]["lease_hits"] + front.get("found_here", 0) + \
        front.get("file_attrs_here", 0) + front.get("attrs_here", 0)


def _no_such_names(m: Mount) -> int:
    """Lookups of missing names the mount answered from its leases: in Python, or in the C
    front end's workers (``missing_here``)."""
    st = m.stats()
    return st["leases"]["lease_negative_hits"] + st["frontend"].get("missing_here", 0)


def test_stats_and_missing_names_are_answered_by_the_mount(nodes):
    a, _b = nodes
    d = a.path / "own"
    d.mkdir()
    for i in range(20):
        (d / f"f{i}").write_bytes(b"x" * i)
    hits, negatives = _hits(a), _no_such_names(a)
    for i in range(20):
        assert (d / f"f{i}").stat().st_size == i
        assert not (d / f"g{i}").exists()
    # a directory this mount made is complete: the missing names need no manager
    assert _no_such_names(a) - negatives >= 20
    assert _hits(a) > hits
    assert _leases(a)["valid"]


def test_a_change_on_one_node_is_seen_at_once_on_the_other(any_nodes):
    a, b = any_nodes
    d = f"d-{a.options.replace(',', '-').replace('=', '')}"
    (a.path / d).mkdir()
    f_a = a.path / d / "f"
    f_a.write_bytes(b"12345")
    # The write's size report recalled the file's leases; until the manager has its size
    # again (refetch.py: it then leases it back to A) a lookup is answered unleased, and
    # the kernel may keep that answer attr_timeout long, as without leases.
    deadline = time.monotonic() + 5
    while _leases(a)["pushed"] < 1 and time.monotonic() < deadline:
        time.sleep(0.02)
    f_b = b.path / d / "f"
    assert f_b.stat().st_size == 5
    assert not (b.path / d / "new").exists()
    f_b.stat()  # B holds the file's and the directory's leases now
    os.chmod(f_a, 0o600)
    assert (f_b.stat().st_mode & 0o777) == 0o600
    (a.path / d / "new").write_bytes(b"")  # B had a lease on "no such name"
    assert (b.path / d / "new").exists()
    with open(f_a, "ab") as f:  # the size, changed through the I/O daemons
        f.write(b"678")
    assert f_b.stat().st_size == 8
    os.unlink(f_a)
    with pytest.raises(FileNotFoundError):
        f_b.stat()
    (a.path / d / "new").rename(a.path / d / "moved")
    assert not (b.path / d / "new").exists()
    assert (b.path / d / "moved").exists()
    assert _leases(b)["recalls_received"] >= 4


def test_names_listed_by_readdir_are_leased(nodes):
    a, b = nodes
    d = a.path / "listed"
    d.mkdir()
    for i in range(10):
        (d / f"n{i}").write_bytes(b"")
    assert sorted(os.listdir(b.path / "listed")) == [f"n{i}" for i in range(10)]
    negatives = _no_such_names(b)
    assert not (b.path / "listed" / "absent").exists()
    assert _no_such_names(b) > negatives
    (d / "absent").write_bytes(b"")  # recalls B's listing
    assert (b.path / "listed" / "absent").exists()


def test_without_recalls_the_other_node_answers_stale(tmp_path):
    """The test switch: the same steps, the manager calling no one back."""
    cluster = start_cluster(tmp_path / "fs", lease_recall=False)
    try:
        a, b = _two_nodes(cluster, tmp_path)
        with a, b:
            f_a = a.path / "f"
            f_a.write_bytes(b"1")
            f_b = b.path / "f"
            assert (f_b.stat().st_mode & 0o777) != 0o600
            os.chmod(f_a, 0o600)
            assert (f_b.stat().st_mode & 0o777) != 0o600  # stale: nobody recalled B
    finally:
        down(cluster.config)


def test_a_holder_that_stops_answering_is_fenced_and_the_change_goes_on(tmp_path):
    """A mount frozen (SIGSTOP) holds a lease: another node's change waits at most the
    session's term, then is made; the frozen mount, thawed, answers from the manager."""
    import signal
    import time

    cluster = start_cluster(tmp_path / "fs", lease_term=3.0)
    try:
        a, b = _two_nodes(cluster, tmp_path)
        with a, b:
            (a.path / "f").write_bytes(b"1")
            assert (b.path / "f").stat().st_size == 1
            os.kill(b.proc.pid, signal.SIGSTOP)
            try:
                os.chmod(a.path / "f", 0o600)  # returns: the change did not wait for B
            finally:
                os.kill(b.proc.pid, signal.SIGCONT)
            # fenced: B forgets its leases and asks again (no error reaches the caller)
            assert (b.path / "f").stat().st_mode & 0o777 == 0o600
            deadline = time.monotonic() + 10
            while not _leases(b)["valid"] and time.monotonic() < deadline:
                time.sleep(0.2)
            assert _leases(b)["valid"]  # registered again
            os.chmod(a.path / "f", 0o640)
            assert (b.path / "f").stat().st_mode & 0o777 == 0o640
    finally:
        down(cluster.config)


def test_a_written_file_is_leased_again_once_the_manager_has_its_size(nodes):
    """The writer gives its lease of the file up before the write leaves (``writing``), so
    the write's report calls nobody back; the manager's refetch gives the lease back with
    the new attributes (daemons/mgr/refetch.py), so a later stat is answered here."""
    import time

    a, b = nodes
    d = a.path / "written"
    d.mkdir()
    start = _leases(a)
    for i in range(5):
        with open(d / f"w{i}", "wb") as f:
            f.write(b"w" * 3901)
            f.flush()
            os.fsync(f.fileno())  # (a close alone keeps a new file's data here)
    deadline = time.monotonic() + 5
    while _leases(a)["pushed"] - start["pushed"] < 5 and time.monotonic() < deadline:
        time.sleep(0.05)
    before, hits = _leases(a), _hits(a)
    assert before["pushed"] - start["pushed"] >= 5
    assert before["writing"] - start["writing"] >= 5  # given up, not called back:
    assert before["recalls_received"] - start["recalls_received"] <= 2  # (a report may
    # overtake the word, rarely: daemons/mgr/leases.py, settle)
    for i in range(5):
        assert (d / f"w{i}").stat().st_size == 3901
    assert _hits(a) - hits >= 5
    with open(b.path / "written" / "w0", "ab") as f:  # another node grows one
        f.write(b"more")
    assert (d / "w0").stat().st_size == 3905


def test_read_only_opens_are_answered_here_and_kept_when_another_node_unlinks(nodes):
    """open_ahead (fuse/closes.py): an open of a leased file is answered by the
    mount and its count queued; its close cancels both. An open held while another node
    removes the file's last name reaches the manager first (the recall of the file's lease
    sends it), so the file keeps its data until it is closed here."""
    import time

    a, b = nodes
    (b.path / "opened").mkdir()
    data = b"keep me" * 100
    for name in ("f", "g"):
        (b.path / "opened" / name).write_bytes(data)  # written by B: A caches nothing of it
    f, g = a.path / "opened" / "f", a.path / "opened" / "g"
    deadline = time.monotonic() + 5
    while g.stat().st_size != len(data) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert f.stat().st_size == len(data)  # A holds both files' attributes now
    before = a.stats()["handle_counts"]
    assert g.read_bytes() == data
    after = a.stats()["handle_counts"]
    assert after["opens_ahead"] - before["opens_ahead"] == 1
    assert after["opens_cancelled"] - before["opens_cancelled"] == 1  # never told
    with open(f, "rb") as held:  # answered here: the manager has not counted it ...
        assert a.stats()["handle_counts"]["opens_ahead"] - before["opens_ahead"] == 2
        os.unlink(b.path / "opened" / "f")  # ... when another node removes its only name
        assert not f.exists()
        assert held.read() == data  # the recall told it first: the data stayed
    assert a.stats()["handle_counts"]["opens_sent"] - before["opens_sent"] == 1


def test_read_write_opens_are_answered_here_and_their_writes_seen_elsewhere(nodes):
    """An open for writing without O_TRUNC (mdtest's read phase opens O_RDWR) needs of the
    manager only its count too: answered here under the file's lease. What is written
    through it reaches the I/O daemons at its close, another node's unlink while it is open
    keeps the data until its close, and an open that truncates still goes to the manager."""
    import time

    a, b = nodes
    (b.path / "rw").mkdir()
    data = b"twelve bytes" * 50
    for name in ("f", "g", "t"):
        (b.path / "rw" / name).write_bytes(data)
    f, g, t = (a.path / "rw" / n for n in ("f", "g", "t"))
    deadline = time.monotonic() + 5
    while any(p.stat().st_size != len(data) for p in (f, g, t)):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    before = a.stats()["handle_counts"]
    with open(g, "r+b") as h:
        assert h.read() == data
        h.seek(0)
        h.write(b"TWELVE")
    after = a.stats()["handle_counts"]
    assert after["opens_ahead"] - before["opens_ahead"] == 1
    with pvfs.connect(a.config_path) as fs, fs.open("/rw/g", "rb") as got:  # no cache
        assert got.read() == b"TWELVE" + data[6:]
    # (g's open went to the manager when its write gave the file's lease up)
    sent = a.stats()["handle_counts"]["opens_sent"]
    with open(f, "r+b") as held:
        assert a.stats()["handle_counts"]["opens_ahead"] - before["opens_ahead"] == 2
        os.unlink(b.path / "rw" / "f")  # the recall tells the open first: the data stay
        assert not f.exists()
        assert held.read() == data
        held.write(b"more")
    assert a.stats()["handle_counts"]["opens_sent"] - sent == 1
    ahead = a.stats()["handle_counts"]["opens_ahead"]
    with open(t, "r+b") as h2:  # O_TRUNC with write access: the manager truncates
        h2.truncate(0)
    os.close(os.open(t, os.O_WRONLY | os.O_TRUNC))
    assert a.stats()["handle_counts"]["opens_ahead"] - ahead == 1  # (only the r+b one)
    with pvfs.connect(a.config_path) as fs:
        assert fs.stat("/rw/t").st_size == 0


def test_a_directory_leased_complete_is_listed_by_the_mount(nodes):
    """``rm -r``, ``find``, ``ls`` of a tree this node made: the listing is answered from the
    lease (``.`` and ``..`` with their inodes), and a change on the other node (a recall)
    shows in the next listing."""
    import subprocess

    a, b = nodes
    d = a.path / "listed-here"
    d.mkdir()
    (d / "sub").mkdir()
    names = {f"file-with-a-longer-name-{i:04d}" for i in range(300)}  # several pages
    for n in names:
        (d / n).write_bytes(b"")
    before = _leases(a)["listings_here"]
    assert set(os.listdir(d)) == names | {"sub"}
    assert _leases(a)["listings_here"] > before
    dots = {}
    for line in subprocess.run(["ls", "-a1i", str(d / "sub")], check=True, capture_output=True,
                               text=True).stdout.split("\n"):
        if line.strip():
            ino, name = line.split()
            dots[name] = int(ino)
    assert dots == {".": os.stat(d / "sub").st_ino, "..": os.stat(d).st_ino}
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)  # one handle, listed twice (a rewind)
    try:
        assert set(os.listdir(fd)) == names | {"sub"}
        (b.path / "listed-here" / "from-b").write_bytes(b"")  # recalls A's lease of it
        (b.path / "listed-here" / min(names)).unlink()
        assert set(os.listdir(fd)) == (names - {min(names)}) | {"sub", "from-b"}
    finally:
        os.close(fd)
    assert set(os.listdir(d)) == (names - {min(names)}) | {"sub", "from-b"}
