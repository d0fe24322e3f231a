"""Replays against pvfs (native API, and a mount when one is available) match a local
directory byte for byte."""

from __future__ import annotations

from pathlib import Path

import pytest

from pvfs.traces.generators import NAMES, generate
from pvfs.traces.metrics import comparable
from pvfs.traces.replay import ReplayOptions, open_target, run_local

# Small enough that the whole module runs in seconds on two cores.
SMALL: dict[str, dict[str, object]] = {
    "thesis": {"sizes": "16K"},
    "single": {"sizes": "64K"},
    "strided": {"sizes": "64K"},
    "random16": {"sizes": "64K"},
    "random32": {"sizes": "64K"},
    "lu": {"n": 48, "slabs": 4},
    "cholesky": {"panels": 12, "cols_min": 2, "cols_max": 4},
    "db2": {"scale": 0.0001, "lookups": 4, "queries": "1,2,3"},
    "titan": {"grid": 4, "times": 2, "chunk": 4096, "queries": 2},
    "mining": {"db": 32 << 10, "passes": 2, "req": 16 << 10},
    "pgrep": {"files": 3, "file_min": 4 << 10, "file_max": 16 << 10},
    "btio": {"n": 4, "dumps": 2},
    "flash": {"blocks": 2, "vary": 1, "nxb": 4},
    "s3d": {"nx": 3},
}


@pytest.fixture(scope="module")
def cluster(pvfs_cluster):
    return pvfs_cluster


@pytest.mark.parametrize("name", NAMES)
def test_native_matches_local(name: str, cluster, tmp_path: Path) -> None:
    trace = generate(name, 4, SMALL[name], seed=2)
    opts = ReplayOptions(verify=True)
    native = run_local(trace, f"pvfs://{cluster.config_path}?root=/replay/{name}", opts)
    local = run_local(trace, str(tmp_path / "local"), opts)
    assert native["errors"] == [] and native["verify_errors"] == 0
    assert comparable(native) == comparable(local)
    assert all(native["digests"].values())


def test_native_target_basics(cluster) -> None:
    with open_target(f"pvfs://{cluster.config_path}?root=/basics") as target:
        target.makedirs("a/b")
        h = target.open("a/b/f", 2 | 4)  # Flag.WR | Flag.CREAT
        h.pwrite(b"hello", 10)
        h.write_list([(0, 2), (20, 3)], b"xyzzy")
        h.close()
        assert target.size("a/b/f") == 23
        h = target.open("a/b/f", 1)
        assert h.pread(5, 10) == b"hello"
        assert h.read_list([(0, 2), (20, 3)]) == b"xyzzy"
        h.close()
        target.remove("a/b/f")
        target.remove("a/b/f")  # removing a missing file is fine
        assert target.size("a/b/f") is None


def test_native_counters_when_daemons_report_them(fresh_cluster) -> None:
    # a fresh cluster: few files, so the stats reply stays small
    trace = generate("mining", 2, SMALL["mining"])
    res = run_local(trace, f"pvfs://{fresh_cluster.config_path}?root=/counters",
                    ReplayOptions())
    assert res["counters"] is not None and len(res["counters"]["after"]) >= 1
    delta = res["counters"]["delta"]
    moved = sum(d.get("counters", {}).get("bytes_read", 0) for d in delta)
    assert moved == res["bytes_read"]


@pytest.mark.parametrize("name", ["btio", "db2", "lu"])
def test_mount_matches_local(name: str, pvfs_mount, tmp_path: Path) -> None:
    path = pvfs_mount.path
    trace = generate(name, 4, SMALL[name], seed=2)
    opts = ReplayOptions(verify=True)
    mounted = run_local(trace, f"mount:{Path(str(path)) / 'replay' / name}", opts)
    local = run_local(trace, str(tmp_path / "local"), opts)
    assert comparable(mounted) == comparable(local)


def test_mpiexec_on_pvfs_matches_local(cluster, tmp_path: Path) -> None:
    import json
    import shutil
    import subprocess
    import sys

    pytest.importorskip("mpi4py")
    mpiexec = Path(sys.executable).parent / "mpiexec"
    exe = str(mpiexec) if mpiexec.exists() else shutil.which("mpiexec")
    if exe is None:
        pytest.skip("no mpiexec")
    spec = f"pvfs://{cluster.config_path}?root=/mpi"
    proc = subprocess.run([exe, "-n", "4", sys.executable, "-m", "pvfs.traces", "replay",
                           "--workload", "s3d", "--param", "nx=3", "--procs", "4", "--seed", "2",
                           "--target", spec, "--json", "--verify"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    mpi = json.loads(proc.stdout)
    local = run_local(generate("s3d", 4, SMALL["s3d"], seed=2), str(tmp_path / "l"),
                      ReplayOptions(verify=True))
    assert mpi["runner"] == "mpi"
    assert comparable(mpi) == comparable(local)
