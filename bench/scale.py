"""Metadata at scale: create and stat rates with 10^6 files in the file system, the manager's
memory per file, and how long a manager with them takes to restart (issue 29).

Two file systems run side by side on this host, each a manager and ``--iods`` I/O daemons:
``empty`` and ``full``. ``full`` is filled first with ``--files`` files (below), then the
probes alternate between the two (``empty``, ``full``, ``empty``, ...), so a slow minute of the
machine falls on both. A probe is one process of the native API (``pvfs.connect``): it creates
``--probe`` empty files in a new directory (``open(..., "wb")`` + close: the manager's
``create`` and ``close``), then stats each (``resolve``), and reports both rates.

**The fill** goes straight into the stopped manager's store (``MetaStore.create``, 10,000
calls per transaction) and the I/O daemons' directories, not through the protocol: at the
protocol's rate 10^6 creates would take most of an hour here. The files are real: each has
its inode, its name in one of ``files / 1000`` directories of 1,000, and its one stripe file
(a one-daemon layout, the daemons taken in turn: the manager's cost per file does not depend
on the stripe count, and it keeps the fill to one empty file per file on the daemons).
``pvfs-admin fsck`` finds nothing wrong with a filled file system
(``tests/integration/test_bench_scale.py``).

**Restart**: the full manager is stopped (SIGTERM) and started again, twice; the time from
its start to its first answered ``ping`` and to its first answered ``create``.

**Memory**: each manager's resident set (``VmRSS``) and peak (``VmHWM``) after the probes;
per file is the full one's ÷ ``--files``. The store's size on disk is reported beside it.

    python -m pvfs.bench.scale --files 1000000 --probe 5000 --rounds 9 --json scale-issue29

Targets (issue 29): with 10^6 files the create and stat rates within 20 % of the empty file
system's (full ÷ empty, paired by round, its median's 95 % interval at or above 0.8), the
manager's memory under 1 KiB per file, a restart serving in under 10 s. The verdicts are in
the JSON (``targets``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pvfs.bench.caching.stats import ratio_interval
from pvfs.bench.common import exit_on_sigterm, format_table, median, write_results

PER_DIR = 1000
PER_TX = 10_000
RATES = ("create_per_s", "stat_per_s")


# --------------------------------------------------------------------------- the fill


def fill(cfg, files: int, progress=None) -> dict[str, Any]:
    """Put ``files`` files into the stopped file system ``cfg`` (module docstring)."""
    from pvfs.daemons.iod.storage import PosixStorage
    from pvfs.daemons.mgr.store import ROOT_INO, Cred, MetaStore
    from pvfs.layout.stripe import Stripe

    class EveryN:  # group commit's hook: commit every PER_TX calls
        def __init__(self, store: MetaStore) -> None:
            self.store = store

        def opened(self) -> None:
            pass

        def joined(self, n: int) -> None:
            if n >= PER_TX:
                self.store.txn.commit()

    t0 = time.monotonic()
    store = MetaStore(os.path.join(cfg.manager.data_dir, "meta.sqlite"), cfg.niods, cfg.stripe)
    storages = [PosixStorage(e.data_dir) for e in cfg.iods]
    made: set[str] = set()
    root = Cred(0, 0, ())
    try:
        store.txn.batch_writes(EveryN(store))
        top = store.mkdir(ROOT_INO, "fill", 0o755, root)["ino"]
        d = 0
        for i in range(files):
            if i % PER_DIR == 0:
                d = store.mkdir(top, f"d{i // PER_DIR:05d}", 0o755, root)["ino"]
                if progress:
                    progress(i)
            base = i % cfg.niods
            attrs, _ = store.create(d, f"f{i % PER_DIR:04d}", 0o644, root,
                                    stripe=Stripe(base, 1, cfg.stripe.ssize))
            ino = attrs["ino"]
            path = storages[base].path(ino)  # the daemon's own place for it
            sub = os.path.dirname(path)
            if sub not in made:
                os.makedirs(sub, exist_ok=True)
                made.add(sub)
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600))
        store.txn.commit()
    finally:
        store.close()
    return {"files": files, "directories": -(-files // PER_DIR) + 1,
            "seconds": time.monotonic() - t0}


# --------------------------------------------------------------------------- probes


def probe(config_path: str, tag: str, n: int) -> dict[str, float]:
    """One probe (module docstring) in this process; rates in operations per second."""
    import pvfs

    with pvfs.connect(config_path) as fs:
        d = f"/probe-{tag}"
        fs.mkdir(d)
        t0 = time.perf_counter()
        for i in range(n):
            fs.open(f"{d}/f{i:05d}", "wb").close()
        t1 = time.perf_counter()
        for i in range(n):
            fs.stat(f"{d}/f{i:05d}")
        t2 = time.perf_counter()
    return {"create_per_s": n / (t1 - t0), "stat_per_s": n / (t2 - t1)}


def probe_in_child(config_path: str, tag: str, n: int) -> dict[str, float]:
    """A probe in a fresh interpreter (no client state carried between probes)."""
    code = ("import json; from pvfs.bench.scale import probe; "
            f"print(json.dumps(probe({config_path!r}, {tag!r}, {n})))")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                         text=True, timeout=600).stdout
    return json.loads(out.strip().splitlines()[-1])


# --------------------------------------------------------------------------- the manager


def _status_kib(pid: int) -> dict[str, int]:
    out = {}
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(rest.split()[0])
    return out


def manager_pid(cfg) -> int:
    from pvfs.cluster.launch import daemons_of

    mgr = next(d for d in daemons_of(cfg) if d.name == "mgr")
    return int(Path(mgr.pidfile).read_text())


def restart_manager(cfg) -> dict[str, float]:
    """Stop the manager, start it again: seconds to its first ping and first create."""
    import pvfs
    from pvfs.cluster.launch import daemons_of, ping
    from pvfs.procs import terminate

    mgr = next(d for d in daemons_of(cfg) if d.name == "mgr")
    terminate([int(Path(mgr.pidfile).read_text())], 30)
    try:
        os.unlink(mgr.pidfile)
    except OSError:
        pass
    t0 = time.monotonic()
    with open(mgr.log_file, "ab") as log:
        proc = subprocess.Popen(mgr.argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                                start_new_session=True, close_fds=True)
    while ping(mgr.endpoint, 0.5) is None:
        if proc.poll() is not None or time.monotonic() - t0 > 120:
            raise RuntimeError(f"the manager did not come back; see {mgr.log_file}")
        time.sleep(0.01)
    t_ping = time.monotonic() - t0
    with pvfs.connect(cfg.path) as fs:
        fs.open(f"/restart-{time.time_ns()}", "wb").close()
    return {"ping_s": t_ping, "serving_s": time.monotonic() - t0}


def verdicts(runs: dict[str, list[dict[str, float]]], memory: dict[str, dict[str, int]],
             restarts: list[dict[str, float]], files: int) -> tuple[dict, dict]:
    """Full ÷ empty per rate, and the three targets' verdicts (module docstring).

    The rates are paired by round (the two probes of a round ran back to back) and summed
    up by the median and its order-statistic interval: "within 20 %" is decided when the
    interval's lower end is at least 0.8, missed when its upper end is below."""
    ratio = {}
    for k in RATES:
        m, lo, hi, level = ratio_interval([r[k] for r in runs["full"]],
                                          [r[k] for r in runs["empty"]])
        ratio[k] = {"median": m, "lo": lo, "hi": hi, "level": level,
                    "verdict": "met" if lo >= 0.8 else "missed" if hi < 0.8 else "undecided"}
    per_file = memory["full"]["VmRSS"] * 1024 / files
    serving = max(r["serving_s"] for r in restarts)
    targets = {
        "rates_within_20pct": {**ratio,
                               "met": all(v["verdict"] == "met" for v in ratio.values())},
        "memory_under_1KiB_per_file": {"rss_bytes_per_file": per_file,
                                       "met": per_file < 1024},
        "restart_serving_under_10s": {"slowest_s": serving, "met": serving < 10},
    }
    return ratio, targets


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=1_000_000, help="files in the full one")
    ap.add_argument("--probe", type=int, default=5000, help="files each probe creates")
    ap.add_argument("--rounds", type=int, default=9,
                    help="probes of each file system (6 or more: a 95 %% interval)")
    ap.add_argument("--restarts", type=int, default=2)
    ap.add_argument("--iods", type=int, default=4)
    ap.add_argument("--json", metavar="NAME", help="results file bench/results/NAME.json")
    ap.add_argument("--keep", metavar="DIR", help="build the file systems under DIR, kept")
    args = ap.parse_args(argv)
    exit_on_sigterm()

    from pvfs.cluster.launch import down, make_config, up, write_config

    top = Path(args.keep or tempfile.mkdtemp(prefix="pvfs-scale-"))
    cfgs = {}
    for name in ("empty", "full"):
        (top / name).mkdir(parents=True, exist_ok=True)
        cfgs[name] = write_config(make_config(str(top / name), iods=args.iods),
                                  str(top / name / "pvfs.toml"))
    load = [os.getloadavg()[0]]
    try:
        for cfg in cfgs.values():  # made by the daemons (schema, pool), then stopped
            up(cfg)
            down(cfg)
        filled = fill(cfgs["full"], args.files,
                      progress=lambda i: print(f"  filled {i:,} files", file=sys.stderr,
                                               flush=True) if i % 100_000 == 0 else None)
        print(f"filled {args.files:,} files in {filled['seconds']:.0f} s", file=sys.stderr)
        for cfg in cfgs.values():
            up(cfg)
        runs: dict[str, list[dict[str, float]]] = {"empty": [], "full": []}
        for r in range(args.rounds):
            order = ("empty", "full") if r % 2 == 0 else ("full", "empty")
            for name in order:
                runs[name].append(probe_in_child(cfgs[name].path, f"{r}", args.probe))
                load.append(os.getloadavg()[0])
                print(f"round {r} {name}: {runs[name][-1]}", file=sys.stderr, flush=True)
        memory = {name: _status_kib(manager_pid(cfg)) for name, cfg in cfgs.items()}
        db = {name: sum(p.stat().st_size for p in Path(cfg.manager.data_dir).glob("meta.sqlite*"))
              for name, cfg in cfgs.items()}
        restarts = [restart_manager(cfgs["full"]) for _ in range(args.restarts)]
        memory_after_restart = _status_kib(manager_pid(cfgs["full"]))
    finally:
        for cfg in cfgs.values():
            down(cfg)
        if not args.keep:
            subprocess.run(["rm", "-rf", str(top)], check=False)

    med = {name: {k: median(run[k] for run in rs) for k in RATES} for name, rs in runs.items()}
    ratio, targets = verdicts(runs, memory, restarts, args.files)
    per_file = targets["memory_under_1KiB_per_file"]["rss_bytes_per_file"]
    serving = targets["restart_serving_under_10s"]["slowest_s"]
    print(format_table(["", "create/s", "stat/s", "RSS MiB", "store MiB"], [
        [name, f"{med[name]['create_per_s']:.0f}", f"{med[name]['stat_per_s']:.0f}",
         f"{memory[name]['VmRSS'] / 1024:.0f}", f"{db[name] / 2**20:.0f}"]
        for name in ("empty", "full")]))
    for k, v in ratio.items():
        print(f"full / empty, {k}: {v['median']:.3f} [{v['lo']:.3f}, {v['hi']:.3f}] "
              f"({v['level']:.0%}): {v['verdict']}")
    print(f"RSS {per_file:.0f} B per file; restart serving in {serving:.2f} s (slowest)")
    data = {"params": vars(args), "fill": filled, "runs": runs, "medians": med,
            "full_over_empty": ratio, "memory_kib": memory,
            "memory_kib_full_after_restart": memory_after_restart, "store_bytes": db,
            "restarts": restarts, "load_1min": load, "targets": targets,
            "probe": "one native-API process: create+close, then stat, of --probe files in a "
                     "new directory; rounds alternate between the two file systems"}
    if args.json:
        path = write_results(args.json, data, command=[sys.executable, *sys.argv])
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
