"""Issue 31: the scheduling study is held out -- the model is fitted on runs that are never
scored -- runs rs among the fixed algorithms, adds the mixed-phase oracle row, and has a write
mode. Driven here by a fake runner (no network, no daemons)."""

from __future__ import annotations

import pytest

from pvfs.bench.scheduling import runner as runner_mod
from pvfs.bench.scheduling import study
from pvfs.bench.scheduling.runner import MIXED_PHASES, Run, task_ops


class FakeRunner:
    """Answers the study's daemon calls and makes up each run's task times."""

    nprocs = 3

    def __init__(self) -> None:
        self.made: list[tuple] = []           # (workload, size, cached, op, algorithm)
        self.models: list[dict] = []

    def call(self, i: int, op: str, **fields) -> dict:
        if op == "model_set":
            self.models.append(fields["params"])
        return {"rs": {"picks": {}, "decisions": {}, "switches": 0, "deciding_s": 0.0},
                "disk": {"cache_bytes": 56 << 20}}

    def run(self, wl, size, cached, alg, seed=0, mark=None, operation="read") -> Run:
        self.made.append((wl, size, cached, operation, alg))
        if mark:
            mark("start")
            mark("end")
        speed = {"opt1": 1.0, "opt2": 0.9, "opt3": 1.1, "opt4": 0.8, "rs": 0.85}[alg]
        t = 0.01 + size / 4e6 * speed * (0.3 if cached else 1.0) * (1 + 0.01 * seed)
        return Run(wl, size, cached, alg, [t * (1 + 0.1 * k) for k in range(self.nprocs)],
                   operation=operation)


def _plan(model=None) -> study.Plan:
    fit_cells = [(wl, s, c) for wl in runner_mod.WORKLOADS for s in (64 << 10, 1 << 20)
                 for c in (False, True)]
    cells = study.plan_cells((*runner_mod.WORKLOADS, "mixed-phase"),
                             (64 << 10, 512 << 10, 2 << 20), (64 << 10,), (False, True))
    return study.Plan([] if model else fit_cells, cells, True, model,
                      "earlier.json" if model else None)


def _run(plan: study.Plan, reps: int = 3) -> tuple[dict, FakeRunner]:
    r = FakeRunner()
    doc = study.study_on(r, plan, r.nprocs, 2, reps, None, ("rs",), lambda m: None, "T")
    return doc, r


def test_no_scored_run_is_in_the_fit_set_and_the_fit_sees_only_the_fitting_pass(monkeypatch):
    from pvfs.models import fit

    seen = []
    real = fit.fit

    def spy(obs, *a, **k):
        obs = list(obs)
        seen.append(obs)
        return real(obs, *a, **k)

    monkeypatch.setattr(fit, "fit", spy)
    doc, r = _run(_plan())
    fit_ids = set(doc["model_fit_on"]["runs"])
    scored = {run["run_id"] for row in doc["results"] for run in row.get("runs", [])
              if "run_id" in run}
    assert fit_ids and scored and not fit_ids & scored
    assert all("/fit/" in i for i in fit_ids) and all("/score/" in i for i in scored)
    # the fit got exactly the fitting pass' runs: 4 workloads x 2 sizes x 2 caches x 4
    (obs,) = seen
    assert len(obs) == len(doc["fit_results"]) == 4 * 2 * 2 * 4 == len(fit_ids)
    assert {o.algorithm for o in obs} == {"opt1", "opt2", "opt3", "opt4"}
    # the scored cells include sizes the fit never saw, reads and writes
    fit_sizes = {o.request_bytes for o in obs}
    scored_sizes = {x["request_bytes"] for x in doc["results"] if x["request_bytes"]}
    assert {512 << 10, 2 << 20} <= scored_sizes - fit_sizes
    assert {x["operation"] for x in doc["results"]} == {"read", "write"}
    # the model the daemons got is the one fitted
    assert r.models == [doc["model"]] * 2                  # one per I/O daemon


