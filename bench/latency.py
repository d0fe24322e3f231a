"""``pvfs-admin bench latency``: the discretionary-caching paper's §3.3 on this machine.

* Table 1: read latency of one request of 4 KiB..256 KiB on a file striped over 1..4 I/O
  daemons (32 KiB stripes): ``pvfs`` (no cache), ``local_hit``, ``local_miss`` (local cache,
  no global), ``global_hit`` and ``global_miss`` (local miss, then the global cache), and the
  *required hit rate* ``(global_miss - pvfs) / (global_miss - global_hit)``: the global cache
  hit rate above which it beats no caching (above 1: it cannot).
* Table 2: write latency (time until the call returns) without caching and with the local
  cache (write-behind).
* Fig. 2: the required hit rate over the request size, one line per I/O daemon count.
* Figs. 3-4: the micro-benchmark — random reads and writes (equal odds) of 1..``s`` blocks at
  block offsets 0..``o``; ``s`` = 2, ``o`` = 10, 600, 25000; 1 node / 1 I/O daemon and 2 nodes
  / 3 I/O daemons; under no cache, local, global and both.

It starts a file system of its own with one global cache of 40 MiB and 2 MiB local caches,
the paper's sizes. Its I/O daemons store on posix by default (their page cache holds the files,
as the paper's latencies measure the software path) or on emulated disks (``--storage
emulated:PRESET``: a global hit then saves a disk access, as on the paper's cluster, and every
micro-benchmark run starts with the disks' caches empty and records their accesses). The
daemons run on this machine over loopback, or each on a host of its own behind shaped links
(``--shaped RATE``, the multi-host harness of ``pvfs.cluster.netns``).
"""

from __future__ import annotations

import contextlib
import os
import platform
import random
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

from pvfs.bench.caching.stats import median_interval, ratio_interval
from pvfs.cache import StreamPolicy
from pvfs.gcache.config import gcache_table
from pvfs.gcache.stack import CacheStack
from pvfs.layout.stripe import Stripe

__all__ = ["render", "run_latency", "shaped_gcache_cluster"]  # plots: latency_plot.py

SIZES = [4 << 10, 8 << 10, 16 << 10, 32 << 10, 64 << 10, 128 << 10, 256 << 10]
SSIZE = 32 << 10
LOCAL = 2 << 20
GLOBAL = 40 << 20
BLOCK = 4096
FILE = 16 << 20
#: The micro-benchmark's largest offsets (blocks), the paper's figs. 3-4: good locality, a
#: working set between the local and the global cache, none.
MICRO_O = (10, 600, 25000)
_ZERO = bytes(FILE)
#: Runs of each micro-benchmark cell unless ``--micro-repeat`` says otherwise: 6, the fewest
#: whose order-statistic interval of the median reaches 95 % (``--quick``: 3, whose interval
#: is the range, 75 %).
MICRO_REPEAT = 6
MICRO_REPEAT_QUICK = 3


@contextlib.contextmanager
def _cluster(iods: int, storage: dict[str, Any] | None = None):
    from pvfs.cluster.launch import free_ports, scratch_cluster

    port = free_ports(1)[0]
    extra: dict[str, Any] = {"gcache": gcache_table([f"127.0.0.1:{port}"], capacity=GLOBAL)}
    if storage is not None:
        extra["storage"] = storage
    with scratch_cluster("pvfs-lat-", iods, stripe=Stripe(0, -1, SSIZE), request_timeout=60.0,
                         extra=extra) as cfg:
        yield cfg


def _med(xs: list[float]) -> float:
    return statistics.median(xs) * 1000.0  # ms


def _interval(xs: list[float]) -> tuple[float, float]:
    """The order-statistic interval of the median of ``xs`` seconds, in ms
    (:func:`pvfs.bench.caching.stats.median_interval`)."""
    _, lo, hi, _ = median_interval(xs)
    return lo * 1000.0, hi * 1000.0


