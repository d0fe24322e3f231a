"""``python -m pvfs.daemons.gcache --config FILE --index N``: run one global cache daemon."""

from __future__ import annotations

import sys

from pvfs import config as cfgmod
from pvfs.gcache.config import gcache_config

from ..common import base_arguments, run_daemon
from .server import GcacheServer


def main(argv: list[str] | None = None) -> int:
    p = base_arguments("pvfs-gcache", "Run a pvfs global cache daemon (shared block cache).")
    p.add_argument("--index", type=int, required=True,
                   help="this daemon's number in [gcache].addresses")
    args = p.parse_args(argv)
    try:
        cfg = cfgmod.load(args.config)
        g = gcache_config(cfg)
    except cfgmod.ConfigError as exc:
        print(f"pvfs-gcache: {exc}", file=sys.stderr)
        return 2
    count = g.count if g is not None else 0
    if not 0 <= args.index < count:
        print(f"pvfs-gcache: --index {args.index} but the config has {count} global caches",
              file=sys.stderr)
        return 2
    return run_daemon("pvfs-gcache", f"gcache{args.index}", args,
                      lambda: GcacheServer(cfg, args.index))


if __name__ == "__main__":
    sys.exit(main())
