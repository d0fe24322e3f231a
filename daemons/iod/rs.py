"""The reactive selector in the I/O daemon (thesis §5.5; SPEC §3).

With ``sched set rs`` the daemon re-decides its engine's algorithm on every new read request:
it estimates the model's inputs for that request's file from the requests in service
(eq. 5.7-5.10, ``N_file`` from the manager, refreshed in the background) or takes a client's
hint of the collective operation, measures the resident fraction of the requested ranges
(``cachestat(2)`` or the emulated disk's cache), asks ``pvfs.models.rs.select`` and switches
the engine when the answer differs. Parameters come from the config's ``[model]`` table
(``pvfs-admin calibrate`` writes it) or ``model_set``; without either, the thesis' table 5.2.
"""

from __future__ import annotations

import logging
import time
from collections import Counter

from pvfs.models import rs

from .stats import JobRecord

log = logging.getLogger("pvfs.iod.rs")

NFILE_TTL = 1.0     # seconds an N_file answer from the manager is used
MAX_PIECES = 256    # ranges whose residency is measured per request (the rest is like them)


class ReactiveSelector:
    def __init__(self, server) -> None:
        self.server = server
        table = server.config.extra.get("model")
        self.params = rs.Params.from_table(table) if isinstance(table, dict) else rs.Params()
        self.active = False
        self.nfile: dict[int, tuple[int, float]] = {}
        self._asking: set[int] = set()
        self.last: dict = {}
        self.context: dict[int, tuple[int, dict | None]] = {}   # ino -> (pcount, last hint)
        self.picks: Counter[str] = Counter()
        # Why it picked: "kind/column->pick" per decision, and how often the engine switched.
        self.decisions: Counter[str] = Counter()
        self.switches = 0

    def on_read(self, ino: int, pieces, pcount: int, hint: dict | None,
                record: JobRecord | None = None) -> None:
        """A new read request arrived (its job is submitted and in the statistics as
        ``record``): measure what of it is cached, then decide for its file."""
        if not self.active:
            return
        got, total = self._resident(ino, pieces)
        if record is not None and got is not None:
            record.resident = got
        self.context[ino] = (pcount, hint)
        if len(self.context) > 4096:
            self.context.pop(next(iter(self.context)))
        self._decide(ino, extra=None if record is not None else (got, total))

    def _decide(self, ino: int, extra: tuple[int | None, int] | None = None) -> None:
        """Pick the algorithm for the requests in service of ``ino`` and switch the engine.

        Runs on each new request and again when an input that was missing arrives (``N_file``
        from the manager): a decision made on an incomplete estimate is not left standing
        until the next request, which in a collective of single requests never comes."""
        pcount, hint = self.context.get(ino, (1, None))
        cached = self._cached_fraction(ino, extra)
        if hint is not None:
            # The hint speaks of the whole operation; this daemon holds 1/pcount of it.
            share = {k: (v if k == "requests" else v / pcount) for k, v in hint.items()}
            w = rs.from_hint(share, cached)
        else:
            fs = self.server.stats.files.get(ino)
            obs = fs.observed() if fs is not None else {}
            # Logical range -> this daemon's share of it (S_req_o counts local bytes).
            w = rs.estimate(self._nfile(ino), obs.get("N_req_o", 1), obs.get("S_req_o", 0),
                            obs.get("D_req_o", 1), obs.get("R_req_o", 0) // max(1, pcount),
                            cached)
        pick, preds = rs.select(self.params, w)
        self.picks[pick] += 1
        col = "cached" if rs.is_cached(self.params, w) else "uncached"
        self.decisions[f"{w.kind()}/{col}->{pick}"] += 1
        self.last = {"ino": ino, "pick": pick, "workload": w.__dict__ | {"kind": w.kind()},
                     "predictions": preds, "hint": hint is not None}
        engine = self.server.engine
        if engine.algorithm != pick:
            engine.algorithm = pick
            self.switches += 1

    def _cached_fraction(self, ino: int, extra: tuple[int | None, int] | None) -> float | None:
        """The resident fraction of the requests in service of ``ino`` (as measured when each
        arrived), plus ``extra`` (resident, total) not yet in the statistics.

        The model's cache state describes ``S_req``, all the requests in service (eq. 5.2),
        not the newest one alone: judged on the newest, a collective whose blocks are half
        prefetched by their neighbours' read-ahead flips between the columns of table 5.3 on
        every request."""
        got = total = 0
        fs = self.server.stats.files.get(ino)
        for rec in (fs.jobs.values() if fs is not None else ()):
            if rec.op == "read" and rec.resident is not None:
                got += rec.resident
                total += rec.nbytes
        if extra is not None and extra[0] is not None:
            got += extra[0]
            total += extra[1]
        return got / total if total else None

    def _resident(self, ino: int, pieces) -> tuple[int | None, int]:
        """Bytes of the request cached, and its size (None: the storage cannot tell). Only
        the first MAX_PIECES ranges are asked; the rest count as cached like them."""
        total = got = 0
        for _, local, n in pieces[:MAX_PIECES]:
            c = self.server.storage.cached(ino, local, n)
            if c is None:
                return None, 0
            total += n
            got += c
        size = sum(n for _, _, n in pieces)
        return (round(got * size / total) if total else 0), size

    def _nfile(self, ino: int) -> int:
        entry = self.nfile.get(ino)
        now = time.monotonic()
        if (entry is None or now - entry[1] > NFILE_TTL) and ino not in self._asking:
            nursery = self.server._nursery
            if nursery is not None:
                self._asking.add(ino)
                nursery.start_soon(self._ask_nfile, ino)
        return entry[0] if entry is not None else 0

    async def _ask_nfile(self, ino: int) -> None:
        try:
            n = (await self.server.nfile([ino])).get(ino, 0)
            known = self.nfile.get(ino, (None,))[0]
            self.nfile[ino] = (n, time.monotonic())
            if len(self.nfile) > 4096:
                self.nfile.pop(next(iter(self.nfile)))
            fs = self.server.stats.files.get(ino)
            if self.active and n != known and fs is not None and fs.jobs:
                self._decide(ino)
        finally:
            self._asking.discard(ino)

    def status(self) -> dict:
        return {"active": self.active, "picks": dict(self.picks), "last": self.last,
                "decisions": dict(self.decisions), "switches": self.switches,
                "params": self.params.to_wire()}
