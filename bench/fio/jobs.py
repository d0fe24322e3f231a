"""The job set the fio harness runs, fio's command line for it, and fio's JSON parsed.

The same :class:`JobSpec` drives fio on a directory and the Python-callable runner
(:mod:`bench.fio.pyjobs`) for the native API, so both measure the same pattern and report
the same :class:`JobResult`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30

#: Every job's ``numjobs`` workers use the files ``fio.0.0``, ``fio.1.0``, … in the target
#: directory, so all jobs of a run share one set of files laid out once per target.
FILE_PREFIX = "fio"


def file_name(jobnum: int) -> str:
    """The file worker ``jobnum`` of any job reads or writes."""
    return f"{FILE_PREFIX}.{jobnum}.0"


@dataclass(frozen=True)
class JobSpec:
    """One access pattern.

    Attributes:
        name: short unique name, e.g. ``"seqread-1m-j4"``.
        rw: fio's ``rw``: ``read``, ``write``, ``randread`` or ``randwrite``.
        bs: block (request) size in bytes.
        numjobs: parallel workers, each on its own file of the run's size.
        cached: pre-read the files (untimed) and keep the cache (``invalidate=0``) so the job
            measures cached reads; otherwise reads start with the file's pages dropped from
            the client's page cache (fio's default ``invalidate=1``).
    """

    name: str
    rw: str
    bs: int
    numjobs: int
    cached: bool = False

    @property
    def is_read(self) -> bool:
        return "read" in self.rw

    @property
    def is_random(self) -> bool:
        return self.rw.startswith("rand")


def default_jobs(numjobs: tuple[int, ...] = (1, 4)) -> list[JobSpec]:
    """Issue 4's set (sequential 1 MiB write/read, random 4 KiB write/cached read) and issue
    11's uncached random 4 KiB read: the kernel page cache dropped (``invalidate=1``), so
    the mount's own cache serves it."""
    jobs = []
    for n in numjobs:
        jobs += [
            JobSpec(f"seqwrite-1m-j{n}", "write", MiB, n),
            JobSpec(f"seqread-1m-j{n}", "read", MiB, n),
            JobSpec(f"randwrite-4k-j{n}", "randwrite", 4 * KiB, n),
            JobSpec(f"randread-4k-j{n}", "randread", 4 * KiB, n),
            JobSpec(f"randread-4k-cached-j{n}", "randread", 4 * KiB, n, cached=True),
        ]
    return jobs


def extra_jobs() -> list[JobSpec]:
    """Jobs only ``--only`` runs (not in ``make bench``'s set). Issue 30's request rate: 64 KiB
    random reads of pre-read files by 8 readers, which with ``--direct`` (``O_DIRECT``: every
    request reaches the FUSE daemon) measures the requests a mount serves per second from
    its own cache, against ``passthrough_hp``'s."""
    return [JobSpec("randread-64k-cached-j8", "randread", 64 * KiB, 8, cached=True)]


def fio_args(job: JobSpec, directory: str, size: int, runtime: float, *,
             direct: bool = False, ioengine: str = "psync") -> list[str]:
    """The fio command line (without the output options) for ``job`` on ``directory``."""
    args = [
        "fio",
        f"--name={job.name}",
        f"--directory={directory}",
        f"--filename_format={FILE_PREFIX}.$jobnum.0",
        f"--rw={job.rw}",
        f"--bs={job.bs}",
        f"--size={size}",
        f"--numjobs={job.numjobs}",
        f"--ioengine={ioengine}",
        f"--runtime={runtime:g}",
        "--time_based=1",
        "--group_reporting=1",
        "--fallocate=none",
        f"--direct={int(direct)}",
        f"--invalidate={0 if job.cached else 1}",
        "--randrepeat=0",
    ]
    if not job.is_read:
        # Count write-behind data: the job ends once it is on the servers (or disk).
        args.append("--end_fsync=1")
    return args


