"""The sliding window's placement in one process (issue 32): page caches on real message
homes, no MPI, no network, ranks moving at set speeds.

``n`` :class:`~pvfs.collective._cache.PageCache` objects share in-process lock homes (the
``thread`` back end's :class:`~pvfs.collective._service.Service` and
:class:`~pvfs.collective._msgclient.MsgLocks`, every message handled at once) and one data
plane, and read DAChe's sliding window (each rank starting at its own chunk of a window of
``n``, circularly, then the next window). A scheduler runs the rank with the earliest clock
next; an access costs 1 per page found locally, ``remote`` per page at another rank and
``load`` per page read from the file, divided by the rank's speed and jittered ±20 %
(seeded); read-ahead is charged nothing (its helper thread overlaps). What it gives: the
pages read from the file against the pages touched, the evictions and how many were read
ahead's, with and without issue 32's placement rule (``balance``) and its victim cache at
the homes (``victims``: evicted pages kept at their home for the next reader), and the
process CPU the protocol's Python takes per page read (no pickling, no MPI: a lower bound
of the message back ends' CPU per page).

    python -m pvfs.bench.collective.model [-n 8,16,32] [--loops 40] [--slots 128] [-o OUT]
"""

from __future__ import annotations

import argparse
import heapq
import json
import random
import sys
import time
from typing import Any

PS = 64  # page bytes in the model (the bytes do not matter, only which pages)


class _Done:
    @staticmethod
    def Test() -> bool:
        return True


class _Comm:
    """One rank's end of the in-process network: a request is handled at once by the
    destination's Service; replies wait in mailboxes."""

    def __init__(self, net: _Net, rank: int) -> None:
        self.net, self.rank = net, rank

    def Get_rank(self) -> int:
        return self.rank

    def isend(self, obj: Any, dest: int, tag: int) -> _Done:
        from pvfs.collective._service import REQ

        if tag == REQ:
            if obj[0] != "stop":
                self.net.services[dest]._handle(self.rank, obj)
        else:
            with self.net.lock:
                self.net.boxes.setdefault((self.rank, dest), []).append(obj)
        return _Done()

    def improbe(self, source: int, tag: int, status: Any = None) -> Any:
        from mpi4py import MPI

        with self.net.lock:
            if source == MPI.ANY_SOURCE:
                ready = [s for (s, d), box in self.net.boxes.items() if d == self.rank and box]
                if not ready:
                    return None
                source = ready[0]
            elif not self.net.boxes.get((source, self.rank)):
                return None
            obj = self.net.boxes[(source, self.rank)].pop(0)
        if status is not None:
            status.Set_source(source)
        return type("Msg", (), {"recv": staticmethod(lambda: obj)})()

    def iprobe(self, source: int, tag: int) -> bool:
        with self.net.lock:
            return bool(self.net.boxes.get((source, self.rank)))

    def recv(self, source: int, tag: int) -> Any:
        with self.net.lock:
            return self.net.boxes[(source, self.rank)].pop(0)


class _Net:
    def __init__(self, n: int) -> None:
        import threading

        from pvfs.collective._service import Service

        self.lock = threading.Lock()
        self.boxes: dict[tuple[int, int], list[Any]] = {}
        self.services = [Service(_Comm(self, r), None, stops=n) for r in range(n)]

    def locks(self, rank: int) -> Any:
        from pvfs.collective._msgclient import MsgLocks
        from pvfs.collective._service import Caller

        return MsgLocks(Caller(_Comm(self, rank)), list(range(len(self.services))))


class _Data:
    """One rank's slots; remote pieces are copied from the owner's slots."""

    remote_gets = remote_puts = 0

    def __init__(self, nslots: int, group: dict[int, _Data]) -> None:
        self.mem = bytearray(nslots * PS)
        self.group = group

    def view(self, slot: int) -> memoryview:
        return memoryview(self.mem)[slot * PS:(slot + 1) * PS]

    def dirty(self, slot: int) -> Any:
        from pvfs.collective._pages import Dirty

        return Dirty()

    def clean(self, slot: int) -> None:
        pass

    def mark(self, slot: int, lo: int, hi: int) -> None:
        pass

    def transfer(self, write: bool, by_owner: dict[int, Any]) -> None:
        for owner, slots in by_owner.items():
            for slot, parts in slots:
                view = self.group[owner].view(slot)
                for off, buf in parts:
                    self.remote_gets += 1
                    buf[:] = view[off:off + len(buf)]


