"""The I/O daemon's reactive selector (daemons/iod/rs.py) without a network: estimation from
the statistics in service, the resident fraction, a client's hint, the engine switch; and,
with an in-process daemon, when the resident fraction is measured."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from pvfs.daemons.iod.rs import ReactiveSelector
from pvfs.daemons.iod.stats import JobRecord, WorkloadStats
from pvfs.models import rs


class FakeStorage:
    def __init__(self, resident: float) -> None:
        self.resident = resident

    def cached(self, ino: int, off: int, n: int) -> int:
        return int(n * self.resident)


def server(resident: float = 0.0, model: dict | None = None):
    extra = {"model": model} if model else {}
    return SimpleNamespace(config=SimpleNamespace(extra=extra), stats=WorkloadStats(),
                           storage=FakeStorage(resident),
                           engine=SimpleNamespace(algorithm="opt1", gather=0.0),
                           _nursery=None)


def test_large_uncached_blocks_switch_the_engine_to_opt4():
    srv = server(resident=0.0)
    sel = ReactiveSelector(srv)
    sel.active = True
    sel.nfile[5] = (14, 1e18)            # N_file known: 14 tasks hold the file open
    for k in range(3):                   # three 1 MB block requests seen so far
        srv.stats.begin(k, JobRecord(5, "read", 1_000_000, 1, k * 2_000_000, (k + 1) * 2_000_000))
    sel.on_read(5, [(0, 0, 1_000_000)], 2, None)
    assert srv.engine.algorithm == "opt4"
    w = sel.last["workload"]
    # eq. 5.7-5.8: 3 requests of 1 MB seen, 14 tasks: 14 MB in service
    assert w["N_req"] == 14 and abs(w["S_req"] - 14e6) < 1 and w["kind"] == "ideal"
    assert w["cached"] == 0.0
    assert sel.status()["deciding_s"] > 0          # what deciding cost, for the study


def test_inactive_selector_changes_nothing():
    srv = server()
    sel = ReactiveSelector(srv)
    sel.on_read(5, [(0, 0, 4096)], 1, None)
    assert srv.engine.algorithm == "opt1" and not sel.last


def test_hint_replaces_the_estimate_and_small_cached_work_gets_opt1():
    srv = server(resident=1.0)
    srv.engine.algorithm = "opt4"
    sel = ReactiveSelector(srv)
    sel.active = True
    srv.stats.begin(1, JobRecord(7, "read", 2048, 1, 0, 2048))
    hint = {"size": 14 * 2048, "requests": 14, "regions": 14, "range": 1 << 20}
    sel.on_read(7, [(0, 0, 2048)], 2, hint)
    assert sel.last["hint"] and sel.last["workload"]["S_req"] == 14 * 2048 / 2
    assert srv.engine.algorithm == "opt1"      # ~0 predicted I/O: the thesis' fix


def test_model_table_from_the_config_is_used():
    p = rs.Params(B_dr=1e6, zero_s=0.5)
    sel = ReactiveSelector(server(model=p.to_table()))
    assert sel.params == p


def _clocked(monkeypatch, resident: float, n_file: int, *modules):
    """An active selector on a fake server whose clock (``time.monotonic`` in the selector and
    in ``modules``) reads ``now[0]``; file 5 held open by ``n_file`` tasks."""
    from pvfs.daemons.iod import rs as iod_rs

    now = [1000.0]
    for m in (iod_rs, *modules):
        monkeypatch.setattr(m.time, "monotonic", lambda: now[0])
    srv = server(resident=resident)
    sel = ReactiveSelector(srv)
    sel.active = True
    sel.nfile[5] = (n_file, 1e18)
    return now, srv, sel


def _begin(srv, job_id: int, ino: int, lo: int, n: int) -> JobRecord:
    rec = JobRecord(ino, "read", n, 1, lo, lo + n)
    srv.stats.begin(job_id, rec)
    return rec


def test_random_blocks_served_one_at_a_time_are_seen_as_sparse():
    """One block of each of 14 tasks, spread over a 14 MB file, each finished before the
    next arrives: the requests in service alone (one) look dense; the operation is sparse."""
    srv = server(resident=0.0)
    sel = ReactiveSelector(srv)
    sel.active = True
    sel.nfile[5] = (14, 1e18)
    for k in range(14):
        rec = _begin(srv, k, 5, ((k * 7) % 14) * 1_000_000, 65536)
        sel.on_read(5, [(0, 0, 32768)], 2, None, rec)
        srv.stats.end(k, 5, 0, 32768, 0.0, 0.001)
    w = sel.last["workload"]
    assert sel.last["observed"] == 14 and w["kind"] == "sparse"
    assert abs(w["S_req"] - 14 * 65536) < 1 and w["N_req"] == 14


def test_requests_that_left_service_long_ago_do_not_count(monkeypatch):
    from pvfs.daemons.iod import rs as iod_rs

    now, srv, sel = _clocked(monkeypatch, 0.0, 4)
    for k in range(3):                       # an earlier operation, finished
        sel.on_read(5, [(0, 0, 100)], 1, None, _begin(srv, k, 5, k * 10_000_000, 100))
        srv.stats.end(k, 5, 0, 100, 0.0, 0.001)
    now[0] += iod_rs.RECENT_S + 0.1
    sel.on_read(5, [(0, 0, 100)], 1, None, _begin(srv, 9, 5, 0, 100))
    # the estimate is of that request alone (the class stays the one held: ``_held``)
    assert sel.last["observed"] == 1 and sel.last["workload"]["estimated_kind"] == "ideal"


def test_cached_fraction_covers_every_request_of_the_operation():
    srv = server(resident=1.0)
    sel = ReactiveSelector(srv)
    sel.active = True
    sel.nfile[5] = (2, 1e18)
    sel.on_read(5, [(0, 0, 3000)], 1, None, _begin(srv, 1, 5, 0, 3000))   # all cached
    srv.storage.resident = 0.0
    sel.on_read(5, [(0, 0, 1000)], 1, None, _begin(srv, 2, 5, 3000, 1000))  # none cached
    assert sel.last["workload"]["cached"] == 0.75       # 3000 of 4000 bytes, not 0


def test_what_an_operation_brought_into_the_cache_does_not_make_it_cached():
    """An uncached pass: its first requests miss, the disk's read-ahead brings what the
    later ones ask for. Those arrive resident, but the operation stays in the uncached
    column; a cached pass that reaches uncached data does leave the cached column."""
    srv = server(resident=0.0)
    sel = ReactiveSelector(srv)
    sel.active = True
    sel.nfile[5] = (4, 1e18)
    for k in range(2):                         # the first two miss
        sel.on_read(5, [(0, 0, 4096)], 1, None, _begin(srv, k, 5, k * 4096, 4096))
    srv.stats.end(0, 5, 0, 4096, 0.0, 0.01)    # one served: read-ahead filled the rest
    srv.storage.resident = 1.0
    for k in range(2, 4):
        sel.on_read(5, [(0, 0, 4096)], 1, None, _begin(srv, k, 5, k * 4096, 4096))
    assert sel.last["workload"]["cached"] == 0.0
    sel2 = ReactiveSelector(srv2 := server(resident=1.0))
    sel2.active = True
    sel2.nfile[6] = (4, 1e18)
    for k in range(2):                         # a cached pass...
        sel2.on_read(6, [(0, 0, 4096)], 1, None, _begin(srv2, k, 6, k * 4096, 4096))
    srv2.stats.end(0, 6, 0, 4096, 0.0, 0.001)
    srv2.storage.resident = 0.0                # ...reaching data that is not cached
    for k in range(2, 4):
        sel2.on_read(6, [(0, 0, 4096)], 1, None, _begin(srv2, k, 6, k * 4096, 4096))
    assert sel2.last["workload"]["cached"] == 0.5


def test_the_decision_is_made_again_when_n_file_arrives():
    import trio

    srv = server(resident=0.0)
    sel = ReactiveSelector(srv)
    sel.active = True
    # one 1 MB uncached block seen, N_file unknown yet: the estimate is that block alone
    sel.on_read(5, [(0, 0, 1_000_000)], 1, None, _begin(srv, 1, 5, 0, 1_000_000))
    assert srv.engine.algorithm == "opt4" and sel.last["workload"]["N_req"] == 1

    async def nfile(inos):
        return {5: 14}

    srv.nfile = nfile
    trio.run(sel._ask_nfile, 5)
    assert sel.last["workload"]["N_req"] == 14
    assert abs(sel.last["workload"]["S_req"] - 14e6) < 1


def test_small_requests_on_one_daemon_scale_to_the_tasks_that_reach_it():
    """14 tasks each read 64 KiB = one stripe unit of a file over two daemons: seven
    requests reach this daemon, not fourteen (eq. 5.8 would double S_req)."""
    srv = server(resident=0.0)
    sel = ReactiveSelector(srv)
    sel.active = True
    sel.nfile[5] = (14, 1e18)
    for k in range(0, 14, 2):                 # the even tasks' blocks live here
        rec = JobRecord(5, "read", 65536, 1, k * 65536, (k + 1) * 65536, 65536)
        srv.stats.begin(k, rec)
        sel.on_read(5, [(0, 0, 65536)], 2, None, rec)
    w = sel.last["workload"]
    assert w["N_req"] == 7 and w["S_req"] == 7 * 65536
    # a 1 MiB request spans both daemons: every task reaches this one
    sel2 = ReactiveSelector(srv2 := server(resident=0.0))
    sel2.active = True
    sel2.nfile[6] = (14, 1e18)
    rec = JobRecord(6, "read", 1 << 19, 1, 0, 1 << 20, 1 << 20)
    srv2.stats.begin(1, rec)
    sel2.on_read(6, [(0, 0, 1 << 19)], 2, None, rec)
    assert sel2.last["workload"]["N_req"] == 14


def test_an_unknown_n_file_is_guessed_from_the_last_answer():
    import trio

    srv = server(resident=0.0)
    sel = ReactiveSelector(srv)
    sel.active = True

    async def nfile(inos):
        return {i: 14 for i in inos}

    srv.nfile = nfile
    trio.run(sel._ask_nfile, 5)               # file 5: 14 tasks hold it open
    rec = JobRecord(9, "read", 1 << 19, 1, 0, 1 << 20, 1 << 20)
    srv.stats.begin(1, rec)
    sel.on_read(9, [(0, 0, 1 << 19)], 2, None, rec)   # file 9: not asked about yet
    assert sel.last["workload"]["N_req"] == 14 and sel.last["workload"]["S_req"] == 14 << 19


def test_after_n_file_requests_a_file_is_decided_at_most_every_decide_s(monkeypatch):
    """Deciding costs about a fifth of a cached 2 KiB request: once a file's operation was
    seen whole (N_file requests), its requests within ``decide_s`` of the last decision reuse
    it. A new file, a changed hint and a missing N_file arriving are decided at once."""
    from pvfs.daemons.iod import rs as iod_rs

    monkeypatch.setattr(iod_rs, "DECIDE_MAX_S", iod_rs.DECIDE_S)   # no backing off here
    now, srv, sel = _clocked(monkeypatch, 1.0, 4)

    def read(ino: int, k: int) -> None:
        sel.on_read(ino, [(0, 0, 2048)], 2, None, _begin(srv, k, ino, k * 2048, 2048))

    for k in range(4):                     # the operation's first N_file requests: each one
        read(5, k)
    assert sum(sel.decisions.values()) == 4
    for k in range(4, 20):                 # then, within decide_s: none
        now[0] += sel.decide_s / 20
        read(5, k)
    assert sum(sel.decisions.values()) == 4
    now[0] += sel.decide_s                 # decide_s after the last decision: again
    read(5, 20)
    assert sum(sel.decisions.values()) == 5
    read(6, 21)                            # another file: at once
    assert sum(sel.decisions.values()) == 6 and sel.last["ino"] == 6
    hint = {"size": 4 * 2048, "requests": 4, "regions": 4, "range": 1 << 20}
    sel.on_read(5, [(0, 0, 2048)], 2, hint, _begin(srv, 30, 5, 0, 2048))   # a hint: at once
    assert sum(sel.decisions.values()) == 7 and sel.last["hint"]
    sel.on_read(5, [(0, 0, 2048)], 2, None, _begin(srv, 31, 5, 0, 2048))   # cleared: at once
    assert sum(sel.decisions.values()) == 8 and not sel.last["hint"]
    sel.decide_s = 0.0                     # 0: every request, as the thesis does
    read(5, 22)
    read(5, 23)
    assert sum(sel.decisions.values()) == 10


def test_decisions_that_keep_the_pick_are_spaced_further_apart(monkeypatch):
    """Past N_file requests, each decision that kept the operation's pick doubles the wait
    before the next, up to DECIDE_MAX_S; a changed pick or a new operation starts over."""
    from pvfs.daemons.iod import rs as iod_rs

    now, srv, sel = _clocked(monkeypatch, 1.0, 2)
    k = 0

    def read(size: int = 2048) -> int:
        nonlocal k
        k += 1
        before = sum(sel.decisions.values())
        sel.on_read(5, [(0, 0, size)], 1, None, _begin(srv, k, 5, k * size, size))
        return sum(sel.decisions.values()) - before

    read(), read()                           # the first N_file: each decided
    gaps = []
    for _ in range(70):                      # then one request every millisecond
        now[0] += 0.001
        if read():
            gaps.append(round(sel.every(sel.ops[5]), 4))
    # each kept pick doubles the spacing: 4 ms after the first two, then 8, 16, 32, 32
    assert gaps == [0.008, 0.016, 0.032, 0.032]
    srv.storage.resident = 0.0               # uncached 1 MB requests: another pick
    now[0] += iod_rs.DECIDE_MAX_S
    assert read(1_000_000) == 1 and sel.every(sel.ops[5]) == sel.decide_s


def test_a_batch_of_arrivals_is_decided_once_per_file_after_all_are_recorded():
    """A collective arrives as a burst: inside one batch of engine events the selector only
    records, then decides once per file with the whole batch in its estimate."""
    srv = server(resident=0.0)
    sel = ReactiveSelector(srv)
    sel.active = True
    sel.nfile[5] = (14, 1e18)
    sel.nfile[6] = (14, 1e18)
    with sel.batch():
        for k in range(14):
            sel.on_read(5, [(0, 0, 1 << 20)], 1, None,
                        _begin(srv, k, 5, k << 21, 1 << 20))
        sel.on_read(6, [(0, 0, 2048)], 1, None, _begin(srv, 99, 6, 0, 2048))
        assert not sel.decisions and srv.engine.algorithm == "opt1"   # nothing decided yet
    assert sum(sel.decisions.values()) == 2                         # one per file
    assert sel.last["ino"] == 6
    sel.on_read(7, [(0, 0, 2048)], 1, None, _begin(srv, 100, 7, 0, 2048))
    assert sum(sel.decisions.values()) == 3                         # outside a batch: at once



def test_a_request_after_the_file_was_idle_begins_a_new_operation(monkeypatch):
    """An uncached pass over a file, then (after a barrier) a cached one: the second pass's
    first request is decided at once, from its own operation's requests only. Before, the
    window was topped up with the first pass's requests (left service under RECENT_S ago)
    and the cached pass began under the uncached column's pick."""
    from pvfs.daemons.iod import rs as iod_rs
    from pvfs.daemons.iod import stats as iod_stats

    now, srv, sel = _clocked(monkeypatch, 0.0, 14, iod_stats)
    for k in range(14):                        # the uncached pass: all in service, then done
        sel.on_read(5, [(0, 0, 65536)], 1, None, _begin(srv, k, 5, k << 16, 65536))
    assert sel.last["workload"]["cached"] == 0.0
    for k in range(14):
        now[0] += 0.0005
        srv.stats.end(k, 5, 0, 65536, 0.0, 0.0005)
    now[0] += iod_rs.IDLE_S / 2                # a gap within an operation: the same one
    sel.on_read(5, [(0, 0, 65536)], 1, None, _begin(srv, 20, 5, 0, 65536))
    assert sel.last["observed"] == 14
    srv.stats.end(20, 5, 0, 65536, 0.0, 0.0005)
    now[0] += iod_rs.IDLE_S * 1.5              # idle: the next request begins another
    decided = sum(sel.decisions.values())
    srv.storage.resident = 1.0
    sel.on_read(5, [(0, 0, 65536)], 1, None, _begin(srv, 21, 5, 0, 65536))
    assert sum(sel.decisions.values()) == decided + 1        # at once
    assert sel.last["observed"] == 1 and sel.last["workload"]["cached"] == 1.0
    for k in range(22, 30):                    # its first N_file requests: each one decided
        sel.on_read(5, [(0, 0, 65536)], 1, None, _begin(srv, k, 5, 0, 65536))
    assert sum(sel.decisions.values()) == decided + 9


