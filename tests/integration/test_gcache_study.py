"""``pvfs-admin study caching``, ``plan make`` and ``gcache`` commands end to end (small)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from pvfs.bench.caching.study import run_study


def admin(*args: str, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pvfs.cli.main", *args], check=False,
                          capture_output=True,
                          text=True, timeout=300, env=env)


def test_study_json_shape_and_normalisation():
    out = run_study(["pgrep"], ["both", "runtime10", "plan"], quick=True, storage="posix",
                    repeat=2)
    rows = out["results"]
    assert [r["policy"] for r in rows] == ["both", "runtime10", "plan"]
    for r in rows:
        assert list(r)[:6] == ["trace", "policy", "time_s", "time_norm", "local_hit_rate",
                               "global_hit_rate"]
        assert r["time_s"] > 0 and 0 <= r["local_hit_rate"] <= 1
        assert 0 <= r["global_hit_rate"] <= 1 and r["ops"] > 0
        # every run recorded; the kept one is the best, the median between
        assert len(r["runs_s"]) == 2 and r["time_s"] == min(r["runs_s"])
        assert min(r["runs_s"]) <= r["median_s"] <= max(r["runs_s"])
        # and every run's counters, to tell whether two policies decided alike
        assert [d["time_s"] for d in r["runs"]] == r["runs_s"]
        assert all("admissions" in d["global"] and d["disks"] == [] for d in r["runs"])
    assert rows[0]["time_norm"] == 1.0 and rows[0]["median_norm"] == 1.0
    assert out["setup"]["local_bytes"] == 2 << 20 and out["setup"]["global_bytes"] == 4 << 20


def test_plan_make_cli(tmp_path):
    path = tmp_path / "lu.plan"
    r = admin("plan", "make", "gen:lu:n=256,slabs=4", "-o", str(path))
    assert r.returncode == 0, r.stderr
    plan = json.loads(path.read_text())
    assert plan["format"] == "pvfs-bypass-plan" and plan["phases"]
    r = admin("plan", "make", "gen:lu", "--coarse", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["coarse"] is True
    assert admin("plan", "make", str(tmp_path / "missing.trace")).returncode == 2


def test_init_gcaches_up_stats_down(tmp_path):
    import os

    env = dict(os.environ, HOME=str(tmp_path / "home"))
    cfg = str(tmp_path / "fs" / "pvfs.toml")
    assert admin("init", "--dir", str(tmp_path / "fs"), "--iods", "1", "--gcaches", "1",
                 "--gcache-size", "1M", "--gcache-policy", "sketch", env=env).returncode == 0
    try:
        r = admin("--config", cfg, "up", env=env)
        assert r.returncode == 0, r.stderr
        assert "gcache0" in r.stdout
        r = admin("--config", cfg, "--json", "stats", env=env)
        assert r.returncode == 0, r.stderr
        (g,) = json.loads(r.stdout)["gcaches"]
        assert g["error"] is None and g["policy"] == "sketch" and g["capacity_blocks"] == 256
        for key in ("hits", "misses", "admissions", "bypasses", "evictions"):
            assert key in g
        r = admin("--config", cfg, "gcache", "policy", "runtime", "--threshold", "10", env=env)
        assert r.returncode == 0 and "runtime" in r.stdout
    finally:
        admin("--config", cfg, "down", env=env)


def test_replay_with_plan(tmp_path):
    from conftest import start_cluster

    from pvfs.cluster.launch import down, free_ports
    from pvfs.gcache.config import gcache_table

    port = free_ports(1)[0]
    cluster = start_cluster(tmp_path / "fs", iods=2,
                            extra={"gcache": gcache_table([f"127.0.0.1:{port}"],
                                                          capacity=1 << 20)})
    try:
        plan = tmp_path / "lu.plan"
        assert admin("plan", "make", "gen:lu:n=128,slabs=4", "--global-size", "64k",
                     "-o", str(plan)).returncode == 0
        r = admin("replay", "--workload", "lu", "--param", "n=128", "--param", "slabs=4",
                  "--seed", "1", "--target", f"pvfs://{cluster.config_path}", "--plan",
                  str(plan), "--nodes", "2", "--json")
        assert r.returncode == 0, r.stderr
        out = json.loads(r.stdout)
        assert out["plan"] and out["nodes"] == 2 and out["ops"] > 0
        assert out["local"]["gcache_client"] is True and len(out["phase_s"]) > 1
        r = admin("replay", "--workload", "lu", "--target", str(tmp_path), "--plan", str(plan))
        assert r.returncode == 2  # plans need the client caches of a pvfs:// target
    finally:
        down(cluster.config)


def test_sigterm_stops_and_removes_the_study_cluster(tmp_path):
    """`kill` of a running study (SIGINT ignored, as in a script's background job) unwinds:
    exit 143, its scratch cluster's daemons stopped and its directory removed."""
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    study = f"{sys.executable} -m pvfs.cli.main study caching --traces lu --policies both" \
            " --repeat 50"
    proc = subprocess.Popen(["sh", "-c", f"trap '' INT; exec {study}"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    pids: list[int] = []
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(pids) < 4:   # mgr, 2 iods, gcache
            time.sleep(0.2)
            pids = [int(p.read_text()) for p in tmp_path.glob("pvfs-study-*/run/*.pid")
                    if p.read_text().strip()]
        assert len(pids) == 4, list(tmp_path.rglob("*"))
        time.sleep(2)                                          # the replay is under way
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 143, err
        assert "terminated" in err
        assert not list(tmp_path.glob("pvfs-study-*"))
        assert not [pid for pid in pids if running(pid)]
    finally:
        for pid in ([proc.pid] if proc.poll() is None else []) + pids:  # never left behind
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def running(pid: int, wait: float = 10.0) -> bool:
    """Whether ``pid`` is still alive (not gone, not a zombie) after up to ``wait`` s: an
    exited daemon whose parent exited first waits to be reaped by init."""
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return False
        if state in ("Z", "X"):
            return False
        time.sleep(0.1)
    return True
