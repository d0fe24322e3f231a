"""`pvfs-admin calibrate` on a live file system whose disk is emulated (thesis appendix B; issue
12): it runs every workload, fits every parameter, and the fit lands in the config and the
daemons. How close the fit comes to the disk's known parameters (2 MB/s, no seek, no rotation,
a 2 MiB cache) is measured time, so it is a benchmark (bench/scheduling/calibrate.py, JSON in
bench/results/calibrate-known-disk.json), not an assertion here (issue 28); the search itself
recovers a model disk's parameters in tests/unit/test_models_fit.py, with no clock."""

from __future__ import annotations

import json

import pytest

from pvfs import config as cfgmod
from pvfs.cli.main import main
from pvfs.cluster.launch import down, make_config, up, write_config

# A slow disk, so that the modelled time dominates the CPU's share even on a loaded machine.
READ_BPS, CACHE = 2e6, 2 << 20


@pytest.mark.slow
def test_calibrate_fits_the_emulated_disk_and_stores_the_fit(tmp_path, capsys):
    cfg = make_config(str(tmp_path), iods=2, extra={"storage": {
        "default": "posix", "iod1": "emulated", "read_bps": READ_BPS, "seek_min": 0.0,
        "seek_max": 0.0, "rotation": 0.0, "cache_bytes": CACHE}})
    cfg = write_config(cfg, str(tmp_path / "pvfs.toml"))
    try:
        up(cfg)
        assert main(["calibrate", "--config", cfg.path, "--iod", "1", "--clients", "2",
                     "--quick", "--max-size", "8M", "--json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        p = doc["params"]
        # How close the fit comes to the disk is measured time (module docstring).
        assert min(p["B_dr"], p["B_drc"], p["S_cache"]) > 0 and p["T_over"] >= 0, p
        assert {r["workload"] for r in doc["residuals"]} == {
            "single-block", "strided", "random16", "random32"}
        stored = cfgmod.load(cfg.path).extra["model"]
        assert stored["B_dr"] == pytest.approx(p["B_dr"])
        import pvfs

        with pvfs.connect(cfg.path) as fs:
            assert fs.iod_call(1, "sched_get")["rs"]["params"]["B_dr"] == pytest.approx(
                p["B_dr"])
    finally:
        down(cfg)