def test_held_out_refuses_a_scored_run_in_the_fit_set():
    rows = [{"runs": [{"run_id": "T/score/a"}, {"run_id": "T/fit/b"}]}]
    study.held_out(["T/fit/c"], rows)
    with pytest.raises(ValueError, match="fit set"):
        study.held_out(["T/fit/b"], rows)


def test_with_a_model_there_is_no_fitting_pass():
    doc, r = _run(_plan(model=_model()))
    assert doc["fit_results"] == [] and doc["model_fit_on"]["runs"] == []
    assert doc["model_fit_on"]["source"] == "earlier.json"
    # every run made was a scored one (the cells, then the mixed-phase phases)
    cells = len(_plan(model=_model()).cells)
    assert len(r.made) == cells * 5 * 3 + 5 * 3 * len(MIXED_PHASES)


def _model() -> dict:
    from pvfs.models.rs import thesis_params

    return thesis_params().to_wire()


def test_rs_runs_among_the_fixed_algorithms_never_all_after_them():
    _, r = _run(_plan(model=_model()))
    groups: dict[tuple, list[str]] = {}
    for wl, s, c, op, alg in r.made:
        if wl != "mixed-phase" and (wl, s, c) not in {(p[0], p[1], p[2]) for p in MIXED_PHASES}:
            groups.setdefault((wl, s, c, op), []).append(alg)
    positions = set()
    for algs in groups.values():
        for i in range(0, len(algs), 5):           # run i of every setting, then run i+1
            batch = algs[i:i + 5]
            assert sorted(batch) == ["opt1", "opt2", "opt3", "opt4", "rs"]
            positions.add(batch.index("rs"))
    assert len(positions) >= 3                      # rs not always last (nor first)


def test_the_mixed_phase_workload_gets_an_oracle_row():
    doc, _ = _run(_plan(model=_model()))
    mixed = {x["algorithm"]: x for x in doc["results"] if x["workload"] == "mixed-phase"}
    assert set(mixed) == {"opt1", "opt2", "opt3", "opt4", "rs", "oracle"}
    o = mixed["oracle"]
    assert len(o["schedule"]) == len(MIXED_PHASES)
    assert o["mean_task_service_s"] <= min(mixed[a]["median_mean_task_service_s"]
                                           for a in ("opt1", "opt2", "opt3", "opt4")) + 1e-12
    # per task and per phase times are kept, run by run
    run = mixed["opt1"]["runs"][0]
    assert len(run["phases"]) == len(MIXED_PHASES) and len(run["task_s"]) == 3
    assert all(len(p["task_s"]) == 3 for p in run["phases"])
    t = study.targets(doc["results"])
    assert "mixed_phase_rs_within_3pct_of_oracle_fixed_8pct_behind" in t


# ------------------------------------------------------------------ the write mode

def test_write_ops_are_the_read_ops_regions_written():
    for wl in runner_mod.WORKLOADS:
        reads = task_ops(wl, 4, 64 << 10, seed=3)
        writes = task_ops(wl, 4, 64 << 10, seed=3, operation="write")
        for r_ops, w_ops in zip(reads, writes):
            assert [op[1:] for op in r_ops] == [op[1:] for op in w_ops]
            assert {op[0] for op in w_ops} <= {"write", "wlist"}
            assert {op[0] for op in r_ops} <= {"read", "list"}
    with pytest.raises(ValueError):
        task_ops("strided", 4, 64 << 10, operation="append")


class _Sink:
    """Stands in for the workers: records what the runner sends."""

    def __init__(self, n: int) -> None:
        self.sent: list[tuple[int, dict]] = []
        self.calls: list[str] = []
        self.n = n

    def install(self, r) -> None:
        r._send = lambda k, msg: self.sent.append((k, msg))
        r._recv = lambda k: {"t": 0.1, "ready": True, "created": 1}
        r.call_all = lambda op, **f: self.calls.append(op) or []


