"""The reactive-scheduling model and selector (thesis ch. 5, app. B; SPEC §3).

The model predicts a read task's service time under each scheduling algorithm; the selector
runs the algorithm with the smallest prediction, re-deciding on every new request.

Baseline (eq. 5.1-5.3, 5.6)::

    T_taskread = T_over + E_opt * E_req * E_dist * T_ioread

``T_ioread`` (eq. 5.2) is piecewise in the total size of the requests in service ``S_req``:
``S_req / B_drc`` up to the cache size ``S_cache``, ``S_req / B_dr`` from ``S_cache (1 +
C_cache)`` on, and in between a blend of the two bandwidths.

Readings of the printed typos (SPEC §3 -- the text is the authority; each is tested):

* eq. 5.2, middle case: printed as ``B_dr x + B_drc (1 - x)`` (a bandwidth, not a time). Read
  with ``x = (S_req - S_cache) / (C_cache S_cache)`` as ``T_ioread = S_req / (x B_dr + (1 - x)
  B_drc)``: at ``x = 0`` it meets the cached case, at ``x = 1`` the uncached one (continuous).
* eq. 5.4 ``E_req``: requests per disjoint region, ``N_req / D_req`` (1 when every request is
  contiguous), as printed.
* eq. 5.5 ``E_dist``: printed with ``N_req / D_req`` again; the text calls it "the ratio of
  requested data to requested data range", so ``S_req / R_req`` (1 when dense).
* Both validity conditions are printed ``0 >= C <= 1``; read ``0 <= C <= 1``.

Which column of table 5.3 applies: "cached" when ``S_req < S_cache`` (the thesis' rule), or --
beyond the thesis, which could not see the page cache (§5.5) -- when the daemon measured the
requested ranges' resident fraction ``f`` (cachestat(2), or the emulated disk's cache): then
"cached" when ``f >= 1/2`` and ``T_ioread = S_req f / B_drc + S_req (1 - f) / B_dr``. The row:
"disjoint" when requests have several regions (``D_req > N_req``), else "sparse" when the data
is spread (``S_req / R_req < 1/2``), else "ideal".

Estimation from the daemon's observations (eq. 5.7-5.10), with ``N_file`` the tasks holding
the file open::

    N_req = N_file;  S_req = S_req_o N_file / N_req_o;  D_req = D_req_o N_file / N_req_o
    R_req = max(R_req_o, S_req_o)

A client's hint of the collective operation (§5.8) replaces the estimate when present.
Selector (§5.5-5.6): the smallest predicted time wins; when the predicted I/O time is ~0
(below ``zero_s``; judged on the baseline, E_opt = 1) the thesis' own fix applies and
``small_alg`` runs (opt1 as in the thesis, unless the fit found another algorithm best for
small requests: the table of factors cannot say that an algorithm loses on small requests and
wins on large ones of the same class), or, when the fit found them, ``small_algs``: one per
class and cache column, as table 5.3's columns, below a threshold per column (``zero_cols``)
when the fit found those. Ties go to the earlier algorithm in the list.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace

from pvfs import schedulers

#: The fixed algorithms the selector chooses among (the engine's, pvfs.schedulers).
ALGORITHMS = schedulers.FIXED
CLASSES = ("ideal", "sparse", "disjoint")
# Table 5.3, columns uncached ideal/sparse/disjoint, then cached ideal/sparse/disjoint.
TABLE_5_3: dict[str, tuple[float, ...]] = {
    "opt1": (0.99, 0.97, 0.95, 1.05, 0.96, 0.90),
    "opt2": (1.00, 1.00, 1.00, 1.00, 1.00, 1.00),
    "opt3": (0.90, 0.95, 0.99, 0.86, 0.97, 1.02),
    "opt4": (0.71, 0.94, 1.05, 0.83, 0.99, 0.92),
}
MB = 1e6  # the thesis' "Mbytes/sec"
#: A band of ``Params.bands`` that leaves the pick to the table and the ~0 rule.
RULE = "-"
SPARSE_BELOW = 0.5       # S_req / R_req under this: a sparse workload
CACHED_FROM = 0.5        # resident fraction from this on: the cached column


#: Params fields that are not plain floats on the wire and in the config's table.
_NOT_FLOAT = ("E_opt", "small_alg", "small_algs", "zero_cols", "bands", "write", "slopes",
              "ends", "cache_measured")
#: How far past a column's end case (its largest fitted size, in baseline I/O time) the
#: slopes of ``Params.slopes`` extrapolate E_opt; beyond, E_opt stays at its value there
#: (two octaves of size: a trend measured over two sizes is not trusted further).
EXTRAPOLATE = 4.0


def _unit(name: str, v: float) -> None:
    if not 0.0 <= v <= 1.0:
        raise ValueError(f"{name} must be within [0, 1], got {v}")


@dataclass(frozen=True)
class Params:
    """The model's constants (table 5.1). Defaults: the thesis' fit (table 5.2) on its
    hardware, S_cache = 56 MB (its §5.6) -- a test vector, not values for this machine:
    ``pvfs-admin calibrate`` fits these."""

    T_over: float = 0.02          # s
    B_dr: float = 4.0 * MB        # bytes/s, cache not effective
    B_drc: float = 9.2 * MB       # bytes/s, cache effective
    S_cache: float = 56 * MB      # bytes
    C_cache: float = 0.65
    C_req: float = 0.13
    P_req: float = 1.0
    C_dist: float = 0.9
    P_dist: float = 0.10
    E_opt: Mapping[str, tuple[float, ...]] = field(default_factory=lambda: dict(TABLE_5_3))
    zero_s: float = 1e-3          # I/O parts below this are "~0" (the selector's fallback)
    small_alg: str = "opt1"       # what runs then: the thesis' opt1, or what the fit found
    # ... or per class and cache column (table 5.3's order); empty: small_alg everywhere
    small_algs: tuple[str, ...] = ()
    # the "~0" threshold per column too (a class may turn large at a different size than
    # another); empty: zero_s everywhere
    zero_cols: tuple[float, ...] = ()
    # per column (table 5.3's order): (upper bound of the baseline I/O time, algorithm), in
    # increasing bounds; past the last bound (or a column without any) the rules above
    bands: tuple[tuple[tuple[float, str], ...], ...] = ()
    # the model of write requests (same form, fitted on writes); None: writes not decided
    write: Params | None = None
    # E_opt past the end case (issue 31): per algorithm and column, the slope of ln E_opt
    # against ln(baseline I/O time) between the column's two largest fitted sizes, and per
    # column the end case's baseline I/O time (0: no slope there); empty: E_opt constant
    slopes: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    ends: tuple[float, ...] = ()
    # The cache state the I/O daemon's selector goes by (thesis §5.6, figs. 5.7-5.11): True,
    # the resident fraction it measures (cachestat(2), the emulated disk's cache); False, it
    # is told the cache size ``S_cache`` instead and ignores what it measures, as the
    # thesis' selector was (``told``)
    cache_measured: bool = True

    def __post_init__(self) -> None:
        for k in ("C_cache", "C_req", "C_dist"):
            _unit(k, getattr(self, k))
        if min(self.B_dr, self.B_drc) <= 0 or self.S_cache < 0 or self.T_over < 0:
            raise ValueError("bandwidths must be > 0, S_cache and T_over >= 0")
        if self.small_alg not in ALGORITHMS:
            raise ValueError(f"small_alg must be one of {', '.join(ALGORITHMS)}")
        if self.small_algs and (len(self.small_algs) != 6
                                or not set(self.small_algs) <= set(ALGORITHMS)):
            raise ValueError("small_algs must be 6 algorithm names (table 5.3's columns)")
        if self.zero_cols and (len(self.zero_cols) != 6 or min(self.zero_cols) < 0):
            raise ValueError("zero_cols must be 6 thresholds >= 0 (table 5.3's columns)")
        for alg in ALGORITHMS:
            row = self.E_opt.get(alg)
            if row is None or len(row) != 6 or min(row) <= 0:
                raise ValueError(f"E_opt[{alg}] must be 6 positive factors")
        if self.bands:
            if len(self.bands) != 6:
                raise ValueError("bands must be 6 lists (table 5.3's columns)")
            for col in self.bands:
                bounds = [b for b, _ in col]
                if bounds != sorted(bounds) or any(b <= 0 for b in bounds) \
                        or not {a for _, a in col} <= {*ALGORITHMS, RULE}:
                    raise ValueError("a column's bands: increasing bounds > 0, algorithm names")
        if self.ends and (len(self.ends) != 6 or min(self.ends) < 0):
            raise ValueError("ends must be 6 baseline I/O times >= 0 (table 5.3's columns)")
        for alg, row in self.slopes.items():
            if alg not in ALGORITHMS or len(row) != 6 or not all(map(math.isfinite, row)):
                raise ValueError(f"slopes[{alg}] must be 6 finite numbers")
        if self.slopes and not self.ends:
            raise ValueError("slopes need the end cases they start from (ends)")
        if self.write is not None and self.write.write is not None:
            raise ValueError("a write model has no write model of its own")
        if not isinstance(self.cache_measured, bool):
            raise ValueError("cache_measured must be true or false")  # noqa: TRY004 (a bad model: ValueError)

    def to_wire(self) -> dict:
        d = {k: v for k, v in asdict(self).items() if k not in ("bands", "write")}
        d["E_opt"] = {k: list(v) for k, v in self.E_opt.items()}
        d["slopes"] = {k: list(v) for k, v in self.slopes.items()}
        d["ends"] = list(self.ends)
        d["small_algs"] = list(self.small_algs)
        d["zero_cols"] = list(self.zero_cols)
        d["bands"] = [[[b, a] for b, a in col] for col in self.bands]
        d["write"] = None if self.write is None else self.write.to_wire()
        return d

    @classmethod
    def from_wire(cls, d: Mapping) -> Params:
        known = {f for f in cls.__dataclass_fields__}
        bad = set(d) - known
        if bad:
            raise ValueError(f"unknown model parameters: {', '.join(sorted(bad))}")
        kw = {k: (float(v) if k not in _NOT_FLOAT else v) for k, v in d.items()}
        if "small_alg" in kw:
            kw["small_alg"] = str(kw["small_alg"])
        if "small_algs" in kw:
            algs = kw["small_algs"]
            kw["small_algs"] = tuple(str(a) for a in (algs.split() if isinstance(algs, str)
                                                      else algs))
        if "zero_cols" in kw:
            zs = kw["zero_cols"]
            kw["zero_cols"] = tuple(float(z) for z in (zs.split() if isinstance(zs, str)
                                                       else zs))
        if "E_opt" in kw:
            kw["E_opt"] = {str(a): tuple(float(x) for x in row) for a, row in kw["E_opt"].items()}
        if "slopes" in kw:
            sl = kw["slopes"]
            kw["slopes"] = {str(a): tuple(float(x) for x in (row.split() if isinstance(row, str)
                                                             else row))
                            for a, row in (sl.items() if isinstance(sl, Mapping) else ())}
        if "ends" in kw:
            es = kw["ends"]
            kw["ends"] = tuple(float(e) for e in (es.split() if isinstance(es, str) else es))
        if "bands" in kw:
            kw["bands"] = _bands_of(kw["bands"])
        if kw.get("write") is not None:
            kw["write"] = cls.from_wire(kw["write"])
        if "cache_measured" in kw:
            v = kw["cache_measured"]
            if not isinstance(v, bool) and v not in (0, 1, "true", "false"):
                raise ValueError("cache_measured must be true or false")
            kw["cache_measured"] = v if isinstance(v, bool) else v in (1, "true")
        return cls(**kw)

    # The config's [model] table is flat (pvfs.config.dump): E_opt rows as strings.
    def to_table(self) -> dict:
        d: dict = {k: float(v) for k, v in asdict(self).items() if k not in _NOT_FLOAT}
        d["small_alg"] = self.small_alg
        if not self.cache_measured:
            d["cache_measured"] = False
        if self.small_algs:
            d["small_algs"] = " ".join(self.small_algs)
        if self.zero_cols:
            d["zero_cols"] = " ".join(repr(float(z)) for z in self.zero_cols)
        for alg, row in self.E_opt.items():
            d[f"E_{alg}"] = " ".join(f"{x:.4g}" for x in row)
        if self.ends:
            d["ends"] = " ".join(repr(float(e)) for e in self.ends)
            for alg, row in self.slopes.items():
                d[f"slope_{alg}"] = " ".join(repr(float(x)) for x in row)
        if self.bands:
            # "bound:alg bound:alg | ... " per column
            d["bands"] = " | ".join(" ".join(f"{b!r}:{a}" for b, a in col)
                                    for col in self.bands)
        if self.write is not None:
            d.update({f"{WRITE_PREFIX}{k}": v for k, v in self.write.to_table().items()})
        return d

    @classmethod
    def from_table(cls, t: Mapping) -> Params:
        own = {k: v for k, v in t.items() if not k.startswith(WRITE_PREFIX)}
        d = {k: v for k, v in own.items() if not k.startswith(("E_", "slope_"))}
        rows = {k[2:]: tuple(float(x) for x in str(v).split()) for k, v in own.items()
                if k.startswith("E_")}
        slopes = {k[len("slope_"):]: str(v) for k, v in own.items() if k.startswith("slope_")}
        if slopes:
            d["slopes"] = slopes
        if rows:
            d["E_opt"] = {**TABLE_5_3, **rows}
        written = {k[len(WRITE_PREFIX):]: v for k, v in t.items() if k.startswith(WRITE_PREFIX)}
        if written:
            d["write"] = cls.from_table(written).to_wire()
        return cls.from_wire(d)


#: The config's flat [model] table holds the write model's keys under this prefix.
WRITE_PREFIX = "write_"


def _bands_of(v) -> tuple[tuple[tuple[float, str], ...], ...]:
    """Bands from the wire (lists of [bound, alg] per column) or the table's string."""
    if isinstance(v, str):
        cols = [c.split() for c in v.split("|")] if v.strip() else []
        return tuple(tuple((float(b), a) for b, _, a in (x.partition(":") for x in col))
                     for col in cols)
    return tuple(tuple((float(b), str(a)) for b, a in col) for col in v)


