"""The ``adaptive`` admission policy of the global cache (:class:`HybridAdmission`): it follows
the frequency sketch or the paper's counters by what becomes of the first accesses it decides
(pure logic, and the trace model at the paper's latencies)."""

from __future__ import annotations

import pytest

from pvfs.models.bypass import HybridAdmission, RuntimeBypass, SketchAdmission, make_policy

HOT = (9, 9)  # the victim's segment, accessed often


def _heat(p, key=HOT, n=5) -> None:
    for _ in range(n):
        p.access(*key)


def test_make_policy_adaptive_is_the_hybrid():
    p = make_policy("adaptive", 10, 1024)
    assert isinstance(p, HybridAdmission)
    assert p.threshold == 10 and p.bypass_ttl > 0
    assert p.stats()["rule"] == "sketch"


def test_starts_with_the_sketch_refusing_a_first_access_on_a_full_cache():
    """On a full cache a segment's first access is refused when the victim is more frequent
    (the sketch), where the paper's rule admits every first access unchecked."""
    p = make_policy("adaptive", 10, 1024)
    _heat(p)
    before = p.access(1, 0)
    assert before == 0
    assert not p.admit(1, 0, before, HOT)
    assert RuntimeBypass(10).admit(1, 0, 0, HOT)  # what the paper's rule does
    assert p.admit(1, 0, before, None)  # free slots: everything


def test_refusals_asked_for_again_soon_switch_to_the_counters():
    """Refused first accesses asked for again while in the ghost list (another client
    reading what one was refused: LU's slabs) are evidence for the paper's rule; after
    ``saturate`` + 1 of them first accesses are admitted unchecked and re-misses refused."""
    p = HybridAdmission(10, blocks=64, saturate=4)
    _heat(p)
    for s in range(5):
        assert not p.admit(1, s, p.access(1, s), HOT)
    assert p.rule == "sketch"
    for s in range(5):
        p.access(1, s)  # asked for again soon
    assert p.rule == "runtime" and p.recalled == 5 and p.switches == 1
    assert p.admit(2, 0, p.access(2, 0), HOT)  # a first access: unchecked
    before = p.access(1, 0)
    assert before == 2 and not p.admit(1, 0, before, HOT)  # a re-miss under the threshold


def test_refusals_never_asked_for_again_keep_the_sketch():
    """A scan longer than the cache: refused first accesses fall out of the ghost list
    unasked, evidence for the sketch; the counter saturates, so a few recalls later do
    not switch."""
    p = HybridAdmission(10, blocks=64, saturate=4, ghost=8)
    _heat(p)
    for s in range(100):
        assert not p.admit(1, s, p.access(1, s), HOT)
    assert p.expired == 92 and p.evidence == -4 and p.rule == "sketch"
    for s in range(92, 96):
        p.access(1, s)  # four recalls: -4 + 4 = 0, still the sketch
    assert p.rule == "sketch" and p.switches == 0


def test_first_access_admissions_evicted_unhit_switch_back_to_the_sketch():
    p = HybridAdmission(10, blocks=64, saturate=2)
    _heat(p)
    for s in range(3):
        p.admit(1, s, p.access(1, s), HOT)
        p.access(1, s)
    assert p.rule == "runtime"
    for s in range(10, 14):  # admitted on their first access into a full cache
        assert p.admit(1, s, p.access(1, s), HOT)
    p.evicted(1, 10, hits=3)  # used: +1 (saturated)
    assert p.first_hit == 1 and p.rule == "runtime"
    for s in (11, 12):
        p.evicted(1, s, hits=0)  # flooded the cache: -1 each
    assert p.first_unhit == 2 and p.evidence == 0 and p.rule == "sketch"
    p.evicted(1, 13, hits=0)
    p.evicted(1, 13, hits=0)  # no admission of it left: no evidence
    assert p.first_unhit == 3 and p.evidence == -1


def test_harvest_follows_the_rule():
    p = HybridAdmission(10, blocks=64, saturate=1)
    _heat(p, n=20)
    p.access(1, 0)
    assert p.good_victim(*HOT)  # the sketch takes any victim (LRU)
    p.admit(1, 5, p.access(1, 5), HOT)
    p.access(1, 5)
    p.admit(1, 6, p.access(1, 6), HOT)
    p.access(1, 6)
    assert p.rule == "runtime"
    assert not p.good_victim(*HOT) and p.good_victim(1, 0)  # the counters prefer cold ones


def test_forget_drops_a_files_state():
    p = HybridAdmission(10, blocks=64)
    _heat(p)
    p.admit(1, 0, p.access(1, 0), HOT)
    assert (1, 0) in p.ghost
    p.forget(1)
    assert (1, 0) not in p.ghost and p.runtime.count(1, 0) == 0
    assert p.access(1, 0) == 0  # a new file: no recall
    assert p.recalled == 0


def test_bad_arguments():
    for kw in ({"segment_blocks": 0}, {"saturate": 0}, {"ghost": -1}):
        with pytest.raises(ValueError):
            HybridAdmission(10, 64, **kw)


@pytest.mark.parametrize(("trace", "rule"), [("lu", "runtime"), ("mining", "sketch"),
                                             ("titan", "sketch"), ("pgrep", "sketch")])
def test_in_the_model_it_picks_the_rule_that_fits_the_trace(trace, rule, monkeypatch):
    """The quick study's traces in the trace model (the daemon's policy objects, no timing):
    LU (every rank reads each slab in turn) ends under the paper's counters, the scans
    (Mining, Titan) and the read-once Pgrep under the sketch, whose decisions the
    policy then makes."""
    from pvfs.bench.caching import sim as cachesim
    from pvfs.bench.caching import study as cachestudy

    made = []

    def spy(name, threshold=25, blocks=0):
        made.append(make_policy(name, threshold, blocks))
        return made[-1]

    monkeypatch.setattr(cachesim, "make_policy", spy)
    tr = cachestudy.generate(trace, cachestudy.NPROCS, cachestudy.TRACES[trace][0], seed=1)
    plan = cachestudy.make_plan(tr, global_bytes=cachestudy.GLOBAL_BYTES)

    def run(pol):
        return cachesim.simulate(tr, cachestudy.POLICIES[pol], plan,
                                 local_bytes=cachestudy.LOCAL_BYTES,
                                 global_bytes=cachestudy.GLOBAL_BYTES,
                                 nodes=cachestudy.NODES)["global"]

    got = run("adaptive")
    assert made[-1].rule == rule
    if rule == "sketch":
        assert made[-1].switches == 0
        sk = run("sketch")
        assert isinstance(made[-1], SketchAdmission)
        assert {k: got[k] for k in ("admissions", "bypasses", "hits")} == \
            {k: sk[k] for k in ("admissions", "bypasses", "hits")}
