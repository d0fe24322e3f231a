"""Operations: ``cache drop`` and the ``stats --prometheus`` / ``stats --watch`` views.

``cache drop`` is ``pvfs2-drop-caches`` for pvfs: every mount of the file system on this host
writes its dirty blocks back and drops its block cache and the kernel's pages of its files
(the ``user.pvfs.drop_cache`` control attribute, root only), and every I/O daemon writes back
and evicts its stripe files from the page cache (``posix_fadvise(DONTNEED)``). Benchmarks use
it for cold-cache runs.

``stats --prometheus`` fetches each daemon's metrics over the wire (the ``metrics``
operation, the same families its ``metrics_port`` serves) and prints one exposition, plus
``pvfs_up`` per daemon and the cache counters of this host's mounts; ``stats --watch`` turns
two such snapshots into rates, refreshed every few seconds (docs/operations.md).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from pvfs.cli.common import PROG, add_command, client, load_config
from pvfs.cli.output import CliError, emit, human_size, table
from pvfs.client.datapath import MGR
from pvfs.client.fs import FileSystem
from pvfs.metrics import merge, parse, render

DROP_XATTR = "user.pvfs.drop_cache"


def register(sub: argparse._SubParsersAction) -> None:
    cache = add_command(sub, "cache", help="drop the caches of this host's mounts and of the "
                        "I/O daemons", func=lambda a: _usage(cache), example=f"{PROG} cache drop")
    csub = cache.add_subparsers(title="actions", metavar="ACTION")
    p = add_command(csub, "drop", help="write back, then drop mount block caches and the "
                    "daemons' page cache of stripe files", func=cmd_cache_drop, example=f"""\
{PROG} cache drop              # like pvfs2-drop-caches: before a cold-cache benchmark run
{PROG} cache drop --mounts     # only this host's mounts""",
                    description=__doc__.split("\n\n")[1])
    p.add_argument("--mounts", action="store_true", help="only this host's mounts")
    p.add_argument("--daemons", action="store_true", help="only the I/O daemons")


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.error("an action is required: drop")
    return 2


# ---------------------------------------------------------------------- cache drop
def cmd_cache_drop(args: argparse.Namespace) -> int:
    from pvfs.cli.cmd_admin import local_mounts

    cfg = load_config(args)
    both = not args.mounts and not args.daemons
    data: dict = {"mounts": [], "iods": []}
    failed = False
    if args.mounts or both:
        for m in local_mounts(cfg):
            entry = {"mountpoint": m["mountpoint"], "error": None}
            try:
                os.setxattr(m["mountpoint"], DROP_XATTR, b"1")
            except OSError as exc:
                failed = True
                entry["error"] = (exc.strerror or str(exc)) + \
                    (" (root only)" if exc.errno == 1 else "")
            data["mounts"].append(entry)
    if args.daemons or both:
        with client(args) as fs:
            for i, ep in enumerate(cfg.iods):
                entry = {"iod": i, "address": ep.address, "files": None, "bytes": None,
                         "error": None}
                try:
                    entry.update(fs.iod_call(i, "drop_cache"))
                except OSError as exc:
                    failed = True
                    entry["error"] = exc.strerror or str(exc)
                data["iods"].append(entry)
    emit(args.json, data, _render_drop)
    return 1 if failed else 0


def _render_drop(d: dict) -> str:
    rows = [[m["mountpoint"], "mount", "-", m["error"] or "dropped"] for m in d["mounts"]]
    rows += [[f"iod{r['iod']} ({r['address']})", "daemon",
              "-" if r["error"] else f"{r['files']} files, {human_size(r['bytes'])}",
              r["error"] or "dropped"] for r in d["iods"]]
    return table(rows, ["where", "kind", "stripe files", "result"]) if rows else \
        "nothing to drop (no mount of this file system on this host)"


# ---------------------------------------------------------------------- stats --prometheus
def _daemon_families(fs: FileSystem) -> list[list[dict]]:
    """Each daemon's metric families, and ``pvfs_up`` for every daemon (0 when it failed)."""
    groups, up = [], []
    for key, name in [(MGR, "mgr")] + [(i, f"iod{i}") for i in range(fs.config.niods)]:
        try:
            groups.append(fs.data.call(key, {"op": "metrics", "cred": fs.cred})["families"])
            up.append(["", {"daemon": name}, 1])
        except OSError:
            up.append(["", {"daemon": name}, 0])
    groups.append([{"name": "pvfs_up", "type": "gauge",
                    "help": "Whether the daemon answered the metrics request.", "samples": up}])
    return groups


