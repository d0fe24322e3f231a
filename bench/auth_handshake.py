"""What authentication costs: a fresh connection + one ping, with and without the handshake.

Pools keep connections open, so the handshake (two round trips and two HMAC-SHA256s per side)
is paid once per connection; this measures that one-time cost against the plain connect +
ping it is added to, on loopback, where round trips are cheapest and the handshake's share is
largest. Two clusters (one with ``[security] auth = true``) run at once; the variants run
interleaved in rounds and the medians are reported with their ratio, as bench/common.py
recommends. Also: 64 MiB written and read through the native API on a pooled connection,
with and without auth (the data path itself is unchanged, so the ratio should be ~1).
Results go to bench/results/auth_handshake.json.

    .venv/bin/python bench/auth_handshake.py [--rounds N] [--per-round N]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import pvfs
from pvfs.bench.common import median, write_results
from pvfs.cluster.launch import down, make_config, request, up, write_config
from pvfs.protocol.auth import generate_key_file, key_for


def _cluster(root: Path, auth: bool):
    if auth:
        generate_key_file(str(root / "pvfs.key"))
    cfg = make_config(str(root), iods=2, **({"auth": True, "key_file": str(root / "pvfs.key")}
                                             if auth else {}))
    cfg = write_config(cfg, str(root / "pvfs.toml"))
    up(cfg)
    return cfg


def _connect_ping(cfg, key, n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        request(cfg.manager, {"op": "ping"}, 5.0, key)
    return (time.perf_counter() - t0) / n


def _stream(cfg, data: bytes) -> float:
    with pvfs.connect(cfg.path) as fs:
        t0 = time.perf_counter()
        with fs.open("/bench", "w+b") as f:
            f.write(data)
            f.pread(len(data), 0)
        took = time.perf_counter() - t0
        fs.unlink("/bench")
    return took


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--per-round", type=int, default=200)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as d1, tempfile.TemporaryDirectory() as d2:
        plain, keyed = _cluster(Path(d1), False), _cluster(Path(d2), True)
        try:
            key = key_for(keyed)
            data = os.urandom(64 << 20)
            conn = {"plain": [], "auth": []}
            stream = {"plain": [], "auth": []}
            for _ in range(args.rounds):
                conn["plain"].append(_connect_ping(plain, None, args.per_round))
                conn["auth"].append(_connect_ping(keyed, key, args.per_round))
                stream["plain"].append(_stream(plain, data))
                stream["auth"].append(_stream(keyed, data))
        finally:
            down(plain)
            down(keyed)
    med = {k: median(v) for k, v in conn.items()}
    smed = {k: median(v) for k, v in stream.items()}
    out = {
        "load": os.getloadavg(),
        "connect_ping_seconds": {"median": med, "samples": conn},
        "connect_ping_ratio_auth_over_plain": med["auth"] / med["plain"],
        "handshake_cost_seconds": med["auth"] - med["plain"],
        "stream_64MiB_write_read_seconds": {"median": smed, "samples": stream},
        "stream_ratio_auth_over_plain": smed["auth"] / smed["plain"],
    }
    path = write_results("auth_handshake", out)
    print(f"fresh connection + ping: plain {med['plain'] * 1e6:.0f} µs, with auth "
          f"{med['auth'] * 1e6:.0f} µs (x{out['connect_ping_ratio_auth_over_plain']:.2f}); "
          f"64 MiB write+read on a pooled connection: x{out['stream_ratio_auth_over_plain']:.2f}"
          f"\nload {out['load']}; wrote {path}")


if __name__ == "__main__":
    main()