def _cell(**runs: list[float]) -> dict[str, float]:
    """A table cell: per case its median (ms) and ``CASE_lo``/``CASE_hi``."""
    out: dict[str, float] = {}
    for case, xs in runs.items():
        out[case] = _med(xs)
        out[f"{case}_lo"], out[f"{case}_hi"] = _interval(xs)
    return out


def _node(cfg, **kw):
    return CacheStack.open(cfg, local_size=LOCAL, stream=StreamPolicy(min_bytes=0, readahead=0),
                           **kw)


async def _tables(cfg, max_iods: int, reps: int, progress) -> tuple[list, list]:
    reads, writes = [], []
    async with _node(cfg, gcache=False) as loc, _node(cfg, gcache=True) as glob, \
            _node(cfg, local=False, gcache=False) as raw:
        client = raw.client
        for k in range(1, max_iods + 1):
            f = await raw.open_file(f"/lat{k}", create=True, stripe=Stripe(0, k, SSIZE))
            st = await raw.direct.stripe_of(f.ino)
            await client.write(f.ino, st, 0, _ZERO)
            for node in (loc, glob):
                node.sizes[f.ino] = FILE
            row: dict[str, Any] = {"iods": k}
            wrow: dict[str, Any] = {"iods": k}
            for s in SIZES:
                offs = [(i * s) % (FILE - s) for i in range(reps)]
                t_p, t_lh, t_lm, t_gh, t_gm, t_wp, t_wc = ([] for _ in range(7))
                for off in offs:
                    t0 = time.perf_counter()
                    await client.read(f.ino, st, off, s)
                    t_p.append(time.perf_counter() - t0)
                    loc.cache.invalidate(f.ino)
                    t0 = time.perf_counter()
                    await loc.read(f, off, s)
                    t_lm.append(time.perf_counter() - t0)
                    t0 = time.perf_counter()
                    await loc.read(f, off, s)
                    t_lh.append(time.perf_counter() - t0)
                    glob.cache.invalidate(f.ino)
                    assert glob.gbackend is not None
                    await glob.gbackend.forget(f.ino)  # not in the global cache either
                    t0 = time.perf_counter()
                    await glob.read(f, off, s)
                    t_gm.append(time.perf_counter() - t0)
                    glob.cache.invalidate(f.ino)
                    t0 = time.perf_counter()
                    await glob.read(f, off, s)
                    t_gh.append(time.perf_counter() - t0)
                    data = _ZERO[:s]
                    t0 = time.perf_counter()
                    await client.write(f.ino, st, off, data)
                    t_wp.append(time.perf_counter() - t0)
                    t0 = time.perf_counter()
                    await loc.write(f, off, data)
                    t_wc.append(time.perf_counter() - t0)
                    await loc.cache.flush(f.ino)
                p, gh, gm = _med(t_p), _med(t_gh), _med(t_gm)
                req = (gm - p) / (gm - gh) if gm > gh else float("inf")
                row[s] = {**_cell(pvfs=t_p, local_hit=t_lh, local_miss=t_lm, global_hit=t_gh,
                                  global_miss=t_gm), "required_hr": max(0.0, req)}
                wrow[s] = _cell(pvfs=t_wp, caching=t_wc)
                if progress:
                    progress(f"iods {k} {s >> 10:4d}K  pvfs {p:.3f}  global hit {gh:.3f} "
                             f"miss {gm:.3f} ms  required hr {row[s]['required_hr']:.2f}")
            reads.append(row)
            writes.append(wrow)
    return reads, writes


def _disks(cfg) -> list[dict[str, Any] | None]:
    """Each I/O daemon's emulated disk counters (None on posix storage)."""
    from pvfs.cluster.launch import request

    return [request(ep, {"op": "sched_get"}, 30.0).get("disk") for ep in cfg.iods]


