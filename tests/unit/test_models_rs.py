"""The reactive-scheduling model (pvfs.models.rs): eq. 5.2's boundaries, table 5.2 as a test
vector, the estimation of eq. 5.7-5.10, and the selector's picks in §4.6-5.6's situations."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from pvfs.models import rs

P = rs.Params()  # table 5.2, S_cache 56 MB


def test_defaults_are_table_5_2():
    assert (P.B_dr, P.B_drc, P.C_dist, P.P_dist, P.C_req, P.P_req, P.C_cache, P.T_over) == (
        4.0e6, 9.2e6, 0.9, 0.10, 0.13, 1.0, 0.65, 0.02)
    assert P.E_opt["opt4"] == (0.71, 0.94, 1.05, 0.83, 0.99, 0.92)


@pytest.mark.parametrize("edge", ["lower", "upper"])
def test_t_ioread_is_continuous_at_both_boundaries(edge):
    s = P.S_cache if edge == "lower" else P.S_cache * (1 + P.C_cache)
    below, at, above = (rs.t_ioread(P, s * (1 + k * 1e-9)) for k in (-1, 0, 1))
    assert math.isclose(below, at, rel_tol=1e-6) and math.isclose(at, above, rel_tol=1e-6)
    expect = s / P.B_drc if edge == "lower" else s / P.B_dr
    assert math.isclose(at, expect, rel_tol=1e-12)


def test_t_ioread_middle_blends_bandwidths():
    s = P.S_cache * (1 + P.C_cache / 2)  # x = 1/2
    assert math.isclose(rs.t_ioread(P, s), s / ((P.B_dr + P.B_drc) / 2))
    # monotone between the cases
    xs = [P.S_cache * (1 + P.C_cache * k / 10) for k in range(11)]
    ts = [rs.t_ioread(P, x) for x in xs]
    assert ts == sorted(ts)


def test_table_5_2_vector_predictions():
    # 14 tasks x 1 MB contiguous, cache known empty: T = T_over + E_opt * S / B_dr.
    w = rs.Workload(S_req=14e6, N_req=14, D_req=14, R_req=14e6, cached=0.0)
    assert w.kind() == "ideal"
    assert math.isclose(rs.predict(P, "opt2", w), 0.02 + 14e6 / 4e6)
    assert math.isclose(rs.predict(P, "opt4", w), 0.02 + 0.71 * 14e6 / 4e6)
    # strided: 16 regions per request -> E_req = 1 / (0.87 + 0.13/16)
    s = rs.Workload(S_req=14e6, N_req=14, D_req=14 * 16, R_req=14e6, cached=0.0)
    assert s.kind() == "disjoint"
    assert math.isclose(rs.e_req(P, s), 1 / (0.87 + 0.13 / 16))
    # sparse: a tenth of the range requested -> E_dist = 1 / (0.1 + 0.9 * 0.1 ** 0.1)
    r = rs.Workload(S_req=1e6, N_req=14, D_req=14, R_req=10e6, cached=0.0)
    assert r.kind() == "sparse"
    assert math.isclose(rs.e_dist(P, r), 1 / (0.1 + 0.9 * 0.1 ** 0.1))
    # the thesis' rule without a measured fraction: S_req < S_cache -> cached column
    assert rs.is_cached(P, rs.Workload(1e6, 1, 1, 1e6)) and not rs.is_cached(
        P, rs.Workload(60e6, 1, 1, 60e6))


def test_e_factors_are_one_for_ideal_workloads():
    w = rs.Workload(S_req=8e6, N_req=8, D_req=8, R_req=8e6)
    assert rs.e_req(P, w) == 1.0 and rs.e_dist(P, w) == 1.0


def test_estimation_eq_5_7_to_5_10():
    # 3 of 14 tasks' requests seen so far, 1 MB each, 16 regions each, spread over 5 MB.
    w = rs.estimate(n_file=14, n_req_o=3, s_req_o=3_000_000, d_req_o=48, r_req_o=5_000_000)
    assert (w.N_req, w.S_req, w.D_req, w.R_req) == (14, 14_000_000, 224, 5_000_000)
    # R_req is never below the data seen (eq. 5.10)
    assert rs.estimate(2, 2, 4_000_000, 2, 1_000).R_req == 4_000_000
    # N_file unknown: the observed requests are all there are
    assert rs.estimate(0, 4, 400, 4, 400).N_req == 4


def test_hint_replaces_the_estimate():
    w = rs.from_hint({"size": 14 << 20, "requests": 14, "regions": 14, "range": 14 << 20})
    assert (w.S_req, w.N_req) == (14 << 20, 14)


# -- the selector in the situations the thesis discusses --------------------------------------

def pick(**kw) -> str:
    return rs.select(P, rs.Workload(**kw))[0]


def test_large_uncached_blocks_pick_disk_directed_opt4():
    # §4.4 / fig. 6.1: uncached single-block reads of >= 1 MB per task -> opt4
    assert pick(S_req=14e6, N_req=14, D_req=14, R_req=14e6, cached=0.0) == "opt4"
    # ... also from the thesis' own rule (S_req beyond the cache)
    assert pick(S_req=200e6, N_req=14, D_req=14, R_req=200e6) == "opt4"


def test_opt4s_gather_is_charged_where_it_matters():
    """opt4's wait for a collective's requests (csrc/sched.c ``gather``) is added to its
    prediction: nothing beside a 14 MB operation on a slow disk, decisive on a small one."""
    p = rs.thesis_params()
    big = rs.Workload(S_req=14e6, N_req=14, D_req=14, R_req=14e6, cached=0.0)
    assert rs.select(p, big, fixed={"opt4": 0.01})[0] == "opt4"
    fast = replace(p, B_dr=2e9, B_drc=8e9)           # a disk of today, not of 2000
    small = rs.Workload(S_req=2e6, N_req=14, D_req=14, R_req=40e6, cached=0.0)
    pick, preds = rs.select(fast, small)
    assert pick == "opt4"
    pick, charged = rs.select(fast, small, fixed={"opt4": 0.01})
    assert charged["opt4"] == preds["opt4"] + 0.01 and pick != "opt4"


def test_strided_picks_opt1():
    # §4.5 and §5.4: the model predicts opt1 for strided reads (cached)
    assert pick(S_req=14e6, N_req=14, D_req=224, R_req=14e6, cached=1.0) == "opt1"


def test_random_blocks_uncached_opt4_cached_opt1():
    # §4.6: opt4 best for uncached random blocks, opt1 when the data is cached
    assert pick(S_req=2e6, N_req=14, D_req=14, R_req=40e6, cached=0.0) == "opt4"
    assert pick(S_req=2e6, N_req=14, D_req=14, R_req=40e6, cached=1.0) == "opt1"


def test_all_predictions_zero_fall_back_to_opt1():
    # §5.6: tiny random 32-block reads made every prediction ~0; the fix is opt1, not opt4
    w = rs.Workload(S_req=2000, N_req=14, D_req=14, R_req=1e6, cached=1.0)
    assert all(rs.io_time(P, a, w) < P.zero_s for a in rs.ALGORITHMS)
    assert rs.select(P, w)[0] == "opt1"


def test_assuming_no_cache_picks_opt4_for_cached_random_blocks():
    # §5.6, fig. 5.10: with the cache reported empty, cached random blocks get opt4 (the
    # thesis' shortfall that a measured resident fraction removes)
    assert pick(S_req=2e6, N_req=14, D_req=14, R_req=40e6, cached=0.0) == "opt4"


def test_params_round_trip_and_validation():
    q = rs.Params(B_dr=5e6, E_opt={**rs.TABLE_5_3, "opt3": (1, 1, 1, 1, 1, 1)})
    assert rs.Params.from_wire(q.to_wire()) == q
    assert rs.Params.from_table(q.to_table()) == q
    with pytest.raises(ValueError):
        rs.Params(C_req=1.5)
    with pytest.raises(ValueError):
        rs.Params.from_wire({"B_xx": 1})
