"""The reactive-scheduling study (thesis ch. 4-6), as ``pvfs-admin study scheduling`` runs it.

14 client hosts and 2 I/O daemon hosts (network namespaces on a bridge, 100 Mbit/s links for
``--disk ide-2000``, unshaped for ``--disk today``; ``pvfs.cluster.netns``), emulated disks with
the chosen preset. Held out (issue 31): the model (appendix B, ``pvfs.models.fit``) is fitted
on one set of runs -- a fitting pass of opt1..opt4 over the reads (and, when writes are
scored, the writes: the model's write part) of the fit sizes, or an earlier study's or a
calibration's runs (``--model``) -- and handed to the daemons; then the
scored cells, fresh runs it never saw (sizes absent from the fit among them; reads and
writes, cached and uncached), each with opt1..opt4 and rs side by side in a seeded order
(``run_order``), and the mixed-phase workload (``runner.MIXED_PHASES``) with its per-phase
oracle. The fitting pass' runs are kept apart (``fit_results``) and never scored
(``held_out``). Scoring: ``score``. The study needs root (namespaces); nothing of it is left
behind. ``cli/cmd_study.py`` parses, calls ``run_study`` and prints.
"""

from __future__ import annotations

import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pvfs import schedulers
from pvfs.bench.scheduling import score
from pvfs.bench.scheduling.score import targets

__all__ = ["held_out", "reps_for", "run_order", "run_study", "study_on", "targets"]

ALGOS = schedulers.FIXED  # the fixed settings of every cell; rs runs beside them
#: rs told the cache size (thesis §5.6, figs. 5.7-5.11; ``--cache-reports``): the setting's
#: name and the report (``pvfs.models.rs.told``); plain rs goes by what the daemon measures.
TOLD = {"rs@right": "right", "rs@zero": "zero"}
#: The fitting pass' sizes (reads; both cache states; opt1..opt4 once each) ...
QUICK_FIT_SIZES = (64 << 10, 1 << 20)
FULL_FIT_SIZES = (64 << 10, 256 << 10, 1 << 20, 4 << 20)
#: ... and the scored cells' sizes: 512 KiB and 2 MiB are in no fit. Reads, then writes.
#: 16 MiB per task is 112 MiB per I/O daemon, twice the ide-2000 cache (56 MiB; the thesis
#: goes past 100 MB per daemon); too long for --quick on this machine.
QUICK_SIZES = (64 << 10, 512 << 10, 2 << 20)
QUICK_WRITE_SIZES = (64 << 10, 512 << 10)
FULL_SIZES = (64 << 10, 256 << 10, 512 << 10, 1 << 20, 2 << 20, 4 << 20, 16 << 20)
FULL_WRITE_SIZES = (64 << 10, 512 << 10, 2 << 20, 16 << 20)
#: ``--cache``: the cache columns run (uncached, cached), e.g. to rerun single cells.
CACHES = {"both": (False, True), "uncached": (False,), "cached": (True,)}
#: A cell whose first runs take less application time than this (median over the
#: settings) is *short*: it gets ``--reps-short`` runs. Its runs scatter by ±10–30 % on this
#: machine (scheduling noise weighs more in a 30–600 ms run), so deciding "within 5 %" there
#: needs many more runs than in the seconds-long cells.
SHORT_S = 1.0
#: The study's request timeout (the config's ``[timeouts] request``, 10 s by default): on
#: ide-2000 one request can queue behind all the others' data, 28 MiB at 2 MiB per task and
#: 112 MiB past the cache (27 s of disk at 4.2 MB/s), and on a loaded machine longer; the
#: default aborted a study (2026-11-28, 2 MiB single blocks at load 25). A study measures
#: scheduling, not failover: a timeout is left for a daemon that is really gone.
REQUEST_TIMEOUT_S = 300.0


