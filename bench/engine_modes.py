"""Measure the engine's data paths over loopback TCP and pick the defaults.

read_mode:  sendfile  vs  mmap+send in windows of 128 KiB (the thesis' choice) and larger.
write_mode: recv into a buffer + pwrite  vs  splice socket -> pipe -> file.

Jobs of 1-64 MiB, one stream and four concurrent streams; the file is in the page cache
(the engine's own cost is what differs between modes; the disk is the same for all). Each
variant is run interleaved with the others, REPEATS times, and the median reported, as
bench/common.py recommends. Results go to bench/results/engine_modes.json.

    .venv/bin/python bench/engine_modes.py [--repeats N] [--quick]
"""

from __future__ import annotations

import argparse
import math
import os
import select
import socket
import struct
import sys
import tempfile
import threading
import time
from pathlib import Path

from pvfs import _native as nat
from pvfs.bench.common import format_bytes_rate, format_table, median, write_results

MiB = 1 << 20
READ_VARIANTS = {
    "sendfile": {"read_mode": "sendfile"},
    "mmap-128K": {"read_mode": "mmap", "mmap_window": 128 << 10},
    "mmap-1M": {"read_mode": "mmap", "mmap_window": 1 << 20},
    "mmap-8M": {"read_mode": "mmap", "mmap_window": 8 << 20},
}
TIE = 0.05
WRITE_VARIANTS = {
    "pwrite": {"write_mode": "pwrite"},
    "splice": {"write_mode": "splice"},
}


def tcp_pair() -> tuple[socket.socket, socket.socket]:
    with socket.create_server(("127.0.0.1", 0)) as lst:
        cli = socket.create_connection(lst.getsockname())
        srv, _ = lst.accept()
    return srv, cli


def wait_all(eng: nat.Engine, n: int) -> list[tuple]:
    got: list[tuple] = []
    while len(got) < n:
        select.select([eng.fileno()], [], [], 60)
        got += eng.completions()
    bad = [c for c in got if c[1] != 0]
    if bad:
        raise RuntimeError(f"job errors: {bad}")
    return got


def drain(sock: socket.socket, n: int, buf: memoryview) -> None:
    while n:
        k = sock.recv_into(buf, min(n, len(buf)))
        if not k:
            raise RuntimeError("EOF")
        n -= k


def run_read(eng: nat.Engine, fd: int, size: int, streams: int, fsize: int) -> float:
    """Bytes/s for `streams` concurrent read jobs of `size` bytes each."""
    pairs = [tcp_pair() for _ in range(streams)]
    bufs = [memoryview(bytearray(4 * MiB)) for _ in range(streams)]
    threads = [threading.Thread(target=drain, args=(c, size, b)) for (_, c), b in
               zip(pairs, bufs)]
    for t in threads:
        t.start()
    t0 = time.perf_counter()
    for i, (s, _) in enumerate(pairs):
        off = (i * size) % max(fsize - size, 1)
        eng.submit(i, s.fileno(), fd, nat.OP_READ, struct.pack("<qqq", nat.ACC_FILE, off, size))
    for t in threads:
        t.join()
    wait_all(eng, streams)
    dt = time.perf_counter() - t0
    for s, c in pairs:
        s.close(), c.close()
    return streams * size / dt


def run_write(eng: nat.Engine, fd: int, size: int, streams: int, payload: bytes) -> float:
    pairs = [tcp_pair() for _ in range(streams)]
    view = memoryview(payload)[:size]
    threads = [threading.Thread(target=c.sendall, args=(view,)) for _, c in pairs]
    t0 = time.perf_counter()
    for i, (s, _) in enumerate(pairs):
        eng.submit(i, s.fileno(), fd, nat.OP_WRITE,
                   struct.pack("<qqq", nat.ACC_FILE, i * size, size))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wait_all(eng, streams)
    dt = time.perf_counter() - t0
    for s, c in pairs:
        s.close(), c.close()
    return streams * size / dt


def geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def main() -> None:
    args = _parse_args()
    sizes = [1 * MiB, 4 * MiB, 16 * MiB, 64 * MiB]
    if args.quick:
        sizes, args.repeats = [1 * MiB, 16 * MiB], 2
    streams_list = [1, 4]
    samples = _measure(args.repeats, sizes, streams_list, args.dir)
    results, gm = _summarize(samples)
    choice = _choose(gm)
    _print_tables(results, sizes, streams_list, args.repeats)
    print("\ngeometric means:", {k: format_bytes_rate(v) for k, v in gm.items()})
    print("choice:", choice)
    path = write_results("engine_modes", {
        "description": "pvfs._native.Engine data paths over loopback TCP, page-cached file",
        "repeats": args.repeats,
        "results": results,
        "geomean_MiBps": {k: round(v / MiB, 1) for k, v in gm.items()},
        "choice": choice,
    })
    print(f"wrote {path}")


def _parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="1 and 16 MiB only, 2 repeats")
    ap.add_argument("--dir", default=None, help="directory for the test files")
    return ap.parse_args()