def _runner(n: int = 2):
    r = object.__new__(runner_mod.Runner)
    r.config_path, r.nprocs, r.iods, r.niods, r.files, r.workers = "c", n, [0, 1], 2, set(), []
    sink = _Sink(n)
    sink.install(r)
    return r, sink


def test_a_cached_write_warms_by_reading_then_writes_after_the_caches_are_dropped():
    r, sink = _runner()
    run = r.run("strided", 64 << 10, True, "opt2", operation="write")
    assert run.operation == "write" and run.row()["operation"] == "write"
    assert sink.calls == ["sched_set", "disk_drop"]
    passes = [msg["ops"] for _, msg in sink.sent if "ops" in msg]
    assert len(passes) == 2 * r.nprocs                      # warm-up, then the measured one
    assert all(op[0] == "list" for ops in passes[:r.nprocs] for op in ops)
    assert all(op[0] == "wlist" for ops in passes[r.nprocs:] for op in ops)


def test_an_uncached_write_is_one_pass_of_writes():
    r, sink = _runner()
    r.run("single-block", 64 << 10, False, "opt1", operation="write")
    passes = [msg["ops"] for _, msg in sink.sent if "ops" in msg]
    assert len(passes) == r.nprocs and all(ops[0][0] == "write" for ops in passes)


def test_the_worker_opens_for_writing_only_when_it_writes_and_writes_the_bytes_asked():
    from pvfs.bench.scheduling import worker

    assert worker.open_mode([["read", 0, 10]]) == "rb"
    assert worker.open_mode([["read", 0, 10], ["wlist", [[0, 4]]]]) == "r+b"

    class F:
        def __init__(self) -> None:
            self.got = []

        def pwrite(self, data, off):
            self.got.append(("pwrite", off, len(data)))
            return len(data)

        def write_list(self, regions, data):
            self.got.append(("write_list", regions, len(data)))
            return len(data)

    f = F()
    assert worker._do(f, ["write", 100, 5000]) == 5000
    assert worker._do(f, ["wlist", [[0, 10], [50, 20]]]) == 30
    assert f.got == [("pwrite", 100, 5000), ("write_list", [(0, 10), (50, 20)], 30)]


def test_the_model_figure_is_drawn_from_the_held_out_residuals(tmp_path):
    pytest.importorskip("matplotlib")
    from pvfs.bench.scheduling.plot import plot_model

    assert plot_model({"disk": "ide-2000", "residuals": []}, str(tmp_path)) is None
    res = [{"workload": "strided", "request_bytes": s, "cached": False, "algorithm": a,
            "observed_s": s / 4e6, "predicted_s": s / 4.2e6, "residual": -0.05}
           for s in (64 << 10, 512 << 10) for a in ("opt1", "opt4")]
    path = plot_model({"disk": "ide-2000", "residuals": res,
                       "model_fit_on": {"source": "fit"}}, str(tmp_path))
    assert path.endswith("ide-2000-model.png") and (tmp_path / "ide-2000-model.png").stat().st_size


class SlowFirstRunner(FakeRunner):
    """Each cell's first run (seed 0) three times as slow: a run under a load spike."""

    def run(self, wl, size, cached, alg, seed=0, mark=None, operation="read") -> Run:
        run = super().run(wl, size, cached, alg, seed, mark, operation)
        if seed == 0:
            run.times = [t * 3 for t in run.times]
        return run


