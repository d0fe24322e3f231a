"""MPI side of tests/integration/test_collective.py: ``mpiexec -n N python collective_mpi.py
SCENARIO CONFIG COORDINATION[,COORDINATION...] [ARG]``.

Each scenario checks its own results on every rank and exits non-zero (aborting the job, so
no rank waits forever) when one fails; ``PVFS_COLLECTIVE_DEADLINE`` turns a deadlock into an
exception. Rank 0 prints ``OK <scenario>`` at the end.
"""

from __future__ import annotations

import json
import random
import sys
import time
import traceback

from mpi4py import MPI

import pvfs
import pvfs.collective as pc

comm = MPI.COMM_WORLD
RANK, SIZE = comm.Get_rank(), comm.Get_size()
PS = 1024  # small pages: many pages, many locks, evictions with a small cache


def fresh(fs, name: str) -> str:
    path = f"/coll/{name}"
    if RANK == 0:
        fs.makedirs("/coll", exist_ok=True)
        if fs.exists(path):
            fs.unlink(path)
    comm.Barrier()
    return path


def copen(fs, path, coord, amode="w+", **kw):
    kw.setdefault("page_size", PS)
    kw.setdefault("lock_servers", 1)
    return pc.open(comm, fs, path, amode, coordination=coord, **kw)


def server_done(f) -> bool:
    """Lock servers only serve; they pass the scenario's final barrier and stop."""
    if f.is_lock_server:
        comm.Barrier()
        return True
    return False


def visibility(fs, coord: str) -> None:
    """A read after another rank's synced write sees it — in the cache and in pvfs."""
    path = fresh(fs, f"vis-{coord}")
    f = copen(fs, path, coord, cache_bytes=8 * PS)
    if server_done(f):
        return
    r, n = f.comm.Get_rank(), f.comm.Get_size()
    blob = bytes([(r * 37 + i) % 251 for i in range(3 * PS + 17)])
    base = r * (3 * PS + 17) + 100
    f.write_at(base, blob)
    f.sync()
    peer = (r + 1) % n
    pblob = bytes([(peer * 37 + i) % 251 for i in range(3 * PS + 17)])
    got = f.read_at(peer * (3 * PS + 17) + 100, len(pblob))
    assert got == pblob, f"rank {r} read stale data of rank {peer}"
    # Also straight from pvfs (sync wrote it through):
    with fs.open(path) as g:
        assert g.pread(len(pblob), peer * (3 * PS + 17) + 100) == pblob, "sync did not write"
    f.close()
    comm.Barrier()


def atomic(fs, coord: str, rounds: int = 12) -> None:
    """Atomic mode: overlapping non-contiguous writes are seen whole or not at all."""
    path = fresh(fs, f"atomic-{coord}")
    f = copen(fs, path, coord, atomic=True, cache_bytes=16 * PS)
    if server_done(f):
        return
    r = f.comm.Get_rank()
    # Eight 300-byte regions scattered over six pages, the same for every rank.
    regions = [(k * 700 + 50, 300) for k in range(8)]
    total = sum(n for _, n in regions)
    for i in range(rounds):
        f.write_list(regions, bytes([1 + r + 16 * (i % 8)]) * total)
        got = f.read_list(regions)
        assert len(set(got)) == 1, f"rank {r}: torn read of an atomic write: {sorted(set(got))}"
    f.close()
    if RANK == 0:  # and the file holds one writer's request whole
        with fs.open(path) as g:
            final = b"".join(g.pread(n, off) for off, n in regions)
        assert len(set(final)) == 1, f"torn atomic writes in the file: {sorted(set(final))}"
    comm.Barrier()


