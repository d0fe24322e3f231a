"""A small MPI check of the victim cache (issue 32) through the real MPI paths.

``mpiexec -n N python -m pvfs.bench.collective.victimcheck COORDINATION VICTIMS PATH``: the
ranks (with ``servers``, the last is a lock server) open a local file of 20 pages of 1 KiB
with 8 slots each and read-ahead off, and read every page in turn — rank 0 first (it runs
ahead and evicts), then rank 1, ... — then rank 1 writes into page 5 and everybody reads it
back; every read is checked. ``VICTIMS`` is ``PVFS_COLLECTIVE_VICTIMS``. Rank 0 prints one
``RESULT`` JSON line: the file reads and the cache's counters summed over the clients.
(pvfs is not needed: the file system is replaced by the local file.) An optional fourth
argument turns read-ahead on with that window in bytes (s30: read-ahead claims take the
homes' victim copies; ``ra_copies`` counts the pages cached from them)."""
import json
import os
import sys

from mpi4py import MPI

import pvfs.collective as pc
from pvfs.bench.collective.localfile import use_local_files

PS = 1024
PAGES = 20
coord, victims, path = sys.argv[1], sys.argv[2], sys.argv[3]
readahead = int(sys.argv[4]) if len(sys.argv) > 4 else 0
os.environ["PVFS_COLLECTIVE_VICTIMS"] = victims

use_local_files(PS)

comm = MPI.COMM_WORLD
if comm.Get_rank() == 0:
    with open(path, "wb") as fh:
        fh.write(bytes((i * 7) % 251 for i in range(PAGES * PS)))
comm.Barrier()
f = pc.open(comm, None, path, "r+", coordination=coord, page_size=PS, cache_bytes=8 * PS,
            lock_servers=1, readahead=readahead)
if f.is_lock_server:
    comm.gather(None, root=0)
    print("server", json.dumps(f.counters()), flush=True)
    sys.exit(0)
r, n = f.comm.Get_rank(), f.comm.Get_size()
want = bytes((i * 7) % 251 for i in range(PAGES * PS))
# rank 0 reads everything first (runs ahead), then the others in turn; then writes+reads
for turn in range(n):
    if r == turn:
        for p in range(PAGES):
            got = f.read_at(p * PS, PS)
            assert bytes(got) == want[p * PS:(p + 1) * PS], (r, p)
    f.comm.Barrier()
if r == 1:
    f.write_at(5 * PS + 10, b"HELLO")
f.sync()
f.comm.Barrier()
got = f.read_at(5 * PS, PS)
exp = bytearray(want[5 * PS:6 * PS]); exp[10:15] = b"HELLO"
assert bytes(got) == bytes(exp), r
c = f.counters()
f.close()
allc = comm.gather(c, root=0)
if comm.Get_rank() == 0:
    keys = ("fs_reads", "fs_bytes_read", "evictions", "victims_sent", "victim_hits", "misses",
            "ra_pages", "ra_copies")
    print("RESULT", json.dumps({"coordination": coord, "victims": victims == "1",
                                "clients": n, "pages": PAGES, "slots": 8,
                                "readahead": readahead,
                                **{k: sum(x.get(k, 0) for x in allc if x) for k in keys}}),
          flush=True)
