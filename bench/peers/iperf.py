"""iperf3 on loopback: the network ceiling the pvfs data path is compared with.

Library use (``bench/stream.py`` calls this beside its own runs)::

    from pvfs.bench.peers.iperf import iperf3_bandwidth
    bps = iperf3_bandwidth(streams=4, duration=5, reverse=False)   # bytes/s

CLI (saves ``bench/results/iperf3.json``)::

    python bench/peers/iperf.py --streams 1 4 --duration 5

``reverse=False`` measures client→server; ``reverse=True`` passes ``-R`` (server→client),
which is the direction of a file system read.
"""

from __future__ import annotations

import argparse
import json
import logging
import socket
import subprocess
import sys
import time
from typing import Any

from pvfs.bench.common import (
    ensure_apt,
    format_bytes_rate,
    format_table,
    median,
    write_results,
)
from pvfs.procs import terminate

log = logging.getLogger("bench.iperf")


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def parse_iperf3_json(doc: dict[str, Any]) -> float:
    """Bytes/s received in an iperf3 ``-J`` report (sum over all parallel streams).

    Raises:
        ValueError: the report carries an error or no summary.
    """
    if doc.get("error"):
        raise ValueError(f"iperf3 error: {doc['error']}")
    end = doc.get("end") or {}
    summary = end.get("sum_received") or end.get("sum")
    if not summary or "bits_per_second" not in summary:
        raise ValueError("iperf3 report has no end.sum_received")
    return float(summary["bits_per_second"]) / 8.0


def iperf3_bandwidth(streams: int = 1, duration: float = 5, reverse: bool = False,
                     host: str = "127.0.0.1", omit: int = 1) -> float:
    """Run an iperf3 server and client on ``host``; return the received bytes/s.

    Args:
        streams: parallel TCP streams (``-P``).
        duration: seconds of measurement (``-t``).
        reverse: measure server→client (``-R``) instead of client→server.
        host: loopback address to bind and connect to.
        omit: seconds at the start left out of the result (``-O``), for TCP ramp-up.
    """
    ensure_apt(["iperf3"], ["iperf3"])
    port = _free_port(host)
    server = subprocess.Popen(["iperf3", "-s", "-B", host, "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        cmd = ["iperf3", "-c", host, "-p", str(port), "-P", str(streams),
               "-t", str(duration), "-O", str(omit), "-J"]
        if reverse:
            cmd.append("-R")
        deadline = time.monotonic() + 10
        while True:
            proc = subprocess.run(cmd, check=False, capture_output=True, text=True,
                                  timeout=duration + omit + 60)
            try:
                doc = json.loads(proc.stdout)
            except json.JSONDecodeError:
                doc = {"error": proc.stderr.strip() or "no JSON output"}
            err = str(doc.get("error", ""))
            # The server may not be listening yet: retry only the connect failure.
            if "connect" in err and time.monotonic() < deadline:
                time.sleep(0.1)
                continue
            return parse_iperf3_json(doc)
    finally:
        terminate([server.pid])
        server.wait(timeout=10)


def measure(streams: list[int], duration: float, repeats: int = 1) -> dict[str, Any]:
    """Both directions for every stream count, ``repeats`` times interleaved; medians."""
    runs: dict[str, list[float]] = {}
    for _ in range(repeats):
        for n in streams:
            for reverse in (False, True):
                key = f"P{n}_{'reverse' if reverse else 'forward'}"
                bps = iperf3_bandwidth(n, duration, reverse)
                log.info("%s: %s", key, format_bytes_rate(bps))
                runs.setdefault(key, []).append(bps)
    results = {}
    for n in streams:
        row: dict[str, Any] = {"streams": n}
        for direction in ("forward", "reverse"):
            xs = runs[f"P{n}_{direction}"]
            row[direction] = {"runs_bytes_per_s": xs, "median_bytes_per_s": median(xs)}
        results[str(n)] = row
    return results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--streams", type=int, nargs="+", default=[1, 4])
    ap.add_argument("--duration", type=float, default=5)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--name", default="iperf3", help="results file stem")
    ap.add_argument("--no-save", action="store_true")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(name)s %(message)s")
    results = measure(args.streams, args.duration, args.repeats)
    rows = []
    for n in args.streams:
        r = results[str(n)]
        rows.append([f"-P {n}", format_bytes_rate(r["forward"]["median_bytes_per_s"]),
                     format_bytes_rate(r["reverse"]["median_bytes_per_s"])])
    print(format_table(["streams", "client->server", "server->client (-R)"], rows))
    if not args.no_save:
        path = write_results(args.name, {
            "params": {"streams": args.streams, "duration_s": args.duration,
                       "repeats": args.repeats, "host": "127.0.0.1"},
            "results": results,
        })
        print(f"saved {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
