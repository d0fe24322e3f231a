"""File subcommands over the native API: ``ls``, ``stat``, ``mkdir``, ``rm``, ``mv``, ``cp``.

Paths inside pvfs are written ``pvfs:/a/b``. ``ls``, ``stat``, ``mkdir``, ``rm`` and ``mv`` only
ever name pvfs paths, so the prefix is optional there; ``cp`` copies local <-> pvfs and
pvfs <-> pvfs and needs it to tell the sides apart (like ``pvfs2-cp``). Data moves in large
chunks (8 MiB by default) straight to and from the I/O daemons.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import posixpath
import stat as statmod
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from pvfs.cli.common import PROG, add_command, connect, positive_size_arg, pvfs_path
from pvfs.cli.output import (
    CliError,
    Progress,
    emit,
    format_mode,
    format_time_ns,
    human_size,
    key_values,
    progress_wanted,
    table,
)
from pvfs.client.attrs import Stat
from pvfs.client.fs import FileSystem

CHUNK = 8 << 20


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "ls", pvfs_names=True, help="list directories inside pvfs", func=cmd_ls, example=f"""\
{PROG} ls pvfs:/
{PROG} ls -lR pvfs:/data
{PROG} ls --json pvfs:/data | jq '.[].entries[].name'""")
    p.add_argument("paths", nargs="*", default=["pvfs:/"], metavar="PATH")
    p.add_argument("-l", "--long", action="store_true",
                   help="mode, links, owner, size, stripe, time")
    p.add_argument("-R", "--recursive", action="store_true", help="list subdirectories too")
    p.add_argument("-d", "--directory", action="store_true",
                   help="list directories themselves, not their contents")

    p = add_command(sub, "stat", pvfs_names=True, help="attributes and distribution of pvfs paths",
                    func=cmd_stat, example=f"{PROG} stat pvfs:/data/out.dat")
    p.add_argument("paths", nargs="+", metavar="PATH")

    p = add_command(sub, "mkdir", pvfs_names=True, help="create directories inside pvfs", func=cmd_mkdir,
                    example=f"{PROG} mkdir -p pvfs:/runs/2024/a")
    p.add_argument("paths", nargs="+", metavar="PATH")
    p.add_argument("-p", "--parents", action="store_true",
                   help="create missing parents; no error if the directory exists")
    p.add_argument("-m", "--mode", type=lambda s: int(s, 8), default=0o777, metavar="MODE",
                   help="permission bits in octal before the umask (default: 777)")

    p = add_command(sub, "rm", pvfs_names=True, help="remove files (and with -r directories) inside pvfs",
                    func=cmd_rm, example=f"""\
{PROG} rm pvfs:/data/old.dat
{PROG} rm -r pvfs:/runs/2023""")
    p.add_argument("paths", nargs="+", metavar="PATH")
    p.add_argument("-r", "-R", "--recursive", action="store_true",
                   help="remove directories and their contents")
    p.add_argument("-f", "--force", action="store_true", help="ignore paths that do not exist")

    p = add_command(sub, "mv", pvfs_names=True, help="rename or move inside pvfs (atomic)", func=cmd_mv,
                    example=f"""\
{PROG} mv pvfs:/data/a.dat pvfs:/data/b.dat
{PROG} mv pvfs:/data/a.dat pvfs:/archive/      # into a directory""")
    p.add_argument("src", metavar="SRC")
    p.add_argument("dst", metavar="DST")

    p = add_command(sub, "cp", help="copy local <-> pvfs and pvfs <-> pvfs, with progress",
                    func=cmd_cp, example=f"""\
{PROG} cp big.dat pvfs:/data/          # local -> pvfs
{PROG} cp pvfs:/data/big.dat /tmp/     # pvfs -> local
{PROG} cp -r results/ pvfs:/runs/r1   # a tree
{PROG} cp pvfs:/a pvfs:/b              # inside pvfs""")
    p.add_argument("sources", nargs="+", metavar="SRC")
    p.add_argument("dst", metavar="DST")
    p.add_argument("-r", "-R", "--recursive", action="store_true", help="copy directories")
    p.add_argument("--chunk", type=positive_size_arg, default=CHUNK, metavar="BYTES",
                   help="bytes per read/write (default: 8M)")
    p.add_argument("--progress", dest="progress", action="store_const", const=True,
                   default=None, help="draw a progress bar even when stderr is no terminal")
    p.add_argument("--no-progress", dest="progress", action="store_const", const=False,
                   help="never draw a progress bar")


