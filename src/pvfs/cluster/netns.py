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

Machines. With ``machines=DIR`` every host is also a machine of its own, as far as pvfs can
tell: its ``/srv``, ``/mnt`` and ``/run/pvfs`` are ``DIR/<host>/srv``, ``DIR/<host>/mnt`` and
``DIR/<host>/run-pvfs``, bound over those paths in a mount namespace that a holder process
keeps for the host's lifetime and that every ``run``/``popen`` on the host enters (``nsenter
-n -m``, after ``ip netns exec`` made it), with ``HOME`` set to ``DIR/<host>/home``; its
``/etc/hosts`` names every host of the network (so configs and ``ssh`` may use the host
names). Only there: the bindings hide nothing outside the machine. So one config with the same paths on every host
(``/srv/pvfs/...``, as ``pvfs-admin init --hosts`` writes it) means different data on each
host, a FUSE mount made on a host is seen by later commands on that host only, and ``ssh``
into an ``sshd`` started on the host (``start_sshd``) lands on it. ``cut(a, b)`` cuts the path
between two hosts (both directions) and ``mend`` joins it again; ``close`` unmounts every
FUSE mount of every machine (``fusermount3 -u``, lazily if busy) before it kills anything.
"""

from __future__ import annotations

import ipaddress
import os
import re
import shutil
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
# A machine's own directories (Network(machines=...)), bound over these paths on its host.
PRIVATE_DIRS = ("/srv", "/mnt", "/run/pvfs")
# A unicast hardware address no port of the bridge has: frames sent to it are lost.
NOWHERE_MAC = "02:00:5e:00:de:ad"


def _private_name(inside: str) -> str:
    return inside.strip("/").replace("/", "-")


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
        machines: a directory: every host gets private ``/srv``, ``/mnt``, ``/run/pvfs`` and
            home under ``machines/<host>`` (see the module's docstring).
    """

    def __init__(self, hosts: Sequence[str], rate: str | None = "100mbit",
                 delay: str | None = None, subnet: str = "10.213.0.0/24",
                 machines: str | os.PathLike | None = None) -> None:
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
        self.machines = Path(machines).resolve() if machines is not None else None
        self.holders: dict[str, subprocess.Popen] = {}

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
        if self.machines is not None:
            for h in self.hosts:
                self._hold(h)

    def _hold(self, host: str) -> None:
        """Start the process that keeps ``host``'s mount namespace, its private directories
        bound in it."""
        root = self.machine_dir(host)
        script = ["set -e", "mkdir -p /run/pvfs"]
        for inside in PRIVATE_DIRS:
            outside = self.path(host, inside)
            outside.mkdir(parents=True, exist_ok=True)
            script.append(f"mount --bind '{outside}' '{inside}'")
        names = root / "hosts"
        names.write_text("127.0.0.1 localhost\n::1 localhost\n"
                         + "".join(f"{a} {h}\n" for h, a in self.addrs.items()))
        script += [f"mount --bind '{names}' /etc/hosts", "echo ready", "exec sleep infinity"]
        p = subprocess.Popen(["ip", "netns", "exec", self.ns(host), "sh", "-c",
                              "\n".join(script)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                             cwd=root)
        self.holders[host] = p
        if p.stdout.readline().strip() != "ready":
            p.wait(5)
            raise RuntimeError(f"machine {host}: {p.stderr.read().strip()}")

    def close(self) -> None:
        """Unmount the machines' FUSE mounts, stop every process started here, then remove
        every namespace made here (killing what still runs in it)."""
        for h in list(self.holders):
            try:
                self.unmount_fuse(h)
            except (OSError, subprocess.SubprocessError):
                pass
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
        for p in self.holders.values():  # killed with their namespace; reap them
            if p.poll() is None:
                p.kill()
            p.wait()
        self.holders.clear()

    # ------------------------------------------------------------------ machines
    def machine_dir(self, host: str) -> Path:
        if self.machines is None:
            raise ValueError("this Network has no machines (Network(..., machines=DIR))")
        return self.machines / host

    def home(self, host: str) -> Path:
        """``HOME`` of the commands run on ``host`` (made on first use)."""
        home = self.machine_dir(host) / "home"
        home.mkdir(parents=True, exist_ok=True)
        return home

    def path(self, host: str, inside: str) -> Path:
        """Where the file a process on ``host`` sees at ``inside`` is for the caller."""
        for priv in PRIVATE_DIRS:
            if inside == priv or inside.startswith(priv + "/"):
                return self.machine_dir(host) / _private_name(priv) / inside[len(priv):].lstrip("/")
        return Path(inside)

    def fuse_mounts(self, host: str) -> list[str]:
        """Mount points of the FUSE mounts made on ``host``: in its private directories or
        its home (its mount namespace also shows, unreachable, the mounts of the machine
        around it, which are none of its business)."""
        holder = self.holders[host]
        mine = [*PRIVATE_DIRS, str(self.machine_dir(host))]
        try:
            with open(f"/proc/{holder.pid}/mounts") as fh:
                lines = fh.read().splitlines()
        except OSError:
            return []
        out = []
        for line in lines:
            f = line.split()
            if len(f) > 2 and f[2].startswith("fuse") and f[2] != "fusectl":
                mp = f[1].replace("\\040", " ")
                if any(mp == d or mp.startswith(d + "/") for d in mine):
                    out.append(mp)
        return out

    def unmount_fuse(self, host: str) -> list[str]:
        """``fusermount3 -u`` every FUSE mount on ``host``, ``-u -z`` if that fails; the
        mount points."""
        done = []
        for mp in reversed(self.fuse_mounts(host)):
            argv = self.argv(host, ["fusermount3", "-u", mp])
            if subprocess.run(argv, capture_output=True, check=False, timeout=60).returncode:
                lazy = self.argv(host, ["fusermount3", "-u", "-z", mp])
                subprocess.run(lazy, capture_output=True, check=False, timeout=60)
            done.append(mp)
        return done

    def _neighbours(self, host: str, other: str, how: str) -> None:
        if how == "cut":
            _ip("-n", self.ns(host), "neigh", "replace", self.addrs[other], "lladdr",
                NOWHERE_MAC, "dev", "eth0", "nud", "permanent")
        else:
            _ip("-n", self.ns(host), "neigh", "del", self.addrs[other], "dev", "eth0",
                check=False)

    def cut(self, a: str, b: str) -> None:
        """Cut the path between hosts ``a`` and ``b`` (both directions), as a broken cable
        between them would: their frames to each other go to a hardware address no port has,
        so packets vanish without an error (TCP times out); every other path still works."""
        self._neighbours(a, b, "cut")
        self._neighbours(b, a, "cut")

    def mend(self, a: str, b: str) -> None:
        """Undo ``cut(a, b)``: the hosts find each other again (ARP) with the next packet."""
        self._neighbours(a, b, "mend")
        self._neighbours(b, a, "mend")

    def start_sshd(self, host: str, directory: str | os.PathLike, host_key: str,
                   authorized_keys: str, timeout: float = 10.0) -> subprocess.Popen:
        """An OpenSSH server on ``host``'s address, port 22, for root by key only: its config
        written to ``directory/sshd_config.<host>``, run in the foreground (``sshd -D -e``) so
        ``close`` stops it by its pid. Returns once the port accepts connections."""
        sshd = shutil.which("sshd") or "/usr/sbin/sshd"
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # its privilege-separation dir
        conf = Path(directory) / f"sshd_config.{host}"
        conf.write_text("\n".join([
            f"ListenAddress {self.addrs[host]}", "Port 22", f"HostKey {host_key}",
            f"AuthorizedKeysFile {authorized_keys}", "PermitRootLogin prohibit-password",
            "PubkeyAuthentication yes", "PasswordAuthentication no",
            "KbdInteractiveAuthentication no", "UsePAM no", "StrictModes no", "UseDNS no",
            "PrintMotd no", "PrintLastLog no", "Subsystem sftp internal-sftp",
            f"PidFile {Path(directory) / f'sshd.{host}.pid'}", "LogLevel ERROR", ""]))
        log = open(Path(directory) / f"sshd.{host}.log", "ab")  # noqa: SIM115 - child keeps it
        p = self.popen(host, [sshd, "-D", "-e", "-f", str(conf)], stdout=log, stderr=log,
                       stdin=subprocess.DEVNULL)
        log.close()
        probe = (f"import socket; socket.create_connection(({self.addrs[host]!r}, 22), 1)"
                 ".close()")
        deadline = time.monotonic() + timeout
        while self.run(host, [sys.executable, "-c", probe]).returncode != 0:
            if p.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"sshd on {host} did not start; see {log.name}")
            time.sleep(0.1)
        return p

    # ------------------------------------------------------------------ processes
    def argv(self, host: str, argv: Sequence[str], cwd: str | None = None) -> list[str]:
        """``argv`` run inside ``host``: its network namespace, and on a machine its mount
        namespace too (working directory ``cwd`` as the machine sees it, default ``/``)."""
        holder = self.holders.get(host)
        if holder is not None:
            return ["nsenter", "-t", str(holder.pid), "-n", "-m", f"--wd={cwd or '/'}", "--",
                    *argv]
        return ["ip", "netns", "exec", self.ns(host), *argv]

    def _kw(self, host: str, kw: dict) -> tuple[str | None, dict]:
        if host not in self.holders:
            return None, kw
        cwd = kw.pop("cwd", None)
        env = dict(kw.pop("env", None) or os.environ)
        env["HOME"] = str(self.home(host))  # the machine's own home
        return (str(cwd) if cwd is not None else None), {**kw, "env": env}

    def popen(self, host: str, argv: Sequence[str], **kw) -> subprocess.Popen:
        """Start ``argv`` inside ``host``; stopped by ``close()`` if still running."""
        cwd, kw = self._kw(host, kw)
        p = subprocess.Popen(self.argv(host, argv, cwd), **kw)
        self.procs.append(p)
        return p

    def run(self, host: str, argv: Sequence[str], **kw) -> subprocess.CompletedProcess:
        kw.setdefault("capture_output", True)
        kw.setdefault("text", True)
        kw.setdefault("check", False)
        cwd, kw = self._kw(host, kw)
        return subprocess.run(self.argv(host, argv, cwd), **kw)  # noqa: PLW1510 - check in kw

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