@dataclass(frozen=True)
class Workload:
    """The model's system-state inputs (table 5.1) for the requests in service."""

    S_req: float          # total bytes requested
    N_req: float          # requests
    D_req: float          # disjoint regions
    R_req: float          # range of file positions
    cached: float | None = None   # resident fraction of the requested bytes, if known

    @property
    def req_ratio(self) -> float:
        """N_req / D_req: requests per disjoint region (eq. 5.4)."""
        return 1.0 if self.D_req <= 0 else min(1.0, self.N_req / self.D_req)

    @property
    def dist_ratio(self) -> float:
        """S_req / R_req: requested data over its range (eq. 5.5 as the text reads)."""
        return 1.0 if self.R_req <= 0 else min(1.0, self.S_req / self.R_req)

    def kind(self) -> str:
        if self.D_req > self.N_req:
            return "disjoint"
        if self.dist_ratio < SPARSE_BELOW:
            return "sparse"
        return "ideal"


def t_ioread(p: Params, s_req: float, cached: float | None = None) -> float:
    """Eq. 5.2 (middle case as SPEC §3 reads it), or the resident-fraction form."""
    if s_req <= 0:
        return 0.0
    if cached is not None:
        _unit("cached", cached)
        return s_req * cached / p.B_drc + s_req * (1.0 - cached) / p.B_dr
    if s_req <= p.S_cache:
        return s_req / p.B_drc
    if s_req >= p.S_cache * (1.0 + p.C_cache):
        return s_req / p.B_dr
    x = (s_req - p.S_cache) / (p.C_cache * p.S_cache)
    return s_req / (x * p.B_dr + (1.0 - x) * p.B_drc)


