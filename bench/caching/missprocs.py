"""A local miss's cost with each node in a process of its own (missprof's share one).

``python -m pvfs.bench.caching.missprocs`` runs :mod:`missprof`'s workload (fig. 4's 2 nodes
and 3 posix I/O daemons, the micro-benchmark's operations at o = 25000) under ``none`` and
``local``, rounds interleaved, and splits each read the same way, but each node runs in a
process of its own: its own trio thread and its own GIL, as the paper's nodes were machines of
their own. In ``missprof`` both nodes are tasks of one trio thread, so under write-behind one
node's cache work (its writes never wait for the backend) runs while the other's backend
reads want that thread back. Running both tells how much of a local miss's measured cost
comes from that sharing.

The nodes start together (a barrier, after each has connected); a run's time is the slower
node's. Backend reads beside backend writes are seen within a node only here (the other
node's writes are in another process).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import trio

from pvfs.bench.caching.missprof import (
    _WRITES,
    _instrument,
    _instrument_thread,
    summarise,
    work,
)

__all__ = ["run"]

NODES, IODS, S, BLOCK = 2, 3, 2, 4096


async def _prepare(cfg, o: int) -> None:
    """The file, created and written to its size once (as missprof's first node does)."""
    from pvfs.bench.latency import _ZERO, SSIZE, _node
    from pvfs.layout.stripe import Stripe

    size = (o + S) * BLOCK
    async with _node(cfg, local=False, gcache=False) as node:
        f = await node.open_file(f"/missprof-{o}", create=True, stripe=Stripe(0, IODS, SSIZE))
        st = await node.direct.stripe_of(f.ino)
        if (await node.client.getattr(f.ino))["size"] < size:
            for off in range(0, size, 1 << 20):
                await node.client.write(f.ino, st, off, _ZERO[:min(1 << 20, size - off)])


def _node_proc(cfg_path: str, setup: str, o: int, ops: int, index: int, barrier) -> dict:
    """One node's run, in a worker process."""
    return trio.run(_node_run, cfg_path, setup, o, ops, index, barrier)


async def _node_run(cfg_path: str, setup: str, o: int, ops: int, index: int,
                    barrier) -> dict[str, Any]:
    from pvfs.bench.latency import _node, micro_plan

    acct: dict[str, Any] = {"reads": 0, "read_s": 0.0, "backend_read_w_s": 0.0,
                            "backend_read_ws": 0}
    async with _node(cfg_path, local=setup == "local", gcache=False, sizes={}) as node:
        f = await node.open_file(f"/missprof-{o}")
        node.sizes[f.ino] = (o + S) * BLOCK
        _WRITES.update(inflight=0, started=0)
        _instrument(node.cache.backend, node.cache.flusher.caps)
        _instrument_thread(node.client)
        barrier.wait(60.0)  # blocking, before any task runs: both nodes start together
        t0 = time.perf_counter()
        await work(node, f, micro_plan(NODES, S, o, ops)[index], acct)
        acct["time_s"] = time.perf_counter() - t0
        acct["local"] = [node.cache.stats()]
    return acct


def _merge(accts: list[dict[str, Any]]) -> dict[str, Any]:
    """The nodes' accounts as one run's (missprof's shape): sums, the slower node's time,
    the caches' stats per node."""
    out: dict[str, Any] = {"local": [], "time_s": max(a["time_s"] for a in accts)}
    for a in accts:
        out["local"] += a["local"]
        for k, v in a.items():
            if k not in ("local", "time_s"):
                out[k] = out.get(k, 0) + v
    return out


def run(o: int = 25000, ops: int = 2000, rounds: int = 6,
        setups: tuple[str, ...] = ("none", "local")) -> dict[str, Any]:
    """``rounds`` interleaved rounds of each setup, the nodes in two worker processes."""
    from pvfs.bench.latency import SSIZE
    from pvfs.cluster.launch import scratch_cluster
    from pvfs.layout.stripe import Stripe

    load_start, started = os.getloadavg(), time.time()
    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in setups}
    ctx = multiprocessing.get_context("spawn")
    with scratch_cluster("pvfs-missprocs-", IODS, stripe=Stripe(0, -1, SSIZE)) as cfg, \
            ctx.Manager() as mgr, ProcessPoolExecutor(NODES, mp_context=ctx) as pool:
        trio.run(_prepare, cfg, o)
        for rep in range(rounds):
            k = rep % len(setups)
            for setup in setups[k:] + setups[:k]:
                barrier = mgr.Barrier(NODES)
                futs = [pool.submit(_node_proc, str(cfg.path), setup, o, ops, i, barrier)
                        for i in range(NODES)]
                runs[setup].append(_merge([fut.result() for fut in futs]))
    return {"o": o, "ops": ops, "rounds": rounds, "nodes": NODES, "iods": IODS,
            "storage": "posix", "setups": list(setups), "node_processes": True,
            "summary": summarise(runs), "runs": runs,
            "machine": {"host": platform.node(), "cpus": os.cpu_count(),
                        "load_start": load_start, "load": os.getloadavg(),
                        "python": platform.python_version()},
            "elapsed_s": time.time() - started}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--o", type=int, default=25000)
    ap.add_argument("--ops", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("-o", "--output", metavar="JSON")
    args = ap.parse_args(argv)
    out = run(args.o, args.ops, args.rounds)
    out["command"] = "python -m pvfs.bench.caching.missprocs " + " ".join(
        sys.argv[1:] if argv is None else argv)
    print(json.dumps(out["summary"], indent=1))
    if args.output:
        with open(args.output, "w") as fh:
            json.dump(out, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
