"""``bench/scheduling/refit.py`` pools several studies' fixed-algorithm runs."""

from __future__ import annotations

import pytest

from pvfs.bench.scheduling.refit import refit, seen_columns
from pvfs.models import fit, rs

TRUE = rs.Params(T_over=0.004, B_dr=5e6, B_drc=11e6)
CELL = ("strided", 64 << 10, True)


def _study(cell_times: dict[str, float], reps: int, clients: int = 14) -> dict:
    """Every cell as the model predicts it, but ``CELL`` measured as ``cell_times``."""
    results = []
    for wl in fit.PIECES:
        for size in (64 << 10, 1 << 20):
            for cached in (False, True):
                for alg in rs.ALGORITHMS:
                    if (wl, size, cached) == CELL:
                        t = cell_times[alg]
                    else:
                        o = fit.Obs(wl, size, cached, alg, 0.0)
                        w, _ = fit.workload_of(o, clients, 2)
                        n = fit.PIECES[wl] if wl.startswith("random") else 1
                        t = rs.predict(TRUE, alg, w) * n
                    results.append({"workload": wl, "request_bytes": size, "cached": cached,
                                    "algorithm": alg, "mean_task_service_s": t,
                                    "runs": [{"mean_task_service_s": t}] * reps})
    return {"disk": "ide-2000", "clients": clients, "iods": 2, "reps": reps,
            "model": {"S_cache": TRUE.S_cache}, "results": results}


def test_pooled_studies_weigh_their_runs() -> None:
    # Study A (1 run) has opt3 fastest on the cell; B (3 runs) opt1 by more: pooled, opt1.
    a = _study({"opt1": 0.030, "opt2": 0.030, "opt3": 0.024, "opt4": 0.04}, reps=1)
    b = _study({"opt1": 0.022, "opt2": 0.027, "opt3": 0.027, "opt4": 0.04}, reps=3)
    w, _ = fit.workload_of(fit.Obs(*CELL, "opt2", 0.0), 14, 2)
    assert rs.select(refit(a)[0], w)[0] == "opt3"
    assert rs.select(refit(a, b)[0], w)[0] == "opt1"
    obs = {r["algorithm"]: r["observed_s"] for r in refit(a, b)[1]
           if (r["workload"], r["request_bytes"], r["cached"]) == CELL}
    assert obs["opt1"] == pytest.approx((0.030 + 3 * 0.022) / 4)


def test_studies_of_different_setups_are_not_pooled() -> None:
    t = {"opt1": 0.03, "opt2": 0.03, "opt3": 0.03, "opt4": 0.03}
    with pytest.raises(ValueError, match="clients"):
        refit(_study(t, 1), _study(t, 1, clients=4))


def test_the_columns_the_daemons_saw_are_pooled_from_rs_rows() -> None:
    a = _study({"opt1": 0.03, "opt2": 0.03, "opt3": 0.03, "opt4": 0.03}, reps=1)
    b = _study({"opt1": 0.03, "opt2": 0.03, "opt3": 0.03, "opt4": 0.03}, reps=1)
    for s, dec in ((a, {"sparse/cached->opt3": 30, "sparse/uncached->opt3": 10}),
                   (b, {"sparse/cached->opt1": 50, "ideal/uncached->opt2": 10})):
        s["results"].append({"workload": "random16", "request_bytes": 64 << 10,
                             "cached": False, "algorithm": "rs", "mean_task_service_s": 0.1,
                             "rs": {"decisions": dec}})
    cols = seen_columns([a, b])
    sparse, ideal = rs.CLASSES.index("sparse"), rs.CLASSES.index("ideal")
    assert cols == {("random16", 64 << 10, False): {sparse + 3: 0.8, sparse: 0.1,
                                                     ideal: 0.1}}
