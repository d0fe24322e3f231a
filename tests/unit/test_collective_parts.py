"""The pure parts of pvfs.collective: page pieces, metadata words, the lock state machine,
write-behind extents, access modes."""

from __future__ import annotations

import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pvfs.collective._file import parse_amode
from pvfs.collective._locks import BUSY, READ, LockManager
from pvfs.collective._pages import UNCACHED, Dirty, Meta, Piece, by_page, merge_runs, split
from pvfs.collective._writebehind import _Page


def test_split_cuts_at_page_boundaries_in_buffer_order():
    assert split([(90, 30), (10, 5)], 100) == [Piece(0, 90, 10, 0), Piece(1, 0, 20, 10),
                                               Piece(0, 10, 5, 30)]
    groups = by_page(split([(250, 10), (90, 30)], 100))
    assert [g[0] for g in groups] == [0, 1, 2]


@given(st.lists(st.tuples(st.integers(0, 5000), st.integers(0, 700)), max_size=8),
       st.integers(1, 512))
def test_split_covers_every_byte_once(regions, ps):
    pieces = split(regions, ps)
    assert sum(p.length for p in pieces) == sum(n for _, n in regions)
    assert all(0 <= p.off and p.off + p.length <= ps and p.length > 0 for p in pieces)
    flat = [p.page * ps + p.off + i for p in pieces for i in range(p.length)]
    assert flat == [o + i for o, n in regions for i in range(n)]


def test_split_rejects_negative():
    with pytest.raises(ValueError):
        split([(-1, 5)], 10)


def test_merge_runs_joins_touching_and_later_wins():
    assert merge_runs([(10, b"bb"), (0, b"aaaaaaaaaa"), (11, b"c"), (20, b"z")]) == \
        [(0, b"aaaaaaaaaabc"), (20, b"z")]


@given(st.integers(-1, 1000), st.integers(0, 1 << 20), st.booleans())
def test_meta_word_roundtrip(owner, slot, flushed):
    meta = Meta(owner, slot if owner >= 0 else -1, flushed)
    assert Meta.decode(meta.encode()) == meta
    assert Meta.decode(0) == UNCACHED


def test_dirty_high_water_marks():
    d = Dirty()
    assert not d
    d.add(10, 20)
    d.add(5, 8)
    assert (d.lo, d.hi) == (5, 20) and d
    d.clear()
    assert not d


def test_lock_manager_shared_exclusive_fifo():
    m = LockManager()
    assert m.acquire(7, 0, excl=False) == (True, UNCACHED)
    assert m.acquire(7, 1, excl=False)[0]
    assert m.acquire(7, 2, excl=True) == (False, None)  # queued behind two readers
    assert m.acquire(7, 3, excl=False) == (False, None)  # FIFO: no overtaking the writer
    assert m.acquire(7, 4, excl=True, try_only=True) == (False, None)  # try never queues
    assert m.release(7, 0, None) == []
    new = Meta(2, 5, False)
    assert m.release(7, 1, None) == [(2, UNCACHED)]
    assert m.release(7, 2, new) == [(3, new)]
    assert m.holders(7) == (None, {3})
    with pytest.raises(RuntimeError):
        m.release(7, 9, None)


def test_write_behind_page_extents_merge():
    p = _Page(100)
    p.add(10, b"x" * 10)
    p.add(20, b"y" * 5)
    p.add(50, b"z" * 5)
    p.add(0, b"w" * 10)
    assert p.extents == [[0, 25], [50, 55]]
    assert bytes(p.data[0:25]) == b"w" * 10 + b"x" * 10 + b"y" * 5


def test_parse_amode():
    assert parse_amode("r") == (True, False, False)
    assert parse_amode("w") == (False, True, True)
    assert parse_amode("r+") == (True, True, False)
    with pytest.raises(ValueError):
        parse_amode("x")