# ---------------------------------------------------------------------- ls / stat
def _entry(name: str, st: Stat | None, path: str) -> dict:
    d = {"name": name, "path": path}
    if st is not None:
        d.update(st.to_dict())
    return d


def _walk(fs: FileSystem, path: str, recursive: bool) -> Iterator[tuple[str, list[dict]]]:
    entries = sorted(fs.scandir(path), key=lambda e: e[0])
    yield path, [_entry(n, st, posixpath.join(path, n)) for n, st in entries]
    if recursive:
        for name, st in entries:
            if st is not None and st.type == "dir":
                yield from _walk(fs, posixpath.join(path, name), True)


def cmd_ls(args: argparse.Namespace) -> int:
    out: list[dict] = []
    with connect(args) as fs:
        for raw in args.paths:
            path = pvfs_path(raw)
            st = fs.lstat(path)
            if st.type != "dir" or args.directory:
                out.append({"path": path, "entries": [_entry(posixpath.basename(path) or "/",
                                                              st, path)], "listing": False})
                continue
            for d, entries in _walk(fs, path, args.recursive):
                out.append({"path": d, "entries": entries, "listing": True})
    multi = len(out) > 1
    emit(args.json, out, lambda blocks: "\n\n".join(
        (f"pvfs:{b['path']}:\n" if multi and b["listing"] else "") + _render_ls(b, args.long)
        for b in blocks))
    return 0


def _render_ls(block: dict, long: bool) -> str:
    entries = block["entries"]
    if not long:
        return "\n".join(e["name"] + ("/" if e.get("type") == "dir" else "") for e in entries)
    rows = []
    for e in entries:
        stripe = e.get("stripe")
        rows.append([format_mode(e["mode"]), e["nlink"], e["uid"], e["gid"], e["size"],
                     f"{stripe[0]}:{stripe[1]}:{human_size(stripe[2]).replace(' ', '')}"
                     if stripe and e["type"] == "file" else "-",
                     format_time_ns(e["mtime_ns"]), e["name"]])
    total = f"total {len(entries)}\n" if block["listing"] else ""
    return total + table(rows, ["mode", "links", "uid", "gid", "size", "stripe", "modified",
                                "name"], right=[1, 4]).split("\n", 1)[-1] if rows else total.strip()


def cmd_stat(args: argparse.Namespace) -> int:
    out = []
    with connect(args) as fs:
        for raw in args.paths:
            path = pvfs_path(raw)
            d = _entry(posixpath.basename(path) or "/", fs.lstat(path), path)
            if d["type"] == "symlink":
                d["target"] = fs.readlink(path)
            if d["type"] == "dir":
                default = fs.getstripe(path)
                d["default_stripe"] = default.to_wire() if default else None
            out.append(d)
    emit(args.json, out if len(out) > 1 else out[0], lambda data: "\n\n".join(
        _render_stat(d) for d in (data if isinstance(data, list) else [data])))
    return 0


def _render_stat(d: dict) -> str:
    pairs: list[tuple[str, object]] = [
        ("path", "pvfs:" + d["path"]), ("type", d["type"]), ("inode", d["ino"]),
        ("size", f"{d['size']} ({human_size(d['size'])})"),
        ("mode", f"{d['mode'] & 0o7777:04o} ({format_mode(d['mode'])})"), ("links", d["nlink"]),
        ("uid", d["uid"]), ("gid", d["gid"]), ("accessed", format_time_ns(d["atime_ns"])),
        ("modified", format_time_ns(d["mtime_ns"])), ("changed", format_time_ns(d["ctime_ns"]))]
    if d.get("stripe") and d["type"] == "file":
        b, pc, ss = d["stripe"]
        pairs.append(("stripe", f"base {b}, pcount {pc}, ssize {ss} ({human_size(ss)})"))
    if d["type"] == "dir":
        s = d.get("default_stripe")
        pairs.append(("default stripe", f"base {s[0]}, pcount {s[1]}, ssize {s[2]}" if s
                      else "none (file-system default)"))
    if "target" in d:
        pairs.append(("target", d["target"]))
    return key_values(pairs)


