"""``pvfs-admin`` against real daemons, run as a user would: a subprocess per command.

Every subcommand is exercised with ``--config`` pointing at the module's cluster and its
``--json`` output parsed back; ``up``/``down`` get a cluster of their own.
"""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import schedulers_kept

from pvfs.cluster import launch
from pvfs.config import GATHER_S, load
from pvfs.daemons.iod.storage import PosixStorage
from pvfs.procs import pid_alive


def cli(config: str | None, *argv: str, home: Path | None = None,
        timeout: float = 60) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PVFS_CONFIG"}
    if home is not None:
        env["HOME"] = str(home)
    cmd = [sys.executable, "-m", "pvfs.cli.main"]
    if config:
        cmd += ["--config", config]
    return subprocess.run(cmd + list(argv), check=False, capture_output=True, text=True, env=env,
                          timeout=timeout)


def ok(config: str | None, *argv: str, **kw) -> str:
    r = cli(config, *argv, **kw)
    assert r.returncode == 0, f"{argv}: rc {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r.stdout


def js(config: str | None, *argv: str, **kw):
    return json.loads(ok(config, "--json", *argv, **kw))


def failed(config: str | None, *argv: str, code: int = 1) -> str:
    """Run a command that must fail with ``code`` and one error line; return that line."""
    r = cli(config, *argv)
    assert r.returncode == code, f"{argv}: rc {r.returncode}\n{r.stdout}\n{r.stderr}"
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("pvfs-admin: "), r.stderr
    assert "Traceback" not in r.stderr
    return r.stderr


@pytest.fixture(scope="module")
def cfg(pvfs_cluster) -> str:
    return pvfs_cluster.config_path


# ---------------------------------------------------------------------- cluster
def test_status_reports_every_daemon(cfg, pvfs_cluster):
    data = js(cfg, "status")
    names = [d["name"] for d in data["daemons"]]
    assert names == ["mgr", "iod0", "iod1", "iod2", "iod3"]
    assert data["all_up"] is True and data["mounts"] == []
    for d in data["daemons"]:
        assert d["up"] and d["version"] and d["pid"] == pvfs_cluster.pid(d["name"])
        assert d["uptime"] >= 0 and d["open_files"] is not None
    assert all(d["scheduler"] in ("opt1", "opt2", "opt3", "opt4") for d in data["daemons"][1:])
    text = ok(cfg, "status")
    assert "iod3" in text and "DOWN" not in text


def test_ping_checks_daemons_and_root(cfg):
    data = js(cfg, "ping")
    assert data["ok"] and data["checks"]["root"]["ok"]
    assert all(d["ok"] and d["rtt_ms"] >= 0 for d in data["daemons"])
    assert "ready" in ok(cfg, "ping")


def test_df_per_daemon_and_total(cfg):
    data = js(cfg, "df")
    assert [r["name"] for r in data["iods"]] == ["iod0", "iod1", "iod2", "iod3"]
    for r in data["iods"]:
        assert r["up"] and r["size"] > 0 and 0 <= r["avail"] <= r["size"]
    assert data["total"]["size"] == sum(r["size"] for r in data["iods"])
    assert data["inodes"]["dirs"] >= 1
    assert "total" in ok(cfg, "df")


