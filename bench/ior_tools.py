"""The pure parts of ``bench/ior.py``: the IO500-style steps and their sizes, mdtest's and
IOR's command lines, their output parsed, the interleaving order, medians with intervals and
the report (ratios to the best peer and to the FUSE ceiling).

Nothing here runs a program or touches a file system, so all of it is unit-tested
(``tests/unit/test_bench_ior.py``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from pvfs.bench.common import format_table, median, ratio

#: The steps of one repetition at one rank count, in the order they run. Each step runs on
#: every target (rotating order) before the next step starts.
STEPS = ("mdtest-easy", "mdtest-hard", "ior-easy", "ior-hard", "creates-1p")

#: The phases each step reports (``STEP-PHASE`` names a figure) and their unit.
PHASES: dict[str, tuple[str, ...]] = {
    "mdtest-easy": ("create", "stat", "remove"),
    "mdtest-hard": ("create", "stat", "read", "remove"),
    "ior-easy": ("write", "read"),
    "ior-hard": ("write", "read"),
    "creates-1p": ("create",),
}
UNITS = {"mdtest-easy": "ops/s", "mdtest-hard": "ops/s", "ior-easy": "MiB/s",
         "ior-hard": "MiB/s", "creates-1p": "ops/s"}

#: IO500's fixed shapes.
HARD_FILE_BYTES = 3901       # mdtest hard: bytes written and read per file
HARD_XFER = 47008            # IOR hard: transfer = block size, one shared file
EASY_XFER = 1 << 20          # IOR easy: 1 MiB transfers, a file per rank

PEERS = ("gluster", "moosefs")
SUBJECT = "pvfs"
CEILING = "ceiling"


@dataclass(frozen=True)
class Sizes:
    """How much each step does.

    Attributes:
        easy_files: mdtest easy: empty files per rank (each rank in its own directory).
        hard_files: mdtest hard: 3,901-byte files per rank (all in one directory).
        easy_mib: IOR easy: MiB per rank (its own file, 1 MiB transfers).
        hard_segments: IOR hard: 47,008-byte segments per rank (one shared file).
        creates: empty files one process creates in one directory.
    """

    easy_files: int
    hard_files: int
    easy_mib: int
    hard_segments: int
    creates: int = 2000

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


FULL = Sizes(easy_files=1000, hard_files=500, easy_mib=128, hard_segments=1000)
QUICK = Sizes(easy_files=200, hard_files=100, easy_mib=16, hard_segments=200)


#: The suffix of the figure an IOR phase's CPU cost is kept under: ``ior-easy-write-cpu``
#: holds, per repetition, the CPU seconds the whole machine spent per GiB the phase moved.
CPU = "cpu"


def ior_bytes(kind: str, sizes: Sizes, ranks: int) -> int:
    """Bytes one IOR operation of ``kind`` moves over all ``ranks``."""
    if kind == "easy":
        return sizes.easy_mib * EASY_XFER * ranks
    if kind == "hard":
        return sizes.hard_segments * HARD_XFER * ranks
    raise ValueError(f"IOR kind {kind!r}: want easy or hard")


# ----------------------------------------------------------------------------- command lines
def mpiexec_argv(mpiexec: str, ranks: int, argv: Sequence[str]) -> list[str]:
    """``mpiexec -n RANKS ARGV...`` (MPICH's hydra, every rank on this machine)."""
    if ranks < 1:
        raise ValueError(f"ranks must be >= 1, not {ranks}")
    return [mpiexec, "-n", str(ranks), *argv]


def mdtest_argv(mdtest: str, directory: str, kind: str, files: int) -> list[str]:
    """mdtest's arguments for IO500's ``easy`` or ``hard`` shape.

    ``easy``: ``-F -u -L`` empty files, a directory per rank; ``hard``: ``-F`` files of
    3,901 bytes written (``-w``) and read back (``-e``) in one shared directory. Both stat the
    neighbour rank's files (``-N 1``) and print rates and times (``-P``); ``-n`` is per rank.

    Raises:
        ValueError: ``kind`` is neither ``easy`` nor ``hard``, or ``files`` < 1.
    """
    if files < 1:
        raise ValueError(f"files must be >= 1, not {files}")
    common = [mdtest, "-n", str(files), "-F", "-P", "-N", "1", "-d", directory]
    if kind == "easy":
        return common + ["-u", "-L"]
    if kind == "hard":
        return common + ["-w", str(HARD_FILE_BYTES), "-e", str(HARD_FILE_BYTES)]
    raise ValueError(f"mdtest kind {kind!r}: want easy or hard")


def ior_argv(ior: str, path: str, kind: str, op: str, sizes: Sizes) -> list[str]:
    """IOR's arguments for one operation (``write`` or ``read``) of IO500's shapes.

    ``easy``: a file per rank (``-F``), 1 MiB transfers, ``sizes.easy_mib`` MiB per rank;
    ``hard``: one shared file, 47,008-byte transfers and blocks, ``sizes.hard_segments``
    segments per rank. Writes end with ``fsync`` (``-e``) and keep the files (``-k``) for the
    read, which removes them; reads read the neighbour rank's data (``-C -Q 1``).

    Raises:
        ValueError: unknown ``kind`` or ``op``.
    """
    if kind == "easy":
        shape = ["-F", "-t", "1m", "-b", f"{sizes.easy_mib}m"]
    elif kind == "hard":
        shape = ["-t", str(HARD_XFER), "-b", str(HARD_XFER), "-s", str(sizes.hard_segments)]
    else:
        raise ValueError(f"IOR kind {kind!r}: want easy or hard")
    if op == "write":
        what = ["-w", "-e", "-k"]
    elif op == "read":
        what = ["-r"]
    else:
        raise ValueError(f"IOR op {op!r}: want write or read")
    return [ior, "-a", "POSIX", *shape, *what, "-C", "-Q", "1", "-g", "-o", path]


# ----------------------------------------------------------------------------- output
_MDTEST_ROWS = {"File creation": "create", "File stat": "stat", "File read": "read",
                "File removal": "remove", "Directory creation": "dir-create",
                "Directory stat": "dir-stat", "Directory rename": "dir-rename",
                "Directory removal": "dir-remove", "Tree creation": "tree-create",
                "Tree removal": "tree-remove"}
_NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"


def parse_mdtest(text: str) -> dict[str, float]:
    """Mean rates (operations per second) from mdtest's ``SUMMARY rate`` table.

    Returns:
        ``{"create": ..., "stat": ..., "read": ..., "remove": ..., "tree-create": ...}`` for
        the rows present.

    Raises:
        ValueError: no ``SUMMARY rate`` table, or one without any row (mdtest failed).
    """
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith("SUMMARY rate")), None)
    if start is None:
        raise ValueError("no 'SUMMARY rate' table in mdtest's output")
    out: dict[str, float] = {}
    for ln in lines[start + 1:]:
        if not ln.strip() or ln.startswith(("SUMMARY", "--")):
            break
        m = re.match(rf"\s*(\S.*?)\s+({_NUMBER})\s+({_NUMBER})\s+({_NUMBER})\s+({_NUMBER})\s*$",
                     ln)
        if m and m.group(1) in _MDTEST_ROWS:
            out[_MDTEST_ROWS[m.group(1)]] = float(m.group(4))  # Mean
    if not out:
        raise ValueError("mdtest's 'SUMMARY rate' table has no rows")
    return out