@given(st.lists(st.tuples(st.integers(0, 200), st.integers(1, 40)), max_size=30))
def test_write_behind_extents_match_a_byte_set(writes):
    p = _Page(256)
    written: set[int] = set()
    for off, n in writes:
        p.add(off, bytes([1]) * n)
        written.update(range(off, off + n))
    covered = {i for lo, hi in p.extents for i in range(lo, hi)}
    assert covered == written
    assert all(a[1] < b[0] for a, b in zip(p.extents, p.extents[1:]))  # disjoint, apart


def test_rma_page_word_packs_meta_beside_the_lock_bits():
    from pvfs.collective._rma import LOCK_BITS, MAX_RANKS, MAX_SLOTS, WRITER, pack, unpack

    for meta in (UNCACHED, Meta(-1, -1, True), Meta(0, 0, False), Meta(7, 12345, True),
                 Meta(MAX_RANKS - 1, MAX_SLOTS - 1, True)):
        word = pack(meta)
        assert word >= 0 and word & LOCK_BITS == 0 and unpack(word) == meta
        assert unpack(word | WRITER | 5) == meta  # lock bits leave the metadata alone
    # An exclusive unlock is one sum: it publishes the new metadata and drops the writer
    # bit while two readers' transient +1s on the write-locked word stay counted.
    old, new = pack(UNCACHED), pack(Meta(3, 9, False))
    word = (old | WRITER) + 2
    word += new - old - WRITER
    assert unpack(word) == Meta(3, 9, False) and word & LOCK_BITS == 2


def test_lock_manager_read_mode_is_exclusive_while_the_page_is_cached_nowhere():
    m = LockManager()
    assert m.request(3, 0, READ) == ("granted", UNCACHED)  # the reader will cache it
    assert m.holders(3) == (0, set())
    assert m.request(3, 1, READ) == ("queued", None)  # still cached nowhere: waits ...
    assert m.request(3, 2, READ, around=True) == ("refused", None)  # ... or reads around
    cached = Meta(0, 4, False)
    assert m.release(3, 0, cached) == [(1, cached)]  # decided at the grant: now shared
    assert m.holders(3) == (None, {1})
    assert m.request(3, 2, READ) == ("granted", cached)
    assert m.request(3, 4, True) == ("queued", None)  # a writer waits for both readers
    # A page cached somewhere is never read around: its copy may be dirty.
    assert m.request(3, 5, READ, around=True) == ("queued", None)
    assert m.release(3, 1, None) == []
    assert m.release(3, 2, None) == [(4, cached)]
    assert m.release(3, 4, UNCACHED) == [(5, UNCACHED)]  # evicted meanwhile: exclusive
    assert m.holders(3) == (5, set())


def test_lock_manager_batch_grants_in_order_and_queues_the_rest():
    m = LockManager()
    assert m.request(4, 1, True) == ("granted", UNCACHED)  # rank 1 holds page 4
    # Rank 0 asks for pages 2, 4, 6 of this home in one batch: 2 is granted, 4 is not, so
    # the batch waits there — and page 6 is *not* taken meanwhile (increasing order).
    assert m.request_batch(0, [(2, True), (4, True), (6, True)]) is None
    assert m.holders(2) == (0, set())
    assert m.holders(6) == (None, set())
    assert m.request(6, 3, True) == ("granted", UNCACHED)  # 6 is free for others meanwhile
    new = Meta(1, 0, False)
    assert m.release(4, 1, new) == []  # 4 goes to rank 0, whose batch now waits for 6
    assert m.holders(4) == (0, set())
    assert m.release(6, 3, None) == [(0, [UNCACHED, new, UNCACHED])]  # complete: answered
    assert m.holders(6) == (0, set())
    # All free: answered at once.
    assert m.request_batch(5, [(10, READ), (11, False)]) == [UNCACHED, UNCACHED]
    assert m.holders(10) == (5, set()) and m.holders(11) == (None, {5})