def _measure(repeats: int, sizes: list[int], streams_list: list[int],
             where: str | None) -> dict[tuple, list[float]]:
    """Bytes/s of every variant, job size and stream count, ``repeats`` times, interleaved;
    ``{(op, variant, job bytes, streams): samples}``. The files live in a temporary directory
    under ``where`` (the default temporary directory if None)."""
    fsize = 256 * MiB
    with tempfile.TemporaryDirectory(dir=where) as tmp:
        rpath, wpath = Path(tmp) / "read", Path(tmp) / "write"
        payload = os.urandom(64 * MiB)
        _make_files(rpath, wpath, payload, fsize)
        rfd, wfd = os.open(rpath, os.O_RDONLY), os.open(wpath, os.O_RDWR)
        engines = {k: nat.Engine(**v) for k, v in {**READ_VARIANTS, **WRITE_VARIANTS}.items()}
        samples: dict[tuple, list[float]] = {}
        try:
            for rep in range(repeats):
                for size in sizes:
                    for streams in streams_list:
                        for name in READ_VARIANTS:      # interleaved A/B/A/B
                            bps = run_read(engines[name], rfd, size, streams, fsize)
                            samples.setdefault(("read", name, size, streams), []).append(bps)
                        for name in WRITE_VARIANTS:
                            bps = run_write(engines[name], wfd, size, streams, payload)
                            samples.setdefault(("write", name, size, streams), []).append(bps)
                print(f"repeat {rep + 1}/{repeats} done", file=sys.stderr)
        finally:
            for e in engines.values():
                e.close()
            os.close(rfd), os.close(wfd)
    return samples


def _make_files(rpath: Path, wpath: Path, payload: bytes, fsize: int) -> None:
    """The read file (``fsize`` bytes of ``payload``, read once into the page cache) and the
    write file (preallocated and written, so the jobs overwrite without block allocation)."""
    with open(rpath, "wb") as f:
        f.writelines(payload for _ in range(fsize // len(payload)))
    with open(rpath, "rb") as f:   # into the page cache
        while f.read(16 * MiB):
            pass
    with open(wpath, "wb") as f:   # preallocated: overwrites, no block allocation
        f.truncate(4 * 64 * MiB)
        f.write(bytes(4 * 64 * MiB))


def _summarize(samples: dict[tuple, list[float]],
               ) -> tuple[dict[str, list[dict]], dict[str, float]]:
    """The rows of the results (medians and samples in MiB/s, per op) and each variant's
    geometric mean of its medians (bytes/s)."""
    results: dict[str, list[dict]] = {"read": [], "write": []}
    score: dict[str, list[float]] = {}
    for (op, name, size, streams), xs in sorted(samples.items()):
        med = median(xs)
        results[op].append({"variant": name, "job_bytes": size, "streams": streams,
                            "median_MiBps": round(med / MiB, 1),
                            "samples_MiBps": [round(x / MiB, 1) for x in xs]})
        score.setdefault(name, []).append(med)
    gm = {name: geomean(v) for name, v in score.items()}
    return results, gm


def _choose(gm: dict[str, float]) -> dict[str, object]:
    """The default read and write modes, by the rule recorded in the result."""
    # The variant with the highest geometric mean wins; among mmap windows, the smallest one
    # within TIE of the best (smaller mappings cost less to set up and tear down per job).
    best_read = max(READ_VARIANTS, key=gm.__getitem__)
    if READ_VARIANTS[best_read]["read_mode"] == "mmap":
        best_read = min((v for v in READ_VARIANTS if READ_VARIANTS[v]["read_mode"] == "mmap"
                         and gm[v] >= gm[best_read] * (1 - TIE)),
                        key=lambda v: READ_VARIANTS[v]["mmap_window"])
    best_write = max(WRITE_VARIANTS, key=gm.__getitem__)
    return {"read_mode": READ_VARIANTS[best_read]["read_mode"],
            "mmap_window": READ_VARIANTS[best_read].get("mmap_window"),
            "write_mode": WRITE_VARIANTS[best_write]["write_mode"],
            "rule": "highest geometric mean of the medians over all job sizes and streams; "
                    f"the smallest mmap window within {TIE:.0%} of the best mmap variant"}


def _print_tables(results: dict[str, list[dict]], sizes: list[int], streams_list: list[int],
                  repeats: int) -> None:
    """One table per op: each variant's median and its ratio to the op's first variant."""
    for op in ("read", "write"):
        variants = READ_VARIANTS if op == "read" else WRITE_VARIANTS
        rows = []
        for size in sizes:
            for streams in streams_list:
                meds = {r["variant"]: r["median_MiBps"] * MiB for r in results[op]
                        if r["job_bytes"] == size and r["streams"] == streams}
                base = meds[next(iter(variants))]
                rows.append([f"{size // MiB} MiB x{streams}"] +
                            [f"{format_bytes_rate(meds[v])} ({meds[v] / base:.2f}x)"
                             for v in variants])
        print(f"\n{op} (median of {repeats}, ratio to {next(iter(variants))})")
        print(format_table(["job", *variants], rows))


if __name__ == "__main__":
    main()