def _gcache_dirty(cfg) -> int:
    """Dirty blocks the global cache holds (every file)."""
    from pvfs.cluster.launch import request
    from pvfs.gcache.config import gcache_config

    g = gcache_config(cfg)
    assert g is not None
    return sum(int(request(ep, {"op": "stats"}, 30.0).get("dirty_blocks", 0))
               for ep in g.endpoints)


def _drop_disk_caches(cfg) -> None:
    """Every run starts with cold emulated disks (posix storage: nothing to do)."""
    from pvfs.cluster.launch import request

    for ep in cfg.iods:
        request(ep, {"op": "disk_drop"}, 30.0)


def micro_plan(nodes: int, s: int, o: int, ops: int) -> list[list[tuple[bool, int, int]]]:
    """The micro-benchmark's operations, per node: ``(is_read, offset, length)`` in bytes,
    reads and writes at even odds, 1..``s`` blocks at block offsets 0..``o`` (seeded, so the
    measured runs and the model replay the same operations)."""
    rng = random.Random(o * 31 + nodes)
    return [[(rng.random() < 0.5, rng.randint(0, o) * BLOCK, rng.randint(1, s) * BLOCK)
             for _ in range(ops // nodes)] for _ in range(nodes)]


async def _micro(cfg, nodes: int, iods: int, s: int, o: int, ops: int,
                 setup: str) -> dict[str, float]:
    """One run of the micro-benchmark: its seconds (``time_s``), the seconds its reads and
    its writes took (summed over the nodes' operations) and the end's flush (``flush_s``),
    and the disk accesses it made (emulated disks; 0 on posix storage).

    The clock stops when every setup's writes are at the I/O daemons: the local caches'
    write-behind data and the global cache's dirty blocks written back (until s15 the global
    setups stopped it with their writes still in the global cache: on emulated disks the
    runs with a global cache left 40-60 of 600 operations' disk accesses uncharged). The
    paper's no-cache writes ended in the I/O daemons' page cache, so "at the I/O daemons"
    is where every setup's writes end here too; nothing is fsync'd."""
    local = setup in ("local", "both")
    gcache = setup in ("global", "both")
    size = (o + s) * BLOCK
    async with contextlib.AsyncExitStack() as ex:
        sizes: dict[int, int] = {}
        ns = [await ex.enter_async_context(_node(cfg, local=local, gcache=gcache, sizes=sizes))
              for _ in range(nodes)]
        name = f"/micro-{nodes}-{iods}-{o}"
        f = await ns[0].open_file(name, create=True, stripe=Stripe(0, iods, SSIZE))
        st = await ns[0].direct.stripe_of(f.ino)
        if (await ns[0].client.getattr(f.ino))["size"] < size:
            for off in range(0, size, 1 << 20):
                await ns[0].client.write(f.ino, st, off, _ZERO[:min(1 << 20, size - off)])
        sizes[f.ino] = size
        if gcache:
            assert ns[0].gbackend is not None
            await ns[0].gbackend.forget(f.ino)
        plan = micro_plan(nodes, s, o, ops)
        _drop_disk_caches(cfg)
        disk0 = _disks(cfg)
        spent = {"read_s": 0.0, "write_s": 0.0}

        async def worker(node: CacheStack, todo) -> None:
            for is_read, off, n in todo:
                t = time.perf_counter()
                if is_read:
                    await node.read(f, off, n)
                else:
                    await node.write(f, off, _ZERO[:n])
                spent["read_s" if is_read else "write_s"] += time.perf_counter() - t

        t0 = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for node, todo in zip(ns, plan):
                nursery.start_soon(worker, node, todo)
        t1 = time.perf_counter()
        for node in ns:
            await node.cache.flush(f.ino)
            if node.gbackend is not None:
                await node.gbackend.flush(f.ino)
        took = time.perf_counter() - t0
        accesses = sum(b["accesses"] - a["accesses"] for a, b in zip(disk0, _disks(cfg))
                       if a is not None and b is not None)
        return {"time_s": took, "flush_s": took - (t1 - t0), **spent, "disk_accesses": accesses,
                "gcache_dirty_blocks": _gcache_dirty(cfg) if gcache else 0}


MICRO_SETUPS = ("none", "local", "global", "both")


def micro_row(row: dict[str, Any], times: dict[str, list[float]]) -> dict[str, Any]:
    """Fill a figs. 3-4 row from each setup's run times (interleaved rounds, in order): per
    setup the median (``row[setup]``), its order-statistic interval (``_lo``/``_hi``, coverage
    in ``_level``), every run (``_runs``), and ÷ none: the median over the rounds of the run
    ÷ none's run of the same round, with its interval (``_vs_none``, ``_vs_none_lo``/``_hi``)."""
    for setup, xs in times.items():
        row[setup], row[f"{setup}_lo"], row[f"{setup}_hi"], row[f"{setup}_level"] = \
            median_interval(xs)
        row[f"{setup}_runs"] = list(xs)
        if "none" in times:
            m, lo, hi, _ = ratio_interval(xs, times["none"])
            row[f"{setup}_vs_none"], row[f"{setup}_vs_none_lo"], row[f"{setup}_vs_none_hi"] = \
                m, lo, hi
    return row


def _measure(cfg, reps: int, ops: int, max_iods: int, micro: bool,
             progress: Callable[[str], None] | None, tables: bool = True,
             micro_repeat: int = 1, micro_o: tuple[int, ...] = MICRO_O) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if tables:
        out["read_ms"], out["write_ms"] = trio.run(_tables, cfg, max_iods, reps, progress)
    if micro:
        rows = []
        setups = list(MICRO_SETUPS)
        for nodes, iods in ((1, 1), (2, 3)):
            for o in micro_o:
                row: dict[str, Any] = {"nodes": nodes, "iods": iods, "s": 2, "o": o,
                                       "ops": ops}
                runs: dict[str, list[dict[str, float]]] = {k: [] for k in setups}
                for rep in range(micro_repeat):  # interleaved, each round one setup later
                    k = rep % len(setups)
                    for setup in setups[k:] + setups[:k]:
                        runs[setup].append(trio.run(_micro, cfg, nodes, iods, 2, o, ops,
                                                    setup))
                micro_row(row, {k: [r["time_s"] for r in v] for k, v in runs.items()})
                for setup in setups:  # every run's counters kept
                    for k in ("disk_accesses", "read_s", "write_s", "flush_s",
                              "gcache_dirty_blocks"):
                        row[f"{setup}_{k}"] = [r[k] for r in runs[setup]]
                rows.append(row)
                if progress:
                    progress(f"micro {nodes} node(s) {iods} iod(s) o={o}: " + "  ".join(
                        f"{k} {row[k]:.2f}s [{row[k + '_lo']:.2f}, {row[k + '_hi']:.2f}]"
                        for k in ("none", "local", "global", "both")))
        out["micro"] = rows
    return out


def micro_trace(nodes: int, s: int, o: int, ops: int):
    """The micro-benchmark as a trace (rank ``r`` on node ``r``; one file), for the model."""
    from pvfs.traces.format import FileEntry, Op, Record, Trace

    recs = [Record(r, 0.0, Op.READ if is_read else Op.WRITE, 0, off, n)
            for r, todo in enumerate(micro_plan(nodes, s, o, ops)) for is_read, off, n in todo]
    return Trace(nprocs=nodes, files=[FileEntry(0, "micro", (o + s) * BLOCK, True)],
                 records=recs)


def model_micro(ops: int, micro_o: tuple[int, ...] = MICRO_O) -> dict[str, Any]:
    """Figs. 3-4 in the trace-driven model at the paper's latencies
    (:mod:`pvfs.bench.caching.sim`, table 1-2 rows of the figure's I/O daemon count): the same
    operations as the measured runs, deterministic (one run; an interval of one point).

    ``mechanism``: at each ``o``, per setup the modelled milliseconds per read ÷ ``none``'s,
    and the share of reads that missed the local cache (``local``) or the global one
    (``global``): at o = 25000 nearly every read misses, so the ratios are what a local miss
    and a global miss cost against a direct read (the paper: ~15 % more, about twice)."""
    from pvfs.bench.caching.setups import POLICIES
    from pvfs.bench.caching.sim import simulate

    rows, mech = [], []
    for nodes, iods in ((1, 1), (2, 3)):
        for o in micro_o:
            trace = micro_trace(nodes, 2, o, ops)
            got = {k: simulate(trace, POLICIES[k], None, local_bytes=LOCAL, global_bytes=GLOBAL,
                               nodes=nodes, iods=iods) for k in MICRO_SETUPS}
            row = micro_row({"nodes": nodes, "iods": iods, "s": 2, "o": o, "ops": ops},
                            {k: [g["time_s"]] for k, g in got.items()})
            for k, g in got.items():
                row[f"{k}_level"] = None  # deterministic
                row[f"{k}_read_s"], row[f"{k}_write_s"] = [g["read_s"]], [g["write_s"]]
            rows.append(row)
            per_read = {k: g["read_s"] / g["reads"] for k, g in got.items() if g["reads"]}
            mech.append({"nodes": nodes, "iods": iods, "o": o,
                         "ms_per_read": {k: v * 1000 for k, v in per_read.items()},
                         "read_vs_none": {k: v / per_read["none"] for k, v in per_read.items()},
                         "local_miss_share": 1 - got["local"]["local_hit_rate"],
                         "global_miss_share": 1 - got["global"]["global_hit_rate"]})
    return {"micro": rows, "mechanism": mech}


@contextlib.contextmanager
def _shaped_cluster(iods: int, rate: str, storage: dict[str, Any] | None = None):
    with shaped_gcache_cluster(iods, rate, capacity=GLOBAL, storage=storage) as got:
        yield got


@contextlib.contextmanager
def shaped_gcache_cluster(iods: int, rate: str, *, capacity: int,
                          storage: dict[str, Any] | None = None,
                          stripe: Stripe | None = None, **gcache):
    """The netns harness (``pvfs.cluster.netns``): each I/O daemon, the global cache and the
    client (host ``c0``) on a host of their own behind ``rate``-shaped links, so a global
    miss pays two transfers as on the paper's cluster. Yields ``(network, config)``; the
    client side runs with ``network.run("c0", argv)``; ``storage``: the ``[storage]`` table
    (default: posix)."""
    import sys

    from pvfs.cluster.netns import Network
    from pvfs.config import load

    hosts = [f"iod{i}" for i in range(iods)] + ["gc", "c0"]
    root = Path(tempfile.mkdtemp(prefix="pvfs-lat-net-"))
    try:
        with Network(hosts, rate=rate) as net:
            extra: dict[str, Any] = {"gcache": gcache_table([f"{net.addr('gc')}:7410"],
                                                            capacity=capacity, **gcache)}
            if storage is not None:
                extra["storage"] = storage
            cfg = net.make_config(root, [f"iod{i}" for i in range(iods)],
                                  stripe=stripe or Stripe(0, -1, SSIZE), request_timeout=60.0,
                                  extra=extra)
            net.start_daemons(cfg)
            log = open(root / "gcache0.log", "ab")  # noqa: SIM115 - the child keeps it
            net.popen("gc", [sys.executable, "-m", "pvfs.daemons.gcache", "--index", "0",
                             "--config", cfg.path], stdout=log, stderr=log)
            log.close()
            probe = f"import socket; socket.create_connection(({net.addr('gc')!r}, 7410), 1)"
            deadline = time.monotonic() + 20
            while net.run("gc", [sys.executable, "-c", probe]).returncode != 0:
                if time.monotonic() > deadline:
                    raise TimeoutError("the global cache did not come up")
                time.sleep(0.2)
            yield net, load(cfg.path)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def run_latency(*, quick: bool = False, reps: int | None = None, max_iods: int = 4,
                micro: bool = True, tables: bool = True, micro_repeat: int | None = None,
                micro_o: tuple[int, ...] = MICRO_O, ops: int | None = None,
                shaped: str | None = None, storage: str = "posix",
                iod_cache: int | None = None, model: str | None = None,
                progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Measure everything; ``model="paper"``: no file system, figs. 3-4 only, every request
    charged the paper's table 1-2 latencies (:func:`model_micro`); ``shaped`` (e.g. ``"100mbit"``) runs it over the netns harness
    with that link rate instead of loopback; ``storage`` ``emulated:PRESET`` gives the I/O
    daemons emulated disks (``iod_cache`` bytes of page cache each, default the preset's)."""
    import json
    import sys

    from pvfs.bench.caching.study import storage_table

    reps = reps or (7 if quick else 21)
    ops = ops or (600 if quick else 2000)
    micro_repeat = micro_repeat or (MICRO_REPEAT_QUICK if quick else MICRO_REPEAT)
    if model not in (None, "paper"):
        raise ValueError(f"unknown model {model!r} (paper)")
    started = time.time()
    disks = None if storage == "posix" else storage_table(storage, iod_cache)
    out: dict[str, Any] = {"sizes": SIZES, "stripe": SSIZE, "local_bytes": LOCAL,
                           "global_bytes": GLOBAL, "reps": reps, "storage": storage,
                           "iod_cache": iod_cache, "micro_repeat": micro_repeat,
                           "links": f"netns, {shaped} per host" if shaped else "loopback"}
    if model:
        out.update(model_micro(ops, tuple(micro_o)), model=model, micro_repeat=1,
                   storage="model: the paper's tables 1-2")
    elif shaped:
        with _shaped_cluster(max(max_iods, 3), shaped, disks) as (net, cfg):
            argv = [sys.executable, "-m", "pvfs.bench.latency", cfg.path, str(reps),
                    str(ops), str(max_iods), "1" if micro else "0", "1" if tables else "0",
                    str(micro_repeat), ",".join(map(str, micro_o))]
            done = net.run("c0", argv, capture_output=True, text=True)
            if done.returncode != 0:
                raise RuntimeError(f"the client host failed: {done.stderr[-2000:]}")
            inner = json.loads(done.stdout)
            out.update({k: _int_keys(v) if k in ("read_ms", "write_ms") else v
                        for k, v in inner.items()})
    else:
        with _cluster(max(max_iods, 3), disks) as cfg:
            out.update(_measure(cfg, reps, ops, max_iods, micro, progress, tables,
                                micro_repeat, tuple(micro_o)))
    out["machine"] = {"host": platform.node(), "cpus": os.cpu_count(), "load": os.getloadavg(),
                      "python": platform.python_version()}
    out["elapsed_s"] = time.time() - started
    return out


def _int_keys(rows: list[dict]) -> list[dict]:
    """JSON made the request sizes strings: back to ints."""
    return [{(int(k) if k.isdigit() else k): v for k, v in r.items()} for r in rows]


def _ms(cell: dict, case: str) -> str:
    """A table cell: the median and, when the JSON has it, its interval."""
    if f"{case}_lo" not in cell:
        return f"{cell[case]:.3f}"
    return f"{cell[case]:.3f} ({cell[case + '_lo']:.2f}-{cell[case + '_hi']:.2f})"


def render(d: dict[str, Any]) -> str:
    """Tables 1-2 (medians of the reads, interval in brackets) and figs. 3-4 (medians of the
    runs, the interval, and ÷ none)."""
    from pvfs.tables import table

    heads = ["iods", "case"] + [f"{s >> 10}K" for s in d["sizes"]]
    rows = []
    text = ""
    for row in d.get("read_ms", []):
        for case in ("pvfs", "local_hit", "local_miss", "global_hit", "global_miss",
                     "required_hr"):
            rows.append([row["iods"], case] + [_ms(row[s], case) if case != "required_hr"
                                               else f"{row[s][case]:.2f}" for s in d["sizes"]])
    if rows:
        text = ("table 1: read time (ms, median (interval of the median)) and required "
                "global hit rate\n" + table(rows, heads, right=list(range(2, 2 + len(d["sizes"])))))
        rows = []
        for row in d["write_ms"]:
            for case in ("pvfs", "caching"):
                rows.append([row["iods"], case] + [_ms(row[s], case) for s in d["sizes"]])
        text += "\n\ntable 2: write time (ms)\n" + table(
            rows, heads, right=list(range(2, 2 + len(d["sizes"])))) + "\n\n"
    if d.get("micro"):
        text += _render_micro(d)
    if d.get("mechanism"):
        text += "\n\nmechanism (model): ms per read, and ÷ none's\n" + table(
            [[m["nodes"], m["iods"], m["o"], f"{m['ms_per_read']['none']:.3f}",
              f"{m['read_vs_none']['local']:.3f}", f"{m['local_miss_share']:.2f}",
              f"{m['read_vs_none']['global']:.3f}", f"{m['global_miss_share']:.2f}",
              f"{m['read_vs_none']['both']:.3f}"] for m in d["mechanism"]],
            ["nodes", "iods", "o", "none ms/read", "local÷none", "local misses",
             "global÷none", "global misses", "both÷none"], right=list(range(9)))
    return text


def _render_micro(d: dict[str, Any]) -> str:
    from pvfs.tables import table

    def cell(r: dict, k: str) -> str:
        if r.get(f"{k}_lo") is None or r.get(f"{k}_level") is None:
            return f"{r[k]:.3f}"
        return f"{r[k]:.3f} [{r[k + '_lo']:.2f}, {r[k + '_hi']:.2f}]"

    def vs(r: dict, k: str) -> str:
        if r.get(f"{k}_vs_none") is None:
            return "-"
        if r.get(f"{k}_level") is None:
            return f"{r[k + '_vs_none']:.3f}"
        return (f"{r[k + '_vs_none']:.2f} [{r[k + '_vs_none_lo']:.2f}, "
                f"{r[k + '_vs_none_hi']:.2f}]")

    rows = [[r["nodes"], r["iods"], r["o"]] + [cell(r, k) for k in MICRO_SETUPS]
            + [vs(r, k) for k in ("local", "global", "both")] for r in d["micro"]]
    level = d["micro"][0].get("none_level")
    what = ("the paper's latencies (model)" if d.get("model") else
            f"{d.get('micro_repeat')} runs, median [interval of the median, "
            f"{level:.0%}]" if level is not None else "")
    where = ("" if d.get("model") else f"; storage {d.get('storage')}, I/O daemon cache "
             f"{d.get('iod_cache') or 'the preset'}")
    return (f"figs. 3-4: micro-benchmark, s = 2 (seconds; {what}{where})\n"
            + table(rows, ["nodes", "iods", "o", "none", "local", "global", "both",
                           "local÷none", "global÷none", "both÷none"],
                    right=list(range(10))))


if __name__ == "__main__":  # a shaped run's client: ... CONFIG REPS OPS K MICRO TABLES N O,O
    import json
    import sys

    from pvfs.config import load as _load

    _cfg = _load(sys.argv[1])
    print(json.dumps(_measure(_cfg, int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]),
                              sys.argv[5] == "1", None, sys.argv[6] == "1",
                              int(sys.argv[7]), tuple(map(int, sys.argv[8].split(","))))))
