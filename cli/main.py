"""``pvfs-admin``: the root parser, the subcommand registry and the error policy.

Each group of subcommands lives in a ``cmd_*`` module with ``register(sub)``, which adds its
parsers through ``add_command`` (so every subcommand gets the global options, an example in
its ``--help`` and a handler). A handler takes the parsed arguments and returns an exit
status (None means 0). Failures end in one line on stderr, ``pvfs-admin: <what>: <why>``:

====  ==========================================================
 0    success
 1    the operation failed (daemon down, file missing, fsck found problems, ...)
 2    usage error (unknown option, bad value)
====  ==========================================================

Optional groups join when their part is installed: ``mount``/``umount`` (``cmd_mount``, when
``pvfs.fuse`` imports) and ``replay``/``trace`` (``pvfs.traces.cli.add_subcommands``).
"""

from __future__ import annotations

import argparse
import errno
import importlib
import importlib.util
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from pvfs.cli.output import CliError

if TYPE_CHECKING:
    from pvfs.client.fs import FileSystem
    from pvfs.config import Config

PROG = "pvfs-admin"
Handler = Callable[[argparse.Namespace], "int | None"]

# Groups always present, in the order `--help` lists them.
GROUPS = ("cmd_cluster", "cmd_files", "cmd_stripe", "cmd_admin", "cmd_ops", "cmd_security",
          "cmd_cache", "cmd_calibrate", "cmd_study", "cmd_collective")

DESCRIPTION = """\
Administer a pvfs parallel file system: start and stop its daemons, look at their state,
move files in and out, set striping, change the I/O scheduler, check consistency.

Paths inside pvfs are written pvfs:/a/b (plain /a/b is accepted where no local path fits).
The config is --config FILE, else $PVFS_CONFIG, else the one `pvfs-admin init` wrote last."""

EPILOG = """\
examples:
  pvfs-admin init --dir /srv/pvfs && pvfs-admin up
  pvfs-admin status
  pvfs-admin cp big.dat pvfs:/data/
  pvfs-admin --json df | jq .total

exit status: 0 ok, 1 failed, 2 usage error"""


class Parser(argparse.ArgumentParser):
    """argparse with one-line usage errors and exit status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"{PROG}: {self.prog.removeprefix(PROG).strip() or 'usage'}: "
                         f"{message} (see {self.prog} --help)\n")
        sys.exit(2)


def _global_options(parser: argparse.ArgumentParser, suppress: bool) -> None:
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
_global_options(_COMMON, suppress=True)


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


def _command_of(argv: Sequence[str] | None) -> str | None:
    """The subcommand name in ``argv`` (None if none is given), found without parsing."""
    args = list(sys.argv[1:] if argv is None else argv)
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--config":
            i += 2
            continue
        if not a.startswith("-"):
            return a
        i += 1
    return None


def build_parser(argv: Sequence[str] | None = None, everything: bool = True) -> Parser:
    """The whole parser; with ``everything=False`` the optional groups are added only when
    ``argv`` names no core subcommand (they are slow to import and rarely wanted)."""
    parser = Parser(prog=PROG, description=DESCRIPTION, epilog=EPILOG,
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    _global_options(parser, suppress=False)
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(title="subcommands", metavar="COMMAND", parser_class=Parser)
    for group in GROUPS:
        importlib.import_module(f"pvfs.cli.{group}").register(sub)
    if everything or _command_of(argv) not in sub.choices:
        _register_optional(sub)
        _registered.update(sub.choices)
    return parser


def _version() -> str:
    from pvfs import __version__

    return __version__


def _register_optional(sub: argparse._SubParsersAction) -> None:
    """Subcommands of parts that may be absent: the mount client and the trace tools."""
    # Found, not imported: loading the FUSE client costs every command a fifth of a second.
    if _importable("pyfuse3") and _importable("pvfs.fuse"):
        try:
            mount = importlib.import_module("pvfs.cli.cmd_mount")
        except ImportError:
            pass
        else:
            mount.register(sub)
    try:
        traces = importlib.import_module("pvfs.traces.cli")
    except ImportError:
        return
    add = getattr(traces, "add_subcommands", None)
    if callable(add):
        add(sub)


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


_registered: set[str] = set()


def has_command(name: str) -> bool:
    """Whether ``name`` is a registered subcommand (e.g. ``mount`` once the client exists)."""
    if not _registered:
        build_parser()
    return name in _registered


# ---------------------------------------------------------------------- shared by commands
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


def pvfs_path(text: str) -> str:
    """``pvfs:/a/b`` or ``/a/b`` -> ``/a/b`` (normalised, absolute)."""
    import posixpath

    path = text.removeprefix("pvfs:")
    if not path.startswith("/"):
        path = "/" + path
    return posixpath.normpath(path).replace("//", "/")


# ---------------------------------------------------------------------- entry point
def _describe(exc: BaseException, args: argparse.Namespace | None) -> tuple[str, str]:
    """(what, why) of an exception that ends the command."""
    from pvfs.config import ConfigError

    command = getattr(args, "command", None) or "error"
    if isinstance(exc, CliError):
        return exc.what, exc.why
    if isinstance(exc, ConfigError):
        return "config", str(exc)
    if isinstance(exc, OSError):
        why = exc.strerror or str(exc)
        if exc.filename is not None:
            name = exc.filename if isinstance(exc.filename, str) else os.fsdecode(exc.filename)
            if getattr(args, "pvfs_names", False) and name.startswith("/"):
                name = "pvfs:" + name
            return f"{command} {name}", why
        return command, why
    if isinstance(exc, RuntimeError):
        return command, str(exc)
    return command, f"{type(exc).__name__}: {exc}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser(argv, everything=False)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format=f"{PROG}: %(levelname)s %(name)s: %(message)s")
    func: Handler | None = getattr(args, "func", None)
    if func is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        status = func(args)
    except KeyboardInterrupt:
        sys.stderr.write(f"{PROG}: interrupted\n")
        return 130
    except BrokenPipeError:
        # The reader went away (`pvfs-admin ls | head`): not an error of ours.
        _silence_stdout()
        return 0
    except (CliError, OSError, ValueError, RuntimeError) as exc:
        what, why = _describe(exc, args)
        lines = why.splitlines() or [""]
        sys.stderr.write(f"{PROG}: {what}: {lines[0]}\n")
        if args.verbose and len(lines) > 1:
            sys.stderr.write("\n".join(lines[1:]) + "\n")
        return exc.status if isinstance(exc, CliError) else 1
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        _silence_stdout()
    return int(status or 0)


def _silence_stdout() -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def run(argv: Sequence[str] | None = None) -> Any:
    """``sys.exit(main())`` for the console script and ``python -m``."""
    sys.exit(main(argv))


if __name__ == "__main__":
    # Import under the package name so every module sees one copy of this one.
    from pvfs.cli.main import run as _run

    _run()
