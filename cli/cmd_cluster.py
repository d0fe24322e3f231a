"""Cluster subcommands: ``init``, ``up``, ``down``, ``status``, ``ping``, ``df``.

``init`` writes the TOML config (one workstation by default, or one I/O daemon per host of a
host list) and remembers it; ``up``/``down`` start and stop this host's daemons of it through
``pvfs.cluster.launch`` exactly as the test fixtures do. ``status``, ``ping`` and ``df`` ask every
daemon directly, so they report a dead daemon as a row instead of failing as a whole (like
``beegfs-check-servers`` and ``pvfs2-ping``).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from pvfs import schedulers
from pvfs.cli.common import PROG, add_command, load_config, mount_available, size_arg
from pvfs.cli.output import CliError, emit, human_duration, human_size, note, table
from pvfs.config import Config, Endpoint
from pvfs.layout.stripe import Stripe
from pvfs.models import bypass

STATUS_TIMEOUT = 2.0
# The same as pvfs.cluster.launch's, which is imported only by the commands that need it (it
# pulls in trio through the daemons' helpers).
START_TIMEOUT = 20.0
STOP_TIMEOUT = 10.0


def default_dir() -> str:
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(Path.home(), ".local", "share")
    return os.path.join(base, "pvfs")


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "init", help="write a file-system config and make it the default",
                    func=cmd_init, example=f"""\
{PROG} init --dir /srv/pvfs                 # manager + 4 I/O daemons on this machine
{PROG} init --dir /srv/pvfs --iods 8 --ssize 1M
{PROG} init --dir /srv/pvfs --hosts hosts.txt  # manager on the first host, an iod per host""",
                    description="Write D/pvfs.toml: a manager and N I/O daemons on 127.0.0.1 "
                    "with their data under D,\nor, with --hosts, the manager on the first host "
                    "and one I/O daemon on each host.\nThe config becomes the default of later "
                    "commands (~/.config/pvfs/last-config).")
    p.add_argument("--dir", default=None, metavar="D",
                   help=f"where data, logs and the config go (default: {default_dir()})")
    p.add_argument("--iods", type=int, default=4, metavar="N",
                   help="number of I/O daemons on this machine (default: 4)")
    p.add_argument("--hosts", metavar="FILE",
                   help="one host name or address per line; '#' starts a comment")
    p.add_argument("--ssize", type=size_arg, default=65536, metavar="BYTES",
                   help="default stripe size, e.g. 64k or 1M (default: 64k)")
    p.add_argument("--pcount", type=int, default=-1, metavar="N",
                   help="default number of I/O daemons per file (default: -1 = all)")
    p.add_argument("--port", type=int, default=None, metavar="PORT",
                   help="first TCP port (default: free ports now; 7400 with --hosts)")
    p.add_argument("--algorithm", choices=schedulers.ALGORITHMS, default=schedulers.DEFAULT,
                   help=f"I/O scheduler the daemons start with (default: {schedulers.DEFAULT})")
    p.add_argument("--gcaches", type=int, default=0, metavar="N",
                   help="global cache daemons (files spread over them by inode; default: 0)")
    p.add_argument("--gcache-size", type=size_arg, default=64 << 20, metavar="BYTES",
                   help="block memory of each global cache (default: 64M)")
    p.add_argument("--gcache-policy", choices=bypass.POLICIES, default=bypass.DEFAULT_POLICY,
                   help="global cache admission (docs/caching.md; default: "
                   f"{bypass.DEFAULT_POLICY})")
    p.add_argument("--force", action="store_true", help="overwrite an existing config")

    p = add_command(sub, "up", help="start this host's daemons and wait until they answer",
                    func=cmd_up, example=f"""\
{PROG} up
{PROG} --config /srv/pvfs/pvfs.toml up --mount ~/pvfs
{PROG} --config /srv/pvfs/pvfs.toml up --all     # every host of the config, over ssh""")
    p.add_argument("--mount", metavar="DIR", help="also mount the file system at DIR")
    p.add_argument("--timeout", type=float, default=START_TIMEOUT, metavar="S",
                   help=f"seconds to wait for each daemon (default: {START_TIMEOUT:g})")
    _all_options(p, "start")

    p = add_command(sub, "down", help="stop this host's daemons (SIGTERM, then SIGKILL)",
                    func=cmd_down, example=f"""\
{PROG} down
{PROG} --config /srv/pvfs/pvfs.toml down --all   # every host of the config, over ssh""")
    p.add_argument("--timeout", type=float, default=STOP_TIMEOUT, metavar="S",
                   help=f"seconds before SIGKILL (default: {STOP_TIMEOUT:g})")
    _all_options(p, "stop")
    p.add_argument("--caches-only", action="store_true",
                   help="stop only this host's mounts of the config and its global caches "
                   "(what writes back to the I/O daemons; the first stage of down --all)")

    add_command(sub, "status", help="state of every daemon: version, uptime, open files, "
                "queued jobs, scheduler", func=cmd_status, example=f"""\
{PROG} status
{PROG} status --json | jq '.daemons[] | select(.up | not)'""")

    add_command(sub, "ping", help="check that every daemon answers and the root directory "
                "resolves", func=cmd_ping, example=f"{PROG} ping && echo all good")

    add_command(sub, "df", help="capacity and use per I/O daemon and in total",
                func=cmd_df, example=f"""\
{PROG} df
{PROG} df --json | jq .total.avail""")


