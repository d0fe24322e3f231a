"""An in-memory backend for testing code that uses the block cache (like ``trio.testing``)."""

from __future__ import annotations

import trio

__all__ = ["MemoryBackend"]


class MemoryBackend:
    """Files as bytearrays, with a log of every call and knobs for failures and latency.

    Attributes:
        files: inode -> contents.
        reads: ``(ino, offset, length)`` of every read, in order.
        writes: ``(ino, offset, len(data))`` of every write, in order.
        fail_writes: when set, writes raise ``OSError(fail_writes)`` (e.g. ``errno.EIO``).
        fail_reads: the same for reads.
        delay: seconds each call sleeps first (lets tests interleave tasks).
        stripe: value of ``stripe_size(ino)`` (None: unknown).
    """

    def __init__(self, *, stripe: int | None = None, delay: float = 0.0) -> None:
        self.files: dict[int, bytearray] = {}
        self.reads: list[tuple[int, int, int]] = []
        self.writes: list[tuple[int, int, int]] = []
        self.fail_writes: int | None = None
        self.fail_reads: int | None = None
        self.delay = delay
        self.stripe = stripe

    def stripe_size(self, ino: int) -> int | None:
        return self.stripe

    async def read(self, ino: int, offset: int, length: int) -> bytes:
        if self.delay:
            await trio.sleep(self.delay)
        else:
            await trio.lowlevel.checkpoint()
        self.reads.append((ino, offset, length))
        if self.fail_reads is not None:
            raise OSError(self.fail_reads, "injected read failure")
        return bytes(self.files.get(ino, b"")[offset:offset + length])

    async def write(self, ino: int, offset: int, data: bytes) -> None:
        if self.delay:
            await trio.sleep(self.delay)
        else:
            await trio.lowlevel.checkpoint()
        self.writes.append((ino, offset, len(data)))
        if self.fail_writes is not None:
            raise OSError(self.fail_writes, "injected write failure")
        f = self.files.setdefault(ino, bytearray())
        if len(f) < offset:
            f.extend(bytes(offset - len(f)))
        f[offset:offset + len(data)] = data

    def truncate(self, ino: int, size: int) -> None:
        f = self.files.setdefault(ino, bytearray())
        if size < len(f):
            del f[size:]
        else:
            f.extend(bytes(size - len(f)))
