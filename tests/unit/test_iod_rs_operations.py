"""When the I/O daemon's reactive selector (daemons/iod/rs.py) takes a request for the start of
a new operation on its file: after an idle gap of at least IDLE_S that is also long beside
the file's usual interval between requests (``ReactiveSelector._begins_operation``)."""

from __future__ import annotations

from types import SimpleNamespace

from pvfs.daemons.iod import rs as iod_rs
from pvfs.daemons.iod import stats as iod_stats
from pvfs.daemons.iod.rs import ReactiveSelector
from pvfs.daemons.iod.stats import JobRecord, WorkloadStats


class _Cached:
    def cached(self, ino: int, off: int, n: int) -> int:
        return n


def _selector(monkeypatch):
    """An active selector on a frozen clock (``now[0]``, in the selector and the statistics),
    file 5 held open by 14 tasks on one daemon, every block cached; ``read(after)``: one
    4 KiB block arriving ``after`` seconds after the last, served before the next arrives;
    it returns whether that request was decided for."""
    now = [1000.0]
    for m in (iod_rs, iod_stats):
        monkeypatch.setattr(m.time, "monotonic", lambda: now[0])
    srv = SimpleNamespace(config=SimpleNamespace(extra={}), stats=WorkloadStats(),
                          storage=_Cached(), engine=SimpleNamespace(algorithm="opt1", gather=0.0),
                          _nursery=None)
    sel = ReactiveSelector(srv)
    sel.active = True
    sel.nfile[5] = (14, 1e18)
    k = 0

    def read(after: float) -> bool:
        nonlocal k
        k += 1
        now[0] += after
        rec = JobRecord(5, "read", 4096, 1, (k * 37 % 200) * 4096, (k * 37 % 200 + 1) * 4096)
        srv.stats.begin(k, rec)
        before = sum(sel.decisions.values())
        sel.on_read(5, [(0, 0, 4096)], 1, None, rec)
        srv.stats.end(k, 5, 0, 4096, 0.0, 1e-4)
        return sum(sel.decisions.values()) > before

    return now, sel, read


def test_idle_gaps_of_a_slowed_operation_do_not_begin_new_operations(monkeypatch):
    """Cached blocks 5 ms apart, as on a loaded machine, with 12-30 ms idle gaps among them
    (the fourteenth session saw 8-47 ms): each gap is over IDLE_S but under IDLE_K times the
    file's usual interval, so the operation goes on; before, every such gap began a "new
    operation" (a decision at once, one per arrival until the window was full, the
    back-off's ramp again). A barrier (IDLE_MAX_S) still begins one, decided at once."""
    _, sel, read = _selector(monkeypatch)
    for _ in range(20):
        read(0.005)
    first = sel.ops[5]
    decided_at_gaps = []
    for i in range(30):
        gap = (0.012, 0.020, 0.030)[i % 3] if i % 4 == 3 else 0.005
        made = read(gap)
        if gap > iod_rs.IDLE_S:
            decided_at_gaps.append(made)
    assert sel.ops[5] is first and first.arrivals == 50
    assert sum(decided_at_gaps) <= 2            # only where its spacing had passed anyway
    assert read(iod_rs.IDLE_MAX_S * 1.2)        # a barrier: a new operation, decided at once
    assert sel.ops[5] is not first and sel.last["observed"] == 1


def test_on_a_quiet_machine_an_idle_gap_of_idle_s_still_begins_a_new_operation(monkeypatch):
    """Requests 0.3 ms apart (a quiet machine's cached blocks): IDLE_K times that is far
    below IDLE_S, so IDLE_S alone decides, as before the fifteenth session."""
    _, sel, read = _selector(monkeypatch)
    for _ in range(40):
        read(0.0003)
    first = sel.ops[5]
    read(iod_rs.IDLE_S * 0.9)
    assert sel.ops[5] is first
    assert read(iod_rs.IDLE_S * 1.2)
    assert sel.ops[5] is not first


def test_a_new_operation_starts_under_its_files_last_pick_before_its_first_request(monkeypatch):
    """The decision comes after a request is submitted, so a new operation's first requests
    used to be served under whatever the engine ran last (another file's pick, a fixed
    setting); with opt4 that broke its gather and made single 1 MiB blocks bimodal (s17).
    ``before_read`` puts the engine back in the file's last pick first -- only when the
    request begins a new operation."""
    now, sel, read = _selector(monkeypatch)
    for _ in range(20):
        read(0.005)
    pick = sel.ops[5].pick
    assert pick is not None
    other = "opt4" if pick != "opt4" else "opt1"
    engine = sel.server.engine
    sel._switch(other)                          # another file's operation switched it
    # (through the selector: while rs is active nothing else sets the engine's algorithm,
    # and the selector remembers what it set, thirtieth session)
    now[0] += 0.005
    sel.before_read(5)                          # within the operation: left alone
    assert engine.algorithm == other
    now[0] += iod_rs.IDLE_MAX_S * 1.2           # a barrier: the next request begins one
    switches = sel.switches
    sel.before_read(5)
    assert engine.algorithm == pick and sel.switches == switches + 1
    sel.before_read(99)                         # a file never decided for: nothing known
    assert engine.algorithm == pick
    sel.active = False                          # a fixed setting: never touched
    engine.algorithm = other
    sel.before_read(5)
    assert engine.algorithm == other