def test_lock_manager_batch_reads_around_and_keeps_fifo():
    m = LockManager()
    assert m.request(1, 7, True)[0] == "granted"  # page 1 being loaded: cached nowhere
    cached = Meta(2, 3, False)
    m._get(2).meta = cached
    assert m.request(2, 8, True)[0] == "granted"  # page 2 locked, cached on rank 2
    # A non-atomic read batch reads page 1 around and waits for page 2 (its copy may be dirty).
    assert m.request_batch(0, [(1, READ), (2, READ)], around=True) is None
    assert m.holders(1) == (7, set())
    assert m.request(2, 9, False) == ("queued", None)  # behind the batch (FIFO)
    assert m.release(2, 8, None) == [(0, [None, cached]), (9, cached)]  # both shared now
    assert m.holders(2) == (None, {0, 9})


def test_lock_manager_try_batch_stops_at_the_first_busy_page():
    m = LockManager()
    assert m.request(3, 1, False)[0] == "granted"  # shared holder of page 3
    got = m.try_batch(0, [(1, True), (3, True), (5, True)])
    assert got == [UNCACHED, BUSY]  # 1 granted, 3 busy, 5 not tried
    assert m.holders(1) == (0, set()) and m.holders(5) == (None, set())
    assert m.holders(3) == (None, {1})  # a try never queues
    assert m.try_batch(2, [(3, False)]) == [UNCACHED]  # shared with shared is fine
    m.request(3, 4, True)  # a writer queues ...
    assert m.try_batch(6, [(3, False)]) == [BUSY]  # ... and a try does not overtake it
    # Read around in a try: locked and cached nowhere.
    assert m.try_batch(6, [(1, READ)], around=True) == [None]


class _Net:
    """An in-process stand-in for the MPI messages of the message back ends: a request
    is handled at once by the destination's real Service; replies wait in mailboxes."""

    class _Done:
        @staticmethod
        def Test():
            return True

    class Comm:
        def __init__(self, net, rank):
            self.net, self.rank = net, rank

        def Get_rank(self):
            return self.rank

        def isend(self, obj, dest, tag):
            from pvfs.collective._service import REQ

            if tag == REQ:
                self.net.sent.append((self.rank, dest, obj[0]))
                if obj[0] != "stop":
                    self.net.services[dest]._handle(self.rank, obj)
            else:
                self.net.boxes.setdefault((self.rank, dest), []).append(obj)
            return _Net._Done()

        def iprobe(self, source, tag):
            if not self.net.boxes.get((source, self.rank)) and self.net.on_wait:
                self.net.on_wait.pop(0)()  # another rank acts while this one waits
            return bool(self.net.boxes.get((source, self.rank)))

        def recv(self, source, tag):
            return self.net.boxes[(source, self.rank)].pop(0)

        def improbe(self, source, tag, status=None):
            """A matched probe of a reply from ``source``, or from any rank (as the
            callers use it: ``MPI.ANY_SOURCE``, the source in ``status``)."""
            from mpi4py import MPI

            if source == MPI.ANY_SOURCE:
                ready = [s for (s, d), box in self.net.boxes.items() if d == self.rank and box]
                if not ready and self.net.on_wait:
                    self.net.on_wait.pop(0)()  # another rank acts while this one waits
                    ready = [s for (s, d), box in self.net.boxes.items()
                             if d == self.rank and box]
                if not ready:
                    return None
                source = ready[0]
            elif not self.iprobe(source, tag):
                return None
            if status is not None:
                status.Set_source(source)
            obj = self.recv(source, tag)
            return type("Msg", (), {"recv": staticmethod(lambda: obj)})()

    def __init__(self, n, slots=0):
        from pvfs.collective._service import LocalPages, Service

        self.sent = []
        self.boxes = {}
        self.on_wait = []
        self.services = [Service(self.Comm(self, r), LocalPages(slots, 16) if slots else None,
                                 stops=n) for r in range(n)]

    def locks(self, rank, local=False):
        from pvfs.collective._msgclient import MsgLocks
        from pvfs.collective._service import Caller

        return MsgLocks(Caller(self.Comm(self, rank)), list(range(len(self.services))),
                        local=self.services[rank] if local else None)


