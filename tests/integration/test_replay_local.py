"""Replays against local directories: every generator, the samples, MPI against local."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import pvfs.traces
from pvfs.traces import format as fmt
from pvfs.traces.cli import main
from pvfs.traces.format import FileEntry, Flag, Op, Record, Trace
from pvfs.traces.generators import NAMES, generate
from pvfs.traces.importers import load_any
from pvfs.traces.metrics import comparable
from pvfs.traces.replay import ReplayOptions, run_local

SMALL: dict[str, dict[str, object]] = {
    "thesis": {"sizes": "16K,64K"},
    "single": {"sizes": "64K"},
    "strided": {"sizes": "64K"},
    "random16": {"sizes": "64K"},
    "random32": {"sizes": "64K"},
    "lu": {"n": 64, "slabs": 6, "req": 4096},
    "cholesky": {"panels": 24, "cols_min": 2, "cols_max": 6},
    "db2": {"scale": 0.0002, "lookups": 8},
    "titan": {"grid": 6, "times": 2, "chunk": 4096, "queries": 3},
    "mining": {"db": 64 << 10, "passes": 2, "req": 16 << 10},
    "pgrep": {"files": 4, "file_min": 8 << 10, "file_max": 32 << 10, "mode": "blocks"},
    "btio": {"n": 6, "dumps": 3, "readback": True},
    "flash": {"blocks": 3, "vary": 1, "nxb": 4},
    "s3d": {"nx": 4},
}
SAMPLES = Path(pvfs.traces.__file__).parent / "samples"


def check_clean(result: dict) -> None:
    assert result["errors"] == []
    assert result["verify_errors"] == 0
    assert result["short_reads"] == 0
    assert result["digests"] and all(result["digests"].values())


@pytest.mark.parametrize("name", NAMES)
def test_generator_replays_identically_on_two_directories(name: str, tmp_path: Path) -> None:
    trace = generate(name, 4, SMALL[name], seed=1)
    opts = ReplayOptions(verify=True)
    a = run_local(trace, str(tmp_path / "a"), opts)
    # The same trace through its msgpack form, on another directory spelled as a mount.
    fmt.save(trace, tmp_path / "t.mpk")
    b = run_local(fmt.load(tmp_path / "t.mpk"), f"mount:{tmp_path / 'b'}", opts)
    check_clean(a)
    assert comparable(a) == comparable(b)
    assert a["procs"] == 4 and a["app_service_time"] >= a["mean_task_service_time"] > 0
    for name_, digest in a["digests"].items():  # the digests are of the real files
        import hashlib

        assert hashlib.sha256((tmp_path / "a" / name_).read_bytes()).hexdigest() == digest


@pytest.mark.parametrize("sample", ["mambo-small.txt", "darshan-dxt-small.txt",
                                    "strace-small.txt"])
def test_imported_samples_replay(sample: str, tmp_path: Path) -> None:
    trace = load_any(SAMPLES / sample)
    res = run_local(trace, str(tmp_path / "a"), ReplayOptions(verify=True, think=True,
                                                             think_scale=0.01))
    assert res["errors"] == [] and res["verify_errors"] == 0
    assert res["bytes_read"] + res["bytes_written"] > 0


def test_replay_reports_failures_and_finishes(tmp_path: Path, capsys) -> None:
    # Rank 0 opens a file that does not exist without creating it; rank 1 carries on
    # past the barrier instead of hanging, and the failure is reported.
    trace = Trace(nprocs=2, files=[FileEntry(0, "missing"), FileEntry(1, "out")], records=[
        Record(0, 0, Op.OPEN, 0, 0, 0, Flag.RD),
        Record(0, 0, Op.READ, 0, 0, 10),
        Record(0, 0, Op.BARRIER, -1, 0, 0),
        Record(1, 0, Op.BARRIER, -1, 0, 0),
        Record(1, 0, Op.WRITE, 1, 0, 100),
    ])
    res = run_local(trace, str(tmp_path / "a"))
    assert len(res["errors"]) == 1 and "missing" in res["errors"][0]
    assert res["bytes_written"] == 100
    fmt.save(trace, tmp_path / "t.trace")
    code = main(["replay", "--trace", str(tmp_path / "t.trace"), "--target", str(tmp_path / "b")])
    assert code == 1
    assert "error:" in capsys.readouterr().out


def test_thesis_command_prints_three_metrics(tmp_path: Path, capsys) -> None:
    png = tmp_path / "thesis.png"
    code = main(["replay", "--workload", "thesis", "--procs", "8", "--param", "sizes=64K",
                 "--target", str(tmp_path / "t"), "--plot", str(png), "--no-progress"])
    out = capsys.readouterr().out
    assert code == 0
    for metric in ("application service time", "mean task service time",
                   "task service time variance"):
        assert metric in out
    for wl in ("single", "strided", "random16", "random32"):
        assert f"{wl}:read:65536" in out and f"{wl}:write:65536" in out
    assert png.read_bytes().startswith(b"\x89PNG")


def _mpiexec() -> str | None:
    exe = Path(sys.executable).parent / "mpiexec"
    if exe.exists():
        return str(exe)
    return shutil.which("mpiexec")


@pytest.mark.parametrize("name", ["btio", "db2"])
def test_mpiexec_matches_local_processes(name: str, tmp_path: Path) -> None:
    pytest.importorskip("mpi4py")
    mpiexec = _mpiexec()
    if mpiexec is None:
        pytest.skip("no mpiexec")
    params = [f"--param={k}={v}" for k, v in SMALL[name].items()]
    cmd = [mpiexec, "-n", "4", sys.executable, "-m", "pvfs.traces", "replay", "--workload",
           name, "--procs", "4", "--target", str(tmp_path / "mpi"), "--json", "--verify",
           "--seed", "1", *params]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    mpi = json.loads(proc.stdout)
    assert mpi["runner"] == "mpi"
    local = run_local(generate(name, 4, SMALL[name], seed=1), str(tmp_path / "local"),
                      ReplayOptions(verify=True))
    check_clean(mpi)
    assert comparable(mpi) == comparable(local)
    assert [p["label"] for p in mpi["phases"]] == [p["label"] for p in local["phases"]]
