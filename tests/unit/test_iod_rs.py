"""The I/O daemon's reactive selector (daemons/iod/rs.py) without a network: estimation from
the statistics in service, the resident fraction, a client's hint, the engine switch."""

from __future__ import annotations

from types import SimpleNamespace

from pvfs.daemons.iod.rs import ReactiveSelector
from pvfs.daemons.iod.stats import JobRecord, WorkloadStats
from pvfs.models import rs


class FakeStorage:
    def __init__(self, resident: float) -> None:
        self.resident = resident

    def cached(self, ino: int, off: int, n: int) -> int:
        return int(n * self.resident)


def server(resident: float = 0.0, model: dict | None = None):
    extra = {"model": model} if model else {}
    return SimpleNamespace(config=SimpleNamespace(extra=extra), stats=WorkloadStats(),
                           storage=FakeStorage(resident), engine=SimpleNamespace(algorithm="opt1"),
                           _nursery=None)


def test_large_uncached_blocks_switch_the_engine_to_opt4():
    srv = server(resident=0.0)
    sel = ReactiveSelector(srv)
    sel.active = True
    sel.nfile[5] = (14, 1e18)            # N_file known: 14 tasks hold the file open
    for k in range(3):                   # three 1 MB block requests seen so far
        srv.stats.begin(k, JobRecord(5, "read", 1_000_000, 1, k * 2_000_000, (k + 1) * 2_000_000))
    sel.on_read(5, [(0, 0, 1_000_000)], 2, None)
    assert srv.engine.algorithm == "opt4"
    w = sel.last["workload"]
    # eq. 5.7-5.8: 3 requests of 1 MB seen, 14 tasks: 14 MB in service
    assert w["N_req"] == 14 and abs(w["S_req"] - 14e6) < 1 and w["kind"] == "ideal"
    assert w["cached"] == 0.0


def test_inactive_selector_changes_nothing():
    srv = server()
    sel = ReactiveSelector(srv)
    sel.on_read(5, [(0, 0, 4096)], 1, None)
    assert srv.engine.algorithm == "opt1" and not sel.last


def test_hint_replaces_the_estimate_and_small_cached_work_gets_opt1():
    srv = server(resident=1.0)
    srv.engine.algorithm = "opt4"
    sel = ReactiveSelector(srv)
    sel.active = True
    srv.stats.begin(1, JobRecord(7, "read", 2048, 1, 0, 2048))
    hint = {"size": 14 * 2048, "requests": 14, "regions": 14, "range": 1 << 20}
    sel.on_read(7, [(0, 0, 2048)], 2, hint)
    assert sel.last["hint"] and sel.last["workload"]["S_req"] == 14 * 2048 / 2
    assert srv.engine.algorithm == "opt1"      # ~0 predicted I/O: the thesis' fix


def test_model_table_from_the_config_is_used():
    p = rs.Params(B_dr=1e6, zero_s=0.5)
    sel = ReactiveSelector(server(model=p.to_table()))
    assert sel.params == p
