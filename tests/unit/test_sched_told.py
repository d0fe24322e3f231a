"""bench/scheduling/told.py: figs. 5.7-5.11 scored from runs' columns (issue 31)."""

import pytest

from pvfs.bench.scheduling import told


def _row(alg: str, cached: bool, vals: list[float]) -> dict:
    return {"workload": "strided", "request_bytes": 2 << 20, "cached": cached,
            "operation": "read", "algorithm": alg, "mean_task_service_s": vals[0],
            "runs": [{"mean_task_service_s": v} for v in vals]}


def _run(cached_rs: float) -> dict:
    rows = []
    for cached in (False, True):
        for alg, t in (("opt1", 1.0), ("opt2", 1.2), ("opt3", 1.3), ("opt4", 1.4)):
            rows.append(_row(alg, cached, [t, t * 1.001, t * 0.999]))
        rows.append(_row("rs", cached, [cached_rs if cached else 1.0] * 3))
        rows.append(_row("rs@zero", cached, [1.3] * 3))
    return {"disk": "ide-2000", "cache_reports": ["zero"], "results": rows}


def test_each_run_gives_only_its_column_and_a_cell_is_taken_once():
    cells = told.cells_of([(_run(1.0), "uncached"), (_run(2.0), "cached")])
    assert sorted(k[0] for k in cells) == [False, True]
    assert cells[(True, "strided", 2 << 20)]["rs"]["mean_task_service_s"] == 2.0
    with pytest.raises(ValueError, match="two runs"):
        told.cells_of([(_run(1.0), "both"), (_run(2.0), "cached")])


def test_settings_are_counted_within_over_or_undecided_per_column():
    cells = told.cells_of([(_run(1.0), "uncached"), (_run(2.0), "cached")])
    s = told.score_all(cells, ["rs", "rs@zero"])["summary"]
    assert s["rs/uncached"]["within"] == 1 and s["rs/cached"]["over"] == 1
    assert s["rs@zero/cached"]["over"] == 1
    assert s["rs/cached"]["median_over_best"] == pytest.approx(1.0)
