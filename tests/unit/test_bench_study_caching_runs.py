"""``bench/caching/runs.py``: a policy's runs against another's, and the paths they took."""

from __future__ import annotations

from pvfs.bench.caching.runs import against, paths


def test_against_tells_apart_what_differs_and_not_what_does_not():
    a = [10.0, 10.2, 9.9, 10.1, 10.0, 10.3, 9.8, 10.1]
    ratio, lo, hi, p = against(list(a), list(a))
    assert ratio == 1.0 and lo <= 1.0 <= hi and p == 1.0
    slower = [x * 1.1 for x in a]
    ratio, lo, hi, p = against(slower, a)
    assert abs(ratio - 1.1) < 1e-9 and 1.0 < lo <= ratio <= hi and p < 0.01


def test_paths_reads_the_median_run():
    def run(t, g, d, busy):
        return {"time_s": t, "client": {"global_reads": g, "direct_reads": d},
                "disks": [{"accesses": 10, "busy_s": busy}, {"accesses": 12, "busy_s": busy - 1}]}
    text = paths({"runs": [run(10.0, 5, 3, 9.5), run(11.0, 7, 1, 10.0), run(12.0, 6, 2, 11.9)]})
    assert "via gcache 6 direct 2" in text and "accesses 22" in text and "idle 0.500 s" in text
    assert paths({"runs": []}) == ""
