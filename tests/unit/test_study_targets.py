"""The scheduling study's target checks (``pvfs.bench.scheduling.score.targets``) on made-up results:
what passes, what fails, and the per-phase best that defines the mixed-phase workload."""

from __future__ import annotations

import itertools

import pytest

from pvfs.bench.scheduling.runner import MIXED_PHASES
from pvfs.bench.scheduling.study import targets


def _cell(wl, size, cached, runs: dict[str, list[float]], op: str = "read") -> list[dict]:
    """One cell's rows; ``runs[alg]``: that setting's runs' mean task service times."""
    return [{"workload": wl, "request_bytes": size, "cached": cached, "operation": op,
             "algorithm": a, "app_service_s": sum(v) / len(v),
             "mean_task_service_s": sum(v) / len(v), "variance": 0.0,
             "runs": [{"app_service_s": t, "mean_task_service_s": t} for t in v]}
            for a, v in runs.items()]


def _tight(t: float, n: int = 5) -> list[float]:
    return [t * (1 + d) for d in (-0.002, -0.001, 0.0, 0.001, 0.002)[:n]]


def _mixed(phase_times: dict[str, list[list[float]]]) -> list[dict]:
    """Mixed-phase rows; ``phase_times[alg]``: runs, each the phases' mean task times (one
    task per phase, so a task's time is the phase's time)."""
    rows = []
    for a, runs in phase_times.items():
        totals = [sum(run) for run in runs]
        mean = sum(totals) / len(totals)
        rows.append({"workload": "mixed-phase", "request_bytes": None, "cached": None,
                     "operation": "read", "algorithm": a, "app_service_s": mean,
                     "mean_task_service_s": mean, "variance": 0.0,
                     "runs": [{"app_service_s": t, "mean_task_service_s": t,
                               "phases": [{"app_service_s": p, "mean_task_service_s": p,
                                           "task_s": [p]} for p in run]}
                              for t, run in zip(totals, runs)]})
    return rows


def test_a_cell_is_within_only_when_its_whole_interval_is() -> None:
    res = (_cell("single-block", 1 << 20, False,
                 {"opt1": _tight(2.0), "opt2": _tight(1.9), "opt3": _tight(2.0),
                  "opt4": _tight(1.0), "rs": _tight(1.02)})
           + _cell("random16", 64 << 10, True,
                   {"opt1": _tight(0.10), "opt2": _tight(0.10), "opt3": _tight(0.10),
                    "opt4": _tight(0.12), "rs": _tight(0.101)}))
    t = targets(res)
    within = t["rs_within_5pct_of_best"]
    assert within["result"] == "met" and within["pass"] and within["decided_within"] == 2
    assert t["rs_24pct_below_opt1_single_block_uncached_ge_1MiB"]["result"] == "met"
    cell = within["cells"][0]
    assert cell["best"] == "opt4" and cell["rs_over_best"] == pytest.approx(0.02)
    assert cell["ci95"][0] < 0.02 < cell["ci95"][1] <= 0.05
    # rs 7 % behind, tight runs: decided a miss (and not yet over 10 %)
    res[-1]["runs"] = [{"mean_task_service_s": v} for v in _tight(0.107)]
    within = targets(res)["rs_within_5pct_of_best"]
    assert within["decided_miss"] == 1 and within["result"] == "missed"
    assert within["decided_over_10pct"] == 0


def test_a_cell_whose_interval_straddles_5pct_is_undecided() -> None:
    res = _cell("random32", 64 << 10, False,
                {"opt1": [0.08, 0.12, 0.10, 0.09, 0.11], "opt2": _tight(0.12),
                 "opt3": _tight(0.12), "opt4": _tight(0.2),
                 "rs": [0.09, 0.13, 0.11, 0.10, 0.12]})           # +10 %, runs spread +-20 %
    within = targets(res)["rs_within_5pct_of_best"]
    (cell,) = within["cells"]
    assert cell["within_5pct"] == "undecided" and within["undecided"] == 1
    assert cell["ci95"][0] < 0.05 < cell["ci95"][1]
    assert within["result"] == "undecided" and within["pass"] is None


