"""``bench/caching/diag.py``: where in each phase the ranks' first and last requests fall."""

from __future__ import annotations

from pvfs.bench.caching.diag import overlap


def _phase(start, ino, durations):
    """One rank's reads of one phase, back to back, in offset order: (ino, off, t0, t1)."""
    out, t = [], start
    for i, d in enumerate(durations):
        out.append((ino, i * 65536, t, t + d))
        t += d
    return out, t


def test_overlap_measures_the_shared_head_and_the_last_tail():
    # phase 0 empty, phase 1 one second of anything, phase 2: rank 1 takes 3 fast reads then
    # slow ones, rank 2 starts slow; phase 2 ends at the later rank's end.
    reqs, _ = _phase(0.0, 1, [0.1] * 10)
    reqs2, _ = _phase(0.0, 2, [0.1] * 10)
    a, end1 = _phase(1.0, 1, [0.01, 0.01, 0.01, 0.2, 0.2, 0.2])
    b, end2 = _phase(1.0, 2, [0.02, 0.02, 0.02, 0.3, 0.3, 0.3])
    phase_s = [0.0, 1.0, max(end1, end2) - 1.0]
    got = overlap(reqs + reqs2 + a + b, phase_s, 3)
    assert len(got) == 1
    head, tail = got[0]
    assert abs(head - 0.03) < 1e-9            # rank 1 leaves its first three reads first
    assert abs(tail - (end2 - 1.06)) < 1e-9   # the last rank's last three start at 1.06
    assert overlap(reqs + a + b, phase_s, 6) == []  # no rank makes more than 6 reads


def test_refused_hits_counts_the_hits_a_refusal_can_cost():
    from pvfs.bench.caching.diag import refused_hits

    got = refused_hits("mining", "runtime10")  # LRU gets nothing from four cyclic scans
    assert got == {"refused_segments": 256, "both_hits": 0, "both_hits_on_refused": 0}
    got = refused_hits("cholesky", "runtime10")
    assert got["refused_segments"] > 0
    assert 0 < got["both_hits_on_refused"] <= got["both_hits"]
