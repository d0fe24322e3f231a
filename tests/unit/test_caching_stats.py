"""The caching study's one statistic: medians with an order-statistic interval, per row."""

from __future__ import annotations

import math

import pytest

from pvfs.bench.caching.stats import MIN_RUNS_95, coverage, median_interval, ratio_interval
from pvfs.bench.caching.study import DEFAULT_REPEAT, QUICK_REPEAT, summarise


def test_coverage_is_the_binomial_tail():
    assert coverage(1, 1) == 0.0
    assert coverage(3, 1) == 0.75
    assert coverage(5, 1) == 1 - 2 / 32
    assert coverage(6, 1) == pytest.approx(1 - 2 / 64)
    # [x(2), x(9)] of 10 runs: 1 - 2 P(B <= 1) = 1 - 2 * 11 / 1024
    assert coverage(10, 2) == pytest.approx(1 - 22 / 1024)
    with pytest.raises(ValueError):
        coverage(4, 3)


def test_fewest_runs_for_95():
    assert MIN_RUNS_95 == 6 == DEFAULT_REPEAT
    assert median_interval([1.0, 2.0, 3.0][:QUICK_REPEAT])[3] == 0.75  # quick: an interval
    assert median_interval([3.0, 1.0, 2.0, 5.0, 4.0])[3] < 0.95
    assert median_interval([3.0, 1.0, 2.0, 5.0, 4.0, 6.0])[3] >= 0.95


def test_median_interval_narrows_with_runs():
    med, lo, hi, level = median_interval([5.0, 1.0, 3.0])
    assert (med, lo, hi, level) == (3.0, 1.0, 5.0, 0.75)  # the range, 75 %
    xs = [float(i) for i in range(1, 21)]  # 20 runs: [x(6), x(15)] covers 95.9 %
    med, lo, hi, level = median_interval(xs)
    assert med == 10.5 and (lo, hi) == (6.0, 15.0)
    assert level >= 0.95 and coverage(20, 7) < 0.95
    assert median_interval([2.0]) == (2.0, 2.0, 2.0, 0.0)
    with pytest.raises(ValueError):
        median_interval([])


def test_ratio_interval_pairs_rounds():
    # round 2 was slow for both: paired ratios stay 0.9, the unpaired ones would not
    med, lo, hi, _ = ratio_interval([0.9, 1.8, 0.9], [1.0, 2.0, 1.0])
    assert math.isclose(med, 0.9) and math.isclose(lo, 0.9) and math.isclose(hi, 0.9)
    with pytest.raises(ValueError):
        ratio_interval([1.0], [1.0, 2.0])


def _run(t: float, hits: int) -> dict:
    return {"time_s": t, "local_hit_rate": 0.5, "global_hit_rate": 0.1,
            "global": {"hits": hits}, "disks": [], "client": {}, "local": {}, "ops": 1,
            "bytes": 1}


def test_summarise_keeps_the_median_not_the_minimum():
    base = [_run(t, 0) for t in (10.0, 10.0, 10.0, 10.0, 10.0, 10.0)]
    runs = [_run(t, h) for t, h in ((7.0, 1), (9.5, 2), (9.6, 3), (9.7, 4), (9.8, 5),
                                    (12.0, 6))]
    row = summarise("lu", "runtime10", runs, base)
    assert row["time_s"] == pytest.approx(9.65) and row["time_s"] != 7.0
    assert row["time_norm"] == pytest.approx(0.965)
    assert row["time_norm_lo"] == pytest.approx(0.7) and row["time_norm_hi"] == pytest.approx(1.2)
    assert row["time_norm_level"] >= 0.95
    assert row["runs_s"] == [7.0, 9.5, 9.6, 9.7, 9.8, 12.0] and len(row["runs"]) == 6
    assert row["global"]["hits"] == 3  # the lower-median run's counters
    alone = summarise("lu", "none", runs, None)
    assert alone["time_norm"] is None and alone["time_norm_hi"] is None
