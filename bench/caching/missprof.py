"""Where a local-cache miss's time goes: fig. 4's micro-benchmark split at the backend.

``python -m pvfs.bench.caching.missprof`` runs the micro-benchmark of ``pvfs-admin bench
latency`` (:func:`pvfs.bench.latency.micro_plan`: reads and writes at even odds of 1-2 blocks
at block offsets 0..o) on fig. 4's shape, 2 nodes and 3 I/O daemons, under ``none`` (every
block bypasses the local cache) and ``local`` (a 2 MiB local cache), rounds interleaved. Each
node's backend (:class:`pvfs.gcache.stack.DirectBackend`) is timed, and every backend call
made while one of the benchmark's reads is in progress (the same task) is charged to that
read: so a read's time splits into the time in backend reads, in backend writes (a dirty
block written back to make room) and the rest, the cache's own work. At o = 25000 nearly every
``local`` read misses, so ``local``'s read ÷ ``none``'s is what a local miss costs over a
direct read (the paper: ~15 %), and the split says where the difference goes.

The I/O daemons store on posix (their page cache holds the file): the software path, as the
paper's tables measure it. Run it under ``py-spy record`` (``--only local``) to see the
cache's own work by function.

``--setups none,local,both`` adds the paper's *global miss* (table 1's "Global Miss (Local
Miss)" row): ``both`` is the 2 MiB local cache in front of one global cache daemon of 40 MB
(``bench latency``'s sizes), every segment through it (policy ``all``). The cluster then has
that daemon (any setup with a global cache asks for it; without one the cluster is the
``none,local`` run's, unchanged). The file is forgotten by the global cache before each such
run and its write-back finished after it (outside the reads); at o = 25000 nearly every read
misses both caches, so ``both``'s read ÷ ``none``'s is what a global miss costs over a direct
read (the paper: about twice). The daemon's read misses are counted from its fetches
(``fetched_blocks`` against the blocks the nodes asked it for).
"""

from __future__ import annotations

import argparse
import contextlib
import contextvars
import json
import os
import platform
import sys
import time
from typing import Any

import trio

from pvfs.bench.caching.stats import median_interval, ratio_interval

__all__ = ["run"]

_IN_READ: contextvars.ContextVar[dict[str, float] | None] = contextvars.ContextVar(
    "missprof_read", default=None)
_CALLS = ("read", "write", "read_list", "write_list")


#: Backend writes in flight in this process (any node, any task) and how many have started,
#: reset per run: a backend read that overlaps one (a flush, or the other node's synchronous
#: write under ``none``) is also counted apart (``backend_read_w_s``, ``backend_read_ws``).
_WRITES = {"inflight": 0, "started": 0}


def _instrument(backend: Any, caps: Any = None) -> None:
    """Wrap the backend's calls: time spent in each while a benchmark read is in progress
    (this task) goes to that read's account. ``caps``: the cache's
    :class:`~pvfs.cache._store.BackendCaps`, whose list calls (captured when the cache was
    built) are pointed at the wrapped ones, so the flusher's list writes are seen too."""
    for name in _CALLS:
        inner = getattr(backend, name)

        async def timed(*a, _inner=inner, _name=name, **kw):
            acct = _IN_READ.get()
            writes = _name.startswith("write")
            if writes:
                _WRITES["inflight"] += 1
                _WRITES["started"] += 1
            busy, started = _WRITES["inflight"] > 0, _WRITES["started"]
            t = time.perf_counter()
            try:
                return await _inner(*a, **kw)
            finally:
                dt = time.perf_counter() - t
                if writes:
                    _WRITES["inflight"] -= 1
                if acct is not None and "_t_out" in acct:
                    _thread_split(acct, t, t + dt)
                if acct is not None:
                    acct[f"backend_{_name}_s"] = acct.get(f"backend_{_name}_s", 0.0) + dt
                    acct[f"backend_{_name}s"] = acct.get(f"backend_{_name}s", 0) + 1
                    if not writes and (busy or _WRITES["started"] != started):
                        acct["backend_read_w_s"] = acct.get("backend_read_w_s", 0.0) + dt
                        acct["backend_read_ws"] = acct.get("backend_read_ws", 0) + 1
        setattr(backend, name, timed)
    if caps is not None:
        caps.read_list = backend.read_list if caps.read_list is not None else None
        caps.write_list = backend.write_list if caps.write_list is not None else None


