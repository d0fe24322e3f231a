"""The reactive selector in the I/O daemon (thesis §5.5; SPEC §3).

With ``sched set rs`` the daemon re-decides its engine's algorithm on every new read request
of a file until it has seen ``N_file`` of them, then at most every ``DECIDE_S``, backing off
to ``DECIDE_MAX_S`` while its pick holds (and once more when a missing ``N_file`` arrives
from the manager). A decision estimates the model's inputs for that request's file by
eq. 5.7-5.10 from the requests that stand for the operation in progress -- those in service
plus the newest of the same operation (``_begins_operation`` says when one begins) that left
service within ``RECENT_S``, up to ``N_file`` of them (``ReactiveSelector.window`` says why)
-- or takes a client's hint of the collective operation (``pvfs.AccessHint``), measures the
resident fraction of those requests (``cachestat(2)`` or the emulated disk's cache, on
arrival, no higher than the operation found it: ``_as_found``; with the model's
``cache_measured`` off, the cache size it is told instead, as the thesis'), holds the
operation's workload class until the estimates clearly leave it (``_held``), asks
``pvfs.models.rs.select`` and switches the engine when the answer differs. Requests that
arrive in one batch of engine events (``ReactiveSelector.batch``) are all submitted first and
decided for once per file after the batch. Parameters come from the config's ``[model]``
table (``pvfs-admin calibrate`` writes it) or ``model_set``; without either, the thesis'
table 5.2.

Writes (issue 31) are decided the same way, on the model's write part (``Params.write``, fitted
on write runs) when it has one; without it a write runs under whatever the engine last ran,
as before. A file's requests turning from reads to writes or back begin a new operation.
"""

from __future__ import annotations

import logging
import time
from collections import Counter, deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from pvfs.models import rs

from .stats import JobRecord

log = logging.getLogger("pvfs.iod.rs")

NFILE_TTL = 1.0     # seconds an N_file answer from the manager is used
MAX_PIECES = 256    # ranges whose residency is measured per request (the rest is like them)
RECENT_S = 1.0      # a request that left service still describes its operation this long
SEEN_MAX = 256      # requests remembered per file
DECIDE_S = 0.002    # once a file's operation is seen whole, decide for it at most this often
DECIDE_MAX_S = 0.032  # ...backing off to this while the decisions keep the same pick
IDLE_S = 0.01       # a file idle this long before a request: the request begins a new operation
IDLE_K = 8          # ...and at least this many times its usual interval between requests
IDLE_MAX_S = 0.05   # ...or this long: a barrier in the study (BARRIER_LEAD + 2 ms per task)
PACE_OF = 16        # the usual interval: the mean over this many of its newest requests


@dataclass(slots=True)
class Operation:
    """The operation in progress on a file, as far as the selector can tell."""

    start: float            # time.monotonic() of its first request
    arrivals: int = 0       # its requests so far
    # The resident fraction of its requests as last seen before any of them was served
    # (None: not measured then); ``ReactiveSelector._as_found`` says why.
    found_cached: float | None = None
    pick: str | None = None  # its latest decision
    spacing: int = 1         # its decisions' spacing once N_file were seen, in decide_s
    # The class (table 5.3's row) it is decided in, ``ReactiveSelector._held``: the file's
    # previous operation's until this one's own estimate gives one (``own``); ``doubt``: the
    # other class the latest estimate said, not yet confirmed by the next.
    kind: str | None = None
    own: bool = False
    doubt: str | None = None


class _File:
    """What the selector keeps of one file: one lookup per request instead of five."""

    __slots__ = ("decided", "hint", "kind", "op", "pcount", "seen", "span")

    def __init__(self) -> None:
        # Its read requests, newest last: each one's statistics record, with its arrival
        # (``JobRecord.arrived``) and the bytes of it cached then (``resident``).
        self.seen: deque[JobRecord] = deque(maxlen=SEEN_MAX)
        self.op: Operation | None = None      # the operation in progress
        self.span: float | None = None        # daemons a request spans, recent average
        self.pcount = 0                       # the latest request's context: daemons of
        self.hint: dict | None = None         # the file and its hint (a change: new operation)
        self.decided: float | None = None     # time.monotonic() of its last decision
        self.kind = "read"                    # its latest request's: "read" or "write"


