"""Faults (SPEC §10): daemons killed during writes, a full disk, cut and slow links.

What must hold in every case: what ``fsync`` acknowledged is there afterwards, byte for byte;
a failure reaches the caller as an error within a bounded time (the request timeout, with
slack for the few requests an operation makes) and never as a hang; the rest of the file
system keeps serving; ``pvfs-admin fsck`` is clean once the fault is gone. The bounds below
are generous multiples of the configured timeouts -- they catch hangs, not slowness -- and
are asserted only on calls that fail, as docs/operations.md ("What faults do") and
docs/mount.md (``timeout=S``) promise: an error within the timeouts, never a hang. A call
that succeeds has no time bound (a slow link: "correct data, later").
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import start_cluster
from test_mount_support import Mount, needs_fuse

import pvfs
from pvfs.cluster.launch import down, make_config, up, write_config

CONNECT, REQUEST = 1.0, 2.0
# An operation makes a few requests (manager, then the daemons); each may take CONNECT+REQUEST.
BOUND = 4 * (CONNECT + REQUEST) + 10.0


def _admin(cfg: str, *argv: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PVFS_CONFIG"}
    return subprocess.run([sys.executable, "-m", "pvfs.cli.main", "--config", cfg, *argv],
                          capture_output=True, text=True, env=env, timeout=120, check=False)


def _fsck_clean(cfg: str) -> None:
    r = _admin(cfg, "--json", "fsck")
    assert r.returncode == 0, r.stdout + r.stderr


class Writer:
    """Writes and fsyncs files through the native API, remembering what fsync acknowledged
    and how long every failed call took."""

    def __init__(self, config: str, prefix: str, size: int = 256 << 10) -> None:
        self.config, self.prefix, self.size = config, prefix, size
        self.synced: dict[str, str] = {}
        self.failures: list[tuple[str, float]] = []
        self.n = 0

    def write_one(self, size: int | None = None) -> bool:
        self.n += 1
        path = f"{self.prefix}/f{self.n}"
        data = os.urandom(size or self.size)
        t0 = time.monotonic()
        try:
            with pvfs.connect(self.config) as fs, fs.open(path, "wb") as f:
                f.write(data)
                f.fsync()
        except OSError as exc:
            self.failures.append((errno.errorcode.get(exc.errno or 0, str(exc)),
                                  time.monotonic() - t0))
            return False
        self.synced[path] = hashlib.sha256(data).hexdigest()
        return True

    def verify(self) -> None:
        with pvfs.connect(self.config) as fs:
            for path, digest in self.synced.items():
                with fs.open(path, "rb") as f:
                    assert hashlib.sha256(f.read()).hexdigest() == digest, path


@pytest.mark.slow
@pytest.mark.parametrize("victim", ["mgr", "iod0", "iod1"])
def test_kill_9_during_writes_then_up_keeps_everything_fsynced(tmp_path, victim):
    cluster = start_cluster(tmp_path, iods=2, connect_timeout=CONNECT, request_timeout=REQUEST)
    try:
        with cluster.connect() as fs:
            fs.mkdir("/w")
        w = Writer(cluster.config_path, "/w")
        for _ in range(4):
            assert w.write_one()
        # Kill while a large write is in flight (it may fail or, if quick, succeed).
        killer = threading.Timer(0.05, cluster.kill, (victim,))
        killer.start()
        w.write_one(size=48 << 20)
        killer.join()
        assert cluster.pid(victim) is None
        # While the daemon is down every call ends in an error, quickly; nothing hangs.
        for _ in range(2):
            assert not w.write_one()
        assert all(took < BOUND for _, took in w.failures), w.failures
        up(cluster.config)  # `pvfs-admin up` again: only the dead daemon is started
        assert cluster.pid(victim) is not None
        ok = [w.write_one() for _ in range(4)]
        assert all(ok[1:]), (ok, w.failures)  # the first may meet a connection that died
        w.verify()
        _fsck_clean(cluster.config_path)
    finally:
        down(cluster.config)


MOUNT_WRITER = r"""
import os, sys, time, json
path, size = sys.argv[1], int(sys.argv[2])
t0 = time.monotonic()
try:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        data = os.urandom(size)
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    import hashlib
    print(json.dumps({"ok": True, "sha": hashlib.sha256(data).hexdigest(),
                      "took": time.monotonic() - t0}))
except OSError as exc:
    print(json.dumps({"ok": False, "errno": exc.errno, "took": time.monotonic() - t0}))
