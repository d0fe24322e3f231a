"""The MPI side of ``pvfs-admin bench collective``: one workload × method per mpiexec job.

``mpiexec -n N python -m pvfs.bench.collective.mpi CONFIG JSON_OPTIONS`` runs

- ``window``: DAChe's sliding window (§6.2, fig. 2): every rank reads one 64 KiB chunk of a
  window of N chunks, the ranks shift circularly until each has read every chunk of the
  window, then the window slides; ``loops`` windows. ``independent`` reads pvfs directly,
  ``rma``/``thread``/``servers`` go through the group cache (4 MiB per rank, 32 KiB pages);
  with ``servers`` the job has ``lock_servers`` extra ranks that only serve locks;
  ``COORD+ra`` / ``COORD+nora`` (``rma+ra``, ``servers+ra``, ``thread+nora``, ...) force
  the cache's read-ahead on / off; a ``-adaptive`` suffix (``rma+ra-adaptive``) reads
  around a load after the adaptive wait of sessions s13-s17 instead of waiting for the
  copy up to the bound (issue 32's A/B); ``-evict`` lets read-ahead evict whenever its
  slots are full (before the placement rule); ``-victim`` turns the victim cache at the
  homes on (``servers+ra-victim``; off by default) and ``-novictim`` off; ``-udpbells``
  rings the message back ends' doorbells over UDP between hosts (``servers+ra-udpbells``;
  off by default); ``-rmaring`` also rings a page's owner before flushing an RMA get or
  put to it (``servers+ra-udpbells-rmaring``; off by default); ``-rget`` waits for RMA gets
  by testing ``MPI_Rget`` requests between sleeps instead of a ``Flush`` that polls a core
  (``servers+ra-rget``, ``servers+ra-udpbells-rget``; on by default across hosts since
  s29); ``-rlock`` also waits for ``rma``'s lock-word fetch-and-ops as requests
  (``rma+ra-rget-rlock``; off by default); ``-noloan`` turns issue 32's loan slots off
  (``servers+ra-rget-noloan``; on by default for read-only ``servers`` opens since s31).
- ``btio``, ``flash``, ``s3d``: the checkpoint traces of :mod:`pvfs.traces.generators`
  replayed by the ranks; each rank writes a phase (the records between two barriers) with
  one call carrying all its regions, as an MPI program writes a subarray through a file
  view: ``write_list`` for ``independent`` (each region one pvfs write, as ROMIO's
  independent path without data sieving), ``caching`` (the group cache, ``rma``) and
  ``write_behind``; ``write_list_all`` (two-phase) for ``collective``, and two-phase
  with data sieving in the I/O phase for ``sieving`` (ROMIO's read-modify-write).

With ``"cold": true`` in the options the window's file is written, then the I/O daemons'
caches are emptied (page cache and emulated disk) before the timed part; on emulated storage
the result carries the disks' work during it (``disk``: accesses, modelled busy seconds,
bytes missed and hit, summed over the daemons).

With ``PVFS_COLLECTIVE_TRACE=DIR`` in the environment each rank of a window job writes its
timeline to ``DIR/<method>[-k<servers>]-n<ranks>-r<rank>.json``: every chunk read (start, end,
chunk), every pvfs call of the file (start, end, offset, length) and every locked access of
the cache (its phases, see ``PageCache._record``); rank 0 adds the disks' counters per I/O
daemon before and after the timed part.

Rank 0 prints one JSON line: the method's wall time from the first open to the last close
(max over ranks), MiB/s, file-system writes/reads summed over ranks (one contiguous native
call each), the I/O daemons' write requests, and the cache's lock counters.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import Any

from pvfs.collective import _prof
from pvfs.collective._wait import barrier


def _sum(dicts: list[dict[str, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for d in dicts:
        for k, v in d.items():
            if isinstance(v, int):
                out[k] = out.get(k, 0) + v
    return out


def _cpu() -> float:
    """This process's CPU seconds so far, every thread, user and system (getrusage)."""
    import resource

    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def per_gib(cpu_s: float, nbytes: int) -> float:
    """CPU seconds per GiB the application read or wrote (``cpu_s_per_gib``)."""
    return round(cpu_s / (nbytes / 2**30), 3) if nbytes else 0.0