def _flapping(monkeypatch):
    """A selector on a frozen clock (``_clocked``) with the s11 study's rule for small
    requests: cached ideal -> opt1, cached sparse -> opt3 (zero_s above every prediction),
    and ``read(off)``: one cached 4 KiB block of file 5 (N_file 2, one daemon) arriving 1 ms
    after the last and served at once, the number of decisions it made returned."""
    from pvfs.daemons.iod import stats as iod_stats

    now, srv, sel = _clocked(monkeypatch, 1.0, 2, iod_stats)
    sel.params = rs.Params(zero_s=10.0, small_algs=("opt2", "opt3", "opt3",
                                                    "opt1", "opt3", "opt1"))
    k = 0

    def read(off: int) -> int:
        nonlocal k
        k += 1
        now[0] += 0.001
        before = sum(sel.decisions.values())
        sel.on_read(5, [(0, 0, 4096)], 1, None, _begin(srv, k, 5, off, 4096))
        srv.stats.end(k, 5, 0, 4096, 0.0, 0.0001)
        return sum(sel.decisions.values()) - before

    return now, srv, sel, read


def test_a_class_estimated_around_its_boundary_is_held_with_its_pick(monkeypatch):
    """The window is the two newest blocks: 2 blocks apart, S_req/R_req = 2/3 (ideal); 4
    apart, 2/5 (sparse). Each decision's window lies on the other side of 1/2 from the
    last one's. Without the hysteresis every decision switched opt1/opt3 and reset the
    back-off (random16 1-4 MiB cached: 45-150 switches per run, s12)."""
    from pvfs.daemons.iod import rs as iod_rs

    _, srv, sel, read = _flapping(monkeypatch)
    off, gap, gaps, estimates = 0, 4, [], []
    read(0)                                  # one block: no evidence of spread yet
    for _ in range(120):
        off += gap * 4096
        if read(off):
            gap = 6 - gap                    # the next decision sees the other side
            gaps.append(sel.every(sel.ops[5]))
            w = sel.last["workload"]
            estimates.append(rs.Workload(w["S_req"], w["N_req"], w["D_req"], w["R_req"]).kind())
    assert estimates[:4] == ["sparse", "ideal", "sparse", "ideal"]
    # one class and one pick from the first evidence on: opt1 -> opt3 once
    assert sel.decisions == {"ideal/cached->opt1": 1, "sparse/cached->opt3": len(gaps)}
    assert srv.engine.algorithm == "opt3" and sel.switches == 1
    assert gaps[-1] == iod_rs.DECIDE_MAX_S and len(gaps) < 20     # and backing off


