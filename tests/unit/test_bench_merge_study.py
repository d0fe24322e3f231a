"""``bench/scheduling/merge.py`` puts a study run in pieces back together."""

from __future__ import annotations

import pytest

from pvfs.bench.scheduling.merge import merge


def _row(wl, alg, t, size=65536, cached=False):
    ts = [t * 0.99, t, t * 1.01]            # three runs: the interval decides the cell
    return {"workload": wl, "request_bytes": size, "cached": cached, "algorithm": alg,
            "mean_task_service_s": t, "app_service_s": t, "variance": 0.0,
            "runs": [{"mean_task_service_s": v, "app_service_s": v} for v in ts]}


def _piece(wl, rs_t, model=None):
    return {"study": "scheduling", "disk": "ide-2000", "rate": "100mbit", "clients": 14,
            "iods": 2, "model": model or {"B_dr": 1}, "sizes": [65536], "elapsed_s": 10.0,
            "results": [_row(wl, a, 1.0) for a in ("opt1", "opt2", "opt3", "opt4")]
            + [_row(wl, "rs", rs_t)]}


def test_the_targets_are_checked_on_every_piece_together():
    doc = merge([_piece("strided", 1.01), _piece("random16", 1.2)])
    within = doc["targets"]["rs_within_5pct_of_best"]
    assert len(within["cells"]) == 2 and within["misses"] == 1 and not within["pass"]
    assert within["decided_within"] == 1 and within["decided_miss"] == 1
    assert doc["elapsed_s"] == 20.0 and len(doc["results"]) == 10


def test_pieces_of_different_studies_or_a_cell_twice_are_refused():
    with pytest.raises(ValueError, match="model"):
        merge([_piece("strided", 1.0), _piece("random16", 1.0, model={"B_dr": 2})])
    with pytest.raises(ValueError, match="two pieces"):
        merge([_piece("strided", 1.0), _piece("strided", 1.0)])


def test_a_read_and_a_write_of_one_cell_are_two_cells():
    reads, writes = _piece("strided", 1.0), _piece("strided", 1.0)
    for x in writes["results"]:
        x["operation"] = "write"
    doc = merge([reads, writes])
    assert len(doc["targets"]["rs_within_5pct_of_best"]["cells"]) == 2
