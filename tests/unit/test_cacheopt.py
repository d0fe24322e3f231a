"""The offline bound on global-cache hits (Belady's MIN with bypass, ``bench/caching/opt.py``)."""

from __future__ import annotations

from functools import cache

from hypothesis import given, settings
from hypothesis import strategies as st

from pvfs.bench.caching.opt import global_hit_bound, min_hits
from pvfs.bench.caching.sim import simulate
from pvfs.bench.caching.study import POLICIES
from pvfs.traces.generators._build import TraceBuilder

MIB = 1 << 20


def _best_by_search(stream: list[int], capacity: int) -> int:
    """Every admit/evict/refuse choice tried: the most hits any policy can have."""

    @cache
    def best(i: int, held: frozenset) -> int:
        if i == len(stream):
            return 0
        key = stream[i]
        if key in held:
            return 1 + best(i + 1, held)
        options = [best(i + 1, held)]  # refuse
        if len(held) < capacity:
            options.append(best(i + 1, held | {key}))
        else:
            options += [best(i + 1, (held - {v}) | {key}) for v in held]
        return max(options)

    return best(0, frozenset())


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 4), max_size=12), st.integers(1, 3))
def test_min_hits_is_the_best_any_choice_of_admissions_and_victims_gets(stream, capacity):
    assert min_hits(stream, capacity) == _best_by_search(stream, capacity)


def test_a_cyclic_scan_larger_than_the_cache_keeps_one_cacheful_for_the_later_passes():
    # LRU gets nothing here; the oracle keeps the first 8 blocks and refuses the rest.
    assert min_hits(list(range(24)) * 4, 8) == 3 * 8
    assert min_hits(list(range(24)) * 4, 0) == 0
    assert min_hits(list(range(6)) * 4, 8) == 3 * 6  # it all fits


def _scans(passes: int, files: int, size: int):
    """``files`` ranks each reading its own file ``passes`` times (Mining's shape)."""
    b = TraceBuilder(files, "scans", {}, 0)
    fs = [b.file(f"data{r}", size) for r in range(files)]
    for r in range(files):
        b.open(r, fs[r])
    for _ in range(passes):
        b.barrier()
        for r in range(files):
            for off in range(0, size, 64 << 10):
                b.read(r, fs[r], off, 64 << 10)
    return b.build()


def test_no_modelled_policy_gets_more_global_hits_than_the_bound():
    trace = _scans(4, 3, 2 * MIB)  # 6 MiB read four times through a 4 MiB global cache
    bound = global_hit_bound(trace, local_bytes=MIB, global_bytes=4 * MIB, nodes=2)
    assert bound["distinct_blocks"] == 6 * MIB // 4096
    assert bound["max_hits"] == 3 * (4 * MIB // 4096)
    for pol in ("both", "runtime10", "adaptive", "sketch"):
        row = simulate(trace, POLICIES[pol], None, local_bytes=MIB, global_bytes=4 * MIB,
                       nodes=2)
        assert row["global"]["hits"] <= bound["max_hits"]
    assert bound["lru_hits"] < bound["max_hits"]  # LRU loses a scan larger than the cache


def test_the_study_reports_each_traces_bound_beside_its_rows():
    from pvfs.bench.caching.study import run_study

    out = run_study(["mining"], ["both", "sketch"], quick=True, model="paper")
    bound = out["bounds"]["mining"]
    assert bound["max_hits"] > 0 and bound["lookups"] >= bound["distinct_blocks"]
    by = {r["policy"]: r["global"]["hits"] for r in out["results"]}
    assert by["both"] == bound["lru_hits"] < by["sketch"] <= bound["max_hits"]