# ---------------------------------------------------------------------- mkdir / rm / mv
def cmd_mkdir(args: argparse.Namespace) -> int:
    with connect(args) as fs:
        for raw in args.paths:
            path = pvfs_path(raw)
            try:
                if args.parents:
                    fs.makedirs(path, args.mode, exist_ok=True)
                else:
                    fs.mkdir(path, args.mode)
            except OSError as exc:
                raise OSError(exc.errno, exc.strerror, path) from None
    return 0


def cmd_rm(args: argparse.Namespace) -> int:
    with connect(args) as fs:
        for raw in args.paths:
            path = pvfs_path(raw)
            if path == "/":
                raise CliError("rm pvfs:/", "refusing to remove the root directory")
            try:
                st = fs.lstat(path)
            except FileNotFoundError:
                if args.force:
                    continue
                raise OSError(2, "No such file or directory", "pvfs:" + path) from None
            if st.type == "dir":
                if not args.recursive:
                    raise CliError(f"rm pvfs:{path}", "is a directory (use -r)")
                _remove_tree(fs, path)
            else:
                fs.unlink(path)
    return 0


def _remove_tree(fs: FileSystem, path: str) -> None:
    for name, st in fs.scandir(path):
        child = posixpath.join(path, name)
        if st is not None and st.type == "dir":
            _remove_tree(fs, child)
        else:
            fs.unlink(child)
    fs.rmdir(path)


def cmd_mv(args: argparse.Namespace) -> int:
    src, dst = pvfs_path(args.src), pvfs_path(args.dst)
    with connect(args) as fs:
        try:
            if fs.stat(dst).type == "dir":
                dst = posixpath.join(dst, posixpath.basename(src))
        except FileNotFoundError:
            pass
        try:
            fs.rename(src, dst)
        except OSError as exc:
            raise CliError(f"mv pvfs:{src} pvfs:{dst}", exc.strerror or str(exc)) from None
    return 0


# ---------------------------------------------------------------------- cp
@dataclass(frozen=True)
class Loc:
    """One side of a copy: a pvfs path or a local one."""

    path: str
    pvfs: bool

    @classmethod
    def parse(cls, text: str) -> Loc:
        if text.startswith("pvfs:"):
            return cls(pvfs_path(text), True)
        return cls(os.path.abspath(os.path.expanduser(text)), False)

    def __str__(self) -> str:
        return f"pvfs:{self.path}" if self.pvfs else self.path

    def join(self, name: str) -> Loc:
        return Loc((posixpath if self.pvfs else os.path).join(self.path, name), self.pvfs)

    def basename(self) -> str:
        return (posixpath if self.pvfs else os.path).basename(self.path.rstrip("/")) or "/"


def _kind(fs: FileSystem, loc: Loc) -> tuple[str | None, int, int]:
    """(type or None if absent, size, permission bits)."""
    try:
        if loc.pvfs:
            st = fs.stat(loc.path)
            return st.type, st.st_size, st.st_mode & 0o7777
        st = os.stat(loc.path)
    except FileNotFoundError:
        return None, 0, 0
    if statmod.S_ISDIR(st.st_mode):
        return "dir", 0, st.st_mode & 0o7777
    return "file", st.st_size, st.st_mode & 0o7777


def _plan(fs: FileSystem, src: Loc, dst: Loc, recursive: bool,
          out: list[tuple[Loc, Loc, int, int]], dirs: list[Loc]) -> None:
    """Files (src, dst, size, mode) and directories to create, in copy order."""
    kind, size, mode = _kind(fs, src)
    if kind is None:
        raise OSError(2, "No such file or directory", str(src))
    if kind == "file":
        out.append((src, dst, size, mode))
        return
    if kind != "dir":
        raise CliError(f"cp {src}", f"cannot copy a {kind}")
    if not recursive:
        raise CliError(f"cp {src}", "is a directory (use -r)")
    dirs.append(dst)
    if src.pvfs:
        names = sorted(fs.listdir(src.path))
    else:
        names = sorted(os.listdir(src.path))
    for name in names:
        _plan(fs, src.join(name), dst.join(name), recursive, out, dirs)