def _instrument_thread(client: Any) -> None:
    """Time the client's read in its worker thread: the benchmark read's account (shared
    with the thread through the copied context) gets when the thread began and ended it."""
    inner = client._read_sync

    def timed_sync(*a, _inner=inner):
        acct = _IN_READ.get()
        t_in = time.perf_counter()
        try:
            return _inner(*a)
        finally:
            if acct is not None:
                acct["_t_in"], acct["_t_out"] = t_in, time.perf_counter()
    client._read_sync = timed_sync


def _thread_split(acct: dict[str, Any], t_call: float, t_back: float) -> None:
    """A backend read's time in three: until its worker thread ran the read (dispatch),
    in the thread (the I/O daemons, plus the thread's wait for the GIL) and from the thread's
    end until the reading task ran again (the trio thread busy with other tasks)."""
    t_in, t_out = acct.pop("_t_in"), acct.pop("_t_out")
    for k, v in (("dispatch", t_in - t_call), ("thread", t_out - t_in), ("return", t_back - t_out)):
        acct[f"backend_{k}_s"] = acct.get(f"backend_{k}_s", 0.0) + v
    acct["backend_threads"] = acct.get("backend_threads", 0) + 1


async def work(node: Any, f: Any, todo: list[tuple[bool, int, int]],
               acct: dict[str, Any]) -> None:
    """One node's operations; each read's time and its backend calls go to ``acct``."""
    from pvfs.bench.latency import _ZERO

    for is_read, off, n in todo:
        if not is_read:
            await node.write(f, off, _ZERO[:n])
            continue
        mine: dict[str, float] = {}
        token = _IN_READ.set(mine)
        t = time.perf_counter()
        try:
            await node.read(f, off, n)
        finally:
            _IN_READ.reset(token)
        mine["read_s"] = time.perf_counter() - t
        mine["reads"] = 1
        for k, v in mine.items():
            acct[k] = acct.get(k, 0) + v


GCACHED = ("global", "both")  # setups reading through the global cache daemon
SETUPS = ("none", "local", *GCACHED)


async def _one(cfg, setup: str, o: int, ops: int) -> dict[str, Any]:
    """One run of the micro-benchmark (2 nodes, 3 I/O daemons) with the reads' split."""
    from pvfs.bench.latency import _ZERO, SSIZE, _node, micro_plan
    from pvfs.layout.stripe import Stripe

    nodes, iods, s, block = 2, 3, 2, 4096
    size = (o + s) * block
    gcache = setup in GCACHED
    acct: dict[str, Any] = {"reads": 0, "read_s": 0.0, "backend_read_w_s": 0.0,
                            "backend_read_ws": 0}
    async with contextlib.AsyncExitStack() as ex:
        sizes: dict[int, int] = {}
        ns = [await ex.enter_async_context(_node(cfg, local=setup in ("local", "both"),
                                                 gcache=gcache, sizes=sizes))
              for _ in range(nodes)]
        f = await ns[0].open_file(f"/missprof-{o}", create=True, stripe=Stripe(0, iods, SSIZE))
        st = await ns[0].direct.stripe_of(f.ino)
        if (await ns[0].client.getattr(f.ino))["size"] < size:
            for off in range(0, size, 1 << 20):
                await ns[0].client.write(f.ino, st, off, _ZERO[:min(1 << 20, size - off)])
        sizes[f.ino] = size
        if gcache:
            await ns[0].gbackend.forget(f.ino)  # a cold global cache, as bench latency's runs
            g0 = _gcache_stats(cfg)
        _WRITES.update(inflight=0, started=0)
        for node in ns:
            _instrument(node.cache.backend, node.cache.flusher.caps)  # I/O daemons or gcache
            _instrument_thread(node.client)

        t0 = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for node, todo in zip(ns, micro_plan(nodes, s, o, ops)):
                nursery.start_soon(work, node, f, todo, acct)
        acct["time_s"] = time.perf_counter() - t0
        acct["local"] = [node.cache.stats() for node in ns]  # per node
        if gcache:
            acct["global"] = await _global_counters(cfg, ns, f, g0)
    return acct