def e_req(p: Params, w: Workload) -> float:
    """Eq. 5.4: disjoint requests (1 when every request is one region)."""
    return 1.0 / ((1.0 - p.C_req) + p.C_req * w.req_ratio ** p.P_req)


def e_dist(p: Params, w: Workload) -> float:
    """Eq. 5.5 read as the text says: S_req / R_req (1 when the data is dense)."""
    return 1.0 / ((1.0 - p.C_dist) + p.C_dist * w.dist_ratio ** p.P_dist)


def is_cached(p: Params, w: Workload) -> bool:
    if w.cached is not None:
        return w.cached >= CACHED_FROM
    return w.S_req < p.S_cache


def factor(p: Params, alg: str, col: int, base: float) -> float:
    """Table 5.3's factor of ``alg`` in column ``col`` at baseline I/O time ``base``: the end
    case's ``E_opt``, and past the end case (``p.ends``) along the fitted slope, up to
    ``EXTRAPOLATE`` times the end case's baseline (constant beyond)."""
    f = p.E_opt[alg][col]
    end = p.ends[col] if p.ends else 0.0
    k = p.slopes.get(alg, ())
    if end > 0 and k and k[col] and base > end:
        f *= (min(base, end * EXTRAPOLATE) / end) ** k[col]
    return f


