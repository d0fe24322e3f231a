"""Workload statistics of an I/O daemon (thesis §5.5, eq. 5.7–5.10) and service metrics.

Per file, over the requests *in service* (queued or running), the observed values the
reactive-scheduling model needs: ``N_req_o`` (requests), ``S_req_o`` (total bytes), ``D_req_o``
(disjoint regions) and ``R_req_o`` (range of file positions: highest byte minus lowest byte of
any request). ``N_file`` (handles holding the file open) comes from the manager. Cumulative
counters and per-job service times are kept beside them for `pvfs-admin stats` and replay.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field


@dataclass(slots=True)
class JobRecord:
    """What the statistics need to know of one job (logical file positions)."""

    ino: int
    op: str
    nbytes: int
    regions: int
    lo: int
    hi: int
    # Bytes of the whole request, all daemons' shares together (0: unknown). nbytes over
    # this is the share here; the reactive selector uses it to tell how many of a
    # collective's requests reach this daemon at all.
    logical: int = 0
    # The reactive selector's: when the request arrived (time.monotonic()) and the bytes of
    # it cached then (None: the storage cannot tell); kept here, not in an object of its own,
    # because the selector sees every read request (daemons/iod/rs.py).
    arrived: float = 0.0
    resident: int | None = None


@dataclass
class FileStats:
    jobs: dict[int, JobRecord] = field(default_factory=dict)
    total_requests: int = 0
    total_bytes: int = 0
    total_regions: int = 0
    idle_at: float = 0.0    # time.monotonic() its last job in service ended (0: never)

    def observed(self) -> dict:
        jobs = self.jobs.values()
        if not jobs:
            return {"N_req_o": 0, "S_req_o": 0, "D_req_o": 0, "R_req_o": 0}
        return {
            "N_req_o": len(self.jobs),
            "S_req_o": sum(j.nbytes for j in jobs),
            "D_req_o": sum(j.regions for j in jobs),
            "R_req_o": max(j.hi for j in jobs) - min(j.lo for j in jobs),
        }


class WorkloadStats:
    """Per-file in-service aggregates, cumulative counters, recent service times."""

    def __init__(self, history: int = 4096, max_files: int = 10000) -> None:
        self.max_files = max_files
        self.files: dict[int, FileStats] = {}
        self.service_times: deque[tuple[int, str, int, float, float]] = deque(maxlen=history)
        self.counters = {"read_requests": 0, "write_requests": 0, "bytes_read": 0,
                         "bytes_written": 0, "errors": 0}

    def begin(self, job_id: int, rec: JobRecord) -> None:
        fs = self.files.get(rec.ino)
        if fs is None:
            if len(self.files) >= self.max_files:
                # Forget the idle file seen longest ago (dicts keep insertion order).
                idle = next((i for i, f in self.files.items() if not f.jobs), None)
                if idle is not None:
                    del self.files[idle]
            fs = self.files[rec.ino] = FileStats()
        fs.jobs[job_id] = rec
        fs.total_requests += 1
        fs.total_bytes += rec.nbytes
        fs.total_regions += rec.regions
        self.counters[f"{rec.op}_requests"] += 1

    def end(self, job_id: int, ino: int, err: int, nbytes: int, wait_s: float,
            service_s: float) -> None:
        fs = self.files.get(ino)
        rec = fs.jobs.pop(job_id, None) if fs else None
        if rec is None:
            return
        if not fs.jobs:
            fs.idle_at = time.monotonic()
        if err:
            self.counters["errors"] += 1
        else:
            self.counters["bytes_read" if rec.op == "read" else "bytes_written"] += nbytes
        self.service_times.append((ino, rec.op, nbytes, wait_s, service_s))

    def served(self, rec: JobRecord, err: int, nbytes: int, wait_s: float,
               service_s: float) -> None:
        """A job the engine served without Python (csrc/fast.c), told once it is done:
        ``begin`` and ``end`` in one step (it was never seen in service)."""
        self.begin(0, rec)
        self.end(0, rec.ino, err, nbytes, wait_s, service_s)

    def withdraw(self, job_id: int, ino: int) -> None:
        """Take back ``begin`` for a job that will be submitted again (its descriptor was
        stale): the request is counted once, by the job that serves it."""
        fs = self.files.get(ino)
        rec = fs.jobs.pop(job_id, None) if fs else None
        if rec is None:
            return
        fs.total_requests -= 1
        fs.total_bytes -= rec.nbytes
        fs.total_regions -= rec.regions
        self.counters[f"{rec.op}_requests"] -= 1

    def forget(self, ino: int) -> None:
        """Drop a removed file's statistics (kept while a job of it is still in service)."""
        fs = self.files.get(ino)
        if fs is not None and not fs.jobs:
            del self.files[ino]

    def in_service(self) -> int:
        return sum(len(f.jobs) for f in self.files.values())

    def snapshot(self, nfile: dict[int, int] | None = None) -> dict:
        files = {}
        for ino, fs in self.files.items():
            entry = fs.observed()
            entry.update(total_requests=fs.total_requests, total_bytes=fs.total_bytes,
                         total_regions=fs.total_regions)
            if nfile is not None:
                entry["N_file"] = nfile.get(ino, 0)
            files[str(ino)] = entry
        times = [s for *_, s in self.service_times]
        summary = {"jobs": len(times)}
        if times:
            ordered = sorted(times)
            summary.update(mean_s=sum(times) / len(times), p50_s=ordered[len(ordered) // 2],
                           p99_s=ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))],
                           max_s=ordered[-1])
        return {"counters": dict(self.counters), "files": files, "service": summary,
                "recent_jobs": [list(t) for t in list(self.service_times)[-64:]]}

    def reset(self) -> None:
        for fs in self.files.values():
            fs.total_requests = fs.total_bytes = fs.total_regions = 0
        self.service_times.clear()
        for k in self.counters:
            self.counters[k] = 0
