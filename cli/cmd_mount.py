"""``pvfs-admin mount`` and ``umount``: the FUSE client (``pvfs.fuse``), like mount(8).

``up --mount DIR`` calls :func:`mount_fs`; ``down`` calls :func:`unmount_all` first.
"""

from __future__ import annotations

import argparse

from pvfs.cli.common import PROG, add_command, load_config
from pvfs.cli.output import CliError
from pvfs.client.modes import COHERENCE_MODES

__all__ = ["mount_fs", "mounts_of", "register", "unmount_all"]


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "mount", help="mount the file system with the FUSE client",
                    func=cmd_mount, example=f"""\
{PROG} mount ~/pvfs
{PROG} mount ~/pvfs -o coherence=sync,cache_size=256M
{PROG} mount ~/pvfs -o direct_io,timeout=5 --foreground""",
                    description="Mount the file system at DIR. Returns once the mount answers; "
                    "the client\nruns in the background (SIGTERM or umount stops it). Options: "
                    f"coherence={'|'.join(COHERENCE_MODES)},\nblock_size, cache_size, cache=0, "
                    "direct_io, read_ahead_kb, attr_timeout, timeout, ...\n(see docs/mount.md).")
    p.add_argument("dir", metavar="DIR", help="an existing directory")
    p.add_argument("-o", dest="options", action="append", default=[], metavar="OPTS",
                   help="mount options, comma separated; may repeat")
    p.add_argument("--foreground", "-f", action="store_true",
                   help="serve in this process until unmounted (logs to stderr)")
    u = add_command(sub, "umount", help="unmount a pvfs mount (lazily if it is busy)",
                    func=cmd_umount, aliases=["unmount"], example=f"{PROG} umount ~/pvfs")
    u.add_argument("dir", metavar="DIR")


def cmd_mount(args: argparse.Namespace) -> int:
    return mount_fs(load_config(args), args.dir, args.options, foreground=args.foreground)


def mount_fs(cfg, directory: str, options: list[str] | None = None,
             foreground: bool = False) -> int:
    """Mount ``cfg``'s file system at ``directory``; 0, or 1 with the reason on stderr.

    Raises:
        CliError: bad options or mount point (status 2), or the mount failed to start.
    """
    from pvfs.fuse import mount, parse_options

    try:
        opts = parse_options(options or [])
        return mount(cfg.path, directory, opts, foreground=foreground)
    except ValueError as exc:
        raise CliError("mount", str(exc), status=2) from None
    except OSError as exc:
        raise CliError("mount", str(exc)) from None


def cmd_umount(args: argparse.Namespace) -> int:
    from pvfs.fuse import unmount

    try:
        unmount(args.dir)
    except OSError as exc:
        raise CliError("umount", exc.strerror or str(exc)) from None
    return 0


def mounts_of(cfg) -> list[dict]:
    """Running mounts of ``cfg``'s file system on this host (status dicts, with counters)."""
    from pvfs.fuse import list_mounts

    return [m for m in list_mounts() if m.get("config") == cfg.path]


def unmount_all(cfg) -> None:
    from pvfs.fuse import unmount

    for m in mounts_of(cfg):
        try:
            unmount(m["mountpoint"])
        except OSError:
            pass