def baseline(p: Params, w: Workload) -> float:
    """The I/O time every algorithm's prediction scales (E_opt = 1): E_req E_dist T_ioread."""
    return e_req(p, w) * e_dist(p, w) * t_ioread(p, w.S_req, w.cached)


def e_opt(p: Params, alg: str, w: Workload) -> float:
    """Table 5.3: the algorithm's factor for this workload class and cache state (and size,
    past the end case, where the fit found slopes)."""
    col = CLASSES.index(w.kind()) + (3 if is_cached(p, w) else 0)
    return factor(p, alg, col, baseline(p, w))


def io_time(p: Params, alg: str, w: Workload) -> float:
    """The I/O part of eq. 5.6: E_opt E_req E_dist T_ioread."""
    return e_opt(p, alg, w) * baseline(p, w)


def predict(p: Params, alg: str, w: Workload) -> float:
    """Eq. 5.6: the predicted task service time (seconds) under ``alg``."""
    return p.T_over + io_time(p, alg, w)


def estimate(n_file: int, n_req_o: int, s_req_o: int, d_req_o: int, r_req_o: int,
             cached: float | None = None) -> Workload:
    """Eq. 5.7-5.10 from the observed requests in service; N_file <= 0 (unknown) counts the
    observed requests as all there are."""
    n = n_file if n_file > 0 else n_req_o
    scale = n / n_req_o if n_req_o > 0 else 0.0
    return Workload(S_req=s_req_o * scale, N_req=n, D_req=d_req_o * scale,
                    R_req=max(r_req_o, s_req_o), cached=cached)


