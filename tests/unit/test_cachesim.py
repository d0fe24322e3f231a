"""The caching study's model at the paper's latencies (``study caching --model paper``)."""

from __future__ import annotations

import pytest

from pvfs.bench.caching.sim import PAPER, cost, simulate
from pvfs.bench.caching.study import POLICIES, run_study
from pvfs.traces.generators._build import TraceBuilder

MIB = 1 << 20


def test_cost_is_the_paper_table_interpolated():
    assert cost("pvfs", 4096) == pytest.approx(1.12)
    assert cost("global_miss", 256 << 10) == pytest.approx(109.36)
    mid = cost("global_hit", 48 << 10)  # between the 32 KiB and 64 KiB columns
    assert PAPER["global_hit"][3] < mid < PAPER["global_hit"][4]
    assert cost("local_miss", 512 << 10) > cost("local_miss", 256 << 10)  # extended
    assert cost("pvfs", 0) == 0.0


def _cyclic(passes: int, size: int, req: int = 64 << 10):
    """One rank reading a file from start to end ``passes`` times."""
    b = TraceBuilder(1, "cyclic", {}, 0)
    f = b.file("data", size)
    b.open(0, f)
    for _ in range(passes):
        for off in range(0, size, req):
            b.read(0, f, off, req)
        b.barrier()
    return b.build()


def _run(trace, policy):
    return simulate(trace, POLICIES[policy], None, local_bytes=2 * MIB, global_bytes=4 * MIB,
                    nodes=1)


def test_runtime_bypass_beats_lru_on_a_cyclic_scan_larger_than_the_cache():
    """The paper's case: a working set twice the global cache read over and over. LRU
    (cache everything) misses every block; the runtime rule admits each segment's first
    touch, refuses its re-misses, so half the data stays and hits from the second pass."""
    trace = _cyclic(4, 8 * MIB)
    both, rt = _run(trace, "both"), _run(trace, "runtime10")
    assert both["global"]["hits"] == 0 and both["global"]["bypasses"] == 0
    assert rt["global"]["bypasses"] > 0 and rt["global"]["hits"] > 0
    assert rt["time_s"] < both["time_s"]
    assert _run(trace, "none")["global_hit_rate"] == 0.0


def _passes(*ops: str):
    """One rank, one pass over an 8 MiB file per op ("read"/"write"), 64 KiB requests."""
    b = TraceBuilder(1, "passes", {}, 0)
    f = b.file("data", 8 * MIB)
    b.open(0, f)
    for op in ops:
        for off in range(0, 8 * MIB, 64 << 10):
            getattr(b, op)(0, f, off, 64 << 10)
        b.barrier()
    return b.build()


def test_refused_writes_bring_no_hints():
    """The daemon's rule since 2026-11-26: a refused write is answered and written through,
    and the client is not told to bypass the segment (the model hinted on every refused
    write-back before, so the next pass's reads of those segments went direct)."""
    w = _run(_passes("read", "write"), "runtime10")["global"]
    assert w["bypasses"] > 0 and w["hints"] == 0  # the write-back was refused, no hints
    r = _run(_passes("read", "write", "read"), "runtime10")["global"]
    assert r["hits"] + r["misses"] == 3 * 2048  # every pass reached the global cache
    assert r["hints"] == r["bypasses"] - w["bypasses"] > 0  # the last read pass's refusals


def test_small_working_set_all_policies_agree():
    trace = _cyclic(3, 2 * MIB)  # fits in the global cache: nothing to refuse
    both, rt = _run(trace, "both"), _run(trace, "runtime25")
    assert rt["global"]["bypasses"] == 0
    assert rt["time_s"] == pytest.approx(both["time_s"])


def test_study_model_rows():
    out = run_study(["pgrep"], ["both", "runtime10", "plan"], quick=True, model="paper")
    rows = out["results"]
    assert [r["policy"] for r in rows] == ["both", "runtime10", "plan"]
    assert rows[0]["time_norm"] == 1.0 and out["setup"]["model"] == "paper"
    assert all(r["time_s"] > 0 and r["ops"] > 0 for r in rows)
    with pytest.raises(ValueError):
        run_study(["pgrep"], ["both"], model="nope")