def _gcache_stats(cfg) -> dict[str, int]:
    """The global cache daemons' counters, summed (blocking control calls, between reads)."""
    from pvfs.cluster.launch import request
    from pvfs.gcache.config import gcache_config

    out: dict[str, int] = {}
    for ep in gcache_config(cfg).endpoints:
        for k, v in request(ep, {"op": "stats"}, 30.0).items():
            if isinstance(v, int) and not isinstance(v, bool):
                out[k] = out.get(k, 0) + v
    return out


async def _global_counters(cfg, ns, f, g0: dict[str, int]) -> dict[str, Any]:
    """After a run through the global cache: its counters over the run, the nodes' (per
    node), and the share of the blocks read through it that it fetched (its read misses).
    The local caches' and the daemon's write-back then finish, outside the reads, so the
    next run does not share the I/O daemons with it."""
    g1 = _gcache_stats(cfg)
    delta = {k: g1[k] - g0.get(k, 0) for k in ("hits", "misses", "fetches", "fetched_blocks",
                                               "reads", "writes") if k in g1}
    nodes = [node.gbackend.stats() for node in ns]
    asked = sum(n.get("global_read_bytes", 0) for n in nodes) // 4096
    for node in ns:
        await node.cache.flush(f.ino)
        await node.gbackend.flush(f.ino)
    return {"daemon": delta, "nodes": nodes, "read_blocks": asked,
            "read_miss_share": delta.get("fetched_blocks", 0) / asked if asked else 0.0}


def run(o: int = 25000, ops: int = 2000, rounds: int = 6,
        setups: tuple[str, ...] = ("none", "local")) -> dict[str, Any]:
    """``rounds`` interleaved rounds of each setup on a scratch cluster of 3 posix I/O
    daemons; per setup every run's split and the medians with their intervals."""
    from pvfs.bench.latency import SSIZE
    from pvfs.cluster.launch import scratch_cluster
    from pvfs.layout.stripe import Stripe

    load_start, started = os.getloadavg(), time.time()
    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in setups}
    extra: dict[str, Any] = {}
    if any(k in GCACHED for k in setups):
        from pvfs.bench.latency import GLOBAL
        from pvfs.cluster.launch import free_ports
        from pvfs.gcache.config import gcache_table

        extra["extra"] = {"gcache": gcache_table([f"127.0.0.1:{free_ports(1)[0]}"],
                                                 capacity=GLOBAL)}
    with scratch_cluster("pvfs-missprof-", 3, stripe=Stripe(0, -1, SSIZE), **extra) as cfg:
        for rep in range(rounds):
            k = rep % len(setups)
            for setup in setups[k:] + setups[:k]:
                runs[setup].append(trio.run(_one, cfg, setup, o, ops))
    return {"o": o, "ops": ops, "rounds": rounds, "nodes": 2, "iods": 3, "storage": "posix",
            "setups": list(setups), "gcache": extra.get("extra", {}).get("gcache"),
            "summary": summarise(runs), "runs": runs,
            "machine": {"host": platform.node(), "cpus": os.cpu_count(),
                        "load_start": load_start, "load": os.getloadavg(),
                        "python": platform.python_version()},
            "elapsed_s": time.time() - started}


def _ms_per_read(r: dict[str, Any], key: str) -> float:
    return 1000.0 * r.get(key, 0.0) / r["reads"] if r["reads"] else 0.0


def _overlap(rs: list[dict[str, Any]]) -> dict[str, Any]:
    """ms per backend read of the reads that overlapped a backend write (``_w``) and of the
    others (``_clean``), and the overlapped share; medians with intervals over the runs
    (nothing for runs recorded before these counters)."""
    rs = [r for r in rs if "backend_read_ws" in r and r.get("backend_reads")]
    if not rs:
        return {}
    w = [r for r in rs if r["backend_read_ws"]]
    clean = [r for r in rs if r["backend_reads"] > r["backend_read_ws"]]
    out: dict[str, Any] = {"backend_read_w_share": median_interval(
        [r["backend_read_ws"] / r["backend_reads"] for r in rs])[:3]}
    if w:
        out["backend_read_w_ms"] = median_interval(
            [1000.0 * r["backend_read_w_s"] / r["backend_read_ws"] for r in w])[:3]
    if clean:
        out["backend_read_clean_ms"] = median_interval(
            [1000.0 * (r["backend_read_s"] - r["backend_read_w_s"])
             / (r["backend_reads"] - r["backend_read_ws"]) for r in clean])[:3]
    return out