# ---------------------------------------------------------------------- files
def test_mkdir_ls_stat_mv_rm(cfg):
    ok(cfg, "mkdir", "-p", "pvfs:/t1/a/b")
    ok(cfg, "mkdir", "pvfs:/t1/c")
    assert "File exists" in failed(cfg, "mkdir", "pvfs:/t1/c")
    blocks = js(cfg, "ls", "pvfs:/t1")
    assert [e["name"] for e in blocks[0]["entries"]] == ["a", "c"]
    assert all(e["type"] == "dir" for e in blocks[0]["entries"])
    rec = js(cfg, "ls", "-R", "pvfs:/t1")
    assert [b["path"] for b in rec] == ["/t1", "/t1/a", "/t1/a/b", "/t1/c"]
    assert "a/" in ok(cfg, "ls", "pvfs:/t1")
    assert "drwx" in ok(cfg, "ls", "-l", "pvfs:/t1")

    st = js(cfg, "stat", "pvfs:/t1/a")
    assert st["type"] == "dir" and st["path"] == "/t1/a" and st["ino"] > 1
    assert "inode:" in ok(cfg, "stat", "pvfs:/t1/a")
    assert failed(cfg, "stat", "pvfs:/t1/nope") == \
        "pvfs-admin: stat pvfs:/t1/nope: No such file or directory\n"

    ok(cfg, "mv", "pvfs:/t1/c", "pvfs:/t1/a")  # into the directory
    assert [e["name"] for e in js(cfg, "ls", "pvfs:/t1/a")[0]["entries"]] == ["b", "c"]
    ok(cfg, "mv", "pvfs:/t1/a/c", "pvfs:/t1/d")
    assert "is a directory" in failed(cfg, "rm", "pvfs:/t1/d")
    ok(cfg, "rm", "-r", "pvfs:/t1")
    ok(cfg, "rm", "-f", "pvfs:/t1")
    assert "No such file" in failed(cfg, "ls", "pvfs:/t1")


def test_cp_round_trips_and_recursive(cfg, tmp_path):
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    payload = os.urandom(3 * (1 << 20) + 12345)
    (src / "big.bin").write_bytes(payload)
    (src / "sub" / "small.txt").write_bytes(b"hello pvfs\n")
    (src / "empty").write_bytes(b"")

    out = js(cfg, "cp", "--chunk", "1M", str(src / "big.bin"), "pvfs:/")
    assert out["bytes"] == len(payload) and out["files"] == 1
    assert js(cfg, "stat", "pvfs:/big.bin")["size"] == len(payload)
    ok(cfg, "cp", "pvfs:/big.bin", str(tmp_path / "back.bin"))
    assert (tmp_path / "back.bin").read_bytes() == payload
    ok(cfg, "cp", "pvfs:/big.bin", "pvfs:/big2.bin")  # pvfs -> pvfs
    ok(cfg, "cp", "pvfs:/big2.bin", str(tmp_path / "back2.bin"))
    assert (tmp_path / "back2.bin").read_bytes() == payload

    assert "use -r" in failed(cfg, "cp", str(src), "pvfs:/tree")
    out = js(cfg, "cp", "-r", str(src), "pvfs:/tree")
    assert out["files"] == 3 and out["bytes"] == len(payload) + 11
    ok(cfg, "cp", "-r", "pvfs:/tree", str(tmp_path / "out"))
    for rel in ("big.bin", "sub/small.txt", "empty"):
        assert (tmp_path / "out" / rel).read_bytes() == (src / rel).read_bytes()
    assert "No such file" in failed(cfg, "cp", str(tmp_path / "missing"), "pvfs:/")
    assert "neither side" in failed(cfg, "cp", "a", "b", code=2)
    ok(cfg, "rm", "-r", "pvfs:/tree", "pvfs:/big.bin", "pvfs:/big2.bin")


def test_cp_draws_no_progress_bar_when_piped(cfg, tmp_path):
    f = tmp_path / "p.bin"
    f.write_bytes(os.urandom(4 << 20))
    r = cli(cfg, "cp", "--chunk", "256k", str(f), "pvfs:/piped.bin")
    assert r.returncode == 0 and r.stdout == "" and r.stderr == ""


