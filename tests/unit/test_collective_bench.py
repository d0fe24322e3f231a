"""pvfs-admin bench collective: the job plan, the table and the command line."""

from __future__ import annotations

import pytest

from pvfs.bench.collective.drive import (
    CHECKPOINT_METHODS,
    WINDOW,
    paired_ratios,
    plan,
    square_at_most,
    table_rows,
)
from pvfs.cli.main import build_parser


def test_plan_quick_covers_every_benchmark_and_method():
    jobs = plan(quick=True, ranks=4)
    names = {(o["benchmark"], o["method"]) for _, o in jobs}
    for bench in ("btio", "flash", "s3d"):
        assert {(bench, m) for m in CHECKPOINT_METHODS} <= names
    window = [(n, o) for n, o in jobs if o["benchmark"] == "sliding_window"]
    assert {o["method"] for _, o in window} == {"independent", "rma", "thread", "servers"}
    # DAChe's table 1 parameters.
    assert all(o["chunk"] == WINDOW["chunk"] == 64 << 10 and o["page"] == 32 << 10 and
               o["cache"] == 4 << 20 and o["loops"] == 40 for _, o in window)
    # Lock servers come on top of the clients.
    assert all(n == 4 + 1 for n, o in window if o["method"] == "servers" and n > 3)


def test_plan_full_sweeps_lock_servers_and_btio_needs_a_square():
    jobs = plan(quick=False, ranks=6, benchmarks=["sliding_window", "btio"])
    servers = {(n, o["lock_servers"]) for n, o in jobs if o["method"] == "servers"}
    assert (8 + 2, 2) in servers and (8 + 1, 1) in servers
    assert {n for n, o in jobs if o["benchmark"] == "btio"} == {4}
    assert square_at_most(10) == 9 and square_at_most(1) == 1


def test_plan_read_ahead_variants_of_the_lock_servers_get_their_servers(monkeypatch):
    from pvfs.bench.collective.drive import METHODS_ENV, label

    monkeypatch.setenv(METHODS_ENV, "independent,servers+ra,thread+ra,rma+nora")
    jobs = plan(quick=False, ranks=4, window_ranks=[4], benchmarks=["sliding_window"])
    got = sorted((n, o["method"], o.get("lock_servers", 0)) for n, o in jobs)
    assert got == [(4, "independent", 0), (4, "rma+nora", 0), (4, "thread+ra", 0),
                   (5, "servers+ra", 1), (6, "servers+ra", 2)]
    assert label({"method": "servers+ra", "lock_servers": 2}) == "servers+ra(k=2)"


def test_table_rows_speedup_against_independent():
    data = {"results": [
        {"benchmark": "btio", "method": "independent", "ranks": 4, "mib_s": 1.0,
         "fs_writes": 1000},
        {"benchmark": "btio", "method": "write_behind", "ranks": 4, "mib_s": 12.5,
         "fs_writes": 8}]}
    rows = table_rows(data)
    assert rows[0][4] == "1.00x" and rows[1][4] == "12.50x" and rows[1][5] == 8


def test_cli_parses_bench_collective():
    args = build_parser().parse_args(["bench", "collective", "--quick", "-n", "4", "--json",
                                      "--only", "btio,s3d"])
    assert args.command == "collective" and args.quick and args.ranks == 4 and args.json


def test_cli_rejects_unknown_benchmark(capsys):
    from pvfs.cli.main import main

    assert main(["bench", "collective", "--only", "nope"]) == 2
    assert "--only" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["bench", "collective", "--help"]])