def layout_args(directory: str, size: int, numjobs: int) -> list[str]:
    """fio command line that writes the files ``numjobs`` workers use (untimed setup)."""
    return ["fio", "--name=layout", f"--directory={directory}",
            f"--filename_format={FILE_PREFIX}.$jobnum.0", "--rw=write", f"--bs={MiB}",
            f"--size={size}", f"--numjobs={numjobs}", "--ioengine=psync",
            "--fallocate=none", "--end_fsync=1", "--group_reporting=1"]


def preread_args(directory: str, size: int, numjobs: int) -> list[str]:
    """fio command line that reads the files once so they are cached (``invalidate=0``)."""
    return ["fio", "--name=preread", f"--directory={directory}",
            f"--filename_format={FILE_PREFIX}.$jobnum.0", "--rw=read", f"--bs={MiB}",
            f"--size={size}", f"--numjobs={numjobs}", "--ioengine=psync",
            "--invalidate=0", "--group_reporting=1"]


@dataclass
class JobResult:
    """What one run of one job gave.

    Attributes:
        bw_bytes: bytes per second (read plus write).
        iops: operations per second.
        lat_mean_us: mean completion latency of one request, microseconds.
        lat_p99_us: 99th percentile completion latency, microseconds (None if unknown).
        io_bytes: bytes moved.
        runtime_s: seconds measured.
        cpu_s: CPU seconds the whole machine spent busy during the run (client, file system
            and kernel; ``bench.common.machine_cpu_seconds``), None when not measured.
    """

    bw_bytes: float
    iops: float
    lat_mean_us: float | None
    lat_p99_us: float | None
    io_bytes: int
    runtime_s: float
    cpu_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _pct(clat: dict[str, Any], pct: str = "99.000000") -> float | None:
    table = clat.get("percentile") or {}
    if pct in table:
        return float(table[pct])
    return None


def parse_fio_json(doc: dict[str, Any] | str) -> JobResult:
    """Sum fio's ``--output-format=json`` report over its jobs and directions.

    Works with and without ``group_reporting``: bandwidth, IOPS and bytes add up; the mean
    latency is weighted by each part's request count; the p99 is the largest part's p99.
    Text before the JSON (fio prints warnings there) is skipped.

    Raises:
        ValueError: no JSON, or no job in it.
    """
    if isinstance(doc, str):
        import json

        start = doc.find("{")
        if start < 0:
            raise ValueError("no JSON in fio output")
        doc = json.loads(doc[start:])
    jobs = doc.get("jobs") or []
    if not jobs:
        raise ValueError("fio report has no jobs")
    bw = iops = 0.0
    io_bytes = 0
    runtime_ms = 0.0
    lat_weighted = 0.0
    lat_count = 0
    p99: float | None = None
    for job in jobs:
        if job.get("error"):
            raise ValueError(f"fio job {job.get('jobname')} failed: error {job['error']}")
        for ddir in ("read", "write"):
            d = job.get(ddir) or {}
            n = int(d.get("total_ios", 0))
            if not d or (n == 0 and not d.get("io_bytes")):
                continue
            bw += float(d.get("bw_bytes", float(d.get("bw", 0)) * 1024))
            iops += float(d.get("iops", 0))
            io_bytes += int(d.get("io_bytes", 0))
            runtime_ms = max(runtime_ms, float(d.get("runtime", 0)))
            lat = d.get("lat_ns") or {}
            if n and "mean" in lat:
                lat_weighted += float(lat["mean"]) * n
                lat_count += n
            q = _pct(d.get("clat_ns") or {})
            if q is not None:
                p99 = q if p99 is None else max(p99, q)
    return JobResult(
        bw_bytes=bw,
        iops=iops,
        lat_mean_us=(lat_weighted / lat_count / 1000.0) if lat_count else None,
        lat_p99_us=None if p99 is None else p99 / 1000.0,
        io_bytes=io_bytes,
        runtime_s=runtime_ms / 1000.0,
    )