def test_cp_draws_a_progress_bar_on_a_terminal(cfg, tmp_path):
    f = tmp_path / "t.bin"
    f.write_bytes(os.urandom(4 << 20))
    env = {k: v for k, v in os.environ.items() if k != "PVFS_CONFIG"}
    env.update(COLUMNS="100", TERM="xterm")
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "pvfs.cli.main", "--config", cfg, "cp",
                             "--chunk", "256k", str(f), "pvfs:/tty.bin"],
                            stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True)
    os.close(slave)
    seen = b""
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 1.0)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # EIO: the child closed the terminal
                    break
                if not chunk:
                    break
                seen += chunk
            elif proc.poll() is not None:
                break
        assert proc.wait(timeout=30) == 0, seen
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
    text = seen.decode(errors="replace")
    assert "100%" in text and "4.00M" in text and "\r" in text, text


# ---------------------------------------------------------------------- striping
def test_setstripe_and_getstripe(cfg):
    ok(cfg, "mkdir", "pvfs:/sd")
    d = js(cfg, "getstripe", "pvfs:/sd")
    assert d["source"] == "filesystem" and d["pcount"] == -1 and len(d["iods"]) == 4

    d = js(cfg, "setstripe", "--pcount", "2", "--ssize", "128k", "--base", "1", "pvfs:/sd")
    assert (d["source"], d["base"], d["pcount"], d["ssize"]) == ("directory", 1, 2, 128 << 10)
    ok(cfg, "cp", "/dev/null", "pvfs:/sd/inherits")
    f = js(cfg, "getstripe", "pvfs:/sd/inherits")
    assert (f["source"], f["base"], f["pcount"], f["ssize"]) == ("file", 1, 2, 131072)
    assert [(i["rank"], i["iod"]) for i in f["iods"]] == [(0, 1), (1, 2)]

    # a new file with its own layout, lfs-style
    f = js(cfg, "setstripe", "--base", "3", "--pcount", "1", "--ssize", "64k", "pvfs:/sd/one")
    assert (f["source"], f["base"], f["pcount"]) == ("file", 3, 1)
    assert [i["iod"] for i in f["iods"]] == [3]
    assert js(cfg, "stat", "pvfs:/sd/one")["stripe"] == [3, 1, 65536]
    text = ok(cfg, "getstripe", "pvfs:/sd/one")
    assert "base:" in text and "iod3" in text

    assert "only 4 I/O daemons" in failed(cfg, "setstripe", "--pcount", "9", "pvfs:/sd",
                                          code=2)
    assert "not a size" in failed(cfg, "setstripe", "--ssize", "12q", "pvfs:/sd", code=2)
    both = js(cfg, "getstripe", "pvfs:/sd", "pvfs:/sd/one")
    assert [b["source"] for b in both] == ["directory", "file"]
    d = js(cfg, "setstripe", "--delete", "pvfs:/sd")
    assert d["source"] == "filesystem"
    ok(cfg, "rm", "-r", "pvfs:/sd")


# ---------------------------------------------------------------------- administration
@pytest.fixture
def kept_schedulers(cfg):
    """The module's daemons get back their schedulers after the test, even if it fails."""
    with schedulers_kept(cfg):
        yield


def test_sched_show_and_set(cfg, kept_schedulers):
    rows = js(cfg, "sched", "show")
    assert [r["iod"] for r in rows] == [0, 1, 2, 3]
    rows = js(cfg, "sched", "set", "opt3", "--iod", "2", "--window", "64M")
    assert rows == [{"iod": 2, "address": rows[0]["address"], "algorithm": "opt3",
                     "window": 64 << 20, "gather": GATHER_S, "error": None}]
    rows = js(cfg, "sched", "show")
    assert rows[2]["algorithm"] == "opt3" and rows[2]["window"] == 64 << 20
    rows = js(cfg, "sched", "set", "opt4", "--iod", "1", "--gather", "0.05")
    assert rows[0]["algorithm"] == "opt4" and rows[0]["gather"] == 0.05
    assert "50 ms" in ok(cfg, "sched", "show", "--iod", "1")
    assert "gather" in failed(cfg, "sched", "set", "opt4", "--gather", "-1")
    js(cfg, "sched", "set", "opt1", "--iod", "1", "--gather", str(GATHER_S))
    assert js(cfg, "status")["daemons"][3]["scheduler"] == "opt3"
    rows = js(cfg, "sched", "set", "opt1")
    assert {r["algorithm"] for r in rows} == {"opt1"} and len(rows) == 4
    assert "opt1" in ok(cfg, "sched", "show", "--iod", "0")
    assert "not an I/O daemon" in failed(cfg, "sched", "show", "--iod", "7", code=2)


