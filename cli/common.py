"""What every ``pvfs-admin`` subcommand module shares: the program name, ``add_command``
(global options, ``--help`` with an example, the handler), argument types, and the
connections to the file system of ``--config``.

A ``cmd_*`` module imports from here (never from ``pvfs.cli.main``, which imports the
modules through the command table of ``pvfs.cli.commands``).
"""

from __future__ import annotations

import argparse
import errno
import posixpath
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from pvfs.cli.output import CliError, emit
from pvfs.units import parse_size

if TYPE_CHECKING:
    from pvfs.client.fs import FileSystem
    from pvfs.config import Config

__all__ = ["PROG", "Handler", "Parser", "add_command", "client", "connect", "finish_run",
           "global_options", "load_config", "mount_available", "positive_size_arg", "pvfs_path",
           "size_arg"]

PROG = "pvfs-admin"
Handler = Callable[[argparse.Namespace], "int | None"]


class Parser(argparse.ArgumentParser):
    """argparse with one-line usage errors and exit status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"{PROG}: {self.prog.removeprefix(PROG).strip() or 'usage'}: "
                         f"{message} (see {self.prog} --help)\n")
        sys.exit(2)


def global_options(parser: argparse.ArgumentParser, suppress: bool) -> None:
    """--config/--json/--verbose; on subcommands with SUPPRESS so a value given before the
    subcommand name is not overwritten by the subparser's default."""
    d = argparse.SUPPRESS if suppress else None
    parser.add_argument("--config", metavar="FILE", default=d,
                        help="file-system config (default: $PVFS_CONFIG, else the last `init`)")
    parser.add_argument("--json", action="store_true", default=d if suppress else False,
                        help="print JSON for scripts instead of tables")
    parser.add_argument("-v", "--verbose", action="store_true",
                        default=d if suppress else False, help="log debug messages to stderr")


_COMMON = Parser(add_help=False)
global_options(_COMMON, suppress=True)


def add_command(sub: argparse._SubParsersAction, name: str, *, help: str, example: str,
                func: Handler, description: str | None = None, aliases: Sequence[str] = (),
                pvfs_names: bool = False) -> argparse.ArgumentParser:
    """Add one subcommand: global options, ``--help`` text with ``example``, handler.

    ``pvfs_names``: the file names in the command's errors are pvfs paths (shown ``pvfs:/x``).
    """
    parser = sub.add_parser(
        name, help=help, aliases=list(aliases), parents=[_COMMON],
        description=description or (help[0].upper() + help[1:] + "."),
        epilog="example:\n" + "\n".join("  " + line for line in example.strip().splitlines()),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.set_defaults(func=func, command=name, pvfs_names=pvfs_names)
    return parser


# ---------------------------------------------------------------------- argument types
def size_arg(text: str) -> int:
    """argparse type for byte counts with k/M/G suffixes (the rule of ``pvfs.units``)."""
    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def positive_size_arg(text: str) -> int:
    """``size_arg`` of at least one byte (chunk and buffer sizes)."""
    n = size_arg(text)
    if n < 1:
        raise argparse.ArgumentTypeError("must be at least 1 byte")
    return n


def pvfs_path(text: str) -> str:
    """``pvfs:/a/b`` or ``/a/b`` -> ``/a/b`` (normalised, absolute)."""
    path = text.removeprefix("pvfs:")
    if not path.startswith("/"):
        path = "/" + path
    return posixpath.normpath(path).replace("//", "/")


# ---------------------------------------------------------------------- the file system
def load_config(args: argparse.Namespace) -> Config:
    from pvfs.config import load

    return load(getattr(args, "config", None))


def connect(args: argparse.Namespace) -> FileSystem:
    """A native-API connection to the file system of ``--config`` (the manager must answer)."""
    from pvfs.client.fs import connect as _connect

    cfg = load_config(args)
    try:
        return _connect(cfg)
    except OSError as exc:
        hint = "" if exc.errno == errno.EACCES else f" (is the file system up? try `{PROG} status`)"
        raise CliError(f"manager {cfg.manager.address}", f"{exc.strerror or exc}{hint}") from None


def client(args: argparse.Namespace) -> FileSystem:
    """A connection that does not need the manager (for per-daemon calls)."""
    from pvfs.client.fs import FileSystem

    return FileSystem(load_config(args))


def mount_available() -> bool:
    """Whether the mount client can load here (``mount``/``umount`` are registered then).

    Found, not imported: loading the FUSE client costs every command a fifth of a second."""
    import importlib.util

    try:
        return all(importlib.util.find_spec(m) is not None for m in ("pyfuse3", "pvfs.fuse"))
    except (ImportError, ValueError):
        return False


def finish_run(args: argparse.Namespace, out: dict, render: Callable[[dict], str],
               plot: Callable[[], Callable[[dict, str], object]] | None = None) -> int:
    """The end every study and bench command with ``-o/--output`` and ``--plot`` shares: the
    command line recorded in the result, the JSON written, the plot drawn and the result
    shown (a table, or ``--json``). ``plot`` returns the drawing function: it is imported
    only when ``--plot`` asks for it (matplotlib is slow to load)."""
    import json

    out["command"] = " ".join([PROG, *sys.argv[1:]])
    if args.output:
        with open(args.output, "w") as fh:
            json.dump(out, fh, indent=1)
    if args.plot and plot is not None:
        plot()(out, args.plot)
    emit(args.json, out, render)
    return 0
