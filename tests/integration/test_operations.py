"""Operations against real daemons: the metrics endpoint, `stats --prometheus`,
`stats --watch`, `cache drop` (docs/operations.md)."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

import pytest
from conftest import Cluster
from test_mount_support import Mount, needs_fuse

from pvfs.cli.cmd_ops import rates
from pvfs.cluster.launch import down, free_ports, make_config, up, write_config
from pvfs.layout.stripe import Stripe
from pvfs.metrics import parse


@pytest.fixture(scope="module")
def ops_cluster(tmp_path_factory):
    """Two I/O daemons; the manager and iod0 serve metrics on ports of their own."""
    d = tmp_path_factory.mktemp("ops")
    cfg = make_config(str(d), iods=2)
    p_mgr, p_iod = free_ports(2)
    cfg = dataclasses.replace(cfg, manager=dataclasses.replace(cfg.manager, metrics_port=p_mgr),
                              iods=(dataclasses.replace(cfg.iods[0], metrics_port=p_iod),
                                    cfg.iods[1]))
    cfg = write_config(cfg, str(d / "pvfs.toml"))
    assert cfg.manager.metrics_port == p_mgr and cfg.iods[0].metrics_port == p_iod
    try:
        up(cfg)
    except BaseException:
        down(cfg)
        raise
    try:
        yield Cluster(d, cfg)
    finally:
        down(cfg)


def admin(cfg: str, *argv: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PVFS_CONFIG"}
    return subprocess.run([sys.executable, "-m", "pvfs.cli.main", "--config", cfg, *argv],
                          capture_output=True, text=True, env=env, timeout=60, check=False)


def scrape(port: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        return parse(r.read().decode())


def sample(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_metrics_endpoints_count_requests_bytes_and_latency(ops_cluster):
    cfg = ops_cluster.config
    before_iod = scrape(cfg.iods[0].metrics_port)
    before_mgr = scrape(cfg.manager.metrics_port)
    stripe = Stripe(0, 2, 65536)
    with ops_cluster.connect() as fs:
        with fs.open("/m", "w+b", stripe=stripe) as f:  # iod0 gets units 0, 2, 4, ...
            for _ in range(8):
                f.write(b"a" * 131072)  # one 64 KiB unit per daemon each time
            f.pread(131072, 0)
        fs.stat("/m")
    after = scrape(cfg.iods[0].metrics_port)
    iod = {"daemon": "iod0"}
    assert sample(after, "pvfs_requests_total", op="write", **iod) - \
        sample(before_iod, "pvfs_requests_total", op="write", **iod) == 8
    assert sample(after, "pvfs_bytes_total", direction="written", **iod) - \
        sample(before_iod, "pvfs_bytes_total", direction="written", **iod) == 8 * 65536
    assert sample(after, "pvfs_bytes_total", direction="read", **iod) - \
        sample(before_iod, "pvfs_bytes_total", direction="read", **iod) == 65536
    lat = sample(after, "pvfs_request_duration_seconds_count", op="write", **iod)
    assert lat == sample(after, "pvfs_request_duration_seconds_bucket", op="write", le="+Inf",
                         **iod) == sample(after, "pvfs_requests_total", op="write", **iod)
    assert sample(after, "pvfs_uptime_seconds", **iod) > 0
    mgr = scrape(cfg.manager.metrics_port)
    assert sample(mgr, "pvfs_requests_total", op="create", daemon="mgr") - \
        sample(before_mgr, "pvfs_requests_total", op="create", daemon="mgr") == 1
    assert sample(mgr, "pvfs_inodes", daemon="mgr") >= 2


def test_stats_prometheus_gathers_every_daemon_over_the_wire(ops_cluster):
    r = admin(ops_cluster.config_path, "stats", "--prometheus")
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("# TYPE pvfs_requests_total counter") == 1
    s = parse(r.stdout)
    for d in ("mgr", "iod0", "iod1"):  # iod1 has no metrics_port: gathered by the wire op
        assert sample(s, "pvfs_up", daemon=d) == 1
        assert sample(s, "pvfs_uptime_seconds", daemon=d) > 0
    assert any(n == "pvfs_requests_total" and ("daemon", "iod1") in lab for n, lab in s)


def test_stats_prometheus_reports_a_stopped_daemon(tmp_path):
    cfg = write_config(make_config(str(tmp_path), iods=2), str(tmp_path / "pvfs.toml"))
    try:
        up(cfg)
        Cluster(tmp_path, cfg).kill("iod1")
        r = admin(cfg.path, "stats", "--prometheus")
        assert r.returncode == 1, r.stderr
        assert "pvfs_up" in r.stdout, r.stderr
        s = parse(r.stdout)
        assert sample(s, "pvfs_up", daemon="iod1") == 0
        assert sample(s, "pvfs_up", daemon="iod0") == 1
    finally:
        down(cfg)


def test_watch_rates_from_two_snapshots():
    before = {"iod0": {"requests": 10, "errors": 0, "read": 0, "written": 1000,
                       "lat_sum": 1.0, "lat_count": 10, "up": 1}}
    after = {"iod0": {"requests": 30, "errors": 2, "read": 4096, "written": 5000,
                      "lat_sum": 1.5, "lat_count": 20, "up": 1},
             "iod1": {"requests": 4, "errors": 0, "read": 0, "written": 0,
                      "lat_sum": 0, "lat_count": 0, "up": 0}}
    r0, r1 = rates(before, after, 2.0)
    assert r0["requests_per_s"] == 10 and r0["errors_per_s"] == 1
    assert r0["read_bytes_per_s"] == 2048 and r0["written_bytes_per_s"] == 2000
    assert r0["mean_latency_s"] == pytest.approx(0.05)
    assert r1["up"] is False and r1["mean_latency_s"] is None and r1["requests_per_s"] == 2


def test_stats_watch_refreshes(ops_cluster):
    r = admin(ops_cluster.config_path, "--json", "stats", "--watch", "0.2", "--count", "2")
    assert r.returncode == 0, r.stderr
    frames = [json.loads(line) for line in r.stdout.splitlines()]
    assert len(frames) == 2
    for f in frames:
        assert {d["daemon"] for d in f["daemons"]} == {"mgr", "iod0", "iod1"}
        # the watch's own metrics calls are requests too: every daemon shows some
        assert all(d["requests_per_s"] > 0 and d["up"] for d in f["daemons"])
    table = admin(ops_cluster.config_path, "stats", "--watch", "0.1", "--count", "1")
    assert table.returncode == 0 and "req/s" in table.stdout and "iod1" in table.stdout
    bad = admin(ops_cluster.config_path, "stats", "--watch", "0")
    assert bad.returncode == 2


def _cached_bytes(path: Path) -> int:
    out = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES", str(path)],
                         capture_output=True, text=True, check=True).stdout
    return int(out.split()[0])


@pytest.fixture
def public_dir():
    """A directory every user may traverse (pytest's tmp dirs are 0700)."""
    path = Path(tempfile.mkdtemp(prefix="pvfs-ops-", dir="/tmp"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@needs_fuse
def test_cache_drop_empties_mount_cache_and_daemon_page_cache(ops_cluster, public_dir):
    tmp_path = public_dir
    with Mount(ops_cluster.config_path, tmp_path / "mnt", "stream_min=0") as m:  # all cached
        data = os.urandom(256 << 10)
        (m.path / "cold").write_bytes(data)
        assert (m.path / "cold").read_bytes() == data
        assert m.stats()["blocks_cached"] > 0
        stripes = [p for p in ops_cluster.stripe_files() if p.stat().st_size > 0]
        for p in stripes:
            p.read_bytes()  # into the page cache
        assert sum(_cached_bytes(p) for p in stripes) > 0
        r = admin(ops_cluster.config_path, "--json", "cache", "drop")
        assert r.returncode == 0, r.stderr
        out = json.loads(r.stdout)
        assert [x["mountpoint"] for x in out["mounts"]] == [str(m.path)]
        assert all(x["error"] is None for x in out["mounts"] + out["iods"])
        assert sum(x["files"] for x in out["iods"]) >= len(stripes)
        assert sum(_cached_bytes(p) for p in stripes) == 0
        st = m.stats()
        assert st["blocks_cached"] == 0 and st["cache_drops"] == 1
        assert (m.path / "cold").read_bytes() == data  # fetched again, same bytes
        r = admin(ops_cluster.config_path, "cache", "drop", "--mounts")
        assert r.returncode == 0 and "dropped" in r.stdout and "iod0" not in r.stdout
        # only root may drop a mount's cache, even through a file the user owns
        mine = m.path / "nobodys"
        mine.write_bytes(b"")
        os.chown(mine, 65534, 65534)
        denied = subprocess.run(
            [sys.executable, "-c", ("import os; os.setresuid(65534, 65534, 65534); "
                                    f"os.setxattr({str(mine)!r}, 'user.pvfs.drop_cache', "
                                    "b'1')")],
            capture_output=True, text=True, check=False)
        assert denied.returncode != 0 and "Operation not permitted" in denied.stderr
