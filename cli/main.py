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

The groups are listed once, in the command table of ``pvfs.cli.commands`` (optional ones:
``mount``/``umount`` when ``pvfs.fuse`` can load, ``replay``/``trace`` from
``pvfs.traces.cli``); what the ``cmd_*`` modules share is in ``pvfs.cli.common``.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence
from typing import Any

from pvfs.cli.common import PROG, Handler, Parser, global_options
from pvfs.cli.output import CliError

# The subcommand groups: the command table of pvfs.cli.commands (one line per group).

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
    global_options(parser, suppress=False)
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(title="subcommands", metavar="COMMAND", parser_class=Parser)
    from pvfs.cli import commands  # here: it imports every cmd_* module, which import common

    for register in commands.CORE:
        register(sub)
    if everything or _command_of(argv) not in sub.choices:
        for register in commands.optional():
            register(sub)
        _registered.update(sub.choices)
    return parser


def _version() -> str:
    from pvfs import __version__

    return __version__


_registered: set[str] = set()


def has_command(name: str) -> bool:
    """Whether ``name`` is a registered subcommand (e.g. ``mount`` once the client exists)."""
    if not _registered:
        build_parser()
    return name in _registered


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


_terminated = False


def _terminate(signum: int, frame: Any) -> None:
    """SIGTERM as a Ctrl-C: through whatever SIGINT handler is active (trio's inside
    ``trio.run``, which delivers KeyboardInterrupt where trio can unwind)."""
    global _terminated
    _terminated = True
    handler = signal.getsignal(signal.SIGINT)
    if callable(handler):
        handler(signal.SIGINT, frame)
    raise KeyboardInterrupt  # SIGINT ignored (a background job of a script) or trio deferred it


def _interrupt_in(exc: BaseException | None, depth: int = 0) -> bool:
    """Whether a KeyboardInterrupt is inside ``exc``: its groups, causes or contexts."""
    if exc is None or depth > 20:
        return False
    if isinstance(exc, KeyboardInterrupt):
        return True
    if isinstance(exc, BaseExceptionGroup) and any(
            _interrupt_in(e, depth + 1) for e in exc.exceptions):
        return True
    return _interrupt_in(exc.__cause__ or exc.__context__, depth + 1)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser(argv, everything=False)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format=f"{PROG}: %(levelname)s %(name)s: %(message)s")
    func: Handler | None = getattr(args, "func", None)
    if func is None:
        parser.print_help(sys.stderr)
        return 2
    # SIGTERM unwinds like Ctrl-C, so a study's or benchmark's scratch cluster is stopped and
    # removed by its context manager instead of left running (`kill`, a CI timeout).
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _terminate)
    try:
        try:
            status = func(args)
        except (BaseExceptionGroup, RuntimeError) as exc:
            # A KeyboardInterrupt raised by our SIGTERM handler (SIGINT ignored) inside trio
            # reaches here wrapped: in a task, in the nurseries' exception groups; in trio's
            # own loop, as the cause of a TrioInternalError.
            if not _interrupt_in(exc):
                raise
            raise KeyboardInterrupt from exc
    except KeyboardInterrupt:
        if _terminated:
            sys.stderr.write(f"{PROG}: terminated\n")
            return 128 + signal.SIGTERM
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
