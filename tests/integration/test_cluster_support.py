"""Helpers for the cluster tests (``test_cluster_*.py``): machines as network namespaces with
their own ``/srv``, ``/mnt``, ``/run/pvfs`` and ``/etc/hosts`` (``pvfs.cluster.netns``), an
OpenSSH server on each, and the README's "Running on a cluster" steps as the commands a user
types on each machine.

No tests here. Every machine, sshd, daemon and mount goes away in ``Machines.close`` (mounts
with ``fusermount3 -u``, ``-u -z`` if busy; daemons by their pids, first with ``pvfs-admin
down`` on their host, then whatever still runs in a namespace is killed by pid), also when a
test failed half way.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Self

import pytest

from pvfs.cluster import netns

CONFIG = "/srv/pvfs/pvfs.toml"
MNT = "/mnt/pvfs"
VENV_BIN = str(Path(sys.executable).parent)
TOOLS = ("ip", "tc", "nsenter", "fusermount3", "ssh", "scp", "ssh-keygen", "git", "make", "gcc",
         "setfattr")


def _missing() -> list[str]:
    miss = [t for t in TOOLS if shutil.which(t) is None]
    if shutil.which("sshd") is None and not os.path.exists("/usr/sbin/sshd"):
        miss.append("sshd (openssh-server)")
    if not os.path.exists("/dev/fuse"):
        miss.append("/dev/fuse")
    if not all(os.path.isdir(d) for d in ("/srv", "/mnt")):
        miss.append("/srv and /mnt")
    return miss


needs_machines = pytest.mark.skipif(
    os.geteuid() != 0 or bool(_missing()),
    reason=f"needs root and {', '.join(_missing()) or 'nothing more'} (make system installs them)")


class Machines:
    """Hosts that look like separate machines to pvfs, ssh between them.

    ``sh(host, script)`` runs a bash script on a host as a user in a shell there would: in
    ``$HOME`` (the machine's own), with ``pvfs-admin`` on ``PATH`` and ``ssh``/``scp`` that
    use this cluster's ssh config (``ssh_config``: root by key, known host keys) -- wrappers
    standing in for the user's own ``~/.ssh/config``, which ssh reads from the password
    database, not from ``$HOME``.
    """

    def __init__(self, root: Path, hosts: Sequence[str], servers: Sequence[str],
                 rate: str | None = "1gbit", sshd: bool = True) -> None:
        self.root = root
        self.hosts, self.servers = list(hosts), list(servers)
        self.net = netns.Network(self.hosts, rate=rate, machines=root / "machines")
        self.ssh_dir = root / "ssh"
        self.ssh_config = self.ssh_dir / "config"
        self.bin = root / "bin"
        self.sshd = sshd
        self.sshds: dict[str, subprocess.Popen] = {}
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("PVFS_")}
        self.env["PATH"] = f"{self.bin}:{VENV_BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}"
        self.env["GIT_CONFIG_GLOBAL"] = str(root / "gitconfig")

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> Self:
        self.net.__enter__()
        try:
            self._ssh()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _ssh(self) -> None:
        d = self.ssh_dir
        d.mkdir(parents=True)
        for key in ("host_key", "id_ed25519"):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", key, "-f",
                            str(d / key)], check=True, capture_output=True)
        shutil.copy(d / "id_ed25519.pub", d / "authorized_keys")
        host_pub = (d / "host_key.pub").read_text().split()[:2]
        (d / "known_hosts").write_text("".join(
            f"{h},{self.net.addr(h)} {' '.join(host_pub)}\n" for h in self.hosts))
        self.ssh_config.write_text(
            f"Host *\n  User root\n  IdentityFile {d / 'id_ed25519'}\n  IdentitiesOnly yes\n"
            f"  UserKnownHostsFile {d / 'known_hosts'}\n  StrictHostKeyChecking yes\n"
            "  BatchMode yes\n  ConnectTimeout 5\n  LogLevel ERROR\n")
        self.bin.mkdir()
        for tool in ("ssh", "scp"):
            w = self.bin / tool
            w.write_text(f'#!/bin/sh\nexec {shutil.which(tool)} -F {self.ssh_config} "$@"\n')
            w.chmod(0o755)
        (self.root / "gitconfig").write_text(
            "[user]\n  name = pvfs test\n  email = test@pvfs.invalid\n"
            "[init]\n  defaultBranch = main\n[safe]\n  directory = *\n")
        if self.sshd:
            for h in self.hosts:
                self.sshds[h] = self.net.start_sshd(h, d, str(d / "host_key"),
                                                    str(d / "authorized_keys"))

    def stop_sshd(self, host: str) -> None:
        """Stop ``host``'s sshd (by its pid): the host can no longer be reached over ssh."""
        p = self.sshds.pop(host)
        p.terminate()
        p.wait(10)

    def close(self) -> None:
        """Unmount every machine's mounts, `pvfs-admin down` on every server host, then the
        harness removes the namespaces (killing by pid what still runs in them)."""
        try:
            for h in self.hosts:
                if h in self.net.holders:
                    self.net.unmount_fuse(h)
            for h in reversed(self.servers):
                if h in self.net.holders and self.net.path(h, CONFIG).exists():
                    self.sh(h, f"pvfs-admin down --config {CONFIG} --timeout 5", check=False,
                            timeout=60)
        finally:
            self.net.close()

    # ------------------------------------------------------------------ commands
    def sh(self, host: str, script: str, check: bool = True, timeout: float = 120,
           env: dict | None = None, own_ssh: bool = True) -> subprocess.CompletedProcess:
        """``bash -e -c script`` on ``host``; with ``check`` a failure raises with its
        output. ``own_ssh=False``: no ssh wrappers on ``PATH`` (plain ``ssh`` would not know
        the cluster; the script must say how to reach it)."""
        e = {**self.env, **(env or {})}
        if not own_ssh:
            e["PATH"] = e["PATH"].replace(f"{self.bin}:", "", 1)
        r = self.net.run(host, ["bash", "-e", "-c", script], env=e,
                         cwd=str(self.net.home(host)), timeout=timeout)
        if check and r.returncode != 0:
            raise AssertionError(f"on {host}: {script!r} exited {r.returncode}\n"
                                 f"--- stdout\n{r.stdout}\n--- stderr\n{r.stderr}")
        return r

    def popen(self, host: str, script: str, **kw) -> subprocess.Popen:
        return self.net.popen(host, ["bash", "-e", "-c", script], env=self.env,
                              cwd=str(self.net.home(host)), text=True, **kw)

    def file(self, host: str, inside: str) -> Path:
        """A file of ``host`` (as it sees it at ``inside``) from here."""
        return self.net.path(host, inside)

    def pid(self, host: str, daemon: str) -> int | None:
        from pvfs.procs import read_pidfile

        return read_pidfile(self.file(host, f"/srv/pvfs/run/{daemon}.pid"))

    def running_in(self, host: str) -> list[str]:
        """Command lines of the pvfs processes on ``host`` (daemons and mounts)."""
        out = []
        for pid in subprocess.run(["ip", "netns", "pids", self.net.ns(host)],
                                  capture_output=True, text=True, check=False).stdout.split():
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if "pvfs" in cmd:
                out.append(cmd.strip())
        return out


# The README's "Running on a cluster", step by step: (where, commands). `test_cluster_readme`
# checks that the README's code blocks are exactly these lines, in this order; the
# tests run them on the hosts named (node1, node2: the servers; client1: a client).
INIT = ("node1", [
    r"printf 'node1\nnode2\n' > hosts.txt",
    "pvfs-admin init --hosts hosts.txt --dir /srv/pvfs",
    ("for h in node2 client1; do ssh $h mkdir -p /srv/pvfs; "
     "scp -p /srv/pvfs/pvfs.toml /srv/pvfs/pvfs.key $h:/srv/pvfs/; done"),
])
UP = (("node1", "node2"), [f"pvfs-admin up --config {CONFIG}"])
CLIENT = ("client1", [
    f"pvfs-admin status --config {CONFIG}",
    f"pvfs-admin df --config {CONFIG}",
    f"mkdir -p {MNT}",
    f"pvfs-admin mount {MNT} --config {CONFIG}",
])
UMOUNT = ("client1", [f"pvfs-admin umount {MNT}"])
DOWN = (("node2", "node1"), [f"pvfs-admin down --config {CONFIG}"])
# The same from one host: every host of the config over ssh.
UP_ALL = ("node1", [f"pvfs-admin up --all --config {CONFIG}"])
DOWN_ALL = ("node1", [f"pvfs-admin down --all --config {CONFIG}"])


def copy_to(clients: Sequence[str]) -> str:
    """INIT's copy line for these clients (the README's names client1)."""
    return INIT[1][2].replace("client1", " ".join(clients))


def set_timeouts(m: Machines, connect: float, request: float) -> None:
    """Shorter network timeouts in node1's config (before it is copied), as an admin would
    edit them: the fault tests' bounds are multiples of them."""
    p = m.file("node1", CONFIG)
    text = p.read_text()
    assert "connect = 5.0" in text and "request = 10.0" in text, text
    p.write_text(text.replace("connect = 5.0", f"connect = {connect!r}")
                 .replace("request = 10.0", f"request = {request!r}"))


def readme_cluster(m: Machines, clients: Sequence[str] = ("client1",),
                   timeouts: tuple[float, float] | None = None) -> dict[str, str]:
    """INIT and UP as the README says (the config and key copied to every client in
    ``clients``); the output of each step."""
    out = {}
    host, lines = INIT
    out["init"] = m.sh(host, "\n".join(lines[:2])).stdout
    if timeouts:
        set_timeouts(m, *timeouts)
    m.sh(host, copy_to(clients))
    for host in UP[0]:
        out[f"up {host}"] = m.sh(host, UP[1][0]).stdout
    return out


def wait_until(check, limit: float, step: float = 0.2, what: str = "condition"):
    deadline = time.monotonic() + limit
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached within {limit:g} s")
        time.sleep(step)
