"""The manager's size cache against real daemons (daemons/mgr/sizecache.py,
daemons/iod/sizewatch.py): a stat is answered without asking the I/O daemons, and never
with a size older than a write, truncate or utime that returned before it."""

from __future__ import annotations

import signal

from pvfs import Stripe


def size_cache(fs) -> dict:
    return fs.meta("status")["size_cache"]


def pool_settled(fs, limit: float = 20.0) -> None:
    """Wait until the precreate pool holds a whole batch and no refill runs (a create that
    takes a number starts one): the next create takes a watched number. A refill keeps
    every I/O daemon making stripe files, which on a loaded machine can hold a daemon's
    report of a write back past the refetch of the others' reports; that is one change
    still (sizecache.py counts reports per daemon), but a late report drops the cached size
    again, and these tests check a file written once on a quiet file system."""
    import time

    deadline = time.monotonic() + limit
    while True:
        status = fs.meta("status")
        if status["precreated"] >= fs.config.precreate and not status["precreating"]:
            return
        assert time.monotonic() < deadline, "the precreate pool was not refilled"
        time.sleep(0.02)


def assert_stats_are_cached(fs, path: str, size: int) -> None:
    """The first stat may ask the daemons; the five after it are answered from the cache."""
    assert fs.stat(path).st_size == size
    before = size_cache(fs)
    for _ in range(5):
        assert fs.stat(path).st_size == size
    after = size_cache(fs)
    assert after["hits"] - before["hits"] >= 5 and after["misses"] == before["misses"]


def test_a_second_stat_is_answered_from_the_cache(fs):
    with fs.open("/sc-hit", "wb", stripe=Stripe(0, 4, 4096)) as f:
        pool_settled(fs)  # the refill this create started
        f.write(b"a" * 10_000)
    assert_stats_are_cached(fs, "/sc-hit", 10_000)
    fs.unlink("/sc-hit")


def test_a_pooled_file_written_once_over_three_daemons_stays_cached(fs):
    """cp: create (from the pool, watched), one write striped over three daemons (three
    reports of one change), stat. One change is not a hot file: the stats are cached."""
    from test_precreate import pool_of

    pool_of(fs, least=4)
    fetched = size_cache(fs)["refetched"]
    with fs.open("/sc-cp", "wb", stripe=Stripe(0, 4, 4096)) as f:
        pool_settled(fs)  # the refill this create started
        f.write(b"c" * 10_000)
    # (under load a report's background fetch could land among the stats: wait for it, as
    # the neighbours do; a hot file would still miss after it)
    refetches_settled(fs, fetched)
    assert_stats_are_cached(fs, "/sc-cp", 10_000)
    fs.unlink("/sc-cp")


def refetches_settled(fs, fetched: int, limit: float = 10.0) -> None:
    """Wait for the manager's background fetch of a file just written (its close or its
    daemons' reports start one; refetch.py) and until no other follows for 1 s. Under load
    the reports may span two fetches, and a fetch that came while a daemon's write was still
    in progress is made again up to ~1.5 s later."""
    import time

    deadline = time.monotonic() + limit
    quiet_since = None
    while time.monotonic() < deadline:
        now = size_cache(fs)["refetched"]
        if now > fetched:
            quiet_since, fetched = time.monotonic(), now
        elif quiet_since is not None and time.monotonic() - quiet_since > 1.0:
            return
        time.sleep(0.02)


def test_a_file_written_once_is_asked_again_before_anyone_stats_it(fs):
    """Size at the manager (daemons/mgr/refetch.py): the report of the write makes the
    manager fetch the new size in the background, so even the first stat is a hit."""

    pool_settled(fs)  # a create from the pool: its stripe files are watched from the start
    fetched = size_cache(fs)["refetched"]  # (the module's earlier files count too)
    with fs.open("/sc-refetch", "wb", stripe=Stripe(0, 4, 4096)) as f:
        pool_settled(fs)  # the refill this create started
        f.write(b"r" * 9000)
    refetches_settled(fs, fetched)
    before = size_cache(fs)
    assert fs.stat("/sc-refetch").st_size == 9000
    after = size_cache(fs)
    assert after["misses"] == before["misses"] and after["hits"] > before["hits"]
    fs.unlink("/sc-refetch")


