"""Daemon administration: ``sched show|set``, ``stats``, ``fsck``.

``fsck`` compares the manager's file inodes with the stripe files each I/O daemon holds (like
``pvfs2-fsck``):

- an **orphan** is a stripe file on a daemon for which no file inode exists, or whose inode
  holds no share on that daemon — ``--repair`` unlinks it;
- stripe files of the manager's pool of precreated inode numbers are expected, not orphans;
- a file inode without a stripe file on some daemon of its layout is not damage: a stripe
  file is made by the first write that puts bytes on its daemon, and a share without one
  reads as a hole (an empty file has none at all).

Every candidate is checked a second time before it is reported, so a file created or removed
while fsck runs is not mistaken for damage. Listing every inode needs root on the manager.
"""

from __future__ import annotations

import argparse
import errno

from pvfs import schedulers
from pvfs.cli.common import (
    PROG,
    add_command,
    client,
    connect,
    load_config,
    mount_available,
    size_arg,
)
from pvfs.cli.output import CliError, emit, human_duration, human_size, note, table
from pvfs.client.fs import FileSystem
from pvfs.config import Config
from pvfs.layout.stripe import Stripe

PAGE = 4096


def register(sub: argparse._SubParsersAction) -> None:
    algorithms = schedulers.describe(",\n  ")
    sched = add_command(sub, "sched", help="show or change the I/O daemons' scheduling algorithm",
                        func=lambda a: _usage(sched), example=f"""\
{PROG} sched show
{PROG} sched set opt3 --window 512M        # every I/O daemon
{PROG} sched set opt2 --iod 1""", description="Show or change the I/O scheduler of the I/O "
                    "daemons at run time (thesis §4.2, ch. 5):\n  "
                    f"{algorithms}.\nA change lasts until the "
                    "daemon restarts; [scheduler] in the config sets the start value.")
    ssub = sched.add_subparsers(title="actions", metavar="ACTION")
    q = add_command(ssub, "show", help="each I/O daemon's algorithm and window",
                    func=cmd_sched_show, example=f"{PROG} sched show --json")
    q.add_argument("--iod", type=int, metavar="N", help="only I/O daemon N")
    q = add_command(ssub, "set", help="set the algorithm (and opt3 window) of I/O daemons",
                    func=cmd_sched_set, example=f"{PROG} sched set opt3 --iod 0 --window 256M")
    q.add_argument("algorithm", choices=schedulers.ALGORITHMS, metavar="ALGO",
                   help=f"one of {', '.join(schedulers.ALGORITHMS)}")
    q.add_argument("--iod", type=int, metavar="N", help="only I/O daemon N (default: all)")
    q.add_argument("--window", type=size_arg, metavar="BYTES",
                   help="opt3 window, e.g. 256M (default: unchanged)")
    q.add_argument("--gather", type=float, metavar="SECONDS",
                   help="opt4: how long the first request of a busy period waits for the "
                        "rest of its collective, 0..10 (default: unchanged; 0: off)")
    q.add_argument("--decide-every", type=float, metavar="SECONDS", dest="decide",
                   help="rs: after a file's first N_file requests, decide for it again at "
                        "most this often, 0..10 (default: unchanged; start 0.002; 0: on every "
                        "request, as the thesis)")

    p = add_command(sub, "stats", help="request, byte and service-time counters per I/O daemon",
                    func=cmd_stats, example=f"""\
{PROG} stats
{PROG} stats --reset --json > before.json
{PROG} stats --prometheus > pvfs.prom     # every daemon's metrics in the Prometheus format
{PROG} stats --watch 2                    # rates per daemon, refreshed every 2 s""")
    p.add_argument("--iod", type=int, metavar="N", help="only I/O daemon N")
    p.add_argument("--reset", action="store_true", help="zero the counters after reading them")
    p.add_argument("--prometheus", action="store_true",
                   help="print every daemon's metrics (and this host's mounts' cache counters) "
                   "in the Prometheus text format")
    p.add_argument("--watch", type=float, nargs="?", const=2.0, default=None, metavar="SECONDS",
                   help="a table of request, byte and error rates refreshed every SECONDS "
                   "(default 2) until Ctrl-C")
    p.add_argument("--count", type=int, default=None, metavar="N",
                   help="with --watch: stop after N refreshes")

    p = add_command(sub, "fsck", help="find (and with --repair remove) stripe files without "
                    "metadata", func=cmd_fsck,
                    example=f"""\
{PROG} fsck                 # report only; exit 1 if anything is wrong
{PROG} fsck --repair --json""", description=__doc__.split("\n\n", 1)[1])
    p.add_argument("--repair", action="store_true",
                   help="unlink orphan stripe files")


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.error("an action is required: show or set")
    return 2