class _File:
    def __init__(self, pages: int) -> None:
        self.size = pages * PS
        self.page_reads = 0

    def preadinto(self, buf: memoryview, offset: int) -> int:
        self.page_reads += (offset + len(buf) - 1) // PS - offset // PS + 1
        n = max(0, min(len(buf), self.size - offset))
        return n


def window(n: int, nslots: int, loops: int, balance: bool, spread: float,
           remote: float = 4.0, load: float = 4.0, seed: int = 0,
           victims: bool = False) -> dict[str, Any]:
    """One sliding-window run of ``n`` ranks; rank r's speed ``1 + spread (1 - r/(n-1))``."""
    from pvfs.collective._cache import PageCache

    chunk = 2  # pages
    pages = loops * n * chunk
    net, f = _Net(n), _File(pages)
    datas: dict[int, _Data] = {}
    caches = []
    for r in range(n):
        datas[r] = _Data(nslots, datas)
        c = PageCache(r, n, f, net.locks(r), datas[r], nslots, PS,  # type: ignore[arg-type]
                      size_at_open=f.size, atomic=False, readahead=nslots // 4 * PS,
                      align=4)
        assert c.ra is not None
        c.ra.balance = balance
        c.victims = victims  # (issue 32's victim cache at the homes)
        caches.append(c)
    speeds = [1.0 + spread * (1 - r / max(1, n - 1)) for r in range(n)]
    rnd = random.Random(seed)
    heap = [(0.0, r, 0) for r in range(n)]
    cpu0 = time.process_time()
    while heap:
        t, r, i = heapq.heappop(heap)
        c = caches[r]
        w, j = divmod(i, n)
        ch = w * n + (r + j) % n
        before = (c.hits, c.remote_hits, c.misses)
        c.read([(ch * chunk * PS, chunk * PS)])
        c.ra.drain()  # (deterministic: a prefetch finishes before the next step)
        hits, rem, miss = (a - b for a, b in zip((c.hits, c.remote_hits, c.misses), before,
                                                 strict=True))
        cost = (hits + remote * rem + load * miss) / speeds[r] * (0.8 + 0.4 * rnd.random())
        if i + 1 < loops * n:
            heapq.heappush(heap, (t + cost, r, i + 1))
    cpu = time.process_time() - cpu0
    for c in caches:
        c.close()
    return {"ranks": n, "slots": nslots, "loops": loops, "balance": balance,
            "spread": spread, "pages_touched": pages, "fs_read_pages": f.page_reads,
            "read_once": f.page_reads <= 1.1 * pages,
            "evictions": sum(c.evictions for c in caches),
            "ra_evictions": sum(c.ra.evictions for c in caches),
            "ra_room_refused": sum(c.locks.room_refusals for c in caches),
            "victims": victims, "victim_hits": sum(c.victim_hits for c in caches),
            "cpu_us_per_page_read": round(cpu / (n * n * loops * chunk) * 1e6, 1)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", "--ranks", default="8,16,32")
    ap.add_argument("--loops", type=int, default=40)
    ap.add_argument("--slots", type=int, default=128)
    ap.add_argument("--spreads", default="0,0.2,0.5")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("-o", "--output")
    args = ap.parse_args(argv)
    rows = []
    for n in (int(x) for x in args.ranks.split(",")):
        for spread in (float(x) for x in args.spreads.split(",")):
            for seed in range(args.seeds):
                # (the old read-ahead rule, the rule, the rule with the victim cache)
                for balance, victims in ((False, False), (True, False), (True, True)):
                    row = window(n, args.slots, args.loops, balance, spread, seed=seed,
                                 victims=victims)
                    row["seed"] = seed
                    rows.append(row)
                    print(json.dumps(row), file=sys.stderr, flush=True)
    out = {"model": "bench/collective/model.py", "argv": argv or sys.argv[1:],
           "rows": rows}
    if args.output:
        with open(args.output, "w") as fh:
            json.dump(out, fh, indent=1)
            fh.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