def test_one_run_gives_no_interval_and_decides_nothing() -> None:
    res = _cell("strided", 64 << 10, False, {"opt1": [1.0], "opt2": [1.0], "opt3": [1.0],
                                             "opt4": [1.0], "rs": [1.0]})
    (cell,) = targets(res)["rs_within_5pct_of_best"]["cells"]
    assert cell["ci95"] is None and cell["within_5pct"] == "undecided"


def test_the_best_is_chosen_again_in_every_resample() -> None:
    """Four noisy fixed algorithms of the same speed: the least median is biased low, and rs
    running the very same speed must not be decided a miss for it."""
    import random

    rng = random.Random(1)
    runs = {a: [1.0 + rng.uniform(-0.1, 0.1) for _ in range(5)] for a in ("opt1", "opt2",
                                                                        "opt3", "opt4")}
    runs["rs"] = [1.0 + rng.uniform(-0.1, 0.1) for _ in range(5)]
    (cell,) = targets(_cell("random16", 64 << 10, False, runs))["rs_within_5pct_of_best"][
        "cells"]
    assert cell["within_5pct"] != "missed" and cell["ci95"][0] <= 0.0


def test_the_held_out_target_needs_90pct_of_cells_and_none_decided_over_10pct() -> None:
    ok = {"opt1": _tight(1.0), "opt2": _tight(1.2), "opt3": _tight(1.2), "opt4": _tight(1.3)}
    res = []
    for i in range(10):
        res += _cell("strided", (i + 1) << 16, False, {**ok, "rs": _tight(1.01)})
    assert targets(res)["rs_within_5pct_of_best"]["result"] == "met"
    res[-1]["runs"] = [{"mean_task_service_s": v} for v in _tight(1.07)]   # 1 of 10 over 5 %
    assert targets(res)["rs_within_5pct_of_best"]["result"] == "met"
    res[-6]["runs"] = [{"mean_task_service_s": v} for v in _tight(1.2)]    # one over 10 %
    t = targets(res)["rs_within_5pct_of_best"]
    assert t["result"] == "missed" and t["decided_over_10pct"] == 1


def test_reads_and_writes_of_one_cell_are_scored_apart() -> None:
    fixed = {"opt1": _tight(1.0), "opt2": _tight(1.0), "opt3": _tight(1.0), "opt4": _tight(1.0)}
    res = (_cell("strided", 1 << 20, False, {**fixed, "rs": _tight(1.0)})
           + _cell("strided", 1 << 20, False, {**fixed, "rs": _tight(1.2)}, op="write"))
    cells = targets(res)["rs_within_5pct_of_best"]["cells"]
    assert {(c["operation"], c["within_5pct"]) for c in cells} == {("read", "met"),
                                                                   ("write", "missed")}
    # writes never count towards the single-block uncached reads' target
    assert targets(_cell("single-block", 1 << 20, False, {**fixed, "rs": _tight(0.5)},
                         op="write"))["rs_24pct_below_opt1_single_block_uncached_ge_1MiB"][
        "result"] is None


def test_the_oracle_takes_each_phase_from_its_fastest_fixed_algorithm() -> None:
    from pvfs.bench.scheduling.score import oracle, oracle_row

    # Two phases: opt4 wins the first (1.0 s against 2.0), loses the second (0.5 against 0.2).
    fixed = {"opt1": [[2.0, 0.2]] * 3, "opt2": [[2.0, 0.2]] * 3,
             "opt3": [[2.1, 0.2]] * 3, "opt4": [[1.0, 0.5]] * 3}
    total, schedule = oracle({a: [list(p) for p in zip(*runs)] for a, runs in fixed.items()})
    assert total == pytest.approx(1.2) and schedule == ["opt4", "opt1"]
    rows = {r["algorithm"]: r for r in _mixed(fixed)}
    row = oracle_row(rows)
    assert row["algorithm"] == "oracle" and row["mean_task_service_s"] == pytest.approx(1.2)
    assert row["schedule"] == ["opt4", "opt1"]
    assert row["whole_program"]["app_service_s"] == pytest.approx(1.2)
    assert row["best_single_algorithm"]["algorithm"] == "opt4"          # 1.5 s


