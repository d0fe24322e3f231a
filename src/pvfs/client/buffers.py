"""Byte views of callers' buffers that end with the call, on every path.

A memoryview exports its object's buffer until it is released, and a ``bytearray`` with an
export cannot change size (``BufferError: Existing exports of data``). A view left to the
garbage collector is released only when its last reference goes, which may be much later: a
frame kept by an exception's traceback (a resend after a broken connection, an error handed
to the caller) holds it until the cycle collector runs. So the client takes views only in
``with`` blocks and the caller gets its buffer back, resizable, whatever happened.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def byte_view(buf) -> Iterator[memoryview]:
    """``buf`` as a flat view of unsigned bytes (C-contiguous buffers only), released on exit."""
    with memoryview(buf) as raw, raw.cast("B") as view:
        yield view


def nbytes(buf) -> int:
    """The length in bytes of a C-contiguous buffer, without keeping a view of it."""
    with byte_view(buf) as view:
        return len(view)
