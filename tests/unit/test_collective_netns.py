"""DAChe figs. 4-6 over the netns harness: the plan, the phase sums and the summaries."""

from __future__ import annotations

import pytest

from pvfs.bench.collective.mpi import PHASES, phase_sums
from pvfs.bench.collective.netns import (
    derived,
    paired,
    plan,
    rotated,
    summary,
    variant_pairs,
)


def test_plan_puts_lock_servers_on_top_of_the_clients():
    groups = plan([8, 16], ["1", "2", "half"])
    assert [[n for n, _ in g] for g in groups] == [[8, 9, 10, 16], [16, 17, 18, 32]]
    assert all(o["breakdown"] for g in groups for _, o in g)
    assert [o.get("lock_servers") for _, o in groups[1]] == [None, 1, 2, 16]
    assert groups[0][0][1]["method"] == "independent"


def test_rotation_starts_each_repeat_one_later_and_runs_every_job():
    jobs = ["a", "b", "c"]
    assert [rotated(jobs, r) for r in range(4)] == [[0, 1, 2], [1, 2, 0], [2, 0, 1],
                                                   [0, 1, 2]]


def test_phase_sums_skip_an_access_that_raised():
    trace = [{"t": [0.0, 1.0, 1.5, 1.75, 2.75, 3.0]},
             {"t": [10.0, 12.0, 13.0]},  # raised after its locks: no record of its phases
             {"t": [4.0, 4.5, 4.5, 4.5, 4.5, 5.0]}]
    out = phase_sums(trace)
    assert out["accesses"] == 2
    assert [out[f"phase_{p}_us"] for p in PHASES] == [1_500_000, 500_000, 250_000,
                                                      1_000_000, 750_000]


def test_derived_shares_add_up_and_other_is_the_rest():
    r = {"accesses": 4, "read_us": 1000, "lock_rounds": 2, "phase_lock_us": 400,
         "phase_load_us": 100, "phase_local_us": 0, "phase_remote_us": 200,
         "phase_unlock_us": 100}
    d = derived(r)
    assert d["lock_us_per_access"] == 100 and d["lock_us_per_round"] == 200
    assert d["shares"]["other"] == pytest.approx(0.2)
    assert sum(d["shares"].values()) == pytest.approx(1.0)
    assert derived({"accesses": 0, "read_us": 5}) == {}  # independent: no cache, no phases


def test_summary_is_the_median_with_the_repeats_range():
    rs = [{"method": "servers", "lock_servers": 2, "ranks": 8, "mib_s": x,
           "cpu_s_per_gib": 1.0, "pages_touched": 320} for x in (3.0, 1.0, 2.0)]
    s = summary(rs)
    assert s["method"] == "servers(k=2)" and s["n"] == 3
    assert s["mib_s"] == {"median": 2.0, "lo": 1.0, "hi": 3.0}
    assert s["lock_us_per_access"] is None and "shares" not in s


def test_paired_ratios_are_within_a_repeat_and_skip_failed_repeats():
    jobs = plan([8], ["1"])[0]
    runs = {0: {0: {"mib_s": 10.0}, 1: {"mib_s": 20.0}, 2: {"mib_s": 40.0}},
            1: {0: {"mib_s": 15.0}, 2: {"mib_s": 20.0}}}  # servers' repeat 1 failed
    (p,) = paired(jobs, runs)
    assert p["ranks"] == 8 and p["method"] == "servers(k=1)"
    assert p["ratios"] == [1.5, 0.5] and p["wins"] == 1
    assert p["median"] == 1.0 and (p["min"], p["max"]) == (0.5, 1.5)


