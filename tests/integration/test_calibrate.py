"""`pvfs-admin calibrate` on a live file system whose disk is emulated with known parameters
recovers them within 10 % (thesis appendix B; issue 12): B_dr is the disk's read rate (2 MB/s,
no seek, no rotation), S_cache its cache size; the fit lands in the config and the daemons."""

from __future__ import annotations

import json

import pytest

from pvfs import config as cfgmod
from pvfs.cluster.launch import down, make_config, up, write_config
from pvfs.cli.main import main

# A slow disk, so that the modelled time dominates the CPU's share even on a loaded machine.
READ_BPS, CACHE = 2e6, 2 << 20


@pytest.mark.slow
def test_calibrate_recovers_the_emulated_disk(tmp_path, capsys):
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
        assert abs(p["B_dr"] / READ_BPS - 1) <= 0.10, p
        assert abs(p["S_cache"] / CACHE - 1) <= 0.10, p
        assert p["B_drc"] > 2 * p["B_dr"]            # the cache serves at memory/network speed
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
