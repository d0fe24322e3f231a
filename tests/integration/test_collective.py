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


@pytest.mark.parametrize("n", [2, 3])
def test_read_after_synced_write_sees_it(pvfs_cluster, n):
    run_mpi(n, "visibility", pvfs_cluster.config_path)


def test_atomic_mode_is_all_or_nothing(pvfs_cluster):
    run_mpi(3, "atomic", pvfs_cluster.config_path)


def test_random_lock_stress_no_deadlock_nothing_lost(pvfs_cluster):
    out = run_mpi(4, "stress", pvfs_cluster.config_path)
    # The cache was small enough that the run exercised eviction and pinned pages.
    counters = [json.loads(line.split(" ", 1)[1]) for line in out.splitlines()
                if line.startswith("counters")]
    assert counters and all(c["evictions"] > 0 for c in counters)


def test_write_behind_loses_nothing(pvfs_cluster):
    out = run_mpi(3, "write_behind", pvfs_cluster.config_path, "rma,servers")
    counters = json.loads(next(line for line in out.splitlines()
                               if line.startswith("counters")).split(" ", 1)[1])
    assert counters["wb_sent_buffers"] > 0  # stage one really shipped sub-buffers


@pytest.mark.slow
@pytest.mark.parametrize("scenario", ["visibility", "atomic", "stress"])
def test_eight_ranks(pvfs_cluster, scenario):
    run_mpi(8, scenario, pvfs_cluster.config_path, timeout=600)


PAGE = 1024
op = st.one_of(
    st.tuples(st.integers(0, 2), st.just("write"), st.integers(0, 6 * PAGE),
              st.integers(1, 3 * PAGE), st.integers(1, 255)),
    st.tuples(st.integers(0, 2), st.just("read"), st.integers(0, 6 * PAGE),
              st.integers(1, 3 * PAGE), st.just(0)),
    st.tuples(st.integers(0, 2), st.just("sync"), st.just(0), st.just(0), st.just(0)),
)


@settings(max_examples=4, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(op, min_size=1, max_size=25), atomic=st.booleans(),
       slots=st.integers(1, 4))
def test_generated_sequences_agree_with_sequential_model(pvfs_cluster, tmp_path, ops, atomic,
                                                         slots):
    spec = tmp_path / "case.json"
    spec.write_text(json.dumps({"ops": ops, "atomic": atomic, "slots": slots}))
    run_mpi(3, "model", pvfs_cluster.config_path, ALL, str(spec))


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
