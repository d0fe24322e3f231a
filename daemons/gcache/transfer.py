"""Moving blocks between the slab and the I/O daemons with the native transfer, no copies.

The client's data path (``pvfs.client.datapath``) receives a description's bytes into one
buffer, in description order. The global cache's blocks sit in scattered slots of its slab,
so this module builds the same per-daemon requests but points each piece of each daemon's
stream at the slot where its bytes belong: the C loop then receives straight into (or sends
straight from) the slab, all daemons at once, with the GIL released.
"""

from __future__ import annotations

import bisect
from array import array

from pvfs.client.datapath import DataPath
from pvfs.layout.describe import Regions
from pvfs.layout.intersect import split_description
from pvfs.layout.stripe import Stripe

__all__ = ["Extent", "calls_for", "read_extents", "write_extents"]

Extent = tuple[int, int, int]  # (file offset, length, buffer offset)


def calls_for(niods: int, op: str, ino: int, stripe: Stripe, extents: list[Extent], buf,
              direction: int) -> tuple[list, list[int], dict[int, int]]:
    """Per-daemon request tuples for ``DataPath.run`` (of a file system of ``niods`` I/O
    daemons); also the ranks and how far each daemon's share of the request reaches in its
    stripe file (for the end-of-file check). ``iodlink.py`` sends the same requests."""
    regions: list[list[int]] = []
    starts: list[int] = []
    pos = 0
    for off, n, _ in extents:
        starts.append(pos)
        pos += n
        if regions and regions[-1][0] + regions[-1][1] == off:
            regions[-1][1] += n
        else:
            regions.append([off, n])
    desc = Regions([(o, n) for o, n in regions])
    wire = desc.to_wire()
    calls, ranks, reach = [], [], {}
    for rank, pieces in enumerate(split_description(desc, stripe)):
        if not pieces:
            continue
        segs = array("q")
        for cpos, _local, n in pieces:
            i = bisect.bisect_right(starts, cpos) - 1
            while n > 0:
                _, ext_len, ext_buf = extents[i]
                take = min(n, starts[i] + ext_len - cpos)
                segs.append(ext_buf + cpos - starts[i])
                segs.append(take)
                cpos += take
                n -= take
                i += 1
        iod = stripe.iod_of_rank(rank, niods)
        calls.append((iod, {"op": op, "ino": ino, "stripe": stripe.to_wire(), "desc": wire},
                      buf, segs.tobytes(), direction))
        ranks.append(rank)
        reach[rank] = max(local + n for _, local, n in pieces)
    return calls, ranks, reach


def read_extents(path: DataPath, ino: int, stripe: Stripe, extents: list[Extent],
                 buf) -> int | None:
    """Fill each extent's place in ``buf`` with its file bytes (blocking; run it in a worker
    thread). Returns the file's size when some daemon's stripe file ended before the request
    did (bytes past it are left as they were), else None.

    Args:
        extents: ``(file offset, length, buffer offset)``, sorted by file offset, disjoint.
    """
    if not extents:
        return None
    calls, ranks, reach = calls_for(path.config.niods, "read", ino, stripe, extents, buf, 0)
    replies = path.run(calls)
    sizes = {rank: r["local_size"] for rank, r in zip(ranks, replies)}
    if all(sizes[r] >= reach[r] for r in ranks):
        return None
    return path.size(ino, stripe, sizes)


def write_extents(path: DataPath, ino: int, stripe: Stripe, extents: list[Extent],
                  buf) -> int:
    """Write each extent's bytes from its place in ``buf`` (blocking); bytes written."""
    if not extents:
        return 0
    calls, _, _ = calls_for(path.config.niods, "write", ino, stripe, extents, buf, 1)
    return sum(r["nbytes"] for r in path.run(calls))
