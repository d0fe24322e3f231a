"""bench/scheduling/pool.py (runs of one study pooled) and writes.py (the write part refitted,
scored on fresh runs) -- issue 31."""

import json
from pathlib import Path

import pytest

from pvfs.bench.scheduling import pool, writes

ROOT = Path(__file__).resolve().parents[2]
S26 = ROOT / "bench/results/study-scheduling-ide-2000-quick-s26-2026-11-29.json"


def _mixed_row(alg: str, phase_s: list[list[float]]) -> dict:
    runs = [{"mean_task_service_s": sum(ph), "app_service_s": sum(ph),
             "phases": [{"mean_task_service_s": t} for t in ph]} for ph in phase_s]
    return {"workload": "mixed-phase", "request_bytes": None, "cached": None,
            "operation": "read", "algorithm": alg, "mean_task_service_s": 0.0, "runs": runs}


def _doc(scale: float, model: dict | None = None) -> dict:
    fixed = {"opt1": [1.0, 2.0], "opt2": [2.0, 1.0], "opt3": [2.0, 2.0], "opt4": [1.5, 1.5],
             "rs": [1.0, 1.0]}
    return {"disk": "ide-2000", "clients": 14, "iods": 2, "model": model or {"x": 1},
            "results": [_mixed_row(a, [[v * scale for v in ph]] * 3)
                        for a, ph in fixed.items()]}


def test_pooled_runs_are_concatenated_and_scored_against_the_per_phase_oracle():
    out = pool.mixed([_doc(1.0), _doc(1.01)])
    assert out["runs"] == {"opt1": 6, "opt2": 6, "opt3": 6, "opt4": 6, "rs": 6}
    s = out["score"]
    assert s["schedule"] == ["opt1", "opt2"]
    assert s["over_oracle"]["rs"] == pytest.approx(1.0)
    assert s["over_oracle"]["opt4"] == pytest.approx(1.5)
    assert s["rs_result"] == "met" and s["fixed_result"] == "met"


def test_documents_of_different_studies_are_not_pooled():
    with pytest.raises(ValueError, match="model"):
        pool.pool_rows([_doc(1.0), _doc(1.0, model={"x": 2})])
    twice = _doc(1.0)
    twice["results"].append(twice["results"][0])
    with pytest.raises(ValueError, match="twice"):
        pool.pool_rows([twice])


def test_write_rows_pool_a_cell_of_the_fitting_pass_and_the_scored_runs():
    def row(alg, vals):
        return {"workload": "strided", "request_bytes": 65536, "cached": False,
                "operation": "write", "algorithm": alg, "mean_task_service_s": 0.0,
                "runs": [{"mean_task_service_s": v} for v in vals]}
    study = {"fit_results": [row("opt1", [1.0, 2.0, 9.0])],
             "results": [row("opt1", [3.0, 4.0]), row("rs", [0.1]),
                         {**row("opt2", [5.0]), "operation": "read"}]}
    [r] = writes.write_rows(study)
    assert len(r["runs"]) == 5 and r["median_mean_task_service_s"] == 3.0


def test_the_comparison_says_better_worse_or_undecided_on_its_interval():
    keys = [("w", i, False, "opt1") for i in range(12)]
    small = {k: {"abs_ln": 0.01 * (1 + i % 3)} for i, k in enumerate(keys)}
    large = {k: {"abs_ln": 0.5 + 0.01 * (i % 3)} for i, k in enumerate(keys)}
    assert writes.compare(large, small)["verdict"] == "better"
    assert writes.compare(small, large)["verdict"] == "worse"
    assert writes.compare(small, small)["verdict"] == "undecided"
    assert writes.compare(small, {})["verdict"] == "undecided"


def test_the_refit_keeps_the_read_part_and_fits_the_write_part_again():
    study = json.loads(S26.read_text())
    new, res = writes.refit(study)
    old = writes.rs.Params.from_wire(study["model"])
    assert {k: v for k, v in new.to_wire().items() if k != "write"} == \
        {k: v for k, v in old.to_wire().items() if k != "write"}
    assert new.write is not None and new.write.to_wire() != old.write.to_wire()
    assert {r["request_bytes"] for r in res} == {65536, 524288, 1048576}
