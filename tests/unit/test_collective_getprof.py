"""Issue 32's get profile: the timeline the waits and RMA gets record, and its analysis."""

from __future__ import annotations

import json

import pytest

from pvfs.bench.collective.getprof import job, split_get
from pvfs.collective import _prof
from pvfs.collective._wait import Backoff


def test_the_profile_is_off_unless_started_and_records_sleeps_with_their_thread():
    assert _prof.events is None
    Backoff(yield_s=0, spins=0).pause()
    assert _prof.events is None
    _prof.start()
    try:
        b = Backoff(yield_s=0, spins=0)
        b.pause()
        b.pause()
    finally:
        got = _prof.stop()
    assert [e[0] for e in got] == ["sleep", "sleep"]
    _, _, t0, t1, delay, peer, nbytes, cpu = got[0]
    assert t1 >= t0 and delay >= 0 and peer == -1 and nbytes == 0 and cpu >= 0
    assert _prof.events is None


def test_a_get_is_split_over_the_owners_states_in_order():
    owner = {"owner_asleep": [(0.0, 2.0)], "owner_wake_delay": [(2.0, 3.0)],
             "owner_fs": [(2.5, 6.0)], "owner_get": [(5.0, 7.0)]}
    got = split_get(1.0, 9.0, owner)
    assert got == pytest.approx({"owner_asleep": 1.0, "owner_wake_delay": 1.0,
                                 "owner_fs": 3.0, "owner_get": 1.0, "owner_other": 2.0})


def test_a_job_sums_gets_against_the_owners_main_thread(tmp_path):
    # rank 0 gets from rank 1 over [10, 14); rank 1's main thread sleeps [9, 11) and
    # waits 0.5 s for a core after it, reads the file [12, 13); its helper thread's
    # events and read-ahead reads do not count
    r0 = {"main_thread": 100, "fs": [],
          "prof": [["get", 100, 10.0, 14.0, 1_000_000_000, 1, 32768, 3_000_000_000]]}
    r1 = {"main_thread": 200, "fs": [[12.0, 13.0, 0, 32768, "r"], [10, 14, 0, 1, "ra"]],
          "prof": [["sleep", 200, 9.0, 11.5, 500_000_000, -1, 0, 0],
                   ["sleep", 201, 10.0, 14.0, 0, -1, 0, 0]]}
    for r, t in ((0, r0), (1, r1)):
        (tmp_path / f"servers-k1-n2-r{r}.json").write_text(json.dumps(t))
    got = job(sorted(tmp_path.glob("*.json")))
    assert got["gets"] == 1 and got["get_s"] == 4.0
    assert got["origin_run_delay_s"] == 1.0 and got["origin_cpu_s"] == 3.0
    assert got["owner_asleep_s"] == 1.0 and got["owner_wake_delay_s"] == 0.5
    assert got["owner_fs_s"] == 1.0 and got["owner_other_s"] == 1.5
    assert got["shares"]["owner_asleep"] == 0.25


def test_rgets_are_all_issued_then_waited_for_per_owner_with_the_ring_first(monkeypatch):
    """Issue 32, ``PVFS_COLLECTIVE_RGET=1``: a remote read issues an ``Rget`` per piece for
    every owner, then waits for each owner's requests by testing them (a ring to the owner
    first, where doorbells are on), never a ``Flush``; writes still flush."""
    import numpy as np

    from pvfs.collective._rma import RmaData, rget_wanted

    assert not rget_wanted()
    monkeypatch.setenv("PVFS_COLLECTIVE_RGET", "1")
    assert rget_wanted()
    events: list = []

    class Req:
        def __init__(self, owner):
            self.owner, self.tests = owner, 0

    class Win:
        def Rget(self, buf, owner, target):
            events.append(("rget", owner))
            buf[:] = owner
            return Req(owner)

        def Flush(self, owner):
            events.append(("flush", owner))

    class MPI:
        BYTE = object()

        class Request:
            @staticmethod
            def Testall(reqs):
                for r in reqs:
                    r.tests += 1
                events.append(("test", reqs[0].owner))
                return all(r.tests >= 2 for r in reqs)  # done at the second test

    class Space:
        data_base = 0

    data = RmaData.__new__(RmaData)
    data.MPI, data.rank, data.page_size, data.space = MPI, 0, 64, Space()
    data.win, data._v, data.remote_gets, data.remote_puts = Win(), np.zeros(1, np.int64), 0, 0
    data.wake, data.rget = (lambda owner: events.append(("ring", owner))), True
    a, b = bytearray(8), bytearray(8)
    data.transfer(False, {2: [(0, [(0, memoryview(a))])], 3: [(1, [(8, memoryview(b))])]})
    assert events == [("rget", 2), ("rget", 3), ("ring", 2), ("test", 2), ("test", 2),
                      ("ring", 3), ("test", 3), ("test", 3)]
    assert a == bytes([2]) * 8 and b == bytes([3]) * 8 and data.remote_gets == 2


def test_pairs_of_any_two_methods_within_a_repeat():
    from pvfs.bench.collective.pairs import by_job, methods, pairs

    runs = [{"ranks": 8, "method": m, "repeat": k, "mib_s": v, "cpu_s_per_gib": c,
             "run_delay_share": 0.5, "fs_read_pages": p, "pages_touched": 640,
             "accesses": 10, "phase_lock_us": 100, "phase_remote_us": 300}
            for m, k, v, c, p in (("a", 0, 20.0, 30.0, 640), ("b", 0, 10.0, 60.0, 800),
                                  ("a", 1, 30.0, 20.0, 640), ("b", 1, 10.0, 80.0, 640),
                                  ("a", 2, 5.0, 10.0, 640))]
    jobs = by_job({"runs": runs})
    (row,) = pairs(jobs, [("a", "b")])
    assert row["repeats"] == [0, 1] and row["mib_s"]["values"] == [2.0, 3.0]
    assert row["cpu_s_per_gib"]["median"] == 0.375 and row["cpu_s_per_gib"]["below_1"] == 2
    rows = {r["method"]: r for r in methods(jobs)}
    assert rows["b"]["read_once"] == 1 and rows["a"]["read_once"] == 3
    assert rows["a"]["remote_us_per_access"]["median"] == 30.0


def test_rget_auto_is_on_only_across_hosts(monkeypatch):
    from pvfs.collective import _rma

    class Comm:
        def __init__(self, hosts):
            self.hosts, self.calls = hosts, 0

        def allgather(self, _):
            self.calls += 1
            return self.hosts

    monkeypatch.setenv("PVFS_COLLECTIVE_RGET", "auto")
    assert _rma.rget_wanted(Comm(["a:1", "a:2"])) is True
    assert _rma.rget_wanted(Comm(["a:1", "a:1"])) is False
    monkeypatch.setenv("PVFS_COLLECTIVE_RGET", "0")
    comm = Comm(["a:1", "a:2"])
    assert _rma.rget_wanted(comm) is False and comm.calls == 0  # no collective when set
    monkeypatch.delenv("PVFS_COLLECTIVE_RGET")
    assert _rma.RGET_DEFAULT in ("0", "auto")  # never on within one host by default
    assert _rma.rget_wanted(Comm(["a:1", "a:1"])) is False