def test_stats_counts_and_resets(cfg, tmp_path):
    js(cfg, "stats", "--reset")
    f = tmp_path / "s.bin"
    f.write_bytes(os.urandom(1 << 20))
    ok(cfg, "cp", str(f), "pvfs:/stats.bin")
    data = js(cfg, "stats")
    assert isinstance(data["mounts"], list)
    rows = data["iods"]
    assert len(rows) == 4
    assert sum(r["counters"]["bytes_written"] for r in rows) == 1 << 20
    assert all(r["counters"]["write_requests"] >= 1 for r in rows)
    assert "written" in ok(cfg, "stats")
    js(cfg, "stats", "--reset")
    assert sum(r["counters"]["bytes_written"] for r in js(cfg, "stats")["iods"]) == 0
    ok(cfg, "rm", "pvfs:/stats.bin")


def test_fsck_finds_and_repairs_orphans_and_takes_missing_shares_for_holes(cfg, pvfs_cluster):
    config = load(cfg)
    js(cfg, "fsck", "--repair")  # start from a clean state
    before = js(cfg, "fsck")
    assert before["clean"]

    # an orphan: a stripe file on iod1 that no inode owns
    orphan_ino = 987654
    orphan = Path(PosixStorage(config.iods[1].data_dir).path(orphan_ino))
    orphan.parent.mkdir(parents=True, exist_ok=True)
    orphan.write_bytes(b"x" * 1000)
    # no stripe files: an empty file; a file whose bytes are on two daemons of four
    with pvfs_cluster.connect() as fs:
        fs.open("/empty", "wb").close()
        with fs.open("/small", "wb") as fh:
            fh.write(os.urandom(100_000))
        small = fs.stat("/small").st_ino

    r = cli(cfg, "--json", "fsck")
    assert r.returncode == 1
    report = json.loads(r.stdout)
    assert not report["clean"] and not report["ok"]
    assert [(o["iod"], o["ino"], o["size"]) for o in report["orphans"]] == [(1, orphan_ino, 1000)]
    # the orphan and /small's two
    assert report["checked"]["stripe_files"] == before["checked"]["stripe_files"] + 3
    text = cli(cfg, "fsck").stdout
    assert "orphan stripe files: 1" in text and "fsck --repair" in text
    assert orphan.exists()  # report only

    fixed = js(cfg, "fsck", "--repair")
    assert fixed["ok"] and all(o["repaired"] for o in fixed["orphans"])
    assert not orphan.exists()
    after = js(cfg, "fsck")
    assert after["clean"] and after["ok"]
    assert "clean" in ok(cfg, "fsck")
    with pvfs_cluster.connect() as fs:
        assert fs.stat("/empty").st_size == 0 and fs.stat("/small").st_size == 100_000
        assert [Path(PosixStorage(e.data_dir).path(small)).exists() for e in config.iods] \
            == [True, True, False, False]
        fs.unlink("/empty")
        fs.unlink("/small")


def test_failures_exit_1_with_one_line(cfg, tmp_path):
    assert "does not exist" in failed(str(tmp_path / "nope.toml"), "df")
    assert failed(cfg, "rm", "pvfs:/") == "pvfs-admin: rm pvfs:/: refusing to remove the root directory\n"
    assert "already exists" in failed(cfg, "init", "--dir", str(Path(cfg).parent))


def test_usage_errors_exit_2(cfg):
    failed(cfg, "frobnicate", code=2)
    failed(cfg, "ls", "--frob", code=2)
    failed(cfg, "sched", code=2)
    failed(cfg, "sched", "set", "fifo", code=2)