"""


def _mount_write(path: Path, size: int = 512 << 10) -> dict:
    r = subprocess.run([sys.executable, "-c", MOUNT_WRITER, str(path), str(size)],
                       capture_output=True, text=True, timeout=BOUND * 3, check=False)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@needs_fuse
@pytest.mark.slow
@pytest.mark.parametrize("victim", ["iod1", "mgr"])
def test_mount_answers_within_its_timeout_while_a_daemon_is_dead(tmp_path, victim):
    cluster = start_cluster(tmp_path, iods=2, connect_timeout=CONNECT, request_timeout=REQUEST)
    try:
        with Mount(cluster.config_path, tmp_path / "mnt", f"timeout={REQUEST:g}") as m:
            synced = {}
            for i in range(3):
                r = _mount_write(m.path / f"before{i}")
                assert r["ok"], r
                synced[f"before{i}"] = r["sha"]
            cluster.kill(victim)
            r = _mount_write(m.path / "during")
            assert not r["ok"] and r["errno"] in (errno.EIO, errno.ETIMEDOUT), r
            assert r["took"] < BOUND, r
            if victim == "mgr":  # names are the manager's: an error, quickly
                t0 = time.monotonic()
                with pytest.raises(OSError) as info:
                    os.listdir(m.path)
                assert info.value.errno in (errno.EIO, errno.ETIMEDOUT)
                assert time.monotonic() - t0 < BOUND
            else:  # the manager still answers: the names list
                assert "before0" in os.listdir(m.path)
            up(cluster.config)
            r = _mount_write(m.path / "after")
            if not r["ok"]:  # a pooled connection to the old daemon may fail once
                r = _mount_write(m.path / "after")
            assert r["ok"], r
            synced["after"] = r["sha"]
            for name, digest in synced.items():
                assert hashlib.sha256((m.path / name).read_bytes()).hexdigest() == digest, name
        _fsck_clean(cluster.config_path)
    finally:
        down(cluster.config)


def _space_back(config_path: str, limit: float = 30.0) -> None:
    """Wait until the manager has removed every deleted file's data: its handles closed (a
    mount tells it of closes in batches) and its reaper's queue empty (removals are gathered
    and made in the background, reaper.py) -- "shortly after the unlink"."""
    deadline = time.monotonic() + limit
    with pvfs.connect(config_path) as fs:
        while True:
            st = fs.meta("status")
            if not st["open_files"] and not st["removals_pending"]:
                return
            assert time.monotonic() < deadline, f"space not back: {st}"
            time.sleep(0.02)


@pytest.fixture
def small_disk():
    """A 4 MiB tmpfs to hold one I/O daemon's data directory."""
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a tmpfs")
    path = Path(tempfile.mkdtemp(prefix="pvfs-enospc-"))
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)
        shutil.rmtree(path, ignore_errors=True)


@pytest.mark.slow
def test_full_disk_is_enospc_at_the_writer_and_nothing_else_breaks(tmp_path, small_disk):
    cfg = make_config(str(tmp_path), iods=2, connect_timeout=CONNECT, request_timeout=REQUEST)
    cfg = replace(cfg, iods=(replace(cfg.iods[0], data_dir=str(small_disk / "iod0")),
                             cfg.iods[1]))
    cfg = write_config(cfg, str(tmp_path / "pvfs.toml"))
    try:
        up(cfg)
        keep = os.urandom(1 << 20)
        on_iod0 = pvfs.Stripe(0, 1, 65536)
        with pvfs.connect(cfg.path) as fs:
            with fs.open("/keep", "wb") as f:  # both daemons
                f.write(keep)
                f.fsync()
            with pytest.raises(OSError) as info, fs.open("/big", "wb", stripe=on_iod0) as f:
                for _ in range(8):
                    f.write(b"\xab" * (1 << 20))
                f.fsync()
            assert info.value.errno == errno.ENOSPC, info.value
            with fs.open("/keep", "rb") as f:
                assert f.read() == keep
            fs.unlink("/big")  # space comes back
            _space_back(cfg.path)
            with fs.open("/small", "wb", stripe=on_iod0) as f:
                f.write(b"s" * (1 << 20))
                f.fsync()
            assert fs.stat("/small").st_size == 1 << 20
        _fsck_clean(cfg.path)
    finally:
        down(cfg)


@needs_fuse
@pytest.mark.slow
def test_full_disk_is_enospc_through_the_mount(tmp_path, small_disk):
    cfg = make_config(str(tmp_path), iods=1, connect_timeout=CONNECT, request_timeout=REQUEST)
    cfg = replace(cfg, iods=(replace(cfg.iods[0], data_dir=str(small_disk / "iod0")),))
    cfg = write_config(cfg, str(tmp_path / "pvfs.toml"))
    try:
        up(cfg)
        with Mount(cfg.path, tmp_path / "mnt") as m:
            r = _mount_write(m.path / "big", 8 << 20)
            assert not r["ok"] and r["errno"] == errno.ENOSPC, r
            os.unlink(m.path / "big")
            _space_back(cfg.path)
            r = _mount_write(m.path / "fits", 1 << 20)
            assert r["ok"], r
            assert hashlib.sha256((m.path / "fits").read_bytes()).hexdigest() == r["sha"]
        _fsck_clean(cfg.path)
    finally:
        down(cfg)


