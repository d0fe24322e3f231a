"""pvfs.collective under mpiexec: every coordination back end against real daemons.

Each test starts ``mpiexec -n N python collective_mpi.py SCENARIO ...`` (the mpich wheel's
mpiexec, beside the venv's python); the MPI program checks its own results and aborts the
job on the first failure. ``PVFS_COLLECTIVE_DEADLINE`` makes any wait longer than 30 s raise
inside the program (a deadlock fails instead of hanging) and the subprocess timeout backs it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("mpi4py")

PROGRAM = Path(__file__).with_name("collective_mpi.py")
MPIEXEC = Path(sys.executable).with_name("mpiexec")
ALL = "rma,thread,servers"

pytestmark = pytest.mark.skipif(not MPIEXEC.exists(), reason="needs the mpich wheel's mpiexec")


def run_mpi(n: int, scenario: str, config: str, coords: str = ALL, *extra: str,
            timeout: float = 180) -> str:
    env = dict(os.environ, PVFS_COLLECTIVE_DEADLINE="30")
    proc = subprocess.run([str(MPIEXEC), "-n", str(n), sys.executable, str(PROGRAM), scenario,
                           config, coords, *extra], check=False, capture_output=True,
                          text=True,
                          timeout=timeout, env=env)
    assert proc.returncode == 0, f"rc={proc.returncode}\n{proc.stdout}\n{proc.stderr[-4000:]}"
    assert f"OK {scenario}" in proc.stdout
    return proc.stdout


# Every "Done when" property under mpiexec -n 2..8, each run covering all three
# coordinations in one job. The sizes in FAST run on every `make test` without the slow
# marker; the others are marked slow (they still run in `make test`).
SIZES = range(2, 9)
FAST = {"visibility": {2, 3, 4}, "readahead": {2, 4}, "atomic": {2, 3}, "stress": {4}, "write_behind": {2, 3},
        "model": {3}, "stall": {3}}


def sizes(scenario: str, among: Iterable[int] = SIZES) -> list:
    return [pytest.param(n, id=f"n{n}",
                         marks=() if n in FAST[scenario] else (pytest.mark.slow,))
            for n in among]


@pytest.mark.parametrize("n", sizes("stall", [3]))
def test_a_live_load_is_waited_for_and_a_stalled_one_read_around(pvfs_cluster, n):
    # issue 32: one file read per page while the loader is alive, the bound otherwise
    run_mpi(n, "stall", pvfs_cluster.config_path, timeout=300)


@pytest.mark.parametrize("n", sizes("visibility"))
def test_read_after_synced_write_sees_it(pvfs_cluster, n):
    run_mpi(n, "visibility", pvfs_cluster.config_path, timeout=300)


@pytest.mark.parametrize("n", sizes("readahead"))
def test_read_after_synced_write_sees_it_with_read_ahead(pvfs_cluster, n):
    run_mpi(n, "readahead", pvfs_cluster.config_path, timeout=300)


@pytest.mark.parametrize("n", sizes("atomic"))
def test_atomic_mode_is_all_or_nothing(pvfs_cluster, n):
    run_mpi(n, "atomic", pvfs_cluster.config_path, timeout=300)


@pytest.mark.parametrize("n", sizes("stress"))
def test_random_lock_stress_no_deadlock_nothing_lost(pvfs_cluster, n):
    out = run_mpi(n, "stress", pvfs_cluster.config_path, timeout=600)
    # The caches were small enough that the run exercised eviction (counters summed over
    # the clients, one line per coordination).
    counters = [json.loads(line.split(" ", 1)[1]) for line in out.splitlines()
                if line.startswith("counters")]
    assert counters and all(c["evictions"] > 0 for c in counters)


def test_rma_gets_waited_for_by_their_requests_see_every_write(pvfs_cluster, monkeypatch):
    # issue 32: PVFS_COLLECTIVE_RGET=1 waits for remote reads by testing MPI_Rget requests
    # between sleeps instead of a Flush that polls a core (rma's and servers' data plane)
    monkeypatch.setenv("PVFS_COLLECTIVE_RGET", "1")
    run_mpi(3, "visibility", pvfs_cluster.config_path, "rma,servers", timeout=300)
    out = run_mpi(4, "stress", pvfs_cluster.config_path, "rma,servers", timeout=600)
    counters = [json.loads(line.split(" ", 1)[1]) for line in out.splitlines()
                if line.startswith("counters")]
    assert counters and all(c["evictions"] > 0 and c["remote_gets"] > 0 for c in counters)


def test_rma_lock_words_waited_for_by_their_requests_keep_locking(pvfs_cluster, monkeypatch):
    # issue 32: PVFS_COLLECTIVE_RMA_LOCK_REQ=1 takes rma's fetch-and-ops on the lock words
    # with MPI_Rget_accumulate tested between sleeps (compare-and-swap still flushes)
    monkeypatch.setenv("PVFS_COLLECTIVE_RMA_LOCK_REQ", "1")
    monkeypatch.setenv("PVFS_COLLECTIVE_RGET", "1")
    run_mpi(3, "atomic", pvfs_cluster.config_path, "rma", timeout=300)
    out = run_mpi(4, "stress", pvfs_cluster.config_path, "rma", timeout=600)
    counters = [json.loads(line.split(" ", 1)[1]) for line in out.splitlines()
                if line.startswith("counters")]
    assert counters and all(c["evictions"] > 0 for c in counters)


@pytest.mark.parametrize("n", sizes("write_behind"))
def test_write_behind_loses_nothing(pvfs_cluster, n):
    out = run_mpi(n, "write_behind", pvfs_cluster.config_path, timeout=300)
    counters = [json.loads(line.split(" ", 1)[1]) for line in out.splitlines()
                if line.startswith("counters")]
    assert counters and all(c["wb_sent_buffers"] > 0 for c in counters)  # stage one shipped
    # Full pages were written early, and the small stage two overflowed.
    assert sum(c["wb_early_pages"] for c in counters) > 0
    assert sum(c["evict_wb_evicted_pages"] for c in counters) > 0


PAGE = 1024
op = st.one_of(  # (rank mod the clients, op, offset, length, byte value)
    st.tuples(st.integers(0, 7), st.just("write"), st.integers(0, 6 * PAGE),
              st.integers(1, 3 * PAGE), st.integers(1, 255)),
    st.tuples(st.integers(0, 7), st.just("read"), st.integers(0, 6 * PAGE),
              st.integers(1, 3 * PAGE), st.just(0)),
    st.tuples(st.integers(0, 7), st.just("sync"), st.just(0), st.just(0), st.just(0)),
)


@pytest.mark.parametrize("n", sizes("model", [2, 3, 5, 8]))  # ~3 s per example and size
@settings(max_examples=4, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(op, min_size=1, max_size=25), atomic=st.booleans(),
       slots=st.integers(1, 4))
def test_generated_sequences_agree_with_sequential_model(pvfs_cluster, tmp_path, n, ops,
                                                         atomic, slots):
    spec = tmp_path / "case.json"
    spec.write_text(json.dumps({"ops": ops, "atomic": atomic, "slots": slots}))
    run_mpi(n, "model", pvfs_cluster.config_path, ALL, str(spec), timeout=300)


@pytest.mark.slow
def test_bench_collective_json_shape(pvfs_cluster):
    """The CLI end to end on a small sliding window: one result per method, the issue's keys."""
    admin = Path(sys.executable).with_name("pvfs-admin")
    proc = subprocess.run([str(admin), "--config", pvfs_cluster.config_path, "bench",
                           "collective", "--use-config", "--only", "sliding_window",
                           "--window-ranks", "2", "--json"], capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(proc.stdout)["results"]
    assert {r["method"] for r in results} == {"independent", "rma", "thread", "servers"}
    for r in results:
        assert {"benchmark", "method", "ranks", "mib_s", "fs_writes"} <= set(r)
        assert r["ranks"] == 2 and r["mib_s"] > 0
    by = {r["method"]: r for r in results}
    # The group cache reads each chunk from pvfs once; independent reads it once per rank.
    assert by["rma"]["fs_reads"] < by["independent"]["fs_reads"]
    assert by["rma"]["locks"] > 0 and by["independent"]["locks"] == 0


@pytest.mark.slow
def test_bench_window_on_emulated_disks_cold_and_warm():
    """``--storage emulated:... --cold`` end to end: the private cluster's I/O daemons run
    emulated disks, and a cold window reads every chunk from the modelled disk while a warm
    one (the file just written, 640 KiB per daemon in a 1 MiB cache) reads none."""
    from pvfs.bench.collective.drive import WINDOW, private_cluster, run_job, storage_table

    with private_cluster(storage=storage_table("emulated:ide-2000", 1 << 20)) as config:
        opts = {"benchmark": "sliding_window", "method": "independent", **WINDOW}
        warm = run_job(config, 1, opts, timeout=300)
        cold = run_job(config, 1, {**opts, "cold": True}, timeout=300)
    size = WINDOW["loops"] * WINDOW["chunk"]
    assert warm["disk"] is not None and warm["disk"]["miss_bytes"] == 0
    assert warm["disk"]["hit_bytes"] >= size and not warm["cold"]
    assert cold["cold"] and cold["disk"]["miss_bytes"] >= size
    assert cold["disk"]["busy_s"] > 0
