"""``pvfs.collective.open``: a file opened by an MPI communicator, with a group cache.

The object returned is what an MPI-IO file handle is to ROMIO: independent calls
(``read_at``, ``write_at``, list forms), collective calls (``*_all``, ``sync``, ``close``,
``set_atomicity``), and underneath one of four methods:

``caching``       the single-copy page cache (:mod:`._cache`) with a coordination back end;
``write_behind``  two-stage write-behind (:mod:`._writebehind`): write-only, non-atomic only;
``direct``        no cache: independent calls go straight to pvfs, ``write_*_all`` use
                  two-phase collective I/O (:mod:`._twophase`) — the baseline;
``auto``          ``write_behind`` for write-only non-atomic opens, else ``caching``.

Coordinations of the cache: ``rma`` (passive-target RMA, no extra threads or processes),
``thread`` (an I/O thread per rank, messages; needs ``MPI_THREAD_MULTIPLE``) and ``servers``
(``lock_servers`` ranks taken from the group serve locks for the life of the open; on them
``open`` returns only after the others close, with ``is_lock_server`` true).
"""

from __future__ import annotations

import os
from typing import Any, Self

from pvfs.collective._cache import PageCache, shuffle_flush
from pvfs.collective._fsio import CountingFile
from pvfs.collective._wait import barrier

COORDINATIONS = ("rma", "servers", "thread")
METHODS = ("auto", "caching", "write_behind", "direct")

# MPI_MODE_* values are the same in every MPICH ABI; strings are the friendlier spelling.
_STRING_MODES = {
    "r": (True, False, False), "w": (False, True, True), "r+": (True, True, False),
    "rw": (True, True, False), "w+": (True, True, True), "a": (False, True, True),
}


def parse_amode(amode: str | int) -> tuple[bool, bool, bool]:
    """``(readable, writable, create)`` from ``"r"``, ``"w"``, ``"r+"``, ``"w+"`` or MPI bits.

    Raises:
        ValueError: for an unknown string or contradictory bits.
    """
    if isinstance(amode, str):
        try:
            return _STRING_MODES[amode.replace("b", "")]
        except KeyError:
            raise ValueError(f"unknown access mode {amode!r}") from None
    from mpi4py import MPI

    modes = [bool(amode & m) for m in (MPI.MODE_RDONLY, MPI.MODE_WRONLY, MPI.MODE_RDWR)]
    if sum(modes) != 1:
        raise ValueError("amode needs exactly one of MODE_RDONLY, MODE_WRONLY, MODE_RDWR")
    rd, wr, rw = modes
    return rd or rw, wr or rw, bool(amode & MPI.MODE_CREATE)


def _thread_multiple() -> bool:
    from mpi4py import MPI

    return bool(MPI.Query_thread() == MPI.THREAD_MULTIPLE)


def _connect(fs: Any) -> tuple[Any, bool]:
    from pvfs.client.fs import FileSystem, connect

    if isinstance(fs, FileSystem):
        return fs, False
    return connect(fs), True


