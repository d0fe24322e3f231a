"""The file-system description every daemon and client reads: one TOML file.

Example (what ``pvfs-admin init`` writes)::

    [filesystem]
    name = "pvfs"
    run_dir = "/srv/pvfs/run"          # pidfiles and logs of daemons started by `pvfs-admin up`

    [manager]
    address = "127.0.0.1:7400"
    data_dir = "/srv/pvfs/mgr"

    [[iod]]                            # ordered: I/O daemon 0, 1, ... (thesis table 3.1 `base`)
    address = "127.0.0.1:7401"
    data_dir = "/srv/pvfs/iod0"

    [stripe]                           # default distribution of new files
    base = 0
    pcount = -1                        # -1: every I/O daemon
    ssize = 65536

    [timeouts]
    connect = 5.0                      # seconds to establish a connection
    request = 10.0                     # seconds any single network wait may take

    [scheduler]
    algorithm = "opt1"                 # opt1 | opt2 | opt3 | opt4 | rs (reactive)
    window = 268435456                 # opt3 window in bytes (~ memory size)
    gather = 0.01                      # opt4: seconds a busy period's first request waits
                                       # for the rest of its collective (0: off)

    [security]                         # docs/security.md
    key_file = "/srv/pvfs/pvfs.key"    # shared key (mode 0600; `pvfs-admin key generate`)
    # auth = true                      # default: on when any address is not loopback

A ``[manager]`` or ``[[iod]]`` table may add ``metrics_port = 9400``: that daemon then
serves Prometheus text on http://HOST:PORT/metrics (docs/operations.md); off unless set.
``[manager]`` may set ``precreate = 1024``: how many inode numbers the manager reserves ahead of
creates in one batch, their empty shares watched by every I/O daemon (``daemons/mgr/
precreate.py``; 0: none), and
``size_cache = 262144``: how many files' sizes the manager keeps, told of every change by the
I/O daemons (``daemons/mgr/sizecache.py``; 0: ask the I/O daemons on every stat), and
``lease_term = 10.0``: how long a mount's lease session lasts without renewal, in seconds
(``daemons/mgr/leases.py``; 0: no leases). ``lease_recall = false`` is for tests only: changes
then do not call lease holders back, and ``pvfs-admin check`` must fail.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from pvfs import schedulers
from pvfs.layout.stripe import Stripe

# The scheduling algorithms are named in pvfs.schedulers (the engine's policies of
# csrc/sched.c and the reactive selector rs); re-exported for the config's readers.
FIXED_ALGORITHMS: tuple[str, ...] = schedulers.FIXED
ALGORITHMS: tuple[str, ...] = schedulers.ALGORITHMS
ENV_CONFIG = "PVFS_CONFIG"
# opt4 waits this long at the start of a busy period for the other requests of a collective
# (csrc/sched.c, opt4_peek; docs/scheduling.md).
GATHER_S = 0.01
SIZE_CACHE = 1 << 18   # files whose sizes the manager keeps (daemons/mgr/sizecache.py)
LEASE_TERM = 10.0      # a mount's lease session without renewal, seconds (daemons/mgr/leases.py)


class ConfigError(ValueError):
    """The config file is missing, unreadable or inconsistent."""


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int
    data_dir: str
    metrics_port: int = 0  # Prometheus endpoint of this daemon; 0 = off

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True)
class Config:
    name: str
    manager: Endpoint
    iods: tuple[Endpoint, ...]
    stripe: Stripe = field(default_factory=Stripe)
    connect_timeout: float = 5.0
    request_timeout: float = 10.0
    algorithm: str = schedulers.DEFAULT
    window: int = 256 << 20
    gather: float = GATHER_S  # [scheduler] gather: opt4's wait for a collective's requests
    # [manager] precreate: the pool's batch (0: off). 1024: a leasing mount's creates ahead
    # of the manager take numbers faster than batches of 256 were made (1,400-2,600
    # creates/s, a delegate request per 70; with 1024: 3,500-4,300/s, one per directory).
    precreate: int = 1024
    size_cache: int = SIZE_CACHE  # [manager] size_cache: files whose sizes it keeps (0: off)
    lease_term: float = LEASE_TERM  # [manager] lease_term: a lease session's length (0: off)
    lease_recall: bool = True  # [manager] lease_recall: false only in tests (no recalls)
    run_dir: str = ""
    path: str = ""
    extra: dict = field(default_factory=dict, compare=False)
    key_file: str = ""  # [security] key_file (absolute)
    auth: bool | None = None  # [security] auth; None: on when any address is not loopback

    @property
    def niods(self) -> int:
        return len(self.iods)

    @property
    def auth_enabled(self) -> bool:
        """Whether every connection must authenticate (protocol/auth.py)."""
        if self.auth is not None:
            return self.auth
        from pvfs.protocol.auth import is_loopback

        return not all(is_loopback(e.host) for e in (self.manager, *self.iods))

    def default_stripe(self) -> Stripe:
        return self.stripe.resolved(self.niods)


def parse_address(text: object, what: str) -> tuple[str, int]:
    if not isinstance(text, str) or ":" not in text:
        raise ConfigError(f"{what}: address must be 'host:port', got {text!r}")
    host, _, port = text.rpartition(":")
    host = host.strip("[]")
    try:
        num = int(port)
    except ValueError:
        raise ConfigError(f"{what}: port {port!r} is not a number") from None
    if not host or not 0 < num < 65536:
        raise ConfigError(f"{what}: bad address {text!r}")
    return host, num


def _endpoint(table: object, what: str, base_dir: Path) -> Endpoint:
    if not isinstance(table, dict):
        raise ConfigError(f"{what}: must be a table")
    host, port = parse_address(table.get("address"), what)
    data_dir = table.get("data_dir")
    if not isinstance(data_dir, str) or not data_dir:
        raise ConfigError(f"{what}: data_dir is required")
    metrics = _number(table, "metrics_port", 0, int, what, 0)
    if metrics > 65535:
        raise ConfigError(f"{what}.metrics_port: must be < 65536, got {metrics}")
    return Endpoint(host, port, str((base_dir / data_dir).resolve()), metrics)


def _number(table: dict, key: str, default, kind, what: str, minimum=None):
    value = table.get(key, default)
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ConfigError(f"{what}.{key}: expected {kind.__name__}, got {value!r}")
    if minimum is not None and value < minimum:
        raise ConfigError(f"{what}.{key}: must be >= {minimum}, got {value!r}")
    return value


def _flag(table: dict, key: str, default: bool, what: str) -> bool:
    value = table.get(key, default)
    if not isinstance(value, bool):
        raise ConfigError(f"{what}.{key}: expected true or false, got {value!r}")
    return value


def _gather(sched: dict) -> float:
    g = _number(sched, "gather", GATHER_S, float, "[scheduler]", 0.0)
    if g > 10.0:
        raise ConfigError(f"[scheduler].gather: at most 10 seconds, got {g!r}")
    return g


def parse(data: dict, path: str = "") -> Config:
    """Build a Config from a parsed TOML document; relative data dirs are relative to it."""
    base_dir = Path(path).resolve().parent if path else Path.cwd()
    fs = data.get("filesystem", {})
    manager = _endpoint(data.get("manager"), "[manager]", base_dir)
    iod_tables = data.get("iod")
    if not isinstance(iod_tables, list) or not iod_tables:
        raise ConfigError("at least one [[iod]] table is required")
    iods = tuple(_endpoint(t, f"[[iod]] #{i}", base_dir) for i, t in enumerate(iod_tables))
    seen = {manager.address}
    for e in iods:
        if e.address in seen:
            raise ConfigError(f"address {e.address} is used twice")
        seen.add(e.address)
    st = data.get("stripe", {})
    try:
        stripe = Stripe(
            _number(st, "base", 0, int, "[stripe]", 0),
            _number(st, "pcount", -1, int, "[stripe]"),
            _number(st, "ssize", 65536, int, "[stripe]"),
        )
        stripe.resolved(len(iods))
    except ValueError as exc:
        raise ConfigError(f"[stripe]: {exc}") from None
    to = data.get("timeouts", {})
    sched = data.get("scheduler", {})
    algorithm = sched.get("algorithm", schedulers.DEFAULT)
    if algorithm not in ALGORITHMS:
        raise ConfigError(f"[scheduler].algorithm must be one of {', '.join(ALGORITHMS)}")
    run_dir = fs.get("run_dir") or str(Path(manager.data_dir).parent / "run")
    sec = data.get("security", {})
    if not isinstance(sec, dict):
        raise ConfigError("[security]: must be a table")
    key_file = sec.get("key_file", "")
    if not isinstance(key_file, str):
        raise ConfigError("[security].key_file: expected a path")
    auth = sec.get("auth")
    if auth is not None and not isinstance(auth, bool):
        raise ConfigError(f"[security].auth: expected true or false, got {auth!r}")
    return Config(
        name=str(fs.get("name", "pvfs")),
        manager=manager,
        iods=iods,
        stripe=stripe,
        connect_timeout=_number(to, "connect", 5.0, float, "[timeouts]", 0.01),
        request_timeout=_number(to, "request", 10.0, float, "[timeouts]", 0.01),
        algorithm=algorithm,
        window=_number(sched, "window", 256 << 20, int, "[scheduler]", 1),
        gather=_gather(sched),
        precreate=min(_number(data["manager"], "precreate", 1024, int, "[manager]", 0), 4096),
        size_cache=_number(data["manager"], "size_cache", SIZE_CACHE, int, "[manager]", 0),
        lease_term=_number(data["manager"], "lease_term", LEASE_TERM, float, "[manager]", 0.0),
        lease_recall=_flag(data["manager"], "lease_recall", True, "[manager]"),
        run_dir=str((base_dir / run_dir).resolve()),
        path=str(Path(path).resolve()) if path else "",
        extra={k: v for k, v in data.items()
               if k not in ("filesystem", "manager", "iod", "stripe", "timeouts", "scheduler",
                            "security")},
        key_file=str((base_dir / key_file).resolve()) if key_file else "",
        auth=auth,
    )


def default_path() -> str | None:
    """``$PVFS_CONFIG``, else the config ``pvfs-admin init`` wrote last, else None."""
    env = os.environ.get(ENV_CONFIG)
    if env:
        return env
    marker = Path.home() / ".config" / "pvfs" / "last-config"
    try:
        text = marker.read_text().strip()
    except OSError:
        return None
    return text or None


def load(path: str | os.PathLike | None = None) -> Config:
    """Read and validate a config file (default: see ``default_path``)."""
    if path is None:
        path = default_path()
        if path is None:
            raise ConfigError(
                "no config given: pass --config FILE, set $PVFS_CONFIG, or run `pvfs-admin init`")
    path = os.fspath(path)
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    return parse(data, path)


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    raise TypeError(f"cannot write {v!r} as TOML")


def dump(cfg: Config) -> str:
    """The TOML text of a config (round-trips through ``parse``)."""
    out = ["# pvfs file-system description (read by every daemon and client)",
           "[filesystem]", f"name = {_toml_value(cfg.name)}", f"run_dir = {_toml_value(cfg.run_dir)}",
           "", "[manager]", f"address = {_toml_value(cfg.manager.address)}",
           f"data_dir = {_toml_value(cfg.manager.data_dir)}"]
    if cfg.manager.metrics_port:
        out.append(f"metrics_port = {cfg.manager.metrics_port}")
    if cfg.precreate != 1024:
        out.append(f"precreate = {cfg.precreate}")
    if cfg.size_cache != SIZE_CACHE:
        out.append(f"size_cache = {cfg.size_cache}")
    if cfg.lease_term != LEASE_TERM:
        out.append(f"lease_term = {cfg.lease_term}")
    if not cfg.lease_recall:
        out.append("lease_recall = false")
    for i, e in enumerate(cfg.iods):
        out += ["", f"[[iod]]  # I/O daemon {i}", f"address = {_toml_value(e.address)}",
                f"data_dir = {_toml_value(e.data_dir)}"]
        if e.metrics_port:
            out.append(f"metrics_port = {e.metrics_port}")
    out += ["", "[stripe]", f"base = {cfg.stripe.base}", f"pcount = {cfg.stripe.pcount}",
            f"ssize = {cfg.stripe.ssize}", "", "[timeouts]",
            f"connect = {cfg.connect_timeout!r}", f"request = {cfg.request_timeout!r}",
            "", "[scheduler]", f"algorithm = {_toml_value(cfg.algorithm)}",
            f"window = {cfg.window}"]
    if cfg.gather != GATHER_S:
        out.append(f"gather = {cfg.gather!r}")
    if cfg.key_file or cfg.auth is not None:
        out += ["", "[security]"]
        if cfg.key_file:
            out.append(f"key_file = {_toml_value(cfg.key_file)}")
        if cfg.auth is not None:
            out.append(f"auth = {_toml_value(cfg.auth)}")
    for table, values in cfg.extra.items():
        if isinstance(values, dict):
            out += ["", f"[{table}]"] + [f"{k} = {_toml_value(v)}" for k, v in values.items()]
    return "\n".join(out) + "\n"
