"""bench/scheduling/halves.py: which daemon's half of a single-block run was late."""

from __future__ import annotations

from pvfs.bench.scheduling import halves


def _row(alg, op, runs, part_cached=True):
    return {"workload": "single-block", "request_bytes": 64 << 10, "cached": part_cached,
            "operation": op, "algorithm": alg,
            "runs": [{"task_s": t, "mean_task_service_s": sum(t) / len(t)} for t in runs]}


def test_the_odd_tasks_late_are_counted_for_the_second_daemon():
    late = [0.020, 0.045] * 7            # odd tasks (second daemon) 25 ms later
    even = [0.040, 0.020] * 7            # even tasks late
    same = [0.020, 0.021] * 7
    doc = {"fit_results": [_row("opt4", "write", [same])],
           "results": [_row("opt4", "write", [late, same]), _row("opt1", "write", [even]),
                       {"workload": "strided", "request_bytes": 64 << 10, "cached": True,
                        "operation": "write", "algorithm": "opt1", "runs": []}]}
    s = halves.study_halves(doc, "x")
    assert s["counts"]["write/opt4"] == {"runs": 3, "odd_late": 1, "even_late": 0}
    assert s["counts"]["write/others"] == {"runs": 1, "odd_late": 0, "even_late": 1}
    assert [c["pass"] for c in s["cells"]] == ["fit", "scored", "scored"]
    assert s["cells"][1]["odd_ms"] == [45.0, 21.0]
