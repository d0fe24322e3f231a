"""Figures of ``pvfs-admin study scheduling`` (like the thesis' figs. 4.2-4.17 and 6.1).

``<disk>-uncached.png`` and ``<disk>-cached.png`` (reads), ``<disk>-write-uncached.png`` and
``<disk>-write-cached.png`` (writes): one row per workload, the three metrics (application
service time, mean task service time, variance; medians over the runs) against bytes per task,
one line per algorithm. ``<disk>-rs.png``: rs against opt1 and the best fixed algorithm in
mean task service time (fig. 6.1), and the mixed-phase workload's mean task service time
beside its per-phase oracle. ``<disk>-model.png``: the model's predictions against the
held-out runs' times (cf. figs. 5.1-5.6). ``<disk>-fig5-baseline-<op>.png`` and
``<disk>-fig5-model-<op>.png``: figs. 5.1-5.4 (opt2 against the baseline model) and 5.5-5.6
(the fixed algorithms against the complete model), fitted-on and held-out runs apart
(``plot_chapter5``). ``<disk>-fig5-told-<cache>.png``: figs. 5.7-5.11, rs told the cache size
(``plot_told``, with ``--cache-reports``).
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
    ch5 = plot_chapter5(doc, out_dir) if doc.get("model") else []
    told = plot_told(doc, out_dir) if doc.get("cache_reports") else []
    return paths + ([model] if model else []) + ch5 + told


def plot_told(doc: dict, out_dir: str) -> list[str]:
    """Figs. 5.7-5.11 of the thesis from a study run with ``--cache-reports``:
    ``<disk>-fig5-told-<cached|uncached>.png``, per cell (workload, bytes per task) of reads,
    rs told the cache right, rs told 0 and rs as measured, each as its median mean task
    service time over the best fixed algorithm's (1 = as good as the best), with the 95 %
    intervals of ``score.score_cell``. Cached: figs. 5.7-5.8 (right) and 5.10-5.11 (0);
    uncached: fig. 5.9 (0)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from pvfs.bench.scheduling import score

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    settings = ["rs", *(f"rs@{r}" for r in doc["cache_reports"])]
    cells: dict = {}
    for r in doc["results"]:
        if r["workload"] != "mixed-phase" and r.get("operation", "read") == "read":
            cells.setdefault((r["cached"], r["workload"], r["request_bytes"]), {})[
                r["algorithm"]] = r
    paths = []
    for cached in (False, True):
        keys = sorted((k for k in cells if k[0] == cached),
                      key=lambda k: (k[2], WORKLOADS.index(k[1])))
        if not keys:
            continue
        fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(keys)), 4))
        width = 0.8 / len(settings)
        for j, st in enumerate(settings):
            xs, ys, lo, hi = [], [], [], []
            for i, k in enumerate(keys):
                by = cells[k]
                if st not in by:
                    continue
                sc = score.score_cell(by, st, f"{k[1]}/{k[2]}/{k[0]}/read/{st}")
                xs.append(i + (j - (len(settings) - 1) / 2) * width)
                ys.append(1 + sc["rs_over_best"])
                lo.append(sc["rs_over_best"] - sc["ci95"][0])
                hi.append(sc["ci95"][1] - sc["rs_over_best"])
            ax.bar(xs, ys, width, yerr=[lo, hi], capsize=2,
                   label={"rs": "rs (cache measured)", "rs@right": "rs, cache reported right",
                          "rs@zero": "rs, cache reported 0"}.get(st, st))
        ax.axhline(1.0, color="k", lw=0.8)
        ax.axhline(1.05, color="k", lw=0.5, ls=":")
        ax.set_xticks(range(len(keys)), [f"{k[1]} {k[2] >> 10}K" for k in keys], fontsize=7,
                      rotation=30, ha="right")
        ax.set_ylabel("mean task service time / best fixed")
        ax.set_title(f"{'cached' if cached else 'uncached'} reads: rs told the cache "
                     f"(cf. figs. {'5.7-5.8, 5.10-5.11' if cached else '5.9'})", fontsize=9)
        ax.legend(fontsize=7)
        fig.tight_layout()
        p = out / f"{doc['disk']}-fig5-told-{'cached' if cached else 'uncached'}.png"
        fig.savefig(p, dpi=80)
        plt.close(fig)
        paths.append(str(p))
    return paths


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


def _med_ci(vals: list[float], seed: str) -> tuple[float, float, float]:
    """The median of ``vals`` and its 95 % bootstrap interval (the study's resampling)."""
    from statistics import median

    from pvfs.bench.scheduling import score

    ci = score.bootstrap({"x": vals}, lambda m: m["x"], seed) or [median(vals)] * 2
    return median(vals), ci[0], ci[1]


