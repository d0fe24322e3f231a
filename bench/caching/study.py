"""``pvfs-admin study caching``: the discretionary-caching paper's trace study (§5, fig. 12-13).

Six application traces (LU, Cholesky, Titan, Mining, Pgrep, DB2; scaled) are replayed through
two nodes' cache stacks (2 MiB local cache each) and one global cache (4 MiB), the paper's
sizes, on a file system of its own started for the study (I/O daemons with emulated disks of
the thesis' era by default, so a miss costs what it cost then). Every trace runs under every
policy, each from cold caches (global cache emptied, emulated disk caches dropped):

==============  =====================================================================
``none``        no caching: every block straight to the I/O daemons
``local``       local caches only
``global``      global cache only
``both``        local and global, cache everything (the normaliser: ``time_norm`` = 1)
``plan``        both, with the per-phase plan of ``traces/plan.py`` (profile-directed)
``runtime10``   both, runtime bypass at the global cache, threshold 10
``runtime25``   the same, threshold 25
``adaptive``    both, runtime bypass with the adaptive threshold
``sketch``      both, TinyLFU-like frequency-sketch admission
==============  =====================================================================
"""

from __future__ import annotations

import contextlib
import os
import platform
import time
from collections.abc import Callable
from typing import Any

import trio

from pvfs.bench.caching.setups import IOD_CACHE, POLICIES, STORAGE, TRACES, TRACES_NOTE, Setup
from pvfs.bench.caching.stats import MIN_RUNS_95, median_interval, ratio_interval
from pvfs.cache import StreamPolicy
from pvfs.gcache.config import gcache_config, gcache_table
from pvfs.gcache.stack import CacheStack
from pvfs.layout.stripe import Stripe
from pvfs.traces.format import Op
from pvfs.traces.generators import generate
from pvfs.traces.plan import make_plan
from pvfs.traces.replay.cached import prepare_files, replay_cached

__all__ = ["DEFAULT_REPEAT", "IOD_CACHE", "POLICIES", "QUICK_REPEAT", "TRACES", "TRACES_NOTE", "Setup",
           "replay_all", "run_study", "study_cluster", "summarise"]

LOCAL_BYTES = 2 << 20
GLOBAL_BYTES = 4 << 20
NODES = 2
NPROCS = 4
STRIPE = Stripe(0, -1, 32 << 10)  # the paper's 32 KiB stripe


def storage_table(storage: str, iod_cache: int | None) -> dict[str, Any]:
    """The ``[storage]`` table: ``storage`` for every I/O daemon and, for emulated disks,
    ``iod_cache`` bytes of page cache in front of each (None: the preset's)."""
    table: dict[str, Any] = {"default": storage}
    if iod_cache is not None and storage.startswith("emulated"):
        table["cache_bytes"] = iod_cache
    return table


@contextlib.contextmanager
def study_cluster(iods: int = 2, storage: str = STORAGE,
                  iod_cache: int | None = None, segment_blocks: int = 4):
    """A file system of its own under a temp dir: ``iods`` I/O daemons with ``storage``
    (``iod_cache``: see :func:`storage_table`), one global cache of :data:`GLOBAL_BYTES`
    with bypass segments of ``segment_blocks`` blocks; stopped and removed afterwards."""
    from pvfs.cluster.launch import free_ports, scratch_cluster

    port = free_ports(1)[0]
    extra = {"gcache": gcache_table([f"127.0.0.1:{port}"], capacity=GLOBAL_BYTES,
                                    flush_interval=0.5, segment_blocks=segment_blocks),
             "storage": storage_table(storage, iod_cache)}
    with scratch_cluster("pvfs-study-", iods, stripe=STRIPE, request_timeout=60.0,
                         extra=extra) as cfg:
        yield cfg


def _call(ep, header: dict) -> dict:
    from pvfs.cluster.launch import request

    reply = request(ep, header, 30.0)
    if reply.get("err"):
        raise OSError(int(reply["err"]), str(reply.get("msg")))
    return reply


