"""Per-request cost of one I/O daemon's request path: small reads and writes over one
connection to an in-process daemon (issue 10: the trio thread's file system calls moved to
the engine and to worker threads; this shows what a request costs either way).

    python bench/iod_request.py [--requests 3000] [--size 4096] [--passes 2] [--connections 1]

Client and daemon share one trio thread; the engine runs on its own. With ``--connections``
N, N connections (a file each) send their requests at once. Reported per request:
wall time and CPU time of the whole process (every thread: the engine's too), the best of
``--passes``. CPU time is the steadier number on a shared machine: it does not count time
spent waiting for a core. Results: bench/results/iod_request.json (or ``--name``).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time

import trio

from pvfs.bench.common import format_table, write_results

STRIPE_UNIT = 65536


async def measure(requests: int, size: int, passes: int,
                  connections: int = 1) -> dict[str, float]:
    """Best-of-``passes`` µs per request for write and read (wall and CPU), and MiB/s."""
    from pvfs.cluster.launch import make_config
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
            chans = [Channel(host, port, 5.0, 30.0, name=f"iod0-{c}") for c in range(connections)]
            span = 16 * size
            for c, ch in enumerate(chans):
                await ch.call({"op": "write", "ino": c + 1, "stripe": stripe,
                               "desc": contiguous(0, span).to_wire()}, b"y" * span)
            data = b"x" * size

            async def client(c: int, op: str) -> None:
                for i in range(requests):
                    h = {"op": op, "ino": c + 1, "stripe": stripe,
                         "desc": contiguous((i % 16) * size, size).to_wire()}
                    if op == "write":
                        await chans[c].call(h, data)
                    else:
                        await chans[c].call_bulk(h)

            total = requests * connections
            for op in ("write", "read") * passes:
                t0, c0 = time.perf_counter(), time.process_time()
                async with trio.open_nursery() as clients:
                    for c in range(connections):
                        clients.start_soon(client, c, op)
                elapsed = time.perf_counter() - t0
                wall, cpu = elapsed / total * 1e6, (time.process_time() - c0) / total * 1e6
                best[f"{op}_us"] = min(best.get(f"{op}_us", wall), wall)
                best[f"{op}_cpu_us"] = min(best.get(f"{op}_cpu_us", cpu), cpu)
                rate = total * size / elapsed / 2**20
                best[f"{op}_mib_s"] = max(best.get(f"{op}_mib_s", rate), rate)
            for ch in chans:
                ch.close()
            nursery.cancel_scope.cancel()
    return best


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=3000, help="requests per pass and op")
    ap.add_argument("--size", type=int, default=4096, help="bytes per request")
    ap.add_argument("--passes", type=int, default=2, help="passes per op (best is kept)")
    ap.add_argument("--connections", type=int, default=1, help="concurrent connections")
    ap.add_argument("--name", default="iod_request", help="results file stem")
    args = ap.parse_args(argv)
    if min(args.requests, args.size, args.passes, args.connections) < 1:
        ap.error("--requests, --size, --passes and --connections must be at least 1")
    got = trio.run(measure, args.requests, args.size, args.passes, args.connections)
    print(format_table(["op", "wall µs/request", "cpu µs/request", "MiB/s"],
                       [[op, f"{got[f'{op}_us']:.1f}", f"{got[f'{op}_cpu_us']:.1f}",
                         f"{got[f'{op}_mib_s']:.0f}"] for op in ("write", "read")]))
    path = write_results(args.name, {"requests": args.requests, "size": args.size,
                                     "passes": args.passes, "connections": args.connections,
                                     "results": got})
    print(f"saved {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