def test_a_clear_change_of_class_still_switches(monkeypatch):
    """Held sparse, then blocks read in order (S_req/R_req = 1): the second decision in a
    row saying ideal switches to it, and back the same way. A new operation (the file idle) holds the
    class through its first block (one request's range is its own: no evidence of spread)
    and takes its first estimate at once."""
    from pvfs.daemons.iod import rs as iod_rs

    now, srv, sel, read = _flapping(monkeypatch)
    sel.decide_s = 0.0                       # every request decided
    for i in range(6):                       # spread: sparse, opt3
        read(i * 10 * 4096)
    assert srv.engine.algorithm == "opt3"
    off = 100 * 4096
    for i in range(4):                       # in order: ideal
        off += 4096
        read(off)
        # the first window still spans the spread block; the next says ideal, held once
        assert srv.engine.algorithm == ("opt3" if i < 2 else "opt1")
    for i in range(4):                       # spread again: sparse
        off += 10 * 4096
        read(off)
        assert srv.engine.algorithm == ("opt1" if i == 0 else "opt3")   # held once
    sel.decide_s = iod_rs.DECIDE_S
    now[0] += iod_rs.IDLE_S * 2              # the file idles: a new operation
    assert read(0) == 1                      # its one block: the class held, at once
    assert srv.engine.algorithm == "opt3" and sel.last["observed"] == 1
    assert read(4096) == 1                   # its first evidence: ideal, at once
    assert srv.engine.algorithm == "opt1" and sel.last["workload"]["kind"] == "ideal"