def parse_ior(text: str) -> dict[str, float]:
    """Mean bandwidth (MiB/s) per operation from IOR's ``Summary of all tests`` table.

    Returns:
        ``{"write": MiB/s}``, ``{"read": MiB/s}`` or both.

    Raises:
        ValueError: no summary table, no ``Mean(MiB)`` column, or no operation row.
    """
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith("Summary of all tests")),
                 None)
    if start is None or start + 1 >= len(lines):
        raise ValueError("no 'Summary of all tests' table in IOR's output")
    header = lines[start + 1].split()
    if not header or header[0] != "Operation" or "Mean(MiB)" not in header:
        raise ValueError(f"unexpected IOR summary header: {lines[start + 1]!r}")
    col = header.index("Mean(MiB)")
    out: dict[str, float] = {}
    for ln in lines[start + 2:]:
        fields = ln.split()
        if not fields or fields[0] not in ("write", "read"):
            break
        out[fields[0]] = float(fields[col])
    if not out:
        raise ValueError("IOR's summary table has no write or read row")
    return out


# ----------------------------------------------------------------------------- the order
def rotation(targets: Sequence[str], k: int) -> list[str]:
    """``targets`` rotated left by ``k``: repetition ``k`` starts with target ``k mod n``."""
    if not targets:
        return []
    k %= len(targets)
    return list(targets[k:]) + list(targets[:k])