# ---------------------------------------------------------------------------- links (netns)

CLIENT = r"""
import errno, hashlib, json, os, sys, time
import pvfs
fs = pvfs.connect(sys.argv[1])
for line in sys.stdin:
    cmd, path, *rest = line.split()
    t0 = time.monotonic()
    try:
        if cmd == "write":
            pcount = int(rest[1])
            data = os.urandom(int(rest[0]))
            with fs.open(path, "wb", stripe=pvfs.Stripe(0, pcount, 65536)) as f:
                f.write(data)
                f.fsync()
            out = {"ok": True, "sha": hashlib.sha256(data).hexdigest()}
        else:
            with fs.open(path, "rb") as f:
                out = {"ok": True, "sha": hashlib.sha256(f.read()).hexdigest()}
    except OSError as exc:
        out = {"ok": False, "errno": errno.errorcode.get(exc.errno or 0, "?"), "msg": str(exc)}
    out["took"] = time.monotonic() - t0
    print(json.dumps(out), flush=True)
"""


def _netns_ready() -> bool:
    return os.geteuid() == 0 and shutil.which("ip") is not None and shutil.which("tc") is not None


@pytest.mark.slow
@pytest.mark.skipif(not _netns_ready(), reason="needs root, ip(8) and tc(8)")
def test_cut_and_slow_links_give_errors_in_bounded_time_and_recover(tmp_path):
    """Hosts as namespaces (pvfs.cluster.netns): s0 runs the manager and iod0, s1 runs iod1, c0
    is the client; authentication on, as on any non-loopback network."""
    from pvfs.cluster import netns
    from pvfs.protocol.auth import generate_key_file

    generate_key_file(str(tmp_path / "pvfs.key"))
    with netns.Network(["s0", "s1", "c0"], rate="100mbit") as net:
        cfg = net.make_config(tmp_path, iods=["s0", "s1"], connect_timeout=CONNECT,
                              request_timeout=REQUEST, auth=True,
                              key_file=str(tmp_path / "pvfs.key"))
        assert cfg.auth_enabled
        net.start_daemons(cfg)
        client = net.popen("c0", [sys.executable, "-c", CLIENT, cfg.path], text=True,
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE)

        def ask(line: str) -> dict:
            client.stdin.write(line + "\n")
            client.stdin.flush()
            reply = json.loads(client.stdout.readline())
            assert reply["ok"] or reply["took"] < BOUND, (line, reply)  # an error in time
            return reply

        both = ask("write /both 2097152 2")
        only0 = ask("write /only0 1048576 1")
        assert both["ok"] and only0["ok"], (both, only0)
        s1_port = f"p{net.hosts.index('s1')}"

        def shape(rate: str, burst: str) -> None:
            """Both directions of s1's link: its eth0 and its port on the switch."""
            for ns, dev in ((net.ns("s1"), "eth0"), (net.switch, s1_port)):
                subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "change", "dev", dev,
                                "root", "tbf", "rate", rate, "burst", burst, "latency", "50ms"],
                               check=True, capture_output=True)

        # Cut s1's link: its data is unreachable (an error, quickly); s0 keeps serving.
        net_ip = ["ip", "-n", net.switch, "link", "set", s1_port]
        subprocess.run([*net_ip, "down"], check=True)
        cut = ask("read /both")
        assert not cut["ok"] and cut["errno"] in ("ETIMEDOUT", "EHOSTUNREACH", "ECONNRESET",
                                                    "EIO"), cut
        r0 = ask("read /only0")
        assert r0["ok"] and r0["sha"] == only0["sha"], r0
        subprocess.run([*net_ip, "up"], check=True)
        deadline = time.monotonic() + 30
        while not (back := ask("read /both"))["ok"] and time.monotonic() < deadline:
            time.sleep(0.5)
        assert back["ok"] and back["sha"] == both["sha"], back

        # Slow the link to s1 (both directions at its switch port): still correct.
        shape("8mbit", "32kb")
        slow = ask("read /both")
        assert slow["ok"] and slow["sha"] == both["sha"], slow
        # So slow that a request cannot finish in the request timeout: ETIMEDOUT, no hang.
        shape("64kbit", "4kb")
        crawl = ask("read /both")
        assert not crawl["ok"] and crawl["errno"] in ("ETIMEDOUT", "EIO"), crawl
        shape("100mbit", "32kb")
        deadline = time.monotonic() + 30
        while not (back := ask("read /both"))["ok"] and time.monotonic() < deadline:
            time.sleep(0.5)
        assert back["ok"] and back["sha"] == both["sha"], back
        again = ask("write /after 1048576 2")
        assert again["ok"] and ask("read /after")["sha"] == again["sha"]
        client.stdin.close()
        client.wait(30)