def test_a_new_operation_of_small_blocks_is_decided_until_its_window_is_full(monkeypatch):
    """14 tasks read 4 KiB blocks of a file over two daemons: each block lies in one stripe
    unit, so about 7 of every 14 reach this daemon and the window holds 7 (``_reaching``).
    A new operation's arrivals are each decided until the window is full, not until 14 of
    them arrived: the later ones would see a window no fuller (random16 64 KiB cached,
    where idle gaps begin new operations often: 7 of ~15 decisions per operation saved)."""
    from pvfs.daemons.iod import stats as iod_stats

    _, srv, sel = _clocked(monkeypatch, 1.0, 14, iod_stats)

    def read(k: int) -> int:
        before = sum(sel.decisions.values())
        rec = JobRecord(5, "read", 4096, 1, k * 8192, k * 8192 + 4096, 4096)  # all of it here
        srv.stats.begin(k, rec)
        sel.on_read(5, [(0, k * 4096, 4096)], 2, None, rec)
        return sum(sel.decisions.values()) - before

    made = [read(k) for k in range(14)]       # a frozen clock: no spacing has passed
    assert made == [1] * 7 + [0] * 7
    assert sel.last["observed"] == 7 and sel.last["workload"]["N_req"] == 7


class _ServedOnSubmit:
    """The engine, but ``submit`` returns only once the job's first step has charged its
    miss to the emulated disk (the pages resident), as a free second core often does before
    the trio thread gets on (``wait_for(ino)``)."""

    def __init__(self, engine, disk) -> None:
        object.__setattr__(self, "_engine", engine)
        object.__setattr__(self, "_disk", disk)
        object.__setattr__(self, "wait_for", None)

    def __getattr__(self, name):
        return getattr(self._engine, name)

    def __setattr__(self, name, value) -> None:
        if name == "wait_for":
            object.__setattr__(self, name, value)
        else:
            setattr(self._engine, name, value)

    def submit(self, job_id, sock, fd, op, accesses, prefix, ino, *rest):
        self._engine.submit(job_id, sock, fd, op, accesses, prefix, ino, *rest)
        if ino == self.wait_for:
            import time

            deadline = time.monotonic() + 5.0
            while not self._disk.cached(ino, 0, 4096) and time.monotonic() < deadline:
                time.sleep(0.001)


