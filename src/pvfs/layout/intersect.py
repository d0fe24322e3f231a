"""Intersect an I/O description with one I/O daemon's share of a striped file.

The result is the I/O stream of thesis fig. 3.2: the pieces of the request that the daemon
holds, in logical (= buffer) order, each as ``(buf_off, local_off, length)`` — where the bytes
sit in the caller's buffer and in the daemon's stripe file. Pieces contiguous in both are
merged, so a large contiguous request is one access per daemon however small ``ssize`` is.
"""

from __future__ import annotations

from array import array

from pvfs.layout.describe import Description
from pvfs.layout.stripe import Stripe

Piece = tuple[int, int, int]


def split(regions: list[tuple[int, int]], stripe: Stripe) -> list[list[Piece]]:
    """Pieces of every share rank (index = rank) for a region list, each in stream order."""
    ss, pc = stripe.ssize, stripe.pcount
    out: list[list[Piece]] = [[] for _ in range(pc)]
    buf = 0
    for off, length in regions:
        end = off + length
        pos = off
        while pos < end:
            unit, within = divmod(pos, ss)
            n = min(ss - within, end - pos)
            rank = unit % pc
            local = (unit // pc) * ss + within
            pieces = out[rank]
            if pieces:
                pb, pl, pn = pieces[-1]
                if pb + pn == buf and pl + pn == local:
                    pieces[-1] = (pb, pl, pn + n)
                    pos += n
                    buf += n
                    continue
            pieces.append((buf, local, n))
            pos += n
            buf += n
    return out


def split_description(desc: Description, stripe: Stripe) -> list[list[Piece]]:
    return split(desc.expand(), stripe)


def pieces_for_rank(desc: Description, stripe: Stripe, rank: int) -> list[Piece]:
    """The stream daemon ``rank`` serves for ``desc`` (its pieces in logical order)."""
    ss, pc = stripe.ssize, stripe.pcount
    out: list[Piece] = []
    buf = 0
    for off, length in desc.expand():
        end = off + length
        # Walk only this rank's units inside [off, end).
        unit = off // ss
        unit += (rank - unit) % pc
        while True:
            start = max(unit * ss, off)
            if start >= end:
                break
            stop = min((unit + 1) * ss, end)
            n = stop - start
            b = buf + (start - off)
            local = (unit // pc) * ss + (start - unit * ss)
            if out and out[-1][0] + out[-1][2] == b and out[-1][1] + out[-1][2] == local:
                ob, ol, on = out[-1]
                out[-1] = (ob, ol, on + n)
            else:
                out.append((b, local, n))
            unit += pc
        buf += length
    return out


def pack_segments(pieces: list[Piece]) -> bytes:
    """``(buf_off, length)`` pairs as packed little-endian int64 (for ``_native.transfer``)."""
    a = array("q")
    for b, _, n in pieces:
        a.append(b)
        a.append(n)
    return a.tobytes()


def stream_length(pieces: list[Piece]) -> int:
    return sum(n for _, _, n in pieces)
