"""Per-request cost of one I/O daemon's request path: small reads and writes over one
connection to an in-process daemon (issue 10: the trio thread's file system calls moved to
the engine and to worker threads; this shows what a request costs either way).

    python bench/iod_request.py [--requests 3000] [--size 4096] [--passes 2]

Client and daemon share one trio thread; the engine runs on its own. Reported per request:
wall time and CPU time of the whole process (every thread: the engine's too), the best of
``--passes``. CPU time is the steadier number on a shared machine: it does not count time
spent waiting for a core. Results: bench/results/iod_request.json (or ``--name``).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import format_table, write_results

STRIPE_UNIT = 65536


async def measure(requests: int, size: int, passes: int) -> dict[str, float]:
    """Best-of-``passes`` µs per request for write and read (wall and CPU)."""
    from pvfs.cli.launch import make_config
    from pvfs.daemons.iod.server import IodServer
    from pvfs.layout.describe import contiguous
    from pvfs.layout.stripe import Stripe
    from pvfs.protocol.rpc import Channel

    stripe = Stripe(0, 1, STRIPE_UNIT).to_wire()
    best: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="pvfs-iodreq-") as tmp:
        server = IodServer(make_config(tmp, iods=1), 0)
        async with trio.open_nursery() as nursery:
            host, port = (await nursery.start(server.serve))[:2]
            ch = Channel(host, port, 5.0, 30.0, name="iod0")
            span = 16 * size
            await ch.call({"op": "write", "ino": 1, "stripe": stripe,
                           "desc": contiguous(0, span).to_wire()}, b"y" * span)
            data = b"x" * size
            for op in ("write", "read") * passes:
                t0, c0 = time.perf_counter(), time.process_time()
                for i in range(requests):
                    h = {"op": op, "ino": 1, "stripe": stripe,
                         "desc": contiguous((i % 16) * size, size).to_wire()}
                    if op == "write":
                        await ch.call(h, data)
                    else:
                        await ch.call_bulk(h)
                wall = (time.perf_counter() - t0) / requests * 1e6
                cpu = (time.process_time() - c0) / requests * 1e6
                best[f"{op}_us"] = min(best.get(f"{op}_us", wall), wall)
                best[f"{op}_cpu_us"] = min(best.get(f"{op}_cpu_us", cpu), cpu)
            ch.close()
            nursery.cancel_scope.cancel()
    return best


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=3000, help="requests per pass and op")
    ap.add_argument("--size", type=int, default=4096, help="bytes per request")
    ap.add_argument("--passes", type=int, default=2, help="passes per op (best is kept)")
    ap.add_argument("--name", default="iod_request", help="results file stem")
    args = ap.parse_args(argv)
    if min(args.requests, args.size, args.passes) < 1:
        ap.error("--requests, --size and --passes must be at least 1")
    got = trio.run(measure, args.requests, args.size, args.passes)
    print(format_table(["op", "wall µs/request", "cpu µs/request"],
                       [[op, f"{got[f'{op}_us']:.1f}", f"{got[f'{op}_cpu_us']:.1f}"]
                        for op in ("write", "read")]))
    path = write_results(args.name, {"requests": args.requests, "size": args.size,
                                     "passes": args.passes, "results": got})
    print(f"saved {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
