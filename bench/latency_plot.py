"""The plots of ``pvfs-admin bench latency`` (bench/latency.py): fig. 2's required global hit
rate, figs. 3-4's micro-benchmark bars with their intervals."""

from __future__ import annotations

from typing import Any

from pvfs.bench.latency import MICRO_SETUPS

__all__ = ["plot", "plot_micro", "plot_required_hr"]


def plot_required_hr(d: dict[str, Any], path: str) -> None:
    """Fig. 2: required global hit rate over request size, per I/O daemon count."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    xs = [s >> 10 for s in d["sizes"]]
    for row in d["read_ms"]:
        ax.plot(xs, [min(row[s]["required_hr"], 2.0) if isinstance(row[s], dict)
                     else min(row[str(s)]["required_hr"], 2.0) for s in d["sizes"]],
                marker="o", label=f"{row['iods']} iod(s)")
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax.set_xscale("log", base=2)
    ax.set_xticks(xs, [f"{x}K" for x in xs])
    ax.set_xlabel("request size")
    ax.set_ylabel("required global hit rate")
    ax.set_title("fig. 2: global cache hit rate needed to beat no caching")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_micro(d: dict[str, Any], path: str) -> None:
    """Figs. 3-4: the micro-benchmark's seconds per setup, one group per (nodes, iods, o)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    setups = MICRO_SETUPS
    rows = d["micro"]
    fig, ax = plt.subplots(figsize=(8, 4))
    width = 0.8 / len(setups)
    for j, setup in enumerate(setups):
        xs = [i + (j - 1.5) * width for i in range(len(rows))]
        med = [r[setup] for r in rows]
        err = [[max(0.0, r[setup] - r.get(f"{setup}_lo", r[setup])) for r in rows],
               [max(0.0, r.get(f"{setup}_hi", r[setup]) - r[setup]) for r in rows]]
        ax.bar(xs, med, width, yerr=err, capsize=2, label=setup)
        for x, r in zip(xs, rows):  # every run, so the spread shows
            ax.plot([x] * len(r.get(f"{setup}_runs", [])), r.get(f"{setup}_runs", []),
                    "k.", ms=2)
    ax.set_xticks(range(len(rows)),
                  [f"{r['nodes']}n/{r['iods']}iod\no={r['o']}" for r in rows])
    ax.set_ylabel(f"seconds for {rows[0]['ops']} operations")
    cache = d.get("iod_cache") or "the preset's"
    if d.get("model"):
        what = ("model at the paper's table 1-2 latencies (1 I/O daemon: |IOD| = 1 rows, "
                "3: |IOD| = 3)\ndeterministic, one run")
    else:
        what = (f"{d.get('storage', 'posix')}, I/O daemon cache {cache}\nmedian of "
                f"{d.get('micro_repeat')} runs, bars: interval of the median, dots: every run")
    ax.set_title(f"figs. 3-4: micro-benchmark, s = 2 ({what})", fontsize=9)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot(d: dict[str, Any], path: str) -> None:
    """Fig. 2 when the tables ran, else figs. 3-4."""
    (plot_required_hr if d.get("read_ms") else plot_micro)(d, path)
