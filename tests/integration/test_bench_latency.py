"""``pvfs-admin bench latency``'s micro-benchmark (figs. 3-4) end to end, small."""

from __future__ import annotations

import json
import subprocess
import sys


def admin(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pvfs.cli.main", *args], check=False,
                          capture_output=True, text=True, timeout=600)


def test_micro_benchmark_on_emulated_disks_records_every_run_and_the_disks_work(tmp_path):
    out = tmp_path / "lat.json"
    png = tmp_path / "micro.png"
    r = admin("bench", "latency", "--no-tables", "--micro-o", "10,300", "--ops", "40",
              "--micro-repeat", "2", "--storage", "emulated:ide-2000", "--iod-cache", "64K",
              "-o", str(out), "--plot", str(png))
    assert r.returncode == 0, r.stderr[-3000:]
    assert "figs. 3-4" in r.stdout and "table 1" not in r.stdout
    d = json.loads(out.read_text())
    assert "read_ms" not in d and d["storage"] == "emulated:ide-2000"
    rows = d["micro"]
    assert [(x["nodes"], x["iods"], x["o"]) for x in rows] == [
        (1, 1, 10), (1, 1, 300), (2, 3, 10), (2, 3, 300)]
    for row in rows:
        for setup in ("none", "local", "global", "both"):
            runs = row[f"{setup}_runs"]
            assert len(runs) == 2 and row[setup] == sum(runs) / 2  # the median
            assert (row[f"{setup}_lo"], row[f"{setup}_hi"]) == (min(runs), max(runs))
            assert row[f"{setup}_level"] == 0.5
            assert row[f"{setup}_vs_none_lo"] <= row[f"{setup}_vs_none"] \
                <= row[f"{setup}_vs_none_hi"]
            assert len(row[f"{setup}_disk_accesses"]) == 2
            # the clock stops with every write at the I/O daemons, the global cache's too
            assert row[f"{setup}_gcache_dirty_blocks"] == [0, 0]
            for r, w, f, t in zip(row[f"{setup}_read_s"], row[f"{setup}_write_s"],
                                  row[f"{setup}_flush_s"], runs):
                assert r >= 0 and w >= 0 and 0 <= f <= t
        # every run starts with cold disks, and without any cache every read reaches them
        assert min(row["none_disk_accesses"]) > 0
    assert png.stat().st_size > 0


def test_bench_latency_refuses_nothing_to_run_and_bad_lists():
    assert admin("bench", "latency", "--no-tables", "--no-micro").returncode == 2
    assert admin("bench", "latency", "--micro-o", "ten").returncode == 2
    assert admin("bench", "latency", "--micro-repeat", "0").returncode == 2


def test_micro_benchmark_in_the_paper_model_is_deterministic(tmp_path):
    out = tmp_path / "model.json"
    r = admin("bench", "latency", "--model", "paper", "--ops", "200", "-o", str(out))
    assert r.returncode == 0, r.stderr[-3000:]
    assert "mechanism" in r.stdout and "table 1" not in r.stdout
    d = json.loads(out.read_text())
    assert [(x["nodes"], x["iods"], x["o"]) for x in d["micro"]] == [
        (1, 1, 10), (1, 1, 600), (1, 1, 25000), (2, 3, 10), (2, 3, 600), (2, 3, 25000)]
    for row in d["micro"]:
        assert row["none_vs_none"] == 1.0 and row["both_lo"] == row["both"] == row["both_hi"]
    far = d["mechanism"][2]
    assert far["o"] == 25000 and far["local_miss_share"] > 0.9
    # a global miss costs more than a direct read (table 1), and the model says so
    assert far["read_vs_none"]["global"] > 1.0
