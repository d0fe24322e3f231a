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
        self.picks: Counter[str] = Counter()

    def on_read(self, ino: int, pieces, pcount: int, hint: dict | None) -> None:
        """A new read request arrived (its job is submitted and in the statistics)."""
        if not self.active:
            return
        cached = self._resident(ino, pieces)
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
        self.last = {"ino": ino, "pick": pick, "workload": w.__dict__ | {"kind": w.kind()},
                     "predictions": preds, "hint": hint is not None}
        engine = self.server.engine
        if engine.algorithm != pick:
            engine.algorithm = pick

    def _resident(self, ino: int, pieces) -> float | None:
        total = got = 0
        for _, local, n in pieces[:MAX_PIECES]:
            c = self.server.storage.cached(ino, local, n)
            if c is None:
                return None
            total += n
            got += c
        return got / total if total else None

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
            self.nfile[ino] = (n, time.monotonic())
            if len(self.nfile) > 4096:
                self.nfile.pop(next(iter(self.nfile)))
        finally:
            self._asking.discard(ino)

    def status(self) -> dict:
        return {"active": self.active, "picks": dict(self.picks), "last": self.last,
                "params": self.params.to_wire()}