class CollectiveFile:
    """A pvfs file opened by every rank of a communicator (use ``pvfs.collective.open``)."""

    is_lock_server = False

    def __init__(self, comm: Any, fs: Any, own_fs: bool, native: Any, readable: bool,
                 writable: bool, page_size: int, cache_bytes: int, coordination: str,
                 atomic: bool, method: str, max_bytes: int, sub_bytes: int,
                 flush_group: int, services: tuple[Any, list[int]] | None,
                 size_at_open: int, sub_buffers: int = 2, early_bytes: int = 1 << 20,
                 readahead: int = 0) -> None:
        self.comm = comm
        self.rank, self.n = comm.Get_rank(), comm.Get_size()
        self._fs, self._own_fs = fs, own_fs
        self.native = native
        self.io = CountingFile(native)
        #: ``write_*_all`` of a ``direct`` file: two-phase with data sieving in the I/O
        #: phase (ROMIO's read-modify-write of a domain with holes; set on every rank)
        self.sieve = False
        self.readable, self.writable = readable, writable
        self.page_size = page_size
        self.cache_bytes = cache_bytes
        self.coordination = coordination
        self.atomic = atomic
        self.max_bytes = max_bytes
        self.sub_bytes = sub_bytes
        self.sub_buffers = sub_buffers
        self.early_bytes = early_bytes
        self.readahead = readahead  # bytes, 0: off (see _readahead)
        self.flush_group = flush_group
        self.size_at_open = size_at_open
        self._services = services  # (service comm, lock-server ranks, bells) for "servers"
        self.closed = False
        self.cache: PageCache | None = None
        self.wb = None
        self._parts: list[Any] = []
        self._thread = None
        self._bells: Any = None
        if method == "auto":
            method = "write_behind" if writable and not readable and not atomic else "caching"
        if method == "write_behind" and (readable or atomic):
            raise ValueError("write-behind needs a write-only, non-atomic open")
        self.method = method
        if method == "caching":
            self._start_cache()
        elif method == "write_behind":
            self._start_write_behind()

    # ------------------------------------------------------------------ set-up, tear-down
    def _start_cache(self) -> None:
        nslots = max(1, self.cache_bytes // self.page_size)
        max_pages = -(-self.max_bytes // self.page_size)
        if self.coordination == "rma" or (self.coordination == "servers"
                                           and self._services is None):
            # (servers are taken from the group only at open; a write-behind file switched
            # to atomic mode later caches with RMA locks instead)
            from pvfs.collective._rma import (
                MAX_SLOTS,
                RmaData,
                RmaLocks,
                RmaSpace,
                meta_words,
            )

            if nslots > MAX_SLOTS:
                raise ValueError(f"cache_bytes / page_size is over {MAX_SLOTS} slots")
            space = RmaSpace(self.comm, meta_words(self.comm, max_pages), nslots,
                             self.page_size)
            locks: Any = RmaLocks(self.comm, space)
            data: Any = RmaData(self.comm, space, self.page_size)
            extra: list[Any] = [space]
        elif self.coordination == "servers" and self._services is not None:
            from pvfs.collective._msgclient import MsgLocks
            from pvfs.collective._rma import RmaData, RmaSpace
            from pvfs.collective._service import Caller

            assert self._services is not None
            scomm, homes, bells = self._services
            locks = MsgLocks(Caller(scomm, bells=bells), homes)
            self._bells = bells
            space = RmaSpace(self.comm, 0, nslots, self.page_size)
            data = RmaData(self.comm, space, self.page_size, wake=_rma_wake(bells))
            extra = [space]
        else:
            from pvfs.collective._msgclient import MsgData, MsgLocks
            from pvfs.collective._service import (
                Bells,
                Caller,
                LocalPages,
                Service,
                ServiceThread,
            )

            scomm = self.comm.Dup()
            pages = LocalPages(nslots, self.page_size)
            bells = Bells(scomm)
            # Every rank sends its stop after its last request, so the thread ends only
            # when no request to it can still be on the way.
            service = Service(scomm, pages, stops=self.n, bells=bells)
            self._thread = ServiceThread(service)
            caller = Caller(scomm, serve=service.poll_once, bells=bells,
                            limit=service.wait_limit)
            self._bells = bells
            # The pages this rank is home for are locked in the I/O thread's table directly.
            locks = MsgLocks(caller, list(range(self.n)), local=service)
            data = MsgData(caller, self.rank, pages)
            self._scomm = scomm
            extra = []
        self._parts = [locks, data, *extra]
        # Read-ahead releases its claims from a helper thread: MPI_THREAD_MULTIPLE only.
        ra = self.readahead if _thread_multiple() else 0
        # issue 32's loan slots: read-only opens with lock servers (a loaned page is
        # clean and its owner does not know it: nothing there is ever written back)
        from pvfs.collective._locks import loans_on

        loans = loans_on() and not self.writable and self.coordination == "servers"
        self.cache = PageCache(self.rank, self.n, self.io, locks, data, nslots, self.page_size,
                               self.size_at_open, self.atomic, readahead=ra,
                               align=self.flush_group, loans=loans)
        barrier(self.comm, "cache set-up")

    def _start_write_behind(self) -> None:
        from pvfs.collective._writebehind import WriteBehind

        self.wb = WriteBehind(self.comm.Dup(), self.io, self.page_size, self.cache_bytes,
                              self.sub_bytes, sub_buffers=self.sub_buffers,
                              early_bytes=self.early_bytes)

    def _stop_cache(self) -> None:
        assert self.cache is not None
        barrier(self.comm, "close")
        if self.writable:  # (a read-only open has no dirty pages on any rank)
            shuffle_flush(self.comm, self.io, self.cache.dirty_pages(), self.page_size,
                          self.flush_group)
            barrier(self.comm, "close flush")
        self.cache.close()  # read-ahead finished (its locks released) before the windows go
        self._final_counters = self.cache.counters()
        locks = self._parts[0]
        if hasattr(locks, "homes"):
            # Message back ends: a stop to every home after this rank's last request (the
            # pair's message order puts it behind them); homes end after every client's.
            for home in sorted(set(locks.homes)):
                locks.caller.send(home, ("stop",))
        for part in self._parts:
            part.close()
        if self._thread is not None:
            self._thread.join()
        if self._bells is not None:
            self._bells.close()
            self._bells = None
        self.cache = None

    # ------------------------------------------------------------------ checks
    def _check(self, write: bool) -> None:
        if self.closed:
            raise ValueError("I/O operation on a closed collective file")
        if write and not self.writable:
            raise OSError(9, "file not open for writing")
        if not write and not self.readable:
            raise OSError(9, "file not open for reading")

    # ------------------------------------------------------------------ independent I/O
    def read_list(self, regions: list[tuple[int, int]]) -> bytes:
        """The regions' bytes concatenated (zeros where the file has none yet)."""
        self._check(write=False)
        regions = [(int(o), int(n)) for o, n in regions]
        if self.cache is not None:
            return bytes(self.cache.read(regions))
        out = bytearray(sum(n for _, n in regions))
        view, pos = memoryview(out), 0
        for off, n in regions:
            got = self.io.preadinto(view[pos:pos + n], off)
            view[pos + got:pos + n] = bytes(n - got)
            pos += n
        return bytes(out)

    def write_list(self, regions: list[tuple[int, int]], data: bytes | memoryview) -> int:
        """Write ``data`` (the regions' bytes concatenated); atomic as a whole if atomic."""
        self._check(write=True)
        view = memoryview(data)
        if view.format != "B" or view.ndim != 1:
            view = view.cast("B")
        if len(regions) == 1:  # the common call: one region, no copies of the list
            if regions[0][1] != len(view):
                raise ValueError("data length differs from the region's length")
        else:
            regions = [(int(o), int(n)) for o, n in regions]
            if len(view) != sum(n for _, n in regions):
                raise ValueError("data length differs from the regions' total")
        if self.cache is not None:
            self.cache.write(regions, view)
        elif self.wb is not None:
            self.wb.write(regions, view)
        else:
            pos = 0
            for off, n in regions:
                self.io.pwrite(view[pos:pos + n], off)
                pos += n
        return len(view)

    def read_at(self, offset: int, length: int) -> bytes:
        return self.read_list([(offset, length)])

    def write_at(self, offset: int, data: bytes | memoryview) -> int:
        return self.write_list([(offset, len(memoryview(data).cast("B")))], data)

    # ------------------------------------------------------------------ collective I/O
    def read_at_all(self, offset: int, length: int) -> bytes:
        return self.read_list_all([(offset, length)])

    def write_at_all(self, offset: int, data: bytes | memoryview) -> int:
        return self.write_list_all([(offset, len(memoryview(data).cast("B")))], data)

    def read_list_all(self, regions: list[tuple[int, int]]) -> bytes:
        """Collective read (independent reads underneath, then a barrier)."""
        out = self.read_list(regions)
        barrier(self.comm, "read_all")
        return out

    def write_list_all(self, regions: list[tuple[int, int]], data: bytes | memoryview) -> int:
        """Collective write: two-phase for ``direct``, the method's own path otherwise."""
        if self.method == "direct":
            self._check(write=True)
            view = memoryview(data).cast("B")
            from pvfs.collective._twophase import write_all

            write_all(self.comm, self.io, [(int(o), int(n)) for o, n in regions], view,
                      sieve=self.sieve)
            return len(view)
        n = self.write_list(regions, data)
        barrier(self.comm, "write_all")
        return n

    def sync(self) -> None:
        """Collective: every write made before it by any rank is in pvfs after it."""
        if self.closed:
            raise ValueError("sync of a closed collective file")
        barrier(self.comm, "sync")
        if self.cache is not None:
            self.cache.sync()
        elif self.wb is not None:
            self.wb.close()
            self._start_write_behind()
        barrier(self.comm, "sync done")

    def set_atomicity(self, flag: bool) -> None:
        """Collective: atomic mode locks all pages of a request before moving any byte."""
        flag = bool(flag)
        if self.comm.allreduce(int(flag)) not in (0, self.n):
            raise ValueError("set_atomicity needs the same flag on every rank")
        if flag and self.wb is not None:
            self.wb.close()  # write-behind cannot be atomic: continue through the cache
            self.wb = None
            barrier(self.comm, "write-behind flushed")
            # The cache treats pages past the size at open as zeros; that size just grew.
            self.size_at_open = self.comm.bcast(
                self.native.size() if self.rank == 0 else None, root=0)
            self.method = "caching"
            self.atomic = True
            self._start_cache()
            return
        self.atomic = flag
        if self.cache is not None:
            barrier(self.comm, "set_atomicity")
            self.cache.atomic = flag

    def get_atomicity(self) -> bool:
        return self.atomic

    def counters(self) -> dict[str, int]:
        """This rank's counters: file-system calls, locks, hits, remote transfers."""
        out = dict(self.io.counters())
        if self.cache is not None:
            out.update(self.cache.counters())
        elif getattr(self, "_final_counters", None):
            out.update(self._final_counters)
        if self.wb is not None:
            out.update(self.wb.counters())
        if self._bells is not None:  # the doorbells (issue 32: on over UDP across hosts?)
            out.update({"bells_on": int(self._bells.enabled),
                        "bells_udp": int(self._bells.udp), "bell_rings": self._bells.rings})
        return out

    def close(self) -> None:
        """Collective: flush (two-phase shuffle for the cache) and release everything."""
        if self.closed:
            return
        if self.cache is not None:
            self._stop_cache()
        elif self.wb is not None:
            self.wb.close()
            self._final_counters = self.wb.counters()
            self.wb = None
        barrier(self.comm, "close")
        self.closed = True
        self.native.close()
        if self._own_fs:
            self._fs.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class LockServerFile:
    """What ``open`` returns on a dedicated lock server once the clients have closed."""

    is_lock_server = True
    closed = True

    def __init__(self, served: int, requests: int, queued: int,
                 victims: dict[str, int] | None = None) -> None:
        self.served, self.requests, self.queued = served, requests, queued
        self.victims = victims or {}  # the victim cache's counters (issue 32)

    def counters(self) -> dict[str, int]:
        return {"served": self.served, "lock_requests": self.requests,
                "lock_queued": self.queued, **self.victims}

    def close(self) -> None:
        pass

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


def open(comm: Any, fs: Any, path: str, amode: str | int = "r", *,
         page_size: int | None = None, cache_bytes: int = 32 << 20,
         coordination: str = "rma", atomic: bool = False, method: str = "auto",
         lock_servers: int = 1, max_bytes: int = 4 << 30, sub_bytes: int = 64 << 10,
         flush_group: int | None = None, stripe: Any = None,
         sub_buffers: int = 2, early_bytes: int = 1 << 20,
         readahead: int | None = None) -> CollectiveFile | LockServerFile:
    """Open ``path`` collectively on every rank of ``comm``.

    Args:
        comm: an mpi4py communicator; every rank calls ``open`` with the same arguments.
        fs: a ``pvfs.FileSystem``, or a config (path or ``Config``) to connect with.
        path: the file inside pvfs (``/a/b`` or ``pvfs:/a/b``).
        amode: ``"r"``, ``"w"`` (write-only, created), ``"r+"``, ``"w+"`` or MPI_MODE_* bits.
        page_size: cache page; default the file's stripe unit (pages never straddle daemons).
        cache_bytes: cache (or write-behind stage-two) memory per rank; 32 MiB as the paper.
        coordination: ``"rma"``, ``"servers"`` or ``"thread"`` (see the module docstring).
        atomic: MPI atomic mode (all-or-nothing requests); ``set_atomicity`` changes it.
        method: ``"auto"``, ``"caching"``, ``"write_behind"`` or ``"direct"``.
        lock_servers: ranks taken from ``comm`` (the last ones) for ``"servers"``.
        max_bytes: largest file the RMA metadata covers (DAChe assumed 2 GB).
        sub_bytes: write-behind stage-one sub-buffer per destination (64 KiB).
        sub_buffers: write-behind buffers per destination (2: double buffering, as the paper).
        early_bytes: write-behind writes stage-two pages that are full while the program
            runs, this many bytes per list-I/O call (at most a quarter of ``cache_bytes``).
        flush_group: pages flushed together at close (default: a stripe row, ``pcount``).
        stripe: the distribution of a newly created file.
        readahead: the largest read-ahead window of the cache in bytes (0: off; None:
            ``PVFS_COLLECTIVE_READAHEAD``, else 1 MiB; it needs MPI_THREAD_MULTIPLE and
            is off without it).

    Raises:
        ValueError: bad arguments (the same on every rank, so every rank raises).
        OSError: the file cannot be opened (raised on every rank).
    """
    if coordination not in COORDINATIONS:
        raise ValueError(f"coordination must be one of {COORDINATIONS}")
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}")
    from pvfs.collective._readahead import configured

    readahead = configured(readahead, coordination)
    readable, writable, create = parse_amode(amode)
    if method == "auto":
        method = "write_behind" if writable and not readable and not atomic else "caching"
    services = None
    if coordination == "servers" and method == "caching":
        placed = _split_off_lock_servers(comm, lock_servers)
        if isinstance(placed, LockServerFile):
            return placed
        comm, services = placed
    else:
        comm = comm.Dup()
    fsys, own = _connect(fs)
    native = _open_on_every_rank(comm, fsys, own, path, writable, create, stripe)
    size_at_open = comm.bcast(native.size() if comm.Get_rank() == 0 else None, root=0)
    ps = page_size or native.stripe.ssize
    group = flush_group or max(1, (native.stripe.pcount * native.stripe.ssize) // ps)
    f = CollectiveFile(comm, fsys, own, native, readable, writable, ps, cache_bytes,
                       coordination, atomic, method, max_bytes, sub_bytes, group, services,
                       size_at_open, sub_buffers, early_bytes, readahead)
    return f


def _rma_wake(bells: Any) -> Any:
    """With ``PVFS_COLLECTIVE_RMA_RING=1`` and doorbells on (``servers``; issue 32): ring
    a page's owner (a client: its ``caller`` bell) before flushing gets and puts to it, so
    an owner asleep on its bell wakes and makes the MPI progress a get over TCP needs. The
    clients' ranks are the same in the clients' and the service communicator."""
    if os.environ.get("PVFS_COLLECTIVE_RMA_RING", "0") != "1" or bells is None \
            or not bells.enabled:
        return None
    return lambda owner: bells.ring("caller", owner)


def _split_off_lock_servers(comm: Any, lock_servers: int,
                            ) -> LockServerFile | tuple[Any, tuple[Any, list[int], Any]]:
    """The last ``lock_servers`` ranks of ``comm`` become lock servers: on them, serve locks
    until every client has closed and return a ``LockServerFile``; on the others return the
    clients' communicator and ``(service comm, lock-server ranks, bells)``.

    Raises:
        ValueError: ``lock_servers`` leaves no client rank.
    """
    size = comm.Get_size()
    if not 1 <= lock_servers < size:
        raise ValueError("lock_servers must leave at least one client rank")
    scomm = comm.Dup()
    from pvfs.collective._wait import Bells

    bells = Bells(scomm)
    first_server = size - lock_servers
    homes = list(range(first_server, size))
    is_server = comm.Get_rank() >= first_server
    clients = comm.Split(1 if is_server else 0, comm.Get_rank())
    if is_server:
        from pvfs.collective._service import Service

        service = Service(scomm, None, stops=first_server, bells=bells)  # a stop per client
        service.run()
        bells.close()
        m = service.locks
        return LockServerFile(service.served, m.requests, m.queued,
                              {"victims_kept": m.victims_kept,
                               "victims_handed": m.victims_handed,
                               "victims_dropped": m.victims_dropped,
                               "victims_refused": m.victims_refused,
                               "victims_claimed": m.victims_claimed,
                               "loans_granted": m.loans_granted,
                               "loans_recycled": m.loans_recycled,
                               "loans_returned": m.loans_returned})
    return clients, (scomm, homes, bells)


def _open_on_every_rank(comm: Any, fsys: Any, own: bool, path: str, writable: bool,
                        create: bool, stripe: Any) -> Any:
    """The native file of ``path`` on every rank of ``comm``: rank 0 opens it first (and
    creates it if asked), then the others; a failure anywhere raises on every rank, after
    closing what was opened (and ``fsys`` when ``own``).

    Raises:
        OSError: the first rank's failure, on every rank.
    """
    flags = os.O_RDWR if writable else os.O_RDONLY
    native, problem = None, None
    if comm.Get_rank() == 0:
        try:
            native = fsys.open(path, flags | (os.O_CREAT if create else 0), stripe=stripe)
        except OSError as exc:
            problem = exc
    problem = comm.bcast(problem, root=0)
    if problem is None and comm.Get_rank() != 0:
        try:
            native = fsys.open(path, flags)
        except OSError as exc:
            problem = exc
    problems = [p for p in comm.allgather(problem) if p is not None]
    if problems:
        if native is not None:
            native.close()
        if own:
            fsys.close()
        raise problems[0]
    return native


__all__ = ["COORDINATIONS", "METHODS", "CollectiveFile", "LockServerFile", "open",
           "parse_amode"]
