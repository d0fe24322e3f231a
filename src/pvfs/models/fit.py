"""Fitting the reactive-scheduling model to measured runs (thesis app. B; SPEC §3).

Input: runs of the thesis' workloads (``Obs``: workload, bytes per task, cached or not,
algorithm, mean task service time) on ``niods`` I/O daemons with ``nprocs`` tasks. Every
quantity is converted to what one I/O daemon sees while the tasks' requests are in service,
the model's unit (table 5.1): ``S_req`` = nprocs x bytes per request / niods; for the random
workloads a task makes ``nblocks`` requests one after the other, so the model's time is the
task's time / nblocks and the data in service is one block per task, spread over the file
(``S_req / R_req`` = 1 / nblocks).

Steps, as appendix B:

* B.1 baseline from single-block runs under opt2: uncached ``T = T_over + S/B_dr`` (least
  squares), cached ``T = T_over + S/B_drc`` (slope with T_over fixed). ``S_cache`` is where
  cached runs stop looking cached (calibration's bisection, ``cli/cmd_calibrate.py``), or
  the known cache size; ``C_cache`` from ``S_nocache`` (B.3-B.4) when measured, else the thesis'.
* B.2 ``C_req`` (``P_req`` = 1) from strided runs under opt2, ``C_dist`` and ``P_dist`` from
  the random 16/32 block runs under opt2, each solving eq. 5.4/5.5 for the observed
  inefficiency ``(T - T_over) / (S / B)``.
* B.3 ``E_opt``: per algorithm, workload class and cache state, its I/O time over opt2's at
  the largest size measured (the thesis "matched end cases"); and the selector's ~0 rule
  (§5.6): the threshold ``zero_s`` and the algorithms used below it -- one per class and
  cache column (``small_algs``), as table 5.3 has one factor per column -- that cost the
  least over all runs (the sum of each run's excess over its cell's best; opt1, the thesis'
  choice, on ties); ``small_alg``, the one algorithm best over all small runs, stands for
  columns no small run measured. Then each column's own threshold (``zero_cols``), chosen
  the same way over the runs seen in it: classes turn "large" at different sizes.
* Beyond appendix B (issue 31), the column's bands (``bands``, ``_size_bands``): where the fit
  measured a column at some sizes, the selector follows what those runs measured rather than
  one factor per column: near a fitted size (within ``BAND`` of its baseline I/O time) the
  algorithm best there; between two fitted sizes whose best algorithms differ, where the
  runs cannot say on which side of the gap the crossover lies, the algorithm whose larger
  excess at the two is least (minimax regret); past the largest, the table.
* Beyond appendix B (issue 31), past the largest fitted size E_opt follows the slope the
  end case's workload showed between its two largest sizes (``Params.slopes``, ``ends``;
  ``_end_case_factors``), up to ``rs.EXTRAPOLATE`` times the end case's baseline I/O time.
* Writes: the same steps on write runs (``fit`` on them) give the model of write requests,
  ``Params.write`` (``with_writes``).
* Beyond appendix B (issue 31), the spread fit (``fit(spread=True)``, `study scheduling
  --fit-spread`): the small-request rule weighs how much each cell's fitting runs agree,
  taking every algorithm's expected excess over bootstrap resamples of the runs
  (``expected_excess``) in place of its medians' excess: a lead smaller than the runs'
  scatter is not taken for best.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import pairwise
from statistics import median

from . import rs

CLASS_OF = {"single-block": "ideal", "strided": "disjoint", "random16": "sparse",
            "random32": "sparse"}
PIECES = {"single-block": 1, "strided": 16, "random16": 16, "random32": 32}


@dataclass(frozen=True)
class Obs:
    workload: str
    request_bytes: int
    cached: bool
    algorithm: str
    mean_task_service_s: float
    #: the fitting runs behind ``mean_task_service_s`` (their median), when kept: the
    #: spread fit (``fit(spread=True)``) weighs how much they agree
    runs: tuple[float, ...] = ()


def workload_of(o: Obs, nprocs: int, niods: int) -> tuple[rs.Workload, float]:
    """The model's inputs for one run, and the observed time the model predicts (seconds
    per request)."""
    n = PIECES[o.workload]
    if o.workload.startswith("random"):
        s = nprocs * (o.request_bytes / n) / niods
        w = rs.Workload(S_req=s, N_req=nprocs, D_req=nprocs, R_req=s * n,
                        cached=1.0 if o.cached else 0.0)
        return w, o.mean_task_service_s / n
    s = nprocs * o.request_bytes / niods
    regions = max(1.0, n / niods) if n > 1 else 1.0
    w = rs.Workload(S_req=s, N_req=nprocs, D_req=nprocs * regions, R_req=s,
                    cached=1.0 if o.cached else 0.0)
    return w, o.mean_task_service_s


def _line(points: list[tuple[float, float]]) -> tuple[float, float]:
    """Least-squares intercept and slope; one point: through the origin."""
    if len(points) == 1:
        x, y = points[0]
        return 0.0, y / x
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    slope = sum((x - mx) * (y - my) for x, y in points) / sxx if sxx else my / mx
    return my - slope * mx, slope


def fit(obs: Iterable[Obs], nprocs: int, niods: int, s_cache: float | None = None,
        s_nocache: float | None = None,
        columns: Mapping[tuple[str, int, bool], Mapping[int, float]] | None = None,
        spread: bool = False) -> tuple[rs.Params, list[dict]]:
    """Parameters from the runs, and each run's residual (observed vs predicted).

    ``columns``: for a cell (workload, bytes per task, cached), the table 5.3 columns the I/O
    daemons saw its requests in, as fractions (from the reactive selector's decisions in
    earlier runs). The daemons measure residency, and read-ahead puts much of an "uncached"
    random-block cell into the cached column; the small-request rule is fitted by where
    the daemons will look, not by how the study prepared the cell. Cells not given: the
    column of their label.

    ``spread``: the small-request rule weighs how much each cell's fitting runs agree (its
    marks take every algorithm's *expected* excess over the cell's best, ``expected_excess``,
    in place of its medians' excess); cells without kept runs: their medians' excess."""
    obs = list(obs)
    pts = _points_by_run_kind(obs, nprocs, niods)
    base = _baseline(pts, s_cache, s_nocache)
    base = _inefficiency_constants(base, pts)
    base = _end_case_factors(base, obs, nprocs, niods)
    marks = _small_request_marks(base, obs, nprocs, niods, columns, spread)
    params = _small_request_rule(base, marks)
    params = replace(params, bands=_size_bands(params, marks))
    return params, residuals(params, obs, nprocs, niods)


def with_writes(reads: rs.Params, writes: Iterable[Obs], nprocs: int, niods: int,
                s_cache: float | None = None, spread: bool = False,
                ) -> tuple[rs.Params, list[dict]]:
    """``reads`` with the model of write requests fitted on the ``writes`` runs (the same
    appendix-B steps; ``B_dr``/``B_drc`` are then the write bandwidths), and those runs'
    residuals; no write runs (or not enough to fit): ``reads`` as it is."""
    writes = list(writes)
    try:
        w, res = fit(writes, nprocs, niods, s_cache=s_cache, spread=spread)
    except ValueError:
        return reads, []
    return replace(reads, write=w), res


#: A fitted size's band: baseline I/O times within this factor of the fit's (half an octave
#: of size either side). The daemon estimates a run's inputs a little differently from the
#: fit (the strided 64 KiB uncached reads of the 2026-11-28 quiet study: within 1 %, either
#: side of a threshold 0.8 % above the fit's value, half their decisions on each side).
BAND = math.sqrt(2.0)


def _minimax(a: Mapping[str, float], b: Mapping[str, float]) -> str:
    """The algorithm whose larger excess over ``a`` and ``b`` is least (ties: the smaller
    sum, then opt1, then the list's order): whichever side of the gap between the two runs
    the crossover lies on, it costs the least it can (minimax regret)."""
    return min(rs.ALGORITHMS, key=lambda x: (round(max(a.get(x, 1.0), b.get(x, 1.0)), 9),
                                            round(a.get(x, 1.0) + b.get(x, 1.0), 9),
                                            x != "opt1", rs.ALGORITHMS.index(x)))


def _rule_at(p: rs.Params, col: int, base: float) -> str:
    """What the table and the ~0 rule of ``p`` pick in column ``col`` at baseline I/O time
    ``base`` (``rs.select`` without bands or opt4's gather)."""
    zero = p.zero_cols[col] if p.zero_cols else p.zero_s
    if base < zero:
        return p.small_algs[col] if p.small_algs else p.small_alg
    return min(rs.ALGORITHMS, key=lambda a: (p.E_opt[a][col], rs.ALGORITHMS.index(a)))


def _size_bands(p: rs.Params, marks: list) -> tuple[tuple[tuple[float, str], ...], ...]:
    """Per column, the step function of the baseline I/O time around and between the sizes
    the fit measured there (the runs seen mostly in that column): within ``BAND`` of a fitted
    size, what ``p``'s rules pick *at* that size (an estimate a little off the fit's does not
    cross a threshold that lies near it); between two fitted sizes more than ``BAND``² apart
    whose picks differ, the minimax-regret algorithm of the two runs (``_minimax``); closer
    ones meet halfway (geometrically). Elsewhere (below the smallest, past the largest, a gap
    whose ends agree) ``rs.RULE``: the table and the ~0 rule. No run in a column: no bands."""
    cols = []
    for col in range(6):
        pts = sorted((m[0], m[1]) for m in marks if m[0] > 0 and m[3].get(col, 0.0) >= 0.5)
        steps: list[tuple[float, str]] = []
        if pts:
            steps.append((pts[0][0] / BAND, rs.RULE))
        for i, (io, ex) in enumerate(pts):
            pick = _rule_at(p, col, io)
            if i + 1 < len(pts):
                nio, nex = pts[i + 1]
                if nio / io <= BAND * BAND:
                    steps.append((math.sqrt(io * nio), pick))
                    continue
                steps.append((io * BAND, pick))
                npick = _rule_at(p, col, nio)
                steps.append((nio / BAND, rs.RULE if pick == npick else _minimax(ex, nex)))
            else:
                steps.append((io * BAND, pick))
        merged: list[tuple[float, str]] = []
        for bound, alg in steps:
            if merged and merged[-1][1] == alg:
                merged[-1] = (bound, alg)
            else:
                merged.append((bound, alg))
        cols.append(tuple(merged))
    return tuple(cols) if any(cols) else ()


_Points = Mapping[tuple[str, bool, str], list[tuple[rs.Workload, float]]]


def _points_by_run_kind(obs: list[Obs], nprocs: int, niods: int) -> _Points:
    """The model's inputs and observed time of each run, by (workload, cached, algorithm)."""
    pts: dict[tuple, list[tuple[rs.Workload, float]]] = defaultdict(list)
    for o in obs:
        pts[(o.workload, o.cached, o.algorithm)].append(workload_of(o, nprocs, niods))
    return pts


def _size_time(pts: _Points, key: tuple[str, bool, str]) -> list[tuple[float, float]]:
    return [(w.S_req, t) for w, t in pts.get(key, [])]


def _baseline(pts: _Points, s_cache: float | None, s_nocache: float | None) -> rs.Params:
    """B.1: ``T_over`` and ``B_dr`` from uncached single blocks under opt2, ``B_drc`` from
    cached ones (``T_over`` fixed), ``S_cache`` and ``C_cache`` from the measured sizes."""
    unc = _size_time(pts, ("single-block", False, "opt2"))
    if not unc:
        raise ValueError("need single-block runs under opt2, uncached")
    t_over, slope = _line(unc)
    t_over = max(0.0, t_over)
    if t_over == 0.0 or slope <= 0:
        slope = sum(y for _, y in unc) / sum(x for x, _ in unc)
    b_dr = 1.0 / slope
    # Cached runs beyond the cache were not served from it (the bisection makes some).
    cac = [(x, y) for x, y in _size_time(pts, ("single-block", True, "opt2"))
           if s_cache is None or x <= s_cache]
    b_drc = b_dr
    if cac:
        num = sum(x * (y - t_over) for x, y in cac)
        den = sum(x * x for x, _ in cac)
        b_drc = den / num if num > 0 else b_dr
    return rs.Params(T_over=t_over, B_dr=b_dr, B_drc=b_drc,
                     S_cache=s_cache if s_cache is not None else rs.Params().S_cache,
                     C_cache=min(1.0, max(1e-3, s_nocache / s_cache - 1))
                     if s_cache and s_nocache else rs.Params().C_cache)


def _inefficiency_constants(base: rs.Params, pts: _Points) -> rs.Params:
    """B.2: ``C_req`` (``P_req`` = 1) from strided runs, ``C_dist`` and ``P_dist`` from the
    random ones (uncached, opt2), each solving eq. 5.4/5.5 for the observed inefficiency;
    ``E_opt`` reset to table 5.3 for B.3 to refit."""
    t_over = base.T_over

    def inefficiency(w: rs.Workload, t: float) -> float | None:
        io = rs.t_ioread(base, w.S_req, w.cached)
        return (t - t_over) / io if io > 0 and t > t_over else None

    # B.2: C_req from strided (uncached) runs, P_req = 1.
    cs = []
    for w, t in pts.get(("strided", False, "opt2"), []):
        e, q = inefficiency(w, t), w.req_ratio
        if e and q < 1:
            cs.append((1 - 1 / e) / (1 - q))
    c_req = min(1.0, max(0.0, sum(cs) / len(cs))) if cs else base.C_req
    # C_dist, P_dist from the random runs (uncached): grid search on eq. 5.5.
    targets = [(w.dist_ratio, e) for key in (("random16", False, "opt2"),
                                             ("random32", False, "opt2"))
               for w, t in pts.get(key, []) if (e := inefficiency(w, t))]
    c_dist, p_dist = _dist_grid_search(targets) if targets else (base.C_dist, base.P_dist)
    return replace(base, C_req=c_req, P_req=1.0, C_dist=c_dist, P_dist=p_dist,
                   E_opt=dict(rs.TABLE_5_3))


def _dist_grid_search(targets: list[tuple[float, float]]) -> tuple[float, float]:
    """``C_dist`` in [0, 1] and ``P_dist`` in (0, 2], steps of 0.01, with the least squared
    error of eq. 5.5 over the (distance ratio, inefficiency) ``targets``."""
    best = None
    for ci in range(101):
        c = ci / 100
        for pi in range(1, 201):
            p = pi / 100
            err = sum((1 / ((1 - c) + c * r ** p) - e) ** 2 for r, e in targets)
            if best is None or err < best[0]:
                best = (err, c, p)
    _, c_dist, p_dist = best
    return c_dist, p_dist


def _end_case_factors(base: rs.Params, obs: list[Obs], nprocs: int = 0,
                      niods: int = 0) -> rs.Params:
    """B.3: E_opt, the I/O time of each algorithm over opt2's, per class and cache state, at
    the end case (the largest size measured), as the thesis matched them.

    Beyond appendix B (issue 31): with ``nprocs`` and ``niods``, the slope of each factor
    past the end case (``Params.slopes``, ``ends``): ln E_opt against ln of the baseline I/O
    time between the end case's workload at its two largest sizes. One factor per column
    held at the end case's value says an algorithm's advantage stops growing at the largest
    fitted size; ide-2000's runs say it does not (single block, cached, opt4 / opt2: 1.55 at
    64 KiB, 1.05 at 1 MiB, then 0.77 at 2 MiB)."""
    t_over = base.T_over
    table = {a: list(base.E_opt[a]) for a in rs.ALGORITHMS}
    ref = {(o.workload, o.cached, o.request_bytes): o for o in obs if o.algorithm == "opt2"}
    # (alg, col) -> workload -> per-piece size -> (ratios, baseline I/O time)
    seen: dict[tuple, dict[str, dict[float, tuple[list[float], float]]]] = {}
    for o in obs:
        r = ref.get((o.workload, o.cached, o.request_bytes))
        if r is None or o.algorithm == "opt2" or o.algorithm not in table:
            continue
        n = PIECES[o.workload] if o.workload.startswith("random") else 1
        a, b = o.mean_task_service_s / n - t_over, r.mean_task_service_s / n - t_over
        if a <= 0 or b <= 0:
            continue
        col = rs.CLASSES.index(CLASS_OF[o.workload]) + (3 if o.cached else 0)
        io = rs.baseline(base, workload_of(o, nprocs, niods)[0]) if nprocs and niods else 0.0
        by_size = seen.setdefault((o.algorithm, col), {}).setdefault(o.workload, {})
        by_size.setdefault(o.request_bytes / n, ([], io))[0].append(a / b)
    slopes = {a: [0.0] * 6 for a in rs.ALGORITHMS}
    ends = [0.0] * 6
    for (alg, col), by_wl in seen.items():
        size = max(max(sizes) for sizes in by_wl.values())
        vals = [v for sizes in by_wl.values() for v in sizes.get(size, ([], 0.0))[0]]
        table[alg][col] = _geomean(vals)
        ks = []
        for sizes in by_wl.values():
            if size not in sizes or len(sizes) < 2:
                continue
            prev = max(x for x in sizes if x < size)
            (r1, io1), (r0, io0) = sizes[size], sizes[prev]
            if io1 > io0 > 0:
                ks.append(math.log(_geomean(r1) / _geomean(r0)) / math.log(io1 / io0))
                ends[col] = max(ends[col], io1)
        if ks:
            slopes[alg][col] = sum(ks) / len(ks)
    out = replace(base, E_opt={a: tuple(v) for a, v in table.items()})
    if any(ends):
        out = replace(out, slopes={a: tuple(v) for a, v in slopes.items()}, ends=tuple(ends))
    return out


def _geomean(vals: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


# The selector's "~0" (§5.6): below which predicted I/O time the table's pick gives way to
# one fixed algorithm for small requests -- opt1 in the thesis; here the threshold and the
# algorithm that cost the least over all runs: the sum of each cell's excess over its
# best (a pick 60 % slower weighs more than one 6 % slower; ties: opt1, then the lower
# threshold). E_opt is one factor per class and cache state, so it cannot express opt4
# losing on small uncached blocks and winning on large ones; this rule can.

#: Bootstrap resamples of a fitting cell's runs for its expected excess (``spread``).
SPREAD_BOOT = 2000


def expected_excess(runs: Mapping[str, Sequence[float]], seed: str,
                    n: int = SPREAD_BOOT) -> dict[str, float]:
    """Every algorithm's expected excess over the cell's best: the mean, over ``n``
    bootstrap resamples (each algorithm's runs resampled on their own, seeded by ``seed``),
    of its resampled median over the least resampled median, less 1. Where the runs agree
    it is the medians' excess; where they overlap, an algorithm often behind carries that,
    and one ahead on the medians by less than the runs' scatter is not taken as best."""
    rng = random.Random(seed)
    algs = sorted(runs)
    tot = dict.fromkeys(algs, 0.0)
    for _ in range(n):
        med = {a: median(rng.choices(runs[a], k=len(runs[a]))) for a in algs}
        best = min(med.values())
        for a in algs:
            tot[a] += med[a] / best - 1 if best > 0 else 0.0
    return {a: v / n for a, v in tot.items()}


def _small_request_marks(base: rs.Params, obs: list[Obs], nprocs: int, niods: int,
                         columns: Mapping[tuple[str, int, bool], Mapping[int, float]] | None,
                         spread: bool = False,
                         ) -> list[tuple[float, dict[str, float], float, Mapping[int, float]]]:
    """One mark per cell (workload, cached, bytes per task) run under opt2 and another
    algorithm: opt2's predicted I/O time, each algorithm's excess over the cell's best, the
    excess of the table's pick, and the columns the daemons saw the cell's requests in.
    ``spread``: the excess is ``expected_excess`` of the cell's kept runs (every algorithm
    of the cell with at least one run kept; else the medians')."""
    cells: dict[tuple, dict[str, Obs]] = defaultdict(dict)
    for o in obs:
        cells[(o.workload, o.cached, o.request_bytes)][o.algorithm] = o
    marks = []
    table_only = replace(base, zero_s=0.0, zero_cols=())
    for by in cells.values():
        if "opt2" in by and len(by) >= 2:
            best = min(x.mean_task_service_s for x in by.values())
            w, _ = workload_of(by["opt2"], nprocs, niods)
            excess = {a: x.mean_task_service_s / best - 1 for a, x in by.items()} if best > 0 \
                else {a: 0.0 for a in by}
            if spread and all(x.runs for x in by.values()):
                o2 = by["opt2"]
                excess = expected_excess({a: x.runs for a, x in by.items()},
                                         f"{o2.workload}/{o2.request_bytes}/{o2.cached}")
            table_pick = rs.select(table_only, w)[0]
            o2 = by["opt2"]
            seen = (columns or {}).get((o2.workload, o2.request_bytes, o2.cached))
            if not seen:
                seen = {rs.CLASSES.index(w.kind()) + (3 if rs.is_cached(base, w) else 0): 1.0}
            marks.append((rs.io_time(base, "opt2", w), excess, excess.get(table_pick, 1.0),
                          seen))
    return marks


def _small_request_rule(base: rs.Params, marks: list) -> rs.Params:
    """``base`` with the ~0 rule that costs the least over ``marks``: the shared threshold
    and algorithms (``zero_s``, ``small_alg``, ``small_algs``), then each column's own
    threshold (``zero_cols``, empty when they all agree); no marks: ``base``'s rule."""
    zero_s, small_alg, small_algs = base.zero_s, base.small_alg, base.small_algs
    zero_cols = base.zero_cols
    if marks:
        # Thresholds halfway (geometrically) between neighbouring runs, not just above one:
        # the daemon's estimate of a run's I/O time differs a little from the fit's, and a
        # boundary right at a run would flip its pick on that difference.
        ts = sorted({m[0] for m in marks if m[0] > 0})
        cands = [0.0, *(math.sqrt(a * b) for a, b in pairwise(ts)),
                 *([ts[-1] * 2] if ts else [])]
        zero_s, small_alg, small_algs = min(
            (_small_rule(marks, c) for c in cands),
            key=lambda r: (round(_small_cost(marks, *r), 9), r[2].count("opt1") * -1, r[0]))
        zero_cols = ()
        if zero_s == 0.0:
            small_alg, small_algs = "opt1", ()
        else:
            # Then the threshold per column: a class turns "large" at its own size (on
            # ide-2000 opt4 wins single uncached blocks from 256 KiB on, strided uncached
            # ones from 1 MiB on; one threshold for both costs one of them). Each column's
            # pair costs at most what the shared threshold costs there.
            rules = [_column_rule(marks, cands, col, small_algs[col]) for col in range(6)]
            cols = tuple(zero_s if r is None else r[0] for r in rules)
            small_algs = tuple(a if r is None else r[1] for a, r in zip(small_algs, rules))
            zero_cols = cols if len(set(cols)) > 1 else ()
    return replace(base, zero_s=zero_s, small_alg=small_alg, small_algs=small_algs,
                   zero_cols=zero_cols)


def _pick(marks: list, default: str = "opt1", col: int | None = None) -> str:
    """The algorithm with the least summed excess over ``marks`` (each weighted by the share
    of its requests seen in column ``col``, or whole); ``default``, then opt1, and then the
    list's order break ties."""
    def cost(a: str) -> float:
        return sum((1.0 if col is None else m[3].get(col, 0.0)) * m[1].get(a, 1.0)
                   for m in marks)

    return min(rs.ALGORITHMS, key=lambda a: (round(cost(a), 9), a != default, a != "opt1",
                                             rs.ALGORITHMS.index(a)))


def _small_rule(marks: list, zero_s: float) -> tuple[float, str, tuple[str, ...]]:
    """Below ``zero_s``: the algorithm best over all small runs, and the best per column
    (that one where the column has no small run)."""
    small = [m for m in marks if m[0] < zero_s]
    overall = _pick(small)
    return zero_s, overall, tuple(
        _pick([m for m in small if m[3].get(col)], overall, col) for col in range(6))


def _column_rule(marks: list, cands: list[float], col: int,
                 default: str) -> tuple[float, str] | None:
    """The threshold and small-request algorithm for column ``col`` alone: the pair with
    the least summed excess of the runs' requests seen in that column (opt1, then the
    lower threshold, on ties); None when no run was seen there."""
    mine = [m for m in marks if m[3].get(col)]
    if not mine:
        return None

    def cost(z: float, alg: str) -> float:
        return sum(m[3][col] * (m[1].get(alg, 1.0) if m[0] < z else m[2]) for m in mine)

    pairs = [(z, _pick([m for m in mine if m[0] < z], default, col)) for z in cands]
    return min(pairs, key=lambda r: (round(cost(*r), 9), r[1] != "opt1", r[0]))


def _small_cost(marks: list, zero_s: float, _alg: str, algs: tuple[str, ...]) -> float:
    """The runs' summed excess over their cells' best under a small-request rule (a cell
    whose requests the daemons see in several columns: each column's pick for its share)."""
    return sum(sum(f * m[1].get(algs[c], 1.0) for c, f in m[3].items())
               if m[0] < zero_s else m[2] for m in marks)


def residuals(p: rs.Params, obs: Iterable[Obs], nprocs: int, niods: int) -> list[dict]:
    out = []
    for o in obs:
        if o.algorithm not in rs.ALGORITHMS:
            continue
        w, t = workload_of(o, nprocs, niods)
        pred = rs.predict(p, o.algorithm, w)
        out.append({"workload": o.workload, "request_bytes": o.request_bytes,
                    "cached": o.cached, "algorithm": o.algorithm, "observed_s": t,
                    "predicted_s": pred, "residual": (pred - t) / t if t > 0 else 0.0})
    return out