def test_msg_locks_one_try_round_when_every_page_is_free():
    net = _Net(2)
    locks = net.locks(0)
    got = locks.lock_set([2, 3, 4, 5], write=True, around=False)
    assert got == [(UNCACHED, True)] * 4
    # One message per home, both sent before either reply was awaited: one round.
    assert sorted(net.sent) == [(0, 0, "lock"), (0, 1, "lock")] and locks.lock_rounds == 1
    assert net.services[0].locks.holders(4) == (0, set())
    locks.unlock_set([(p, True, None) for p in (2, 3, 4, 5)])
    assert [m for m in net.sent if m[2] == "unlock"] == [(0, 0, "unlock"), (0, 1, "unlock")]
    assert net.services[1].locks.holders(5) == (None, set())


def test_msg_locks_busy_page_releases_the_higher_ones_and_waits_in_order():
    net = _Net(2)
    other = net.locks(1)
    assert other.lock_set([3], write=True, around=False) == [(UNCACHED, True)]
    locks = net.locks(0)
    seen = []

    def other_unlocks():
        # Rank 0 waits for page 3: it must hold page 2 and *not* page 4 (released after
        # the try round), or two-phase locking's increasing order is broken.
        seen.append((net.services[0].locks.holders(2), net.services[0].locks.holders(4)))
        other.unlock_set([(3, True, Meta(1, 7, False))])

    net.on_wait.append(other_unlocks)
    got = locks.lock_set([2, 3, 4, 5], write=False, around=False)
    assert seen == [((0, set()), (None, set()))]
    assert got == [(UNCACHED, True), (Meta(1, 7, False), False), (UNCACHED, True),
                   (UNCACHED, True)]
    assert locks.retries == 3  # pages 3, 4, 5 asked again in order


def test_msg_locks_own_home_without_messages():
    net = _Net(2)
    locks = net.locks(0, local=True)
    assert locks.lock_set([0, 2], write=True, around=False) == [(UNCACHED, True)] * 2
    assert net.sent == [] and locks.lock_rounds == 0  # both pages homed on rank 0
    assert net.services[0].locks.holders(2) == (0, set())
    locks.unlock_set([(0, True, Meta(0, 1, False)), (2, True, None)])
    assert net.sent == [] and net.services[0].locks.holders(0) == (None, set())
    assert locks.lock_set([0], write=False, around=False) == [(Meta(0, 1, False), False)]


def test_msg_locks_grants_carry_the_bytes_cached_on_the_home():
    net = _Net(2, slots=2)
    # Rank 1 caches page 1 (its home) in slot 0 and page 2 (home 0) in slot 1.
    net.services[1].locks._get(1).meta = Meta(1, 0, False)
    net.services[0].locks._get(2).meta = Meta(1, 1, False)
    net.services[1].pages.slot(0)[:] = b"A" * 16
    net.services[1].pages.slot(1)[:] = b"0123456789abcdef"
    locks = net.locks(0, local=True)
    got = locks.lock_set([1, 2], write=False, around=True, wants={1: [(2, 4)], 2: [(3, 5)]})
    assert got == [(Meta(1, 0, False), False), (Meta(1, 1, False), False)]
    # Page 2 was locked at rank 0's own home first; its bytes came in the one message that
    # locked page 1 at rank 1, together with page 1's: one round, no get.
    assert net.sent == [(0, 1, "lock")] and locks.lock_rounds == 1
    assert locks.carried == {1: [b"AAAA"], 2: [b"34567"]}
    locks.unlock_set([(1, False, None), (2, False, None)])
    # A write carries nothing; neither do lock servers (no pages).
    assert locks.lock_set([1], write=True, around=False) == [(Meta(1, 0, False), True)]
    assert locks.carried == {}


