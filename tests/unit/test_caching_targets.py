"""Issue 32's targets read from a study result (``bench/caching/targets.py``)."""

from __future__ import annotations

from pvfs.bench.caching.stats import ratio_interval
from pvfs.bench.caching.targets import caching_targets

TRACES = ("lu", "cholesky", "titan", "mining", "pgrep", "db2")


def _row(trace, policy, runs, base):
    norm, lo, hi, level = ratio_interval(runs, base)
    return {"trace": trace, "policy": policy, "runs_s": runs, "time_norm": norm,
            "time_norm_lo": lo, "time_norm_hi": hi, "time_norm_level": level}


def _doc(times: dict[str, list[float]]) -> dict:
    base = [10.0] * 6
    rows = []
    for t in TRACES:
        for pol, runs in times.items():
            rows.append(_row(t, pol, runs, base))
    return {"results": rows}


def test_met_when_bypass_gains_and_ours_beat_the_thresholds():
    got = caching_targets(_doc({"both": [10.0] * 6,
                                "runtime10": [9.5, 9.4, 9.5, 9.6, 9.5, 9.5],
                                "runtime25": [9.9] * 6,
                                "adaptive": [9.0, 9.1, 9.0, 9.2, 9.0, 9.1],
                                "sketch": [9.6] * 6}))
    assert got["bypass"]["met"] is True and got["bypass"]["lu"]["policies"]["runtime10"]["met"]
    assert not got["bypass"]["lu"]["policies"]["runtime25"]["met"]  # only 1 % faster
    ad = got["adaptive"]
    assert ad["met"] is True and ad["better_on"] == 6 and ad["lu"]["ours"] == "adaptive"


def test_missed_when_the_interval_reaches_one_or_ours_trail():
    got = caching_targets(_doc({"both": [10.0] * 6,
                                "runtime10": [9.0, 9.2, 9.4, 9.5, 9.5, 10.3],  # hi > 1
                                "runtime25": [10.5] * 6,
                                "adaptive": [9.6, 9.6, 9.6, 9.6, 9.6, 9.6],
                                "sketch": [9.8] * 6}))
    assert got["bypass"]["met"] is False
    assert got["bypass"]["db2"]["policies"]["runtime10"]["hi"] > 1.0
    ad = got["adaptive"]
    assert ad["met"] is False and ad["as_good_on"] == 0  # 9.6 against runtime10's 9.45


def test_unknown_when_a_trace_was_not_run():
    doc = _doc({"both": [10.0] * 6, "runtime10": [9.0] * 6, "adaptive": [8.0] * 6})
    doc["results"] = [r for r in doc["results"] if r["trace"] != "db2"]
    got = caching_targets(doc)
    assert got["bypass"]["met"] is None and got["adaptive"]["met"] is None
