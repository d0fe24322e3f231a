"""Striping subcommands: ``setstripe`` and ``getstripe`` (like Lustre ``lfs``).

A file's distribution is the thesis' table 3.1: ``base`` (first I/O daemon), ``pcount``
(number of I/O daemons), ``ssize`` (stripe size). On a directory the same fields are the
default new files inherit. ``setstripe`` on a path that does not exist creates an empty file
with that layout (``lfs setstripe`` does the same); on an existing file it works only while
the file is empty.
"""

from __future__ import annotations

import argparse

from pvfs.cli.common import PROG, add_command, connect, pvfs_path, size_arg
from pvfs.cli.output import CliError, emit, human_size, key_values, table
from pvfs.client.fs import FileSystem
from pvfs.layout.stripe import Stripe


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "setstripe", pvfs_names=True, help="set the distribution of a new file or a "
                    "directory's default", func=cmd_setstripe, example=f"""\
{PROG} setstripe --pcount 2 --ssize 1M pvfs:/data        # default of new files in /data
{PROG} setstripe --base 3 --pcount 1 pvfs:/data/one.dat  # create an empty file on iod3
{PROG} setstripe --delete pvfs:/data                     # back to the inherited default""")
    p.add_argument("path", metavar="PATH")
    p.add_argument("-b", "--base", type=int, metavar="I",
                   help="first I/O daemon (index in the config's list)")
    p.add_argument("-c", "--pcount", type=int, metavar="N",
                   help="number of I/O daemons (-1: all)")
    p.add_argument("-S", "--ssize", type=size_arg, metavar="BYTES",
                   help="stripe size, e.g. 65536, 64k, 1M")
    p.add_argument("-d", "--delete", action="store_true",
                   help="clear a directory's default layout")

    p = add_command(sub, "getstripe", pvfs_names=True, help="show the distribution of a file or a directory's "
                    "default", func=cmd_getstripe, example=f"""\
{PROG} getstripe pvfs:/data/out.dat
{PROG} getstripe --json pvfs:/data | jq .ssize""")
    p.add_argument("paths", nargs="+", metavar="PATH")


def cmd_setstripe(args: argparse.Namespace) -> int:
    path = pvfs_path(args.path)
    given = (args.base, args.pcount, args.ssize)
    if args.delete and any(v is not None for v in given):
        raise CliError("setstripe", "--delete takes no --base/--pcount/--ssize", status=2)
    if not args.delete and all(v is None for v in given):
        raise CliError("setstripe", "give at least one of --base, --pcount, --ssize "
                       "(or --delete)", status=2)
    with connect(args) as fs:
        niods = fs.config.niods
        try:
            st = fs.stat(path)
        except FileNotFoundError:
            st = None
        if args.delete:
            if st is None or st.type != "dir":
                raise CliError(f"setstripe pvfs:{path}", "--delete applies to a directory")
            fs.setstripe(path, None)
            stripe = None
        else:
            current = (st.stripe if st is not None and st.type == "file" else None) \
                or (fs.getstripe(path) if st is not None else None) or fs.config.stripe
            stripe = Stripe(current.base if args.base is None else args.base,
                            current.pcount if args.pcount is None else args.pcount,
                            current.ssize if args.ssize is None else args.ssize)
            try:
                stripe.validate(niods)
            except ValueError as exc:
                raise CliError(f"setstripe pvfs:{path}", str(exc), status=2) from None
            if st is None:
                # lfs-style: a new, empty file with exactly this layout.
                fs.open(path, "xb", stripe=stripe.resolved(niods)).close()
            elif st.type == "file":
                fs.setstripe(path, stripe.resolved(niods))
            elif st.type == "dir":
                fs.setstripe(path, stripe)
            else:
                raise CliError(f"setstripe pvfs:{path}", f"cannot stripe a {st.type}")
        result = describe(fs, path)
    emit(args.json, result, render_one)
    return 0


def describe(fs: FileSystem, path: str) -> dict:
    """The getstripe record of one path (see ``cmd_getstripe``)."""
    st = fs.stat(path)
    niods = fs.config.niods
    if st.type == "file":
        stripe, source = st.stripe, "file"
    elif st.type == "dir":
        own = fs.getstripe(path)
        stripe, source = (own, "directory") if own else (fs.config.stripe, "filesystem")
    else:
        raise CliError(f"getstripe pvfs:{path}", f"a {st.type} has no distribution")
    resolved = stripe.resolved(niods) if stripe else None
    iods = [] if resolved is None else [
        {"rank": r, "iod": resolved.iod_of_rank(r, niods),
         "address": fs.config.iods[resolved.iod_of_rank(r, niods)].address}
        for r in range(resolved.pcount)]
    return {"path": path, "type": st.type, "ino": st.st_ino, "source": source,
            "base": stripe.base if stripe else None, "pcount": stripe.pcount if stripe else None,
            "ssize": stripe.ssize if stripe else None, "iods": iods,
            "size": st.st_size if st.type == "file" else None}


_SOURCES = {"file": "the file's own layout", "directory": "this directory's default",
            "filesystem": "no directory default: new files use the file-system default"}


def render_one(d: dict) -> str:
    pcount = d["pcount"]
    head = key_values([
        ("path", "pvfs:" + d["path"]), ("source", _SOURCES[d["source"]]),
        ("base", d["base"]), ("pcount", f"{pcount} (all I/O daemons)" if pcount == -1 else pcount),
        ("ssize", f"{d['ssize']} ({human_size(d['ssize'])})")])
    rows = [[i["rank"], f"iod{i['iod']}", i["address"]] for i in d["iods"]]
    return head + "\n\n" + table(rows, ["rank", "daemon", "address"], right=[0])


def cmd_getstripe(args: argparse.Namespace) -> int:
    with connect(args) as fs:
        out = [describe(fs, pvfs_path(p)) for p in args.paths]
    emit(args.json, out if len(out) > 1 else out[0],
         lambda data: "\n\n".join(render_one(d) for d in (data if isinstance(data, list)
                                                             else [data])))
    return 0
