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


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """``n`` distinct ports free right now on ``host``."""
    socks, ports = [], []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind((host, 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
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


def down(cfg: Config, timeout: float = STOP_TIMEOUT) -> list[tuple[str, int]]:
    """SIGTERM every local daemon (by pidfile), wait, SIGKILL stragglers; (name, pid) stopped.

    The global caches go first, while the I/O daemons still answer: a stopping global cache
    writes its dirty blocks back to them."""
    alive = [(d.name, pid, d.pidfile) for d in daemons_of(cfg)
             if (pid := read_pidfile(d.pidfile))]
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
