"""Unit tests of the fio harness: job set, fio JSON parsing, target specs, the Python runner.

No peer file system and no fio process is started here.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from pvfs.bench.fio import pyjobs
from pvfs.bench.fio.jobs import (
    JobResult,
    JobSpec,
    KiB,
    MiB,
    default_jobs,
    fio_args,
    parse_fio_json,
)
from pvfs.bench.fio.run import (
    Target,
    _chosen_jobs,
    build_report,
    format_cpu,
    format_report,
    parse_target,
    run_one,
)
from pvfs.units import parse_size


def _ddir(bw: float, iops: float, ios: int, lat_mean: float, p99: float | None,
          runtime_ms: int = 1000) -> dict:
    clat: dict = {"mean": lat_mean}
    if p99 is not None:
        clat["percentile"] = {"50.000000": lat_mean, "99.000000": p99}
    return {"io_bytes": int(bw * runtime_ms / 1000), "bw_bytes": bw, "bw": bw / 1024,
            "iops": iops, "runtime": runtime_ms, "total_ios": ios,
            "lat_ns": {"mean": lat_mean}, "clat_ns": clat}


def _empty() -> dict:
    return {"io_bytes": 0, "bw_bytes": 0, "bw": 0, "iops": 0.0, "runtime": 0, "total_ios": 0,
            "lat_ns": {"mean": 0.0}, "clat_ns": {"mean": 0.0}}


def _report(jobs: list[dict]) -> dict:
    return {"fio version": "fio-3.33", "jobs": jobs}


def test_parse_group_reported_read() -> None:
    doc = _report([{"jobname": "seqread", "error": 0,
                    "read": _ddir(2 * MiB * 1000, 2000, 2000, 500_000, 900_000),
                    "write": _empty()}])
    r = parse_fio_json(doc)
    assert r.bw_bytes == 2 * MiB * 1000
    assert r.iops == 2000
    assert r.lat_mean_us == pytest.approx(500.0)
    assert r.lat_p99_us == pytest.approx(900.0)
    assert r.runtime_s == pytest.approx(1.0)


def test_parse_sums_jobs_and_weights_latency() -> None:
    doc = _report([
        {"jobname": "a", "error": 0, "read": _empty(),
         "write": _ddir(100.0, 10.0, 10, 1000.0, 2000.0)},
        {"jobname": "a", "error": 0, "read": _empty(),
         "write": _ddir(300.0, 30.0, 30, 3000.0, 5000.0)},
    ])
    r = parse_fio_json(doc)
    assert r.bw_bytes == 400.0
    assert r.iops == 40.0
    # (1000*10 + 3000*30) / 40 ns = 2500 ns
    assert r.lat_mean_us == pytest.approx(2.5)
    assert r.lat_p99_us == pytest.approx(5.0)


def test_parse_mixed_directions_and_missing_percentiles() -> None:
    doc = _report([{"jobname": "rw", "error": 0,
                    "read": _ddir(10.0, 1.0, 4, 100.0, None),
                    "write": _ddir(30.0, 3.0, 4, 300.0, None)}])
    r = parse_fio_json(doc)
    assert r.bw_bytes == 40.0
    assert r.lat_mean_us == pytest.approx(0.2)
    assert r.lat_p99_us is None


def test_parse_text_with_warning_preamble() -> None:
    doc = _report([{"jobname": "x", "error": 0, "read": _ddir(8.0, 2.0, 2, 50.0, 60.0),
                    "write": _empty()}])
    text = "fio: some warning about the file system\n" + json.dumps(doc)
    assert parse_fio_json(text).bw_bytes == 8.0


@pytest.mark.parametrize("bad", ["", "no json here", json.dumps({"jobs": []})])
def test_parse_rejects_reports_without_jobs(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_fio_json(bad)


def test_parse_reports_job_error() -> None:
    doc = _report([{"jobname": "x", "error": 5, "read": _empty(), "write": _empty()}])
    with pytest.raises(ValueError, match="error 5"):
        parse_fio_json(doc)


@pytest.mark.parametrize(("text", "n"), [
    ("4096", 4096), ("4k", 4 * KiB), ("4K", 4 * KiB), ("256M", 256 * MiB),
    ("1GiB", 1 << 30), ("1.5m", 3 * MiB // 2), (123, 123),
])
def test_parse_size(text: str | int, n: int) -> None:
    assert parse_size(text) == n


@pytest.mark.parametrize("bad", ["", "M", "12Q", "-4k"])
def test_parse_size_rejects(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_size(bad)


def test_default_jobs_cover_issue_4() -> None:
    jobs = default_jobs()
    names = {j.name for j in jobs}
    assert len(names) == len(jobs) == 10
    assert {(j.rw, j.bs, j.numjobs) for j in jobs} == {
        (rw, bs, n) for n in (1, 4)
        for rw, bs in (("write", MiB), ("read", MiB), ("randwrite", 4 * KiB),
                       ("randread", 4 * KiB))}
    assert [j.cached for j in jobs if j.rw == "randread"] == [False, True, False, True]


def test_the_request_rate_job_runs_only_when_named() -> None:
    # issue 30's request rate: 64 KiB reads of pre-read files, 8 readers (with --direct)
    ap = argparse.ArgumentParser()
    every = _chosen_jobs(ap, argparse.Namespace(numjobs=[1, 4], only=None))
    assert "randread-64k-cached-j8" not in {j.name for j in every}  # (make bench's set)
    (job,) = _chosen_jobs(ap, argparse.Namespace(numjobs=[1, 4],
                                                 only=["randread-64k-cached-j8"]))
    args = fio_args(job, "/d", 64 * MiB, 10, direct=True)
    assert {"--rw=randread", "--bs=65536", "--numjobs=8", "--direct=1",
            "--invalidate=0"} <= set(args)


def test_fio_args_cache_and_fsync_options() -> None:
    cached = fio_args(JobSpec("r", "randread", 4096, 4, cached=True), "/d", MiB, 5)
    assert "--invalidate=0" in cached and "--numjobs=4" in cached
    assert not any(a.startswith("--end_fsync") for a in cached)
    write = fio_args(JobSpec("w", "write", MiB, 1), "/d", MiB, 5)
    assert "--invalidate=1" in write and "--end_fsync=1" in write
    assert "--directory=/d" in write and "--time_based=1" in write


def test_parse_target() -> None:
    assert parse_target("local") == ("local", "local")
    assert parse_target("pvfs=/mnt/pvfs") == ("pvfs", "/mnt/pvfs")
    assert parse_target("native=py:mod:func") == ("native", "py:mod:func")
    with pytest.raises(ValueError):
        parse_target("=x")


def _res(bw: float, iops: float) -> JobResult:
    return JobResult(bw_bytes=bw, iops=iops, lat_mean_us=1.0, lat_p99_us=2.0,
                     io_bytes=int(bw), runtime_s=1.0)


def test_build_report_medians_and_ratios() -> None:
    jobs = [JobSpec("seqread-1m-j1", "read", MiB, 1),
            JobSpec("randread-4k-cached-j1", "randread", 4096, 1, cached=True)]
    results = {
        "seqread-1m-j1": {"a": [_res(100, 1), _res(300, 3), _res(200, 2)],
                          "b": [_res(50, 1), _res(100, 1), _res(400, 1)]},
        "randread-4k-cached-j1": {"a": [_res(10, 5)], "b": [_res(30, 15)]},
    }
    rep = build_report(results, jobs, "a")
    assert rep["seqread-1m-j1"]["a"]["median"]["bw_bytes"] == 200
    assert rep["seqread-1m-j1"]["b"]["median"]["bw_bytes"] == 100
    assert rep["seqread-1m-j1"]["b"]["ratio_vs_baseline"] == pytest.approx(0.5)
    assert rep["seqread-1m-j1"]["a"]["ratio_vs_baseline"] == pytest.approx(1.0)
    assert rep["randread-4k-cached-j1"]["b"]["ratio_vs_baseline"] == pytest.approx(3.0)
    text = format_report(rep, jobs, ["a", "b"], "a")
    assert "b/a" in text and "0.50x" in text and "3.00x" in text and "15 IOPS" in text
    json.dumps(rep)  # the report is saved as JSON


def test_cpu_per_gib_is_the_median_over_the_runs() -> None:
    jobs = [JobSpec("seqwrite-1m-j1", "write", MiB, 1)]
    gib = 1 << 30
    runs = [JobResult(bw_bytes=1.0, iops=1.0, lat_mean_us=None, lat_p99_us=None,
                      io_bytes=gib // 2, runtime_s=1.0, cpu_s=cpu) for cpu in (1.0, 3.0, 2.0)]
    rep = build_report({"seqwrite-1m-j1": {"a": runs, "b": [_res(1, 1)]}}, jobs, "a")
    assert rep["seqwrite-1m-j1"]["a"]["median"]["cpu_s_per_gib"] == pytest.approx(4.0)
    assert rep["seqwrite-1m-j1"]["b"]["median"]["cpu_s_per_gib"] is None  # not measured
    text = format_cpu(rep, jobs, ["a", "b"])
    assert "CPU s/GiB" in text and "4.00" in text and "-" in text
    json.dumps(rep)


def test_a_run_records_the_machines_cpu_time(tmp_path: Path) -> None:
    with pyjobs.local_opener(str(tmp_path)) as opener:
        t = Target("pylocal", "pylocal", opener=opener)
        pyjobs.layout(opener, 256 * KiB, 1)
        r = run_one(t, JobSpec("w", "randwrite", 4096, 1), 256 * KiB, 0.2)
    # the runner kept a CPU busy for 0.2 s at least in part: a positive measure, bounded by
    # the CPUs the machine has over the run's time
    assert r.cpu_s is not None and 0 < r.cpu_s
    assert r.cpu_s < (os.cpu_count() or 1) * (r.runtime_s + 5)


def test_python_runner_on_local_files(tmp_path: Path) -> None:
    size = 256 * KiB
    with pyjobs.local_opener(str(tmp_path)) as opener:
        pyjobs.layout(opener, size, 2)
        assert (tmp_path / "pyfiles" / "fio.1.0").stat().st_size == size
        for job in (JobSpec("w", "randwrite", 4096, 2), JobSpec("r", "read", 64 * KiB, 1),
                    JobSpec("c", "randread", 4096, 2, cached=True)):
            r = pyjobs.run_job(opener, job, size, 0.05)
            assert r.io_bytes > 0 and r.iops > 0
            assert r.io_bytes % job.bs == 0
            assert r.lat_p99_us is not None and r.lat_mean_us is not None


def test_python_runner_propagates_open_errors(tmp_path: Path) -> None:
    def opener(name: str, mode: str) -> pyjobs.FileHandle:
        raise PermissionError(13, "denied", name)

    with pytest.raises(PermissionError):
        pyjobs.run_job(opener, JobSpec("r", "read", 4096, 2), 4096, 0.05)


def test_percentile_nearest_rank() -> None:
    xs = list(range(1, 101))
    assert pyjobs.percentile(xs, 99.0) == 99.0
    assert pyjobs.percentile(xs, 100.0) == 100.0
    assert pyjobs.percentile([7], 99.0) == 7.0
    assert pyjobs.percentile([], 50.0) is None