def _iods(fs: FileSystem, only: int | None) -> list[int]:
    if only is None:
        return list(range(fs.config.niods))
    if not 0 <= only < fs.config.niods:
        raise CliError("--iod", f"{only} is not an I/O daemon (0..{fs.config.niods - 1})",
                       status=2)
    return [only]


# ---------------------------------------------------------------------- sched
def cmd_sched_show(args: argparse.Namespace) -> int:
    rows, failed = [], False
    with client(args) as fs:
        for i in _iods(fs, args.iod):
            addr = fs.config.iods[i].address
            try:
                r = fs.iod_call(i, "sched_get")
            except OSError as exc:
                failed = True
                rows.append({"iod": i, "address": addr, "algorithm": None, "window": None,
                             "error": exc.strerror or str(exc)})
                continue
            rs_state = r.get("rs") or {}
            rows.append({"iod": i, "address": addr, "algorithm": r["algorithm"],
                         "window": r["window"], "gather": r.get("gather"), "error": None,
                         # rs: the engine's current pick and the selector's last decision
                         "engine": r.get("engine"), "storage": r.get("storage"),
                         "rs_last": rs_state.get("last") or None,
                         "rs_picks": rs_state.get("picks") or None})
    emit(args.json, rows, _render_sched)
    return 1 if failed else 0


def _render_sched(rows: list[dict]) -> str:
    return table([[f"iod{r['iod']}", r["address"], r["algorithm"] or "DOWN",
                   r.get("engine") or "-", r.get("storage") or "-",
                   human_size(r["window"]) if r["window"] else r["error"],
                   f"{r['gather'] * 1000:g} ms" if r.get("gather") is not None else "-"]
                  for r in rows],
                 ["daemon", "address", "algorithm", "engine", "storage", "window",
                  "opt4 gather"])


def cmd_sched_set(args: argparse.Namespace) -> int:
    rows = []
    with client(args) as fs:
        for i in _iods(fs, args.iod):
            try:
                r = fs.iod_call(i, "sched_set", algorithm=args.algorithm, window=args.window,
                                gather=args.gather, decide=args.decide)
            except OSError as exc:
                raise CliError(f"sched set iod{i} ({fs.config.iods[i].address})",
                               exc.strerror or str(exc)) from None
            rows.append({"iod": i, "address": fs.config.iods[i].address,
                         "algorithm": r["algorithm"], "window": r["window"],
                         "gather": r.get("gather"), "error": None})
    emit(args.json, rows, _render_sched)
    return 0


