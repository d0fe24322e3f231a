"""What ``pvfs-admin`` prints: aligned tables for people, JSON for scripts, sizes, progress.

Every read-only subcommand builds one plain data structure (dicts, lists, numbers, strings)
and hands it to ``emit``: with ``--json`` it is printed as JSON exactly, otherwise a renderer
turns it into text. A progress bar appears only when stderr is a terminal, so pipes and logs
never fill with carriage returns.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any, Self, TextIO

from pvfs.tables import cell as _cell
from pvfs.tables import table
from pvfs.units import format_size, parse_size

__all__ = ["CliError", "Progress", "emit", "format_mode", "format_time_ns", "human_duration",
           "human_size", "key_values", "note", "parse_size", "progress_wanted", "table",
           "to_json"]

class CliError(Exception):
    """A failure the CLI reports as ``pvfs-admin: <what>: <why>`` with an exit status."""

    def __init__(self, what: str, why: str, status: int = 1) -> None:
        super().__init__(f"{what}: {why}")
        self.what = what
        self.why = why
        self.status = status


# ---------------------------------------------------------------------- sizes and times
# Sizes follow the one rule of pvfs.units; the CLI's tables call the formatter human_size.
human_size = format_size


def human_duration(seconds: float | None) -> str:
    """``93784`` -> ``"1d 2h"``, ``75`` -> ``"1m 15s"``, ``4.2`` -> ``"4.2s"``."""
    if seconds is None:
        return "-"
    s = float(seconds)
    if s < 60:
        return f"{s:.1f}s"
    m, sec = divmod(int(s), 60)
    h, m = divmod(m, 60)
    d, h = divmod(h, 24)
    if d:
        return f"{d}d {h}h"
    if h:
        return f"{h}h {m}m"
    return f"{m}m {sec}s"


def format_mode(mode: int) -> str:
    """``0o100644`` -> ``"-rw-r--r--"`` (like ``ls -l``)."""
    import stat

    return stat.filemode(mode)


def format_time_ns(ns: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ns / 1e9))


# ---------------------------------------------------------------------- tables
def key_values(pairs: Iterable[tuple[str, Any]]) -> str:
    """``key: value`` lines with the values aligned (for one object, like ``stat``)."""
    items = [(str(k), _cell(v)) for k, v in pairs]
    width = max((len(k) for k, _ in items), default=0)
    return "\n".join(f"{k + ':':<{width + 1}} {v}" for k, v in items)


# ---------------------------------------------------------------------- emitting
def to_json(data: Any) -> str:
    return json.dumps(data, indent=2, sort_keys=False, default=_json_default)


def _json_default(obj: Any) -> Any:
    if isinstance(obj, bytes):
        return obj.decode("utf-8", "backslashreplace")
    if hasattr(obj, "to_dict"):
        return obj.to_dict()
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    raise TypeError(f"cannot write {type(obj).__name__} as JSON")


def emit(as_json: bool, data: Any, render: Callable[[Any], str] | None = None,
         out: TextIO | None = None) -> None:
    """Print ``data`` as JSON or through ``render`` (nothing if it renders to "")."""
    out = out or sys.stdout
    if as_json:
        out.write(to_json(data) + "\n")
        return
    text = render(data) if render else to_json(data)
    if text:
        out.write(text.rstrip("\n") + "\n")


def note(message: str) -> None:
    """A line for people on stderr (kept out of ``--json`` output)."""
    sys.stderr.write(message.rstrip("\n") + "\n")


# ---------------------------------------------------------------------- progress
def progress_wanted(force: bool | None = None, stream: TextIO | None = None) -> bool:
    """Whether to draw a bar: ``force`` if given, else only when stderr is a terminal."""
    if force is not None:
        return force
    stream = stream or sys.stderr
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


class Progress:
    """Byte progress of a copy: a tqdm bar on a terminal, nothing otherwise.

    Use as a context manager; ``update(n)`` after every chunk, ``describe(name)`` per file.
    """

    def __init__(self, total: int, enabled: bool, desc: str = "") -> None:
        self.done = 0
        self._bar = None
        if enabled:
            import shutil

            from tqdm import tqdm

            # A fresh pty may report a 0x0 window, which makes tqdm draw nothing at all;
            # shutil falls back to $COLUMNS/$LINES, then 80x24.
            size = shutil.get_terminal_size()
            self._bar = tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024,
                             desc=desc or None, file=sys.stderr,
                             ncols=max(40, min(size.columns, 160)), nrows=max(2, size.lines),
                             leave=True, miniters=1)

    @property
    def enabled(self) -> bool:
        return self._bar is not None

    def describe(self, desc: str) -> None:
        if self._bar is not None:
            self._bar.set_description_str(_shorten(desc, 30), refresh=False)

    def update(self, n: int) -> None:
        self.done += n
        if self._bar is not None:
            self._bar.update(n)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _shorten(text: str, width: int) -> str:
    return text if len(text) <= width else "…" + text[-(width - 1):]
