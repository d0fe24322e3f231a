"""Issue 32: the message back ends' doorbells over UDP between hosts.

Over the netns harness every rank is in a network namespace of its own, where an abstract
UNIX socket cannot be reached, so the doorbells were off and every wait polled (yields and
short sleeps: 96-121 CPU s/GiB for ``servers`` at 16-32 clients). With
``PVFS_COLLECTIVE_BELLS_UDP=1`` the two doorbells of a rank are UDP sockets on its host's
address, checked at set-up by one ring round the group. Here two "ranks" are two threads
with host keys of their own and a communicator that exchanges through a barrier.
"""

from __future__ import annotations

import sys
import threading

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux sockets")


class _ThreadComm:
    """``n`` ranks as threads: the collectives ``Bells`` uses, through a shared board."""

    def __init__(self, shared: dict, rank: int) -> None:
        self.shared, self.rank = shared, rank

    def Get_rank(self) -> int:
        return self.rank

    def Get_size(self) -> int:
        return self.shared["n"]

    def _exchange(self, obj):
        board, barrier = self.shared["board"], self.shared["barrier"]
        board[self.rank] = obj
        barrier.wait(10)
        out = [board[r] for r in range(self.shared["n"])]
        barrier.wait(10)
        return out

    def bcast(self, obj, root=0):
        return self._exchange(obj)[root]

    def allgather(self, obj):
        return self._exchange(obj)

    def allreduce(self, obj, op=None):
        return min(self._exchange(obj))


def _group(n: int, monkeypatch, address=lambda rank: "127.0.0.1", udp: bool = True):
    """``Bells`` of ``n`` thread ranks, each on a host of its own (its host key)."""
    from pvfs.collective import _wait

    monkeypatch.setenv("PVFS_COLLECTIVE_BELLS_UDP", "1" if udp else "0")
    monkeypatch.setattr(_wait, "host_key", lambda: threading.current_thread().name)
    ranks = threading.local()
    monkeypatch.setattr(_wait, "bell_address", lambda: address(ranks.rank))
    shared = {"n": n, "board": {}, "barrier": threading.Barrier(n)}
    out: list = [None] * n

    def make(rank: int) -> None:
        ranks.rank = rank
        out[rank] = _wait.Bells(_ThreadComm(shared, rank))

    threads = [threading.Thread(target=make, args=(r,), name=f"host{r}") for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return out


def test_udp_bells_ring_across_hosts(monkeypatch):
    bells = _group(3, monkeypatch)
    try:
        assert all(b.enabled and b.udp for b in bells)
        assert all(b.rings == 0 for b in bells)  # (the set-up's check is not counted)
        service1, caller1 = bells[1].waiter("service"), bells[1].waiter("caller")
        assert service1(0.01) is False  # nobody rang: timed out
        bells[0].ring("service", 1)
        bells[2].ring("service", 1)
        assert service1(5.0) is True and bells[0].rings == 1
        assert service1(0.01) is False  # both rings drained by the one wake
        assert caller1(0.01) is False  # a ring wakes only its kind
        bells[2].ring("caller", 1)
        assert caller1(5.0) is True
        assert bells[0].waiter("service")(0.01) is False  # nor another rank
    finally:
        for b in bells:
            b.close()


def test_udp_bells_off_by_default_and_when_a_rank_has_no_address(monkeypatch):
    bells = _group(2, monkeypatch, address=lambda rank: None if rank == 1 else "127.0.0.1")
    assert not any(b.enabled or b.udp for b in bells)  # decided together
    assert bells[0].waiter("service") is None
    bells[0].ring("service", 1)  # a no-op
    monkeypatch.delenv("PVFS_COLLECTIVE_BELLS_UDP")
    from pvfs.collective import _wait

    assert not _wait.udp_wanted()  # off unless asked for
    bells = _group(2, monkeypatch, udp=False)
    assert not any(b.enabled or b.udp for b in bells)


def test_udp_bells_given_up_when_the_check_ring_is_lost(monkeypatch):
    """A ring round the group that does not arrive (a firewall, an address the others
    cannot reach) leaves the doorbells off on every rank: the waits poll as before."""
    from pvfs.collective import _wait

    monkeypatch.setattr(_wait, "UDP_CHECK_S", 0.2)
    monkeypatch.setattr(_wait.Bells, "ring", lambda self, kind, dest: None)
    bells = _group(2, monkeypatch)
    assert not any(b.enabled or b.udp for b in bells)


def test_bell_address(monkeypatch):
    from pvfs.collective._wait import bell_address

    monkeypatch.setenv("PVFS_COLLECTIVE_BELL_ADDR", "10.0.0.7")
    assert bell_address() == "10.0.0.7"
    monkeypatch.delenv("PVFS_COLLECTIVE_BELL_ADDR")
    addr = bell_address()
    assert addr is None or (addr.count(".") == 3 and not addr.startswith("127."))


def test_rma_ring_wakes_the_owner_before_each_flush(monkeypatch):
    """``servers`` moves pages by RMA; over TCP a get completes only when the owner's MPI
    progresses, which an owner asleep on its doorbell does not. With
    ``PVFS_COLLECTIVE_RMA_RING=1`` the reader rings the owner after issuing its gets and
    before the flush that waits for them (never itself); off by default."""
    pytest.importorskip("mpi4py")
    import numpy as np

    from pvfs.collective import _file
    from pvfs.collective._rma import RmaData

    events: list = []

    class Win:
        def Get(self, buf, owner, target):
            events.append(("get", owner))

        def Put(self, buf, owner, target):
            events.append(("put", owner))

        def Accumulate(self, *a, **k):
            pass

        def Flush_local(self, owner):
            pass

        def Flush(self, owner):
            events.append(("flush", owner))

    class Space:
        data_base, dirty_base = 0, 1 << 20

    class On:
        enabled = True

        def ring(self, kind, dest):
            events.append(("ring", kind, dest))

    monkeypatch.delenv("PVFS_COLLECTIVE_RMA_RING", raising=False)
    assert _file._rma_wake(On()) is None  # off by default
    monkeypatch.setenv("PVFS_COLLECTIVE_RMA_RING", "1")
    assert _file._rma_wake(None) is None
    wake = _file._rma_wake(On())
    data = RmaData.__new__(RmaData)
    from mpi4py import MPI

    data.MPI, data.rank, data.page_size, data.space = MPI, 0, 64, Space()
    data.win, data._v, data.remote_gets, data.remote_puts = Win(), np.zeros(1, np.int64), 0, 0
    data.wake, data.rget = wake, False  # (the blocking Flush; PVFS_COLLECTIVE_RGET off)
    out = bytearray(8)
    data.get_many(2, 0, [(0, memoryview(out)), (8, memoryview(bytearray(8)))])
    assert events == [("get", 2), ("get", 2), ("ring", "caller", 2), ("flush", 2)]
    events.clear()
    data.put_many(0, 1, [(0, b"x" * 8)])  # its own slot: no ring
    assert ("flush", 0) in events and not any(e[0] == "ring" for e in events)
    events.clear()
    data.transfer(False, {3: [(0, [(0, memoryview(bytearray(8)))])]})
    assert events == [("get", 3), ("ring", "caller", 3), ("flush", 3)]