# ---------------------------------------------------------------------- up / down
def test_up_twice_then_down_leaves_nothing(tmp_path):
    home = tmp_path / "home"
    data = js(None, "init", "--dir", str(tmp_path / "fs"), "--iods", "2", home=home)
    path = data["config"]
    assert (home / ".config" / "pvfs" / "last-config").read_text().strip() == path
    config = load(path)
    try:
        # no --config: the one `init` remembered
        first = js(None, "up", home=home)
        assert {d["name"] for d in first["daemons"]} == {"mgr", "iod0", "iod1"}
        assert all(d["started"] for d in first["daemons"])
        pids = {d["name"]: d["pid"] for d in first["daemons"]}
        assert all(pid_alive(p) for p in pids.values())
        assert js(path, "status")["all_up"]

        second = js(path, "up")
        assert {d["name"]: d["pid"] for d in second["daemons"]} == pids
        assert not any(d["started"] for d in second["daemons"])
        assert "already running" in ok(path, "up")

        stopped = js(path, "down")
        assert {d["name"]: d["pid"] for d in stopped["stopped"]} == pids
        deadline = time.monotonic() + 10
        while any(pid_alive(p) for p in pids.values()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(pid_alive(p) for p in pids.values())
        assert not list(Path(config.run_dir).glob("*.pid"))
        r = cli(path, "--json", "status")
        assert r.returncode == 1 and not json.loads(r.stdout)["all_up"]
        assert cli(path, "ping").returncode == 1
        assert "is the file system up?" in failed(path, "ls")
        assert "no daemon" in ok(path, "down")
    finally:
        launch.down(config)


def _can_mount() -> bool:
    import shutil

    from pvfs.cli.main import has_command

    return os.path.exists("/dev/fuse") and shutil.which("fusermount3") is not None \
        and has_command("mount")


@pytest.mark.fuse
@pytest.mark.skipif(not _can_mount(), reason="needs /dev/fuse, fusermount3 and pvfs.fuse")
def test_up_mount_then_down_unmounts(tmp_path):
    path = js(None, "init", "--dir", str(tmp_path / "fs"), "--iods", "2",
              home=tmp_path / "home")["config"]
    config = load(path)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    try:
        data = js(path, "up", "--mount", str(mnt))
        assert data["mount"] == str(mnt)
        (mnt / "hello.txt").write_bytes(b"through the mount\n")
        assert js(path, "stat", "pvfs:/hello.txt")["size"] == 18
        assert [m["mountpoint"] for m in js(path, "status")["mounts"]] == [str(mnt)]
        ok(path, "down")
        assert not os.path.ismount(mnt)
        r = cli(path, "--json", "status")
        assert r.returncode == 1 and json.loads(r.stdout)["mounts"] == []
    finally:
        if os.path.ismount(mnt):
            subprocess.run(["fusermount3", "-u", "-z", str(mnt)], check=False)
        launch.down(config)


def test_a_dead_daemon_is_a_row_not_a_crash(fresh_cluster):
    path = fresh_cluster.config_path
    fresh_cluster.kill("iod1")
    r = cli(path, "--json", "status")
    assert r.returncode == 1
    rows = {d["name"]: d for d in json.loads(r.stdout)["daemons"]}
    assert not rows["iod1"]["up"] and rows["iod1"]["error"]
    assert rows["mgr"]["up"] and rows["iod0"]["up"]
    r = cli(path, "--json", "df")
    assert r.returncode == 1
    assert [x["up"] for x in json.loads(r.stdout)["iods"]] == [True, False, True, True]
    r = cli(path, "--json", "sched", "show")
    assert r.returncode == 1 and json.loads(r.stdout)[1]["error"]
    assert "DOWN" in cli(path, "status").stdout
    assert failed(path, "fsck").startswith("pvfs-admin: fsck iod1 (")
