"""Plots of ``pvfs-admin study caching`` (the paper's figs. 12-13 shape): time normalised to
cache-everything per trace and policy, and local/global hit rates."""

from __future__ import annotations

from typing import Any

from pvfs.bench.caching.setups import TRACES_NOTE

__all__ = ["plot_study", "plot_sweep"]


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
    of each bar (a sweep's result: :func:`plot_sweep`)."""
    if d.get("sweep"):
        plot_sweep(d, path)
        return
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


def _sweep_series(d: dict[str, Any]) -> tuple[int, int, list[str]]:
    """The segment size of panel (a) and the threshold of panel (b)
    (:func:`pvfs.bench.caching.sweep.panel_axes`), and the traces."""
    from pvfs.bench.caching.sweep import panel_axes

    return (*panel_axes(d["sweep"]), list(dict.fromkeys(r["trace"] for r in d["results"])))


def plot_sweep(d: dict[str, Any], path: str) -> None:
    """Fig. 9's two panels: (a) time ÷ cache everything over the threshold (4-block
    segments), one line per trace, with ``none`` dotted; (b) time ÷ the same threshold at
    4-block segments over the segment size."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    seg_a, th_b, traces = _sweep_series(d)
    rows = [r for r in d["results"] if r.get("threshold") is not None]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for t in traces:
        a = sorted((r["threshold"], r) for r in rows
                   if r["trace"] == t and r["segment_blocks"] == seg_a)
        if a:
            xs = [x for x, _ in a]
            med = [r["time_norm"] for _, r in a]
            err = [[m - (r.get("time_norm_lo") or m) for m, (_, r) in zip(med, a)],
                   [(r.get("time_norm_hi") or m) - m for m, (_, r) in zip(med, a)]]
            line = ax1.errorbar(xs, med, yerr=err, marker="o", capsize=2, label=t)
            none = next((r for r in d["results"] if r["trace"] == t and r["policy"] == "none"),
                        None)
            if none is not None and none.get("time_norm"):
                ax1.axhline(none["time_norm"], color=line[0].get_color(), ls=":", lw=0.8)
        b = sorted((r["segment_blocks"], r) for r in rows
                   if r["trace"] == t and r["threshold"] == th_b and r.get("time_seg4"))
        if b:  # ÷ 4 blocks by the time_norm medians (files before 2026-11-30: the times')
            ys = [r.get("time_seg4_norm") or r["time_seg4"] for _, r in b]
            err = [[y - (r.get("time_seg4_lo") or y) for y, (_, r) in zip(ys, b)],
                   [(r.get("time_seg4_hi") or y) - y for y, (_, r) in zip(ys, b)]]
            ax2.errorbar([x for x, _ in b], ys, yerr=err, marker="o", capsize=2, label=t)
    ax1.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax1.set_xlabel("threshold")
    ax1.set_ylabel("time ÷ cache everything")
    ax1.set_title(f"(a) threshold, {seg_a}-block segments (dotted: none)", fontsize=9)
    ax1.legend(fontsize=8)
    ax2.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax2.set_xscale("log", base=2)
    ax2.set_xlabel("segment size (blocks)")
    ax2.set_ylabel("time ÷ 4-block segments")
    ax2.set_title(f"(b) segment size, threshold {th_b}", fontsize=9)
    ax2.legend(fontsize=8)
    model = " (model at the paper's latencies)" if d.get("setup", {}).get("model") else ""
    fig.suptitle(f"fig. 9 sensitivity{model}; traces {d.get('traces', TRACES_NOTE)}",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