def reps_for(first_app_s: list[float], reps: int, reps_short: int | None) -> int:
    """Runs for a cell from its first runs' application times (one per setting): decided
    by how long the cell takes, never by how the settings compare."""
    if reps_short is None or not first_app_s:
        return reps
    times = sorted(first_app_s)
    median = times[len(times) // 2] if len(times) % 2 else \
        (times[len(times) // 2 - 1] + times[len(times) // 2]) / 2
    return max(reps, reps_short) if median < SHORT_S else reps


def run_order(settings: tuple[str, ...], cell: str, run: int) -> list[str]:
    """The order of the settings in run ``run`` of a side-by-side ``cell``: shuffled, seeded
    by the cell and the run (the same study runs in the same order again). On a shared
    machine the load drifts; this way no setting gets the quiet minutes for all its runs,
    nor always follows the same other setting (the rotation used until 2026-11-27 ran rs
    right after opt4 in every run)."""
    return random.Random(f"{cell}/{run}").sample(settings, len(settings))



def machine() -> dict:
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                                check=False, cwd=Path(__file__).parent).stdout.strip()
    except OSError:
        commit = ""
    return {"hostname": platform.node(), "cpus": os.cpu_count(), "kernel": platform.release(),
            "python": platform.python_version(), "loadavg": list(os.getloadavg()),
            "git": commit}


def _mean_rows(rows: list[dict]) -> dict:
    """The runs of one cell and setting: the metrics averaged (the thesis' "average of three
    test runs") and their medians (what is scored), each run's kept under ``runs`` (its
    name, tasks' times and phases, and rs' decisions per phase), rs' decisions summed."""
    from statistics import median

    out = dict(rows[0])
    for k in ("app_service_s", "mean_task_service_s", "variance"):
        out[k] = sum(r[k] for r in rows) / len(rows)
    for k in ("app_service_s", "mean_task_service_s"):
        out[f"median_{k}"] = median(r[k] for r in rows)
    out["runs"] = [{k: r[k] for k in ("run_id", "app_service_s", "mean_task_service_s",
                                      "task_s", "phases", "rs_phases") if k in r}
                   for r in rows]
    for k in ("phases", "task_s", "run_id", "rs_phases"):
        out.pop(k, None)
    if "rs" in out:
        out["rs"] = _sum_deltas([r["rs"] for r in rows])
    return out


def _sum_deltas(deltas: list[dict]) -> dict:
    total: dict = {"picks": {}, "decisions": {}, "switches": 0, "deciding_s": 0.0}
    for d in deltas:
        for key in ("picks", "decisions"):
            for k, v in d[key].items():
                total[key][k] = total[key].get(k, 0) + v
        total["switches"] += d["switches"]
        total["deciding_s"] += d.get("deciding_s", 0.0)
    return total


def _rs_delta(before: list[dict], after: list[dict]) -> dict:
    """What rs decided during one cell, summed over the daemons: picks, the model column
    behind each pick, how often the engine switched and the time spent deciding."""
    out: dict = {"picks": {}, "decisions": {}, "switches": 0, "deciding_s": 0.0}
    for b, a in zip(before, after):
        for key in ("picks", "decisions"):
            for k, v in a.get(key, {}).items():
                d = v - b.get(key, {}).get(k, 0)
                if d:
                    out[key][k] = out[key].get(k, 0) + d
        out["switches"] += a.get("switches", 0) - b.get("switches", 0)
        out["deciding_s"] += a.get("deciding_s", 0.0) - b.get("deciding_s", 0.0)
    return out



def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def run_id(study: str, part: str, wl: str, size, cached, op: str, alg: str, i: int) -> str:
    """One run's name: the study, its part ("fit" or "score"), the cell, setting and run."""
    cache = "mixed" if cached is None else "cached" if cached else "uncached"
    return f"{study}/{part}/{wl}/{size}/{cache}/{op}/{alg}/{i}"


def held_out(fit_ids: list[str], scored_rows: list[dict]) -> None:
    """Raise unless no scored run is among the runs that fitted the model."""
    fit_set = set(fit_ids)
    both = [r["run_id"] for row in scored_rows for r in row.get("runs", [])
            if r.get("run_id") in fit_set]
    if both:
        raise ValueError(f"scored runs in the model's fit set: {both[:3]}")


class _Study:
    """One study's cells on one running cluster: runs, records, the model's fit."""

    def __init__(self, runner, iods: int, reps: int, reps_short: int | None,
                 reactive: tuple[str, ...], log: Callable[[str], None],
                 name: str = "study") -> None:
        self.r, self.iods, self.reps, self.reps_short = runner, iods, reps, reps_short
        self.reactive, self.log, self.name = reactive, log, name
        self.results: list[dict] = []        # the scored rows
        self.fit_rows: list[dict] = []       # the fitting pass' rows (never scored)
        self.fit_reps_short: int | None = None   # the fitting pass' runs of short cells
        self.checkpoint: Callable[[dict], None] | None = None
        # the model per cache report, when rs told the cache runs too (``TOLD``); the one
        # the daemons hold now
        self.models: dict = {}
        self.told_now = "measured"

    def one(self, wl, s, c, alg, seed, op: str = "read") -> dict:
        """One run; for rs with what it decided during the measured passes (a cached run's
        warm-up left out)."""
        from pvfs.bench.scheduling.runner import run_mixed

        r, deltas, snap = self.r, [], []
        report = TOLD.get(alg)
        if self.models and (report or "measured") != self.told_now:
            # before the run and its marks: the daemons get the model told this way
            self.told_now = report or "measured"
            self.set_model(self.models[self.told_now])
        run_alg = "rs" if report else alg

        def mark(what: str) -> None:
            now = [r.call(i, "sched_get")["rs"] for i in range(self.iods)]
            if what == "start":
                snap.append(now)
            else:
                deltas.append(_rs_delta(snap.pop(), now))

        # Every setting is marked, not only the reactive ones: the snapshot is a round trip
        # to each daemon just before the measured pass, a step that only rs' runs had (rs
        # ran 8 % ahead of fixed opt1 while running opt1, strided 64 KiB cached, 2026-11-26:
        # the settings must differ in the algorithm only).
        row = (run_mixed(r, run_alg, seed=seed, mark=mark) if wl == "mixed-phase"
               else r.run(wl, s, c, run_alg, seed=seed, mark=mark, operation=op)).row()
        row["algorithm"] = alg
        if alg in self.reactive:
            row["rs"] = _sum_deltas(deltas)
            if wl == "mixed-phase":        # what it decided in each phase (issue 31)
                row["rs_phases"] = deltas
        return row

    def record(self, rows: list[dict], into: list[dict] | None = None) -> None:
        row = _mean_rows(rows)
        (self.results if into is None else into).append(row)
        if self.checkpoint is not None:
            self.checkpoint({"results": self.results, "fit_results": self.fit_rows})
        wl, s, c, alg = (row[k] for k in ("workload", "request_bytes", "cached", "algorithm"))
        what = "mixed" if s is None else \
            f"{s >> 10:>6} KiB {'cached  ' if c else 'uncached'} {row['operation']}"
        self.log(f"{wl:>12} {what} {alg}: mean task {row['mean_task_service_s']:.3f} s, "
                 f"app {row['app_service_s']:.3f} s"
                 + (f" {row['rs']['decisions']} switches {row['rs']['switches']}"
                    if "rs" in row else ""))

    def side_by_side(self, wl, s, c, op: str = "read", part: str = "score",
                     settings: tuple[str, ...] | None = None) -> None:
        """Every setting on one cell, run i of each before run i+1 of any, in
        ``run_order``'s order (rs among the fixed algorithms, never after them). ``part``
        "fit": the fixed algorithms only, recorded as the fitting pass' rows (short cells:
        ``fit_reps_short`` runs, as the scored short cells get ``reps_short``)."""
        order = settings or (*ALGOS, *self.reactive)
        rows: dict[str, list[dict]] = {a: [] for a in order}
        reps = self.reps  # the fitting pass sets it to its ``fit_reps`` (fit_pass)
        n, i = reps, 0
        while i < n:
            for alg in run_order(order, f"{wl}/{s}/{c}/{op}" if op != "read"
                                 else f"{wl}/{s}/{c}", i):
                row = self.one(wl, s, c, alg, i, op)
                row["run_id"] = run_id(self.name, part, wl, s, c, op, alg, i)
                rows[alg].append(row)
            if i == 0:
                n = reps_for([rows[a][0]["app_service_s"] for a in order], reps,
                             self.reps_short if part == "score" else self.fit_reps_short)
            i += 1
        for alg in order:
            self.record(rows[alg], None if part == "score" else self.fit_rows)

    def set_model(self, params) -> None:
        for i in range(self.iods):
            self.r.call(i, "model_set", params=params.to_wire())

    def fit_ids(self) -> list[str]:
        return [r["run_id"] for row in self.fit_rows for r in row["runs"]]

    def fit_pass(self, cells, clients: int, fit_reps: int = 1,
                 writes: bool = False, spread: bool = False) -> tuple:
        """The fitting pass: opt1..opt4 on the ``cells`` (reads; then the same cells
        written, with ``writes``), ``fit_reps`` runs each side by side, the model fitted to
        each setting's median over them (``observations``) and nothing else (its write
        part, ``Params.write``, to the writes); they are never scored. ``spread``: the
        small-request rule weighs how much the runs agree (``fit_model``)."""
        reps, self.reps = self.reps, fit_reps
        try:
            for op in ("read", "write") if writes else ("read",):
                for wl, s, c in cells:
                    self.side_by_side(wl, s, c, op, "fit", ALGOS)
        finally:
            self.reps = reps
        cache = self.r.call(0, "sched_get")["disk"]["cache_bytes"]
        return fit_model(self.fit_rows, clients, self.iods, cache, writes, spread)


def fit_model(rows: list[dict], clients: int, iods: int, cache: float | None,
              writes: bool = True, spread: bool = False) -> tuple:
    """The model fitted on the fitting pass' ``rows`` (reads; and its write part on their
    writes, with ``writes``), and the residuals of those runs. ``spread``: the small-request
    rule takes each fitting cell's expected excess over its kept runs (``fit.fit``'s
    ``spread``), weighing how much they agree, in place of its medians' excess."""
    from pvfs.models import fit

    params, res = fit.fit(observations(rows), clients, iods, s_cache=cache, spread=spread)
    res = [{**r, "operation": "read"} for r in res]
    if writes:
        params, wres = fit.with_writes(params, observations(rows, "write"), clients, iods,
                                       s_cache=cache, spread=spread)
        res += [{**r, "operation": "write"} for r in wres]
    return params, res


def observations(rows: list[dict], operation: str = "read") -> list:
    """The model's observations: the fixed algorithms' reads, or writes for the model's
    write part (appendix A models reads; "we will not extend our model to simultaneous
    read and write traffic": each part is fitted on runs of one kind). Each setting's
    median mean task service time over its runs (one run: that run's): a run slowed by
    the machine's load moves a mean, not a median of three. Each keeps its runs' values
    (``Obs.runs``) for the spread fit."""
    from pvfs.models import fit

    return [fit.Obs(x["workload"], x["request_bytes"], x["cached"], x["algorithm"],
                    x.get("median_mean_task_service_s", x["mean_task_service_s"]),
                    tuple(r["mean_task_service_s"] for r in x.get("runs") or ()))
            for x in rows
            if x["algorithm"] in ALGOS and x.get("operation", "read") == operation
            and x["workload"] in fit.PIECES]


def residuals(params, rows: list[dict], clients: int, iods: int) -> list[dict]:
    """The model's residuals on ``rows``' reads, and its write part's on their writes, each
    row tagged with its ``operation``."""
    from pvfs.models import fit

    out = [{**r, "operation": "read"}
           for r in fit.residuals(params, observations(rows), clients, iods)]
    if params.write is not None:
        out += [{**r, "operation": "write"} for r in
                fit.residuals(params.write, observations(rows, "write"), clients, iods)]
    return out


@dataclass
class Plan:
    """What one study runs: the fitting pass' cells (none with a ``model``), the scored
    cells (workload, bytes per task, cached, operation), the mixed-phase workload or not."""

    fit_cells: list[tuple]
    cells: list[tuple]
    mixed: bool
    model: dict | None = None
    model_source: str | None = None
    fit_reps: int = 1
    fit_writes: bool = False      # the fitting pass writes its cells too (the write model)
    fit_spread: bool = True       # the small-request rule weighs the fitting runs' agreement
    fit_reps_short: int | None = None   # the fitting pass' runs of its short cells


def plan_cells(workloads: tuple[str, ...], sizes: tuple[int, ...],
               write_sizes: tuple[int, ...], caches: tuple[bool, ...]) -> list[tuple]:
    """The scored cells, reads then writes (each run side by side in turn)."""
    from pvfs.bench.scheduling.runner import WORKLOADS

    return [(wl, s, c, op) for op, ss in (("read", sizes), ("write", write_sizes))
            for wl in WORKLOADS if wl in workloads for s in ss for c in caches]


def study_on(runner, plan: Plan, clients: int, iods: int, reps: int,
             reps_short: int | None, reactive: tuple[str, ...],
             log: Callable[[str], None], name: str,
             checkpoint: Callable[[dict], None] | None = None) -> dict:
    """The study's runs on a running cluster (``runner``): the fitting pass (or the given
    model), then every scored cell side by side, then the mixed-phase workload and its
    oracle. The parts of the document that come from the runs. ``checkpoint``: called with
    the rows so far after every cell (a crash then loses one cell, not the study)."""
    from pvfs.models import rs as rs_model
    from pvfs.models.rs import Params

    st = _Study(runner, iods, reps, reps_short, reactive, log, name)
    st.checkpoint = checkpoint
    st.fit_reps_short = plan.fit_reps_short
    if plan.model is None:
        params, fit_res = st.fit_pass(plan.fit_cells, clients, plan.fit_reps,
                                      plan.fit_writes, plan.fit_spread)
        fit_on = {"source": "this study's fitting pass (opt1..opt4, reads"
                            f"{' and writes' if plan.fit_writes else ''}; not scored)",
                  "runs": st.fit_ids(), "cells": [list(c) for c in plan.fit_cells]}
    else:
        params, fit_res = Params.from_wire(plan.model), []
        fit_on = {"source": plan.model_source or "--model", "runs": [],
                  "note": "fitted to that document's runs; none of them is run here"}
    st.set_model(params)
    told = [TOLD[a] for a in reactive if a in TOLD]
    if told:
        disk = runner.call(0, "sched_get")["disk"]
        size = disk["cache_bytes"] if disk else None    # posix: the model's S_cache
        st.models = {"measured": params, **{t: rs_model.told(params, t, size) for t in told}}
    for cell in plan.cells:
        st.side_by_side(*cell)
    if plan.mixed:
        st.side_by_side("mixed-phase", None, None)
        by = {x["algorithm"]: x for x in st.results if x["workload"] == "mixed-phase"}
        row = score.oracle_row(by)
        if row is not None:
            st.results.append(row)
    held_out(fit_on["runs"], st.results)
    picks = [runner.call(i, "sched_get")["rs"]["picks"] for i in range(iods)]
    return {"results": st.results, "fit_results": st.fit_rows, "model_fit_on": fit_on,
            "model": params.to_wire(), "residuals_fit": fit_res,
            **({"models_told": {t: m.to_wire() for t, m in st.models.items()
                                if t != "measured"}} if st.models else {}),
            "residuals": residuals(params, st.results, clients, iods), "rs_picks": picks}


def _writer(path: str | None) -> Callable[[dict], None] | None:
    if path is None:
        return None
    import json

    def write(doc: dict) -> None:
        tmp = f"{path}.tmp"
        Path(tmp).write_text(json.dumps(doc) + "\n")
        os.replace(tmp, path)

    return write


def run_study(disk: str, clients: int, iods: int, rate: str | None, sizes: tuple[int, ...],
              reps: int, model: dict | None = None, log: Callable[[str], None] = _log,
              hints: bool = False, reps_short: int | None = None,
              workloads: tuple[str, ...] | None = None,
              caches: tuple[bool, ...] = (False, True), fit_sizes: tuple[int, ...] = (),
              write_sizes: tuple[int, ...] = (), model_source: str | None = None,
              checkpoint: str | None = None, fit_reps: int = 1,
              fit_spread: bool = True, fit_reps_short: int | None = None,
              cache_reports: tuple[str, ...] = ()) -> dict:
    """The study, held out. Without ``model``: a fitting pass (opt1..opt4 on the reads of
    ``fit_sizes``, both cache states, ``fit_reps`` runs each) fits the model on their
    medians; with one (an earlier
    study's or a calibration's), no fitting pass. Then every scored cell (reads of
    ``sizes``, writes of ``write_sizes``, the ``caches`` columns) with all five settings side
    by side, fresh runs the model never saw, and the mixed-phase workload with its oracle.
    ``reps_short``: runs of the short cells (``reps_for``), default ``reps``. ``workloads``:
    only these (default all, mixed-phase included). ``checkpoint``: a file the rows so far
    are written to after every cell. ``fit_spread``: the fit weighs how much the fitting
    runs agree (``fit_model``). ``fit_reps_short``: the fitting pass' runs of the cells
    whose first runs are short (``reps_for``), default ``fit_reps``. ``cache_reports``
    ("right", "zero"): rs also runs told the cache that way (``TOLD``), side by side."""
    from pvfs.bench.scheduling.runner import HINTED, WORKLOADS, Runner
    from pvfs.cluster.netns import Network

    hosts_s = [f"s{i}" for i in range(iods)]
    hosts_c = [f"c{k}" for k in range(clients)]
    started = time.time()
    load_before = list(os.getloadavg())
    chosen = workloads or (*WORKLOADS, "mixed-phase")
    plan = Plan([(wl, s, c) for wl in WORKLOADS for s in fit_sizes for c in (False, True)],
                plan_cells(chosen, sizes, write_sizes, caches), "mixed-phase" in chosen,
                model, model_source, fit_reps=fit_reps, fit_writes=bool(write_sizes),
                fit_spread=fit_spread, fit_reps_short=fit_reps_short)
    reactive = ("rs", HINTED) if hints else ("rs",)
    told = {v: k for k, v in TOLD.items()}
    reactive += tuple(told[t] for t in cache_reports)
    name = time.strftime("%Y%m%dT%H%M%S", time.gmtime(started))
    with Network([*hosts_s, *hosts_c], rate=rate) as net, \
            tempfile.TemporaryDirectory(prefix="pvfs-study-") as tmp:
        cfg = net.make_config(tmp, iods=hosts_s, request_timeout=REQUEST_TIMEOUT_S,
                              extra={"storage": {"default": f"emulated:{disk}"}})
        net.start_daemons(cfg)
        with Runner(cfg.path, clients, range(iods),
                    wrap=lambda k, argv: net.argv(hosts_c[k], argv)) as r:
            out = study_on(r, plan, clients, iods, reps, reps_short, reactive, log, name,
                           _writer(checkpoint))
    results = out["results"]
    return {"study": "scheduling", "disk": disk, "rate": rate, "clients": clients,
            "iods": iods, "sizes": list(sizes), "write_sizes": list(write_sizes),
            "fit_sizes": list(fit_sizes) if model is None else [],
            "fit_reps": fit_reps if model is None else 0,
            "fit_spread": fit_spread and model is None,
            "fit_reps_short": fit_reps_short if model is None else None, "reps": reps,
            "reps_short": reps_short, "short_s": SHORT_S, **out,
            "targets": targets(results),
            **({"targets_rs_hint": targets(results, HINTED)} if hints else {}),
            **({"cache_reports": list(cache_reports),
                "targets_told": {told[t]: targets(results, told[t]) for t in cache_reports}}
               if cache_reports else {}),
            "load_before": load_before, "load_after": list(os.getloadavg()),
            "elapsed_s": time.time() - started}


