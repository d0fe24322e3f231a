"""The multi-host harness (pvfs.cluster.netns): hosts come up as namespaces on a shaped bridge,
a file round-trips between a client host and I/O daemon hosts, and nothing is left behind --
also after a harness that died."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from pvfs.cluster import netns

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ip") is None
                                or shutil.which("tc") is None,
                                reason="needs root, ip(8) and tc(8)")

CLIENT = """
import os, sys, pvfs
data = os.urandom(3 << 20)
with pvfs.connect(sys.argv[1]) as fs:
    with fs.open("/x", "wb", stripe=pvfs.Stripe(0, 2, 65536)) as f:
        f.write(data)
    with fs.open("/x", "rb") as f:
        assert f.read() == data
print("ok")
"""


def test_file_round_trips_across_hosts_and_all_is_removed(tmp_path):
    with netns.Network(["s0", "s1", "c0"], rate="100mbit") as net:
        names = set(netns.namespaces())
        assert {net.ns(h) for h in ("s0", "s1", "c0")} | {net.switch} <= names
        tc = net.run("c0", ["tc", "qdisc", "show", "dev", "eth0"]).stdout
        assert "tbf" in tc and "rate 100Mbit" in tc
        # one frame per packet on both ends of a shaped link (no offload super-packets,
        # which tbf would split and partly drop)
        assert "gso_max_segs 1 " in net.run("c0", ["ip", "-d", "link", "show", "eth0"]).stdout
        port = subprocess.run(["ip", "-n", net.switch, "-d", "link", "show", "p2"],
                              capture_output=True, text=True, check=True).stdout
        assert "gso_max_segs 1 " in port
        cfg = net.make_config(tmp_path, iods=["s0", "s1"])
        assert cfg.iods[1].host == net.addr("s1")
        net.start_daemons(cfg)
        r = net.run("c0", [sys.executable, "-c", CLIENT, cfg.path], timeout=120)
        assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
        # the client host really is another host: loopback there has no daemon
        r = net.run("c0", [sys.executable, "-c",
                           "import socket; socket.create_connection(('127.0.0.1', 7401), 1)"])
        assert r.returncode != 0
    assert not [n for n in netns.namespaces() if n.startswith(net.tag)]


def test_stale_namespaces_of_a_dead_harness_are_removed():
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    name = f"{netns.PREFIX}{dead.pid}-x"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        assert name in netns.namespaces()
        assert name in netns.cleanup_stale()
        assert name not in netns.namespaces()
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False, capture_output=True)