def window_pages(rank: int, clients: int, chunk: int, page: int, loops: int) -> set[int]:
    """The pages (of ``page`` bytes) a client rank of the window reads: every chunk of
    its windows (the ``pages_touched`` of a window row are their union over ranks)."""
    if rank >= clients:
        return set()
    out: set[int] = set()
    for c in range(loops * clients):
        out.update(range(c * chunk // page, (c * chunk + chunk - 1) // page + 1))
    return out


def _iod_writes(fs: Any) -> int:
    return sum(s["counters"]["write_requests"] for s in fs.iod_stats())


DISK_KEYS = ("accesses", "busy_s", "miss_bytes", "hit_bytes")
RA_KEYS = ("ra_pages", "ra_reads", "ra_skipped", "ra_waits", "ra_failed", "ra_resets",
           "ra_unclaimed", "ra_lead_lost", "ra_room_refused", "ra_evictions", "ra_copies")
#: the cache's placement counters a window row carries (issue 32: a page read twice was
#: evicted in between, or read around)
CACHE_KEYS = ("misses", "evictions", "evict_pinned", "hits", "remote_hits", "victims_sent",
              "victim_hits", "victims_kept", "victims_handed", "victims_dropped",
              "victims_refused", "victims_claimed", "loaned", "loans_granted",
              "loans_recycled", "loans_returned", "bells_on", "bells_udp", "bell_rings")
PER_RANK_KEYS = ("fs_bytes_read", "misses", "evictions", "ra_evictions", "ra_pages",
                 "ra_lead_lost", "ra_room_refused", "victim_hits")
#: the phases of a locked access of the cache, in the order of ``PageCache._record``'s marks
#: (DAChe fig. 6's breakdown): locks granted, pages loaded from the file, read around and
#: local copies, remote bytes moved, unlocked
PHASES = ("lock", "load", "local", "remote", "unlock")
#: the read-ahead window of a "+ra" method (bytes)
READAHEAD_ON = int(os.environ.get("PVFS_BENCH_READAHEAD", str(1 << 20)))


def _disk(fs: Any) -> dict[str, float] | None:
    """The emulated disks' counters summed over the I/O daemons (None: posix storage)."""
    infos = [fs.iod_call(i, "sched_get").get("disk") for i in range(fs.config.niods)]
    if not any(infos):
        return None
    return {k: sum(d[k] for d in infos if d) for k in DISK_KEYS}


def _disk_each(fs: Any) -> list[dict[str, float] | None]:
    """The emulated disks' counters of each I/O daemon (tracing)."""
    return [fs.iod_call(i, "sched_get").get("disk") for i in range(fs.config.niods)]


def drop_caches(fs: Any) -> None:
    """Cold start: every I/O daemon writes back and evicts its stripe files' page cache
    (``drop_cache``, as ``pvfs-admin cache drop``) and empties its emulated disk's cache
    (``disk_drop``; nothing on posix storage)."""
    for i in range(fs.config.niods):
        fs.iod_call(i, "drop_cache")
        fs.iod_call(i, "disk_drop")


# --------------------------------------------------------------------------- sliding window
def window(comm: Any, fs: Any, opts: dict[str, Any]) -> dict[str, Any] | None:
    """This rank's part of a sliding-window job (see the module's docstring); the result on
    rank 0, None on the others."""
    chunk, loops, method = opts["chunk"], opts["loops"], opts["method"]
    servers = opts.get("lock_servers", 0) if method.partition("+")[0] == "servers" else 0
    clients = comm.Get_size() - servers
    path = "/bench-collective/window"
    if comm.Get_rank() == 0:
        _write_window_file(fs, path, chunk, loops * clients, opts.get("cold"))
    disk_before = _disk(fs) if comm.Get_rank() == 0 else None
    trace_dir = os.environ.get("PVFS_COLLECTIVE_TRACE")
    each_before = _disk_each(fs) if trace_dir and comm.Get_rank() == 0 else None
    comm.Barrier()
    iod_before = _iod_writes(fs) if comm.Get_rank() == 0 else 0
    barrier(comm)
    if trace_dir:
        _prof.start()  # (issue 32: where a get's time goes, in the rank's timeline)
    t0, c0, d0 = time.perf_counter(), _cpu(), _prof.run_delay_ns()
    f = _open_window(comm, fs, path, method, opts, servers)
    if not f.is_lock_server:
        counters = _read_windows(f, chunk, loops, trace_dir, opts, clients, comm.Get_rank(), t0)
    else:
        got = f.counters()
        counters = {"lock_server_requests": got["lock_requests"],
                    "lock_server_queued": got["lock_queued"],
                    **{k: v for k, v in got.items() if k.startswith(("victims_", "loans_"))}}
    elapsed = time.perf_counter() - t0
    cpu = comm.allreduce(_cpu() - c0)
    delay = comm.allreduce(_prof.run_delay_ns() - d0) / 1e9
    elapsed = comm.allreduce(elapsed, op=_max())
    totals = comm.gather(counters, root=0)
    touched = comm.gather(window_pages(comm.Get_rank(), clients, chunk, opts["page"], loops),
                          root=0)
    if comm.Get_rank() != 0:
        return None
    pages_touched = len(set().union(*touched))
    if each_before is not None:
        with open(os.path.join(trace_dir, f"{_trace_name(opts, clients)}-disks.json"),
                  "w") as out:
            json.dump({"before": each_before, "after": _disk_each(fs), "elapsed": elapsed},
                      out)
    result = _window_result(fs, opts, clients, servers, elapsed, cpu, totals, disk_before,
                            iod_before)
    result["pages_touched"] = pages_touched
    # the main threads' run delay (runnable, waiting for a core) summed over every rank,
    # and its share of the ranks' time (issue 32: how much of a job is waiting for a CPU)
    result["run_delay_s"] = round(delay, 3)
    result["run_delay_share"] = round(delay / (elapsed * comm.Get_size()), 4)
    return result


def _write_window_file(fs: Any, path: str, chunk: int, chunks: int, cold: Any) -> None:
    """Rank 0, untimed: ``chunks`` chunks of a byte pattern at ``path``; with ``cold`` the I/O
    daemons' caches are emptied afterwards."""
    fs.makedirs("/bench-collective", exist_ok=True)
    with fs.open(path, "w+b") as f:
        block = bytes(range(256)) * (chunk // 256)
        for c in range(chunks):
            f.pwrite(block, c * chunk)
    if cold:
        drop_caches(fs)


def _open_window(comm: Any, fs: Any, path: str, method: str, opts: dict[str, Any],
                 servers: int) -> Any:
    """The window's file opened by every rank the way ``method`` says: pvfs directly
    (``independent``) or through the group cache with its coordination and read-ahead."""
    import pvfs.collective as pc

    # "rma+ra" / "rma+ra=BYTES" / "rma+nora": the cache with read-ahead on (the default
    # window, or BYTES) / off; a bare coordination takes the library's default
    # (PVFS_COLLECTIVE_READAHEAD).
    coord, _, variant = method.partition("+")
    if variant.endswith("-noloan"):  # (A/B of issue 32, s31: no loan slots)
        variant = variant[:-len("-noloan")]
        os.environ["PVFS_COLLECTIVE_LOANS"] = "0"
    if variant.endswith("-noalign"):  # (A/B of the stripe-row alignment of reads ahead)
        variant = variant[:-len("-noalign")]
        os.environ["PVFS_COLLECTIVE_READAHEAD_ALIGN"] = "0"
    if variant.endswith("-adaptive"):  # (A/B of issue 32: s13-s17's wait for loads)
        variant = variant[:-len("-adaptive")]
        os.environ["PVFS_COLLECTIVE_LOAD_WAIT"] = "adaptive"
    if variant.endswith("-evict"):  # (A/B of issue 32: read-ahead evicts whenever full)
        variant = variant[:-len("-evict")]
        os.environ["PVFS_COLLECTIVE_READAHEAD_BALANCE"] = "0"
    if variant.endswith("-skipkept"):  # (A/B of s30: read-ahead claims skip kept victims)
        variant = variant[:-len("-skipkept")]
        os.environ["PVFS_COLLECTIVE_VICTIM_CLAIMS"] = "0"
    if variant.endswith("-novictim"):  # (A/B of issue 32: evictions keep no copy at home)
        variant = variant[:-len("-novictim")]
        os.environ["PVFS_COLLECTIVE_VICTIMS"] = "0"
    if variant.endswith("-victim"):  # (issue 32's victim cache on: off by default)
        variant = variant[:-len("-victim")]
        os.environ["PVFS_COLLECTIVE_VICTIMS"] = "1"
    if variant.endswith("-rmaring"):  # (issue 32: ring an owner before an RMA flush)
        variant = variant[:-len("-rmaring")]
        os.environ["PVFS_COLLECTIVE_RMA_RING"] = "1"
    if variant.endswith("-rlock"):  # (issue 32: rma's lock fetch-and-ops as requests)
        variant = variant[:-len("-rlock")]
        os.environ["PVFS_COLLECTIVE_RMA_LOCK_REQ"] = "1"
    if variant.endswith("-rget"):  # (issue 32: RMA gets waited for without polling)
        variant = variant[:-len("-rget")]
        os.environ["PVFS_COLLECTIVE_RGET"] = "1"
    if variant.endswith("-udpbells"):  # (issue 32: doorbells over UDP across hosts)
        variant = variant[:-len("-udpbells")]
        os.environ["PVFS_COLLECTIVE_BELLS_UDP"] = "1"
    if variant.endswith("-claimall"):  # (A/B: read-ahead claims to every home at once)
        variant = variant[:-len("-claimall")]
        os.environ["PVFS_COLLECTIVE_CLAIM_LEAD_FIRST"] = "0"
    readahead = int(variant[3:]) if variant.startswith("ra=") else \
        {"ra": READAHEAD_ON, "nora": 0}.get(variant)
    if method == "independent":
        return pc.open(comm, fs, path, "r", method="direct")
    return pc.open(comm, fs, path, "r", method="caching", coordination=coord,
                   page_size=opts["page"], cache_bytes=opts["cache"], lock_servers=servers,
                   readahead=readahead)


def _read_windows(f: Any, chunk: int, loops: int, trace_dir: str | None,
                  opts: dict[str, Any], clients: int, rank: int, t0: float) -> dict[str, int]:
    """A client rank's timed part: ``loops`` windows read, each chunk once, starting at this
    rank's chunk and going round; then the file closed. Returns the file's counters (those
    before the close, then any the close added); with ``trace_dir`` the rank's timeline is
    written there first."""
    reads: list[tuple[float, float, int]] | None = None
    breakdown = bool(opts.get("breakdown")) and not trace_dir and f.cache is not None
    if breakdown:
        f.cache.trace = []
    if trace_dir:
        reads = []
        f.io.trace = []
        if f.cache is not None:
            f.cache.trace = []
            f.cache.evict_log = []
    r, n = f.comm.Get_rank(), f.comm.Get_size()
    began_all = time.perf_counter()
    for w in range(loops):
        for j in range(n):
            c = w * n + (r + j) % n
            if reads is None:
                f.read_at(c * chunk, chunk)
            else:
                began = time.monotonic()
                f.read_at(c * chunk, chunk)
                reads.append((began, time.monotonic(), c))
    counters = f.counters()
    if breakdown:
        counters["read_us"] = round((time.perf_counter() - began_all) * 1e6)
        counters.update(phase_sums(f.cache.trace))
        f.cache.trace = None
    if reads is not None:
        _dump_trace(trace_dir, opts, clients, rank, t0, reads, f)
    f.close()
    counters.update({k: v for k, v in f.counters().items() if k not in counters})
    return counters


def phase_sums(trace: list[dict[str, Any]]) -> dict[str, int]:
    """This rank's locked accesses (``PageCache.trace``) summed by phase (:data:`PHASES`), in
    microseconds as ``phase_<name>_us``, with their number (``accesses``); an access that
    raised (fewer than six marks) is left out."""
    sums = dict.fromkeys(PHASES, 0.0)
    n = 0
    for rec in trace:
        t = rec["t"]
        if len(t) != len(PHASES) + 1:
            continue
        n += 1
        for i, name in enumerate(PHASES):
            sums[name] += t[i + 1] - t[i]
    return {"accesses": n, **{f"phase_{k}_us": round(v * 1e6) for k, v in sums.items()}}


def _window_result(fs: Any, opts: dict[str, Any], clients: int, servers: int,
                   elapsed: float, cpu: float, totals: list[dict[str, int]],
                   disk_before: dict[str, float] | None, iod_before: int) -> dict[str, Any]:
    """Rank 0: the job's JSON result from every rank's counters (``totals``)."""
    total = _sum(totals)
    nbytes = opts["loops"] * clients * clients * opts["chunk"]
    disk = None
    if disk_before is not None:  # the emulated disks' work during the timed part
        after = _disk(fs) or disk_before
        disk = {k: round(after[k] - disk_before[k], 6) for k in DISK_KEYS}
    return {"benchmark": "sliding_window", "method": opts["method"], "ranks": clients,
            "cold": bool(opts.get("cold")), "disk": disk,
            "lock_servers": servers, "seconds": elapsed, "mib_s": nbytes / elapsed / 2**20,
            "bytes": nbytes, "cpu_s": cpu, "cpu_s_per_gib": per_gib(cpu, nbytes),
            "fs_reads": total.get("fs_reads", 0),
            # the file-system reads in pages' worth of bytes (a call may read several
            # pages, a read around part of one): one read per page makes it pages_touched
            "fs_read_pages": round(total.get("fs_bytes_read", 0) / opts["page"], 1),
            "load_stalls": total.get("load_stalls", 0),
            "fs_writes": total.get("fs_writes", 0), "locks": total.get("locks", 0),
            "lock_retries": total.get("lock_retries", 0),
            "lock_rounds": total.get("lock_rounds", 0),
            "remote_gets": total.get("remote_gets", 0),
            "read_around": total.get("read_around", 0),
            # the longest wait for a load any rank had reached at the end (its LoadTimes)
            "around_wait_us": max((t.get("around_wait_us", 0) for t in totals if t), default=0),
            # the longest mean read-around read any rank had (what caps its wait)
            "around_read_us": max((t.get("around_read_us", 0) for t in totals if t), default=0),
            "lock_server_queued": total.get("lock_server_queued", 0),
            **{k: total[k] for k in ("read_us", "accesses", *(f"phase_{p}_us" for p in PHASES))
               if k in total},
            **{k: total[k] for k in RA_KEYS if k in total},
            **{k: total[k] for k in CACHE_KEYS if k in total},
            # per client rank (issue 32: which ranks read pages again and why)
            "per_rank": {k: [t.get(k, 0) for t in totals if t and "fs_reads" in t]
                         for k in PER_RANK_KEYS},
            "iod_write_requests": _iod_writes(fs) - iod_before}


def _trace_name(opts: dict[str, Any], clients: int) -> str:
    k = f"-k{opts.get('lock_servers', 0)}" if opts.get("lock_servers") else ""
    return f"{opts['method']}{k}-n{clients}"


def _dump_trace(where: str, opts: dict[str, Any], clients: int, rank: int, t0: float,
                reads: list[tuple[float, float, int]], f: Any) -> None:
    """This rank's timeline (see the module's docstring); times in ``time.monotonic``."""
    cache = getattr(f, "cache", None)
    with open(os.path.join(where, f"{_trace_name(opts, clients)}-r{rank}.json"), "w") as out:
        json.dump({"rank": rank, "method": opts["method"], "ranks": clients,
                   "open_perf": t0, "now_mono": time.monotonic(), "now_perf": time.perf_counter(),
                   "reads": reads, "fs": f.io.trace,
                   "cache": cache.trace if cache is not None else None,
                   "evictions": cache.evict_log if cache is not None else None,
                   # gets, puts and sleeps with their run delay (pvfs.collective._prof)
                   "main_thread": threading.get_native_id(), "prof": _prof.stop()}, out)


def _max() -> Any:
    from mpi4py import MPI

    return MPI.MAX


# --------------------------------------------------------------------------- checkpoints
def checkpoint(comm: Any, fs: Any, opts: dict[str, Any]) -> dict[str, Any] | None:
    """This rank's part of a checkpoint job (``btio``, ``flash``, ``s3d``; see the module's
    docstring); the result on rank 0, None on the others."""
    from pvfs.traces.generators import generate

    name, method = opts["benchmark"], opts["method"]
    rank, size = comm.Get_rank(), comm.Get_size()
    trace = generate(name, size, opts.get("params") or {}, seed=1)
    root = "/bench-collective"
    paths = {i: f"{root}/{name}-{method}/{f.name.replace('/', '_')}"
             for i, f in enumerate(trace.files)}
    if rank == 0:
        fs.makedirs(f"{root}/{name}-{method}", exist_ok=True)
        for p in paths.values():
            if fs.exists(p):
                fs.unlink(p)
    nbytes = sum(r.length for r in trace.records if r.is_write)
    program = _rank_program(trace, rank)
    method_of = {"independent": "direct", "collective": "direct", "sieving": "direct",
                 "caching": "caching", "write_behind": "write_behind"}
    amode = "w" if method == "write_behind" else "w+"
    tuning = {k: opts[k] for k in ("page_size", "sub_bytes", "cache_bytes", "sub_buffers") if k in opts}
    comm.Barrier()
    iod_before = _iod_writes(fs) if rank == 0 else 0
    barrier(comm)
    t0, c0 = time.perf_counter(), _cpu()
    closed = _replay(comm, fs, program, paths, amode, method_of[method], tuning,
                     collective=method in ("collective", "sieving", "caching"),
                     sieve=method == "sieving")
    elapsed = time.perf_counter() - t0
    cpu = comm.allreduce(_cpu() - c0)
    elapsed = comm.allreduce(elapsed, op=_max())
    totals = comm.gather(_sum(closed), root=0)
    if rank != 0:
        return None
    total = _sum(totals)
    iod = _iod_writes(fs) - iod_before
    return {"benchmark": name, "method": method, "ranks": size, "seconds": elapsed,
            "mib_s": nbytes / elapsed / 2**20, "bytes": nbytes, "cpu_s": cpu,
            "cpu_s_per_gib": per_gib(cpu, nbytes),
            "fs_writes": total.get("fs_writes", 0),
            "fs_writes_straddling": total.get("fs_writes_straddling", 0),
            "fs_write_regions": total.get("fs_write_regions", 0),
            "avg_write_bytes": total.get("fs_bytes_written", 0) // max(1, total.get("fs_writes", 0)),
            "fs_reads": total.get("fs_reads", 0), "locks": total.get("locks", 0),
            "iod_write_requests": iod,
            **{k: v for k, v in total.items() if k.startswith("wb_")}}


def _rank_program(trace: Any, rank: int) -> list[tuple[str, int, Any, Any]]:
    """This rank's records of ``trace`` as plain ``(op, file, regions, data)`` tuples: writes
    (their regions and the bytes), opens, closes and barriers."""
    from pvfs.traces.format import Op

    # The application's data is in memory before the clock starts: one pattern buffer,
    # sliced per write, and the rank's program as plain tuples.
    longest = max((r.length for r in trace.records if r.is_write), default=0)
    pattern = memoryview(bytes((i * 7 + rank) % 251 + 1 for i in range(256)) *
                         (longest // 256 + 1))
    program = []
    for rec in trace.records:
        if rec.rank != rank:
            continue
        if rec.is_write:
            regions = list(rec.regions) if rec.regions else [(rec.offset, rec.length)]
            program.append(("write", rec.file, regions, pattern[:rec.length]))
        elif rec.op in (Op.OPEN, Op.CLOSE, Op.BARRIER):
            program.append((rec.op.label, rec.file, None, None))
    return program


def _replay(comm: Any, fs: Any, program: list[tuple[str, int, Any, Any]],
            paths: dict[int, str], amode: str, method: str, tuning: dict[str, Any], *,
            collective: bool, sieve: bool = False) -> list[dict[str, int]]:
    """The timed part: the rank's program run, each file opened with ``pc.open(...,
    method=method, **tuning)``; a phase's writes to a file go in one call (``write_list_all``
    when ``collective``, else ``write_list``; ``sieve``: two-phase with data sieving).
    Returns the counters of every file closed."""
    import pvfs.collective as pc

    files: dict[int, Any] = {}
    batch: dict[int, tuple[list[tuple[int, int]], list[Any]]] = {}
    closed: list[dict[str, int]] = []

    def flush_batches() -> None:
        # One call per rank and phase with all its regions: what an MPI program does with
        # a file view (MPI_File_write[_all] of the subarray); the method decides how the
        # regions reach pvfs.
        for fid, f in files.items():
            regs, parts = batch.pop(fid, ([], []))
            if collective:
                f.write_list_all(regs, b"".join(parts))
            elif regs:
                f.write_list(regs, b"".join(parts))

    for op, fid, regions, data in program:
        if op == "write":
            regs, parts = batch.setdefault(fid, ([], []))
            regs.extend(regions)
            parts.append(data)
        elif op == "open":
            files[fid] = pc.open(comm, fs, paths[fid], amode, method=method, **tuning)
            files[fid].sieve = sieve
        elif op == "close":
            flush_batches()
            f = files.pop(fid)
            f.close()
            closed.append(f.counters())
        else:
            flush_batches()
            if not collective:
                barrier(comm)
    return closed


def main(argv: list[str] | None = None) -> int:
    import numpy  # noqa: F401 - imported before the clock starts, as an application would

    import pvfs
    import pvfs.collective._rma
    import pvfs.collective._service
    import pvfs.collective._twophase
    import pvfs.collective._writebehind

    argv = sys.argv[1:] if argv is None else argv
    config, opts = argv[0], json.loads(argv[1])
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    fs = pvfs.connect(config)
    try:
        run = window if opts["benchmark"] == "sliding_window" else checkpoint
        result = run(comm, fs, opts)
    except BaseException:
        import traceback

        traceback.print_exc()
        sys.stderr.flush()
        comm.Abort(1)
        raise
    if result is not None:
        print("RESULT " + json.dumps(result), flush=True)
    fs.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
