"""Faults across hosts, each a row of docs/operations.md's "What faults do" checked on a cluster
built as the README says (``test_cluster_support``: machines as network namespaces,
``pvfs-admin init --hosts``, the config and key copied with scp, ``pvfs-admin up`` per host,
authentication on), with a real mount on the client hosts:

- the path between a client and one I/O daemon host cut (and mended);
- an I/O daemon host's daemons killed (``kill -9``) and started again while a mount writes;
- the manager's host restarted (down, its daemons killed, up again) under mounted clients;
- a host whose key differs from the cluster's.

What must hold, as in ``test_faults.py``: what ``fsync`` acknowledged is there afterwards,
byte for byte; a failure reaches the caller as an error within a bounded time, never a hang;
the rest keeps serving; ``pvfs-admin fsck`` is clean afterwards. The config's timeouts are
``connect = 1``, ``request = 2`` (edited before it is copied, as an admin would).
"""

from __future__ import annotations

import json
import re
import subprocess

import pytest
from test_cluster_support import (
    CONFIG,
    MNT,
    Machines,
    needs_machines,
    readme_cluster,
    wait_until,
)

pytestmark = [needs_machines, pytest.mark.slow]

CONNECT, REQUEST = 1.0, 2.0
# An operation makes a few requests (manager, then the daemons); each may take CONNECT+REQUEST.
BOUND = 4 * (CONNECT + REQUEST) + 10.0
TIMED_OUT = ("EIO", "ETIMEDOUT")

# A client program on a client host: one POSIX call sequence per line of stdin, one JSON line
# per answer (ok, errno name, seconds taken).
TOOL = r'''
import errno, hashlib, json, os, sys, time
for line in sys.stdin:
    cmd, *args = line.split()
    t0 = time.monotonic()
    try:
        if cmd == "write":                      # write PATH SIZE: create, write, fsync, close
            data = os.urandom(int(args[1]))
            fd = os.open(args[0], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.write(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            out = {"ok": True, "sha": hashlib.sha256(data).hexdigest()}
        elif cmd == "read":
            with open(args[0], "rb") as f:
                out = {"ok": True, "sha": hashlib.sha256(f.read()).hexdigest()}
        elif cmd == "ls":
            out = {"ok": True, "names": sorted(os.listdir(args[0]))}
        elif cmd == "stat":
            out = {"ok": True, "size": os.stat(args[0]).st_size}
        elif cmd == "drop":                     # the mount's caches (and the kernel's)
            os.setxattr(args[0], "user.pvfs.drop_cache", b"1")
            out = {"ok": True}
        else:
            raise OSError(errno.EINVAL, cmd)
    except OSError as exc:
        out = {"ok": False, "errno": errno.errorcode.get(exc.errno or 0, str(exc.errno)),
               "msg": str(exc)}
    out["took"] = round(time.monotonic() - t0, 3)
    print(json.dumps(out), flush=True)
'''


class Client:
    """The TOOL running on a client host (inside its mount namespace, so it sees the mount)."""

    def __init__(self, m: Machines, host: str) -> None:
        script = m.root / "tool.py"
        script.write_text(TOOL)
        self.host = host
        self.proc = m.popen(host, f"exec python3 {script}", stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE)
        self.synced: dict[str, str] = {}

    def ask(self, line: str) -> dict:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        reply = json.loads(self.proc.stdout.readline())
        print(f"{self.host}: {line} -> {reply}")  # shown with pytest -s, or on failure
        assert reply["took"] < BOUND, (self.host, line, reply)
        return reply

    def write(self, path: str, size: int = 256 << 10) -> dict:
        r = self.ask(f"write {path} {size}")
        if r["ok"]:
            self.synced[path] = r["sha"]
        return r

    def verify(self) -> None:
        """Everything fsync acknowledged reads back (caches dropped first)."""
        assert self.ask(f"drop {MNT}")["ok"]
        for path, sha in self.synced.items():
            r = self.ask(f"read {path}")
            assert r["ok"] and r["sha"] == sha, (path, r)

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(30)


def failed_in_time(r: dict) -> None:
    """A call that failed as a dead or cut-off daemon makes it fail (``Client.ask`` has
    checked the time already)."""
    assert not r["ok"] and r["errno"] in TIMED_OUT, r


def mount(m: Machines, host: str, opts: str = "") -> None:
    m.sh(host, f"mkdir -p {MNT}\npvfs-admin mount {MNT} --config {CONFIG} "
               f"-o log=/srv/pvfs/mount.log{',' + opts if opts else ''}")


def fsck_clean(m: Machines) -> None:
    r = m.sh("node1", f"pvfs-admin fsck --config {CONFIG}", check=False)
    assert r.returncode == 0 and "clean" in r.stdout, r.stdout + r.stderr