@pytest.mark.trio
async def test_the_resident_fraction_is_measured_before_the_engine_serves_the_request(tmp_path):
    """A read of a block not in the (emulated) cache: the engine's first step charges the
    miss and makes the pages resident at once. Measured after the job was submitted, the
    block often looked cached already when the engine's thread got there first; measured
    before, it is uncached whatever the threads' order."""
    import trio

    from pvfs.cluster.launch import make_config
    from pvfs.daemons.iod.server import IodServer
    from pvfs.daemons.iod.storage import open_storage
    from pvfs.layout.describe import contiguous
    from pvfs.layout.stripe import Stripe
    from pvfs.protocol.rpc import Channel

    storage = open_storage("emulated", str(tmp_path / "iod0"))
    io = {"ino": 3, "stripe": Stripe(0, 1, 65536).to_wire(),
          "desc": contiguous(0, 4096).to_wire()}
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            server = IodServer(make_config(str(tmp_path), iods=1), 0, storage)
            host, port = (await nursery.start(server.serve))[:2]
            ch = Channel(host, port, 5.0, 10.0, name="iod0")
            await ch.call({"op": "write", **io}, bytes(4096))
            server.storage.drop_cache()
            server.selector.active = True
            server.engine = _ServedOnSubmit(server.engine, storage.disk)
            server.engine.wait_for = 3
            await ch.call_bulk({"op": "read", **io})
            assert storage.disk.cached(3, 0, 4096) == 4096     # the engine did serve it
            assert [s.resident for s in server.selector.seen[3]] == [0]
            ch.close()
            nursery.cancel_scope.cancel()