def from_hint(hint: Mapping[str, int], cached: float | None = None) -> Workload:
    """A client's hint of the whole collective operation (§5.8)."""
    return Workload(S_req=hint["size"], N_req=hint["requests"], D_req=hint["regions"],
                    R_req=max(hint["range"], hint["size"]), cached=cached)


def select(p: Params, w: Workload, algorithms: Sequence[str] = ALGORITHMS,
           fixed: Mapping[str, float] | None = None,
           kind: str | None = None) -> tuple[str, dict]:
    """The algorithm with the smallest predicted time, and every prediction. When the I/O
    time is ~0 (below ``p.zero_s``) the thesis' fix applies (§5.6): "default to a more
    practical algorithm for this situation, such as Opt 1" -- ``p.small_alg``, opt1 unless
    the fit found another one better for small requests on this system, or the one the fit
    found for this class and cache column (``p.small_algs``).

    ``fixed`` adds a cost per operation the thesis' algorithms did not have: our opt4 holds
    the first request of a busy period ``gather`` seconds for the rest of its collective
    (csrc/sched.c), a wait that is nothing beside a slow disk's seconds and most of a fast
    one's operation (docs/scheduling.md).

    ``kind`` is the class (table 5.3's row) to use in place of ``w.kind()``: the I/O
    daemon holds an operation's class until its estimates clearly leave it (a hysteresis,
    ``daemons/iod/rs.py``). ``pick`` gives the same algorithm without the predictions a
    rule made unneeded."""
    col, base, rule = _rule(p, w, kind)
    preds = _predictions(p, col, base, algorithms, fixed)
    if rule is not None:
        return rule, preds
    return min(algorithms, key=lambda a: (preds[a], algorithms.index(a))), preds


