"""Issue 32: one file-system read per page when ranks read the same pages at different
speeds — the read-ahead of a rank without a free slot does not evict pages while the rest
of the group has room (``LockManager.claim_batch``'s ``room``).

Over the netns harness at 16 clients the fastest rank led nearly every read-ahead range,
read 800 pages ahead into its 128 slots and evicted 674 of them; every one of the 938
pages read a second time had been evicted in between (trace of 2026-11-29), while most
ranks' slots stood empty. Here several page caches share real message homes (the
``thread`` back end's :class:`Service` and :class:`MsgLocks`, messages in process) and one
data plane; their reads are interleaved by hand, so each run is deterministic.
"""

from __future__ import annotations

import os
import shutil

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_collective_load_waits import _FakeData
from test_collective_parts import _Net

from pvfs.collective._locks import LockManager
from pvfs.collective._pages import UNCACHED, Meta

PS = 64


class _File:
    """The file every rank reads: counts the pages each read covers."""

    def __init__(self, pages: int) -> None:
        self.data = bytes((i * 7) % 251 for i in range(pages * PS))
        self.page_reads: dict[int, int] = {}

    def preadinto(self, buf, offset):
        for p in range(offset // PS, (offset + len(buf) - 1) // PS + 1):
            self.page_reads[p] = self.page_reads.get(p, 0) + 1
        part = self.data[offset:offset + len(buf)]
        buf[:len(part)] = part
        return len(part)


class _GroupData(_FakeData):
    """One rank's slots; remote pieces are copied from the owner's slots."""

    def __init__(self, nslots: int, group: dict[int, _GroupData]) -> None:
        super().__init__(nslots, PS)
        self.group = group

    def transfer(self, write, by_owner):
        assert not write
        for owner, slots in by_owner.items():
            for slot, parts in slots:
                view = self.group[owner].view(slot)
                for off, buf in parts:
                    self.remote_gets += 1
                    buf[:] = view[off:off + len(buf)]


def _group(n: int, nslots: int, pages: int, balance: bool, victims: bool = True,
           readahead: bool = True):
    from pvfs.collective._cache import PageCache

    net = _Net(n)
    f = _File(pages)
    datas: dict[int, _GroupData] = {}
    caches = []
    for r in range(n):
        datas[r] = _GroupData(nslots, datas)
        c = PageCache(r, n, f, net.locks(r), datas[r], nslots, PS,  # type: ignore[arg-type]
                      size_at_open=len(f.data), atomic=False,
                      readahead=nslots // 4 * PS if readahead else 0)
        assert (c.ra is not None) == readahead and not c.victims  # (off by default)
        if c.ra is not None:
            c.ra.balance = balance
        c.victims = victims
        caches.append(c)
    return net, f, caches


def _read(cache, f, page: int) -> None:
    got = cache.read([(page * PS, PS)])
    assert bytes(got) == f.data[page * PS:(page + 1) * PS]
    if cache.ra is not None:
        cache.ra.drain()  # (deterministic: the helper thread's reads finish before the next step)


def _run(balance: bool, lag: int = 2, pages: int = 30, nslots: int = 16,
         victims: bool = True):
    """Ranks 0 and 1 stream through the file together, rank 1 ``lag`` pages behind; rank 2
    reads it all afterwards (a rank far behind). The group has room for every page (3 × 16
    slots for 30 pages), rank 0 alone does not."""
    net, f, caches = _group(3, nslots, pages, balance, victims)
    for step in range(pages + lag):
        if step < pages:
            _read(caches[0], f, step)
        if 0 <= step - lag < pages:
            _read(caches[1], f, step - lag)
    for p in range(pages):
        _read(caches[2], f, p)
    for c in caches:
        c.close()
    return f, caches, net


def test_read_ahead_without_a_free_slot_leaves_the_range_while_others_have_room():
    f, caches, _ = _run(balance=True)
    assert sorted(f.page_reads) == list(range(30))
    assert max(f.page_reads.values()) == 1, f.page_reads  # every page read once
    assert sum(c.evictions for c in caches) == 0
    assert caches[0].locks.room_refusals > 0  # the leader left ranges to rank 1
    assert caches[1].ra.pages > 0  # ... which read them ahead into its free slots


def test_before_issue_32s_fix_the_leader_evicted_what_a_slower_rank_had_not_read():
    """The old behaviour (``PVFS_COLLECTIVE_READAHEAD_BALANCE=0``): the leader's read-ahead
    evicts its oldest pages, and the rank behind reads them from the file again."""
    f, caches, _ = _run(balance=False, victims=False)
    assert caches[0].evictions > 0
    assert max(f.page_reads.values()) == 2
    assert sum(f.page_reads.values()) > 1.1 * 30  # the target missed


def test_a_full_group_still_reads_ahead_by_evicting():
    """When the other ranks have no room either, reading ahead evicts as any cache must
    (a stream longer than the group's cache keeps its read-ahead)."""
    _, f, caches = _group(2, 8, 64, balance=True)
    for c in caches[1:]:  # the other rank's slots are all taken
        for p in range(40, 48):
            _read(c, f, p)
    before = caches[0].ra.pages
    for p in range(32):
        _read(caches[0], f, p)
    assert caches[0].ra.pages - before > 8  # read ahead past its own 8 slots
    assert caches[0].evictions > 0 and caches[0].locks.room_refusals == 0


@settings(max_examples=40, deadline=None)
@given(lag=st.integers(0, 8), pages=st.integers(8, 40))
def test_read_ahead_never_evicts_while_the_group_has_room(lag, pages):
    """Any lag of the second stream, any length that leaves the group (3 × 16 slots)
    room for a read-ahead window more than the homes' estimate can be off (each of the 3
    homes sees a third of the pages): read-ahead evicts nothing, so a page is read again
    only after a demand load evicted it — the leader must cache a page it needs and no
    other rank has — and with the second stream inside the leader's read-ahead window
    (lag ≤ 2 with windows of 4 pages) and the file within the two streams' slots, never."""
    f, caches, _ = _run(balance=True, lag=lag, pages=pages)
    assert sum(c.ra.evictions for c in caches) == 0
    again = sum(f.page_reads.values()) - pages
    assert again <= sum(c.evictions for c in caches)
    if lag <= 2 and pages <= 32:
        assert again == 0, (lag, pages, f.page_reads)


# ----------------------------------------------------------------- the home's count
@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["claim", "cache", "uncache", "drop"]),
                          st.integers(0, 3), st.lists(st.integers(0, 7), min_size=1,
                                                      max_size=4, unique=True)),
                max_size=40),
       st.sampled_from([None, (1, 0, 0), (2, 6, 2), (1, 100, 4), (1, 100, 50)]))
