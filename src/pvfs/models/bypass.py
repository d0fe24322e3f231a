"""Admission policies of the global cache (discretionary-caching paper §5, SPEC §6).

The global cache daemon (``daemons/gcache``) asks its policy three things, synchronously and
never across an ``await``:

* ``access(ino, seg)`` — a request touched segment ``seg`` of file ``ino`` (count it); returns
  the segment's count *before* this request, which is what ``admit`` compares;
* ``admit(ino, seg, before, victim)`` — a block of that segment is missing: bring it in?
  ``victim`` is the ``(ino, seg)`` of the block it would displace (None while slots are free).
  A refused block is served anyway and the client is told to bypass the segment;
* ``good_victim(ino, seg)`` — the harvester looks at a block as a victim candidate: is its
  segment one to evict first? (Policies age their counters here, the paper's "aging at
  harvest".)

plus ``hit``/``evicted`` notifications that adaptive policies learn from, and ``bypass_ttl``:
how many of its own accesses a client keeps bypassing a refused segment (0: for ever, the
paper's one-time decision).

Policies:

``all``       admit everything (cache-everything, the paper's "Local & Global").
``runtime``   the paper's segment counters: the first access of a segment is admitted
              unchecked; later misses only if the counter exceeds the threshold; the
              harvester prefers victims under the threshold; counters are halved once per
              harvest round (never back to the "never seen" zero).
``sketch``    TinyLFU-like: a count-min sketch of segment frequencies (halved every
              ``sample`` accesses) and admission only when the candidate's segment is more
              frequent than the victim's (always while slots are free).
``adaptive``  ``runtime`` or ``sketch``, whichever rule the fate of its recent decisions
              on first accesses favours (:class:`HybridAdmission`): refused first accesses
              asked for again soon (a ghost list) speak for ``runtime``, admitted ones
              evicted unhit for ``sketch``. (Until s12 ``adaptive`` was
              :class:`AdaptiveBypass`, a threshold learning from its admissions only,
              which never moved on the study's traces; it is now ``adaptive``'s
              ``runtime`` side.)
"""

from __future__ import annotations

from array import array
from collections import OrderedDict
from collections.abc import Callable
from typing import Protocol

__all__ = [
    "DEFAULT_POLICY",
    "POLICIES",
    "AdaptiveBypass",
    "AdmissionPolicy",
    "AdmitAll",
    "CountMinSketch",
    "HybridAdmission",
    "RuntimeBypass",
    "SketchAdmission",
    "make_policy",
]

Seg = tuple[int, int]

#: How many accesses of its own a client keeps bypassing a refused segment, for the policies
#: that re-evaluate their refusals (``adaptive``, ``sketch``).
REPROBE_AFTER = 32


class AdmissionPolicy(Protocol):
    """What the global cache asks (see the module docstring)."""

    name: str
    bypass_ttl: int

    def access(self, ino: int, seg: int) -> int: ...

    def admit(self, ino: int, seg: int, before: int, victim: Seg | None) -> bool: ...

    def good_victim(self, ino: int, seg: int) -> bool: ...

    def hit(self, ino: int, seg: int) -> None: ...

    def evicted(self, ino: int, seg: int, hits: int) -> None: ...

    def forget(self, ino: int) -> None: ...

    def stats(self) -> dict: ...


def _take_one(counts: dict[Seg, int], key: Seg) -> bool:
    """Take one of ``key``'s count (its entry gone at zero); False if it had none."""
    left = counts.get(key, 0)
    if not left:
        return False
    if left == 1:
        del counts[key]
    else:
        counts[key] = left - 1
    return True


class _Rounds:
    """Aging in rounds, shared by the policies whose counters age: every ``every`` events
    (evictions, accesses) complete one round. ``every`` 0 or less: never (``tick`` with
    ``zero_is_every_event``: each event is a round, as ``SketchAdmission(sample=0)`` always
    behaved)."""

    def __init__(self, every: int, zero_is_every_event: bool = False) -> None:
        self.every = max(every, 1) if zero_is_every_event else every
        self.rounds = 0
        self._events = 0

    def tick(self) -> bool:
        """Count one event; True when it completes a round."""
        if self.every <= 0:
            return False
        self._events += 1
        if self._events < self.every:
            return False
        self._events = 0
        self.rounds += 1
        return True


