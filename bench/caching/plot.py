"""Plots of ``pvfs-admin study caching`` (the paper's figs. 12-13 shape): time normalised to
cache-everything per trace and policy, and local/global hit rates."""

from __future__ import annotations

from typing import Any

__all__ = ["plot_study"]


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
        ax1.bar(xs, [(cell.get((t, pol)) or {}).get("time_norm") or 0 for t in traces], width,
                label=pol)
        ax2.bar(xs, [(cell.get((t, pol)) or {}).get("global_hit_rate") or 0 for t in traces],
                width, label=pol)
    ax1.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax1.set_ylabel("time ÷ cache everything")
    ax1.set_title("study caching: execution time (normalised) and global hit rate")
    ax1.legend(ncol=5, fontsize=8)
    ax2.set_ylabel("global cache hit rate")
    ax2.set_xticks(range(len(traces)), traces)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