def test_fit_reps_runs_the_fitting_pass_that_often_and_fits_the_medians(monkeypatch):
    from statistics import median

    from pvfs.models import fit

    seen = []
    real = fit.fit

    def spy(obs, *a, **k):
        obs = list(obs)
        seen.append(obs)
        return real(obs, *a, **k)

    monkeypatch.setattr(fit, "fit", spy)
    plan = _plan()
    plan.fit_reps = 3
    r = SlowFirstRunner()
    doc = study.study_on(r, plan, r.nprocs, 2, 3, None, ("rs",), lambda m: None, "T")
    fit_runs = r.made[:len(plan.fit_cells) * 4 * 3]
    assert all(a != "rs" for *_, a in fit_runs)
    assert len(doc["model_fit_on"]["runs"]) == len(plan.fit_cells) * 4 * 3
    (obs,) = seen
    rows = {(x["workload"], x["request_bytes"], x["cached"], x["algorithm"]): x
            for x in doc["fit_results"] if x["operation"] == "read"}
    for o in obs:
        runs = [run["mean_task_service_s"]
                for run in rows[(o.workload, o.request_bytes, o.cached, o.algorithm)]["runs"]]
        assert len(runs) == 3
        # the median, not the mean the slow first run pulls up
        assert o.mean_task_service_s == pytest.approx(median(runs))
        assert o.mean_task_service_s < sum(runs) / len(runs) * 0.8


class CountingRunner(FakeRunner):
    """Each ``sched_get`` answers one more opt3 pick than the one before."""

    def __init__(self) -> None:
        super().__init__()
        self.n = 0

    def call(self, i: int, op: str, **fields) -> dict:
        out = super().call(i, op, **fields)
        if op == "sched_get":
            self.n += 1
            out["rs"]["picks"] = {"opt3": self.n}
        return out


def test_rs_mixed_phase_runs_keep_their_decisions_per_phase():
    r = CountingRunner()
    doc = study.study_on(r, _plan(model=_model()), r.nprocs, 2, 3, None, ("rs",),
                         lambda m: None, "T")
    mixed = {x["algorithm"]: x for x in doc["results"] if x["workload"] == "mixed-phase"}
    for run in mixed["rs"]["runs"]:
        # per phase: 2 daemons asked before and after, each 2 picks further on
        assert [p["picks"] for p in run["rs_phases"]] == [{"opt3": 4}] * len(MIXED_PHASES)
    assert mixed["rs"]["rs"]["picks"] == {"opt3": 4 * len(MIXED_PHASES) * 3}
    assert not any("rs_phases" in run for a in ("opt1", "opt4") for run in mixed[a]["runs"])
    assert "rs_phases" not in mixed["rs"]


def test_fit_spread_fits_on_the_kept_runs_of_the_fitting_pass(monkeypatch):
    from pvfs.models import fit

    seen = []
    real = fit.fit

    def spy(obs, *a, **k):
        obs = list(obs)
        seen.append((obs, k.get("spread")))
        return real(obs, *a, **k)

    monkeypatch.setattr(fit, "fit", spy)
    plan = _plan()
    plan.fit_reps = 3
    plan.fit_spread = True
    r = SlowFirstRunner()
    study.study_on(r, plan, r.nprocs, 2, 3, None, ("rs",), lambda m: None, "T")
    (obs, spread), = seen
    assert spread is True
    assert all(len(o.runs) == 3 for o in obs)


def test_picks_scores_a_pick_on_the_scored_runs_with_the_best_chosen_again():
    from pvfs.bench.scheduling import picks

    by = {a: {"runs": [{"mean_task_service_s": v} for v in vs]}
          for a, vs in {"opt1": (1.0, 1.01, 0.99), "opt2": (1.5, 1.5, 1.5),
                        "opt3": (1.2, 1.2, 1.2), "opt4": (2.0, 2.0, 2.0)}.items()}
    good = picks.score_pick(by, "opt1", "t")
    assert good["best"] == "opt1" and good["rs_over_best"] == 0.0
    assert good["within_5pct"] == "met"
    bad = picks.score_pick(by, "opt2", "t")
    assert bad["rs_over_best"] == pytest.approx(0.5)
    assert bad["within_5pct"] == "missed" and bad["over_10pct"] == "met"
    rows = [{"today": {"within_5pct": "missed", "over_10pct": "met", "pick": "opt2"},
             "spread": {"within_5pct": "met", "over_10pct": "missed", "pick": "opt1"},
             "operation": "read", "workload": "strided", "request_bytes": 1, "cached": 0}]
    assert picks.decide(rows)["improvement"] is True
    rows[0]["today"], rows[0]["spread"] = rows[0]["spread"], rows[0]["today"]
    d = picks.decide(rows)
    assert d["improvement"] is False and len(d["new_over_10pct"]) == 1


