"""A small MPI check of issue 32's loan slots (s31) through the real MPI paths.

``mpiexec -n N python -m pvfs.bench.collective.loancheck LOANS PATH [PAGES [READAHEAD]]``:
the ranks (``servers`` coordination, the last rank a lock server) open a local file of
``PAGES`` (default 20) pages of 1 KiB read-only with 16 slots each (a quarter lent to the
pool when ``LOANS`` is 1: ``PVFS_COLLECTIVE_LOANS``) and read every page — first rank 0
alone (it runs ahead: past its own 12 slots it loads into lent slots), then the others in
turn, then all ranks at once, each in its own random order, three times over; every read
is checked against the file. Rank 0 prints one ``RESULT`` JSON line: the pages read from
the file and the cache's counters summed over the clients, and the lock server's loan
counters. With 20 pages and 3 or more clients the group has room for every page, so each
should be read once with loans on. (pvfs is not needed: a local file stands in.)"""
import json
import os
import random
import sys

from mpi4py import MPI

import pvfs.collective as pc
from pvfs.bench.collective.localfile import use_local_files

PS = 1024
loans, path = sys.argv[1], sys.argv[2]
PAGES = int(sys.argv[3]) if len(sys.argv) > 3 else 20
readahead = int(sys.argv[4]) if len(sys.argv) > 4 else 0
os.environ["PVFS_COLLECTIVE_LOANS"] = loans

use_local_files(PS)

comm = MPI.COMM_WORLD
want = bytes((i * 7 + i // PS) % 251 for i in range(PAGES * PS))
if comm.Get_rank() == 0:
    with open(path, "wb") as fh:
        fh.write(want)
comm.Barrier()
f = pc.open(comm, None, path, "r", coordination="servers", page_size=PS,
            cache_bytes=16 * PS, lock_servers=1, readahead=readahead)
if f.is_lock_server:
    comm.gather(f.counters(), root=0)
    sys.exit(0)
r, n = f.comm.Get_rank(), f.comm.Get_size()


def check(p: int, k: int = 1) -> None:
    k = min(k, PAGES - p)
    got = f.read_at(p * PS, k * PS)
    assert bytes(got) == want[p * PS:(p + k) * PS], (r, p, k)


for turn in range(n):
    if r == turn:
        for p in range(PAGES):
            check(p)
    f.comm.Barrier()
rng = random.Random(r)
for _ in range(3):
    order = list(range(PAGES))
    rng.shuffle(order)
    for p in order:
        check(p, rng.choice((1, 1, 2, 3)))
c = f.counters()
f.close()
allc = comm.gather(c, root=0)
if comm.Get_rank() == 0:
    keys = ("fs_bytes_read", "evictions", "misses", "loaned", "ra_pages", "read_around")
    server = allc[-1] or {}
    print("RESULT", json.dumps({"loans": loans == "1", "clients": n, "pages": PAGES,
                                "slots": 16, "readahead": readahead,
                                **{k: sum(x.get(k, 0) for x in allc[:-1] if x) for k in keys},
                                **{k: v for k, v in server.items() if "loan" in k}}),
          flush=True)