def test_backoff_yields_then_sleeps_capped_then_idle_capped(monkeypatch):
    from pvfs.collective import _wait

    now = [100.0]
    calls = []
    monkeypatch.setattr(_wait.time, "monotonic", lambda: now[0])
    monkeypatch.setattr(_wait.time, "sleep", lambda d: calls.append(("sleep", d)))
    monkeypatch.setattr(_wait.os, "sched_yield", lambda: calls.append(("yield", 0)))
    b = _wait.Backoff(start=1e-5, cap=4e-5, yield_s=2e-4, idle_after=0.01, idle_cap=1e-3)
    for _ in range(5):
        b.pause()  # 3 immediate retries, then yields while under yield_s
    assert calls == [("yield", 0)] * 2
    now[0] += 3e-4
    calls.clear()
    for _ in range(5):
        b.pause()
    assert [d for _, d in calls] == [1e-5, 2e-5, 4e-5, 4e-5, 4e-5]  # doubling, capped
    now[0] += 0.02  # long without progress: the idle cap
    calls.clear()
    for _ in range(6):
        b.pause()
    assert [round(d, 6) for _, d in calls] == [4e-5, 8e-5, 1.6e-4, 3.2e-4, 6.4e-4, 1e-3]
    b.reset()
    calls.clear()
    for _ in range(4):
        b.pause()
    assert calls == [("yield", 0)]


class _OneRank:
    """A communicator of one rank, for the collective set-up of Bells."""

    def Get_rank(self):
        return 0

    def Get_size(self):
        return 1

    def bcast(self, obj, root=0):
        return obj

    def allgather(self, obj):
        return [obj]

    def allreduce(self, obj, op=None):
        return obj


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="abstract UNIX sockets")
def test_bells_wake_a_waiter_only_when_rung(monkeypatch):
    pytest.importorskip("mpi4py")
    import select

    from pvfs.collective._wait import Bells

    real_select, waits = select.select, []

    def spy(r, w, x, timeout):
        ready = real_select(r, w, x, timeout)
        waits.append((timeout, bool(ready[0])))
        return ready

    monkeypatch.setattr(select, "select", spy)
    bells = Bells(_OneRank())
    try:
        assert bells.enabled
        service, caller = bells.waiter("service"), bells.waiter("caller")
        # nobody rang: the waiter slept in the kernel for its whole timeout, and timed out
        assert service(0.02) is False and waits == [(0.02, False)]
        bells.ring("service", 0)
        bells.ring("service", 0)
        # rung: woken by the ring (readable), not by the end of the 5 s timeout
        assert service(5.0) is True and waits[-1] == (5.0, True) and bells.rings == 2
        assert service(0.01) is False  # both rings were drained by the one wake
        assert caller(0.01) is False  # a ring wakes only its kind
    finally:
        bells.close()
    monkeypatch.setenv("PVFS_COLLECTIVE_BELLS", "0")
    off = Bells(_OneRank())
    assert not off.enabled and off.waiter("service") is None
    off.ring("service", 0)  # a no-op


def test_service_handles_a_ranks_requests_in_the_order_it_sent_them():
    """The I/O thread and a main thread serving while it waits share one request stream:
    while one of them has taken a request and not yet handled it, the other takes none,
    or a client's unlock could be handled after its next lock (s10: seen in a trace)."""
    pytest.importorskip("mpi4py")
    import threading

    from pvfs.collective._service import Service

    taken, handled = threading.Event(), []
    go = threading.Event()

    class Msg:
        def __init__(self, obj, slow):
            self.obj, self.slow = obj, slow

        def recv(self):
            if self.slow:
                taken.set()
                assert go.wait(10)  # the first request is still being received
            return self.obj

    class Comm:
        def __init__(self):
            self.queue = [Msg(("unlock", [(4, None)]), True), Msg(("lock", [(4, False)]), False)]

        def Get_rank(self):
            return 0

        def improbe(self, source, tag, status):
            if not self.queue:
                return None
            status.Set_source(1)
            return self.queue.pop(0)

    service = Service(Comm(), None, stops=1)
    service._handle = lambda src, req: handled.append(req[0])
    io = threading.Thread(target=service.poll_once)
    io.start()
    assert taken.wait(10)
    assert service.poll_once() is False  # the other thread is serving: take nothing
    go.set()
    io.join(10)
    assert service.poll_once() is True
    assert handled == ["unlock", "lock"]