# ---------------------------------------------------------------------- stats
def cmd_stats(args: argparse.Namespace) -> int:
    if args.prometheus or args.watch is not None:
        from pvfs.cli import cmd_ops

        return (cmd_ops.cmd_stats_prometheus if args.prometheus else cmd_ops.cmd_stats_watch)(args)
    out, failed = [], False
    with client(args) as fs:
        for i in _iods(fs, args.iod):
            entry: dict = {"iod": i, "address": fs.config.iods[i].address}
            try:
                entry.update(fs.iod_call(i, "stats", reset=args.reset))
                entry["error"] = None
            except OSError as exc:
                failed = True
                entry["error"] = exc.strerror or str(exc)
            out.append(entry)
    cfg = load_config(args)
    from pvfs.cli.cmd_cache import gcache_stats

    gcaches = gcache_stats(cfg, args.reset) if args.iod is None else []
    failed = failed or any(g["error"] for g in gcaches)
    data = {"iods": out, "gcaches": gcaches, "mounts": local_mounts(cfg)}
    emit(args.json, data, _render_stats)
    if args.reset and not args.json:
        note("counters reset")
    return 1 if failed else 0


def local_mounts(cfg: Config) -> list[dict]:
    """This host's running mounts of the file system (with their cache counters), if the
    mount client is installed."""
    if not mount_available():
        return []
    from pvfs.cli.cmd_mount import mounts_of

    try:
        return [{"mountpoint": m.get("mountpoint"), "pid": m.get("pid"),
                 "stats": m.get("stats", {})} for m in mounts_of(cfg)]
    except (OSError, ValueError):
        return []


def _render_stats(data: dict) -> str:
    lines = []
    for r in data["iods"]:
        if r["error"]:
            lines.append([f"iod{r['iod']}", "DOWN"] + [None] * 7)
            continue
        c, s, e = r["counters"], r.get("service", {}), r.get("engine", {})
        lines.append([f"iod{r['iod']}", c["read_requests"], c["write_requests"],
                      human_size(c["bytes_read"]), human_size(c["bytes_written"]), c["errors"],
                      len(r.get("files", {})), e.get("queued", 0) + e.get("active", 0),
                      _ms(s.get("p50_s")) + " / " + _ms(s.get("p99_s"))])
    text = table(lines, ["daemon", "reads", "writes", "read", "written", "errors", "files",
                         "queued", "service p50 / p99"], right=[1, 2, 3, 4, 5, 6, 7])
    if data.get("gcaches"):
        from pvfs.cli.cmd_cache import render_gcache_stats

        text += "\n\nglobal caches:\n" + render_gcache_stats(data["gcaches"])
    for m in data["mounts"]:
        counters = {k: v for k, v in _flat(m["stats"]).items() if isinstance(v, (int, float))}
        text += f"\n\nmount {m['mountpoint']} (pid {m['pid']}):\n" + "\n".join(
            f"  {k}: {human_size(v) if 'bytes' in k else v}" for k, v in sorted(counters.items()))
    return text


def _flat(d: dict, prefix: str = "") -> dict:
    out: dict = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else human_duration(seconds) if seconds >= 60 \
        else f"{seconds * 1000:.2f} ms"


# ---------------------------------------------------------------------- fsck
def _all_inodes(fs: FileSystem) -> dict[int, dict]:
    out: dict[int, dict] = {}
    after = 0
    while True:
        try:
            page = fs.meta("inodes", after=after, limit=PAGE)["inodes"]
        except PermissionError:
            raise CliError("fsck", "listing every inode needs root on the manager "
                           "(run as root)") from None
        for a in page:
            out[a["ino"]] = a
        if len(page) < PAGE:
            return out
        after = page[-1]["ino"]


def _stripe_files(fs: FileSystem, iod: int) -> set[int]:
    found: set[int] = set()
    after = 0
    while True:
        try:
            page = fs.iod_call(iod, "list", after=after, limit=PAGE)["inodes"]
        except OSError as exc:
            raise CliError(f"fsck iod{iod} ({fs.config.iods[iod].address})",
                           exc.strerror or str(exc)) from None
        found.update(page)
        if len(page) < PAGE:
            return found
        after = page[-1]


def _precreated(fs: FileSystem) -> set[int]:
    """The manager's pool of precreated inode numbers: their stripe files are expected."""
    return set(fs.meta("precreated")["inos"])


