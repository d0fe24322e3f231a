"""Importers: traces users already have, turned into pvfs traces (SPEC §7).

- ``mambo``: MAMBO/UMD ASCII traces (the discretionary-caching paper's LU, Cholesky, Titan,
  Mining, Pgrep and DB2 traces);
- ``darshan``: ``darshan-dxt-parser`` text output;
- ``strace``: ``strace -f -tt -e trace=desc`` output.

:func:`load_any` reads a pvfs trace or any of these, detecting the format from the content.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import IO

from pvfs.traces import format as fmt
from pvfs.traces.format import Trace, TraceFormatError
from pvfs.traces.importers.darshan import import_darshan
from pvfs.traces.importers.mambo import import_mambo
from pvfs.traces.importers.strace import import_strace

IMPORTERS: dict[str, Callable[..., Trace]] = {
    "mambo": import_mambo,
    "darshan": import_darshan,
    "strace": import_strace,
}

_STRACE = re.compile(r"^(?:\[pid\s+\d+\]\s+|\d+\s+)?\d{1,2}:\d{2}:\d{2}(?:\.\d+)?\s+\w+\(")
_MAMBO = re.compile(r"^\s*\d+\s+\d+\s+\d+\s*$")


def detect(head: str) -> str | None:
    """The format of a trace from its first few KiB of text (None if unknown)."""
    if head.startswith(fmt.TEXT_MAGIC):
        return "pvfs"
    if "# DXT," in head or re.search(r"^\s*X_(POSIX|MPIIO)\s", head, re.MULTILINE):
        return "darshan"
    lines = [ln for ln in head.splitlines() if ln.strip()]
    if lines and any(_STRACE.match(ln) for ln in lines[:20]):
        return "strace"
    if lines and _MAMBO.match(lines[0]):
        return "mambo"
    return None


def import_stream(stream: IO[str], kind: str, source: str = "-") -> Trace:
    """Import text in format ``kind``.

    Raises:
        ValueError: for an unknown format.
    """
    try:
        func = IMPORTERS[kind]
    except KeyError:
        raise ValueError(f"unknown trace format {kind!r} ({', '.join(IMPORTERS)})") from None
    return func(stream, source=source)


def load_any(path: str | os.PathLike[str], kind: str | None = None) -> Trace:
    """Read a pvfs trace (either form) or import a foreign one.

    Raises:
        TraceFormatError: when the format cannot be detected or the file is malformed.
    """
    with open(path, "rb") as f:
        head_bytes = f.read(8192)
    if kind in (None, "pvfs"):
        if head_bytes.startswith(fmt.TEXT_MAGIC.encode()) or (kind == "pvfs"):
            return fmt.load(path)
        try:
            head = head_bytes.decode("utf-8")
        except UnicodeDecodeError:
            return fmt.load(path)  # binary: the msgpack form
        kind = detect(head)
        if kind is None:
            raise TraceFormatError(f"{path}: unknown trace format (use --format)")
        if kind == "pvfs":
            return fmt.load(path)
    with open(path, encoding="utf-8", errors="replace") as ft:
        return import_stream(ft, kind, source=os.path.basename(str(path)))


__all__ = ["IMPORTERS", "detect", "import_stream", "load_any"]
