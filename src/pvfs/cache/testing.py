"""An in-memory backend for testing code that uses the block cache (like ``trio.testing``)."""

from __future__ import annotations

import trio

__all__ = ["GatheringBackend", "MemoryBackend", "PlainBackend"]


class MemoryBackend:
    """Files as bytearrays, with a log of every call and knobs for failures and latency.

    Attributes:
        files: inode -> contents.
        reads: ``(ino, offset, length)`` of every read, in order (a list read logs each
            region).
        writes: ``(ino, offset, len(data))`` of every write, in order (a list write logs each
            region).
        list_reads, list_writes: ``(ino, regions)`` of every ``read_list``/``write_list`` call.
        fail_writes: when set, writes raise ``OSError(fail_writes)`` (e.g. ``errno.EIO``).
        fail_reads: the same for reads.
        delay: seconds each call sleeps first (lets tests interleave tasks).
        stripe: value of ``stripe_size(ino)`` (None: unknown).
    """

    def __init__(self, *, stripe: int | None = None, delay: float = 0.0) -> None:
        self.files: dict[int, bytearray] = {}
        self.reads: list[tuple[int, int, int]] = []
        self.writes: list[tuple[int, int, int]] = []
        self.list_reads: list[tuple[int, list[tuple[int, int]]]] = []
        self.list_writes: list[tuple[int, list[tuple[int, int]]]] = []
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

    async def write_list(self, ino: int, regions: list[tuple[int, int]], data: bytes) -> None:
        """List I/O: all regions in one call (``data`` is their bytes concatenated)."""
        if self.delay:
            await trio.sleep(self.delay)
        else:
            await trio.lowlevel.checkpoint()
        if sum(n for _, n in regions) != len(data):
            raise ValueError("region lengths do not add up to the data")
        self.list_writes.append((ino, list(regions)))
        self.writes.extend((ino, off, n) for off, n in regions)
        if self.fail_writes is not None:
            raise OSError(self.fail_writes, "injected write failure")
        f = self.files.setdefault(ino, bytearray())
        pos = 0
        for off, n in regions:
            if len(f) < off:
                f.extend(bytes(off - len(f)))
            f[off:off + n] = data[pos:pos + n]
            pos += n

    async def read_list(self, ino: int, regions: list[tuple[int, int]]) -> list[bytes]:
        """List I/O: every region's bytes, short or empty only at end of file."""
        if self.delay:
            await trio.sleep(self.delay)
        else:
            await trio.lowlevel.checkpoint()
        self.list_reads.append((ino, list(regions)))
        self.reads.extend((ino, off, n) for off, n in regions)
        if self.fail_reads is not None:
            raise OSError(self.fail_reads, "injected read failure")
        f = self.files.get(ino, b"")
        return [bytes(f[off:off + n]) for off, n in regions]

    def truncate(self, ino: int, size: int) -> None:
        f = self.files.setdefault(ino, bytearray())
        if size < len(f):
            del f[size:]
        else:
            f.extend(bytes(size - len(f)))


class PlainBackend:
    """Only ``read``/``write``/``stripe_size`` of another backend: a backend without list I/O,
    for testing the cache's one-call-per-run fallback."""

    def __init__(self, inner: MemoryBackend) -> None:
        self.inner = inner

    def stripe_size(self, ino: int) -> int | None:
        return self.inner.stripe_size(ino)

    async def read(self, ino: int, offset: int, length: int) -> bytes:
        return await self.inner.read(ino, offset, length)

    async def write(self, ino: int, offset: int, data: bytes) -> None:
        await self.inner.write(ino, offset, data)


class GatheringBackend(MemoryBackend):
    """A :class:`MemoryBackend` that also writes one run of many files in one call
    (``pvfs.cache.FilesBackend``), taking runs of at most ``small`` bytes.

    Attributes:
        file_writes: the ``[(ino, offset, length), ...]`` of every ``write_files`` call.
        fail_files: inodes whose gathered write fails with ``EIO``.
        during: awaited inside each ``write_files`` call, before it writes (tests change the
            cache meanwhile).
    """

    def __init__(self, *, small: int = 1 << 16, **kw) -> None:
        super().__init__(**kw)
        self.small = small
        self.file_writes: list[list[tuple[int, int, int]]] = []
        self.fail_files: set[int] = set()
        self.during = None

    def takes(self, ino: int, offset: int, length: int) -> bool:
        return 0 < length <= self.small

    async def write_files(self, writes: list[tuple[int, int, bytes]]) -> dict[int, OSError]:
        await trio.lowlevel.checkpoint()
        if self.during is not None:
            await self.during()
        self.file_writes.append([(ino, off, len(data)) for ino, off, data in writes])
        failed: dict[int, OSError] = {}
        for ino, off, data in writes:
            if ino in self.fail_files:
                failed[ino] = OSError(5, "injected write failure")
                continue
            f = self.files.setdefault(ino, bytearray())
            if len(f) < off:
                f.extend(bytes(off - len(f)))
            f[off:off + len(data)] = data
        return failed
