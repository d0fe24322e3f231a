"""Small files through the native API (issue 29): a create is one round trip to the manager
(it walks the parent's path itself), the write of a file created to be written is not
reported to the manager first (iod/sizewatch.py ``release_fresh``), and a close is not
waited for. Each shortcut must leave every answer as exact as before."""

from __future__ import annotations

import errno
import os
import time

import pytest

from pvfs import Stripe


def _iod_watch(fs) -> list[dict]:
    return [fs.iod_call(i, "status")["size_watch"] for i in range(fs.config.niods)]


def _wait_for(check, limit: float = 20.0) -> None:
    deadline = time.monotonic() + limit
    while not check():
        assert time.monotonic() < deadline, "not reached in time"
        time.sleep(0.02)


def test_a_file_created_to_be_written_is_written_without_a_size_report(fs):
    from test_precreate import pool_of

    pool_of(fs, least=8)
    before = _iod_watch(fs)
    data = bytes(range(256)) * 40  # 10,240 bytes: three daemons of a 4 KiB stripe
    with fs.open("/nsf-fresh", "wb", stripe=Stripe(0, 4, 4096)) as f:
        assert f._fresh  # the manager handed out a pooled number, not counted empty
        f.write(data)
    after = _iod_watch(fs)
    assert sum(a["released_fresh"] - b["released_fresh"] for a, b in zip(after, before)) == 3
    assert [a["notices"] for a in after] == [b["notices"] for b in before]  # no report
    assert fs.stat("/nsf-fresh").st_size == len(data)
    with fs.open("/nsf-fresh", "rb") as f:
        assert f.read() == data
    fs.unlink("/nsf-fresh")


def test_the_size_is_cached_after_the_writer_closes(fs):
    """The close of a fresh handle has the manager fetch the size in the background
    (refetch.py): stats of a file written once then hit the cache, as before."""
    from test_precreate import pool_of

    pool_of(fs, least=4)
    fetched = fs.meta("status")["size_cache"]["refetched"]
    with fs.open("/nsf-cached", "wb", stripe=Stripe(0, 4, 4096)) as f:
        f.write(b"q" * 9000)
    # A daemon asked while its write was still being counted declines the promise and is
    # asked again later (refetch.py): wait for the first fetch, then for 1 s without one.
    quiet = [None]

    def settled() -> bool:
        nonlocal fetched
        now = fs.meta("status")["size_cache"]["refetched"]
        if now > fetched:
            quiet[0], fetched = time.monotonic(), now
        return quiet[0] is not None and time.monotonic() - quiet[0] > 1.0

    _wait_for(settled)
    before = fs.meta("status")["size_cache"]
    for _ in range(3):
        assert fs.stat("/nsf-cached").st_size == 9000
    after = fs.meta("status")["size_cache"]
    assert after["hits"] - before["hits"] >= 3 and after["misses"] == before["misses"]
    fs.unlink("/nsf-cached")


def test_a_stat_while_a_fresh_file_is_written_makes_its_next_write_reported(pvfs_cluster, fs):
    """Another client's stat between two writes of a fresh handle renews the daemons'
    promise (the manager caches what it was told): the second write must be reported, or
    the other client's next stat would answer the first write's size."""
    from test_precreate import pool_of

    pool_of(fs, least=4)
    with pvfs_cluster.connect() as other, fs.open("/nsf-raced", "wb") as f:
        assert f._fresh
        f.write(b"a" * 1000)
        assert other.stat("/nsf-raced").st_size == 1000
        assert other.stat("/nsf-raced").st_size == 1000  # from the cache now
        notices = sum(w["notices"] for w in _iod_watch(fs))
        f.write(b"b" * 3000)
        assert sum(w["notices"] for w in _iod_watch(fs)) == notices + 1
        assert other.stat("/nsf-raced").st_size == 4000
    fs.unlink("/nsf-raced")


def test_a_file_opened_to_read_or_that_existed_is_not_fresh(fs):
    with fs.open("/nsf-old", "wb") as f:
        f.write(b"x")
    with fs.open("/nsf-old", "wb") as f:  # O_TRUNC of an existing file: nothing from the pool
        assert not f._fresh
        f.write(b"yy")
    with fs.open("/nsf-old", "rb") as f:
        assert not f._fresh and f.read() == b"yy"
    fs.unlink("/nsf-old")


def test_closes_not_waited_for_are_all_counted(fs):
    """A close leaves at once and its answer is read later: the manager still counts every
    handle closed, and an unlinked file's stripe files go once its last handle closed."""
    base = fs.meta("status")["open_files"]
    files = [fs.open(f"/nsf-close{i}", "wb") for i in range(20)]
    assert fs.meta("status")["open_files"] == base + 20
    for f in files:
        f.close()
    _wait_for(lambda: fs.meta("status")["open_files"] == base)
    held = fs.open("/nsf-close0", "rb")
    fs.unlink("/nsf-close0")
    held.close()
    _wait_for(lambda: fs.meta("status")["open_files"] == base)
    for i in range(1, 20):
        fs.unlink(f"/nsf-close{i}")
    assert fs.data.pool.late_errors == 0


