"""The cache size the reactive selector is told (thesis §5.6, figs. 5.7-5.11; issue 31): the
resident fraction the I/O daemon measures, or the cache size reported right or as 0 with the
measurement ignored (``Params.cache_measured``, ``rs.told``), in the model, on the wire and in
the daemon's selector."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from pvfs.daemons.iod.rs import ReactiveSelector
from pvfs.daemons.iod.stats import JobRecord, WorkloadStats
from pvfs.models import rs

# Uncached ideal blocks: opt4 best; cached ideal blocks: opt3 best (the other columns as
# the thesis'), so the column the selector decides in shows in its pick.
E = {"opt1": (1.00, 1.00, 1.00, 1.00, 1.00, 1.00),
     "opt2": (1.00, 1.00, 1.00, 1.00, 1.00, 1.00),
     "opt3": (0.95, 1.00, 1.00, 0.70, 1.00, 1.00),
     "opt4": (0.70, 1.00, 1.00, 0.95, 1.00, 1.00)}
CACHE = 56 << 20


class FakeStorage:
    def __init__(self, resident: float) -> None:
        self.resident = resident

    def cached(self, ino: int, off: int, n: int) -> int:
        return int(n * self.resident)


def decide(params: rs.Params, resident: float) -> tuple[str, dict]:
    """One decision on 14 tasks' 1 MB blocks (14 MB in service, under the 56 MiB cache), the
    daemon measuring ``resident`` of them cached."""
    srv = SimpleNamespace(config=SimpleNamespace(extra={}), stats=WorkloadStats(),
                          storage=FakeStorage(resident),
                          engine=SimpleNamespace(algorithm="opt1", gather=0.0), _nursery=None)
    sel = ReactiveSelector(srv)
    sel.params = params
    sel.active = True
    sel.nfile[5] = (14, 1e18)
    for k in range(3):
        srv.stats.begin(k, JobRecord(5, "read", 1_000_000, 1, k * 2_000_000,
                                     (k + 1) * 2_000_000))
    sel.on_read(5, [(0, 0, 1_000_000)], 2, None)
    return srv.engine.algorithm, sel.last


@pytest.fixture
def model() -> rs.Params:
    return rs.Params(E_opt=E, S_cache=CACHE)


def test_measured_goes_by_what_the_daemon_measures(model):
    assert decide(model, 0.0)[0] == "opt4"          # uncached blocks
    pick, last = decide(model, 1.0)
    assert pick == "opt3" and last["workload"]["cached"] == 1.0


def test_reported_right_ignores_an_uncached_measurement(model):
    # 14 MB < 56 MiB: the thesis' rule says cached, whatever is resident
    pick, last = decide(rs.told(model, "right"), 0.0)
    assert pick == "opt3"
    assert last["workload"]["cached"] is None


def test_reported_zero_ignores_a_cached_measurement(model):
    pick, last = decide(rs.told(model, "zero"), 1.0)
    assert pick == "opt4"
    assert last["workload"]["cached"] is None


def test_told_sets_the_write_part_and_the_size():
    p = rs.Params(S_cache=CACHE, write=rs.Params(S_cache=CACHE))
    right = rs.told(p, "right", cache_bytes=1 << 20)
    assert right.S_cache == 1 << 20 and right.write.S_cache == 1 << 20
    assert not right.cache_measured and not right.write.cache_measured
    zero = rs.told(p, "zero")
    assert zero.S_cache == 0 and zero.write.S_cache == 0 and not zero.write.cache_measured
    assert rs.told(p, "measured") is p
    with pytest.raises(ValueError):
        rs.told(p, "cachestat")


def test_the_switch_survives_the_wire_and_the_config_table(model):
    p = rs.told(rs.Params(write=rs.Params()), "zero")
    assert rs.Params.from_wire(p.to_wire()) == p
    assert rs.Params.from_table(p.to_table()) == p
    assert rs.Params.from_wire(model.to_wire()).cache_measured is True
    old = model.to_wire()
    del old["cache_measured"]                   # a model written before the switch
    assert rs.Params.from_wire(old).cache_measured is True
    with pytest.raises(ValueError):
        rs.Params.from_wire({**old, "cache_measured": "maybe"})