def _mount_families(mounts: list[dict]) -> list[dict]:
    """This host's mounts' numeric counters as gauges ``pvfs_mount_<counter>``."""
    fams: dict[str, dict] = {}
    for m in mounts:
        for key, value in sorted(m.get("stats", {}).items()):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            name = "pvfs_mount_" + "".join(c if c.isalnum() else "_" for c in key)
            fam = fams.setdefault(name, {"name": name, "type": "gauge", "samples": [],
                                         "help": f"Mount counter {key} (user.pvfs.stats)."})
            fam["samples"].append(["", {"mountpoint": m["mountpoint"]}, value])
    return list(fams.values())


def prometheus_text(args: argparse.Namespace) -> str:
    from pvfs.cli.cmd_admin import local_mounts

    with client(args) as fs:
        groups = _daemon_families(fs)
    groups.append(_mount_families(local_mounts(load_config(args))))
    return render(merge(*groups))


def cmd_stats_prometheus(args: argparse.Namespace) -> int:
    text = prometheus_text(args)
    sys.stdout.write(text)
    return 0 if ' 0\n' not in "".join(ln + "\n" for ln in text.splitlines()
                                       if ln.startswith("pvfs_up{")) else 1


# ---------------------------------------------------------------------- stats --watch
def _totals(samples: dict) -> dict[str, dict[str, float]]:
    """Per daemon: requests, errors, read/written bytes, latency sum and count."""
    out: dict[str, dict[str, float]] = {}
    for (name, labels), value in samples.items():
        lab = dict(labels)
        d = lab.get("daemon")
        if d is None:
            continue
        row = out.setdefault(d, {"requests": 0.0, "errors": 0.0, "read": 0.0, "written": 0.0,
                                 "lat_sum": 0.0, "lat_count": 0.0, "up": 1.0})
        if name == "pvfs_requests_total":
            row["requests"] += value
        elif name == "pvfs_request_errors_total":
            row["errors"] += value
        elif name == "pvfs_bytes_total":
            row[lab.get("direction", "")] = value
        elif name == "pvfs_request_duration_seconds_sum":
            row["lat_sum"] += value
        elif name == "pvfs_request_duration_seconds_count":
            row["lat_count"] += value
        elif name == "pvfs_up":
            row["up"] = value
    return out


def rates(before: dict, after: dict, seconds: float) -> list[dict]:
    """Rates between two ``_totals`` snapshots ``seconds`` apart, one row per daemon."""
    rows = []
    for d, a in after.items():
        b = before.get(d, {})
        delta = {k: max(0.0, a[k] - b.get(k, 0.0)) for k in a if k != "up"}
        rows.append({"daemon": d, "up": bool(a.get("up", 1)),
                     "requests_per_s": delta["requests"] / seconds,
                     "errors_per_s": delta["errors"] / seconds,
                     "read_bytes_per_s": delta["read"] / seconds,
                     "written_bytes_per_s": delta["written"] / seconds,
                     "mean_latency_s": (delta["lat_sum"] / delta["lat_count"]
                                        if delta["lat_count"] else None)})
    return rows


def _render_rates(rows: list[dict], interval: float) -> str:
    lines = [[r["daemon"], "up" if r["up"] else "DOWN", f"{r['requests_per_s']:.1f}",
              f"{r['errors_per_s']:.1f}", human_size(int(r["read_bytes_per_s"])) + "/s",
              human_size(int(r["written_bytes_per_s"])) + "/s",
              "-" if r["mean_latency_s"] is None else f"{r['mean_latency_s'] * 1000:.2f} ms"]
             for r in rows]
    return (f"{time.strftime('%H:%M:%S')}  rates over {interval:g} s (Ctrl-C ends)\n"
            + table(lines, ["daemon", "state", "req/s", "err/s", "read", "written",
                            "mean latency"], right=[2, 3, 4, 5, 6]))


def cmd_stats_watch(args: argparse.Namespace) -> int:
    interval = args.watch
    if interval <= 0:
        raise CliError("stats --watch", f"the interval must be positive, got {interval:g}",
                       status=2)
    clear = sys.stdout.isatty() and not args.json
    with client(args) as fs:
        def snapshot() -> dict:
            return _totals(parse(render(merge(*_daemon_families(fs)))))

        before, t0 = snapshot(), time.monotonic()
        shown = 0
        try:
            while args.count is None or shown < args.count:
                time.sleep(interval)
                after, t1 = snapshot(), time.monotonic()
                rows = rates(before, after, t1 - t0)
                if clear:
                    sys.stdout.write("\x1b[H\x1b[2J")
                if args.json:  # one object per line (JSON Lines), for `jq -c` and scripts
                    sys.stdout.write(json.dumps({"time": time.time(), "interval": t1 - t0,
                                                 "daemons": rows}) + "\n")
                else:
                    sys.stdout.write(_render_rates(rows, round(t1 - t0, 1)) + "\n")
                sys.stdout.flush()
                before, t0 = after, t1
                shown += 1
        except KeyboardInterrupt:
            return 0
    return 0
