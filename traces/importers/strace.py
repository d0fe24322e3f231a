"""``strace -f -tt -e trace=desc`` output (optionally with ``-T`` and ``-o FILE``).

Lines look like one of::

    12345 10:00:00.123456 openat(AT_FDCWD, "/data/in", O_RDONLY) = 3
    [pid 12346] 10:00:00.123500 pread64(3, "..."..., 4096, 8192) = 4096 <0.000012>
    10:00:00.123600 write(4, "abc"..., 3) = 3

(the pid prefix comes from ``-o``/``-ff`` style or ``-f`` on a terminal; without ``-f`` it
is absent). Calls interrupted by another process' line are printed as ``read(3,
<unfinished ...>`` and later ``<... read resumed>"..", 100) = 100``; the importer joins them.

Understood calls: ``open``, ``openat``, ``creat``, ``close``, ``read``, ``write``, ``pread64``,
``pwrite64``, ``readv``, ``writev``, ``preadv``, ``pwritev``, ``lseek``, ``fsync``,
``fdatasync``, ``dup``, ``dup2``, ``dup3`` and ``fcntl(F_DUPFD)``. Failed calls (``= -1``) and
descriptors not opened in the trace (terminals, pipes, sockets) are skipped. The importer
keeps every descriptor's file position, so the records carry absolute offsets; the size
transferred is the return value. ``O_APPEND`` writes go to the largest end written so far.
Think time is the gap between the end of the process' previous call (start + ``-T``
duration when present) and the start of this one. Processes become ranks in order of first
appearance.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import IO

from pvfs.traces.format import Flag, Op, Record, Trace, TraceFormatError
from pvfs.traces.importers._common import Collector

_LINE = re.compile(
    r"^(?:\[pid\s+(?P<pid1>\d+)\]\s+|(?P<pid2>\d+)\s+)?"
    r"(?P<time>\d{1,2}:\d{2}:\d{2}(?:\.\d+)?)\s+(?P<rest>.*)$")
_CALL = re.compile(r"^(?P<name>\w+)\((?P<args>.*)\)\s+=\s+(?P<ret>-?\d+|\?)(?P<tail>.*)$")
_UNFINISHED = re.compile(r"^(?P<name>\w+)\((?P<args>.*?)\s*<unfinished \.\.\.>$")
_RESUMED = re.compile(r"^<\.\.\. (?P<name>\w+) resumed>(?P<args>.*)\)\s+=\s+"
                      r"(?P<ret>-?\d+|\?)(?P<tail>.*)$")
_DURATION = re.compile(r"<(\d+\.\d+)>\s*$")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"(?:\.\.\.)?')

_READS = {"read", "pread64", "readv", "preadv", "preadv2"}
_WRITES = {"write", "pwrite64", "writev", "pwritev", "pwritev2"}
_POSITIONED = {"pread64", "pwrite64", "preadv", "pwritev", "preadv2", "pwritev2"}


@dataclass
class _Fd:
    file: int
    pos: int = 0
    append: bool = False


def _seconds(stamp: str) -> float:
    h, m, s = stamp.split(":")
    return int(h) * 3600 + int(m) * 60 + float(s)


def _split_args(args: str) -> list[str]:
    """Top-level comma-separated arguments, strings and brackets kept whole."""
    args = _STRING.sub('""', args)
    out, depth, cur = [], 0, []
    for ch in args:
        if ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if cur:
        out.append("".join(cur).strip())
    return out


def _open_flags(text: str) -> int:
    names = set(text.split("|"))
    flags = 0
    if "O_RDWR" in names:
        flags |= Flag.RD | Flag.WR
    elif "O_WRONLY" in names:
        flags |= Flag.WR
    else:
        flags |= Flag.RD
    for name, bit in (("O_CREAT", Flag.CREAT), ("O_TRUNC", Flag.TRUNC), ("O_APPEND", Flag.APPEND),
                      ("O_EXCL", Flag.EXCL), ("O_SYNC", Flag.SYNC), ("O_DSYNC", Flag.SYNC)):
        if name in names:
            flags |= bit
    return flags


def import_strace(stream: IO[str], source: str = "strace") -> Trace:
    """Parse strace output (see the module docstring).

    Raises:
        TraceFormatError: when no line looks like strace output with ``-tt`` timestamps.
    """
    col = Collector(source)
    fds: dict[tuple[int, int], _Fd] = {}
    sizes: dict[int, int] = {}
    prev_end: dict[int, float] = {}
    unfinished: dict[tuple[int, str], str] = {}
    seen = 0
    for raw in stream:
        m = _LINE.match(raw.rstrip("\n"))
        if not m:
            continue
        seen += 1
        pid = int(m.group("pid1") or m.group("pid2") or 0)
        t = _seconds(m.group("time"))
        rest = m.group("rest")
        um = _UNFINISHED.match(rest)
        if um:
            unfinished[(pid, um.group("name"))] = um.group("args")
            continue
        rm = _RESUMED.match(rest)
        if rm:
            name = rm.group("name")
            args = unfinished.pop((pid, name), "") + rm.group("args")
            ret_text, tail = rm.group("ret"), rm.group("tail")
        else:
            cm = _CALL.match(rest)
            if not cm:
                continue
            name, args, ret_text, tail = cm.group("name"), cm.group("args"), cm.group("ret"), \
                cm.group("tail")
        if ret_text == "?" or int(ret_text) < 0:
            continue
        ret = int(ret_text)
        dm = _DURATION.search(tail)
        duration = float(dm.group(1)) if dm else 0.0
        rank = col.rank(pid)
        think = max(0.0, t - prev_end[rank]) if rank in prev_end else 0.0
        prev_end[rank] = t + duration
        argv = _split_args(args)
        _handle(col, fds, sizes, rank, think, name, argv, ret, args)
    if seen == 0:
        raise TraceFormatError("no strace lines with -tt timestamps found")
    return col.build(format="strace")


def _path_arg(args: str) -> str | None:
    m = _STRING.search(args)
    if not m:
        return None
    return m.group(0).rstrip(".").strip('"')


def _handle(col: Collector, fds: dict[tuple[int, int], _Fd], sizes: dict[int, int], rank: int,
            think: float, name: str, argv: list[str], ret: int, raw_args: str) -> None:
    if name in ("open", "openat", "creat"):
        path = _path_arg(raw_args)
        if path is None:
            return
        if name == "creat":
            flags = Flag.WR | Flag.CREAT | Flag.TRUNC
        else:
            flags = _open_flags(argv[2] if name == "openat" and len(argv) > 2 else
                                argv[1] if len(argv) > 1 else "O_RDONLY")
        if "O_DIRECTORY" in raw_args:
            return
        fid = col.file(path)
        if flags & Flag.TRUNC:
            sizes[fid] = 0
        fds[(rank, ret)] = _Fd(fid, 0, bool(flags & Flag.APPEND))
        col.add(Record(rank, think, Op.OPEN, fid, 0, 0, int(flags & ~Flag.APPEND)))
        return
    try:
        fd = int(argv[0]) if argv else -1
    except ValueError:
        return
    entry = fds.get((rank, fd))
    if entry is None:
        return
    if name == "close":
        del fds[(rank, fd)]
        if not any(e.file == entry.file for (r, _), e in fds.items() if r == rank):
            col.add(Record(rank, think, Op.CLOSE, entry.file, 0, 0))
        return
    if name in ("dup", "dup2", "dup3") or (name == "fcntl" and len(argv) > 1
                                           and argv[1].startswith("F_DUPFD")):
        fds[(rank, ret)] = entry  # shares the file position, as dup does
        return
    if name == "lseek":
        entry.pos = ret
        col.add(Record(rank, think, Op.SEEK, entry.file, ret, 0))
        return
    if name in ("fsync", "fdatasync"):
        col.add(Record(rank, think, Op.FSYNC, entry.file, 0, 0))
        return
    if name in _READS or name in _WRITES:
        write = name in _WRITES
        if name in _POSITIONED:
            try:
                offset = int(argv[-1] if name in ("pread64", "pwrite64") else argv[3])
            except (ValueError, IndexError):
                return
        else:
            offset = sizes.get(entry.file, 0) if write and entry.append else entry.pos
            entry.pos = offset + ret
        if ret == 0:
            return
        if write:
            sizes[entry.file] = max(sizes.get(entry.file, 0), offset + ret)
        col.add(Record(rank, think, Op.WRITE if write else Op.READ, entry.file, offset, ret))
