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
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio

from pvfs.cache import StreamPolicy
from pvfs.gcache.config import gcache_config, gcache_table
from pvfs.gcache.stack import CacheStack
from pvfs.layout.stripe import Stripe
from pvfs.traces.generators import generate
from pvfs.traces.plan import make_plan
from pvfs.traces.replay.cached import prepare_files, replay_cached

__all__ = ["POLICIES", "TRACES", "Setup", "run_study", "study_cluster"]

LOCAL_BYTES = 2 << 20
GLOBAL_BYTES = 4 << 20
NODES = 2
NPROCS = 4
STRIPE = Stripe(0, -1, 32 << 10)  # the paper's 32 KiB stripe

#: Scaled traces: (generator parameters for --quick, for the full study). Working sets are
#: several times the global cache, as in the paper's runs.
TRACES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "lu": ({"n": 768, "slabs": 12}, {"n": 1024, "slabs": 16}),
    "cholesky": ({"panels": 96}, {"panels": 160}),
    "titan": ({}, {}),
    "mining": ({}, {}),
    "pgrep": ({}, {}),
    "db2": ({"scale": 0.001}, {"scale": 0.002}),
}


@dataclass(frozen=True)
class Setup:
    local: bool
    gcache: bool
    policy: str = "all"
    threshold: int = 0
    plan: bool = False


POLICIES: dict[str, Setup] = {
    "none": Setup(False, False),
    "local": Setup(True, False),
    "global": Setup(False, True),
    "both": Setup(True, True),
    "plan": Setup(True, True, plan=True),
    "runtime10": Setup(True, True, "runtime", 10),
    "runtime25": Setup(True, True, "runtime", 25),
    "adaptive": Setup(True, True, "adaptive", 10),
    "sketch": Setup(True, True, "sketch"),
}


@contextlib.contextmanager
def study_cluster(iods: int = 2, storage: str = "emulated:ide-2000"):
    """A file system of its own under a temp dir: ``iods`` I/O daemons with ``storage``, one
    global cache of :data:`GLOBAL_BYTES`; stopped and removed afterwards."""
    from pvfs.cli.launch import down, free_ports, make_config, up, write_config

    root = Path(tempfile.mkdtemp(prefix="pvfs-study-"))
    port = free_ports(1)[0]
    cfg = make_config(str(root), iods=iods, stripe=STRIPE, request_timeout=60.0,
                      extra={"gcache": gcache_table([f"127.0.0.1:{port}"],
                                                    capacity=GLOBAL_BYTES, flush_interval=0.5),
                             "storage": {"default": storage}})
    cfg = write_config(cfg, str(root / "pvfs.toml"))
    try:
        up(cfg)
        yield cfg
    finally:
        down(cfg)
        shutil.rmtree(root, ignore_errors=True)


def _call(ep, header: dict) -> dict:
    from pvfs.cli.launch import request

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
    sizes = {f.ino: e.size for e, f in ((e, files[e.id]) for e in trace.files)}
    async with contextlib.AsyncExitStack() as stack:
        nodes = [await stack.enter_async_context(CacheStack.open(
            cfg, local=setup.local, local_size=LOCAL_BYTES, gcache=setup.gcache, sizes=sizes,
            stream=StreamPolicy(min_bytes=0, readahead=0))) for _ in range(NODES)]
        res = await replay_cached(trace, nodes, files, plan if setup.plan else None)
    gstats = _call(gep, {"op": "stats"})
    looked_local = res.local.get("hits", 0) + res.local.get("misses", 0)
    looked_global = gstats["hits"] + gstats["misses"]
    return {"time_s": res.time_s,
            "local_hit_rate": res.local.get("hits", 0) / looked_local if looked_local else 0.0,
            "global_hit_rate": gstats["hits"] / looked_global if looked_global else 0.0,
            "global": {k: gstats[k] for k in ("hits", "misses", "admissions", "bypasses",
                                              "evictions", "threshold")},
            "ops": res.ops, "bytes": res.bytes}


def run_study(traces: list[str], policies: list[str], *, quick: bool = True, iods: int = 2,
              storage: str = "emulated:ide-2000", repeat: int = 1,
              progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run the study; the JSON document ``--json`` prints (``results`` as the issue asks, plus
    the setup and machine)."""
    unknown = [t for t in traces if t not in TRACES] + [p for p in policies if p not in POLICIES]
    if unknown:
        raise ValueError(f"unknown trace or policy: {', '.join(unknown)}")
    results: list[dict[str, Any]] = []
    started = time.time()
    with study_cluster(iods, storage) as cfg:
        async def main() -> None:
            for name in traces:
                params = TRACES[name][0 if quick else 1]
                trace = generate(name, NPROCS, params, seed=1)
                plan = make_plan(trace, global_bytes=GLOBAL_BYTES)
                async with CacheStack.open(cfg, local=False, gcache=False) as prep:
                    files = await prepare_files(trace, prep, f"/study-{name}")
                rows = []
                for pol in policies:
                    best: dict[str, Any] | None = None
                    for _ in range(repeat):
                        row = await _one(cfg, trace, files, POLICIES[pol], plan)
                        if best is None or row["time_s"] < best["time_s"]:
                            best = row
                    assert best is not None
                    best.update(trace=name, policy=pol)
                    rows.append(best)
                    if progress:
                        progress(f"{name:9s} {pol:10s} {best['time_s']:7.3f} s  "
                                 f"local {best['local_hit_rate']:.2f}  "
                                 f"global {best['global_hit_rate']:.2f}")
                base = next((r["time_s"] for r in rows if r["policy"] == "both"), None)
                for r in rows:
                    r["time_norm"] = r["time_s"] / base if base else None
                results.extend(rows)

        trio.run(main)
    return {"results": [_ordered(r) for r in results],
            "setup": {"nodes": NODES, "nprocs": NPROCS, "local_bytes": LOCAL_BYTES,
                      "global_bytes": GLOBAL_BYTES, "iods": iods, "storage": storage,
                      "stripe": STRIPE.ssize, "quick": quick, "repeat": repeat,
                      "traces": {t: TRACES[t][0 if quick else 1] for t in traces}},
            "machine": {"host": platform.node(), "cpus": os.cpu_count(),
                        "load": os.getloadavg(), "python": platform.python_version()},
            "elapsed_s": time.time() - started}


def _ordered(r: dict[str, Any]) -> dict[str, Any]:
    keys = ("trace", "policy", "time_s", "time_norm", "local_hit_rate", "global_hit_rate")
    out = {k: r[k] for k in keys}
    out.update({k: v for k, v in r.items() if k not in keys})
    return out
