"""PNG plots of replay results (``pvfs-admin replay ... --plot FILE``).

Two layouts, chosen from the phases of the results:

- *sweep* (the thesis' workloads, phases labelled ``workload:op:size``): one column per
  operation (read, write) and one row per metric — application service time, mean task
  service time, task service time variance — against the data per I/O node, log-log, one
  curve per workload and run, as in the thesis' figures 4.2–4.17;
- *bars* (anything else): the three metrics per phase, one bar per run.

Several results (e.g. the same trace on pvfs and on a local directory, or under two
schedulers) are drawn in one figure to compare them.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

METRICS = (
    ("app_service_time", "application service time (s)"),
    ("mean_task_service_time", "mean task service time (s)"),
    ("task_service_time_variance", "task service time variance (s²)"),
)
_SWEEP = re.compile(r"^(?P<wl>[\w.-]+):(?P<op>read|write):(?P<size>\d+)$")


def run_label(result: dict[str, Any]) -> str:
    """A short name for a run: its label if it has one, else workload @ target."""
    return str(result.get("label") or f"{result['workload']} @ {result['target']}")


def sweep_points(result: dict[str, Any]) -> dict[tuple[str, str], list[tuple[int, dict]]]:
    """``{(workload, op): [(size, phase), ...]}`` for the sweep-labelled phases of a result."""
    out: dict[tuple[str, str], list[tuple[int, dict]]] = {}
    for ph in result.get("phases", []):
        m = _SWEEP.match(ph["label"])
        if m:
            out.setdefault((m["wl"], m["op"]), []).append((int(m["size"]), ph))
    for pts in out.values():
        pts.sort(key=lambda p: p[0])
    return out


def plot_results(results: Sequence[dict[str, Any]], path: str, title: str | None = None) -> str:
    """Draw ``results`` into the PNG ``path``; returns the layout used (sweep or bars).

    Raises:
        ValueError: when there is nothing to plot.
    """
    if not results:
        raise ValueError("no results to plot")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sweeps = [sweep_points(r) for r in results]
    if any(sweeps):
        _sweep_figure(plt, results, sweeps, title)
        layout = "sweep"
    else:
        _bar_figure(plt, results, title)
        layout = "bars"
    plt.savefig(path, dpi=110)
    plt.close("all")
    return layout


def _sweep_figure(plt: Any, results: Sequence[dict[str, Any]],
                  sweeps: Sequence[dict[tuple[str, str], list[tuple[int, dict]]]],
                  title: str | None) -> None:
    ops = [op for op in ("read", "write") if any(op == k[1] for s in sweeps for k in s)]
    fig, axes = plt.subplots(len(METRICS), len(ops), figsize=(6 * len(ops), 10), squeeze=False)
    workloads = sorted({wl for s in sweeps for wl, _ in s})
    colors = {wl: f"C{i % 10}" for i, wl in enumerate(workloads)}  # colour: workload
    styles = ["-", "--", ":", "-."]  # line style: run
    for col, op in enumerate(ops):
        for row, (metric, ylabel) in enumerate(METRICS):
            ax = axes[row][col]
            for i, (res, sweep) in enumerate(zip(results, sweeps, strict=True)):
                for (wl, o), pts in sorted(sweep.items()):
                    if o != op:
                        continue
                    xs = [size for size, _ in pts]
                    ys = [max(ph[metric], 1e-12) for _, ph in pts]
                    ax.plot(xs, ys, marker="o", markersize=3, color=colors[wl],
                            linestyle=styles[i % len(styles)])
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.grid(True, which="both", alpha=0.3)
            if row == 0:
                ax.set_title(f"{op}s")
            if row == len(METRICS) - 1:
                ax.set_xlabel("data per I/O node (bytes)")
            ax.set_ylabel(ylabel)
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=colors[wl], marker="o", markersize=3, label=wl)
               for wl in workloads]
    if len(results) > 1:
        handles += [Line2D([], [], color="black", linestyle=styles[i % len(styles)],
                           label=run_label(res)) for i, res in enumerate(results)]
    fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 6), fontsize=8)
    first = results[0]
    fig.suptitle(title or f"{first['workload']}: {first['procs']} tasks on {first['target']}")
    fig.tight_layout(rect=(0, 0.04, 1, 1))


def _bar_figure(plt: Any, results: Sequence[dict[str, Any]], title: str | None) -> None:
    labels: list[str] = []
    for res in results:
        for ph in res.get("phases") or []:
            if ph["label"] not in labels:
                labels.append(ph["label"])
    use_phases = len(labels) > 1
    groups = labels if use_phases else ["whole run"]
    fig, axes = plt.subplots(len(METRICS), 1, figsize=(max(6, 0.6 * len(groups) * len(results)),
                                                       9), squeeze=False)
    width = 0.8 / len(results)
    for row, (metric, ylabel) in enumerate(METRICS):
        ax = axes[row][0]
        for i, res in enumerate(results):
            if use_phases:
                by_label = {ph["label"]: ph[metric] for ph in res.get("phases") or []}
                ys = [by_label.get(g, 0.0) for g in groups]
            else:
                ys = [res[metric]]
            xs = [j + i * width for j in range(len(groups))]
            ax.bar(xs, ys, width=width, label=run_label(res))
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(groups))])
        ax.set_xticklabels(groups, rotation=45 if use_phases else 0, ha="right", fontsize=7)
        ax.set_ylabel(ylabel)
        if row == 0:
            ax.legend(fontsize=8)
    first = results[0]
    fig.suptitle(title or f"{first['workload']}: {first['procs']} tasks")
    fig.tight_layout()