def test_home_counts_its_cached_pages_and_refuses_claims_only_with_room(steps, room):
    """Whatever claims, releases and publications come, ``cached`` is the number of pages
    the home knows cached or claimed, and a claim that would evict is refused exactly
    when the estimate (``cached`` × homes + the pages) fits the others' slots."""
    m = LockManager()
    held: dict[int, int] = {}  # page -> writer
    for op, rank, pages in steps:
        pages = sorted(pages)
        if op == "claim":
            fits = m.has_room(room, len(pages), rank)
            out = m.claim_batch(rank, rank, pages, False, room)
            if fits:
                assert out is None
                continue
            assert out is not None
            for p, flushed in zip(pages, out, strict=True):
                if flushed is not None:
                    held[p] = rank
        else:
            for p in pages:
                if held.get(p) != rank:
                    continue
                del held[p]
                meta = {"cache": Meta(rank, p, False), "uncache": UNCACHED,
                        "drop": None}[op]
                m.release(p, rank, meta)
        known = sum(1 for e in m._pages.values() if e.meta.owner >= 0)
        assert m.cached == known


@pytest.mark.parametrize("room,other,fits", [
    (None, True, False),
    ((1, 5, 4), True, False),  # 4 cached + 2 do not fit 5 slots
    ((1, 6, 4), True, True),
    ((2, 9, 4), True, False),  # 2 homes: about 8 cached in the group
    ((2, 10, 4), True, True),
    ((1, 100, 4), False, False),  # nobody else asked for a lock: a rank reading alone
    ((1, 100, 3), True, False),  # another rank did, 4 requests ago: more than 3
    ((1, 100, 4), True, True)])
def test_has_room_scales_the_home_s_share_and_wants_the_others_reading(room, other, fits):
    m = LockManager()
    if other:  # rank 1 reads a page of the file
        assert m.request(9, 1, False)[0] == "granted"
        m.release(9, 1, None)
    assert m.claim_batch(0, 0, [0, 1, 2, 3], False) == [False] * 4  # 4 pages cached here
    assert m.has_room(room, 2, 0) is fits


