"""How long a read waits for a page another rank is loading (the collective cache, issue
32): the wait a cache adapts to its storage's load times (:class:`LoadTimes`), the bounds
and switches of that wait, and what a read's ``around`` asks of the lock manager
(:func:`around_wait`). Moved out of ``_locks.py``, which re-exports these names."""

from __future__ import annotations

import os

__all__ = ["AROUND_AFTER", "AROUND_MAX", "LOAD_BOUND", "LOAD_WAIT_ENV", "PROBE_ENV",
           "LoadTimes", "around_wait"]

_AROUND_US = os.environ.get("PVFS_COLLECTIVE_AROUND_US")
#: Seconds a non-atomic read waits at least for a page being loaded before it reads the
#: file around the loader: about one page read from pvfs on posix storage, so a loader that
#: is running is waited for, a descheduled one is not. The wait a cache actually uses
#: grows with its measured load times (:class:`LoadTimes`); ``PVFS_COLLECTIVE_AROUND_US``
#: fixes it instead (at this value, for every coordination).
AROUND_AFTER = float(_AROUND_US or "300") * 1e-6
#: ``PVFS_COLLECTIVE_AROUND_PROBE=1``: the all-or-nothing wait of :class:`LoadTimes`
#: (``probe``) instead of the capped one (s14: better at 8 ranks on a disk with a cache,
#: worse at 2-4; off by default).
PROBE_ENV = "PVFS_COLLECTIVE_AROUND_PROBE"
#: The longest adaptive wait for a load (seconds).
AROUND_MAX = 0.5
#: ``PVFS_COLLECTIVE_LOAD_WAIT``: ``copy`` (the default since issue 32) — a read that finds
#: a page being loaded waits for the loader's copy up to :data:`LOAD_BOUND` and reads the
#: page around it only past that (a loader that died or stalled: counted as a
#: ``load_stall``), so each page is read from the file once while its loader is alive
#: (DAChe's one read per page); ``adaptive`` — sessions s13-s17's wait of about two load
#: times, after which a reader reads around a loader that is still running.
LOAD_WAIT_ENV = "PVFS_COLLECTIVE_LOAD_WAIT"
#: Seconds a read waits for another rank's load of a page before it gives up on the
#: loader (``PVFS_COLLECTIVE_LOAD_BOUND_S``): far above any load measured here (s13-s14:
#: 30-70 ms on the emulated ide-2000 disk, queued) and far below the 600 s that raises
#: CollectiveTimeout. Chosen before measuring it (issue 32).
LOAD_BOUND = float(os.environ.get("PVFS_COLLECTIVE_LOAD_BOUND_S", "1.0"))