def test_help_has_an_example(argv, capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(argv)
    assert "example:" in capsys.readouterr().out


def test_paired_ratios_compare_within_each_repeat():
    jobs = [(4, {"benchmark": "btio", "method": m}) for m in
            ("independent", "collective", "write_behind")]
    mk = lambda m, v: {"benchmark": "btio", "method": m, "ranks": 4, "mib_s": v}
    # Load doubles between repeats: absolute numbers move, the ratios within a repeat not.
    runs = {0: [mk("independent", 1.0), mk("independent", 0.5)],
            1: [mk("collective", 10.0), mk("collective", 5.0)],
            2: [mk("write_behind", 12.0), mk("write_behind", 4.0)]}
    got = {(p["method"], p["versus"]): p for p in paired_ratios(jobs, runs)}
    wb = got[("write_behind", "collective")]
    assert wb["ratios"] == [1.2, 0.8] and wb["median"] == 1.0 and wb["wins"] == 1
    assert got[("write_behind", "independent")]["min"] == 8.0
    assert ("collective", "collective") not in got and ("independent", "independent") not in got


# ------------------------------------------------------------- storage of the private cluster
def test_storage_table_kinds_and_errors():
    from pvfs.bench.collective.drive import storage_table

    assert storage_table(None) is None and storage_table("posix") is None
    assert storage_table("emulated") == {"default": "emulated:ide-2000"}
    assert storage_table("emulated:today", 1 << 20) == {"default": "emulated:today",
                                                        "cache_bytes": 1 << 20}
    for bad in (("nfs", None), ("emulated:floppy", None), ("posix", 1 << 20),
                ("emulated", -1)):
        with pytest.raises(ValueError):
            storage_table(*bad)


def test_plan_cold_marks_only_the_window_jobs():
    jobs = plan(quick=True, ranks=4, cold=True)
    assert all(o.get("cold") for _, o in jobs if o["benchmark"] == "sliding_window")
    assert not any("cold" in o for _, o in jobs if o["benchmark"] != "sliding_window")
    assert not any("cold" in o for _, o in plan(quick=True, ranks=4))


def test_storage_option_reaches_the_cluster_config(monkeypatch):
    """run_suite(storage=...) -> private_cluster -> the config every job and daemon reads."""
    import pvfs.bench.collective.drive as bd
    from pvfs.cluster import launch
    from pvfs.config import load
    from pvfs.models.disk import preset, storage_of

    started, seen = [], []
    monkeypatch.setattr(launch, "up", lambda cfg: started.append(cfg.path))
    monkeypatch.setattr(launch, "down", lambda cfg: None)

    def fake_job(config, nprocs, opts):
        cfg = load(config)
        seen.append((storage_of(cfg, 0), storage_of(cfg, 3), opts.get("cold")))
        return {"benchmark": opts["benchmark"], "method": opts["method"], "ranks": nprocs,
                "mib_s": 1.0}

    monkeypatch.setattr(bd, "run_job", fake_job)
    out = bd.run_suite(window_ranks=[1], benchmarks=["sliding_window"],
                       storage="emulated:ide-2000", disk_cache=1 << 20, cold=True)
    disk = preset("ide-2000", cache_bytes=1 << 20)
    assert started and seen and all(s == (("emulated", disk), ("emulated", disk), True)
                                    for s in seen)
    assert out["storage"] == {"default": "emulated:ide-2000", "cache_bytes": 1 << 20}
    assert out["cold"] is True
    # The default stays posix; storage options and an existing config do not mix.
    seen.clear()
    assert bd.run_suite(window_ranks=[1], benchmarks=["sliding_window"])["storage"] == \
        {"default": "posix"}
    assert all(s[0] == ("posix", None) and s[2] is None for s in seen)
    with pytest.raises(ValueError):
        bd.run_suite(config="/nowhere/pvfs.toml", storage="emulated")


def test_cli_passes_storage_disk_cache_and_cold(monkeypatch, capsys):
    import pvfs.bench.collective.drive as bd
    from pvfs.cli.main import main

    got = {}

    def fake_suite(**kw):
        got.update(kw)
        return {"results": [], "paired": [], "repeat": 1}

    monkeypatch.setattr(bd, "run_suite", fake_suite)
    assert main(["bench", "collective", "--only", "sliding_window", "--storage",
                 "emulated:ide-2000", "--disk-cache", "1M", "--cold", "--json"]) == 0
    assert got["storage"] == "emulated:ide-2000" and got["disk_cache"] == 1 << 20
    assert got["cold"] is True and got["config"] is None
    capsys.readouterr()
    assert main(["bench", "collective", "--storage", "tape"]) == 2
    assert "--storage" in capsys.readouterr().err
    assert main(["bench", "collective", "--disk-cache", "1M"]) == 2  # posix has no disk cache
    assert main(["bench", "collective", "--disk-cache", "lots", "--storage", "emulated"]) == 2
    assert main(["bench", "collective", "--use-config", "--storage", "emulated"]) == 2