def cmd_cp(args: argparse.Namespace) -> int:
    sources = [Loc.parse(s) for s in args.sources]
    dst = Loc.parse(args.dst)
    if not dst.pvfs and not any(s.pvfs for s in sources):
        raise CliError("cp", "neither side is inside pvfs (write pvfs:/path)", status=2)
    with connect(args) as fs:
        dst_kind = _kind(fs, dst)[0]
        if len(sources) > 1 and dst_kind != "dir":
            raise CliError(f"cp {dst}", "copying several sources needs an existing directory")
        files: list[tuple[Loc, Loc, int, int]] = []
        dirs: list[Loc] = []
        for src in sources:
            target = dst.join(src.basename()) if dst_kind == "dir" else dst
            if src == target:
                raise CliError(f"cp {src}", "source and destination are the same file")
            _plan(fs, src, target, args.recursive, files, dirs)
        total = sum(size for *_, size, _ in files)
        for d in dirs:
            _makedir(fs, d)
        with Progress(total, progress_wanted(args.progress), "copying") as bar:
            for src, target, _size, mode in files:
                bar.describe(src.basename())
                try:
                    _copy_file(fs, src, target, mode, args.chunk, bar)
                except OSError as exc:
                    raise CliError(f"cp {src} {target}", exc.strerror or str(exc)) from None
    if args.json:
        emit(True, {"files": len(files), "directories": len(dirs), "bytes": total,
                    "copied": [[str(s), str(t)] for s, t, *_ in files]})
    return 0


def _makedir(fs: FileSystem, d: Loc) -> None:
    if d.pvfs:
        fs.makedirs(d.path, exist_ok=True)
    else:
        os.makedirs(d.path, exist_ok=True)


def _copy_file(fs: FileSystem, src: Loc, dst: Loc, mode: int, chunk: int,
               bar: Progress) -> None:
    """Copy one file in ``chunk``-byte pieces, reading piece i+1 while piece i is written
    (two buffers, one writer thread: both sides release the GIL while they wait)."""
    with contextlib.ExitStack() as stack:
        if src.pvfs:
            src_f = stack.enter_context(fs.open(src.path, "rb"))
            size = src_f.size()

            def read(view: memoryview, offset: int) -> int:
                # Never ask past the end: the daemons would stream the gap as zeros.
                want = min(len(view), size - offset)
                return src_f.preadinto(view[:want], offset) if want > 0 else 0
        else:
            src_fd = os.open(src.path, os.O_RDONLY | os.O_CLOEXEC)
            stack.callback(os.close, src_fd)

            def read(view: memoryview, offset: int) -> int:
                return os.readv(src_fd, [view])
        if dst.pvfs:
            dst_f = stack.enter_context(fs.open(dst.path, "wb", perm=mode & 0o777))

            def write(view: memoryview, offset: int) -> None:
                dst_f.pwrite(view, offset)
        else:
            dst_fd = os.open(dst.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC,
                             mode & 0o777)
            stack.callback(os.close, dst_fd)

            def write(view: memoryview, offset: int) -> None:
                _write_all(dst_fd, view)
        bufs = [memoryview(bytearray(chunk)), memoryview(bytearray(chunk))]
        writer = stack.enter_context(ThreadPoolExecutor(1, thread_name_prefix="pvfs-cp"))
        pending: Future | None = None
        offset, i = 0, 0
        while True:
            n = read(bufs[i % 2], offset)
            if pending is not None:
                pending.result()  # the other buffer is free again; errors surface here
                pending = None
            if n <= 0:
                break
            pending = writer.submit(write, bufs[i % 2][:n], offset)
            offset += n
            i += 1
            bar.update(n)
        if pending is not None:
            pending.result()


def _write_all(fd: int, data: memoryview) -> None:
    while len(data):
        n = os.write(fd, data)
        data = data[n:]