def test_the_whole_program_schedule_adds_each_tasks_own_phase_times() -> None:
    from pvfs.bench.scheduling.score import whole_program

    def row(phases):                       # one run; phases: each task's times
        return {"runs": [{"phases": [{"task_s": t} for t in phases]}]}

    rows = {"opt1": row([[1.0, 3.0], [1.0, 1.0]]), "opt4": row([[2.0, 2.0], [3.0, 1.0]])}
    # phase 1 by opt1, phase 2 by opt4: task 0 1.0 + 3.0, task 1 3.0 + 1.0; slowest 4.0
    w = whole_program(rows, ["opt1", "opt4"])
    assert w["app_service_s"] == pytest.approx(4.0) and w["mean_task_service_s"] == 4.0


def test_mixed_phase_target_in_mean_task_service_time() -> None:
    good = {"opt1": [[2.0, 0.2]] * 3, "opt2": [[2.0, 0.2]] * 3,
            "opt3": [[2.1, 0.2]] * 3, "opt4": [[1.0, 0.5]] * 3,
            "rs": [[1.0, 0.21], [1.01, 0.2], [1.0, 0.2]]}
    t = targets(_mixed(good))["mixed_phase_rs_within_3pct_of_oracle_fixed_8pct_behind"]
    assert t["oracle_s"] == pytest.approx(1.2) and t["result"] == "met" and t["pass"]
    assert t["over_oracle"]["opt4"] == pytest.approx(1.25)
    # a fixed algorithm only 4 % behind the oracle: the mix does not have its property
    close = {**good, "opt4": [[1.0, 0.25]] * 3}
    t = targets(_mixed(close))["mixed_phase_rs_within_3pct_of_oracle_fixed_8pct_behind"]
    assert t["fixed_result"] == "missed" and t["result"] == "missed"
    slow = {**good, "rs": [[1.1, 0.2]] * 3}                      # rs 8 % behind the oracle
    t = targets(_mixed(slow))["mixed_phase_rs_within_3pct_of_oracle_fixed_8pct_behind"]
    assert t["rs_result"] == "missed"


def test_the_mixed_phases_switch_cache_state_and_size_and_cover_small_uncached_phases() -> None:
    kinds = {(size >= 1 << 20, cached) for _, size, cached in MIXED_PHASES}
    assert {(True, False), (False, False), (False, True), (True, True)} <= kinds
    for a, b in itertools.pairwise(MIXED_PHASES):
        assert a != b                                          # every boundary changes something


def test_the_rendered_table_reports_every_target_and_the_oracle() -> None:
    from pvfs.bench.scheduling.score import oracle_row
    from pvfs.cli.cmd_study import _render

    rows = _mixed({"opt1": [[2.0, 0.2]] * 3, "opt2": [[2.0, 0.2]] * 3,
                   "opt3": [[2.0, 0.2]] * 3, "opt4": [[1.0, 0.5]] * 3,
                   "rs": [[1.0, 0.2]] * 3})
    res = [*rows, oracle_row({r["algorithm"]: r for r in rows})]
    text = _render({"results": res, "targets": targets(res), "load_before": [1, 2, 3],
                    "model_fit_on": {"source": "fit pass", "runs": ["a", "b"]}})
    assert "mixed_phase_rs_within_3pct_of_oracle_fixed_8pct_behind: MET" in text
    assert "oracle 1.200 s" in text and "opt4 1.250x" in text and "oracle" in text
    assert "rs_within_5pct_of_best: not run" in text
    assert "model fitted on: fit pass (2 runs" in text and "load before [1, 2, 3]" in text


