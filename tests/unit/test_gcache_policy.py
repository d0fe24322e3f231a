"""Admission policies of the global cache and its slab block store (pure logic)."""

from __future__ import annotations

import pytest

from pvfs.daemons.gcache.store import BlockStore
from pvfs.models.bypass import (
    AdaptiveBypass,
    AdmitAll,
    CountMinSketch,
    RuntimeBypass,
    SketchAdmission,
    make_policy,
)


def test_admit_all_admits():
    p = AdmitAll()
    assert p.access(1, 0) == 0
    assert p.admit(1, 0, 5, (2, 3))


def test_runtime_first_access_unchecked_then_threshold():
    p = RuntimeBypass(threshold=3)
    before = p.access(1, 7)
    assert before == 0 and p.admit(1, 7, before, None)  # first access: no check
    before = p.access(1, 7)
    assert before == 1 and not p.admit(1, 7, before, None)  # 1 <= 3: refused
    for _ in range(3):
        before = p.access(1, 7)
    assert before == 4 and p.admit(1, 7, before, None)  # above the threshold


def test_runtime_harvest_prefers_cold_and_ages_per_round():
    p = RuntimeBypass(threshold=4, age_every=3)
    for _ in range(20):
        p.access(1, 0)
    p.access(1, 1)
    assert p.good_victim(1, 1)  # cold segment: a victim of choice
    for _ in range(5):  # looking at a candidate does not age it (no halving per scan)
        assert not p.good_victim(1, 0)
    assert p.count(1, 0) == 20
    for _ in range(3):  # one harvest round: every counter halves once
        p.evicted(1, 1, 0)
    assert p.count(1, 0) == 10 and p.count(1, 1) == 1
    for _ in range(6):
        p.evicted(1, 1, 0)
    assert p.count(1, 0) == 2 and p.good_victim(1, 0)  # 20 -> 10 -> 5 -> 2
    p.forget(1)
    assert not p.counters


def test_runtime_aging_never_makes_a_seen_segment_new():
    """Counter zero means first access (admitted unchecked); aging must not get there, or a
    segment evicted and missed again is admitted unchecked every time and nothing is ever
    bypassed (what the study showed before: LU with 0 bypasses under runtime10)."""
    p = RuntimeBypass(threshold=10, age_every=1)
    assert p.admit(1, 0, p.access(1, 0), None)
    for _ in range(50):
        p.evicted(2, 0, 0)
    before = p.access(1, 0)
    assert before == 1 and not p.admit(1, 0, before, (2, 0))


def test_adaptive_raises_threshold_when_admissions_are_useless():
    p = AdaptiveBypass(threshold=4, epoch=8)
    for b in range(8):  # re-missed segments admitted above the threshold, never hit
        assert p.admit(1, b, 5, None)
    for b in range(8):
        p.evicted(1, b, hits=0)
    assert p.threshold == 8
    for b in range(8):
        assert p.admit(1, b, 9, None)
    for b in range(8):
        p.evicted(1, b, hits=5)
    assert p.threshold == 4
    assert p.bypass_ttl > 0


def test_adaptive_ignores_first_touch_admissions():
    """Only the admissions the threshold decides move it: well-used (or unused) blocks that
    entered on their first access say nothing about re-admitting re-missed segments."""
    p = AdaptiveBypass(threshold=4, epoch=8)
    for b in range(32):
        assert p.admit(1, b, 0, None)  # first access
        p.evicted(1, b, hits=10)
    for b in range(32, 64):
        assert p.admit(1, b, 0, None)
        p.evicted(1, b, hits=0)
    assert p.threshold == 4 and p.adjustments == 0


def test_sketch_admits_only_more_frequent_than_victim():
    p = SketchAdmission(sample=1000)
    for _ in range(5):
        p.access(9, 9)  # the victim's segment is hot
    b = p.access(1, 1)
    assert not p.admit(1, 1, b, (9, 9))
    assert p.admit(1, 1, b, None)  # free slots: always
    for _ in range(10):
        b = p.access(1, 1)
    assert p.admit(1, 1, b, (9, 9))


