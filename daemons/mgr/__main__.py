"""``pvfs-mgr --config FILE``: run the metadata manager of a file system."""

from __future__ import annotations

import sys

from pvfs import config as cfgmod

from ..common import base_arguments, run_daemon
from .server import MgrServer


def main(argv: list[str] | None = None) -> int:
    args = base_arguments("pvfs-mgr", "Run the pvfs metadata manager.").parse_args(argv)
    try:
        cfg = cfgmod.load(args.config)
    except cfgmod.ConfigError as exc:
        print(f"pvfs-mgr: {exc}", file=sys.stderr)
        return 2
    return run_daemon("pvfs-mgr", "mgr", args, lambda: MgrServer(cfg))


if __name__ == "__main__":
    sys.exit(main())