def test_short_cells_get_more_runs_decided_by_their_duration_only() -> None:
    from pvfs.bench.scheduling.study import SHORT_S, reps_for

    short = [0.05, 0.06, 0.09, 0.07, 0.06]        # 64 KiB: every setting well under SHORT_S
    long_ = [1.9, 1.9, 2.0, 1.0, 1.0]             # 1 MiB uncached
    assert reps_for(short, 5, 25) == 25
    assert reps_for(long_, 5, 25) == 5
    assert reps_for(short, 5, None) == 5          # not asked for: as before
    assert reps_for(short, 5, 3) == 5             # never fewer than --reps
    # the median decides, so one slow setting does not make a short cell long ...
    assert reps_for([0.1, 0.1, 0.1, 0.1, 5.0], 5, 25) == 25
    # ... and the comparison of the settings plays no part: any order, the same answer
    assert len({reps_for(list(p), 5, 25) for p in itertools.permutations(short)}) == 1
    assert reps_for([SHORT_S] * 5, 5, 25) == 5    # the boundary is long


def test_targets_of_cells_not_run_are_reported_as_not_run() -> None:
    from pvfs.cli.cmd_study import _render

    res = _cell("random16", 64 << 10, True,
                {"opt1": _tight(0.10), "opt2": _tight(0.10), "opt3": _tight(0.10),
                 "opt4": _tight(0.12), "rs": _tight(0.101)})
    t = targets(res)                              # --workloads random16 --sizes 64k
    assert t["rs_within_5pct_of_best"]["pass"]
    assert t["rs_24pct_below_opt1_single_block_uncached_ge_1MiB"]["pass"] is None
    assert t["mixed_phase_rs_within_3pct_of_oracle_fixed_8pct_behind"]["pass"] is None
    text = _render({"results": res, "targets": t})
    assert "mixed_phase_rs_within_3pct_of_oracle_fixed_8pct_behind: not run" in text


def test_study_workloads_are_checked_before_anything_runs(capsys) -> None:
    from pvfs.cli.main import main

    assert main(["study", "scheduling", "--workloads", "strided,zigzag"]) == 2
    assert "unknown zigzag" in capsys.readouterr().err
    assert main(["study", "scheduling", "--fit-sizes", "none"]) == 2   # no --model either
    assert "nothing to fit" in capsys.readouterr().err


def test_rs_deltas_sum_the_daemons_and_the_runs():
    from pvfs.bench.scheduling.study import _rs_delta, _sum_deltas

    before = [{"picks": {"opt1": 2}, "decisions": {}, "switches": 1, "deciding_s": 0.5},
              {"picks": {}, "decisions": {}, "switches": 0, "deciding_s": 0.0}]
    after = [{"picks": {"opt1": 3}, "decisions": {"x": 1}, "switches": 2, "deciding_s": 0.75},
             {"picks": {"opt3": 1}, "decisions": {"y": 1}, "switches": 1, "deciding_s": 0.25}]
    d = _rs_delta(before, after)
    assert d == {"picks": {"opt1": 1, "opt3": 1}, "decisions": {"x": 1, "y": 1},
                 "switches": 2, "deciding_s": 0.5}
    assert _sum_deltas([d, d])["deciding_s"] == 1.0 and _sum_deltas([d, d])["switches"] == 4


def test_study_cache_runs_only_the_chosen_cache_column(monkeypatch, tmp_path) -> None:
    """``--cache cached|uncached`` (rerunning single cells) reaches ``run_study`` as its cache
    columns; the default runs both."""
    import json

    from pvfs.cli import cmd_study
    from pvfs.cli.main import main

    seen = []

    def fake(*args, **kw):
        seen.append(kw["caches"])
        return {"results": [], "model": {}, "targets": {}, "model_fit_on": {"source": "x"}}

    model = tmp_path / "m.json"
    model.write_text(json.dumps({"model": {"t_over": 0.0}}))
    monkeypatch.setattr(cmd_study, "run_study", fake)
    monkeypatch.setattr(cmd_study.os, "geteuid", lambda: 0)
    monkeypatch.setattr(cmd_study, "emit", lambda *a, **k: None)
    for flag, want in ((["--cache", "cached"], (True,)), (["--cache", "uncached"], (False,)),
                       ([], (False, True))):
        assert main(["study", "scheduling", "--workloads", "strided", "--model", str(model),
                     *flag]) == 0
        assert seen[-1] == want


