"""Writing a config and starting/stopping the daemons of it that belong to this host.

Used by ``pvfs-admin init|up|down`` and by the test fixtures, so tests start clusters exactly
as users do: one process per daemon, a pidfile and a log file each under the config's
``run_dir``, and a wait until each daemon answers a ping.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from pvfs import config as cfgmod
from pvfs.config import Config, Endpoint
from pvfs.layout.stripe import Stripe
from pvfs.procs import read_pidfile, terminate

START_TIMEOUT = 20.0
STOP_TIMEOUT = 10.0
DEFAULT_STRIPE = Stripe(0, -1, 65536)


# Ports handed out by this process, newest last: two calls in a row (a global cache's port,
# then a cluster's) must not get the same port from the kernel, which only knows that the
# probing socket was closed, not that a daemon is about to bind it.
_HANDED_OUT: dict[int, None] = {}
_REMEMBERED = 4096


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """``n`` distinct ports free right now on ``host``, none of them returned by an earlier
    call in this process (up to the last 4,096)."""
    socks, ports = [], []
    try:
        while len(ports) < n:
            s = socket.socket()
            s.bind((host, 0))
            socks.append(s)  # held until the end, so the kernel offers another next time
            port = s.getsockname()[1]
            if port not in _HANDED_OUT:
                ports.append(port)
    finally:
        for s in socks:
            s.close()
    for port in ports:
        _HANDED_OUT[port] = None
    while len(_HANDED_OUT) > _REMEMBERED:
        del _HANDED_OUT[next(iter(_HANDED_OUT))]
    return ports


def make_config(directory: str, iods: int = 4, hosts: list[str] | None = None,
                stripe: Stripe = DEFAULT_STRIPE, base_port: int | None = None,
                **overrides) -> Config:
    """A config for one workstation (manager + ``iods`` daemons on 127.0.0.1 under
    ``directory``) or, with ``hosts``, for a cluster: the manager on the first host and one
    I/O daemon per host."""
    root = Path(directory).resolve()
    if hosts:
        port = base_port or 7400
        mgr = Endpoint(hosts[0], port, str(root / "mgr"))
        iod_list = tuple(Endpoint(h, port + 1, str(root / "iod")) for h in hosts)
    else:
        ports = [base_port + i for i in range(iods + 1)] if base_port else free_ports(iods + 1)
        mgr = Endpoint("127.0.0.1", ports[0], str(root / "mgr"))
        iod_list = tuple(Endpoint("127.0.0.1", ports[1 + i], str(root / f"iod{i}"))
                         for i in range(iods))
    return Config(name="pvfs", manager=mgr, iods=iod_list, stripe=stripe,
                  run_dir=str(root / "run"), **overrides)


def write_config(cfg: Config, path: str) -> Config:
    """Write ``cfg`` as TOML and return it re-read (so ``path`` is set)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    tmp = f"{path}.tmp"
    with open(tmp, "w") as fh:
        fh.write(cfgmod.dump(cfg))
    os.replace(tmp, path)
    return cfgmod.load(path)


def remember_config(path: str) -> None:
    """Make ``path`` the default config of later commands (``config.default_path``)."""
    marker = Path.home() / ".config" / "pvfs" / "last-config"
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(str(Path(path).resolve()) + "\n")


def is_local(host: str) -> bool:
    """Whether ``host`` is an address of this machine (so its daemons start here)."""
    try:
        infos = socket.getaddrinfo(host, None)
    except socket.gaierror:
        return False
    for family, *_, addr in infos:
        ip = addr[0]
        if ip.startswith("127.") or ip == "::1":
            return True
        try:
            with socket.socket(family, socket.SOCK_DGRAM) as s:
                s.bind((ip, 0))
            return True
        except OSError:
            continue
    return False


@dataclass(frozen=True)
class Daemon:
    name: str  # "mgr", "iod0", ...
    endpoint: Endpoint
    argv: list[str]
    pidfile: str
    log_file: str


