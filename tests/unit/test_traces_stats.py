"""Trace statistics: sizes, sequentiality, reuse distances; metrics and deterministic data."""

from __future__ import annotations

import pytest

from pvfs.traces.format import FileEntry, Op, Record, Trace
from pvfs.traces.generators import generate
from pvfs.traces.metrics import (
    comparable,
    counter_delta,
    format_result,
    latency_summary,
    percentile,
    three_metrics,
)
from pvfs.traces.replay.data import file_key, pattern, pattern_list
from pvfs.traces.stats import format_stats, reuse_distances, trace_stats


def test_reuse_distances_are_lru_stack_distances() -> None:
    seq = [(0, b) for b in [1, 2, 3, 1, 1, 2, 4, 3]]
    dists, cold = reuse_distances(seq)
    assert cold == 4
    assert dists == [2, 0, 2, 3]


def test_sequential_and_consecutive() -> None:
    recs = [Record(0, 0, Op.READ, 0, off, 10) for off in (0, 10, 30, 5)]
    tr = Trace(nprocs=1, files=[FileEntry(0, "f")], records=recs)
    st = trace_stats(tr, block=10)
    assert st["consecutive_fraction"] == pytest.approx(1 / 3)
    assert st["sequential_fraction"] == pytest.approx(2 / 3)
    assert st["bytes_read"] == 40 and st["request_size_histogram"] == {"16": 4}
    assert st["reuse"]["cold"] == 3 and st["reuse"]["reuses"] == 2  # (5, 10): blocks 0, 1
    assert "sequential" in format_stats(st)


def test_stats_of_generated_traces() -> None:
    st = trace_stats(generate("mining", 2, {"db": 65536, "passes": 3, "req": 16384}))
    assert st["ops"]["read"] == 2 * 3 * 4
    assert st["sequential_fraction"] > 0.5
    assert st["reuse"]["reuses"] == 2 * 2 * 16  # passes 2 and 3 re-read every block
    strided = trace_stats(generate("strided", 4, {"sizes": "64K"}))
    assert strided["ops"]["listio_write"] == 4 and strided["regions"] == 2 * 4 * 16


def test_three_metrics() -> None:
    m = three_metrics([1.0, 2.0, 3.0])
    assert m == {"app_service_time": 3.0, "mean_task_service_time": 2.0,
                 "task_service_time_variance": pytest.approx(2 / 3)}
    assert three_metrics([])["app_service_time"] == 0.0


def test_percentiles() -> None:
    assert percentile([1, 2, 3, 4, 5], 50) == 3
    assert percentile([0, 10], 90) == pytest.approx(9)
    s = latency_summary([0.3, 0.1, 0.2])
    assert s["count"] == 3 and s["max"] == 0.3 and s["p50"] == pytest.approx(0.2)


def test_counter_delta() -> None:
    before = [{"hits": 3, "sched": {"opt1": 1}, "name": "iod0"}]
    after = [{"hits": 10, "sched": {"opt1": 4, "opt2": 2}, "name": "iod0"}]
    assert counter_delta(before, after) == [{"hits": 7, "sched": {"opt1": 3, "opt2": 2},
                                             "name": "iod0"}]


def test_pattern_depends_only_on_file_and_offset() -> None:
    key = file_key("a/b")
    whole = pattern(key, 3, 100)
    assert len(whole) == 100
    assert pattern(key, 10, 20) == whole[7:27]
    assert pattern_list(key, [(3, 5), (50, 10)]) == whole[:5] + whole[47:57]
    assert pattern(file_key("a/c"), 3, 100) != whole
    assert pattern(key, 0, 0) == b""
    assert file_key("x") == file_key("x")


def test_format_result_smoke() -> None:
    rank = {"rank": 0, "service_time": 0.5, "phase_times": [0.1, 0.4], "phase_bytes": [0, 10],
            "latencies": {"read": [0.1, 0.2]}, "ops": {"read": 2}, "errors": [],
            "bytes_read": 10, "bytes_written": 0, "verify_errors": 0, "short_reads": 0}
    from pvfs.traces.metrics import summarize

    tr = Trace(nprocs=1, files=[], phases=["setup", "work"], generator={"name": "x"})
    res = summarize(tr, [rank], spec="/tmp/x", wall_time=1.0, runner="local")
    assert res["bytes_per_s"] == 20.0
    assert [p["label"] for p in res["phases"]] == ["setup", "work"]
    text = format_result(res)
    assert "application service time" in text and "work" in text
    assert set(comparable(res)) >= {"ops", "digests"}
