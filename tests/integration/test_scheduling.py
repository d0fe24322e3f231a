"""Each of opt1..opt4 serves a mixed set of concurrent jobs with the right bytes, and the
statistics the daemons expose match what was sent (issue 2)."""

from __future__ import annotations

import random
import threading

import pytest
from conftest import schedulers_kept

from pvfs import Stripe, schedulers

ALGOS = list(schedulers.FIXED)


def set_algorithm(fs, algo: str) -> None:
    for i in range(fs.config.niods):
        assert fs.iod_call(i, "sched_set", algorithm=algo)["algorithm"] == algo


@pytest.fixture
def kept_schedulers(pvfs_cluster):
    """What a test sets on the module's shared daemons is undone, even when the test fails."""
    with schedulers_kept(pvfs_cluster.config_path):
        yield


@pytest.mark.parametrize("algo", ALGOS)
def test_algorithm_serves_mixed_concurrent_jobs(pvfs_cluster, kept_schedulers, algo):
    with pvfs_cluster.connect() as fs:
        set_algorithm(fs, algo)
        path = f"/sched-{algo}"
        base = random.Random(algo).randbytes(2 << 20)
        with fs.open(path, "wb", stripe=Stripe(0, 4, 16384)) as f:
            f.write(base)
        for i in range(4):
            fs.iod_call(i, "stats", reset=True)
        ino = fs.stat(path).st_ino
        errors: list[BaseException] = []
        sent = {"reads": 0, "writes": 0, "read_bytes": 0, "write_bytes": 0}
        lock = threading.Lock()

        def worker(k: int) -> None:
            rng = random.Random(k)
            try:
                with pvfs_cluster.connect() as conn, conn.open(path, "r+b") as f:
                    for j in range(6):
                        # Disjoint 64 KiB slot per (worker, step): reads see base or own writes.
                        slot = (k * 6 + j) * 65536
                        if rng.random() < 0.5:
                            assert f.pread(65536, slot) == base[slot:slot + 65536]
                            kind, n = "reads", 65536
                        else:
                            data = bytes([k]) * 65536
                            f.pwrite(data, slot)
                            assert f.pread(65536, slot) == data
                            kind, n = "writes", 65536
                        with lock:
                            sent[kind] += 1
                            sent["read_bytes" if kind == "reads" else "write_bytes"] += n
                            if kind == "writes":
                                sent["reads"] += 1
                                sent["read_bytes"] += n
            except BaseException as exc:  # noqa: BLE001 (reported below)
                errors.append(exc)

        threads = [threading.Thread(target=worker, args=(k,)) for k in range(5)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        stats = [fs.iod_call(i, "stats") for i in range(4)]
        total = {k: sum(s["counters"][k] for s in stats)
                 for k in ("read_requests", "write_requests", "bytes_read", "bytes_written")}
        # A 64 KiB request on 16 KiB units over 4 daemons is one job on each daemon.
        assert total["read_requests"] == 4 * sent["reads"]
        assert total["write_requests"] == 4 * sent["writes"]
        assert total["bytes_read"] == sent["read_bytes"]
        assert total["bytes_written"] == sent["write_bytes"]
        per_file = [s["files"][str(ino)] for s in stats]
        assert sum(f["total_requests"] for f in per_file) == 4 * (sent["reads"] + sent["writes"])
        assert sum(f["total_bytes"] for f in per_file) == sent["read_bytes"] + sent["write_bytes"]
        assert all(f["N_req_o"] == 0 for f in per_file)  # nothing in service any more
        assert all(s["engine"]["algorithm"] == algo for s in stats)
        fs.unlink(path)


def test_in_service_statistics_and_nfile(pvfs_cluster):
    """N_file comes from the manager's open counts."""
    with pvfs_cluster.connect() as fs:
        with fs.open("/nfile", "w+b", stripe=Stripe(0, 1, 4096)) as f, fs.open("/nfile", "rb"):
            f.write(b"z" * 10000)
            stats = fs.iod_call(0, "stats")
            entry = stats["files"][str(f.ino)]
            assert entry["N_file"] == 2
            assert entry["total_requests"] >= 1 and entry["total_bytes"] >= 10000
        fs.unlink("/nfile")


def test_unknown_algorithm_is_refused(fs):
    with pytest.raises(OSError) as exc:
        fs.iod_call(0, "sched_set", algorithm="fifo")
    assert exc.value.errno == 22


def test_opt4_gather_is_reported_and_set_at_run_time(fs):
    """The config's [scheduler] gather (default GATHER_S) is what sched_get reports; sched_set
    changes it on a running daemon and refuses values out of range."""
    from pvfs.config import GATHER_S

    assert fs.iod_call(0, "sched_get")["gather"] == pytest.approx(GATHER_S)
    try:
        r = fs.iod_call(0, "sched_set", algorithm="opt4", gather=0.05)
        assert r["algorithm"] == "opt4" and r["gather"] == pytest.approx(0.05)
        with pytest.raises(OSError) as exc:
            fs.iod_call(0, "sched_set", algorithm="opt4", gather=-1)
        assert exc.value.errno == 22
        assert fs.iod_call(0, "sched_get")["gather"] == pytest.approx(0.05)
    finally:
        fs.iod_call(0, "sched_set", algorithm="opt1", gather=GATHER_S)
