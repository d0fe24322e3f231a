"""The I/O daemon's decisions (daemons/iod/rs.py) ask the model for its pick only
(``pvfs.models.rs.pick``): the four predictions are computed when no band or "~0" rule
decides, or when ``ReactiveSelector.last`` is asked (thirtieth session, docs/scheduling.md).
The picks are ``select``'s, always."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from pvfs.daemons.iod import rs as iod_rs
from pvfs.daemons.iod import stats as iod_stats
from pvfs.daemons.iod.rs import ReactiveSelector
from pvfs.daemons.iod.stats import JobRecord, WorkloadStats
from pvfs.models import rs

S26 = (Path(__file__).resolve().parents[2] / "bench" / "results"
       / "study-scheduling-ide-2000-quick-s26-2026-11-29.json")


def _models() -> list[rs.Params]:
    out = [rs.Params(), rs.thesis_params()]
    if S26.exists():
        p = rs.Params.from_wire(json.loads(S26.read_text())["model"])
        out += [p, replace(p, bands=()), replace(p, zero_cols=(), small_algs=())]
        if p.write is not None:
            out.append(p.write)
    return out


def _workloads() -> list[rs.Workload]:
    out = []
    for s_req, n, d_per, spread, cached in itertools.product(
            (2 << 10, 64 << 10, 512 << 10, 1 << 20, 4 << 20, 28 << 20, 200 << 20),
            (1, 7, 14), (1, 16), (1.0, 0.3, 0.05), (None, 0.0, 0.4, 1.0)):
        out.append(rs.Workload(S_req=s_req * n, N_req=n, D_req=n * d_per,
                               R_req=s_req * n / spread, cached=cached))
    return out


@pytest.mark.parametrize("p", _models())
def test_pick_is_selects_algorithm_and_column_everywhere(p):
    for w, kind, fixed in itertools.product(_workloads(), (None, "ideal", "sparse", "disjoint"),
                                            (None, {"opt4": 0.005})):
        best, _ = rs.select(p, w, fixed=fixed, kind=kind)
        alg, col = rs.pick(p, w, fixed=fixed, kind=kind)
        assert alg == best, (w, kind, fixed)
        assert col == rs.CLASSES.index(kind or w.kind()) + (3 if rs.is_cached(p, w) else 0)


def _selector(monkeypatch, params: rs.Params):
    now = [1000.0]
    for m in (iod_rs, iod_stats):
        monkeypatch.setattr(m.time, "monotonic", lambda: now[0])
    srv = SimpleNamespace(config=SimpleNamespace(extra={"model": params.to_table()}),
                          stats=WorkloadStats(), storage=SimpleNamespace(cached=lambda i, o, n: n),
                          engine=SimpleNamespace(algorithm="opt1", gather=0.004), _nursery=None)
    sel = ReactiveSelector(srv)
    sel.active = True
    sel.nfile[5] = (14, 1e18)
    return now, srv, sel


def test_a_decision_on_small_cached_blocks_computes_no_prediction(monkeypatch):
    """Cached 4 KiB blocks (the mixed phase's random32 64 KiB cached phase, as one daemon sees
    it): the "~0" rule picks, and the daemon's decisions compute none of the predictions
    (before: all four, every decision). The status still shows them, and the picks are
    ``select``'s."""
    p = rs.Params(zero_s=0.05, small_alg="opt3")
    now, srv, sel = _selector(monkeypatch, p)
    computed = []

    class Counting(dict):                      # E_opt[alg]: one per prediction computed
        def __getitem__(self, alg):
            computed.append(alg)
            return dict.__getitem__(self, alg)

    object.__setattr__(p, "E_opt", Counting(p.E_opt))
    sel.params = p
    picks = []
    for k in range(1, 41):
        now[0] += 0.0003
        rec = JobRecord(5, "read", 4096, 1, (k * 37 % 200) * 4096, (k * 37 % 200 + 1) * 4096)
        srv.stats.begin(k, rec)
        sel.on_read(5, [(0, 0, 4096)], 1, None, rec)
        srv.stats.end(k, 5, 0, 4096, 0.0, 1e-4)
        picks.append(srv.engine.algorithm)
    assert sum(sel.decisions.values()) >= 5
    assert computed == []                      # no decision computed a prediction
    assert set(picks) == {"opt3"} and sel.picks == {"opt3": sum(sel.decisions.values())}
    last = sel.last
    assert sorted(computed) == sorted(rs.ALGORITHMS)     # ...computed when asked, once
    w = rs.Workload(**{k: v for k, v in last["workload"].items()
                       if k in ("S_req", "N_req", "D_req", "R_req", "cached")})
    best, preds = rs.select(p, w, fixed={"opt4": 0.004}, kind=last["workload"]["kind"])
    assert last["pick"] == best == "opt3"
    assert last["predictions"] == preds and set(preds) == set(rs.ALGORITHMS)