def daemons_of(cfg: Config, local_only: bool = True) -> list[Daemon]:
    run = Path(cfg.run_dir)
    out = []
    entries = [("mgr", cfg.manager, ["-m", "pvfs.daemons.mgr"])]
    entries += [(f"iod{i}", e, ["-m", "pvfs.daemons.iod", "--index", str(i)])
                for i, e in enumerate(cfg.iods)]
    entries += _gcache_entries(cfg, run)
    for name, ep, args in entries:
        if local_only and not is_local(ep.host):
            continue
        pidfile, log = str(run / f"{name}.pid"), str(run / f"{name}.log")
        argv = [sys.executable, *args, "--config", cfg.path, "--pidfile", pidfile, "--log-file", log]
        out.append(Daemon(name, ep, argv, pidfile, log))
    return out


def _gcache_entries(cfg: Config, run: Path) -> list[tuple[str, Endpoint, list[str]]]:
    """The global cache daemons of ``[gcache]`` (none without the table)."""
    from pvfs.gcache.config import gcache_config

    g = gcache_config(cfg)
    if g is None:
        return []
    return [(f"gcache{i}", Endpoint(e.host, e.port, str(run / f"gcache{i}")),
             ["-m", "pvfs.daemons.gcache", "--index", str(i)])
            for i, e in enumerate(g.endpoints)]


def ping(ep: Endpoint, timeout: float = 1.0, key: bytes | None = None) -> dict | None:
    """The daemon's ping reply, or None if it does not answer."""
    try:
        return request(ep, {"op": "ping"}, timeout, key)
    except (OSError, ValueError):
        return None