def test_a_clients_path_to_one_io_host_cut_then_mended(tmp_path):
    """client1 <-> node2 (iod1) cut, every other path up: what needs iod1 fails in time with
    EIO/ETIMEDOUT, the rest works; mended, the next call works; nothing fsync'd lost."""
    with Machines(tmp_path, ["node1", "node2", "client1"], servers=["node1", "node2"]) as m:
        readme_cluster(m, timeouts=(CONNECT, REQUEST))
        mount(m, "client1")
        m.sh("client1", f"mkdir {MNT}/both {MNT}/one\n"
                        f"setfattr -n user.pvfs.stripe -v base=0,pcount=1 {MNT}/one")
        c = Client(m, "client1")
        assert c.write(f"{MNT}/both/a", 1 << 20)["ok"] and c.write(f"{MNT}/one/a", 1 << 20)["ok"]
        assert c.ask(f"drop {MNT}")["ok"]
        m.net.cut("client1", "node2")
        failed_in_time(c.ask(f"read {MNT}/both/a"))
        r = c.ask(f"read {MNT}/one/a")
        assert r["ok"] and r["sha"] == c.synced[f"{MNT}/one/a"], r
        r = c.ask(f"ls {MNT}/both")  # names are the manager's, on node1
        assert r["ok"] and r["names"] == ["a"], r
        r = c.ask(f"stat {MNT}/both/a")  # the manager asks node2 for the size, not client1
        assert r["ok"] and r["size"] == 1 << 20, r
        assert c.write(f"{MNT}/one/b")["ok"]  # a new file on node1 only
        failed_in_time(c.write(f"{MNT}/both/b"))
        m.net.mend("client1", "node2")
        r = c.ask(f"read {MNT}/both/a")  # the next call works
        assert r["ok"] and r["sha"] == c.synced[f"{MNT}/both/a"], r
        assert c.write(f"{MNT}/both/c")["ok"]
        # the write that failed: its name stays (the manager made it), its bytes are what
        # reached the servers, and this client says the size the servers say
        out = m.sh("node1", f"pvfs-admin --json stat pvfs:/both/b --config {CONFIG}").stdout
        r = c.ask(f"stat {MNT}/both/b")
        assert r["ok"] and r["size"] == json.loads(out)["size"], (r, out)
        c.verify()
        c.close()
        fsck_clean(m)


def test_an_io_hosts_daemons_killed_and_started_again_while_a_mount_writes(tmp_path):
    """kill -9 of node2's daemon (iod1) while client1 writes file after file (fsync each):
    the writes needing it fail in time, `pvfs-admin up` on node2 starts only iod1, the
    writes work again without a remount, everything fsync'd is there."""
    with Machines(tmp_path, ["node1", "node2", "client1"], servers=["node1", "node2"]) as m:
        readme_cluster(m, timeouts=(CONNECT, REQUEST))
        mount(m, "client1")
        m.sh("client1", f"mkdir {MNT}/w")
        c = Client(m, "client1")
        for i in range(3):
            assert c.write(f"{MNT}/w/before{i}")["ok"]
        # killed while the next (large) write is in flight
        pid = m.pid("node2", "iod1")
        killer = subprocess.Popen(["sh", "-c", f"sleep 0.3; kill -9 {pid}"])
        c.write(f"{MNT}/w/inflight", 32 << 20)  # may fail or, if quick, succeed
        killer.wait()
        assert m.pid("node2", "iod1") is None
        for i in range(2):
            failed_in_time(c.write(f"{MNT}/w/during{i}"))
        r = m.sh("node2", f"pvfs-admin up --config {CONFIG}")
        assert re.search(r"^iod1\s.*started$", r.stdout, re.MULTILINE), r.stdout
        after = [c.write(f"{MNT}/w/after{i}") for i in range(4)]
        assert all(r["ok"] for r in after[1:]), after  # the first may meet a dead connection
        c.verify()
        c.close()
        fsck_clean(m)


def test_the_managers_host_restarted_under_mounted_clients(tmp_path):
    """node1 (manager and iod0) goes away -- its link down, its daemons killed -- and comes
    back: link up, `pvfs-admin up` (as its boot would). client1 (coherence=none) and client2
    (coherence=sync) stay mounted: while node1 is gone their calls fail in time; afterwards
    they carry on without a remount, see what was fsync'd before and each other's writes."""
    hosts = ["node1", "node2", "client1", "client2"]
    with Machines(tmp_path, hosts, servers=["node1", "node2"]) as m:
        readme_cluster(m, clients=["client1", "client2"], timeouts=(CONNECT, REQUEST))
        mount(m, "client1")
        mount(m, "client2", "coherence=sync")
        c1, c2 = Client(m, "client1"), Client(m, "client2")
        assert c1.write(f"{MNT}/from1")["ok"] and c2.write(f"{MNT}/from2")["ok"]
        port = f"p{m.net.hosts.index('node1')}"
        link = ["ip", "-n", m.net.switch, "link", "set", port]
        subprocess.run([*link, "down"], check=True)
        for d in ("mgr", "iod0"):
            subprocess.run(["kill", "-9", str(m.pid("node1", d))], check=True)
        wait_until(lambda: not m.running_in("node1"), 10, what="node1's daemons gone")
        for c in (c1, c2):
            failed_in_time(c.ask(f"ls {MNT}"))
        subprocess.run([*link, "up"], check=True)
        r = m.sh("node1", f"pvfs-admin up --config {CONFIG}")
        assert re.search(r"^mgr\s.*started$", r.stdout, re.MULTILINE), r.stdout
        # no remount: the first call may still meet a connection of before
        for c in (c1, c2):
            wait_until(lambda c=c: c.ask(f"ls {MNT}")["ok"], 3 * BOUND, step=0.5,
                       what=f"{c.host} answers again")
            assert c.ask(f"ls {MNT}")["names"] == ["from1", "from2"]
        assert c1.write(f"{MNT}/after1")["ok"] and c2.write(f"{MNT}/after2")["ok"]
        assert c2.ask(f"read {MNT}/after1")["sha"] == c1.synced[f"{MNT}/after1"]
        assert c1.ask(f"read {MNT}/after2")["sha"] == c2.synced[f"{MNT}/after2"]
        for c in (c1, c2):
            c.verify()
            c.close()
        fsck_clean(m)


