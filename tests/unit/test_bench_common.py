"""Unit tests of bench/common.py helpers (no benchmark is run)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from pvfs.bench import common
from pvfs.bench.peers.gluster import private_glusterd_vol
from pvfs.bench.peers.iperf import parse_iperf3_json
from pvfs.bench.peers.moosefs import chunkserver_config, master_config


@pytest.mark.parametrize(("xs", "m"), [
    ([3.0], 3.0), ([1.0, 3.0, 2.0], 2.0), ([4, 1, 3, 2], 2.5), ([None, 5.0, math.nan], 5.0),
])
def test_median(xs: list, m: float) -> None:
    assert common.median(xs) == m


def test_median_of_nothing() -> None:
    assert common.median([]) is None
    assert common.median([None]) is None


def test_ratio() -> None:
    assert common.ratio(3.0, 2.0) == 1.5
    assert common.ratio(1.0, 0.0) is None
    assert common.ratio(None, 2.0) is None
    assert common.ratio(2.0, None) is None
    assert common.ratios({"a": 2.0, "b": 3.0, "c": None}, "a") == {"a": 1.0, "b": 1.5,
                                                                   "c": None}
    with pytest.raises(KeyError):
        common.ratios({"a": 1.0}, "z")


def test_formatting() -> None:
    assert common.format_ratio(None) == "-"
    assert common.format_ratio(1.234) == "1.23x"
    assert common.format_bytes_rate(2 * 2**20) == "2.0 MiB/s"
    assert common.format_bytes_rate(20 * 2**30) == "20.0 GiB/s"
    table = common.format_table(["job", "x"], [["a", 1], ["bbb", None]])
    lines = table.splitlines()
    assert lines[0].startswith("job") and lines[2].startswith("a  ")
    assert lines[3].endswith("-")


def test_machine_info_fields() -> None:
    info = common.machine_info()
    for key in ("cpus", "memory_bytes", "kernel", "git", "python", "cpu_model"):
        assert key in info
    assert info["cpus"] >= 1
    assert set(info["git"]) == {"commit", "dirty"}


def test_write_results(tmp_path: Path) -> None:
    path = common.write_results("unit", {"x": [1, 2]}, command=["bench", "--a"],
                                results_dir=tmp_path)
    assert path == tmp_path / "unit.json"
    doc = json.loads(path.read_text())
    assert doc["x"] == [1, 2]
    assert doc["command"] == "bench --a"
    assert doc["name"] == "unit"
    assert "machine" in doc and "timestamp" in doc


def test_parse_iperf3_json() -> None:
    doc = {"end": {"sum_sent": {"bits_per_second": 9e9},
                   "sum_received": {"bits_per_second": 8e9}}}
    assert parse_iperf3_json(doc) == 1e9
    with pytest.raises(ValueError):
        parse_iperf3_json({"error": "unable to connect"})
    with pytest.raises(ValueError):
        parse_iperf3_json({"end": {}})


def test_private_glusterd_vol_binds_host() -> None:
    src = ("volume management\n    type mgmt/glusterd\n    option transport-type socket\n"
           "    option transport.socket.bind-address 10.0.0.1\nend-volume\n")
    out = private_glusterd_vol(src, "127.0.0.2").splitlines()
    i = out.index("    option transport-type socket")
    assert out[i + 1] == "    option transport.socket.bind-address 127.0.0.2"
    assert sum("bind-address" in line for line in out) == 1


def test_moosefs_configs(tmp_path: Path) -> None:
    m = master_config(tmp_path / "d", tmp_path / "e", tmp_path / "t")
    assert "MATOCS_LISTEN_HOST = 192.0.2.10\n" in m and "WORKING_USER = root\n" in m
    c = chunkserver_config(tmp_path / "c", tmp_path / "h", 9423)
    assert "CSSERV_LISTEN_PORT = 9423\n" in c and "MASTER_HOST = 192.0.2.10\n" in c
    assert "HDD_LEAVE_SPACE_DEFAULT = 1GiB\n" in c


def test_unmount_of_unmounted_path_is_noop(tmp_path: Path) -> None:
    assert not common.is_mounted(tmp_path)
    common.unmount(tmp_path)


def test_sigterm_tears_down_what_a_benchmark_started(tmp_path):
    """A killed benchmark must still leave its `with` blocks (peers, daemons, mounts)."""
    import signal
    import subprocess
    import sys

    marker = tmp_path / "torn-down"
    code = ("import sys, time, contextlib\n"
            f"sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})\n"
            "from pvfs.bench.common import exit_on_sigterm\n"
            "exit_on_sigterm()\n"
            "@contextlib.contextmanager\n"
            "def target():\n"
            "    try:\n        yield\n"
            f"    finally:\n        open({str(marker)!r}, 'w').close()\n"
            "with target():\n    print('up', flush=True)\n    time.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "up"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(10) == 143
    assert marker.exists()