def request(ep: Endpoint, header: dict, timeout: float = 1.0, key: bytes | None = None) -> dict:
    """One control call (no bulk data) on a fresh connection; the reply header, errors
    included (``{"err": ..., "msg": ...}``). Raises OSError/ValueError if the daemon does not
    answer properly within ``timeout`` seconds per wait; with ``key`` the connection
    authenticates first (PermissionError if that fails)."""
    from pvfs.protocol.auth import client_handshake_sync
    from pvfs.protocol.framing import PREFIX_SIZE, decode_header, frame, parse_prefix

    def recv_exact(s: socket.socket, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = s.recv(n - len(buf))
            if not chunk:
                raise ConnectionResetError(f"{ep.address} closed the connection")
            buf += chunk
        return buf

    with socket.create_connection((ep.host, ep.port), timeout=timeout) as s:
        s.settimeout(timeout)
        if key is not None:
            client_handshake_sync(s, key, "admin", ep.address, timeout)
        s.sendall(frame(header))
        hlen, _ = parse_prefix(recv_exact(s, PREFIX_SIZE))
        return decode_header(recv_exact(s, hlen))


def up(cfg: Config, timeout: float = START_TIMEOUT) -> list[tuple[str, int, bool]]:
    """Start every local daemon not already running; wait until all answer.

    Returns (name, pid, started_now) per daemon. Raises RuntimeError (with the end of the
    daemon's log) if one exits or does not answer in time.
    """
    from pvfs.protocol.auth import key_for

    key = key_for(cfg)  # a missing or open key file stops here, before any daemon starts
    Path(cfg.run_dir).mkdir(parents=True, exist_ok=True)
    result, started = [], []
    order = daemons_of(cfg)
    # I/O daemons first: the manager calls them as soon as clients arrive.
    order.sort(key=lambda d: d.name == "mgr")
    for d in order:
        pid = read_pidfile(d.pidfile)
        if pid:
            result.append((d.name, pid, False))
            continue
        Path(d.endpoint.data_dir).mkdir(parents=True, exist_ok=True)
        with open(d.log_file, "ab") as log:
            proc = subprocess.Popen(d.argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                                    start_new_session=True, close_fds=True)
        started.append((d, proc))
        result.append((d.name, proc.pid, True))
    deadline = time.monotonic() + timeout
    for d, proc in started:
        while ping(d.endpoint, 0.5, key) is None:
            if proc.poll() is not None or time.monotonic() > deadline:
                for _, p in started:
                    if p.poll() is None:
                        p.terminate()
                tail = _tail(d.log_file)
                why = f"exited with status {proc.returncode}" if proc.poll() is not None \
                    else f"did not answer within {timeout:g} s"
                raise RuntimeError(f"{d.name} {why}; end of {d.log_file}:\n{tail}")
            time.sleep(0.05)
    return result


def _tail(path: str, lines: int = 15) -> str:
    try:
        with open(path, errors="replace") as fh:
            return "".join(fh.readlines()[-lines:])
    except OSError:
        return "(no log)"


def down(cfg: Config, timeout: float = STOP_TIMEOUT,
         only_caches: bool = False) -> list[tuple[str, int]]:
    """SIGTERM every local daemon (by pidfile), wait, SIGKILL stragglers; (name, pid) stopped.

    The global caches go first, while the I/O daemons still answer: a stopping global cache
    writes its dirty blocks back to them. ``only_caches``: stop the global caches only (the
    first stage of stopping a whole cluster, ``pvfs-admin down --all``)."""
    alive = [(d.name, pid, d.pidfile) for d in daemons_of(cfg)
             if (pid := read_pidfile(d.pidfile))
             and (not only_caches or d.name.startswith("gcache"))]
    first = [pid for name, pid, _ in alive if name.startswith("gcache")]
    stopped = set(terminate(first, timeout))
    stopped |= set(terminate([pid for _, pid, _ in alive if pid not in first], timeout))
    for _, pid, pidfile in alive:
        if pid in stopped:
            try:
                os.unlink(pidfile)
            except OSError:
                pass
    return [(name, pid) for name, pid, _ in alive if pid in stopped]


@contextlib.contextmanager
def running(cfg: Config) -> Iterator[Config]:
    """The local daemons of ``cfg`` up for the block and down after it, also when ``up``
    failed half way (the daemons it did start are stopped)."""
    try:
        up(cfg)
        yield cfg
    finally:
        down(cfg)


@contextlib.contextmanager
def scratch_cluster(prefix: str, iods: int, **overrides) -> Iterator[Config]:
    """A file system of its own on this host for a study or a benchmark: a new temp dir
    (``prefix``), ``make_config(iods=iods, **overrides)`` written there, the daemons
    ``running`` for the block; stopped and the directory removed afterwards."""
    root = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        cfg = write_config(make_config(str(root), iods=iods, **overrides),
                           str(root / "pvfs.toml"))
        with running(cfg):
            yield cfg
    finally:
        shutil.rmtree(root, ignore_errors=True)


# ---------------------------------------------------------------------- a whole cluster
# `pvfs-admin up --all` / `down --all`: every host of the config, this one in this process and
# the others over ssh (the user's own ssh, its config and keys), like Hadoop's start-all.sh.
SSH_ENV = "PVFS_SSH"                  # the ssh command, e.g. "ssh -F ~/.ssh/cluster.conf"
REMOTE_ADMIN_ENV = "PVFS_REMOTE_ADMIN"  # pvfs-admin on the other hosts
SSH_CONNECT_TIMEOUT = 10


def hosts_of(cfg: Config) -> list[tuple[str, list[str]]]:
    """Every host of ``cfg`` in the order of the config (manager's first), with the names of
    its daemons."""
    out: dict[str, list[str]] = {}
    for d in daemons_of(cfg, local_only=False):
        out.setdefault(d.endpoint.host, []).append(d.name)
    return list(out.items())


def ssh_command(ssh_config: str | None = None) -> list[str]:
    """The ssh command line: ``$PVFS_SSH`` (split like a shell) or ``ssh``, never prompting
    (``BatchMode``), giving up on a host that does not answer within 10 s; ``-F ssh_config``
    when given."""
    import shlex

    argv = shlex.split(os.environ.get(SSH_ENV) or "ssh")
    argv += ["-o", "BatchMode=yes", "-o", f"ConnectTimeout={SSH_CONNECT_TIMEOUT}"]
    if ssh_config:
        argv += ["-F", ssh_config]
    return argv


def remote_admin() -> str:
    """``pvfs-admin`` as the other hosts run it: ``$PVFS_REMOTE_ADMIN``, else this one's path
    (pvfs installed at the same place on every host, as start-all.sh expects of its home)."""
    env = os.environ.get(REMOTE_ADMIN_ENV)
    if env:
        return env
    here = Path(sys.executable).parent / "pvfs-admin"
    return str(here) if here.exists() else "pvfs-admin"


@dataclass
class HostResult:
    """What one host of ``on_every_host`` did."""

    host: str
    via: str                 # "here" (this process) or "ssh"
    ok: bool
    reply: dict | None       # the host's `pvfs-admin --json` answer
    error: str | None = None


def run_on_host(host: str, argv: list[str], ssh: list[str], admin: str,
                timeout: float) -> HostResult:
    """``admin --json ARGV`` on ``host`` over ssh; its JSON answer, or why not."""
    import json
    import shlex

    remote = shlex.join([admin, "--json", *argv])
    try:
        done = subprocess.run([*ssh, "--", host, remote], capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return HostResult(host, "ssh", False, None, f"no answer over ssh within {timeout:g} s")
    except OSError as exc:
        return HostResult(host, "ssh", False, None, f"cannot run {ssh[0]}: {exc.strerror or exc}")
    err = [ln.strip() for ln in done.stderr.splitlines() if ln.strip()]
    last = err[-1] if err else ""
    if done.returncode == 255:
        return HostResult(host, "ssh", False, None,
                          f"cannot reach it over ssh: {last or 'ssh exited with status 255'}")
    if done.returncode == 127:
        return HostResult(host, "ssh", False, None,
                          f"{admin} not found there ({last}); install pvfs at the same path "
                          f"or name it with --remote-admin / ${REMOTE_ADMIN_ENV}")
    try:
        reply = json.loads(done.stdout) if done.stdout.strip() else None
    except ValueError:
        reply = None
    if done.returncode != 0:
        return HostResult(host, "ssh", False, reply,
                          last or f"{admin} exited with status {done.returncode}")
    if reply is None:
        return HostResult(host, "ssh", False, None, f"no JSON answer from {admin}: "
                          f"{done.stdout.strip()[:200]!r}")
    return HostResult(host, "ssh", True, reply)


def on_every_host(cfg: Config, argv: list[str], here, ssh_config: str | None = None,
                  timeout: float = START_TIMEOUT) -> list[HostResult]:
    """Run ``pvfs-admin --json --config CFG ARGV`` on every host of ``cfg`` at once: on this
    host by calling ``here(cfg) -> dict`` in this process, elsewhere over ssh. One result per
    host, in config order; a host that fails does not stop the others."""
    from concurrent.futures import ThreadPoolExecutor

    ssh, admin = ssh_command(ssh_config), remote_admin()
    full = ["--config", cfg.path, *argv]

    hosts = [h for h, _ in hosts_of(cfg)]
    local = [h for h in hosts if is_local(h)]

    def one(host: str) -> HostResult:
        if host in local:  # every address of this machine: one call does all of them
            if host != local[0]:
                return HostResult(host, "here", True, None)
            try:
                return HostResult(host, "here", True, here(cfg))
            except (OSError, RuntimeError, ValueError) as exc:
                return HostResult(host, "here", False, None, str(exc).strip())
        return run_on_host(host, full, ssh, admin, timeout + 2 * SSH_CONNECT_TIMEOUT + 30)

    with ThreadPoolExecutor(max_workers=min(32, len(hosts))) as pool:
        return list(pool.map(one, hosts))