def test_a_pooled_create_is_cached_at_once(fs):
    from test_precreate import pool_of

    pool_of(fs, least=4)
    before = size_cache(fs)
    a = fs.meta("create", parent=1, name="sc-pooled", mode=0o644, flags=0)
    st = fs.stat("/sc-pooled")
    assert st.st_size == 0 and st.st_mtime_ns == a["mtime_ns"]
    assert size_cache(fs)["misses"] == before["misses"]      # no daemon was asked
    with fs.open("/sc-pooled", "r+b") as f:
        f.write(b"z" * 5000)
    assert fs.stat("/sc-pooled").st_size == 5000
    fs.unlink("/sc-pooled")


def test_every_write_truncate_and_utime_shows_in_the_next_stat(pvfs_cluster):
    """One connection changes the file, another stats it right after each change returned:
    the stat must never be older than the change (it is, without the daemons' reports)."""
    with pvfs_cluster.connect() as w, pvfs_cluster.connect() as r:
        f = w.open("/sc-race", "wb", stripe=Stripe(0, 4, 1024))
        notices = sum(w.iod_call(i, "status")["size_watch"]["notices"] for i in range(4))
        end = 0
        for i in range(200):
            n = 1 + (i * 7919) % 3000
            f.pwrite(b"x" * n, end)
            end += n
            assert r.stat("/sc-race").st_size == end, f"stale size after write {i}"
            if i % 25 == 24:
                end //= 2
                w.truncate("/sc-race", end)
                assert r.stat("/sc-race").st_size == end, f"stale size after truncate {i}"
        f.close()
        # A file written while it is statted turns hot: not watched, so its writes send
        # (almost) no reports -- one per daemon when it first changed.
        sent = sum(w.iod_call(i, "status")["size_watch"]["notices"] for i in range(4)) - notices
        assert sent <= 32, sent
        w.utime("/sc-race", ns=(1_000_000_000, 2_000_000_000))
        assert r.stat("/sc-race").st_mtime_ns == 2_000_000_000
        with w.open("/sc-race", "r+b") as f:
            f.pwrite(b"y", end)
        st = r.stat("/sc-race")
        assert st.st_size == end + 1 and st.st_mtime_ns > 2_000_000_000
        w.unlink("/sc-race")


def test_a_file_given_its_owner_mode_and_times_after_writing_stays_cached(fs):
    """tar x, cp -p: write once, then chown, chmod, utime, stat. One report (the first
    write); the manager's utime reports nothing back; two fetches in all."""
    fetched = size_cache(fs)["refetched"]
    with fs.open("/sc-tar", "wb", stripe=Stripe(0, 4, 4096)) as f:
        pool_settled(fs)  # the refill this create started
        f.write(b"t" * 3000)
    refetches_settled(fs, fetched)  # (CI at load 10 saw late fetches count as misses)
    reports = sum(fs.iod_call(i, "status")["size_watch"]["notices"] for i in range(4))
    before = size_cache(fs)
    fs.chmod("/sc-tar", 0o640)
    fs.chown("/sc-tar", 1000, 1000)
    fs.utime("/sc-tar", ns=(1_000_000_000, 3_000_000_000))
    st = fs.stat("/sc-tar")
    assert st.st_size == 3000 and st.st_mtime_ns == 3_000_000_000
    assert fs.stat("/sc-tar").st_mode & 0o777 == 0o640
    after = size_cache(fs)
    assert after["misses"] - before["misses"] <= 2, (before, after)
    assert sum(fs.iod_call(i, "status")["size_watch"]["notices"] for i in range(4)) == reports
    with fs.open("/sc-tar", "r+b") as f:        # and a later write still shows at once
        f.pwrite(b"u", 5000)
    assert fs.stat("/sc-tar").st_size == 5001
    fs.unlink("/sc-tar")


def test_a_utime_leaves_the_size_cached_and_the_next_write_reported(fs):
    """The manager's utime of the stripe files brings their shares back, watched again: the
    utime's reply and the next stat ask no daemon, and a later write still shows."""
    fetched = size_cache(fs)["refetched"]
    with fs.open("/sc-utime", "wb", stripe=Stripe(0, 4, 4096)) as f:
        f.write(b"t" * 9000)
    refetches_settled(fs, fetched)  # (a fetch landing after the utime would ask again)
    fs.stat("/sc-utime")
    fs.utime("/sc-utime", ns=(1_000_000_000, 3_000_000_000))
    before = size_cache(fs)
    st = fs.stat("/sc-utime")
    assert (st.st_size, st.st_mtime_ns) == (9000, 3_000_000_000)
    assert size_cache(fs)["misses"] == before["misses"], (before, size_cache(fs))
    with fs.open("/sc-utime", "r+b") as f:
        f.pwrite(b"u", 20000)
    st = fs.stat("/sc-utime")
    assert st.st_size == 20001 and st.st_mtime_ns > 3_000_000_000
    fs.unlink("/sc-utime")