def test_msg_locks_queued_batches_share_one_wait_for_loads(monkeypatch):
    import pvfs.collective._msgclient as svc

    net = _Net(2)
    loader = net.locks(1)
    assert loader.lock_set([2, 3], write=True, around=False) == [(UNCACHED, True)] * 2
    now = [0.0]
    monkeypatch.setattr(svc, "_now", lambda: now[0])
    for s in net.services:
        s.locks.clock = lambda: now[0]

    def time_passes(to):
        def step():
            now[0] = to
            for s in net.services:
                s._expire()
        return step

    # rank 0 waits its 50 ms at page 2's home, reads page 2 around, then asks page 3's
    # home with what is left of the wait: nothing, so page 3 is read around at once
    # (a second 50 ms wait there, the old way, would end only at 0.10).
    net.on_wait.extend([time_passes(0.05), time_passes(0.10)])
    got = net.locks(0).lock_set([2, 3], write=False, around=0.05)
    assert got == [(None, False), (None, False)]
    assert net.services[0].locks.load_timeouts == 1
    assert net.services[1].locks.load_timeouts == 0 and now[0] == 0.05


def test_backoff_with_a_bell_and_no_spins_blocks_at_once(monkeypatch):
    """Issue 32: with doorbells a waiter neither retries nor yields before it blocks."""
    from pvfs.collective import _wait

    calls = []
    monkeypatch.setattr(_wait.os, "sched_yield", lambda: calls.append("yield"))
    b = _wait.Backoff(yield_s=0.0, spins=0, idle_cap=1e-3,
                      bell=lambda t: calls.append(("bell", t)) or False)
    b.pause()
    b.pause(limit=2e-4)
    assert calls == [("bell", 1e-3), ("bell", 2e-4)]


def test_caller_probes_twice_before_it_blocks():
    """MPICH's first probe after a quiet spell moves an arrived message to its match
    queue but reports nothing; a caller that blocked on its doorbell after one empty probe
    would sleep with the reply there. The fake shows a message at the second probe."""
    pytest.importorskip("mpi4py")
    from mpi4py import MPI

    from pvfs.collective import _service

    class Comm:
        def __init__(self):
            self.arrived = {}  # source -> [obj, probes since it arrived]

        def Get_rank(self):
            return 0

        def improbe(self, source, tag, status=None):
            assert source == MPI.ANY_SOURCE and tag == _service.REPLY
            for src, entry in list(self.arrived.items()):
                entry[1] += 1
                if entry[1] >= 2:
                    del self.arrived[src]
                    status.Set_source(src)
                    return type("Msg", (), {"recv": staticmethod(lambda o=entry[0]: o)})()
            return None

    comm = Comm()
    caller = _service.Caller(comm)
    bell_waits = []
    caller._bell = lambda t: bell_waits.append(t) or False
    caller.blocks = True
    comm.arrived = {1: ["one", 0], 2: ["two", 0]}
    assert caller.replies([1, 2], "test") == {1: "one", 2: "two"}
    assert bell_waits == []  # found by probing, no wait on the bell
    # A reply from a source awaited later (not expected) is kept for that call.
    comm.arrived = {3: ["three", 0], 1: ["again", 0]}
    assert caller.replies([1], "test") == {1: "again"}
    assert caller.replies([3], "test") == {3: "three"}