def _all_options(p: argparse.ArgumentParser, verb: str) -> None:
    p.add_argument("--all", action="store_true",
                   help=f"{verb} the daemons of every host of the config: this host's here, "
                   "the others' over ssh (your ssh config and keys; BatchMode, no prompts); "
                   "pvfs-admin must be at the same path there (or see --remote-admin)")
    p.add_argument("--ssh-config", metavar="FILE",
                   help="with --all: ssh -F FILE (default: your ~/.ssh/config; $PVFS_SSH "
                   "replaces the ssh command itself, e.g. 'ssh -p 2222')")
    p.add_argument("--remote-admin", metavar="PATH",
                   help="with --all: pvfs-admin on the other hosts (default: $PVFS_REMOTE_ADMIN, "
                   "else this one's path)")


# ---------------------------------------------------------------------- init / up / down
def _read_hosts(path: str) -> list[str]:
    try:
        with open(path) as fh:
            lines = fh.read().splitlines()
    except OSError as exc:
        raise CliError(f"--hosts {path}", exc.strerror or str(exc)) from None
    hosts = [ln.split("#", 1)[0].strip() for ln in lines]
    hosts = [h for h in hosts if h]
    if not hosts:
        raise CliError(f"--hosts {path}", "no host names in the file")
    return hosts


def _with_gcaches(cfg: Config, args: argparse.Namespace, hosts: list[str] | None) -> Config:
    """Add a ``[gcache]`` table: N global caches on this machine (free ports, or the ports
    after the I/O daemons' with --port), or with --hosts on the first N hosts."""
    import dataclasses

    from pvfs.cluster import launch
    from pvfs.gcache.config import gcache_table

    n = args.gcaches
    if n < 0 or (hosts and n > len(hosts)):
        raise CliError("init", f"--gcaches must be between 0 and the number of hosts, got {n}",
                       status=2)
    if hosts:
        addrs = [f"{h}:{(args.port or 7400) + 2}" for h in hosts[:n]]
    else:
        ports = [args.port + args.iods + 1 + i for i in range(n)] if args.port \
            else launch.free_ports(n)
        addrs = [f"127.0.0.1:{p}" for p in ports]
    table = gcache_table(addrs, capacity=args.gcache_size, policy=args.gcache_policy)
    return dataclasses.replace(cfg, extra={**cfg.extra, "gcache": table})


