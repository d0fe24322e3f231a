"""A multi-host harness on one machine: hosts as network namespaces on a shaped bridge.

The thesis' results depend on a network (100 Mbit/s switched Ethernet, §4.1) that loopback
does not resemble. ``Network`` makes one namespace per host, each with an ``eth0`` veth link
to a bridge that lives in a namespace of its own (the switch), both directions of every link
shaped by ``tc`` (token bucket ``tbf``: e.g. 100 Mbit/s full duplex; optional netem delay). Processes
run inside a host with ``popen``/``run``; the I/O daemons and clients of a study or a fault
test are then separate hosts with their own addresses and links.

Nothing is left behind: namespaces are named ``pvfsns<pid>-<host>`` and the context manager
removes them (killing what still runs inside) on exit; a harness that crashed leaves names
whose pid is gone, and the next ``Network`` (or ``cleanup_stale()``) removes those first.
Root is needed (CAP_NET_ADMIN). The switch namespace is ``pvfsns<pid>-sw``; nothing is
created in the caller's namespace, so the machine's own networking is never touched.

Example::

    with Network(["iod0", "iod1", "c0"], rate="100mbit") as net:
        cfg = net.make_config(tmp, iods=["iod0", "iod1"])     # manager on iod0
        net.start_daemons(cfg)
        net.run("c0", [sys.executable, "-c", "import pvfs; ..."])
"""

from __future__ import annotations

import ipaddress
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Self

from pvfs.procs import pid_alive

PREFIX = "pvfsns"
_NAME = re.compile(rf"^{PREFIX}(\d+)-([\w.-]+)$")


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def namespaces() -> list[str]:
    """Every namespace name this harness could have made (any pid)."""
    out = _ip("netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines()
            if line.split() and _NAME.match(line.split()[0])]