def stress(fs, coord: str, ops: int = 120) -> None:
    """Random multi-page reads and writes, atomic and not, with a cache so small that pages
    are evicted while others hold them: no deadlock, own cells always read back, nothing
    lost after close."""
    path = fresh(fs, f"stress-{coord}")
    # About twice as many pages as the group's cache slots (6 per rank), at every size.
    cell, ncells = 97, 130 * SIZE + 140
    f = copen(fs, path, coord, cache_bytes=6 * PS)
    if f.is_lock_server:
        comm.gather({}, root=0)
        comm.gather({}, root=0)
        comm.Barrier()
        return
    r, n = f.comm.Get_rank(), f.comm.Get_size()
    rng = random.Random(1234 + r)
    mine: dict[int, int] = {}
    for i in range(ops):
        if i % 40 == 0:
            f.set_atomicity(i % 80 == 0)
        if rng.random() < 0.6:
            cells = sorted(rng.sample([c for c in range(ncells) if c % n == r], 6))
            value = rng.randrange(1, 256)
            f.write_list([(c * cell, cell) for c in cells], bytes([value]) * (cell * 6))
            for c in cells:
                mine[c] = value
        else:
            lo = rng.randrange(0, ncells - 12)
            got = f.read_at(lo * cell, 12 * cell)
            for c in range(lo, lo + 12):
                if c in mine:
                    part = got[(c - lo) * cell:(c - lo + 1) * cell]
                    assert part == bytes([mine[c]]) * cell, f"rank {r}: cell {c} lost"
    counters = f.counters()
    f.close()
    every = comm.gather(mine, root=0)
    all_counters = comm.gather(counters, root=0)
    if RANK == 0:
        counters = {k: sum(c.get(k, 0) for c in all_counters or []) for k in counters}
        with fs.open(path) as g:
            data = g.pread(cell * ncells, 0)
        for part in every or []:
            for c, value in part.items():
                assert data[c * cell:(c + 1) * cell] == bytes([value]) * cell, f"cell {c} lost"
        print("counters", json.dumps(counters))
    comm.Barrier()


def model(fs, coord: str, spec: str) -> None:
    """Run a generated sequence one operation at a time; every read must equal the model."""
    with open(spec) as fh:
        case = json.load(fh)
    path = fresh(fs, f"model-{coord}")
    f = copen(fs, path, coord, atomic=case["atomic"], cache_bytes=case["slots"] * PS)
    if server_done(f):
        return
    n = f.comm.Get_size()
    state = bytearray()
    for step, (who, op, off, length, value) in enumerate(case["ops"]):
        who %= n
        if op == "write":
            if len(state) < off + length:
                state.extend(bytes(off + length - len(state)))
            state[off:off + length] = bytes([value]) * length
            if f.comm.Get_rank() == who:
                f.write_at(off, bytes([value]) * length)
        elif op == "read" and f.comm.Get_rank() == who:
            want = bytes(state[off:off + length]).ljust(length, b"\0")
            got = f.read_at(off, length)
            assert got == want, f"step {step}: read ({off}, {length}) differs from the model"
        elif op == "sync":
            f.sync()
        f.comm.Barrier()  # one operation at a time, in the generated order
    f.close()
    if RANK == 0:
        with fs.open(path) as g:
            assert g.pread(len(state), 0) == bytes(state), "file after close != model"
    comm.Barrier()