def cmd_init(args: argparse.Namespace) -> int:
    from pvfs.cluster import launch

    directory = os.path.abspath(os.path.expanduser(args.dir or default_dir()))
    path = os.path.join(directory, "pvfs.toml")
    if os.path.exists(path) and not args.force:
        raise CliError(f"init {path}", "a config already exists (use --force to overwrite)")
    if args.iods < 1:
        raise CliError("init", f"--iods must be at least 1, got {args.iods}", status=2)
    hosts = _read_hosts(args.hosts) if args.hosts else None
    stripe = Stripe(0, args.pcount, args.ssize)
    try:
        stripe.resolved(len(hosts) if hosts else args.iods)
    except ValueError as exc:
        raise CliError("init", str(exc), status=2) from None
    cfg = launch.make_config(directory, iods=args.iods, hosts=hosts, stripe=stripe,
                             base_port=args.port, algorithm=args.algorithm)
    if args.gcaches:
        cfg = _with_gcaches(cfg, args, hosts)
    if cfg.auth_enabled:
        # Some address is not loopback: every connection will authenticate (docs/security.md).
        import dataclasses

        from pvfs.protocol.auth import generate_key_file

        key_file = os.path.join(directory, "pvfs.key")
        if not os.path.exists(key_file) or args.force:
            generate_key_file(key_file)
        cfg = dataclasses.replace(cfg, key_file=key_file)
    cfg = launch.write_config(cfg, path)
    launch.remember_config(path)
    data = _describe_config(cfg)
    data["key_file"] = cfg.key_file or None
    emit(args.json, data, lambda d: (
        f"wrote {d['config']} (now the default config)\n\n"
        + table([[r["name"], r["address"], r["data_dir"]] for r in d["daemons"]],
                ["daemon", "address", "data directory"])
        + f"\n\nstripe default: base {d['stripe']['base']}, pcount {d['stripe']['pcount']}, "
        f"ssize {human_size(d['stripe']['ssize'])}"
        + (f"\nshared key: {d['key_file']} (mode 0600; copy it with the config to every node)"
           if d.get("key_file") else "")
        + f"\nstart it with: {PROG} up"))
    return 0


def _describe_config(cfg: Config) -> dict:
    daemons = [{"name": "mgr", "role": "mgr", "address": cfg.manager.address,
                "data_dir": cfg.manager.data_dir}]
    daemons += [{"name": f"iod{i}", "role": "iod", "address": e.address, "data_dir": e.data_dir}
                for i, e in enumerate(cfg.iods)]
    daemons += [{"name": n, "role": r, "address": e.address, "data_dir": None}
                for n, r, e in _daemons(cfg) if r == "gcache"]
    return {"config": cfg.path, "name": cfg.name, "run_dir": cfg.run_dir, "daemons": daemons,
            "stripe": {"base": cfg.stripe.base, "pcount": cfg.stripe.pcount,
                       "ssize": cfg.stripe.ssize},
            "scheduler": {"algorithm": cfg.algorithm, "window": cfg.window}}


def _up_here(cfg: Config, timeout: float) -> dict:
    """Start this host's daemons of ``cfg``; what ``pvfs-admin --json up`` prints."""
    from pvfs.cluster import launch

    started = launch.up(cfg, timeout=timeout)
    rows = [{"name": n, "pid": pid, "started": now,
             "address": _endpoint(cfg, n).address} for n, pid, now in started]
    return {"config": cfg.path, "daemons": rows, "mount": None}


def cmd_up(args: argparse.Namespace) -> int:
    from pvfs.cluster import launch

    cfg = load_config(args)
    if args.all:
        if args.mount:
            raise CliError("up --all", "--mount mounts on this host only; run "
                           f"`{PROG} mount DIR` after `{PROG} up --all`", status=2)
        return _on_every_host(args, cfg, "up")
    if not launch.daemons_of(cfg):
        raise CliError("up", f"no daemon of {cfg.path} belongs to this host")
    if args.mount and not mount_available():
        raise CliError("up --mount", "the mount client (pvfs.fuse) is not installed")
    data = _up_here(cfg, args.timeout)
    status = 0
    if args.mount:
        from pvfs.cli.cmd_mount import mount_fs

        try:
            status = mount_fs(cfg, args.mount)
        except CliError as exc:  # reported like `pvfs-admin mount`; the daemons stay up
            note(f"{PROG}: {exc.what}: {(exc.why.splitlines() or [''])[0]}")
            status = exc.status
        data["mount"] = os.path.abspath(args.mount) if status == 0 else None
    emit(args.json, data, lambda d: table(
        [[r["name"], r["address"], r["pid"], "started" if r["started"] else "already running"]
         for r in d["daemons"]], ["daemon", "address", "pid", "state"], right=[2])
        + (f"\n\nmounted at {d['mount']}" if d["mount"] else ""))
    return status


def _endpoint(cfg: Config, name: str) -> Endpoint:
    return next(ep for n, _, ep in _daemons(cfg) if n == name)


def _down_here(cfg: Config, timeout: float, caches_only: bool = False) -> dict:
    """Unmount this host's mounts of ``cfg`` and stop its daemons of it (only the global
    caches with ``caches_only``); what ``pvfs-admin --json down`` prints."""
    from pvfs.cluster import launch

    if mount_available():
        from pvfs.cli.cmd_mount import unmount_all

        unmount_all(cfg)  # the mounts go before the daemons they use
    stopped = launch.down(cfg, timeout=timeout, only_caches=caches_only)
    return {"config": cfg.path, "stopped": [{"name": n, "pid": p} for n, p in stopped]}


