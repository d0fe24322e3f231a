"""``python -m pvfs.fuse [--config C] DIR [-o opts] [--foreground]`` (and ``-u DIR``)."""

from __future__ import annotations

import argparse
import sys

from .mount import mount, unmount
from .options import parse_options


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m pvfs.fuse", description="Mount a pvfs file system.")
    p.add_argument("--config", help="file-system config (default: $PVFS_CONFIG)")
    p.add_argument("-o", dest="options", action="append", default=[], metavar="OPTS",
                   help="mount options, comma separated (see docs/mount.md)")
    p.add_argument("-f", "--foreground", action="store_true", help="stay attached")
    p.add_argument("-u", "--unmount", action="store_true", help="unmount DIR instead")
    p.add_argument("dir", metavar="DIR")
    args = p.parse_args(argv)
    try:
        if args.unmount:
            unmount(args.dir)
            return 0
        return mount(args.config, args.dir, parse_options(args.options), args.foreground)
    except (OSError, ValueError) as exc:
        print(f"pvfs mount: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