def test_plan_without_independent_at_some_counts_and_variants_paired_with_servers():
    """Issue 32's A/B (the victim cache): ``--independent 16`` leaves 32 clients without
    the independent job; a variant is paired with ``servers`` of the same k and repeat,
    the servers job's value over the variant's."""
    groups = plan([16, 32], ["1"], ("servers+ra-novictim",), independent={16})
    assert [[o["method"] for _, o in g] for g in groups] == [
        ["independent", "servers", "servers+ra-novictim"],
        ["servers", "servers+ra-novictim"]]
    jobs = groups[1]
    runs = {0: {0: {"mib_s": 10.0, "fs_read_pages": 2600, "cpu_s_per_gib": 50.0},
                1: {"mib_s": 12.0, "fs_read_pages": 2560, "cpu_s_per_gib": 40.0},
                2: {"mib_s": 9.0, "fs_read_pages": 2600, "cpu_s_per_gib": 45.0}},
            1: {0: {"mib_s": 10.0, "fs_read_pages": 7800, "cpu_s_per_gib": 50.0},
                1: {"mib_s": 10.0, "fs_read_pages": 5120, "cpu_s_per_gib": 50.0}}}
    (v,) = variant_pairs(jobs, runs)
    assert v["ranks"] == 32 and v["versus"] == "servers(k=1)" and v["repeats"] == [0, 1]
    assert v["mib_s"]["ratios"] == [1.0, 1.2] and v["mib_s"]["median"] == 1.1
    assert v["fs_read_pages"]["ratios"] == [0.333, 0.5]
    assert v["cpu_s_per_gib"]["min"] == 0.8


def test_plan_cold_marks_every_job_and_summary_carries_the_disks():
    """Issue 32 (s27): the victim cache's A/B on emulated disks, caches emptied first."""
    groups = plan([16, 32], ["1"], ("servers+ra-victim",), independent={16}, cold=True)
    assert all(o["cold"] for g in groups for _, o in g)
    assert not any("cold" in o for g in plan([8], ["1"]) for _, o in g)
    rs = [{"method": "servers", "lock_servers": 1, "ranks": 32, "mib_s": 1.0,
           "disk": {"accesses": a, "busy_s": a / 10}} for a in (30, 10, 20)]
    s = summary(rs)
    assert s["disk_accesses"] == {"median": 20, "lo": 10, "hi": 30}
    assert s["disk_busy_s"]["median"] == 2.0
    assert summary([{"method": "independent", "ranks": 8, "mib_s": 1.0,
                     "disk": None}])["disk_accesses"] is None


def test_storage_reaches_the_harness_config(monkeypatch):
    """``--storage``/``--disk-cache`` become the daemons' ``[storage]`` table."""
    from pvfs.bench.collective import netns

    seen = {}

    def fake_run(*a, **kw):
        seen.update(kw)
        return {"results": [], "runs": [], "paired": [], "variant_pairs": []}

    monkeypatch.setattr(netns, "run", fake_run)
    monkeypatch.setattr(netns, "plot", lambda *a: None)
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        netns.main(["--ranks", "8", "--storage", "emulated:ide-2000", "--disk-cache", "0",
                    "--cold", "-o", f"{d}/x.json"])
    assert seen["storage"] == {"default": "emulated:ide-2000", "cache_bytes": 0}
    assert seen["cold"] is True


def test_plan_runs_rma_and_thread_variants_without_lock_servers():
    """Issue 32: ``thread`` and ``rma`` over the harness have n processes, no lock-server
    ranks, and are not paired with ``servers`` (another process count)."""
    groups = plan([8], ["1"], ("servers+ra-udpbells", "thread", "rma"))
    jobs = groups[0]
    assert [(n, o["method"], o.get("lock_servers")) for n, o in jobs] == [
        (8, "independent", None), (9, "servers", 1), (9, "servers+ra-udpbells", 1),
        (8, "thread", None), (8, "rma", None)]
    runs = {i: {0: {"mib_s": 10.0 + i, "fs_read_pages": 640, "cpu_s_per_gib": 50.0}}
            for i in range(len(jobs))}
    assert [v["method"] for v in variant_pairs(jobs, runs)] == ["servers+ra-udpbells(k=1)"]
    assert [p["method"] for p in paired(jobs, runs)] == [
        "servers(k=1)", "servers+ra-udpbells(k=1)", "thread", "rma"]


def test_plan_without_the_plain_servers_job_keeps_the_variants():
    groups = plan([16], ["1"], ("servers+ra-rget", "servers+ra-rget-victim"),
                  independent=set(), base=False)
    assert [(n, o["method"], o["lock_servers"]) for n, o in groups[0]] == [
        (17, "servers+ra-rget", 1), (17, "servers+ra-rget-victim", 1)]