class ReactiveSelector:
    def __init__(self, server) -> None:
        self.server = server
        table = server.config.extra.get("model")
        self.params = rs.Params.from_table(table) if isinstance(table, dict) else rs.Params()
        # The engine's algorithm and opt4's gather as the selector last set or read them
        # (None: read them at the next use). Reading either from the engine takes its lock,
        # which its thread holds while it takes jobs in, on the trio thread that serves every
        # request; ``before_read`` asked on every request (thirtieth session's profile,
        # docs/scheduling.md). While rs is active only the selector sets the algorithm;
        # ``sched_set`` assigns ``active`` on every call, before it changes the gather.
        self._algorithm: str | None = None
        self._gather: float | None = None
        self.active = False
        self.nfile: dict[int, tuple[int, float]] = {}
        self._last_nfile = 0      # the latest N_file answer, for files not asked about yet
        self._asking: set[int] = set()
        # The latest decision, as ``last`` shows it (built when asked: status, tests).
        self._last: tuple | None = None
        self.files: dict[int, _File] = {}      # ino -> what the selector keeps of it
        self.picks: Counter[str] = Counter()
        # Why it picked: "kind/column->pick" per decision, and how often the engine switched.
        self.decisions: Counter[str] = Counter()
        self.switches = 0
        self.deciding_s = 0.0     # time spent in decisions (what rs costs the event loop)
        self.decide_s = DECIDE_S
        self._batching = False
        self._pending: dict[int, None] = {}   # files due for a decision at the batch's end

    @property
    def active(self) -> bool:
        return self._active

    @active.setter
    def active(self, on: bool) -> None:
        self._active = on
        self._algorithm = self._gather = None     # what a control request set: read again
        # The engine's fast path serves requests no selector sees: off while rs decides.
        fast_path = getattr(self.server, "set_fast_path", None)
        if fast_path is not None:
            fast_path(not on)

    def _engine_algorithm(self) -> str:
        if self._algorithm is None:
            self._algorithm = self.server.engine.algorithm
        return self._algorithm

    def _switch(self, algorithm: str) -> None:
        self.server.engine.algorithm = algorithm
        self._algorithm = algorithm
        self.switches += 1

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Around one batch of engine events: decisions due during it are made once per file
        when it ends, after every request of the batch is submitted. Deciding costs ~30 µs
        of Python on a quiet machine and several times that when the clients' processes
        share its cores; made between the submissions of a burst of requests (a collective
        arrives as one), it delayed the burst's later requests by the decisions before them
        while the engine's thread sat idle. Made after the batch, it overlaps the engine
        serving the batch, sees the whole batch in its estimate, and the engine applies the
        pick to every request still queued."""
        self._batching = True
        try:
            yield
        finally:
            self._batching = False
            pending, self._pending = self._pending, {}
            for ino in pending:
                try:
                    self._decide(ino)
                except Exception:  # a bug must not take the daemon down
                    log.exception("rs decision for inode %d", ino)

    def before_read(self, ino: int) -> None:
        """A read of ``ino`` is about to be submitted. If it begins a new operation of the
        file, put the engine back in the algorithm the file's previous operation was
        decided for, before the engine sees the request.

        The decision itself comes after the submission (``on_read``): a new operation's
        first requests were served under whatever the engine ran last, for another file or
        a fixed setting. With opt4 that is costly. Its gather starts with a busy period,
        and a busy period begun under another algorithm serves the first requests in
        arrival order, which differs between daemons. Each task then waits for its slower
        half (single blocks of 1 MiB uncached, s17: rs right after fixed opt4 1.01-1.02 s,
        after opt1-opt3 1.09-1.32 s, fixed opt4 1.01-1.04 s). A file's operations tend
        to repeat its access pattern, as ``_held`` assumes for its class; when the new
        one differs, ``on_read``'s decision switches the engine as before."""
        if not self.active:
            return
        f = self.files.get(ino)
        op = f.op if f is not None and f.kind == "read" else None
        if op is None or op.pick is None or op.pick == (self._algorithm
                                                       or self._engine_algorithm()):
            return
        fs = self.server.stats.files.get(ino)
        if fs is None or fs.jobs or fs.idle_at <= 0:
            return
        # on_read's test for a new operation (``began``), made before the request is in
        # service; kept inline there, where it runs on every request
        idle = time.monotonic() - fs.idle_at
        if idle >= IDLE_S and self._begins_operation(f, idle):
            self._switch(op.pick)

    def on_write(self, ino: int, pieces, pcount: int, hint: dict | None,
                 record: JobRecord | None = None, resident: int | None | object = ...) -> None:
        """A new write request arrived: as ``on_read``, decided on the model's write part
        (none: the request is remembered, nothing decided)."""
        self.on_read(ino, pieces, pcount, hint, record, resident, operation="write")

    def on_read(self, ino: int, pieces, pcount: int, hint: dict | None,
                record: JobRecord | None = None, resident: int | None | object = ...,
                operation: str = "read") -> None:
        """A new read request arrived (``operation`` "write": a write, ``on_write``); its job
        is submitted and in the statistics as ``record`` (None: the newest record of the file
        there). Long because it runs on every request: its steps are inline, where a call
        costs more than they do (below). Measure what of it is cached
        (``resident``: measured already, ``resident(ino, pieces)`` before the job was
        submitted), remember it, then decide for its file.

        This runs on every read request, decided or not, on the trio thread that serves all
        of them, and what it costs is outside ``deciding_s``: in random16 64 KiB cached
        (cached 4 KiB blocks) ~8 µs per request, beside ~60 µs per decision (about one in
        eight requests there) and ~93 µs for everything else the trio thread does for a
        request (the fourteenth session's profile, docs/scheduling.md). Hence one lookup of
        the file's statistics and one of the selector's state for it (``_File``), the
        request's arrival and residency kept on its statistics record (no object of its
        own), and a request that is not due for a decision answered by comparisons alone:
        in the synthetic driver (``bench/rs_hook_cost.py``) what rs' hooks cost outside the
        decisions fell from 2.8 to 1.9 µs per request (fifteenth session,
        docs/scheduling.md)."""
        if not self.active:
            return
        fs = self.server.stats.files.get(ino)
        if record is None:
            if fs is None or not fs.jobs:
                return
            record = next(reversed(fs.jobs.values()))
        f = self.files.get(ino)
        if f is None:
            f = self.files[ino] = _File()
            if len(self.files) > 4096:
                del self.files[next(iter(self.files))]
        now = time.monotonic()
        op = f.op
        began = op is None or (fs is not None and len(fs.jobs) <= 1 and fs.idle_at > 0
                               and now - fs.idle_at >= IDLE_S
                               and self._begins_operation(f, now - fs.idle_at))
        record.arrived = now
        record.resident = self.resident(ino, pieces) if resident is ... else resident
        f.seen.append(record)
        # a changed hint (set, cleared) or request kind (another model) begins an operation
        turned = operation != f.kind
        changed = turned or pcount != f.pcount or (hint is not f.hint and hint != f.hint)
        if began or turned:
            f.kind = operation
            op = f.op = Operation(now, kind=op.kind if op is not None and not turned else None)
        if began or changed:
            op.spacing = 1
            op.own, op.doubt = False, None       # its class from its own evidence, at once
        op.arrivals += 1
        logical, nbytes = record.logical, record.nbytes
        if logical > 0 and nbytes > 0:
            # daemons this request spans, averaged over the recent ones (weight 1/16)
            one = logical / nbytes
            old = f.span
            f.span = one if old is None else old + (one - old) / 16
        if changed:
            f.pcount, f.hint = pcount, hint
        if not (changed or began):
            # Due for a decision? Deciding (window, estimate, model) costs ~10 µs of Python
            # on a quiet machine and several times that when the clients share its cores.
            # While the operation has had at most as many requests as reach this daemon of
            # N_file tasks' (``_reaching``: the window's size) each one refines its estimate;
            # after that the window is full and a change within the operation is seen one
            # spacing late at most (a new operation, or one a changed hint announces, at
            # once). The spacing starts at ``decide_s`` and doubles, up to DECIDE_MAX_S,
            # with each decision that kept the operation's pick (``_spaced``): random 64 KiB
            # reads had 90-130 decisions per run before, 15-30 ms of a 0.2 s run, for 2-4
            # switches (2026-11-26). Most requests end here.
            last = f.decided
            every = self.decide_s * op.spacing                 # self.every(op), inlined
            if every > DECIDE_MAX_S:
                every = max(self.decide_s, DECIDE_MAX_S)
            if last is not None and now - last < every:
                known = self.nfile.get(ino)
                # (n_here <= N_file: past N_file arrivals the window is full without asking)
                if (known is None or op.arrivals > known[0]
                        or op.arrivals > self._reaching(ino, known[0], pcount)):
                    return
        if self._batching:
            self._pending[ino] = None
        else:
            self._decide(ino)

    @staticmethod
    def _begins_operation(f: _File, idle: float) -> bool:
        """Whether a request of file ``f`` that arrives when nothing else of it is in service
        and it has been idle ``idle`` seconds, at least ``IDLE_S``, begins a new operation.
        ``IDLE_S`` is far longer than the gap between one task's requests within an
        operation (a round trip), about what a barrier or a compute phase between two
        operations takes. Without this rule the window's newest requests that left service
        were the previous operation's: a cached pass right after an uncached one of the same
        file began under the uncached pick, and with one request per task it stayed there
        until it ended (strided 64 KiB cached: rs 10 % behind the algorithm it picked most,
        in the 2026-11-26 study).

        But when the machine's cores are shared, cached blocks idle their file 8-47 ms
        between requests of one operation (a client's process waits for a core; requests
        then come 3.5-12 ms apart on average), and each such gap began a "new operation"
        that cost a decision at once, one per arrival until its window was full and the
        back-off's ramp again: most of rs' decisions at load 18-23 (fourteenth session). So
        the gap must also be ``IDLE_K`` times the file's usual interval between requests
        (the mean over its ``PACE_OF`` newest), or ``IDLE_MAX_S``. Not the gap of the
        request's connection: a file idles only when none of its requests is in service, so
        a connection's gap since its last request here ended is never shorter than the
        file's, and tells a barrier no better."""
        seen = f.seen
        k = min(len(seen), PACE_OF)
        if idle >= IDLE_MAX_S or k < 2:
            return True
        pace = (seen[-1].arrived - seen[-k].arrived) / (k - 1)
        return idle >= IDLE_K * pace

    def every(self, op: Operation) -> float:
        """The operation's spacing of decisions in seconds (``decide_s`` 0: every request)."""
        return min(self.decide_s * op.spacing, max(self.decide_s, DECIDE_MAX_S))

    def _spaced(self, op: Operation | None, pick: str) -> None:
        """After a decision: space the operation's next ones further apart while its pick
        holds (``_due``); back to ``decide_s`` when it changed."""
        if op is None:
            return
        if pick != op.pick:
            op.spacing = 1
        elif self.every(op) < DECIDE_MAX_S and op.spacing < 1 << 10:
            op.spacing *= 2
        op.pick = pick

    def window(self, ino: int, n_file: int) -> list[JobRecord]:
        """The requests that stand for the operation in progress on ``ino``: every one still
        in service, topped up with the newest of the operation (``Operation``) that left
        service within ``RECENT_S`` until there are ``N_file`` of them.

        The thesis estimates from the requests in service alone (eq. 5.7-5.10) and names the
        flaw itself (§5.5): at the start of a collective few requests have arrived, at its
        end only stragglers remain. Worse, when requests are served quickly (cached blocks,
        one per task at a time) a single request is in service: its own range is the
        observed range, so a random-block operation spread over the whole file looks dense
        ("ideal"), and the next moment sparse. The N_file newest requests are the sample of
        the operation eq. 5.8-5.9 scale from."""
        f = self.files.get(ino)
        if f is None or not f.seen:
            return []
        fs = self.server.stats.files.get(ino)
        live = {id(r) for r in fs.jobs.values()} if fs is not None else set()
        want = max(n_file, len(live), 1)
        op = f.op
        horizon = max(time.monotonic() - RECENT_S, op.start if op is not None else 0.0)
        out: list[JobRecord] = []
        unseen_live = len(live)
        # Newest first; stop once the window is full and every live request was met (the
        # selector runs on every request: it must not walk the whole history each time).
        for r in reversed(f.seen):
            if id(r) in live:
                unseen_live -= 1
                out.append(r)
            elif len(out) < want and r.arrived >= horizon:
                out.append(r)
            elif unseen_live <= 0:
                break
        return out

    def _decide(self, ino: int) -> None:
        """Pick the algorithm for the operation in progress on ``ino``; switch the engine.

        Runs on each new request and again when an input that was missing arrives (``N_file``
        from the manager): a decision made on an incomplete estimate is not left standing
        until the next request, which in a collective of single requests never comes."""
        t0 = time.perf_counter()
        try:
            self._decide_now(ino)
        finally:
            self.deciding_s += time.perf_counter() - t0

    def _decide_now(self, ino: int) -> None:
        f = self.files.get(ino)
        if f is not None:
            f.decided = time.monotonic()
        writing = f is not None and f.kind == "write"
        params = self.params.write if writing else self.params
        if params is None:      # no write model: writes are not decided
            return
        pcount, hint = (f.pcount, f.hint) if f is not None and f.pcount else (1, None)
        n_file = self._nfile(ino)
        n_here = self._reaching(ino, n_file, pcount)
        win = self.window(ino, n_here)
        # One pass over the window for the observed values of eq. 5.7-5.10 and the resident
        # fraction of its requests (as measured when each arrived). The model's cache state
        # describes ``S_req``, all of them (eq. 5.2), not the newest one alone: judged on the
        # newest, a collective whose blocks are half prefetched by their neighbours'
        # read-ahead flips between the columns of table 5.3 on every request.
        got = total = s_o = d_o = 0
        lo = hi = 0
        for i, r in enumerate(win):
            if r.resident is not None:
                got += r.resident
                total += r.nbytes
            s_o += r.nbytes
            d_o += r.regions
            if i == 0 or r.lo < lo:
                lo = r.lo
            if i == 0 or r.hi > hi:
                hi = r.hi
        cached = self._as_found(ino, got / total if total else None)
        if not params.cache_measured:   # told the cache size instead (figs. 5.7-5.11)
            cached = None
        if hint is not None:
            # The hint speaks of the whole operation; this daemon holds 1/pcount of it.
            share = {k: (v if k == "requests" else v / pcount) for k, v in hint.items()}
            w = rs.from_hint(share, cached)
        else:
            # Logical range -> this daemon's share of it (S_req_o counts local bytes).
            w = rs.estimate(n_here, max(1, len(win)), s_o, max(1, d_o),
                            (hi - lo) // max(1, pcount), cached)
        op = f.op if f is not None else None
        kind = self._held(op, w, len(win), hint is not None)
        gather = self._gather
        if gather is None:
            gather = self._gather = self.server.engine.gather
        fixed = {"opt4": gather} if gather else None
        # rs.select's pick without the predictions a band or the "~0" rule made unneeded
        # (most small requests'); ``last`` computes them when asked
        pick, col = rs.pick(params, w, fixed=fixed, kind=kind)
        self.picks[pick] += 1
        self._spaced(op, pick)
        self.decisions[f"{'write:' if writing else ''}{kind}/"
                       f"{'cached' if col >= 3 else 'uncached'}->{pick}"] += 1
        self._last = (ino, pick, w, kind, params, fixed, hint is not None, len(win))
        if pick != (self._algorithm or self._engine_algorithm()):
            self._switch(pick)

    @staticmethod
    def _held(op: Operation | None, w: rs.Workload, observed: int, hinted: bool) -> str:
        """The class to decide ``op`` in: a hysteresis on the class of its estimate ``w``
        from ``observed`` requests.

        Sparse and ideal differ only in the spread of the requests, S_req/R_req against
        1/2, and a window of a few random blocks measures that spread badly: its range is
        the range of a sample (eq. 5.9 does not scale it), and of one contiguous request it
        is the request's own extent, so S_req/R_req >= 1 -- "ideal" whatever the operation.
        In random16 at 1 and 4 MiB cached, every operation's first decision (and a few of
        the next, two blocks that happened to lie close) said ideal against sparse for the
        rest, and cached random reads begin "new operations" often (a cached block leaves
        service as soon as it is in the socket, and the file idles ``IDLE_S`` before the
        next reaches this daemon: ~20 per daemon in a 0.6 s run): rs switched opt1/opt3
        45-150 times per run and every switch reset the back-off (docs/scheduling.md).

        So: a window of one contiguous request is no evidence of the class, and keeps the
        one held (the file's previous operation's, for a new operation); the operation's
        first evidence (a new operation's, or after its hint changed) sets its class at
        once; after that another class needs two consecutive decisions saying it, so one
        stray sample does not flip it and a real change costs one decision. A hint gives
        the operation's class exactly: taken as it is."""
        est = w.kind()
        if op is None:
            return est
        if hinted:
            op.kind, op.own, op.doubt = est, True, None
        elif est != "disjoint" and observed < 2:
            return op.kind or est
        elif not op.own or op.kind is None:
            op.kind, op.own, op.doubt = est, True, None
        elif est == op.kind:
            op.doubt = None
        elif op.doubt == est:
            op.kind, op.doubt = est, None
        else:
            op.doubt = est
        return op.kind

    def _reaching(self, ino: int, n_file: int, pcount: int) -> int:
        """How many of the ``N_file`` tasks' requests reach this daemon (0: N_file unknown).

        Eq. 5.7-5.8 scale the observed requests up to ``N_file``, as if every task's
        request reached every daemon -- true of the thesis' large requests, not of small
        ones: a 64 KiB block on a 64 KiB stripe over two daemons lands on one of them, and
        scaling to all tasks doubled ``S_req`` (and its predicted time, past the small-request
        threshold). A request whose share here is ``f`` of its bytes spans about ``1/f`` of
        the ``pcount`` daemons; the mean of that over the recent requests is the fraction of
        tasks that reach this one."""
        f = self.files.get(ino)
        span = f.span if f is not None else None
        if n_file <= 0 or pcount <= 1 or span is None:
            return n_file
        return max(1, round(n_file * min(pcount, span) / pcount))

    def _as_found(self, ino: int, cached: float | None) -> float | None:
        """The resident fraction of the operation as it found the cache: no higher than it
        was before the operation's own first request was served.

        Serving an uncached operation fills the cache ahead of it: the disk's read-ahead of
        the first requests holds much of what the later ones ask for, so they arrive
        resident. Judged on arrival they made an uncached pass look cached halfway through,
        and rs switched to the cached column's pick for the rest (strided 64 KiB uncached:
        a third of rs' picks were opt1 and rs ran 7-13 % behind the opt3 it picked
        otherwise, in every 2026-11-26 study). What the operation brought in itself does
        not make its data cached; a fraction that falls (a pass leaving the cached part of
        a file) still counts."""
        f = self.files.get(ino)
        op = f.op if f is not None else None
        if op is None or cached is None:
            return cached
        fs = self.server.stats.files.get(ino)
        in_service = len(fs.jobs) if fs is not None else 0
        if op.arrivals <= in_service:            # none of its requests served yet
            op.found_cached = cached
        elif op.found_cached is not None:
            cached = min(cached, op.found_cached)
        return cached

    def resident(self, ino: int, pieces) -> int | None:
        """Bytes of the request cached (None: the storage cannot tell). Only the first
        MAX_PIECES ranges are asked; the rest count as cached like them. A request of one
        piece (a block, or a region within one stripe unit: most small requests) is asked
        as it is, without the scaling below."""
        cached = self.server.storage.cached
        if len(pieces) == 1:
            _, local, n = pieces[0]
            c = cached(ino, local, n)
            return c if c is None or n > 0 else 0
        total = got = 0
        for _, local, n in pieces[:MAX_PIECES]:
            c = cached(ino, local, n)
            if c is None:
                return None
            total += n
            got += c
        size = sum(n for _, _, n in pieces)
        return round(got * size / total) if total else 0

    def _nfile(self, ino: int) -> int:
        entry = self.nfile.get(ino)
        now = time.monotonic()
        if (entry is None or now - entry[1] > NFILE_TTL) and ino not in self._asking:
            nursery = self.server._nursery
            if nursery is not None:
                self._asking.add(ino)
                nursery.start_soon(self._ask_nfile, ino)
        if entry is not None:
            return entry[0]
        # Not known yet (the manager answers a round trip later): the tasks that opened the
        # file last asked about are the best guess -- a parallel program opens its files
        # with all its tasks. Guessing 1 (only what was seen) made the first requests of a
        # large collective look small, and the engine began it under the small-request
        # algorithm before switching.
        return self._last_nfile

    async def _ask_nfile(self, ino: int) -> None:
        try:
            n = (await self.server.nfile([ino])).get(ino, 0)
            known = self.nfile.get(ino, (self._last_nfile,))[0]
            if n > 0:
                self._last_nfile = n
            self.nfile[ino] = (n, time.monotonic())
            if len(self.nfile) > 4096:
                self.nfile.pop(next(iter(self.nfile)))
            fs = self.server.stats.files.get(ino)
            if self.active and n != known and fs is not None and fs.jobs:
                self._decide(ino)
        finally:
            self._asking.discard(ino)

    @property
    def seen(self) -> dict[int, deque[JobRecord]]:
        """File -> its read requests as seen arriving, newest last (status, tests)."""
        return {ino: f.seen for ino, f in self.files.items()}

    @property
    def ops(self) -> dict[int, Operation]:
        """File -> the operation in progress on it."""
        return {ino: f.op for ino, f in self.files.items() if f.op is not None}

    @property
    def last(self) -> dict:
        """The latest decision: file, pick, the workload estimated (with the class held and
        the one estimated), the predictions, whether a hint gave it, requests observed."""
        if self._last is None:
            return {}
        ino, pick, w, kind, params, fixed, hinted, observed = self._last
        preds = rs.select(params, w, fixed=fixed, kind=kind)[1]
        return {"ino": ino, "pick": pick,
                "workload": w.__dict__ | {"kind": kind, "estimated_kind": w.kind()},
                "predictions": preds, "hint": hinted, "observed": observed}

    def status(self) -> dict:
        return {"active": self.active, "picks": dict(self.picks), "last": self.last,
                "decisions": dict(self.decisions), "switches": self.switches,
                "deciding_s": self.deciding_s,
                "decide_s": self.decide_s,
                "params": self.params.to_wire()}