def steps_at(ranks: int, steps: Sequence[str] = STEPS) -> list[str]:
    """The steps run at a rank count (of ``steps``, in :data:`STEPS` order): every one,
    ``creates-1p`` (one process) at 1 only."""
    return [s for s in STEPS if s in steps and (s != "creates-1p" or ranks == 1)]


def schedule(targets: Sequence[str], ranks: Sequence[int], repeats: int,
             steps: Sequence[str] = STEPS) -> list[tuple[int, int, str, list[str]]]:
    """Every ``(repetition, ranks, step, targets in order)`` of a run, in running order.

    Per repetition the rank counts and steps run in the same order; each step runs on every
    target back to back, the targets rotated by the repetition's number, so over
    ``repeats`` ≤ ``len(targets)`` repetitions each target takes a different position.
    """
    out = []
    for rep in range(repeats):
        for n in ranks:
            for step in steps_at(n, steps):
                out.append((rep, n, step, rotation(targets, rep)))
    return out


# ----------------------------------------------------------------------------- statistics
def median_interval(values: Sequence[float | None],
                    level: float = 0.95) -> tuple[float | None, float | None, float]:
    """A distribution-free interval for the median: order statistics ``(x_(j), x_(n+1-j))``.

    The narrowest such interval whose coverage ``1 - 2·P(Binomial(n, ½) < j)`` is at least
    ``level``; when even ``(min, max)`` covers less (fewer than 6 values for 95 %), that range
    and its own coverage (75 % for 3 values) — stated, not stretched.

    Returns:
        ``(low, high, coverage)``; ``(None, None, 0.0)`` with no values.
    """
    xs = sorted(float(v) for v in values if v is not None and not math.isnan(float(v)))
    n = len(xs)
    if n == 0:
        return None, None, 0.0
    best_j, best_cov = 1, _coverage(n, 1)
    for j in range(2, n // 2 + 1):
        cov = _coverage(n, j)
        if cov < level:
            break
        best_j, best_cov = j, cov
    return xs[best_j - 1], xs[n - best_j], best_cov


def _coverage(n: int, j: int) -> float:
    """P(x_(j) ≤ median ≤ x_(n+1-j)) for ``n`` independent values of a continuous law."""
    tail = sum(math.comb(n, i) for i in range(j)) / 2 ** n
    return max(0.0, 1.0 - 2.0 * tail)


def geomean(values: Sequence[float | None]) -> float | None:
    """Geometric mean of the positive values; ``None`` when there are none."""
    xs = [v for v in values if v is not None and v > 0]
    if not xs:
        return None
    return math.exp(sum(math.log(v) for v in xs) / len(xs))


# ----------------------------------------------------------------------------- the report
def figure_names(ranks: Sequence[int], steps: Sequence[str] = STEPS) -> list[tuple[str, int]]:
    """Every ``(STEP-PHASE, ranks)`` figure a run of ``steps`` reports, in table order."""
    return [(f"{step}-{phase}", n) for n in ranks for step in steps_at(n, steps)
            for phase in PHASES[step]]


def key(figure: str, ranks: int) -> str:
    """The JSON key of a figure at a rank count, e.g. ``mdtest-easy-create@2``."""
    return f"{figure}@{ranks}"


def issue_target(best: float | None, ceiling: float | None) -> float | None:
    """The figure issues 29 and 30 ask of pvfs: 1.5× the best peer, or 0.9× the ceiling where
    1.5× the best peer is above the ceiling (run in the same run)."""
    if best is None:
        return None
    if ceiling is not None and 1.5 * best > ceiling:
        return 0.9 * ceiling
    return 1.5 * best


def _paired(mine: Sequence[float | None], theirs: Sequence[float | None]) -> list[float]:
    """Per-repetition ratios ``mine[i] / theirs[i]`` (the two ran minutes apart)."""
    return [r for r in (ratio(a, b) for a, b in zip(mine, theirs)) if r is not None]


def report_figure(runs: dict[str, list[float | None]], subject: str = SUBJECT,
                  peers: Sequence[str] = PEERS, ceiling: str = CEILING) -> dict[str, Any]:
    """Medians, intervals and ratios of one figure.

    Args:
        runs: target -> its value in every repetition (``None`` where it failed).

    Returns:
        ``median``/``interval`` per target, ``coverage`` of the intervals, ``best_peer`` (the
        peer with the highest median), ``ratio_vs_best`` (subject's median ÷ the best peer's)
        with ``ratio_vs_best_interval`` (from the per-repetition ratios), and the same against
        the ceiling when it ran.
    """
    med = {t: median(v) for t, v in runs.items()}
    iv = {t: median_interval(v) for t, v in runs.items()}
    peer_meds = {p: med[p] for p in peers if med.get(p) is not None}
    best = max(peer_meds, key=lambda p: peer_meds[p]) if peer_meds else None
    out: dict[str, Any] = {
        "median": med,
        "interval": {t: [lo, hi] for t, (lo, hi, _) in iv.items()},
        "coverage": {t: round(c, 4) for t, (_, _, c) in iv.items()},
        "best_peer": best,
    }
    for label, other in (("best", best), ("ceiling", ceiling if ceiling in runs else None)):
        r = ratio(med.get(subject), med.get(other)) if other else None
        pairs = _paired(runs.get(subject, []), runs[other]) if other else []
        lo, hi, cov = median_interval(pairs)
        out[f"ratio_vs_{label}"] = r
        out[f"ratio_vs_{label}_interval"] = [lo, hi] if pairs else None
        out[f"ratio_vs_{label}_coverage"] = round(cov, 4) if pairs else None
    out["target"] = issue_target(med.get(best) if best else None, med.get(ceiling))
    out["ratio_vs_target"] = ratio(med.get(subject), out["target"])
    return out


def build_report(runs: dict[str, dict[str, list[float | None]]], ranks: Sequence[int],
                 subject: str = SUBJECT, steps: Sequence[str] = STEPS) -> dict[str, Any]:
    """:func:`report_figure` for every figure; ``runs[target][key] = [value per rep]``."""
    report = {}
    for fig, n in figure_names(ranks, steps):
        k = key(fig, n)
        per_target = {t: r.get(k, []) for t, r in runs.items()}
        report[k] = {"figure": fig, "ranks": n, "unit": UNITS[_step_of(fig)],
                     **report_figure(per_target, subject)}
    return report


def _step_of(figure: str) -> str:
    for step in STEPS:
        if figure.startswith(step + "-"):
            return step
    raise ValueError(f"no step for figure {figure!r}")


def metadata_geomeans(report: dict[str, Any]) -> dict[str, float | None]:
    """Geometric mean over the mdtest and single-process create figures of the subject's
    ratio to the best peer and to the ceiling, per rank count and over all."""
    out: dict[str, float | None] = {}
    meta = [c for c in report.values() if c["unit"] == "ops/s"]
    for label in ("best", "ceiling"):
        out[f"vs_{label}"] = geomean([c[f"ratio_vs_{label}"] for c in meta])
        for n in sorted({c["ranks"] for c in meta}):
            out[f"vs_{label}@{n}"] = geomean([c[f"ratio_vs_{label}"] for c in meta
                                              if c["ranks"] == n])
    return out


def cpu_report(runs: dict[str, dict[str, list[float | None]]], ranks: Sequence[int],
               steps: Sequence[str] = STEPS) -> dict[str, dict[str, float | None]]:
    """Median CPU seconds per GiB of every IOR figure, per target (``key -> target ->
    median``; figures of the other steps have none)."""
    out: dict[str, dict[str, float | None]] = {}
    for fig, n in figure_names(ranks, steps):
        if UNITS[_step_of(fig)] != "MiB/s":
            continue
        k = key(f"{fig}-{CPU}", n)
        out[key(fig, n)] = {t: median(r.get(k, [])) for t, r in runs.items()}
    return out


# ----------------------------------------------------------------------------- tables
def _num(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:,.0f}" if v >= 100 else f"{v:,.1f}"


def _x(r: float | None) -> str:
    return "-" if r is None else f"{r:.2f}×"


def format_report(report: dict[str, Any], targets: Sequence[str]) -> str:
    """The report as a plain text table: medians per target, ratios of pvfs."""
    rows = []
    for k, c in report.items():
        rows.append([k, c["unit"]] + [_num(c["median"].get(t)) for t in targets]
                    + [c["best_peer"] or "-", _x(c["ratio_vs_best"]),
                       _x(c["ratio_vs_ceiling"])])
    return format_table(["figure@ranks", "unit", *targets, "best peer", "pvfs/best",
                         "pvfs/ceiling"], rows)


def format_cpu(cpu: dict[str, dict[str, float | None]], targets: Sequence[str]) -> str:
    """:func:`cpu_report` as a plain text table."""
    rows = [[k] + ["-" if per.get(t) is None else f"{per[t]:.2f}" for t in targets]
            for k, per in cpu.items()]
    return format_table(["CPU s/GiB", *targets], rows)


_LABELS = {"mdtest-easy": "mdtest easy", "mdtest-hard": "mdtest hard",
           "ior-easy": "IOR easy", "ior-hard": "IOR hard",
           "creates-1p": "2,000 creates, one process"}
_PEER_NAMES = {"gluster": "GlusterFS", "moosefs": "MooseFS"}


def markdown_table(report: dict[str, Any]) -> str:
    """The report as the Markdown table of ``docs/benchmarks.md``: phase, ranks, pvfs, best
    peer, ratio (with its interval), ceiling, pvfs ÷ ceiling."""
    lines = [("| phase | ranks | unit | pvfs | best peer | pvfs ÷ best peer (interval) "
              "| ceiling | pvfs ÷ ceiling | target | pvfs ÷ target |"),
             "|---|---|---|---|---|---|---|---|---|---|"]
    for c in report.values():
        step = _step_of(c["figure"])
        phase = c["figure"][len(step) + 1:]
        best = c["best_peer"]
        peer = f"{_PEER_NAMES.get(best, best)} {_num(c['median'][best])}" if best else "-"
        iv = c.get("ratio_vs_best_interval")
        ivs = f" ({iv[0]:.2f}–{iv[1]:.2f})" if iv and iv[0] is not None else ""
        lines.append(f"| {_LABELS.get(step, step)}: {phase} | {c['ranks']} | {c['unit']} "
                     f"| {_num(c['median'].get(SUBJECT))} | {peer} "
                     f"| {_x(c['ratio_vs_best'])}{ivs} | {_num(c['median'].get(CEILING))} "
                     f"| {_x(c['ratio_vs_ceiling'])} | {_num(c.get('target'))} "
                     f"| {_x(c.get('ratio_vs_target'))} |")
    return "\n".join(lines)
