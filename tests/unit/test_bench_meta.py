"""bench/meta.py: the mdtest-style phases on a local directory, and the report arithmetic."""

from __future__ import annotations

import os

import pytest

from pvfs.bench.meta import build_report, measure_target, op_delta, phase_names, run_phases


@pytest.mark.parametrize("layout", ["own", "shared"])
def test_phases_create_stat_and_remove_every_file(tmp_path, layout) -> None:
    base = tmp_path / "m"
    rates = run_phases(str(base), procs=2, files=20, layout=layout)
    assert set(rates) == {"create", "stat", "remove"}
    assert all(r > 0 for r in rates.values())
    assert not base.exists()  # every file and directory removed again


def test_a_failing_worker_fails_the_phase(tmp_path) -> None:
    base = tmp_path / "m"
    base.mkdir()
    (base / "f.0.3").write_text("")  # O_EXCL create of this name fails
    with pytest.raises(RuntimeError, match="FileExistsError"):
        run_phases(str(base), procs=1, files=5, layout="shared")


def test_measure_target_runs_every_phase_and_the_ls(tmp_path) -> None:
    got = measure_target(str(tmp_path), [1], files=5, ls_entries=30, probe=None,
                         drop=False)
    assert set(got["rates"]) == set(phase_names([1], 30))
    assert os.listdir(tmp_path) == []


def test_report_compares_the_subject_with_the_best_other_target() -> None:
    runs = {"pvfs": [{"rates": {"create-own-p1": 300.0}}, {"rates": {"create-own-p1": 500.0}}],
            "gluster": [{"rates": {"create-own-p1": 100.0}}],
            "moosefs": [{"rates": {"create-own-p1": 200.0}}]}
    rep = build_report(runs, ["create-own-p1"], "pvfs")["create-own-p1"]
    assert rep["median"]["pvfs"] == 400.0
    assert rep["best_peer"] == "moosefs"
    assert rep["ratio_vs_best"] == pytest.approx(2.0)


def test_op_delta_keeps_only_what_changed() -> None:
    before = {"mgr": {"create": [10, 1.0], "lookup": [5, 0.5]}}
    after = {"mgr": {"create": [30, 3.5], "lookup": [5, 0.5]}, "iod0": {"create": [20, 1.0]}}
    assert op_delta(before, after) == {"mgr": {"create": [20, 2.5]},
                                       "iod0": {"create": [20, 1.0]}}