def _holders(fs: FileSystem, attrs: dict) -> list[int]:
    s = Stripe(*attrs["stripe"])
    return [s.iod_of_rank(r, fs.config.niods) for r in range(s.pcount)]


def _inode_now(fs: FileSystem, ino: int) -> dict | None:
    try:
        a = fs.meta("getattr", ino=ino)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ESTALE):
            return None
        raise
    return a if a.get("type") == "file" else None


def _has_stripe_file(fs: FileSystem, iod: int, ino: int) -> bool:
    return ino in fs.iod_call(iod, "list", after=ino - 1, limit=1)["inodes"]


def scan(fs: FileSystem) -> tuple[list[dict], dict]:
    """(orphans, counts): the stripe files without metadata, each checked twice."""
    inodes = _all_inodes(fs)
    pooled = _precreated(fs)
    present = {i: _stripe_files(fs, i) for i in range(fs.config.niods)}
    pooled |= _precreated(fs)  # and those the manager gave out while we listed
    orphans = []
    for iod, inos in present.items():
        for ino in sorted(inos):
            if ino in pooled:
                continue  # written by a mount creating ahead before its create arrived
            a = inodes.get(ino)
            if a is not None and iod in _holders(fs, a):
                continue
            a = _inode_now(fs, ino)  # created after the manager was listed?
            if a is not None and iod in _holders(fs, a):
                continue
            if not _has_stripe_file(fs, iod, ino):
                continue
            size = fs.iod_call(iod, "size", ino=ino)["local_size"]
            orphans.append({"iod": iod, "address": fs.config.iods[iod].address, "ino": ino,
                            "size": size, "reason": "no inode" if a is None else
                            "inode holds no share on this daemon", "repaired": False})
    counts = {"inodes": len(inodes), "stripe_files": sum(len(v) for v in present.values()),
              "precreated": len(pooled), "iods": fs.config.niods}
    return orphans, counts


def repair(fs: FileSystem, orphans: list[dict]) -> list[str]:
    """Remove the orphans ``scan`` found; returns the failures (empty when all went well)."""
    failures = []
    for o in orphans:
        try:
            fs.iod_call(o["iod"], "unlink", ino=o["ino"])
            o["repaired"] = True
        except OSError as exc:
            failures.append(f"unlink inode {o['ino']} on iod{o['iod']}: {exc.strerror or exc}")
    return failures


def cmd_fsck(args: argparse.Namespace) -> int:
    with connect(args) as fs:
        orphans, counts = scan(fs)
        failures = repair(fs, orphans) if args.repair else []
    clean = not orphans
    fixed = args.repair and not failures
    data = {"checked": counts, "orphans": orphans, "repair": bool(args.repair),
            "failures": failures, "clean": clean, "ok": clean or fixed}
    emit(args.json, data, _render_fsck)
    return 0 if data["ok"] else 1


def _render_fsck(d: dict) -> str:
    c = d["checked"]
    out = [(f"checked {c['inodes']} file inodes and {c['stripe_files']} stripe files "
            f"on {c['iods']} I/O daemons ({c.get('precreated', 0)} inode numbers precreated)")]
    if d["orphans"]:
        out += ["", f"orphan stripe files: {len(d['orphans'])}", table(
            [[f"iod{o['iod']}", o["ino"], human_size(o["size"]), o["reason"],
              ("unlinked" if o["repaired"] else "FAILED") if d["repair"] else "-"]
             for o in d["orphans"]], ["daemon", "inode", "size", "reason", "repair"],
            right=[1, 2])]
    out += [""] + [f"failed: {f}" for f in d["failures"]]
    if d["clean"]:
        out.append("clean")
    elif d["repair"]:
        out.append("repaired" if d["ok"] else "some repairs FAILED")
    else:
        out.append(f"run `{PROG} fsck --repair` to fix")
    return "\n".join(out)
