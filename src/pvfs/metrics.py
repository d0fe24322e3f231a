"""Service metrics of a daemon in the Prometheus text format (docs/operations.md).

A daemon keeps one ``Metrics``: request counts, errors and a latency histogram per operation,
byte counters, and whatever gauges it reports at scrape time. ``families()`` gives them as
plain data (msgpack-safe, so ``pvfs-admin stats --prometheus`` can fetch them over the wire
with the ``metrics`` operation and merge several daemons into one exposition); ``render()``
writes the text format (version 0.0.4) that the daemon's ``metrics_port`` serves.
"""

from __future__ import annotations

import bisect
import math
import re
from collections import defaultdict

# Upper bounds (seconds) of the latency buckets: 50 µs .. 10 s, about x2.5 apart.
BUCKETS = (5e-05, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
           0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")

# A family: {"name", "type", "help", "samples": [[name suffix, {label: value}, number]]}
Family = dict


class Histogram:
    """Cumulative bucket counts, sum and count of observations."""

    __slots__ = ("count", "counts", "sum")

    def __init__(self) -> None:
        self.counts = [0] * len(BUCKETS)
        self.sum = 0.0
        self.count = 0

    def observe(self, seconds: float) -> None:
        i = bisect.bisect_left(BUCKETS, seconds)
        if i < len(BUCKETS):
            self.counts[i] += 1
        self.sum += seconds
        self.count += 1

    def samples(self, labels: dict) -> list[list]:
        out, running = [], 0
        for bound, n in zip(BUCKETS, self.counts):
            running += n
            out.append(["_bucket", {**labels, "le": _number(bound)}, running])
        out.append(["_bucket", {**labels, "le": "+Inf"}, self.count])
        out.append(["_sum", labels, self.sum])
        out.append(["_count", labels, self.count])
        return out


class Metrics:
    """The counters of one daemon (``daemon`` label: mgr, iod0, ...)."""

    def __init__(self, daemon: str) -> None:
        self.daemon = daemon
        self.requests: dict[str, int] = defaultdict(int)
        self.errors: dict[str, int] = defaultdict(int)
        self.latency: dict[str, Histogram] = defaultdict(Histogram)
        self.bytes: dict[str, int] = defaultdict(int)

    def request(self, op: str, seconds: float | None = None, error: bool = False) -> None:
        """Count one request of ``op`` (and its latency when it was measured)."""
        self.requests[op] += 1
        if error:
            self.errors[op] += 1
        if seconds is not None:
            self.latency[op].observe(seconds)

    def add_bytes(self, direction: str, n: int) -> None:
        self.bytes[direction] += n

    def families(self, gauges: dict[str, tuple[str, float]] | None = None) -> list[Family]:
        """Every family of this daemon; ``gauges`` maps name -> (help, value)."""
        d = {"daemon": self.daemon}
        fams = [
            _family("pvfs_requests_total", "counter", "Requests served, by operation.",
                    [["", {**d, "op": op}, n] for op, n in sorted(self.requests.items())]),
            _family("pvfs_request_errors_total", "counter",
                    "Requests answered with an error, by operation.",
                    [["", {**d, "op": op}, n] for op, n in sorted(self.errors.items())]),
            _family("pvfs_request_duration_seconds", "histogram",
                    "Time from a request's arrival (I/O daemons: its job's submission) to its "
                    "reply, by operation.",
                    [s for op, h in sorted(self.latency.items())
                     for s in h.samples({**d, "op": op})]),
        ]
        if self.bytes:
            fams.append(_family("pvfs_bytes_total", "counter",
                                "Bytes moved by read and write requests.",
                                [["", {**d, "direction": k}, n]
                                 for k, n in sorted(self.bytes.items())]))
        for name, (text, value) in sorted((gauges or {}).items()):
            kind = "counter" if name.endswith("_total") else "gauge"
            fams.append(_family(name, kind, text, [["", d, value]]))
        return fams


def _family(name: str, kind: str, text: str, samples: list[list]) -> Family:
    return {"name": name, "type": kind, "help": text, "samples": samples}


def merge(*groups: list[Family]) -> list[Family]:
    """Families of several daemons as one exposition (each family once, samples joined)."""
    out: dict[str, Family] = {}
    for fams in groups:
        for f in fams:
            have = out.get(f["name"])
            if have is None:
                out[f["name"]] = {**f, "samples": list(f["samples"])}
            else:
                have["samples"].extend(f["samples"])
    return list(out.values())


def _number(v: float) -> str:
    if isinstance(v, bool):
        return str(int(v))
    if isinstance(v, int):
        return str(v)
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    if math.isnan(v):
        return "NaN"
    return repr(float(v))


def _label_value(v: object) -> str:
    return str(v).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def render(families: list[Family]) -> str:
    """The Prometheus text exposition of ``families``."""
    lines = []
    for f in families:
        name = f["name"]
        if not _NAME.match(name):
            raise ValueError(f"bad metric name {name!r}")
        lines.append(f"# HELP {name} {f['help']}".replace("\n", " "))
        lines.append(f"# TYPE {name} {f['type']}")
        for suffix, labels, value in f["samples"]:
            lab = ",".join(f'{k}="{_label_value(v)}"' for k, v in labels.items())
            lines.append(f"{name}{suffix}{{{lab}}} {_number(value)}" if lab
                         else f"{name}{suffix} {_number(value)}")
    return "\n".join(lines) + "\n"


def parse(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Samples of a text exposition: {(name, sorted labels): value} (for tests and --watch)."""
    out = {}
    pat = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
    lab = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = pat.match(line)
        if m is None:
            raise ValueError(f"not a sample line: {line!r}")
        labels = tuple(sorted(lab.findall(m.group(2) or "")))
        out[(m.group(1), labels)] = float(m.group(3))
    return out
