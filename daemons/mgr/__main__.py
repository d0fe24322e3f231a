"""``pvfs-mgr --config FILE``: run the metadata manager of a file system."""

from __future__ import annotations

import sys

import trio

from pvfs import config as cfgmod

from ..common import base_arguments, claim_pidfile, release_pidfile, run_until_signal, setup_logging
from .server import MgrServer


def main(argv: list[str] | None = None) -> int:
    args = base_arguments("pvfs-mgr", "Run the pvfs metadata manager.").parse_args(argv)
    try:
        cfg = cfgmod.load(args.config)
    except cfgmod.ConfigError as exc:
        print(f"pvfs-mgr: {exc}", file=sys.stderr)
        return 2
    setup_logging("mgr", args.log_file, args.verbose)
    if args.pidfile:
        claim_pidfile(args.pidfile)
    try:
        server = MgrServer(cfg)
        trio.run(run_until_signal, server.serve)
    except OSError as exc:
        print(f"pvfs-mgr: {exc}", file=sys.stderr)
        return 1
    finally:
        release_pidfile(args.pidfile)
    return 0


if __name__ == "__main__":
    sys.exit(main())