def remove_namespace(name: str) -> None:
    """Kill what runs inside ``name`` and delete it (its veth ends go with it)."""
    pids = _ip("netns", "pids", name, check=False).stdout.split()
    for p in pids:
        try:
            os.kill(int(p), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass
    _ip("netns", "del", name, check=False)


def cleanup_stale() -> list[str]:
    """Remove namespaces of harnesses whose process is gone; returns their names."""
    gone = []
    for name in namespaces():
        pid = int(_NAME.match(name).group(1))
        if pid != os.getpid() and not pid_alive(pid):
            remove_namespace(name)
            gone.append(name)
    return gone


class Network:
    """Hosts (network namespaces) on one shaped bridge; a context manager.

    Args:
        hosts: host names (letters, digits, ``.-_``); each gets an address in ``subnet``.
        rate: per-direction link rate for ``tc`` (``"100mbit"``), or None for unshaped.
        delay: one-way netem delay per link direction (``"0.1ms"``), or None.
        subnet: the hosts' addresses, in host order from ``.1`` on.
    """

    def __init__(self, hosts: Sequence[str], rate: str | None = "100mbit",
                 delay: str | None = None, subnet: str = "10.213.0.0/24") -> None:
        if len(set(hosts)) != len(hosts) or not hosts:
            raise ValueError("host names must be distinct and at least one")
        net = ipaddress.ip_network(subnet)
        if len(hosts) + 2 > net.num_addresses:
            raise ValueError(f"{subnet} is too small for {len(hosts)} hosts")
        for h in hosts:
            if not re.fullmatch(r"[\w.-]{1,40}", h):
                raise ValueError(f"bad host name {h!r}")
        self.hosts = list(hosts)
        self.rate, self.delay = rate, delay
        self.prefixlen = net.prefixlen
        self.addrs = {h: str(net.network_address + 1 + i) for i, h in enumerate(hosts)}
        self.tag = f"{PREFIX}{os.getpid()}"
        self.switch = f"{self.tag}-sw"
        self.procs: list[subprocess.Popen] = []
        self._made: list[str] = []

    # ------------------------------------------------------------------ lifecycle
    def ns(self, host: str) -> str:
        return f"{self.tag}-{host}"

    def addr(self, host: str) -> str:
        return self.addrs[host]

    def __enter__(self) -> Self:
        cleanup_stale()
        try:
            self._up()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _add_ns(self, name: str) -> None:
        if name in namespaces():  # our own pid reused a name: leftover of this process
            remove_namespace(name)
        _ip("netns", "add", name)
        self._made.append(name)
        _ip("-n", name, "link", "set", "lo", "up")

    def _shape(self, ns: str, dev: str) -> None:
        # A token bucket (tbf) shapes the rate: it is in every kernel (netem is a module many
        # VMs lack); a delay needs netem and is added as tbf's parent only when asked for.
        tc = ["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev]
        parent = ["root"]
        if self.delay:
            subprocess.run([*tc, "root", "handle", "1:", "netem", "delay", self.delay],
                           check=True, capture_output=True)
            parent = ["parent", "1:1"]
        if self.rate:
            # burst: a few full frames; latency bounds the queue (packets beyond are dropped,
            # which TCP answers by pacing itself to the rate, as on a switch port).
            subprocess.run([*tc, *parent, "tbf", "rate", self.rate, "burst", "32kb",
                            "latency", "50ms"], check=True, capture_output=True)

    def _up(self) -> None:
        self._add_ns(self.switch)
        _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.switch, "link", "set", "br0", "up")
        for i, h in enumerate(self.hosts):
            ns, port = self.ns(h), f"p{i}"
            self._add_ns(ns)
            _ip("-n", self.switch, "link", "add", port, "type", "veth", "peer", "name", "eth0",
                "netns", ns)
            _ip("-n", self.switch, "link", "set", port, "master", "br0", "up")
            _ip("-n", ns, "addr", "add", f"{self.addrs[h]}/{self.prefixlen}", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            if self.rate:
                # One frame per packet, as on a wire. With segmentation offload a host hands
                # the veth 64 KiB super-packets; tbf splits those larger than its burst and,
                # when its queue is full, drops some of the pieces yet reports the whole
                # packet sent -- real losses that TCP repairs only after a timeout (200 ms,
                # seen as 10 % of the daemons' packets dropped and random stalls of small
                # runs). A frame that does not fit is refused whole, which TCP takes as
                # local congestion: it backs off and sends the frame again, nothing is lost.
                for where, dev in ((ns, "eth0"), (self.switch, port)):
                    _ip("-n", where, "link", "set", "dev", dev, "gso_max_size", "1500",
                        "gso_max_segs", "1")
            # Both directions of the full-duplex link: host -> switch and switch -> host.
            self._shape(ns, "eth0")
            self._shape(self.switch, port)

    def close(self) -> None:
        """Stop every process started here, then remove every namespace made here."""
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        deadline = time.monotonic() + 5
        for p in self.procs:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.procs.clear()
        for name in reversed(self._made):
            remove_namespace(name)
        self._made.clear()

    # ------------------------------------------------------------------ processes
    def argv(self, host: str, argv: Sequence[str]) -> list[str]:
        return ["ip", "netns", "exec", self.ns(host), *argv]

    def popen(self, host: str, argv: Sequence[str], **kw) -> subprocess.Popen:
        """Start ``argv`` inside ``host``; stopped by ``close()`` if still running."""
        p = subprocess.Popen(self.argv(host, argv), **kw)
        self.procs.append(p)
        return p

    def run(self, host: str, argv: Sequence[str], **kw) -> subprocess.CompletedProcess:
        kw.setdefault("capture_output", True)
        kw.setdefault("text", True)
        kw.setdefault("check", False)
        return subprocess.run(self.argv(host, argv), **kw)  # noqa: PLW1510 - check in kw

    # ------------------------------------------------------------------ pvfs on top
    def make_config(self, directory: str | os.PathLike, iods: Sequence[str],
                    manager: str | None = None, **overrides):
        """A config with the manager on ``manager`` (default: the first I/O daemon's host)
        and one I/O daemon per host in ``iods``, written to ``directory/pvfs.toml``."""
        from pvfs.cluster.launch import make_config, write_config
        from pvfs.config import Endpoint

        root = Path(directory).resolve()
        cfg = make_config(str(root), iods=len(iods), **overrides)
        mhost = manager or iods[0]
        iod_eps = tuple(Endpoint(self.addrs[h], 7401, str(root / f"iod{i}"))
                        for i, h in enumerate(iods))
        from dataclasses import replace

        cfg = replace(cfg, manager=Endpoint(self.addrs[mhost], 7400, str(root / "mgr")),
                      iods=iod_eps)
        if "auth" in cfg.__dataclass_fields__ and "auth" not in overrides:
            # The harness's bridge is private to this machine: no shared key needed.
            cfg = replace(cfg, auth=False)
        return write_config(cfg, str(root / "pvfs.toml"))

    def start_daemons(self, cfg, timeout: float = 20.0) -> None:
        """Start the manager and every I/O daemon of ``cfg`` in the host owning its address,
        and wait until each answers."""
        by_addr = {a: h for h, a in self.addrs.items()}
        run = Path(cfg.run_dir)
        run.mkdir(parents=True, exist_ok=True)
        jobs = [("mgr", cfg.manager, ["-m", "pvfs.daemons.mgr"])]
        jobs += [(f"iod{i}", e, ["-m", "pvfs.daemons.iod", "--index", str(i)])
                 for i, e in enumerate(cfg.iods)]
        for name, ep, args in jobs:
            log = open(run / f"{name}.log", "ab")  # noqa: SIM115 - the child keeps it
            self.popen(by_addr[ep.host], [sys.executable, *args, "--config", cfg.path],
                       stdout=log, stderr=log)
            log.close()
        deadline = time.monotonic() + timeout
        for name, ep, _ in jobs:
            probe = (f"import socket; socket.create_connection(({ep.host!r}, {ep.port}), 1)"
                     ".close()")
            while True:
                if self.run(by_addr[ep.host], [sys.executable, "-c", probe]).returncode == 0:
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{name} did not come up at {ep.address}; see {run}")
                time.sleep(0.2)