def test_count_min_sketch_never_undercounts_and_halves():
    s = CountMinSketch(width=64)
    for k in range(200):
        for _ in range(k % 5):
            s.add((k, 0))
    assert all(s.estimate((k, 0)) >= k % 5 for k in range(200))
    s.halve()
    assert all(s.estimate((k, 0)) >= (k % 5) // 2 for k in range(200))
    assert max(max(row) for row in s.rows) <= 200 * 4 // 2


def test_make_policy_names():
    assert make_policy("runtime", 10).threshold == 10
    assert make_policy("adaptive").name == "adaptive"
    with pytest.raises(ValueError):
        make_policy("nope")
    with pytest.raises(ValueError):
        make_policy("runtime", -1)


def test_store_lru_pins_dirty_and_victims():
    st = BlockStore(4 * 4096, 4096)
    slots = [st.insert((1, b)) for b in range(4)]
    assert all(s is not None for s in slots) and not st.has_room()
    assert st.insert((1, 9)) is None
    for s in slots:
        st.unpin(s)
    st.mark_dirty((1, 0), slots[0], 0, 100)
    slots[1].pins += 1
    assert st.victim() == (1, 2)  # 0 dirty, 1 pinned
    assert st.victim(lambda k: k == (1, 3)) == (1, 3)
    st.touch((1, 2))
    assert st.victim() == (1, 3)
    # removing a pinned block frees its slot only at the last unpin
    st.remove((1, 1))
    assert not st.has_room()
    st.unpin(slots[1])
    assert st.has_room()
    # write-back cleans only an unmodified block
    v = slots[0].version
    st.mark_dirty((1, 0), slots[0], 50, 200)
    assert slots[0].ranges == [(0, 200)]  # merged
    assert not st.mark_clean((1, 0), slots[0], v, [(0, 200)])
    st.mark_dirty((1, 0), slots[0], 1000, 1010)
    # only the ranges written back are forgotten: the block stays dirty with the others
    assert not st.mark_clean((1, 0), slots[0], slots[0].version, [(0, 200)])
    assert slots[0].dirty and slots[0].ranges == [(1000, 1010)]
    assert st.mark_clean((1, 0), slots[0], slots[0].version, [(1000, 1010)])
    assert not slots[0].dirty and not slots[0].ranges
    assert st.dirty_blocks == 0


def test_store_views_are_slab_slices():
    st = BlockStore(8 * 512, 512)
    s = st.insert((3, 0))
    st.block_view(s)[:3] = b"abc"
    assert bytes(st.slab[st.offset(s):st.offset(s) + 3]) == b"abc"


def test_count_min_sketch_increment_returns_the_count_before():
    s = CountMinSketch(width=1 << 16)  # wide: no collisions among 50 keys
    for k in range(50):
        for n in range(k % 7):
            assert s.increment((k, 3)) == n
    assert [s.estimate((k, 3)) for k in range(50)] == [k % 7 for k in range(50)]
    s.halve()
    assert [s.estimate((k, 3)) for k in range(50)] == [(k % 7) // 2 for k in range(50)]


def test_count_min_sketch_rows_use_distinct_hash_bits():
    # Keys colliding in one row must not collide in every row: the estimate stays exact for
    # most keys although rows are narrow (before s15 the rows came from one hash too).
    s = CountMinSketch(width=256, depth=4)
    for k in range(64):
        s.add((1, k))
    exact = sum(s.estimate((1, k)) == 1 for k in range(64))
    assert exact >= 60
    with pytest.raises(ValueError):
        CountMinSketch(width=1 << 20, depth=4)  # 80 bits of hash: more than one hash gives


def test_sketch_access_hashes_its_segment_once(monkeypatch):
    p = SketchAdmission(sample=1000)
    calls = []
    real = CountMinSketch._slots
    monkeypatch.setattr(CountMinSketch, "_slots", lambda self, key: calls.append(key) or real(self, key))
    for _ in range(3):
        p.access(4, 2)
    assert calls == [(4, 2)] * 3  # one hashing per access (until s15: two)
