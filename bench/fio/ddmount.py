"""dd through the pvfs mount with several option sets, interleaved; medians in MB/s.

::

    python bench/fio/ddmount.py --size 256M --repeats 3 \\
        --opts "" "direct_io" "read_ahead_kb=0" "cache=0" "stream_min=0" --json dd_mount

One private cluster (manager + 4 I/O daemons on 127.0.0.1) for the whole run; for each repeat
every option set is mounted in turn (the order rotates each repeat), then
``dd if=/dev/zero of=F bs=1M count=N conv=fsync`` (write) and, after dropping the page cache
(``/proc/sys/vm/drop_caches``, needs root; else ``fadvise`` through a fresh mount),
``dd if=F of=/dev/null bs=1M`` (read); then unmount. The async client alone (1 MiB requests
one at a time, the same file sizes) is measured in the same rotation as ``native``.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pvfs.bench.common import drop_caches, format_table, median, write_results
from pvfs.bench.fio.jobs import MiB
from pvfs.bench.fio.pvfs_target import pvfs_cluster, pvfs_mount
from pvfs.units import parse_size

NATIVE = "native"


def _dd(args: list[str]) -> float:
    """Run dd; its own MB/s figure (bytes / elapsed)."""
    done = subprocess.run(["dd", *args], check=True, capture_output=True, text=True)
    m = re.search(r"(\d+) bytes .* copied, ([\d.]+) s", done.stderr)
    if not m:
        raise RuntimeError(f"cannot parse dd output: {done.stderr}")
    return int(m.group(1)) / float(m.group(2)) / 1e6


def run_mount(config: str, mnt: Path, options: str, size: int) -> tuple[float, float]:
    """(write MB/s, read MB/s) of one dd pair through a fresh mount with ``options``."""
    count = size // MiB
    with pvfs_mount(config, mnt, options) as path:
        f = os.path.join(path, "dd.bin")
        w = _dd(["if=/dev/zero", f"of={f}", "bs=1M", f"count={count}", "conv=fsync"])
    os.sync()
    drop_caches()
    with pvfs_mount(config, mnt, options) as path:
        f = os.path.join(path, "dd.bin")
        r = _dd([f"if={f}", "of=/dev/null", "bs=1M"])
        os.unlink(f)
    return w, r


def run_native(config: str, size: int) -> tuple[float, float]:
    """The same through the async client alone: 1 MiB requests, one at a time."""
    import trio

    from pvfs.client.aclient import ROOT, AsyncClient
    from pvfs.layout.stripe import Stripe

    async def go() -> tuple[float, float]:
        c = await AsyncClient.connect(config)
        try:
            a = await c.create(1, f"native-{os.getpid()}", 0o644, ROOT)
            ino = a["ino"]
            stripe = await c.getstripe(ino, ROOT)
            assert isinstance(stripe, Stripe)
            block = bytes(MiB)
            t = time.perf_counter()
            for off in range(0, size, MiB):
                await c.write(ino, stripe, off, block)
            await c.fsync(ino, stripe)
            w = size / (time.perf_counter() - t) / 1e6
            t = time.perf_counter()
            for off in range(0, size, MiB):
                await c.read(ino, stripe, off, MiB)
            r = size / (time.perf_counter() - t) / 1e6
            await c.unlink(1, f"native-{os.getpid()}", ROOT)
            return w, r
        finally:
            c.close()

    return trio.run(go)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--opts", nargs="+", default=["", "direct_io", "read_ahead_kb=0", "cache=0"],
                    help="mount option sets ('' = defaults)")
    ap.add_argument("--size", default="256M")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-native", action="store_true", help="skip the async-client runs")
    ap.add_argument("--json", metavar="NAME", help="save bench/results/NAME.json")
    args = ap.parse_args(argv)
    size = parse_size(args.size)
    sets = list(args.opts) + ([] if args.no_native else [NATIVE])
    runs: dict[str, list[tuple[float, float]]] = {s: [] for s in sets}
    with tempfile.TemporaryDirectory(prefix="pvfs-dd-") as tmp, \
            pvfs_cluster(Path(tmp) / "fs") as config:
        for rep in range(args.repeats):
            k = rep % len(sets)
            for s in sets[k:] + sets[:k]:
                got = run_native(config, size) if s == NATIVE else \
                    run_mount(config, Path(tmp) / "mnt", s, size)
                runs[s].append(got)
                print(f"rep {rep + 1} {s or 'defaults':28} write {got[0]:7.0f} "
                      f"read {got[1]:7.0f} MB/s", flush=True)
    rows = []
    out: dict[str, dict] = {}
    for s in sets:
        w = median(x[0] for x in runs[s])
        r = median(x[1] for x in runs[s])
        out[s or "defaults"] = {"write_MBps": w, "read_MBps": r, "runs": runs[s]}
        rows.append([s or "defaults", f"{w:.0f}", f"{r:.0f}"])
    print(format_table(["mount options", "write MB/s", "read MB/s"], rows))
    if args.json:
        print("saved", write_results(args.json, {"size": size, "repeats": args.repeats,
                                                 "results": out}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