def test_create_and_open_by_path_give_the_errors_a_walk_gives(fs):
    fs.mkdir("/nsf-dir")
    with fs.open("/nsf-dir/file", "wb"):
        pass
    with pytest.raises(FileNotFoundError):
        fs.open("/nsf-missing/file", "wb")
    with pytest.raises(NotADirectoryError):
        fs.open("/nsf-dir/file/below", "wb")
    with pytest.raises(FileNotFoundError):
        fs.open("/nsf-dir/absent", "rb")
    with pytest.raises(IsADirectoryError):
        fs.open("/nsf-dir", "rb")
    with pytest.raises(FileExistsError):
        fs.open("/nsf-dir/file", "xb")
    fs.symlink("/nsf-dir", "/nsf-link")
    with fs.open("/nsf-link/via-link", "wb") as f:  # the parent's path is followed
        f.write(b"z")
    assert fs.stat("/nsf-dir/via-link").st_size == 1
    with pytest.raises(OSError) as err:
        fs.meta("create", name="x", mode=0o644)  # neither a parent nor a path
    assert err.value.errno == errno.EINVAL
    for p in ("/nsf-dir/file", "/nsf-dir/via-link", "/nsf-link"):
        fs.unlink(p)
    fs.rmdir("/nsf-dir")


def _requests(fs) -> dict[str, int]:
    fams = {f["name"]: f for f in fs.meta("metrics")["families"]}
    return {labels["op"]: v for _, labels, v in fams["pvfs_requests_total"]["samples"]}


def test_each_metadata_call_names_its_path_in_one_request(fs):
    """Every path call of the native API is one manager request: the manager walks the
    path (``schema.BY_PATH``), no ``resolve`` first."""
    calls = [
        lambda: fs.mkdir("/nsf-one"),
        lambda: fs.open("/nsf-one/f", "wb").close(),
        lambda: fs.chmod("/nsf-one/f", 0o600),
        lambda: fs.chown("/nsf-one/f", -1, -1),
        lambda: fs.utime("/nsf-one/f"),
        lambda: fs.truncate("/nsf-one/f", 10),
        lambda: fs.access("/nsf-one/f", os.R_OK),
        lambda: fs.setxattr("/nsf-one/f", "user.k", b"v"),
        lambda: fs.getxattr("/nsf-one/f", "user.k"),
        lambda: fs.listxattr("/nsf-one/f"),
        lambda: fs.removexattr("/nsf-one/f", "user.k"),
        lambda: fs.symlink("f", "/nsf-one/s"),
        lambda: fs.readlink("/nsf-one/s"),
        lambda: fs.link("/nsf-one/s", "/nsf-one/hard"),  # the link itself, not its target
        lambda: fs.getstripe("/nsf-one/f"),
        lambda: fs.rename("/nsf-one/f", "/nsf-one/g"),
        lambda: fs.unlink("/nsf-one/g"),
        lambda: fs.unlink("/nsf-one/hard"),
        lambda: fs.unlink("/nsf-one/s"),
        lambda: fs.rmdir("/nsf-one"),
    ]
    for call in calls:
        before = _requests(fs)
        call()
        after = _requests(fs)
        sent = {op: n - before.get(op, 0) for op, n in after.items()
                if n != before.get(op, 0) and op != "metrics"}
        sent.pop("close", None)  # (a close is not waited for: it may land after the next)
        assert len(sent) == 1 and set(sent.values()) == {1}, sent
    assert fs.lstat("/").st_nlink >= 2 and not fs.exists("/nsf-one")


def test_a_call_naming_both_or_neither_is_refused(fs):
    with pytest.raises(OSError) as err:
        fs.meta("unlink", name="x")
    assert err.value.errno == errno.EINVAL
    with pytest.raises(OSError) as err:
        fs.meta("unlink", parent=1, dir="/", name="x")
    assert err.value.errno == errno.EINVAL


def test_a_create_after_the_manager_restarted_is_not_lost_to_a_dead_connection(fresh_cluster):
    """A create is never sent twice (a second copy could answer EEXIST), so it must not go
    out on a pooled connection the manager closed when it stopped: an idle connection is
    checked before reuse, and one owing a close's reply as well (``SocketPool.take``)."""
    from pvfs.cluster.launch import up

    with fresh_cluster.connect() as fs:
        with fs.open("/before", "wb") as f:  # the close's reply is owed on a pooled socket
            f.write(b"x")
        fs.stat("/before")  # and another sits idle
        fresh_cluster.kill("mgr")
        up(fresh_cluster.config)
        with fs.open("/after", "wb") as f:
            f.write(b"y")
        assert fs.stat("/after").st_size == 1 and fs.stat("/before").st_size == 1