async def _one(cfg, trace, files, setup: Setup, plan) -> dict[str, Any]:
    g = gcache_config(cfg)
    assert g is not None
    gep = g.endpoints[0]
    _call(gep, {"op": "policy_set", "policy": setup.policy, "threshold": setup.threshold,
                "drop": True})
    for ep in cfg.iods:
        _call(ep, {"op": "disk_drop"})
    disk0 = _disks(cfg)
    sizes = {f.ino: e.size for e, f in ((e, files[e.id]) for e in trace.files)}
    async with contextlib.AsyncExitStack() as stack:
        nodes = [await stack.enter_async_context(CacheStack.open(
            cfg, local=setup.local, local_size=LOCAL_BYTES, gcache=setup.gcache, sizes=sizes,
            stream=StreamPolicy(min_bytes=0, readahead=0))) for _ in range(NODES)]
        res = await replay_cached(trace, nodes, files, plan if setup.plan else None)
    # The clients' side of the decisions (both nodes summed): bypass hints taken, requests
    # and bytes sent through the global cache and straight to the I/O daemons.
    client: dict[str, int] = {}
    for node in nodes:
        if node.gbackend is not None:
            for k, v in node.gbackend.stats().items():
                client[k] = client.get(k, 0) + v
    gstats = _call(gep, {"op": "stats"})
    disk1 = _disks(cfg)
    looked_local = res.local.get("hits", 0) + res.local.get("misses", 0)
    looked_global = gstats["hits"] + gstats["misses"]
    return {"time_s": res.time_s,
            "local_hit_rate": res.local.get("hits", 0) / looked_local if looked_local else 0.0,
            "global_hit_rate": gstats["hits"] / looked_global if looked_global else 0.0,
            "global": {k: gstats.get(k) for k in GSTATS},
            # What each emulated disk did in this run (its counters' differences): the runs
            # are disk-bound, so busy_s is about the run's time.
            "disks": [{k: b[k] - a[k] for k in DISK_COUNTERS} for a, b in zip(disk0, disk1)
                      if a is not None and b is not None],
            "client": client, "local": dict(res.local),
            "ops": res.ops, "bytes": res.bytes}


#: Runs per cell unless ``--repeat`` says otherwise: the fewest whose order-statistic interval
#: of the median (:mod:`pvfs.bench.caching.stats`) reaches 95 %; ``--quick``: 3, the fewest
#: with an interval at all (the range, 75 %: 6 rounds of the quick study take ~45 min of an
#: idle machine, several times that on the loaded one).
DEFAULT_REPEAT = MIN_RUNS_95
QUICK_REPEAT = 3
STATISTIC_NOTE = ("time_s: median of the runs; time_norm: median over the interleaved rounds "
                  "of run / both's run of the same round; _lo/_hi: order-statistic interval "
                  "of that median (distribution-free; coverage in _level, 95 % from 6 runs, "
                  "the range below that: 75 % at 3); every run kept in runs_s/runs")

GSTATS = ("hits", "misses", "admissions", "bypasses", "evictions", "threshold",
          "bypassed_blocks", "transient_blocks", "write_through_blocks", "shared_blocks",
          "through_waits", "through_wait_ms", "through_blocks", "inflight_waits",
          "refetched_blocks", "fetched_blocks")
DISK_COUNTERS = ("accesses", "busy_s", "miss_bytes", "hit_bytes", "write_bytes")


def _disks(cfg) -> list[dict[str, Any] | None]:
    """Each I/O daemon's emulated disk counters (None for posix storage)."""
    return [_call(ep, {"op": "sched_get"}).get("disk") for ep in cfg.iods]


def _run_shaped(traces: list[str], policies: list[str], *, iods: int, shaped: str,
                storage: str, iod_cache: int | None, quick: bool, repeat: int,
                progress: bool) -> list[dict]:
    """The study's replays from a client host of the multi-host harness (``--shaped``)."""
    import json
    import subprocess
    import sys

    from pvfs.bench.latency import shaped_gcache_cluster

    with shaped_gcache_cluster(iods, shaped, capacity=GLOBAL_BYTES,
                               storage=storage_table(storage, iod_cache),
                               stripe=STRIPE, flush_interval=0.5) as (net, cfg):
        job = {"traces": traces, "policies": policies, "quick": quick, "repeat": repeat,
               "progress": progress}
        done = net.run("c0", [sys.executable, "-m", "pvfs.bench.caching.study", cfg.path,
                              json.dumps(job)], capture_output=False,
                       stdout=subprocess.PIPE, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"the study's client host failed (exit {done.returncode})")
        return json.loads(done.stdout)


