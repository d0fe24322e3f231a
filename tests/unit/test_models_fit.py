"""Appendix B's fit (pvfs.models.fit) recovers the parameters of runs the model made."""

from __future__ import annotations

import math

from pvfs.models import fit, rs

TRUE = rs.Params(T_over=0.004, B_dr=5e6, B_drc=11e6, C_req=0.2, C_dist=0.8, P_dist=0.3,
                 E_opt={**rs.TABLE_5_3, "opt4": (0.6, 0.9, 1.1, 0.8, 1.0, 0.95)})
NPROCS, NIODS = 14, 2


def synth() -> list[fit.Obs]:
    out = []
    for wl in fit.PIECES:
        for size in (64 << 10, 1 << 20, 4 << 20):
            for cached in (False, True):
                for alg in rs.ALGORITHMS:
                    o = fit.Obs(wl, size, cached, alg, 0.0)
                    w, _ = fit.workload_of(o, NPROCS, NIODS)
                    n = fit.PIECES[wl] if wl.startswith("random") else 1
                    out.append(fit.Obs(wl, size, cached, alg, rs.predict(TRUE, alg, w) * n))
    return out


def test_fit_recovers_the_parameters_that_made_the_runs():
    p, res = fit.fit(synth(), NPROCS, NIODS, s_cache=TRUE.S_cache)
    for k in ("T_over", "B_dr", "B_drc", "C_req"):
        assert math.isclose(getattr(p, k), getattr(TRUE, k), rel_tol=1e-6), k
    assert abs(p.C_dist - TRUE.C_dist) <= 0.02 and abs(p.P_dist - TRUE.P_dist) <= 0.02
    for alg in rs.ALGORITHMS:
        for got, want in zip(p.E_opt[alg], TRUE.E_opt[alg]):
            assert math.isclose(got, want, rel_tol=1e-3), alg
    assert max(abs(r["residual"]) for r in res) < 0.02


def test_e_opt_comes_from_the_end_case_and_zero_from_where_opt1_is_best():
    """opt4 loses on small uncached blocks and wins on large ones (chapter 4): the table takes
    the large end (as the thesis did), the ~0 threshold keeps opt1 for the small ones."""
    obs = []
    for size, t2, t4, t1 in ((64 << 10, 0.08, 0.09, 0.06), (1 << 20, 2.0, 1.4, 2.05)):
        for alg, t in (("opt1", t1), ("opt2", t2), ("opt3", t2), ("opt4", t4)):
            obs.append(fit.Obs("single-block", size, False, alg, t))
    p, _ = fit.fit(obs, NPROCS, NIODS)
    assert math.isclose(p.E_opt["opt4"][0], 1.4 / 2.0, rel_tol=0.05)
    small = fit.workload_of(obs[0], NPROCS, NIODS)[0]
    large = fit.workload_of(obs[4], NPROCS, NIODS)[0]
    assert rs.select(p, small)[0] == "opt1"
    assert rs.select(p, large)[0] == "opt4"