def chapter5_curves(doc: dict, params=None) -> list[dict]:
    """The data of figs. 5.1-5.6 from one study document: per operation, workload, cache
    state and fixed algorithm, each measured size's median mean task service time with its
    95 % interval, from the fitting pass (``"fit"``: what the model saw) and the scored runs
    (``"scored"``: held out), and the model's prediction there (``params``: the document's
    model unless given), with the baseline's (E_opt = 1, figs. 5.1-5.4)."""
    from pvfs.bench.scheduling import score
    from pvfs.models import fit, rs

    p = params or rs.Params.from_wire(doc["model"])
    out = []
    for part, rows in (("fit", doc.get("fit_results") or []), ("scored", doc["results"])):
        for r in rows:
            if r["algorithm"] not in schedulers.FIXED or r["workload"] not in fit.PIECES:
                continue
            op = r.get("operation", "read")
            m = p.write if op == "write" and p.write is not None else p
            if op == "write" and p.write is None:
                continue
            o = fit.Obs(r["workload"], r["request_bytes"], r["cached"], r["algorithm"], 0.0)
            w, _ = fit.workload_of(o, doc["clients"], doc["iods"])
            n = fit.PIECES[r["workload"]] if r["workload"].startswith("random") else 1
            med, lo, hi = _med_ci(score.run_values(r), "/".join(
                map(str, (part, op, r["workload"], r["request_bytes"], r["cached"],
                          r["algorithm"]))))
            out.append({"part": part, "operation": op, "workload": r["workload"],
                        "request_bytes": r["request_bytes"], "cached": r["cached"],
                        "algorithm": r["algorithm"], "median_s": med, "ci95": [lo, hi],
                        "runs": len(score.run_values(r)),
                        "model_s": rs.predict(m, r["algorithm"], w) * n,
                        "baseline_s": (m.T_over + rs.baseline(m, w)) * n})
    return out


def _model_line(doc: dict, m, wl: str, cached: bool, alg: str | None) -> tuple[list, list]:
    """The model's mean task service time over a range of bytes per task (``alg`` None: the
    baseline, E_opt = 1)."""
    from pvfs.models import fit, rs

    sizes = [int(32768 * 2 ** (k / 4)) for k in range(4 * 8 + 1)]   # 32 KiB .. 8 MiB
    n = fit.PIECES[wl] if wl.startswith("random") else 1
    ys = []
    for s in sizes:
        w, _ = fit.workload_of(fit.Obs(wl, s, cached, "opt2", 0.0), doc["clients"],
                               doc["iods"])
        ys.append(((m.T_over + rs.baseline(m, w)) if alg is None else rs.predict(m, alg, w))
                  * n)
    return [s / 1024 for s in sizes], ys


def plot_chapter5(doc: dict, out_dir: str, params=None) -> list[str]:
    """Figs. 5.1-5.6 of the thesis from one study: ``<disk>-fig5-baseline-<op>.png`` (opt2
    against the baseline model, E_opt = 1; uncached above as figs. 5.1-5.2, cached below as
    figs. 5.3-5.4) and ``<disk>-fig5-model-<op>.png`` (every fixed algorithm against the
    complete model, figs. 5.5-5.6; uncached above, cached below). Points: medians with 95 %
    intervals, hollow where the model was fitted on them (the fitting pass), filled where
    it was not (the scored runs); lines: the model over bytes per task."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from pvfs.models import rs

    p = params or rs.Params.from_wire(doc["model"])
    pts = chapter5_curves(doc, p)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for op in ("read", "write"):
        mine = [x for x in pts if x["operation"] == op]
        if not mine:
            continue
        m = p.write if op == "write" else p
        for kind, algs in (("baseline", ("opt2",)), ("model", schedulers.FIXED)):
            fig, axes = plt.subplots(2, len(WORKLOADS), figsize=(16, 7), squeeze=False)
            for i, cached in enumerate((False, True)):
                for j, wl in enumerate(WORKLOADS):
                    ax = axes[i][j]
                    for alg in algs:
                        k = schedulers.FIXED.index(alg)
                        xs, ys = _model_line(doc, m, wl, cached,
                                             None if kind == "baseline" else alg)
                        ax.plot(xs, ys, "-", color=f"C{k}", lw=1,
                                label=f"{'baseline model' if kind == 'baseline' else alg}")
                        for part, face in (("fit", "none"), ("scored", f"C{k}")):
                            q = sorted((x["request_bytes"], x["median_s"], *x["ci95"])
                                       for x in mine if x["workload"] == wl
                                       and x["cached"] == cached and x["algorithm"] == alg
                                       and x["part"] == part)
                            if q:
                                ax.errorbar([a[0] / 1024 for a in q], [a[1] for a in q],
                                            yerr=[[a[1] - a[2] for a in q],
                                                  [a[3] - a[1] for a in q]],
                                            fmt="o", color=f"C{k}", mfc=face, ms=5,
                                            capsize=2, lw=0.8,
                                            label=f"{alg} {'fitted on' if part == 'fit' else 'held out'}")
                    ax.set_xscale("log")
                    ax.set_yscale("log")
                    ax.set_xlabel("KiB per task")
                    ax.set_ylabel("mean task service time (s)")
                    ax.set_title(f"{wl}, {'cached' if cached else 'uncached'} {op}s",
                                 fontsize=9)
                    ax.grid(alpha=0.3)
            axes[0][0].legend(fontsize=6, ncol=2)
            what = ("opt2 vs the baseline model (cf. figs. 5.1-5.4)" if kind == "baseline"
                    else "the fixed algorithms vs the complete model (cf. figs. 5.5-5.6)")
            fig.suptitle(f"{what}; {op}s, disk {doc['disk']}; points: medians, 95 % "
                         "intervals; hollow: fitted on, filled: held out", fontsize=10)
            fig.tight_layout()
            path = out / f"{doc['disk']}-fig5-{kind}-{op}.png"
            fig.savefig(path, dpi=80)
            plt.close(fig)
            paths.append(str(path))
    return paths