def _threads(rs: list[dict[str, Any]]) -> dict[str, Any]:
    """ms per backend read that went through a worker thread: dispatch, thread, return."""
    rs = [r for r in rs if r.get("backend_threads")]
    return {f"backend_{k}_ms": median_interval(
        [1000.0 * r[f"backend_{k}_s"] / r["backend_threads"] for r in rs])[:3]
        for k in ("dispatch", "thread", "return")} if rs else {}


def summarise(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Per setup, ms per read: the whole read, its backend reads and writes and the rest,
    each the median over the runs with its interval; ``local ÷ none`` paired by round."""
    out: dict[str, Any] = {}
    for setup, rs in runs.items():
        row: dict[str, Any] = {}
        parts = {"read": "read_s", "backend_read": "backend_read_s",
                 "backend_read_list": "backend_read_list_s",
                 "backend_write": "backend_write_s", "backend_write_list": "backend_write_list_s"}
        for name, key in parts.items():
            row[f"{name}_ms"] = median_interval([_ms_per_read(r, key) for r in rs])[:3]
        rest = [_ms_per_read(r, "read_s") - sum(_ms_per_read(r, k) for k in list(parts.values())[1:])
                for r in rs]
        row["rest_ms"] = median_interval(rest)[:3]
        row["backend_reads_per_read"] = median_interval(
            [r.get("backend_reads", 0) / r["reads"] for r in rs])[0]
        row.update(_overlap(rs))
        row.update(_threads(rs))
        out[setup] = row
    if "none" in runs:
        per = {k: [_ms_per_read(r, "read_s") for r in rs] for k, rs in runs.items()}
        for k in runs:
            if k != "none":
                out[f"{k}_read_vs_none"] = ratio_interval(per[k], per["none"])[:3]
        if "local" in runs and "both" in runs:  # the global cache's hop alone
            out["both_read_vs_local"] = ratio_interval(per["both"], per["local"])[:3]
    for k, rs in runs.items():
        if k in GCACHED and rs:
            out[k]["global_read_miss_share"] = median_interval(
                [r["global"]["read_miss_share"] for r in rs])[:3]
    return out


def pool(paths: list[str]) -> dict[str, Any]:
    """The summary of several runs' files taken as one: each setup's runs (paired rounds)
    put together, so the medians and ratios are over every round of them."""
    runs: dict[str, list[dict[str, Any]]] = {}
    files = []
    for path in paths:
        with open(path) as fh:
            d = json.load(fh)
        for k, rs in d["runs"].items():
            runs.setdefault(k, []).extend(rs)
        files.append({"file": os.path.basename(path), "rounds": d["rounds"],
                      "code": d.get("code"), "load": d["machine"]["load"]})
    return {"pooled": files, "rounds": sum(f["rounds"] for f in files),
            "summary": summarise(runs)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--o", type=int, default=25000)
    ap.add_argument("--ops", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--only", choices=SETUPS, help="one setup (for py-spy)")
    ap.add_argument("--setups", default="none,local",
                    help="setups interleaved in each round, of " + ",".join(SETUPS) +
                    " (default none,local; with global or both the cluster has a global "
                    "cache daemon)")
    ap.add_argument("--pool", nargs="+", metavar="JSON",
                    help="no run: summarise these files' runs taken together")
    ap.add_argument("-o", "--output", metavar="JSON")
    args = ap.parse_args(argv)
    setups = (args.only,) if args.only else tuple(args.setups.split(","))
    if any(k not in SETUPS for k in setups):
        ap.error(f"--setups: each of {', '.join(SETUPS)}")
    out = pool(args.pool) if args.pool else run(args.o, args.ops, args.rounds, setups)
    out["command"] = "python -m pvfs.bench.caching.missprof " + " ".join(
        sys.argv[1:] if argv is None else argv)
    print(json.dumps(out["summary"], indent=1))
    if args.output:
        with open(args.output, "w") as fh:
            json.dump(out, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
