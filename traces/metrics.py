"""Results of a replay: the thesis' three metrics, throughput, latencies, daemon counters.

The three metrics of the thesis' workload study (Ross 2000, ch. 4):

- *application service time*: the largest task service time (the time the parallel program
  waits for its I/O);
- *mean task service time*: their mean;
- *task service time variance*: their population variance (divide by N), a fairness measure.

They are computed for the whole run and for every phase (the operations between two
barriers; only tasks that did something in a phase count for it). ``bytes_per_s`` is all
bytes moved divided by the application service time. Latency percentiles are per operation
kind (``read``, ``write``, ``listio_read``, ``listio_write``, ``open``, ``close``, ``fsync``,
``barrier``), linear interpolation between order statistics.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

from pvfs.traces.format import Trace

PERCENTILES = (50, 90, 99)


def three_metrics(times: Sequence[float]) -> dict[str, float]:
    """Application service time (max), mean task service time and variance of ``times``."""
    if not times:
        return {"app_service_time": 0.0, "mean_task_service_time": 0.0,
                "task_service_time_variance": 0.0}
    mean = sum(times) / len(times)
    return {
        "app_service_time": max(times),
        "mean_task_service_time": mean,
        "task_service_time_variance": sum((t - mean) ** 2 for t in times) / len(times),
    }


def percentile(sorted_values: Sequence[float], pct: float) -> float:
    """The ``pct`` percentile of already sorted values (linear interpolation)."""
    if not sorted_values:
        return 0.0
    pos = (len(sorted_values) - 1) * pct / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def latency_summary(values: Sequence[float]) -> dict[str, float]:
    """Count, mean, percentiles and max of latencies in seconds."""
    data = sorted(values)
    out: dict[str, float] = {"count": len(data), "mean": sum(data) / len(data) if data else 0.0}
    for p in PERCENTILES:
        out[f"p{p}"] = percentile(data, p)
    out["max"] = data[-1] if data else 0.0
    return out


def counter_delta(before: Any, after: Any) -> Any:
    """``after - before`` for every number in two like-shaped counter structures."""
    if isinstance(after, bool):
        return after
    if isinstance(after, (int, float)) and isinstance(before, (int, float)):
        return after - before
    if isinstance(after, dict):
        before = before if isinstance(before, dict) else {}
        return {k: counter_delta(before.get(k), v) for k, v in after.items()}
    if isinstance(after, list):
        before = before if isinstance(before, list) else []
        return [counter_delta(before[i] if i < len(before) else None, v)
                for i, v in enumerate(after)]
    return after


def summarize(trace: Trace, ranks: Sequence[dict[str, Any]], *, spec: str, wall_time: float,
              runner: str, counters_before: Any = None, counters_after: Any = None,
              digests: dict[str, str | None] | None = None) -> dict[str, Any]:
    """Combine per-rank results (:func:`pvfs.traces.replay.engine.run_rank`) into one result."""
    service = [r["service_time"] for r in ranks]
    bytes_read = sum(r["bytes_read"] for r in ranks)
    bytes_written = sum(r["bytes_written"] for r in ranks)
    result: dict[str, Any] = {
        "workload": trace.generator.get("name", "trace"),
        "params": trace.generator.get("params", {}),
        "seed": trace.generator.get("seed"),
        "procs": trace.nprocs,
        "target": spec,
        "runner": runner,
        "wall_time": wall_time,
        **three_metrics(service),
        "task_service_times": service,
        "bytes_read": bytes_read,
        "bytes_written": bytes_written,
    }
    app = result["app_service_time"]
    result["bytes_per_s"] = (bytes_read + bytes_written) / app if app > 0 else 0.0
    ops: dict[str, int] = {}
    lat: dict[str, list[float]] = {}
    for r in ranks:
        for k, v in r["ops"].items():
            ops[k] = ops.get(k, 0) + v
        for k, v in r["latencies"].items():
            lat.setdefault(k, []).extend(v)
    result["ops"] = dict(sorted(ops.items()))
    result["latency"] = {k: latency_summary(v) for k, v in sorted(lat.items())}
    result["phases"] = _phases(trace, ranks)
    result["errors"] = [e for r in ranks for e in r["errors"]]
    result["verify_errors"] = sum(r["verify_errors"] for r in ranks)
    result["short_reads"] = sum(r["short_reads"] for r in ranks)
    result["counters"] = None
    if counters_after is not None:
        result["counters"] = {"before": counters_before, "after": counters_after,
                              "delta": counter_delta(counters_before, counters_after)}
    result["digests"] = dict(digests or {})
    return result


def _phases(trace: Trace, ranks: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    nphases = max((len(r["phase_times"]) for r in ranks), default=0)
    labels = list(trace.phases) + [f"phase {i}" for i in range(len(trace.phases), nphases)]
    out = []
    for k in range(nphases):
        times = [r["phase_times"][k] for r in ranks if r["phase_times"][k] is not None]
        if not times:
            continue
        moved = sum(r["phase_bytes"][k] for r in ranks)
        entry = {"index": k, "label": labels[k], "tasks": len(times), "bytes": moved,
                 **three_metrics(times)}
        entry["bytes_per_s"] = moved / entry["app_service_time"] if entry["app_service_time"] else 0
        out.append(entry)
    return out


def comparable(result: dict[str, Any]) -> dict[str, Any]:
    """The parts of a result that must agree between runs of one trace on any target or
    runner: operation counts, bytes moved, verification counts and final file digests."""
    return {k: result[k] for k in ("ops", "bytes_read", "bytes_written", "verify_errors",
                                   "short_reads", "digests", "errors")}


# --------------------------------------------------------------------------------- output
def _fmt_time(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.3f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3f} ms"
    return f"{seconds * 1e6:.1f} us"


def _fmt_rate(bps: float) -> str:
    for unit, scale in (("GiB/s", 1 << 30), ("MiB/s", 1 << 20), ("KiB/s", 1 << 10)):
        if bps >= scale:
            return f"{bps / scale:.2f} {unit}"
    return f"{bps:.0f} B/s"


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for n, row in enumerate(rows):
        lines.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                               for i, (c, w) in enumerate(zip(row, widths, strict=True))))
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return lines


def format_result(result: dict[str, Any]) -> str:
    """The table for people (``pvfs-admin replay`` without ``--json``)."""
    lines = [
        (f"workload {result['workload']}  procs {result['procs']}  target {result['target']}"
        f"  runner {result['runner']}"),
        f"application service time   {_fmt_time(result['app_service_time'])}",
        f"mean task service time     {_fmt_time(result['mean_task_service_time'])}",
        f"task service time variance {result['task_service_time_variance']:.6g} s^2",
        (f"bytes read {result['bytes_read']}  written {result['bytes_written']}  "
        f"throughput {_fmt_rate(result['bytes_per_s'])}"),
        "",
    ]
    rows = [["op", "count", "mean", "p50", "p90", "p99", "max"]]
    for kind, s in result["latency"].items():
        rows.append([kind, str(int(s["count"]))] + [_fmt_time(s[k]) for k in
                                                    ("mean", "p50", "p90", "p99", "max")])
    lines += _table(rows)
    if len(result["phases"]) > 1:
        lines.append("")
        rows = [["phase", "tasks", "app time", "mean task", "variance", "throughput"]]
        for ph in result["phases"]:
            rows.append([ph["label"], str(ph["tasks"]), _fmt_time(ph["app_service_time"]),
                         _fmt_time(ph["mean_task_service_time"]),
                         f"{ph['task_service_time_variance']:.3g}", _fmt_rate(ph["bytes_per_s"])])
        lines += _table(rows)
    if result.get("counters"):
        lines += ["", "daemon counters (delta): " + json.dumps(result["counters"]["delta"])[:2000]]
    if result["verify_errors"] or result["short_reads"]:
        lines.append(f"verify errors {result['verify_errors']}  short reads {result['short_reads']}")
    for err in result["errors"][:10]:
        lines.append(f"error: {err}")
    return "\n".join(lines)