def run_study(traces: list[str], policies: list[str], *, quick: bool = True, iods: int = 2,
              storage: str = STORAGE, iod_cache: int | None = IOD_CACHE,
              repeat: int | None = None, shaped: str | None = None, model: str | None = None,
              progress: Callable[[str], None] | None = None,
              sweep: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run the study; the JSON document ``--json`` prints (``results`` as the issue asks, plus
    the setup and machine).

    ``shaped`` (e.g. ``"100mbit"``): over the multi-host harness instead of loopback — every
    I/O daemon, the global cache and the client on a host of their own behind links of that
    rate (``pvfs.cluster.netns``), so each hop costs a transfer as on the paper's cluster and a
    global miss costs two (the paper's table 1: a global miss about twice a direct read).

    ``model="paper"``: no file system at all; every request is charged the paper's table 1-2
    latencies by the trace-driven model :mod:`pvfs.bench.caching.sim` (same traces, caches and
    policy objects; deterministic, seconds).

    ``sweep`` (``{"threshold": [...], "segment": [...]}``, optionally ``"layout": "panels"``):
    instead of ``policies``, fig. 9's grid (or two panels) of runtime bypass thresholds and
    segment sizes (:mod:`pvfs.bench.caching.sweep`).
    """
    unknown = [t for t in traces if t not in TRACES] + [p for p in policies if p not in POLICIES]
    if unknown:
        raise ValueError(f"unknown trace or policy: {', '.join(unknown)}")
    if model not in (None, "paper"):
        raise ValueError(f"unknown model {model!r} (paper)")
    if repeat is None:
        repeat = QUICK_REPEAT if quick else DEFAULT_REPEAT
    repeat = 1 if model else repeat
    if repeat < 1:
        raise ValueError("--repeat must be at least 1")
    if sweep and shaped:
        raise ValueError("--sweep runs on loopback or in the model, not --shaped")
    started, load_start = time.time(), os.getloadavg()
    if sweep:
        from pvfs.bench.caching.sweep import run_sweep, sweep_doc

        results = run_sweep(traces, sweep, quick=quick, model=model, iods=iods,
                            storage=storage, iod_cache=iod_cache, repeat=repeat,
                            progress=progress)
        policies = list(dict.fromkeys(r["policy"] for r in results))
    elif model:
        results = model_all(traces, policies, quick=quick)
    elif shaped:
        results = _run_shaped(traces, policies, iods=iods, shaped=shaped, storage=storage,
                              iod_cache=iod_cache, quick=quick, repeat=repeat,
                              progress=progress is not None)
    else:
        with study_cluster(iods, storage, iod_cache) as cfg:
            results = replay_all(cfg, traces, policies, quick=quick, repeat=repeat,
                                 progress=progress)
    return {"traces": TRACES_NOTE,
            "statistic": STATISTIC_NOTE,
            **({"sweep": sweep_doc(sweep)} if sweep else {}),
            "results": [_ordered(r) for r in results],
            "bounds": hit_bounds(traces, quick=quick),
            "setup": {"nodes": NODES, "nprocs": NPROCS, "local_bytes": LOCAL_BYTES,
                      "global_bytes": GLOBAL_BYTES, "iods": iods, "storage": storage,
                      "iod_cache": iod_cache,
                      "links": f"netns, {shaped} per host" if shaped else "loopback",
                      "model": model,
                      "stripe": STRIPE.ssize, "quick": quick, "repeat": repeat,
                      "traces": {t: TRACES[t][0 if quick else 1] for t in traces}},
            "machine": {"host": platform.node(), "cpus": os.cpu_count(),
                        "load_start": load_start, "load": os.getloadavg(),
                        "python": platform.python_version()},
            "elapsed_s": time.time() - started}


def hit_bounds(traces: list[str], *, quick: bool) -> dict[str, dict[str, Any]]:
    """Per trace, the most global-cache hits any policy could get (:mod:`pvfs.bench.caching.opt`,
    on the lookups the model's caches make; the measured local caches differ a little)."""
    from pvfs.bench.caching.opt import global_hit_bound

    return {name: global_hit_bound(generate(name, NPROCS, TRACES[name][0 if quick else 1],
                                            seed=1),
                                   local_bytes=LOCAL_BYTES, global_bytes=GLOBAL_BYTES,
                                   nodes=NODES)
            for name in traces}


def model_all(traces: list[str], policies: list[str], *, quick: bool) -> list[dict[str, Any]]:
    """Every trace under every policy in the model at the paper's latencies."""
    from pvfs.bench.caching.sim import simulate

    results: list[dict[str, Any]] = []
    for name in traces:
        trace = generate(name, NPROCS, TRACES[name][0 if quick else 1], seed=1)
        plan = make_plan(trace, global_bytes=GLOBAL_BYTES)
        rows = []
        for pol in policies:
            row = simulate(trace, POLICIES[pol], plan, local_bytes=LOCAL_BYTES,
                           global_bytes=GLOBAL_BYTES, nodes=NODES)
            row.update(trace=name, policy=pol, ops=sum(1 for r in trace.records
                                                       if r.op != Op.BARRIER),
                       bytes=sum(n for r in trace.records for _, n in r.extents()))
            rows.append(row)
        base = next((r["time_s"] for r in rows if r["policy"] == "both"), None)
        for r in rows:  # deterministic: one run, an interval of one point
            r["time_norm"] = r["time_s"] / base if base else None
            r.update(time_norm_lo=r["time_norm"], time_norm_hi=r["time_norm"],
                     time_norm_level=None, runs_s=[r["time_s"]])
        results.extend(rows)
    return results


def replay_all(cfg, traces: list[str], policies: list[str], *, quick: bool, repeat: int,
               progress: Callable[[str], None] | None = None,
               setups: dict[str, Setup] | None = None) -> list[dict[str, Any]]:
    """Every trace under every policy on the running file system ``cfg`` (the client side
    of the study); rows with ``time_norm`` filled in per trace. ``setups``: the policies by
    name (default :data:`POLICIES`; the sweep's are generated)."""
    results: list[dict[str, Any]] = []
    setups = setups or POLICIES

    async def main() -> None:
        for name in traces:
            params = TRACES[name][0 if quick else 1]
            trace = generate(name, NPROCS, params, seed=1)
            plan = make_plan(trace, global_bytes=GLOBAL_BYTES)
            async with CacheStack.open(cfg, local=False, gcache=False) as prep:
                files = await prepare_files(trace, prep, f"/study-{name}")
            # Repeats interleaved (every policy once, then again, each round starting one
            # policy later), so that a slow minute of the machine does not fall on one
            # policy's runs only; every run is kept.
            runs: dict[str, list[dict[str, Any]]] = {pol: [] for pol in policies}
            for rep in range(repeat):
                k = rep % len(policies)
                for pol in policies[k:] + policies[:k]:
                    runs[pol].append(await _one(cfg, trace, files, setups[pol], plan))
            rows = [summarise(name, pol, runs[pol], runs.get("both")) for pol in policies]
            for r in rows:  # the machine's load when the trace's rounds ended
                r["load"] = os.getloadavg()
            if progress:
                for r in rows:
                    progress(_progress_line(r))
            results.extend(rows)

    trio.run(main)
    return results


def summarise(trace: str, policy: str, runs: list[dict[str, Any]],
              base: list[dict[str, Any]] | None) -> dict[str, Any]:
    """One cell's row from its runs (in round order) and those of ``both`` (``base``, the
    same rounds; None: not run). ``time_s`` is the median of the runs, ``time_norm`` the
    median over the rounds of run ÷ ``both``'s run of the same round, each with its
    order-statistic interval (``_lo``/``_hi``) and that interval's coverage (``_level``;
    :mod:`pvfs.bench.caching.stats`). The counters (hit rates, ``global``, ``disks``, ...)
    are those of the run whose time is the lower median; every run's are in ``runs``."""
    times = [row["time_s"] for row in runs]
    mid = sorted(range(len(runs)), key=lambda i: times[i])[(len(runs) - 1) // 2]
    row = dict(runs[mid])
    med, lo, hi, level = median_interval(times)
    row.update(trace=trace, policy=policy, time_s=med, time_s_lo=lo, time_s_hi=hi,
               time_s_level=level,
               runs_s=times, median_s=med, counters_of_run=mid,
               runs=[{k: r[k] for k in ("time_s", "local_hit_rate", "global_hit_rate",
                                        "global", "disks", "client", "local")} for r in runs])
    if base is not None:
        norm, nlo, nhi, nlevel = ratio_interval(times, [r["time_s"] for r in base])
        row.update(time_norm=norm, time_norm_lo=nlo, time_norm_hi=nhi, time_norm_level=nlevel,
                   median_norm=norm)
    else:
        row.update(time_norm=None, time_norm_lo=None, time_norm_hi=None, time_norm_level=None,
                   median_norm=None)
    return row


def _progress_line(r: dict[str, Any]) -> str:
    norm = ("" if r["time_norm"] is None else
            f"  ÷both {r['time_norm']:.3f} [{r['time_norm_lo']:.3f}, {r['time_norm_hi']:.3f}]")
    return (f"{r['trace']:9s} {r['policy']:10s} {r['time_s']:7.3f} s{norm}  "
            f"local {r['local_hit_rate']:.2f}  global {r['global_hit_rate']:.2f}"
            + (f"  runs {', '.join(f'{t:.2f}' for t in r['runs_s'])}"
               if len(r["runs_s"]) > 1 else ""))


def _ordered(r: dict[str, Any]) -> dict[str, Any]:
    keys = ("trace", "policy", "time_s", "time_norm", "local_hit_rate", "global_hit_rate",
            "time_norm_lo", "time_norm_hi", "time_norm_level")
    out = {k: r.get(k) for k in keys}
    out.update({k: v for k, v in r.items() if k not in keys})
    return out


if __name__ == "__main__":  # the client host of a shaped study: python -m ... CONFIG JOB_JSON
    import json as _json
    import sys as _sys

    from pvfs.config import load as _load

    _job = _json.loads(_sys.argv[2])
    _rows = replay_all(_load(_sys.argv[1]), _job["traces"], _job["policies"],
                       quick=_job["quick"], repeat=_job["repeat"],
                       progress=(lambda line: print(line, file=_sys.stderr, flush=True))
                       if _job["progress"] else None)
    print(_json.dumps(_rows))