class LoadTimes:
    """How long a reader waits for another rank's load: adapted to the storage.

    A reader that finds a page being loaded can wait for the loader's copy or read the
    page from the file itself. Waiting is right while the load is about to finish; on
    posix storage a load takes ~0.3 ms, on a slow disk ~30 ms (s13: a fixed 300 µs made
    readers give up and read every such chunk again — a second disk access — while a
    40 ms wait read each chunk once, 1.3× → 3.6× at 4 ranks). So each rank keeps an
    exponentially weighted mean of its own load durations (the file reads of pages it
    caches: the ranks share the storage) and waits ``factor`` times that, never less than
    :data:`AROUND_AFTER` (what a running loader needs on fast storage, and the wait before
    any load was measured) nor more than :data:`AROUND_MAX` (a descheduled or stuck loader
    holds readers up no longer). ``fixed`` (``PVFS_COLLECTIVE_AROUND_US``) overrides it.

    Never wait longer than reading the page yourself costs: a second mean, of this rank's
    read-around reads (file reads of pages it gave up waiting for), caps the wait at
    ``around_factor`` times it once one was measured. A loader's disk read can take
    ~30 ms while reading around it is a hit in the servers' disk cache (s13: 8 ranks on
    emulated ide-2000 with its cache, 0.94× → 0.73× of independent with the load-based
    wait alone); without a cache a read around costs a disk read too and the cap stays
    out of the way.

    ``probe`` (opt-in, ``PVFS_COLLECTIVE_AROUND_PROBE=1``): wait for a load all the way
    or not at all. A reader meets a load at a random point of it, so the rest of it is on average
    half a load: when reading around costs less than half a load, waiting is the dearer
    choice at any length, and the read waits only the floor. To know that cost a rank
    must have read around once, so until it has, it reads around the first load it meets
    at once (one extra file read per rank; a disk access without a server cache). s14:
    without it the ranks that load from the disk never read around and wait ~70 ms for
    each other's loads every window, which leaves the emulated disks idle between one
    window's misses and the next (8 ranks on ide-2000 with its cache: rma 0.73x of
    independent reads; with it 0.96x). Not the default: the sliding window's readers
    meet a load near its end more often than at a random point (their own loads ran
    beside it), and at 2-4 ranks the reads around it causes cost more than the waits
    (rma 1.0x -> 0.85x at 4 ranks); see docs/collective.md, s14.
    """

    def __init__(self, floor: float = AROUND_AFTER, cap: float = AROUND_MAX,
                 factor: float = 2.0, alpha: float = 0.25,
                 fixed: float | None = None, around_factor: float = 2.0,
                 probe: bool = False, bound: float | None = None) -> None:
        self.floor, self.cap, self.factor, self.alpha = floor, cap, factor, alpha
        self.probe = probe
        self.fixed = fixed
        #: wait for the loader's copy up to this many seconds (``copy`` rule, issue 32);
        #: None: the adaptive wait below
        self.bound = bound
        self.around_factor = around_factor
        self.mean: float | None = None
        self.samples = 0
        #: mean duration of this rank's read-around reads (None: none measured yet)
        self.around_mean: float | None = None
        self.around_samples = 0

    @classmethod
    def from_env(cls) -> LoadTimes:
        """The default: wait for the copy up to :data:`LOAD_BOUND`; with
        ``PVFS_COLLECTIVE_LOAD_WAIT=adaptive`` (or a probe or fixed wait asked for) the
        adaptive rule of sessions s13-s17."""
        probe = os.environ.get(PROBE_ENV, "0") == "1"
        adaptive = os.environ.get(LOAD_WAIT_ENV, "copy") == "adaptive" or probe
        return cls(fixed=None if _AROUND_US is None else AROUND_AFTER, probe=probe,
                   bound=None if adaptive or _AROUND_US is not None else LOAD_BOUND)

    def add(self, seconds: float) -> None:
        """One load took ``seconds``."""
        self.samples += 1
        self.mean = seconds if self.mean is None else \
            self.mean + self.alpha * (seconds - self.mean)

    def add_around(self, seconds: float) -> None:
        """One read around a page being loaded (from the file) took ``seconds``."""
        self.around_samples += 1
        self.around_mean = seconds if self.around_mean is None else \
            self.around_mean + self.alpha * (seconds - self.around_mean)

    def wait(self) -> float:
        """Seconds to wait for a page being loaded before reading around it: the
        load-based wait, capped at ``around_factor`` read-arounds once one was measured;
        with ``probe``, 0 until a read around was measured, and the floor while reading
        around costs under half a load."""
        if self.fixed is not None:
            return self.fixed
        if self.bound is not None:
            return self.bound
        if self.probe:
            if self.mean is None:
                return self.floor
            if self.around_mean is None:
                return 0.0  # read around the first load met, to learn what that costs
            if self.around_mean < self.mean / 2:
                return self.floor  # reading around costs under half a load: do not wait
        wait = self.floor if self.mean is None else \
            min(self.cap, max(self.floor, self.factor * self.mean))
        if self.around_mean is not None:
            wait = min(wait, self.around_factor * self.around_mean)
        return wait


def around_wait(around: bool | float, default: float) -> float | None:
    """The wait for a load that a read's ``around`` asks for: None (False: never read
    around, wait for the lock), ``default`` (True) or the seconds it carries (a float,
    from the reader's :class:`LoadTimes`)."""
    if around is False or around is None:
        return None
    if around is True:
        return default
    return float(around)