class _Unaging:
    """The notifications of a policy that learns nothing from hits, evictions or removals
    and takes any block as a victim."""

    def good_victim(self, ino: int, seg: int) -> bool:
        return True

    def hit(self, ino: int, seg: int) -> None:
        pass

    def evicted(self, ino: int, seg: int, hits: int) -> None:
        pass

    def forget(self, ino: int) -> None:
        pass


class AdmitAll(_Unaging):
    """Cache everything (no bypass): the baseline every other policy is compared with."""

    name = "all"
    bypass_ttl = 0

    def __init__(self) -> None:
        self.threshold = 0

    def access(self, ino: int, seg: int) -> int:
        return 0

    def admit(self, ino: int, seg: int, before: int, victim: Seg | None) -> bool:
        return True

    def stats(self) -> dict:
        return {"policy": self.name, "threshold": 0}


class RuntimeBypass:
    """The paper's runtime bypass: a counter per segment and a fixed threshold.

    Two details decide whether it ever bypasses anything (paper §5):

    * "we do not perform any checks when the block is accessed for the first time (counter
      reads zero)": zero means *never seen*. Aging therefore never takes a seen segment's
      counter below 1; otherwise aging turns every re-access of an evicted segment into an
      unchecked "first" access, and the scheme degenerates into cache-everything.
    * aging happens at harvest, as the harvester sweeps the resident blocks: here once per
      *round*, ``age_every`` evictions (as many as the cache holds blocks: the harvester has
      gone over every resident block once), every counter is halved (lazily, on its next
      use). Halving the counters of the blocks a victim scan passes at every eviction would
      age the blocks near the LRU end a dozen times before they leave.

    Args:
        threshold: a segment's blocks are admitted after its first access only while its
            counter is above this (10-50 worked best in the paper).
        max_segments: counters kept at most; beyond, the smallest half is dropped (a bound on
            memory for long runs, not part of the paper's scheme).
        age_every: evictions per aging round (the cache's size in blocks); 0: never age.
    """

    name = "runtime"
    bypass_ttl = 0

    def __init__(self, threshold: int = 25, max_segments: int = 1 << 20,
                 age_every: int = 0) -> None:
        if threshold < 0:
            raise ValueError("threshold must be >= 0")
        if age_every < 0:
            raise ValueError("age_every must be >= 0")
        self.threshold = threshold
        self.max_segments = max_segments
        self.age_every = age_every
        self._aging = _Rounds(age_every)
        self.counters: dict[Seg, int] = {}
        self._aged: dict[Seg, int] = {}  # the round each counter was last brought up to date

    def count(self, ino: int, seg: int) -> int:
        """The segment's counter, aged to the current round (0: never seen)."""
        key = (ino, seg)
        c = self.counters.get(key, 0)
        if c:
            behind = self.round - self._aged.get(key, self.round)
            if behind:
                c = max(1, c >> min(behind, 63))
                self.counters[key] = c
                self._aged[key] = self.round
        return c

    @property
    def round(self) -> int:
        """Aging rounds so far."""
        return self._aging.rounds

    def access(self, ino: int, seg: int) -> int:
        key = (ino, seg)
        before = self.count(ino, seg)
        self.counters[key] = before + 1
        self._aged[key] = self.round
        if len(self.counters) > self.max_segments:
            self._shrink()
        return before

    def admit(self, ino: int, seg: int, before: int, victim: Seg | None) -> bool:
        # The first access is not checked (the counter read zero); later misses must earn it.
        return before == 0 or before > self.threshold

    def good_victim(self, ino: int, seg: int) -> bool:
        return self.count(ino, seg) <= self.threshold

    def hit(self, ino: int, seg: int) -> None:
        pass

    def evicted(self, ino: int, seg: int, hits: int) -> None:
        self._aging.tick()

    def forget(self, ino: int) -> None:
        for key in [k for k in self.counters if k[0] == ino]:
            del self.counters[key]
            self._aged.pop(key, None)

    def _shrink(self) -> None:
        ordered = sorted(self.counters.items(), key=lambda kv: kv[1])
        for key, _ in ordered[: len(ordered) // 2]:
            del self.counters[key]
            self._aged.pop(key, None)

    def stats(self) -> dict:
        return {"policy": self.name, "threshold": self.threshold,
                "segments_counted": len(self.counters), "aging_rounds": self.round}


class AdaptiveBypass(RuntimeBypass):
    """Runtime bypass whose threshold follows how useful the admissions it decides turn out
    (the ``runtime`` side of :class:`HybridAdmission`, which the ``adaptive`` policy is).

    The threshold decides one thing only: whether a segment that missed before (counter
    above zero) is admitted again. So the feedback comes from exactly those *marginal*
    admissions: every ``epoch`` evictions of marginally admitted blocks it looks at the mean
    number of hits they had while cached: below ``low`` (they mostly went unused: admitting
    re-missed segments pollutes) the threshold doubles; above ``high`` (they pay off) it
    halves; within ``[lo, hi]``. First-touch admissions, which no threshold controls, do not
    move it. (Judging by every evicted block, as this did until 2026-11-23, lowered the
    threshold whenever the cache held well-used blocks — LU's slabs — and the marginal
    re-admissions then displaced them.) Refused segments are retried by clients after
    :data:`REPROBE_AFTER` accesses, so a phase change can bring them back.
    """

    name = "adaptive-threshold"
    bypass_ttl = REPROBE_AFTER

    def __init__(self, threshold: int = 10, lo: int = 1, hi: int = 64, epoch: int = 64,
                 low: float = 0.5, high: float = 2.0, age_every: int = 0) -> None:
        super().__init__(threshold, age_every=age_every)
        self.lo, self.hi, self.epoch = lo, hi, epoch
        self.low, self.high = low, high
        self._marginal: dict[Seg, int] = {}  # blocks cached per segment admitted on a re-miss
        self._epoch_evictions = 0
        self._hits_evicted = 0
        self.adjustments = 0

    def admit(self, ino: int, seg: int, before: int, victim: Seg | None) -> bool:
        ok = super().admit(ino, seg, before, victim)
        if ok and before > 0:
            self._marginal[(ino, seg)] = self._marginal.get((ino, seg), 0) + 1
        return ok

    def evicted(self, ino: int, seg: int, hits: int) -> None:
        self._aging.tick()
        if not _take_one(self._marginal, (ino, seg)):
            return
        self._epoch_evictions += 1
        self._hits_evicted += hits
        if self._epoch_evictions >= self.epoch:
            mean = self._hits_evicted / self._epoch_evictions
            old = self.threshold
            if mean < self.low:
                self.threshold = min(self.hi, max(1, self.threshold) * 2)
            elif mean > self.high:
                self.threshold = max(self.lo, self.threshold // 2)
            if self.threshold != old:
                self.adjustments += 1
            self._epoch_evictions = self._hits_evicted = 0

    def forget(self, ino: int) -> None:
        super().forget(ino)
        for key in [k for k in self._marginal if k[0] == ino]:
            del self._marginal[key]

    def stats(self) -> dict:
        out = super().stats()
        out["adjustments"] = self.adjustments
        return out


class CountMinSketch:
    """Approximate counts of keys in ``depth`` rows of ``width`` counters (never under-counts
    until ``halve`` ages them).

    The row indices of a key are bit fields of one mixed 64-bit hash (``depth`` fields of
    log2(``width``) bits), computed once per call: the global cache asks the sketch on every
    segment of every request, and until s15 each call hashed the key once per row and the
    policy asked twice per access (estimate, then add), 9x the cost of the ``runtime``
    counters (6.5 against 0.7 us per access and admission).
    """

    def __init__(self, width: int = 4096, depth: int = 4) -> None:
        if width <= 0 or width & (width - 1):
            raise ValueError("width must be a power of two")
        bits = width.bit_length() - 1
        if depth <= 0 or depth * max(bits, 1) > 64:
            raise ValueError("depth x log2(width) must be 1..64 bits")
        self.width, self.depth = width, depth
        self._bits, self._mask = bits, width - 1
        self.rows = [array("I", bytes(4 * width)) for _ in range(depth)]

    def _slots(self, key: Seg) -> list[int]:
        h = (hash(key) * 0x9E3779B97F4A7C15 & 0xFFFFFFFFFFFFFFFF) >> (64 - self.depth * self._bits)
        bits, mask = self._bits, self._mask
        return [h >> (r * bits) & mask for r in range(self.depth)]

    def add(self, key: Seg) -> None:
        self.increment(key)

    def increment(self, key: Seg) -> int:
        """Count ``key`` once more; returns its estimate before this count."""
        before = 0xFFFFFFFF
        for row, i in zip(self.rows, self._slots(key)):
            v = row[i]
            before = min(before, v)
            if v < 0xFFFFFFFF:
                row[i] = v + 1
        return before

    def estimate(self, key: Seg) -> int:
        return min(row[i] for row, i in zip(self.rows, self._slots(key)))

    def halve(self) -> None:
        for k, row in enumerate(self.rows):
            self.rows[k] = array("I", [v >> 1 for v in row])


class SketchAdmission(_Unaging):
    """TinyLFU-like admission: a missing block enters only if its segment has been accessed
    more often (per the sketch) than the segment of the block it would displace.

    Args:
        sample: accesses between halvings of the sketch (recency of the frequencies).
        width: counters per sketch row.
    """

    name = "sketch"
    bypass_ttl = REPROBE_AFTER

    def __init__(self, sample: int = 8192, width: int = 4096) -> None:
        self.sketch = CountMinSketch(width)
        self.sample = sample
        self.threshold = 0
        self._aging = _Rounds(sample, zero_is_every_event=True)

    @property
    def resets(self) -> int:
        """Halvings of the sketch so far."""
        return self._aging.rounds

    def access(self, ino: int, seg: int) -> int:
        before = self.sketch.increment((ino, seg))
        if self._aging.tick():
            self.sketch.halve()
        return before

    def admit(self, ino: int, seg: int, before: int, victim: Seg | None) -> bool:
        if victim is None or victim == (ino, seg):
            return True
        return self.sketch.estimate((ino, seg)) > self.sketch.estimate(victim)

    def stats(self) -> dict:
        return {"policy": self.name, "threshold": 0, "sketch_resets": self.resets}


class HybridAdmission:
    """The paper's counters or the frequency sketch, whichever the evidence of the last
    decisions favours: runtime bypass with feedback from its refusals.

    The two rules decide the same miss oppositely (study s11, in the model): on a full cache
    ``runtime`` admits a segment's first access unchecked and refuses its re-misses (their
    counters, 1-6 on the study's traces, stay under any threshold of 10-50), while
    ``sketch`` refuses a first access (frequency 1 is not above the victim's) and admits
    re-misses. Which is right depends on the workload: on LU every rank reads each slab in
    turn, a block admitted on one rank's first access is hit by the others, and refusing it
    costs each of them a global miss (runtime10 0.89, sketch 1.07 of cache-everything); on
    DB2, Titan, Mining and Cholesky scans longer than the cache would flood it with first
    accesses never used again (sketch 0.85-0.97, the thresholds 0.91-1.18). A threshold does
    not tell them apart (every threshold from 6 up makes the same decisions), so this
    policy learns which *rule* to follow from what becomes of the first accesses it decides:

    * following ``sketch``, a refused first access goes into a ghost list (keys only, the
      last ``ghost`` segments refused): asked for again while still in it — soon, usually
      by another client — the refusal was wrong (+1 towards ``runtime``); dropped from it
      unasked, the refusal was right (-1);
    * following ``runtime``, a block admitted on its segment's first access into a full
      cache is judged when it is evicted: hit meanwhile, the admission paid (+1); never
      hit, it flooded the cache (-1).

    The evidence is a counter saturating at ``±saturate``; ``runtime`` is followed while it
    is above zero. It starts at ``-saturate`` (``sketch``): a wrong refusal shows within a
    ghost list's worth of refusals, a wrong admission only when it leaves the cache, a full
    cache later, by when a scan has flushed everything. Refused segments are retried by
    clients after :data:`REPROBE_AFTER` accesses, under either rule.

    Args:
        threshold: the ``runtime`` rule's threshold (it learns as :class:`AdaptiveBypass`).
        blocks: the cache's size in blocks (aging rounds of the counters; ghost size; 0:
            1024).
        segment_blocks: blocks per segment (the ghost list holds segments).
        saturate: bound of the evidence counter (how many net decisions it takes to change
            rule at most).
        ghost: segments in the ghost list (0: half the cache, in segments).
    """

    name = "adaptive"
    bypass_ttl = REPROBE_AFTER

    def __init__(self, threshold: int = 10, blocks: int = 0, segment_blocks: int = 4,
                 saturate: int = 16, ghost: int = 0) -> None:
        if segment_blocks <= 0 or saturate <= 0 or ghost < 0:
            raise ValueError("segment_blocks and saturate must be > 0, ghost >= 0")
        blocks = blocks or 1024
        self.runtime = AdaptiveBypass(threshold, age_every=blocks)
        self.sketch = SketchAdmission()
        self.ghost_size = ghost or max(1, blocks // segment_blocks // 2)
        self.saturate = saturate
        self.evidence = -saturate
        self.switches = 0
        self.ghost: OrderedDict[Seg, None] = OrderedDict()  # refused first accesses
        self._first: dict[Seg, int] = {}  # blocks cached per segment admitted on its first access
        self.recalled = self.expired = self.first_hit = self.first_unhit = 0

    @property
    def rule(self) -> str:
        """The rule followed now: ``runtime`` or ``sketch``."""
        return RuntimeBypass.name if self.evidence > 0 else SketchAdmission.name

    @property
    def threshold(self) -> int:
        return self.runtime.threshold

    def _evidence(self, delta: int) -> None:
        was = self.rule
        self.evidence = max(-self.saturate, min(self.saturate, self.evidence + delta))
        if self.rule != was:
            self.switches += 1

    def access(self, ino: int, seg: int) -> int:
        key = (ino, seg)
        if key in self.ghost:  # a refused first access asked for again soon
            del self.ghost[key]
            self.recalled += 1
            self._evidence(+1)
        self.sketch.access(ino, seg)
        return self.runtime.access(ino, seg)

    def admit(self, ino: int, seg: int, before: int, victim: Seg | None) -> bool:
        key = (ino, seg)
        if self.rule == RuntimeBypass.name:
            ok = self.runtime.admit(ino, seg, before, victim)
            if ok and before == 0 and victim is not None:
                self._first[key] = self._first.get(key, 0) + 1
            return ok
        if self.sketch.admit(ino, seg, before, victim):
            return True
        if before == 0:
            self.ghost[key] = None
            self.ghost.move_to_end(key)
            while len(self.ghost) > self.ghost_size:
                self.ghost.popitem(last=False)
                self.expired += 1
                self._evidence(-1)
        return False

    def good_victim(self, ino: int, seg: int) -> bool:
        return self.runtime.good_victim(ino, seg) if self.rule == RuntimeBypass.name else True

    def hit(self, ino: int, seg: int) -> None:
        pass

    def evicted(self, ino: int, seg: int, hits: int) -> None:
        self.runtime.evicted(ino, seg, hits)
        if not _take_one(self._first, (ino, seg)):
            return
        if hits:
            self.first_hit += 1
            self._evidence(+1)
        else:
            self.first_unhit += 1
            self._evidence(-1)

    def forget(self, ino: int) -> None:
        self.runtime.forget(ino)
        for d in (self.ghost, self._first):
            for key in [k for k in d if k[0] == ino]:
                del d[key]

    def stats(self) -> dict:
        return {"policy": self.name, "threshold": self.runtime.threshold, "rule": self.rule,
                "evidence": self.evidence, "switches": self.switches,
                "recalled": self.recalled, "expired": self.expired,
                "first_hit": self.first_hit, "first_unhit": self.first_unhit,
                "aging_rounds": self.runtime.round, "sketch_resets": self.sketch.resets}


#: The policies by name (each class's ``name``), in the order the tools list them: what
#: ``[gcache].policy``, ``pvfs-admin gcache policy`` and ``init --gcache-policy`` accept.
_MAKERS: dict[str, Callable[[int, int], AdmissionPolicy]] = {
    AdmitAll.name: lambda threshold, blocks: AdmitAll(),
    RuntimeBypass.name: lambda threshold, blocks: RuntimeBypass(threshold, age_every=blocks),
    HybridAdmission.name: lambda threshold, blocks: HybridAdmission(threshold, blocks),
    SketchAdmission.name: lambda threshold, blocks: SketchAdmission(),
}
POLICIES: tuple[str, ...] = tuple(_MAKERS)
#: A global cache's policy when its config names none: cache everything.
DEFAULT_POLICY = AdmitAll.name


def make_policy(name: str, threshold: int = 25, blocks: int = 0) -> AdmissionPolicy:
    """The policy called ``name`` (one of :data:`POLICIES`); ``threshold`` for ``runtime`` and
    as the starting point of ``adaptive``; ``blocks``: the cache's size in blocks (one aging
    round of the counters per that many evictions; 0: no aging).

    Raises:
        ValueError: for an unknown name or a negative threshold.
    """
    if threshold < 0:
        raise ValueError("threshold must be >= 0")
    try:
        make = _MAKERS[name]
    except KeyError:
        raise ValueError(f"unknown gcache policy {name!r} (one of {', '.join(POLICIES)})") \
            from None
    return make(threshold, blocks)