def pick(p: Params, w: Workload, algorithms: Sequence[str] = ALGORITHMS,
         fixed: Mapping[str, float] | None = None,
         kind: str | None = None) -> tuple[str, int]:
    """``select``'s algorithm (always the same one) and the column of table 5.3 it was
    decided in (0-2 uncached, 3-5 cached), without computing the four predictions when a
    band or the "~0" rule decides: the I/O daemon decides on the trio thread that serves
    every request, and for small requests (the bands' and the rule's domain) the
    predictions were half of what the model cost it there (thirtieth session,
    docs/scheduling.md); ``ReactiveSelector.last`` computes them when asked."""
    col, base, rule = _rule(p, w, kind)
    if rule is not None:
        return rule, col
    preds = _predictions(p, col, base, algorithms, fixed)
    return min(algorithms, key=lambda a: (preds[a], algorithms.index(a))), col


def _rule(p: Params, w: Workload, kind: str | None) -> tuple[int, float, str | None]:
    """The column of table 5.3, the baseline I/O time, and the algorithm a band or the
    "~0" rule gives (None: the smallest prediction decides)."""
    base = baseline(p, w)
    col = CLASSES.index(kind or w.kind()) + (3 if is_cached(p, w) else 0)
    # The fitted sizes' bands, where the fit measured this column (up to just past its
    # largest size there): judged on the same baseline I/O time as the ~0 rule.
    for bound, alg in (p.bands[col] if p.bands else ()):
        if base < bound:
            if alg != RULE:
                return col, base, alg
            break
    # "~0" is judged on the baseline I/O time (E_opt = 1, opt2's): the factors of table 5.3
    # are all near 1, so when it is ~0 every algorithm's is.
    if base < (p.zero_cols[col] if p.zero_cols else p.zero_s):
        return col, base, (p.small_algs[col] if p.small_algs else p.small_alg)
    return col, base, None


def _predictions(p: Params, col: int, base: float, algorithms: Sequence[str],
                 fixed: Mapping[str, float] | None) -> dict[str, float]:
    """Eq. 5.6 for each algorithm with the parts every algorithm shares computed once:
    T_over + E_opt[alg][column] * base, plus ``fixed``'s cost per operation."""
    if p.ends:
        preds = {a: p.T_over + factor(p, a, col, base) * base for a in algorithms}
    else:
        preds = {a: p.T_over + p.E_opt[a][col] * base for a in algorithms}
    for a, cost in (fixed or {}).items():
        if a in preds:
            preds[a] += cost
    return preds


#: ``told``'s reports of the cache (figs. 5.7-5.11): what the daemon measures, the cache
#: size reported right (the I/O daemon's cache), or reported as 0.
REPORTS = ("measured", "right", "zero")


def told(p: Params, report: str, cache_bytes: float | None = None) -> Params:
    """``p`` (and its write part) with the selector told the cache as ``report`` says:
    "measured", as it is (the resident fraction the daemon measures); "right", the cache
    size ``cache_bytes`` (default ``p.S_cache``) and nothing measured, so "cached" is the
    thesis' S_req < S_cache; "zero", a cache of 0 bytes: every request uncached."""
    if report not in REPORTS:
        raise ValueError(f"report must be one of {', '.join(REPORTS)}")
    if report == "measured":
        return p

    def one(q: Params) -> Params:
        size = 0.0 if report == "zero" else float(q.S_cache if cache_bytes is None
                                                  else cache_bytes)
        return replace(q, S_cache=size, cache_measured=False)

    return replace(one(p), write=None if p.write is None else one(p.write))


def thesis_params(**overrides) -> Params:
    """Table 5.2 (and 56 MB of cache), optionally changed."""
    return replace(Params(), **overrides)