def cmd_down(args: argparse.Namespace) -> int:
    cfg = load_config(args)
    if args.all:
        if args.caches_only:
            raise CliError("down --all", "--caches-only is a stage of --all", status=2)
        return _on_every_host(args, cfg, "down")
    data = _down_here(cfg, args.timeout, args.caches_only)
    emit(args.json, data, lambda d: table([[r["name"], r["pid"], "stopped"] for r in d["stopped"]],
                                          ["daemon", "pid", "state"], right=[1])
         if d["stopped"] else "no daemon of this config was running here")
    return 0


def _on_every_host(args: argparse.Namespace, cfg: Config, verb: str) -> int:
    """``up --all`` / ``down --all``: every host of the config at once, this one in this
    process, the others over ssh; a row per host, exit status 1 unless every host did it.

    ``down --all`` stops in two stages across the cluster: first every host's mounts of the
    config and global caches (they write back to the I/O daemons), then the rest."""
    from pvfs.cluster import launch

    if args.remote_admin:
        os.environ[launch.REMOTE_ADMIN_ENV] = args.remote_admin
    t = ["--timeout", f"{args.timeout:g}"]
    if verb == "up":
        results = launch.on_every_host(cfg, ["up", *t], lambda c: _up_here(c, args.timeout),
                                       args.ssh_config, args.timeout)
    else:
        first = launch.on_every_host(cfg, ["down", "--caches-only", *t],
                                     lambda c: _down_here(c, args.timeout, caches_only=True),
                                     args.ssh_config, args.timeout)
        results = launch.on_every_host(cfg, ["down", *t], lambda c: _down_here(c, args.timeout),
                                       args.ssh_config, args.timeout)
        for r, f in zip(results, first, strict=True):  # both stages' stops, or the first error
            if r.ok and f.reply and r.reply:
                r.reply["stopped"] = f.reply.get("stopped", []) + r.reply.get("stopped", [])
            elif not f.ok and r.ok:
                r.ok, r.error = False, f.error
    names = dict(launch.hosts_of(cfg))
    rows = []
    for r in results:
        reply = r.reply or {}
        done = reply.get("daemons") if verb == "up" else reply.get("stopped")
        rows.append({"host": r.host, "via": r.via, "ok": r.ok, "error": r.error,
                     "daemons": names.get(r.host, []), "done": done})
    failed = [r["host"] for r in rows if not r["ok"]]
    data = {"config": cfg.path, "action": verb, "hosts": rows, "ok": not failed}
    emit(args.json, data, _render_every_host)
    if failed:
        fine = [r["host"] for r in rows if r["ok"]]
        what = "started" if verb == "up" else "stopped"
        note(f"{PROG}: {verb} --all: {len(failed)} of {len(rows)} hosts failed: "
             f"{', '.join(failed)}; {what} on: {', '.join(fine) or 'none'}"
             + (f" (`{PROG} down --all` stops those)" if verb == "up" and fine else ""))
        return 1
    return 0


def _render_every_host(d: dict) -> str:
    out = []
    for r in d["hosts"]:
        if not r["ok"]:
            detail = f"FAILED: {(r['error'] or '').splitlines()[0] if r['error'] else ''}"
        elif r["done"] is None:  # a second address of this host: done with the first
            detail = "(this host, above)"
        elif d["action"] == "up":
            detail = ", ".join(f"{x['name']} {'started' if x['started'] else 'running'} "
                               f"(pid {x['pid']})" for x in r["done"]) or "nothing to start"
        else:
            detail = ", ".join(f"{x['name']} stopped (pid {x['pid']})" for x in r["done"]) \
                or "nothing was running"
        out.append([r["host"], r["via"], "ok" if r["ok"] else "FAILED", detail])
    return table(out, ["host", "via", "result", "daemons"])


# ---------------------------------------------------------------------- status / ping
def _daemons(cfg: Config) -> list[tuple[str, str, Endpoint]]:
    from pvfs.gcache.config import gcache_config

    g = gcache_config(cfg)
    return [("mgr", "mgr", cfg.manager)] + [(f"iod{i}", "iod", e) for i, e in enumerate(cfg.iods)] \
        + [(f"gcache{i}", "gcache", e) for i, e in enumerate(g.endpoints if g else ())]