def test_chapter5_figures_keep_the_fitted_on_and_held_out_runs_apart(tmp_path):
    pytest.importorskip("matplotlib")
    from pvfs.bench.scheduling.plot import chapter5_curves, plot_chapter5

    plan = _plan()
    plan.fit_writes = True
    doc, r = _run(plan)
    doc.update(disk="ide-2000", clients=r.nprocs, iods=2)
    pts = chapter5_curves(doc)
    assert {x["part"] for x in pts} == {"fit", "scored"}
    fit_ids = set(doc["model_fit_on"]["runs"])
    assert fit_ids and all(x["runs"] == (1 if x["part"] == "fit" else 3) and x["model_s"] > 0
                           and x["baseline_s"] > 0
                           and x["ci95"][0] <= x["median_s"] <= x["ci95"][1] for x in pts)
    assert {x["operation"] for x in pts if x["part"] == "scored"} == {"read", "write"}
    paths = plot_chapter5(doc, str(tmp_path))
    assert sorted(p.rsplit("/", 1)[1] for p in paths) == [
        "ide-2000-fig5-baseline-read.png", "ide-2000-fig5-baseline-write.png",
        "ide-2000-fig5-model-read.png", "ide-2000-fig5-model-write.png"]


def test_cache_reports_pick_from_the_column_the_report_implies():
    from pvfs.bench.scheduling import picks
    from pvfs.models import rs

    # opt4 best on uncached single blocks, opt3 on cached ones, no ~0 rule
    e = dict(rs.TABLE_5_3)
    e["opt3"] = (0.90, 0.95, 0.99, 0.70, 0.97, 1.02)
    p = rs.thesis_params(zero_s=0.0, E_opt=e)
    cached = ("single-block", 1 << 20, True, "read")
    uncached = ("single-block", 1 << 20, False, "read")
    assert picks.report_pick(p, cached, 14, 2, "measured") == "opt3"
    assert picks.report_pick(p, cached, 14, 2, "zero") == "opt4"
    assert picks.report_pick(p, uncached, 14, 2, "measured") == "opt4"
    # reported right, S_req under the 56 MB: the cached column, whatever the cache holds
    assert picks.report_pick(p, uncached, 14, 2, "right") == "opt3"


class SlowLargeRunner(FakeRunner):
    """Cells of 1 MiB per task take over a second (not short); 64 KiB ones do not."""

    def run(self, wl, size, cached, alg, seed=0, mark=None, operation="read") -> Run:
        run = super().run(wl, size, cached, alg, seed, mark, operation)
        if size >= 1 << 20:
            run.times = [t + 2.0 for t in run.times]
        return run


def test_fit_reps_short_runs_the_fitting_pass_short_cells_more_often():
    plan = _plan()
    plan.fit_reps, plan.fit_reps_short = 3, 8
    r = SlowLargeRunner()
    doc = study.study_on(r, plan, r.nprocs, 2, 3, None, ("rs",), lambda m: None, "T")
    runs = {(x["request_bytes"], len(x["runs"])) for x in doc["fit_results"]}
    assert runs == {(64 << 10, 8), (1 << 20, 3)}
    # without it, every fitting cell runs fit_reps times
    plan.fit_reps_short = None
    doc = study.study_on(SlowLargeRunner(), plan, r.nprocs, 2, 3, None, ("rs",),
                         lambda m: None, "T")
    assert {len(x["runs"]) for x in doc["fit_results"]} == {3}
