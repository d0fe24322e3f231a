"""The records of writes the C front end answered (``OP_WROTE``, csrc/front/writes.c) that
apply as one write: the kernel cuts a write(2) that starts inside a page it must not mark up
to date in two requests (IOR hard's every transfer), and each record applied alone was a
trip through the write handler. ``cfront.CFront._apply_wrote`` takes them with
:func:`joined`."""

from __future__ import annotations

import collections
from typing import Any

__all__ = ["JOIN_BYTES", "joined"]

# Records of contiguous writes of one handle applied as one write, up to this many bytes:
# the kernel's largest write request (cfront.MAX_WRITE).
JOIN_BYTES = 1 << 20


def joined(wrote: collections.deque) -> list[Any]:
    """Take the next ``OP_WROTE`` record from ``wrote`` and those after it that continue it
    (the same handle, each starting where the one before ended), up to ``JOIN_BYTES`` in
    all: applied as one write (``CFront._apply_wrote``)."""
    first = wrote.popleft()
    fh, off, data = first.args
    reqs = [first]
    end, size = off + len(data), len(data)
    while wrote:
        nfh, noff, ndata = wrote[0].args
        if nfh != fh or noff != end or size + len(ndata) > JOIN_BYTES:
            break
        reqs.append(wrote.popleft())
        end += len(ndata)
        size += len(ndata)
    return reqs
