"""A local file standing in for pvfs in the collective cache's small MPI checks
(``loancheck.py``, ``victimcheck.py``): what ``pvfs.collective`` needs of a native file,
over ``os.pread``/``os.pwrite``."""

from __future__ import annotations

import os

import pvfs.collective._file as pf


class _Stripe:
    def __init__(self, page_size: int) -> None:
        self.ssize, self.pcount = page_size, 1


class _LocalFile:
    def __init__(self, path: str, flags: int, stripe: _Stripe) -> None:
        self.fd, self.stripe = os.open(path, flags), stripe

    def size(self) -> int:
        return os.fstat(self.fd).st_size

    def preadinto(self, buf, off: int) -> int:
        data = os.pread(self.fd, len(buf), off)
        buf[:len(data)] = data
        return len(data)

    def pwrite(self, data, off: int) -> None:
        os.pwrite(self.fd, bytes(data), off)

    def close(self) -> None:
        os.close(self.fd)


class _LocalFS:
    def __init__(self, page_size: int) -> None:
        self.stripe = _Stripe(page_size)

    def open(self, path: str, flags: int, stripe=None) -> _LocalFile:
        return _LocalFile(path, flags, self.stripe)


def use_local_files(page_size: int) -> None:
    """Make ``pvfs.collective.open`` open local files (one stripe unit of ``page_size``)."""
    fs = _LocalFS(page_size)
    pf._connect = lambda _fs: (fs, False)