def test_a_host_whose_key_differs_is_refused_with_a_clear_message(tmp_path):
    """A client whose key is not the cluster's: `status` names each daemon and the wrong
    key, `mount` fails saying so. An I/O daemon host with a key of its own: its `up` works
    (its daemons answer its key), but every client and the manager refuse it, by name."""
    hosts = ["node1", "node2", "client1", "client2"]
    with Machines(tmp_path, hosts, servers=["node1", "node2"]) as m:
        readme_cluster(m, clients=["client1", "client2"], timeouts=(CONNECT, REQUEST))
        m.sh("client2", f"pvfs-admin key generate --force --config {CONFIG}")
        r = m.sh("client2", f"pvfs-admin status --config {CONFIG}", check=False)
        assert r.returncode == 1
        for name, addr in (("mgr", "node1:7400"), ("iod0", "node1:7401"), ("iod1", "node2:7401")):
            assert re.search(rf"^{name}\s+{addr}\s+DOWN\b", r.stdout, re.MULTILINE), r.stdout
            assert f"{name}: authentication failed: wrong key" in r.stdout, r.stdout
        r = m.sh("client2", f"mkdir -p {MNT}\npvfs-admin mount {MNT} --config {CONFIG}",
                 check=False)
        assert r.returncode != 0, r.stdout + r.stderr
        assert "authentication failed: wrong key for manager (node1:7400)" in r.stderr, r.stderr
        assert m.net.fuse_mounts("client2") == []
        log = m.file("node1", "/srv/pvfs/run/mgr.log").read_text()
        assert re.search(r"refused \S+ \(mount\): closed during authentication", log), log[-2000:]
        # node2 with a key of its own, under a mount made before
        mount(m, "client1")
        c = Client(m, "client1")
        m.sh("client1", f"mkdir {MNT}/one\n"
                        f"setfattr -n user.pvfs.stripe -v base=0,pcount=1 {MNT}/one")
        assert c.write(f"{MNT}/both")["ok"] and c.write(f"{MNT}/one/a")["ok"]
        m.sh("node2", f"pvfs-admin down --config {CONFIG}\n"
                      f"pvfs-admin key generate --force --config {CONFIG}\n"
                      f"pvfs-admin up --config {CONFIG}")
        r = m.sh("client1", f"pvfs-admin status --config {CONFIG}", check=False)
        assert r.returncode == 1
        assert re.search(r"^iod1\s+node2:7401\s+DOWN\b", r.stdout, re.MULTILINE), r.stdout
        assert "iod1: authentication failed: wrong key for node2:7401" in r.stdout, r.stdout
        assert re.search(r"^mgr\s+node1:7400\s+up\b", r.stdout, re.MULTILINE), r.stdout
        log = m.file("node2", "/srv/pvfs/run/iod1.log").read_text()
        assert "wrong key for manager (node1:7400)" in log, log[-2000:]
        log = m.file("node1", "/srv/pvfs/run/mgr.log").read_text()
        assert re.search(r"refused \S+ \(iod1\): closed during authentication", log), log[-2000:]
        # through the mount: what needs iod1 is refused (EACCES), and the log says why
        assert c.ask(f"drop {MNT}")["ok"]
        for call in (f"read {MNT}/both", f"write {MNT}/both2 4096"):
            r = c.ask(call)
            assert not r["ok"] and r["errno"] == "EACCES", (call, r)
        # (a read: the file's size is the manager's, refetched after the write, so a stat
        # no longer needs every daemon; daemons/mgr/refetch.py)
        r = m.sh("client1", f"pvfs-admin cp pvfs:/both /tmp/both.copy --config {CONFIG}",
                 check=False)
        assert r.returncode == 1 and "wrong key for iod1 (node2:7401)" in r.stderr, r.stderr
        log = m.file("client1", "/srv/pvfs/mount.log").read_text()
        assert "authentication failed: wrong key for iod1 (node2:7401)" in log, log[-2000:]
        assert c.write(f"{MNT}/one/b")["ok"]  # on node1 only: works
        r = c.ask(f"read {MNT}/one/a")
        assert r["ok"] and r["sha"] == c.synced[f"{MNT}/one/a"], r
        del c.synced[f"{MNT}/both"]  # not readable while node2 has the wrong key
        c.verify()
        c.close()