def test_a_decision_past_the_rules_still_weighs_every_prediction(monkeypatch):
    """Large cached requests over the "~0" threshold: the smallest prediction decides, as
    before, with opt4's gather added to its own."""
    p = rs.Params(zero_s=1e-9)
    now, srv, sel = _selector(monkeypatch, p)
    for k in range(1, 15):
        now[0] += 0.0003
        rec = JobRecord(5, "read", 1 << 20, 1, (k - 1) << 20, k << 20)
        srv.stats.begin(k, rec)
        sel.on_read(5, [(0, 0, 1 << 20)], 1, None, rec)
    last = sel.last
    w = rs.Workload(**{k: v for k, v in last["workload"].items()
                       if k in ("S_req", "N_req", "D_req", "R_req", "cached")})
    best, preds = rs.select(p, w, fixed={"opt4": 0.004}, kind=last["workload"]["kind"])
    assert last["pick"] == best == min(preds, key=preds.get)
    assert srv.engine.algorithm == best


class _Engine:
    """The engine's ``algorithm`` and ``gather`` as the native engine has them (each read or
    write takes its lock): counted."""

    def __init__(self) -> None:
        self._alg, self._gather, self.reads, self.writes = "opt1", 0.004, 0, 0

    @property
    def algorithm(self) -> str:
        self.reads += 1
        return self._alg

    @algorithm.setter
    def algorithm(self, v: str) -> None:
        self.writes += 1
        self._alg = v

    @property
    def gather(self) -> float:
        self.reads += 1
        return self._gather

    @gather.setter
    def gather(self, v: float) -> None:
        self._gather = v


def test_the_selector_reads_the_engines_algorithm_once_per_activation(monkeypatch):
    """``before_read`` (every request) and each decision compared the pick with
    ``engine.algorithm``, a read that takes the engine's lock; now the selector remembers
    what it set and reads the engine once after each ``sched_set`` (which assigns
    ``active``), so a fixed setting's algorithm in between is still seen. Passes of
    cached blocks separated by barriers (a new operation each), as the mixed phase's."""
    p = rs.Params(zero_s=0.05, small_alg="opt3")
    now, srv, sel = _selector(monkeypatch, p)
    eng = srv.engine = _Engine()
    k = 0

    def one_pass(n: int = 30) -> None:
        nonlocal k
        now[0] += 0.1                                   # a barrier: the file idles
        for _ in range(n):
            k += 1
            now[0] += 0.0003
            rec = JobRecord(5, "read", 4096, 1, (k * 37 % 200) * 4096, (k * 37 % 200 + 1) * 4096)
            sel.before_read(5)
            srv.stats.begin(k, rec)
            with sel.batch():
                sel.on_read(5, [(0, 0, 4096)], 1, None, rec)
            srv.stats.end(k, 5, 0, 4096, 0.0, 1e-4)

    for _ in range(3):
        one_pass()
    assert eng._alg == "opt3" and sel.switches == 1 and eng.writes == 1
    assert eng.reads <= 2               # the algorithm and the gather, once each (was ~100)
    # a fixed setting between two rs runs (control.op_sched_set), then rs again
    sel.active = False
    eng.algorithm = "opt2"
    sel.active = True
    before = eng.reads
    one_pass()
    assert eng._alg == "opt3" and sel.switches == 2   # it saw opt2 and switched back
    assert eng.reads - before <= 2
