"""Figures of ``pvfs-admin study scheduling`` (like the thesis' figs. 4.2-4.17 and 6.1).

``<disk>-uncached.png`` and ``<disk>-cached.png`` (reads), ``<disk>-write-uncached.png`` and
``<disk>-write-cached.png`` (writes): one row per workload, the three metrics (application
service time, mean task service time, variance; medians over the runs) against bytes per task,
one line per algorithm. ``<disk>-rs.png``: rs against opt1 and the best fixed algorithm in
mean task service time (fig. 6.1), and the mixed-phase workload's mean task service time
beside its per-phase oracle. ``<disk>-model.png``: the model's predictions against the
held-out runs' times (cf. figs. 5.1-5.6).
"""

from __future__ import annotations

from pathlib import Path

from pvfs import schedulers
from pvfs.bench.scheduling.runner import HINTED, WORKLOADS

METRICS = (("app_service_s", "application service time (s)"),
           ("mean_task_service_s", "mean task service time (s)"),
           ("variance", "task service time variance (s²)"))
ALGS = (*schedulers.ALGORITHMS, HINTED)


def _val(r: dict, key: str) -> float | None:
    """The median over the runs when the row has it (what the study scores), else the
    row's value."""
    return r.get(f"median_{key}", r.get(key))


def plot_study(doc: dict, out_dir: str) -> list[str]:
    """The figures of one study document: per operation and cache state, the four
    workloads' metrics against the bytes per task (cf. figs. 4.1-4.16), and rs against
    opt1 and the best fixed algorithm with the mixed-phase workload (cf. fig. 6.1)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = [r for r in doc["results"] if r["workload"] != "mixed-phase"]
    paths = []
    for op in ("read", "write"):
        mine = [r for r in rows if r.get("operation", "read") == op]
        for cached in (False, True) if mine else ():
            paths.append(_grid(plt, doc, mine, op, cached, out))
    paths.append(_summary(plt, doc, [r for r in rows if r.get("operation", "read") == "read"],
                          out))
    model = plot_model(doc, out_dir)
    return paths + ([model] if model else [])


def _grid(plt, doc: dict, rows: list[dict], op: str, cached: bool, out: Path) -> str:
    disk = doc["disk"]
    fig, axes = plt.subplots(len(WORKLOADS), 3, figsize=(13, 3 * len(WORKLOADS)),
                             squeeze=False)
    for i, wl in enumerate(WORKLOADS):
        for j, (key, label) in enumerate(METRICS):
            ax = axes[i][j]
            for alg in ALGS:
                pts = sorted((r["request_bytes"], _val(r, key)) for r in rows
                             if r["workload"] == wl and r["cached"] == cached
                             and r["algorithm"] == alg)
                if pts:
                    ax.plot([p[0] / 1024 for p in pts], [p[1] for p in pts], marker="o",
                            label=alg, linestyle="-" if alg.startswith("opt") else "--")
            ax.set_xscale("log")
            ax.set_xlabel("KiB per task")
            ax.set_title(f"{wl}: {label}", fontsize=9)
            ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.suptitle(f"{'cached' if cached else 'uncached'} {op}s, disk {disk}, "
                 f"{doc['clients']} clients, {doc['iods']} I/O daemons, "
                 f"links {doc['rate'] or 'unshaped'}")
    fig.tight_layout()
    tag = "" if op == "read" else "write-"
    p = out / f"{disk}-{tag}{'cached' if cached else 'uncached'}.png"
    fig.savefig(p, dpi=80)
    plt.close(fig)
    return str(p)


def _summary(plt, doc: dict, rows: list[dict], out: Path) -> str:
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(13, 4))
    labels, opt1, best, rsv = [], [], [], []
    for wl in WORKLOADS:
        for size in sorted({r["request_bytes"] for r in rows}):
            by = {r["algorithm"]: _val(r, "mean_task_service_s") for r in rows
                  if r["workload"] == wl and r["request_bytes"] == size and not r["cached"]}
            if "rs" in by and "opt1" in by:
                labels.append(f"{wl} {size >> 10}K")
                opt1.append(by["opt1"])
                best.append(min(v for a, v in by.items() if a.startswith("opt")))
                rsv.append(by["rs"])
    x = range(len(labels))
    a1.bar([i - 0.27 for i in x], opt1, 0.27, label="opt1 (PVFS)")
    a1.bar(list(x), best, 0.27, label="best fixed")
    a1.bar([i + 0.27 for i in x], rsv, 0.27, label="rs")
    a1.set_xticks(list(x), labels, fontsize=7, rotation=60, ha="right")  # 16+ cells
    a1.set_ylabel("mean task service time (s)")
    a1.set_title("uncached reads: rs vs PVFS's opt1 (cf. fig. 6.1)")
    a1.legend(fontsize=8)
    mixed = {r["algorithm"]: _val(r, "mean_task_service_s") for r in doc["results"]
             if r["workload"] == "mixed-phase"}
    a2.bar(list(mixed), list(mixed.values()),
           color=["C0" if a.startswith("opt") else "C1" if a == "oracle" else "C2"
                  for a in mixed])
    a2.set_ylabel("mean task service time (s)")
    a2.set_title("mixed-phase workload (oracle: per-phase best)")
    fig.tight_layout()
    p = out / f"{doc['disk']}-rs.png"
    fig.savefig(p, dpi=80)
    plt.close(fig)
    return str(p)


def plot_model(doc: dict, out_dir: str) -> str | None:
    """The model against the observed times (cf. thesis figs. 5.1-5.6): for each workload and
    cache state, every fixed algorithm's observed time per request (markers) and the
    model's prediction (lines) against bytes per task, on the *scored* runs, which the model
    was not fitted to (``doc["residuals"]``); None without them."""
    res = [r for r in doc.get("residuals") or [] if r.get("operation", "read") == "read"]
    if not res:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(WORKLOADS), figsize=(16, 7), squeeze=False)
    for i, cached in enumerate((False, True)):
        for j, wl in enumerate(WORKLOADS):
            ax = axes[i][j]
            for k, alg in enumerate(schedulers.FIXED):
                pts = sorted((r["request_bytes"], r["observed_s"], r["predicted_s"])
                             for r in res if r["workload"] == wl and r["cached"] == cached
                             and r["algorithm"] == alg)
                if not pts:
                    continue
                xs = [p[0] / 1024 for p in pts]
                ax.plot(xs, [p[1] for p in pts], "o", color=f"C{k}", label=f"{alg} observed")
                ax.plot(xs, [p[2] for p in pts], "-", color=f"C{k}", label=f"{alg} model")
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("KiB per task")
            ax.set_ylabel("s per request")
            ax.set_title(f"{wl}, {'cached' if cached else 'uncached'}", fontsize=9)
            ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7, ncol=2)
    fig.suptitle(f"model (lines) vs observed (points), held-out runs; disk {doc['disk']}; "
                 f"model fitted on: {(doc.get('model_fit_on') or {}).get('source', '?')}",
                 fontsize=10)
    fig.tight_layout()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    p = out / f"{doc['disk']}-model.png"
    fig.savefig(p, dpi=80)
    plt.close(fig)
    return str(p)
