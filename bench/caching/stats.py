"""The one statistic of the caching study and the latency micro-benchmark: the median of the
runs with a distribution-free (order-statistic) interval.

For ``n`` runs sorted ``x(1) <= ... <= x(n)``, the interval ``[x(k), x(n+1-k)]`` covers the
true median with probability ``1 - 2 P(B <= k - 1)``, ``B ~ Binomial(n, 1/2)``, whatever the
runs' distribution (they need only be independent and identically distributed). The
interval taken is the narrowest such pair whose coverage is at least ``level`` (95 %); with
fewer than 6 runs no pair reaches 95 % and the interval is the whole range ``[x(1), x(n)]``,
whose coverage (``1 - 2^(1-n)``: 75 % at 3 runs, 94 % at 5) is returned beside it so a reader
sees how much it says. One run: an interval of one point, coverage 0.

Order statistics rather than a bootstrap because with the 3-7 runs a study affords the
bootstrap percentile interval of a median is also ``[x(1), x(n)]`` or close to it, but
without an honest coverage to state.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

__all__ = ["MIN_RUNS_95", "coverage", "median_interval", "ratio_interval"]

#: The fewest runs whose order-statistic interval of the median reaches 95 % (the range).
MIN_RUNS_95 = 6


def coverage(n: int, k: int) -> float:
    """Probability that ``[x(k), x(n+1-k)]`` of ``n`` runs covers the median (1-based ``k``)."""
    if n < 1 or not 1 <= k <= (n + 1) // 2:
        raise ValueError(f"no interval [x({k}), x({n + 1 - k})] of {n} runs")
    below = sum(math.comb(n, i) for i in range(k)) / 2 ** n
    return max(0.0, 1.0 - 2.0 * below)


def median_interval(xs: Sequence[float], level: float = 0.95
                    ) -> tuple[float, float, float, float]:
    """``(median, lo, hi, coverage)`` of ``xs`` (see the module's docstring)."""
    if not xs:
        raise ValueError("no runs")
    s = sorted(xs)
    n = len(s)
    k = 1
    while k + 1 <= (n + 1) // 2 and coverage(n, k + 1) >= level:
        k += 1
    return statistics.median(s), s[k - 1], s[n - k], coverage(n, k)


def ratio_interval(xs: Sequence[float], base: Sequence[float], level: float = 0.95
                   ) -> tuple[float, float, float, float]:
    """:func:`median_interval` of the paired ratios ``xs[i] / base[i]`` (round ``i`` of an
    interleaved study ran both, so a slow minute of the machine falls on both of a pair)."""
    if len(xs) != len(base):
        raise ValueError(f"{len(xs)} runs against {len(base)} of the baseline")
    return median_interval([x / b for x, b in zip(xs, base)], level)
