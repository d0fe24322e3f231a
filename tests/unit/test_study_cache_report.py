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


# ------------------------------------------------------------------ the study's told settings

class ToldRunner:
    """The study's daemon calls answered; every run records the model the daemons hold."""

    nprocs = 3

    def __init__(self) -> None:
        self.held: dict | None = None
        self.made: list[tuple[str, dict | None]] = []

    def call(self, i: int, op: str, **fields) -> dict:
        if op == "model_set":
            self.held = fields["params"]
        return {"rs": {"picks": {}, "decisions": {}, "switches": 0, "deciding_s": 0.0},
                "disk": {"cache_bytes": CACHE}}

    def run(self, wl, size, cached, alg, seed=0, mark=None, operation="read"):
        from pvfs.bench.scheduling.runner import Run

        self.made.append((alg, self.held))
        if mark:
            mark("start")
            mark("end")
        t = 0.1 * (1 + 0.01 * seed)
        return Run(wl, size, cached, alg, [t] * self.nprocs, operation=operation)


def test_rs_told_the_cache_runs_beside_rs_with_its_own_model():
    from pvfs.bench.scheduling import study

    model = rs.Params(S_cache=1 << 30, write=rs.Params()).to_wire()
    plan = study.Plan([], [("single-block", 64 << 10, False, "read"),
                           ("strided", 64 << 10, True, "read")], False, model, "m.json")
    r = ToldRunner()
    doc = study.study_on(r, plan, r.nprocs, 2, 3, None, ("rs", "rs@right", "rs@zero"),
                         lambda m: None, "T")
    # the daemons are only ever asked for the algorithms they know
    assert {a for a, _ in r.made} == {"opt1", "opt2", "opt3", "opt4", "rs"}
    settings = {x["algorithm"] for x in doc["results"]}
    assert {"rs", "rs@right", "rs@zero"} <= settings
    # every run of a setting under the model told its way, the daemon's cache reported right
    ran = _in_run_order(doc)
    assert len(ran) == len(r.made)
    held = {}
    for (alg, m), setting in zip(r.made, ran):
        assert alg == ("rs" if setting.startswith("rs") else setting)
        held.setdefault(setting, set()).add((m["cache_measured"], m["S_cache"],
                                         m["write"]["cache_measured"]))
    assert held["rs"] == {(True, 1 << 30, True)}
    assert held["rs@right"] == {(False, CACHE, False)}
    assert held["rs@zero"] == {(False, 0, False)}
    assert set(doc["models_told"]) == {"right", "zero"}
    assert doc["model"]["cache_measured"] is True


def _in_run_order(doc) -> list[str]:
    """The settings in the order they ran: run i of a cell before run i+1, in the order of
    ``run_order`` (as ``side_by_side`` runs them)."""
    from pvfs.bench.scheduling import study

    out = []
    cells: dict = {}
    for x in doc["results"]:
        cells.setdefault((x["workload"], x["request_bytes"], x["cached"]), {})[
            x["algorithm"]] = x
    for (wl, s, c), by in cells.items():
        for i in range(len(next(iter(by.values()))["runs"])):
            out += study.run_order(tuple(by), f"{wl}/{s}/{c}", i)
    return out


def test_the_told_figures_are_drawn_per_cache_column(tmp_path):
    from pvfs.bench.scheduling import plot

    rows = []
    for cached in (False, True):
        for wl in ("single-block", "random16"):
            for k, alg in enumerate(("opt1", "opt2", "opt3", "opt4", "rs", "rs@right",
                                     "rs@zero")):
                v = [0.1 + 0.01 * k + 0.001 * i for i in range(3)]
                rows.append({"workload": wl, "request_bytes": 64 << 10, "cached": cached,
                             "operation": "read", "algorithm": alg,
                             "mean_task_service_s": sum(v) / 3,
                             "median_mean_task_service_s": v[1],
                             "runs": [{"mean_task_service_s": x} for x in v]})
    doc = {"disk": "ide-2000", "results": rows, "cache_reports": ["right", "zero"]}
    paths = plot.plot_told(doc, str(tmp_path))
    assert [p.rsplit("/", 1)[1] for p in paths] == ["ide-2000-fig5-told-uncached.png",
                                                    "ide-2000-fig5-told-cached.png"]
    assert all((tmp_path / p.rsplit("/", 1)[1]).stat().st_size > 0 for p in paths)