def write_behind(fs, coord: str) -> None:
    """Write-only non-atomic open: two-stage write-behind, everything in pvfs after close."""
    path = fresh(fs, "wb")
    # Stage two big enough to hold pages until they fill; every full page written at once.
    f = copen(fs, path, coord, amode="w", cache_bytes=64 * PS, sub_bytes=256,
              early_bytes=PS)
    assert f.method == "write_behind"
    r, n = f.comm.Get_rank(), f.comm.Get_size()
    rng = random.Random(r)
    cell, ncells = 61, 600
    # The ranks' cells interleave; the first half of the file is written before the switch,
    # so its stage-two pages fill up and are written early.
    first = [c for c in range(ncells // 2) if c % n == r]
    later = [c for c in range(ncells // 2, ncells) if c % n == r]
    rng.shuffle(first)
    rng.shuffle(later)
    # Every cell of the first half is written twice; the second write travels in a later
    # sub-buffer (often after the page's early write) and must win.
    for c in first:
        f.write_at(c * cell, b"\xee" * cell)
    for c in first:
        f.write_at(c * cell, bytes([c % 251 + 1]) * cell)
    f.comm.Barrier()  # every rank's first half sent before the counters are read
    counters = f.counters()
    # Atomic mode is not for write-behind: the file flushes and goes on through the cache.
    f.set_atomicity(True)
    assert f.method == "caching"
    for c in later:
        f.write_at(c * cell, bytes([c % 251 + 1]) * cell)
    f.close()
    want = b"".join(bytes([c % 251 + 1]) * cell for c in range(ncells))
    if RANK == 0:
        with fs.open(path) as g:
            data = g.pread(cell * ncells, 0)
        assert data == want, "write-behind lost data or applied an older write last"
    # A stage two of 2 pages a rank: pages are evicted long before they fill.
    path = fresh(fs, "wb-evict")
    f = copen(fs, path, coord, amode="w", cache_bytes=2 * PS, sub_bytes=256)
    for c in first + later:
        f.write_at(c * cell, bytes([c % 251 + 1]) * cell)
    f.close()
    counters.update({"evict_" + k: v for k, v in f.counters().items()})
    if RANK == 0:
        with fs.open(path) as g:
            assert g.pread(cell * ncells, 0) == want, "write-behind lost evicted data"
    # Rank 0 prints every rank's line: lines printed by several ranks at once can be
    # spliced together by mpiexec's output forwarding.
    every = comm.gather(counters, root=0)
    if RANK == 0:
        for c in every:
            print("counters", json.dumps(c), flush=True)
    comm.Barrier()


def readahead(fs, coord: str) -> None:
    """Read-ahead on (every coordination): pages another rank read ahead into its cache
    still show a synced write (before and after they were read ahead), reads ahead never
    block an application barrier or another rank's write, and everything is in pvfs after
    close."""
    path = fresh(fs, f"ra-{coord}")
    npages = 64
    old = bytes([(i * 13) % 251 + 1 for i in range(npages * PS)])
    if RANK == 0:  # the file exists before the open: read-ahead stops at the size at open
        with fs.open(path, "w+b") as g:
            g.pwrite(old, 0)
    comm.Barrier()
    f = copen(fs, path, coord, amode="r+", cache_bytes=48 * PS, readahead=8 * PS)
    if server_done(f):
        return
    cc = f.comm  # the clients (lock servers only serve)
    r, n = cc.Get_rank(), cc.Get_size()
    want = bytearray(old)
    # Rank 0 reads pages 0-11 in order: the pages ahead of them are read into its cache.
    if r == 0:
        for p in range(12):
            assert f.read_at(p * PS, PS) == old[p * PS:(p + 1) * PS], f"page {p}"
        f.cache.ra.drain()
        ahead = sorted(p for p, _ in f.cache.lru.items() if p >= 12)
        assert ahead, "nothing was read ahead"
    else:
        ahead = None
    ahead = cc.bcast(ahead, root=0)
    cc.Barrier()  # an application barrier: reads ahead must not hold it up
    # Every other rank writes into pages rank 0 read ahead (they are cached there) and
    # into pages further on that nobody has read yet; rank 0 writes too.
    further = [p for p in range(max(ahead) + 1, npages)][:n]  # not read ahead by anyone
    for k, p in enumerate(ahead + further):
        w = k % n
        piece = bytes([(w * 29 + k) % 251 + 1]) * (PS // 2)
        off = p * PS + (k % 2) * (PS // 2)
        want[off:off + len(piece)] = piece
        if r == w:
            f.write_at(off, piece)
    f.sync()
    # Each rank now reads the whole file in order (read-ahead at every rank): the synced
    # writes are seen, whoever read which page ahead.
    for p in range(npages):
        got = f.read_at(p * PS, PS)
        assert got == bytes(want[p * PS:(p + 1) * PS]), f"rank {r}: page {p} stale"
    # Writes into pages now cached all over the group, not synced: the cache is coherent,
    # so reads in order (reading ahead again) see them too, and close writes them.
    cc.Barrier()  # (every rank's reads above are done)
    for p in range(r, npages, n):
        piece = bytes([(p * 3 + 7) % 251 + 1]) * 100
        f.write_at(p * PS + 200, piece)
    for p in range(npages):
        want[p * PS + 200:p * PS + 300] = bytes([(p * 3 + 7) % 251 + 1]) * 100
    cc.Barrier()
    for p in range(npages):
        got = f.read_at(p * PS, PS)
        assert got == bytes(want[p * PS:(p + 1) * PS]), f"rank {r}: page {p} stale (2)"
    counters = f.counters()
    f.close()
    every = cc.gather(counters.get("ra_pages", 0), root=0)
    if r == 0:
        assert sum(every) > len(ahead), f"read-ahead pages per rank: {every}"
        with fs.open(path) as g:
            assert g.pread(npages * PS, 0) == bytes(want), "file after close differs"
    comm.Barrier()


def _slow_next_read(f, delay: float, reqs: list) -> None:
    """Rank 0: the cache's next file read tells rank 1 it has begun (the page is locked
    and being loaded), then takes ``delay`` seconds."""
    orig = f.io.preadinto

    def once(buf, off):
        f.io.preadinto = orig
        reqs.append(f.comm.isend(off, dest=1, tag=77))
        time.sleep(delay)
        return orig(buf, off)

    f.io.preadinto = once


def stall(fs, coord: str) -> None:
    """Issue 32: rank 1 reads a page rank 0 is loading. A load shorter than the bound
    (1 s) is waited for and its copy read — no second file read; a loader that stalls
    past it (4 s) is read around after the bound — counted as a stall, nobody hangs."""
    path = fresh(fs, f"stall-{coord}")
    want = bytes((i * 7) % 251 for i in range(8 * PS))
    if RANK == 0:
        with fs.open(path, "w+b") as g:
            g.pwrite(want, 0)
    comm.Barrier()
    f = copen(fs, path, coord, amode="r", cache_bytes=16 * PS, readahead=0)
    if server_done(f):
        return
    r, reqs = f.comm.Get_rank(), []
    for page, delay in ((2, 0.4), (5, 4.0)):
        if r == 0:
            _slow_next_read(f, delay, reqs)
            assert f.read_at(page * PS, PS) == want[page * PS:(page + 1) * PS]
        elif r == 1:
            f.comm.recv(source=0, tag=77)
            before, began = f.counters(), time.monotonic()
            got = f.read_at(page * PS, PS)
            took, after = time.monotonic() - began, f.counters()
            assert got == want[page * PS:(page + 1) * PS], f"{coord}: page {page} differs"
            stalls = after["load_stalls"] - before["load_stalls"]
            reads = after["fs_reads"] - before["fs_reads"]
            if delay < 1.0:
                assert (stalls, reads) == (0, 0), f"{coord}: a live load read twice: {after}"
            else:
                assert stalls == 1 and reads == 1, f"{coord}: no read around: {after}"
                assert took < 3.5, f"{coord}: waited {took:.2f}s for a stalled loader"
        f.comm.Barrier()
    for req in reqs:
        req.wait()
    f.close()
    comm.Barrier()


SCENARIOS = {"stall": stall, "readahead": readahead, "visibility": visibility, "atomic": atomic, "stress": stress, "model": model,
             "write_behind": write_behind}


def main() -> None:
    scenario, config, coords = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
    extra = sys.argv[4:]
    fs = pvfs.connect(config)
    for coord in coords:
        SCENARIOS[scenario](fs, coord, *extra)
    fs.close()
    if RANK == 0:
        print("OK", scenario, flush=True)


if __name__ == "__main__":
    try:
        main()
    except BaseException:  # noqa: BLE001 - any failure must end the whole job
        traceback.print_exc()
        sys.stderr.flush()
        comm.Abort(1)