def test_side_by_side_order_is_shuffled_reproducibly_and_rs_follows_different_settings():
    from pvfs.bench.scheduling.study import ALGOS, run_order

    settings = (*ALGOS, "rs")
    orders = [run_order(settings, "random16/65536/True", i) for i in range(40)]
    assert all(sorted(o) == sorted(settings) for o in orders)
    assert orders == [run_order(settings, "random16/65536/True", i) for i in range(40)]
    assert orders != [run_order(settings, "random32/65536/True", i) for i in range(40)]
    # The rotation it replaced put rs right after opt4 in every run; shuffled, rs comes
    # first or after each of the fixed algorithms.
    before_rs = {o[o.index("rs") - 1] if o.index("rs") else None for o in orders}
    assert before_rs == {None, *ALGOS}


def test_the_pick_cost_splits_rs_distance_from_the_oracle_into_picks_and_running_them():
    # Oracle: opt4 then opt1 (1.0 + 0.2). rs picks opt4 in both phases (its second pick
    # costs 0.5 - 0.2) and runs 10 % slower than its picks in phase 1.
    times = {"opt1": [[2.0, 0.2]] * 3, "opt2": [[2.0, 0.2]] * 3,
             "opt3": [[2.1, 0.2]] * 3, "opt4": [[1.0, 0.5]] * 3,
             "rs": [[1.1, 0.5]] * 3}
    rows = _mixed(times)
    rs = next(r for r in rows if r["algorithm"] == "rs")
    t = targets(rows)["mixed_phase_rs_within_3pct_of_oracle_fixed_8pct_behind"]
    assert "pick_cost" not in t                       # no per-phase decisions recorded
    for run in rs["runs"]:
        run["rs_phases"] = [{"picks": {"opt4": 9, "opt1": 1}}, {"picks": {"opt4": 5}}]
    t = targets(rows)["mixed_phase_rs_within_3pct_of_oracle_fixed_8pct_behind"]
    split = t["pick_cost"]
    assert [p["pick"] for p in split["phases"]] == ["opt4", "opt4"]
    assert [p["oracle"] for p in split["phases"]] == ["opt4", "opt1"]
    assert split["picks_over_oracle"] == pytest.approx(1.5 / 1.2)
    assert split["own_over_picks"] == pytest.approx(1.6 / 1.5)
    assert t["over_oracle"]["rs"] == pytest.approx(
        split["picks_over_oracle"] * split["own_over_picks"])


def test_study_fits_on_the_runs_spread_by_default_and_on_medians_when_asked(monkeypatch):
    """The spread fit became the default by the rule decided before the 2026-11-29 runs
    (docs/scheduling.md); ``--fit-medians`` is the earlier fit."""
    from pvfs.cli import cmd_study
    from pvfs.cli.main import main

    seen = []

    def fake(*args, **kw):
        seen.append(kw["fit_spread"])
        shorts.append(kw["fit_reps_short"])
        return {"results": [], "model": {}, "targets": {}, "model_fit_on": {"source": "x"}}

    monkeypatch.setattr(cmd_study, "run_study", fake)
    monkeypatch.setattr(cmd_study.os, "geteuid", lambda: 0)
    monkeypatch.setattr(cmd_study, "emit", lambda *a, **k: None)
    shorts = []
    for flag, want in (([], True), (["--fit-spread"], True), (["--fit-medians"], False)):
        assert main(["study", "scheduling", "--quick", *flag]) == 0
        assert seen[-1] is want
    assert shorts[-1] is None
    assert main(["study", "scheduling", "--quick", "--fit-reps-short", "8"]) == 0
    assert shorts[-1] == 8
    assert main(["study", "scheduling", "--quick", "--fit-reps-short", "0"]) == 2