def _key(cfg: Config) -> bytes | None:
    """The shared key of ``cfg`` (None when authentication is off); errors say what to fix."""
    from pvfs.protocol.auth import key_for

    return key_for(cfg)


def _ask(ep: Endpoint, header: dict, timeout: float = STATUS_TIMEOUT,
         key: bytes | None = None) -> tuple[dict | None, str]:
    """(reply, "") or (None, why) — never raises for an unreachable daemon."""
    from pvfs.cluster import launch

    try:
        reply = launch.request(ep, header, timeout, key)
    except (OSError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        return None, why or type(exc).__name__
    if reply.get("err"):
        return None, str(reply.get("msg") or os.strerror(int(reply["err"])))
    return reply, ""


def cmd_status(args: argparse.Namespace) -> int:
    cfg = load_config(args)
    rows = []
    for name, role, ep in _daemons(cfg):
        reply, why = _ask(ep, {"op": "status"}, key=_key(cfg))
        row: dict = {"name": name, "role": role, "address": ep.address, "host": ep.host,
                     "up": reply is not None,
                     "error": why or None, "version": None, "pid": None, "uptime": None,
                     "open_files": None, "queued_jobs": None, "scheduler": None}
        if reply:
            row.update(version=reply.get("version"), pid=reply.get("pid"),
                       uptime=reply.get("uptime"), open_files=reply.get("open_files"),
                       queued_jobs=reply.get("queued_jobs"), scheduler=reply.get("scheduler"))
            if role == "mgr":
                row["inodes"] = {k: reply.get(k) for k in ("files", "dirs", "symlinks")}
                row["removals_pending"] = reply.get("removals_pending", 0)
                row["precreated"] = reply.get("precreated", 0)
                row["size_cache"] = reply.get("size_cache")
            else:
                row["size_watch"] = reply.get("size_watch")
        rows.append(row)
    down = [r["name"] for r in rows if not r["up"]]
    from pvfs.cli.cmd_admin import local_mounts

    mounts = [{"mountpoint": m["mountpoint"], "pid": m["pid"]} for m in local_mounts(cfg)]
    hosts: dict[str, dict] = {}
    for r in rows:
        h = hosts.setdefault(r["host"], {"host": r["host"], "up": [], "down": []})
        h["up" if r["up"] else "down"].append(r["name"])
    data = {"config": cfg.path, "name": cfg.name, "daemons": rows, "all_up": not down,
            "hosts": list(hosts.values()), "mounts": mounts}
    emit(args.json, data, _render_status)
    return 1 if down else 0


def _render_status(d: dict) -> str:
    body = table([[r["name"], r["address"], "up" if r["up"] else "DOWN", r["version"], r["pid"],
                   human_duration(r["uptime"]) if r["up"] else None, r["open_files"],
                   r["queued_jobs"], r["scheduler"]] for r in d["daemons"]],
                 ["daemon", "address", "state", "version", "pid", "uptime", "open", "queued",
                  "scheduler"], right=[4, 6, 7])
    notes = [f"{r['name']}: {r['error']}" for r in d["daemons"] if r["error"]]
    mgr = d["daemons"][0]
    if mgr.get("inodes"):
        i = mgr["inodes"]
        notes.insert(0, f"metadata: {i['files']} files, {i['dirs']} directories, "
                     f"{i['symlinks']} symlinks; {mgr['precreated']} inodes precreated, "
                     f"{mgr['removals_pending']} deleted files' data still to remove")
    notes += [f"mounted at {m['mountpoint']} (client pid {m['pid']})" for m in d["mounts"]]
    if len(d["hosts"]) > 1:  # a cluster: what runs on each host
        body += "\n\n" + table(
            [[h["host"], ", ".join(h["up"]) or "-", ", ".join(h["down"]) or "-"]
             for h in d["hosts"]], ["host", "running", "DOWN"])
    return body + ("\n\n" + "\n".join(notes) if notes else "")


def cmd_ping(args: argparse.Namespace) -> int:
    cfg = load_config(args)
    rows = []
    for name, role, ep in _daemons(cfg):
        t0 = time.perf_counter()
        reply, why = _ask(ep, {"op": "ping"}, key=_key(cfg))
        ms = (time.perf_counter() - t0) * 1000
        rows.append({"name": name, "role": role, "address": ep.address, "ok": reply is not None,
                     "rtt_ms": round(ms, 3) if reply else None,
                     "version": reply.get("version") if reply else None, "error": why or None})
    # Like pvfs2-ping: the name space must resolve too, not only answer pings.
    root, why = _ask(cfg.manager, {"op": "resolve", "path": "/"}, key=_key(cfg)) if rows[0]["ok"] \
        else (None, "manager down")
    checks = {"root": {"ok": root is not None and root.get("type") == "dir",
                       "error": why or None}}
    ok = all(r["ok"] for r in rows) and checks["root"]["ok"]
    data = {"config": cfg.path, "daemons": rows, "checks": checks, "ok": ok}
    emit(args.json, data, lambda d: table(
        [[r["name"], r["address"], "ok" if r["ok"] else "FAIL",
          f"{r['rtt_ms']:.2f} ms" if r["ok"] else r["error"]] for r in d["daemons"]]
        + [["root", "/", "ok" if checks["root"]["ok"] else "FAIL",
            "resolves" if checks["root"]["ok"] else checks["root"]["error"]]],
        ["daemon", "address", "result", "detail"]) + ("\n\nthe file system is ready"
                                                       if d["ok"] else "\n\nFAILED"))
    return 0 if ok else 1


# ---------------------------------------------------------------------- df
def cmd_df(args: argparse.Namespace) -> int:
    cfg = load_config(args)
    rows = []
    total = {"size": 0, "used": 0, "avail": 0}
    for i, ep in enumerate(cfg.iods):
        reply, why = _ask(ep, {"op": "statfs"}, key=_key(cfg))
        row: dict = {"name": f"iod{i}", "address": ep.address, "data_dir": ep.data_dir,
                     "up": reply is not None, "error": why or None,
                     "size": None, "used": None, "avail": None, "use_pct": None}
        if reply:
            bs = reply["bsize"]
            size, free, avail = reply["blocks"] * bs, reply["bfree"] * bs, reply["bavail"] * bs
            used = size - free
            row.update(size=size, used=used, avail=avail, use_pct=_pct(used, used + avail),
                       files=reply.get("files"), ffree=reply.get("ffree"))
            for k in total:
                total[k] += row[k]
        rows.append(row)
    total["use_pct"] = _pct(total["used"], total["used"] + total["avail"])
    mgr, _ = _ask(cfg.manager, {"op": "status"}, key=_key(cfg))
    inodes = {k: mgr.get(k) for k in ("files", "dirs", "symlinks", "inodes")} if mgr else None
    data = {"config": cfg.path, "iods": rows, "total": total, "inodes": inodes,
            "shared_devices": _shared(cfg)}
    emit(args.json, data, _render_df)
    return 0 if all(r["up"] for r in rows) else 1


def _pct(used: int, whole: int) -> float:
    return round(100.0 * used / whole, 1) if whole else 0.0


def _shared(cfg: Config) -> bool:
    """Whether several local I/O daemons keep data on one device (the total counts it more
    than once, like ``lfs df`` on OSTs sharing a disk)."""
    from pvfs.cluster import launch

    devs = []
    for ep in cfg.iods:
        if launch.is_local(ep.host):
            try:
                devs.append(os.stat(ep.data_dir).st_dev)
            except OSError:
                continue
    return len(devs) != len(set(devs))


def _render_df(d: dict) -> str:
    rows = [[r["name"], r["address"], human_size(r["size"]), human_size(r["used"]),
             human_size(r["avail"]), f"{r['use_pct']:.0f}%" if r["up"] else "DOWN",
             r["data_dir"]] for r in d["iods"]]
    t = d["total"]
    rows.append(["total", "", human_size(t["size"]), human_size(t["used"]),
                 human_size(t["avail"]), f"{t['use_pct']:.0f}%", ""])
    text = table(rows, ["daemon", "address", "size", "used", "avail", "use%", "data directory"],
                 right=[2, 3, 4, 5])
    if d["inodes"]:
        i = d["inodes"]
        text += f"\n\ninodes: {i['files']} files, {i['dirs']} directories, {i['symlinks']} symlinks"
    if d["shared_devices"]:
        text += "\nnote: some I/O daemons share a device, so the total counts it more than once"
    for r in d["iods"]:
        if r["error"]:
            note(f"{PROG}: df: {r['name']} ({r['address']}): {r['error']}")
    return text
