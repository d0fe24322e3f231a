"""The scheduling study's target checks (``pvfs.bench.scheduling.study.targets``) on made-up results:
what passes, what fails, and the per-phase best that defines the mixed-phase workload."""

from __future__ import annotations

import itertools

import pytest

from pvfs.bench.scheduling.study import targets
from pvfs.bench.scheduling.runner import MIXED_PHASES


def _cell(wl, size, cached, times: dict[str, float]) -> list[dict]:
    return [{"workload": wl, "request_bytes": size, "cached": cached, "algorithm": a,
             "app_service_s": t, "mean_task_service_s": t, "variance": 0.0}
            for a, t in times.items()]


def _mixed(phase_times: dict[str, list[list[float]]]) -> list[dict]:
    """Mixed-phase rows; ``phase_times[alg]`` is a list of runs, each the phases' app times."""
    rows = []
    for a, runs in phase_times.items():
        totals = [sum(run) for run in runs]
        mean = sum(totals) / len(totals)
        rows.append({"workload": "mixed-phase", "request_bytes": None, "cached": None,
                     "algorithm": a, "app_service_s": mean, "mean_task_service_s": mean,
                     "variance": 0.0,
                     "runs": [{"app_service_s": t, "mean_task_service_s": t,
                               "phases": [{"app_service_s": p} for p in run]}
                              for t, run in zip(totals, runs)]})
    return rows


def test_rs_within_5pct_and_below_opt1() -> None:
    res = (_cell("single-block", 1 << 20, False,
                 {"opt1": 2.0, "opt2": 1.9, "opt3": 2.0, "opt4": 1.0, "rs": 1.04})
           + _cell("random16", 64 << 10, True,
                   {"opt1": 0.10, "opt2": 0.10, "opt3": 0.10, "opt4": 0.12, "rs": 0.104}))
    t = targets(res)
    assert t["rs_within_5pct_of_best"]["pass"]
    assert t["rs_24pct_below_opt1_single_block_uncached_ge_1MiB"]["pass"]
    res[-1]["mean_task_service_s"] = 0.106                     # rs 6 % behind: a miss
    assert not targets(res)["rs_within_5pct_of_best"]["pass"]


def test_the_per_phase_best_takes_each_phase_from_its_fastest_fixed_algorithm() -> None:
    # Two phases: opt4 wins the first (1.0 s against 2.0), loses the second (0.5 against 0.2).
    fixed = {"opt1": [[2.0, 0.2], [2.0, 0.2]], "opt2": [[2.0, 0.2], [2.0, 0.2]],
             "opt3": [[2.1, 0.2], [2.1, 0.2]], "opt4": [[1.0, 0.5], [1.0, 0.5]]}
    res = _mixed({**fixed, "rs": [[1.0, 0.2], [1.1, 0.2]]})
    t = targets(res)
    pp = t["mixed_phase_per_phase_best"]
    assert pp["per_phase_best_s"] == pytest.approx(1.2)
    assert pp["fixed_over_best"]["opt4"] == pytest.approx(0.25)
    assert pp["fixed_over_best"]["opt1"] == pytest.approx(1.2 / 1.2 + 1.0 / 1.2 - 1)
    assert pp["reactive_over_best"] == pytest.approx(1.25 / 1.2 - 1)
    mixed = t["mixed_phase_rs_10pct_better_app_than_every_fixed"]
    assert mixed["pass"]                                       # 1.25 s against opt4's 1.5 s
    assert mixed["rs_better_by"]["opt4"] == pytest.approx(1 - 1.25 / 1.5)


def test_mixed_phase_fails_when_one_fixed_algorithm_is_close() -> None:
    res = _mixed({"opt1": [[2.0, 0.2]], "opt2": [[2.0, 0.2]], "opt3": [[2.0, 0.2]],
                  "opt4": [[1.0, 0.25]], "rs": [[1.0, 0.2]]})
    assert not targets(res)["mixed_phase_rs_10pct_better_app_than_every_fixed"]["pass"]


def test_the_mixed_phases_switch_cache_state_and_size_and_cover_small_uncached_phases() -> None:
    kinds = {(size >= 1 << 20, cached) for _, size, cached in MIXED_PHASES}
    assert {(True, False), (False, False), (False, True), (True, True)} <= kinds
    for a, b in itertools.pairwise(MIXED_PHASES):
        assert a != b                                          # every boundary changes something


def test_the_rendered_table_reports_the_per_phase_best() -> None:
    from pvfs.cli.cmd_study import _render

    res = _mixed({"opt1": [[2.0, 0.2]], "opt2": [[2.0, 0.2]], "opt3": [[2.0, 0.2]],
                  "opt4": [[1.0, 0.5]], "rs": [[1.0, 0.2]]})
    text = _render({"results": res, "targets": targets(res)})
    assert "mixed_phase_rs_10pct_better_app_than_every_fixed: PASS" in text
    assert "per-phase best (1.200 s)" in text and "opt4 +25%" in text


def _runs(cell_rows: list[dict], alg: str, values: list[float]) -> None:
    row = next(r for r in cell_rows if r["algorithm"] == alg)
    row["runs"] = [{"mean_task_service_s": v, "app_service_s": v} for v in values]
    row["mean_task_service_s"] = sum(values) / len(values)


def test_a_miss_within_the_runs_noise_is_told_from_one_beyond_it() -> None:
    times = {"opt1": 0.10, "opt2": 0.12, "opt3": 0.12, "opt4": 0.2, "rs": 0.11}
    res = _cell("random32", 64 << 10, False, times)
    _runs(res, "opt1", [0.08, 0.12, 0.10, 0.09, 0.11])
    _runs(res, "rs", [0.09, 0.13, 0.11, 0.10, 0.12])          # +10 %, runs spread +-20 %
    t = targets(res)["rs_within_5pct_of_best"]
    assert not t["pass"] and t["misses"] == 1 and t["misses_beyond_noise"] == 0
    lo, hi = t["cells"][0]["ci95"]
    assert lo < 0.05 and hi > 0.10
    _runs(res, "opt1", [0.100, 0.101, 0.099, 0.100, 0.100])
    _runs(res, "rs", [0.110, 0.111, 0.109, 0.110, 0.110])     # +10 %, tight: beyond noise
    t = targets(res)["rs_within_5pct_of_best"]
    assert t["misses_beyond_noise"] == 1 and t["cells"][0]["ci95"][0] > 0.05


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
                {"opt1": 0.10, "opt2": 0.10, "opt3": 0.10, "opt4": 0.12, "rs": 0.104})
    t = targets(res)                              # --workloads random16 --sizes 64k
    assert t["rs_within_5pct_of_best"]["pass"]
    assert t["rs_24pct_below_opt1_single_block_uncached_ge_1MiB"]["pass"] is None
    assert t["mixed_phase_rs_10pct_better_app_than_every_fixed"]["pass"] is None
    text = _render({"results": res, "targets": t})
    assert "mixed_phase_rs_10pct_better_app_than_every_fixed: not run" in text


def test_study_workloads_are_checked_before_anything_runs(capsys) -> None:
    from pvfs.cli.main import main

    assert main(["study", "scheduling", "--workloads", "strided,zigzag"]) == 2
    assert "unknown zigzag" in capsys.readouterr().err
    assert main(["study", "scheduling", "--workloads", "strided"]) == 2   # no --model
    assert "needs --model" in capsys.readouterr().err


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
        return {"results": [], "model": {}, "targets": {}}

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