def test_a_rank_streaming_alone_keeps_its_read_ahead():
    """One rank of four reads a file four times its slots while the others read nothing:
    the group has room, but no other rank asks for a lock, so no other stream would take
    a range left to it — the rank's read-ahead evicts as before the rule."""
    _, f, caches = _group(4, 16, 64, balance=True)
    lone = caches[0]
    for p in range(64):
        _read(lone, f, p)
    assert lone.locks.room_refusals == 0
    assert lone.ra.evictions > 0
    assert lone.ra.pages > 48  # the file past its first 16 slots read ahead all the same
    assert max(f.page_reads.values()) == 1
    for c in caches:
        c.close()


def test_rereads_finds_pages_read_again_after_an_eviction(tmp_path):
    """``bench/collective/rereads.py`` on two ranks' traces: rank 0 read pages 0-1 ahead
    and evicted page 0; rank 1 read page 0 again (after the eviction) and page 1 was read
    twice with no eviction between (a read around, say)."""
    import json

    from pvfs.bench.collective.rereads import analyse

    r0 = {"rank": 0, "fs": [[1.0, 1.1, 0, 2 * PS, "ra"]], "evictions": [[2.0, 0]]}
    r1 = {"rank": 1, "fs": [[3.0, 3.1, 0, PS, "ra"], [1.5, 1.6, PS, PS, "r"],
                            [4.0, 4.1, 0, 10, "w"]], "evictions": []}
    paths = []
    for i, d in enumerate((r0, r1)):
        (tmp_path / f"servers-k1-n2-r{i}.json").write_text(json.dumps(d))
        paths.append(str(tmp_path / f"servers-k1-n2-r{i}.json"))
    got = analyse(paths, PS)
    assert (got["pages"], got["page_reads"], got["extra_reads"]) == (2, 4, 2)
    assert got["extra_after_eviction"] == 1
    assert got["extra_by_kind"] == {"ra->ra": 1, "ra->r": 1}
    assert got["ranks"] == [{"rank": 0, "pages_read": 2, "evictions": 1},
                            {"rank": 1, "pages_read": 2, "evictions": 0}]


class _TwoRanks:
    """Rank 0 of two whose other rank reports ``other`` as its host key."""

    def __init__(self, other: str) -> None:
        self.other = other

    def Get_rank(self):
        return 0

    def Get_size(self):
        return 2

    def bcast(self, obj, root=0):
        return obj

    def allgather(self, obj):
        return [obj, self.other]

    def allreduce(self, obj, op=None):
        return obj


def test_bells_only_within_one_network_namespace():
    """Issue 32: over the netns harness every rank has the machine's host name, but an
    abstract UNIX socket is reachable only from its own network namespace, so every ring
    to another "host" was refused and lost and each wait ran to its timeout. The host key
    carries the namespace: ranks in two namespaces poll instead."""
    import socket

    from pvfs.collective._wait import Bells, host_key

    mine = host_key()
    assert mine.startswith(socket.gethostname() + ":")
    other_ns = socket.gethostname() + ":1"
    assert not Bells(_TwoRanks(other_ns)).enabled
    same = Bells(_TwoRanks(mine))
    try:
        assert same.enabled
    finally:
        same.close()


_CHILD = """
import socket, sys
from pvfs.collective._wait import host_key
print(host_key())
o = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
try:
    o.sendto(b"!", b"\\0" + sys.argv[1].encode())
    print("sent")
except OSError:
    print("refused")
"""


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"),
                    reason="a network namespace needs root and unshare(1)")
def test_host_key_differs_in_another_network_namespace():
    """A process in a new network namespace on this machine (as a netns host) gets
    another key, so a group across namespaces does without doorbells; and a ring from
    there to this namespace's abstract socket is refused (the premise)."""
    import socket
    import subprocess
    import sys

    from pvfs.collective._wait import Bells, host_key

    name = f"pvfs-issue32-{os.getpid()}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(b"\0" + name.encode())
    try:
        out = subprocess.run(["unshare", "-n", sys.executable, "-c", _CHILD, name],
                             capture_output=True, text=True, check=True,
                             timeout=60).stdout.split()
    finally:
        sock.close()
    assert out[0] != host_key() and out[1] == "refused"
    assert not Bells(_TwoRanks(out[0])).enabled


def test_the_placement_model_reads_each_page_once_at_equal_speeds():
    """``bench/collective/model.py`` (the sliding window in one process): at equal speeds
    the rule reads each page once where the old one read pages again."""
    from pvfs.bench.collective.model import window

    old = window(4, 16, 6, balance=False, spread=0.0)
    new = window(4, 16, 6, balance=True, spread=0.0)
    assert new["fs_read_pages"] == new["pages_touched"] == 48 and new["ra_evictions"] == 0
    assert old["fs_read_pages"] > 48 and old["ra_evictions"] > 0
