"""``pvfs-iod --config FILE --index N``: run one I/O daemon of a file system."""

from __future__ import annotations

import sys

from pvfs import config as cfgmod

from ..common import base_arguments, run_daemon
from .server import IodServer


def main(argv: list[str] | None = None) -> int:
    p = base_arguments("pvfs-iod", "Run a pvfs I/O daemon (one stripe file per inode).")
    p.add_argument("--index", type=int, required=True, help="this daemon's number in the config")
    args = p.parse_args(argv)
    try:
        cfg = cfgmod.load(args.config)
    except cfgmod.ConfigError as exc:
        print(f"pvfs-iod: {exc}", file=sys.stderr)
        return 2
    if not 0 <= args.index < cfg.niods:
        print(f"pvfs-iod: --index {args.index} but the config has {cfg.niods} I/O daemons",
              file=sys.stderr)
        return 2
    return run_daemon("pvfs-iod", f"iod{args.index}", args, lambda: IodServer(cfg, args.index))


if __name__ == "__main__":
    sys.exit(main())
