"""Plots of ``pvfs-admin study caching`` (the paper's figs. 12-13 shape): time normalised to
cache-everything per trace and policy, and local/global hit rates."""

from __future__ import annotations

from typing import Any

from pvfs.bench.caching.setups import TRACES_NOTE

__all__ = ["plot_study"]


def _medians(cell: dict, traces: list[str], pol: str) -> tuple[list[float], list[list[float]]]:
    """``time_norm`` per trace (0 where absent) and its interval as error bar lengths."""
    med, lo, hi = [], [], []
    for t in traces:
        r = cell.get((t, pol)) or {}
        m = r.get("time_norm") or 0.0
        med.append(m)
        lo.append(max(0.0, m - (r.get("time_norm_lo") if r.get("time_norm_lo") is not None
                                else m)))
        hi.append(max(0.0, (r.get("time_norm_hi") if r.get("time_norm_hi") is not None
                            else m) - m))
    return med, [lo, hi]


def plot_study(d: dict[str, Any], path: str) -> None:
    """Two panels: ``time_norm`` bars per trace (one bar per policy), and the global hit rate
    of each bar."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = d["results"]
    traces = list(dict.fromkeys(r["trace"] for r in rows))
    policies = list(dict.fromkeys(r["policy"] for r in rows))
    cell = {(r["trace"], r["policy"]): r for r in rows}
    width = 0.8 / max(1, len(policies))
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
    for j, pol in enumerate(policies):
        xs = [i + (j - len(policies) / 2) * width + width / 2 for i in range(len(traces))]
        med, err = _medians(cell, traces, pol)
        ax1.bar(xs, med, width, yerr=err, capsize=2, label=pol)
        ax2.bar(xs, [(cell.get((t, pol)) or {}).get("global_hit_rate") or 0 for t in traces],
                width, label=pol)
    ax1.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax1.set_ylabel("time ÷ cache everything")
    ax1.set_title("study caching: time ÷ cache everything (median of the runs, bars: "
                  "interval of the median)\n" + "traces " + d.get("traces", TRACES_NOTE),
                  fontsize=9)
    ax1.legend(ncol=5, fontsize=8)
    ax2.set_ylabel("global cache hit rate")
    ax2.set_xticks(range(len(traces)), traces)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