def test_a_utime_of_a_hot_file_is_answered(fs):
    """A file written while statted is hot (not watched): its daemons answer the manager's
    utime with no shares, and the utime still succeeds."""
    with fs.open("/sc-hot", "wb", stripe=Stripe(0, 4, 1024)) as f:
        for i in range(4):
            f.pwrite(b"h" * 5000, i * 5000)
            fs.stat("/sc-hot")
    fs.utime("/sc-hot", ns=(1_000_000_000, 4_000_000_000))
    st = fs.stat("/sc-hot")
    assert (st.st_size, st.st_mtime_ns) == (20000, 4_000_000_000)
    fs.unlink("/sc-hot")


def test_a_restarted_iod_makes_the_manager_forget(fresh_cluster):
    """A restarted daemon has forgotten what it promised to report: its first act is to
    have the manager forget every cached size (else the stat after its write is stale)."""
    from pvfs.cluster.launch import up

    with fresh_cluster.connect() as fs:
        with fs.open("/sc-restart", "wb", stripe=Stripe(0, 4, 4096)) as f:
            f.write(b"r" * 8192)                    # ranks 0 and 1
        assert fs.stat("/sc-restart").st_size == 8192
        assert fs.stat("/sc-restart").st_size == 8192   # cached now
        fresh_cluster.kill("iod2", signal.SIGKILL)
        up(fresh_cluster.config)
        with fs.open("/sc-restart", "r+b") as f:
            f.pwrite(b"s" * 100, 8192)              # rank 2: the restarted daemon
        assert fs.stat("/sc-restart").st_size == 8292
        assert fs.iod_call(2, "status")["size_watch"]["notices"] >= 1


def test_iods_report_only_what_the_manager_asked_to_watch(fs):
    with fs.open("/sc-plain", "wb", stripe=Stripe(0, 4, 4096)) as f:
        f.write(b"p" * 4096)
    ino = fs.stat("/sc-plain").st_ino
    reply = fs.iod_call(0, "size", ino=ino)          # a client's question: no promise
    assert reply["local_size"] == 4096 and reply["watched"] is False
    fs.unlink("/sc-plain")


def test_status_shows_the_cache_and_the_watches(pvfs_cluster, fs, capsys):
    import json

    from pvfs.cli.main import main

    with fs.open("/sc-status", "wb") as f:
        f.write(b"s")
    fs.stat("/sc-status")
    fs.stat("/sc-status")
    capsys.readouterr()
    assert main(["status", "--json", "--config", pvfs_cluster.config.path]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)["daemons"]}
    assert rows["mgr"]["size_cache"]["hits"] >= 1
    assert sum(r["size_watch"]["watched"] for n, r in rows.items() if n != "mgr") >= 1
    fs.unlink("/sc-status")


def test_a_utime_changes_only_the_stripe_files_holding_data(fs):
    """An empty stripe file's mtime does not count (daemons/mgr/stripefiles.py): with the
    shares cached, the manager's utime of a 3,000-byte file over four daemons changes the
    one stripe file that holds it, and the mtime is the one set."""
    fetched = size_cache(fs)["refetched"]
    with fs.open("/sc-one", "wb", stripe=Stripe(0, 4, 4096)) as f:
        f.write(b"o" * 3000)
    refetches_settled(fs, fetched)  # (a fetch landing after the utime would ask again)
    fs.stat("/sc-one")  # (its shares cached)
    before = [fs.iod_call(i, "metrics") for i in range(4)]
    fs.utime("/sc-one", ns=(1_000_000_000, 3_000_000_000))
    after = [fs.iod_call(i, "metrics") for i in range(4)]

    def utimes(m: dict) -> float:
        return sum(v for fam in m["families"] if fam["name"] == "pvfs_requests_total"
                   for _, labels, v in fam["samples"] if labels.get("op") == "utime")
    assert [utimes(a) - utimes(b) for a, b in zip(after, before)] == [1, 0, 0, 0]
    st = fs.stat("/sc-one")
    assert (st.st_size, st.st_mtime_ns) == (3000, 3_000_000_000)
    fs.unlink("/sc-one")
