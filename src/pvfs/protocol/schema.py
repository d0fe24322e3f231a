"""One schema per operation: every request field is checked for type, range and size.

A schema maps a field name to a ``Field``. ``check(op, header)`` returns a clean dict with
defaults filled in, or raises ``ValueError`` (EINVAL on the wire) naming the bad field.
Unknown fields are rejected so a typo never passes silently. A name or path that is only
too long raises :class:`TooLong` instead, whose ``errno`` (ENAMETOOLONG, ERANGE for xattr
names) the daemons reply with: the errno a program sees must be the one POSIX gives, not
the wire's (issue 9: a 256-byte name got EINVAL).
"""

from __future__ import annotations

import errno as _errno
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pvfs.layout.describe import MAX_OFFSET
from pvfs.layout.describe import from_wire as description_from_wire
from pvfs.layout.stripe import Stripe
from pvfs.protocol.cred import WIRE_GROUPS

U64 = (1 << 64) - 1
NAME_MAX = 255
PATH_MAX = 4096
XATTR_NAME_MAX = 255
XATTR_SIZE_MAX = 64 * 1024
MAX_GROUPS = WIRE_GROUPS  # groups in a header's cred (pvfs.protocol.cred)


class TooLong(ValueError):
    """A string field over its byte limit; ``errno`` is what the daemon replies with."""

    def __init__(self, msg: str, code: int = _errno.ENAMETOOLONG) -> None:
        super().__init__(msg)
        self.errno = code


def reply_errno(exc: ValueError) -> int:
    """The errno a failed :func:`check` answers with (EINVAL unless it says otherwise)."""
    return getattr(exc, "errno", None) or _errno.EINVAL


@dataclass(frozen=True)
class Field:
    check: Callable[[Any], Any]
    required: bool = True
    default: Any = None


def integer(lo: int = 0, hi: int = U64) -> Callable[[Any], int]:
    def check(v: Any) -> int:
        if type(v) is not int or not lo <= v <= hi:
            raise ValueError(f"must be an integer in [{lo}, {hi}]")
        return v
    return check


def boolean(v: Any) -> bool:
    if type(v) is not bool:
        raise ValueError("must be a boolean")
    return v


def text(max_len: int, too_long: int | None = None) -> Callable[[Any], str]:
    """A string of at most ``max_len`` bytes; longer is EINVAL, or ``too_long`` if given."""
    def check(v: Any) -> str:
        if not isinstance(v, str):
            raise ValueError("must be a string")  # noqa: TRY004 - EINVAL on the wire
        if len(v.encode("utf-8", "surrogateescape")) > max_len:
            msg = f"must be a string of at most {max_len} bytes"
            raise ValueError(msg) if too_long is None else TooLong(msg, too_long)
        if "\x00" in v:
            raise ValueError("must not contain NUL")
        return v
    return check


def name(v: Any) -> str:
    """A single directory-entry name: no '/', no NUL, not empty, at most NAME_MAX bytes."""
    v = text(NAME_MAX, _errno.ENAMETOOLONG)(v)
    if not v or "/" in v:
        raise ValueError("must be a non-empty name without '/'")
    return v


def binary(max_len: int) -> Callable[[Any], bytes]:
    def check(v: Any) -> bytes:
        if not isinstance(v, bytes) or len(v) > max_len:
            raise ValueError(f"must be at most {max_len} bytes of binary")
        return v
    return check


def stripe(v: Any) -> Stripe:
    return Stripe.from_wire(v)


def optional(check: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def inner(v: Any) -> Any:
        return None if v is None else check(v)
    return inner


def seconds(lo: float, hi: float) -> Callable[[Any], float]:
    """A number of seconds in [lo, hi] (an int is taken as a float)."""
    def check(v: Any) -> float:
        if type(v) not in (int, float) or not lo <= v <= hi:
            raise ValueError(f"must be a number of seconds in [{lo}, {hi}]")
        return float(v)
    return check


def collective_hint(v: Any) -> dict[str, int]:
    """A client's hint of the collective operation a read belongs to (thesis §5.8): its total
    size, number of requests, disjoint regions and range of file positions, all tasks together.
    The reactive selector uses it in place of its estimate from the requests it has seen."""
    keys = ("size", "requests", "regions", "range")
    if not isinstance(v, dict) or set(v) != set(keys):
        raise ValueError(f"hint must be a map of {', '.join(keys)}")
    return {k: integer(0 if k != "requests" else 1, MAX_OFFSET)(v[k]) for k in keys}


def model_params(v: Any) -> dict[str, Any]:
    """Reactive-scheduling model parameters (pvfs.models.rs.Params.from_wire checks them)."""
    if not isinstance(v, dict) or len(v) > 64 or not all(isinstance(k, str) for k in v):
        raise ValueError("params must be a map of names to values")
    return v


_U32 = integer(0, 2**32 - 1)


def cred(v: Any) -> tuple[int, int, tuple[int, ...]]:
    if not isinstance(v, list) or len(v) != 3 or not isinstance(v[2], list):
        raise ValueError("must be [uid, gid, [groups]]")
    uid, gid, groups = _U32(v[0]), _U32(v[1]), v[2]
    if len(groups) > MAX_GROUPS:
        raise ValueError(f"at most {MAX_GROUPS} groups")
    return uid, gid, tuple([_U32(g) for g in groups])


INO = Field(integer(1, 2**63 - 1))
XATTR_NAME = Field(text(XATTR_NAME_MAX, _errno.ERANGE))
PATH = Field(text(PATH_MAX - 1, _errno.ENAMETOOLONG))  # PATH_MAX counts the NUL
NAME = Field(name)
# A request without credentials acts as nobody, never as root.
NOBODY = 65534
CRED = Field(cred, required=False, default=(NOBODY, NOBODY, ()))
MODE = Field(integer(0, 0o7777))
OFFSET = integer(0, MAX_OFFSET)

MGR_SCHEMAS: dict[str, dict[str, Field]] = {
    "ping": {},
    "sync": {},
    # lease: a native client creating ahead (client/ahead.py) names its session, so the
    # walk does not recall the directories it creates in itself (nothing is granted)
    "resolve": {"path": PATH, "follow": Field(boolean, False, True),
                "lease": Field(optional(text(64)), False)},
    # missing: a name not there answers {"ino": 0} (a lease on a negative answer), not ENOENT
    "lookup": {"parent": INO, "name": NAME, "missing": Field(boolean, False, False)},
    "getattr": {"ino": INO},
    "setattr": {
        "ino": INO,
        "mode": Field(optional(integer(0, 0o7777)), False),
        "uid": Field(optional(integer(0, 2**32 - 1)), False),
        "gid": Field(optional(integer(0, 2**32 - 1)), False),
        "size": Field(optional(OFFSET), False),
        "atime_ns": Field(optional(integer(0, 2**63 - 1)), False),
        "mtime_ns": Field(optional(integer(0, 2**63 - 1)), False),
        "now": Field(boolean, False, False),
        # through a handle the caller opened for writing (ftruncate): see perms.setattr_rules
        "handle": Field(boolean, False, False),
        # the caller, a file's delegated writer, sets its stripe files' mtime with its data
        "data_sets_mtime": Field(boolean, False, False),
    },
    # writing: the caller writes the new file's data itself, so a file from the pool is not
    # counted empty here (the reply's ``fresh``: its writes may say so, iod/sizewatch.py)
    "create": {"parent": INO, "name": NAME, "mode": MODE,
               "stripe": Field(optional(stripe), False), "exclusive": Field(boolean, False, False),
               "flags": Field(integer(0, 2**31 - 1), False, 0),
               "writing": Field(boolean, False, False)},
    "open": {"ino": INO, "flags": Field(integer(0, 2**31 - 1))},
    # fresh: a handle of a ``fresh`` create closed: its size is asked again in the background
    "close": {"ino": INO, "fresh": Field(boolean, False, False)},
    "closes": {"inos": Field(lambda v: _int_list(v, 4096))},  # a mount's, batched (fuse/closes.py)
    "opens": {"inos": Field(lambda v: _int_list(v, 4096))},  # read-only, answered ahead (same)
    # creates ahead of the manager (daemons/mgr/ahead.py, fuse/creates.py)
    "delegate": {"dir": INO, "want": Field(integer(0, 1024), False, 0),
                 "dirs": Field(integer(0, 64), False, 0)},  # numbers for directories made ahead
    # brief: each result only says whether it failed (a native client, which keeps nothing
    # of a new file's attributes; a mount's results carry them, with their leases)
    "ahead": {"items": Field(lambda v: _ahead_items(v)), "brief": Field(boolean, False, False)},
    "mkdir": {"parent": INO, "name": NAME, "mode": MODE},
    "rmdir": {"parent": INO, "name": NAME},
    "unlink": {"parent": INO, "name": NAME},
    "rename": {"parent": INO, "name": NAME, "new_parent": INO, "new_name": NAME,
               "flags": Field(integer(0, 7), False, 0)},
    "symlink": {"parent": INO, "name": NAME, "target": PATH},
    # special files: mode includes the type bits; rdev is FUSE's 32-bit device number
    "mknod": {"parent": INO, "name": NAME, "mode": Field(integer(0, 0o177777)),
              "rdev": Field(integer(0, 2**32 - 1), False, 0)},
    "readlink": {"ino": INO},
    "link": {"ino": INO, "new_parent": INO, "new_name": NAME},
    "readdir": {"ino": INO, "cookie": Field(integer(0, 2**63 - 1), False, 0),
                "limit": Field(integer(1, 4096), False, 1024),
                "attrs": Field(boolean, False, True)},
    "statfs": {},
    "access": {"ino": INO, "mask": Field(integer(0, 7))},
    "getxattr": {"ino": INO, "name": XATTR_NAME},
    "setxattr": {"ino": INO, "name": XATTR_NAME,
                 "value": Field(binary(XATTR_SIZE_MAX)), "flags": Field(integer(0, 3), False, 0)},
    "listxattr": {"ino": INO},
    "removexattr": {"ino": INO, "name": XATTR_NAME},
    "getstripe": {"ino": INO},
    "setstripe": {"ino": INO, "stripe": Field(optional(stripe))},
    "nfile": {"ino": INO},
    # an I/O daemon: these stripe files change (or, all, it restarted); see mgr/sizecache.py
    "sizes_changed": {"inos": Field(lambda v: _int_list(v, 4096), False, []),
                      "all": Field(boolean, False, False),
                      "iod": Field(integer(-1, 65535), False, -1)},  # the reporter (-1: unnamed)
    "inodes": {"after": Field(integer(0, 2**63 - 1), False, 0),
               "limit": Field(integer(1, 65536), False, 4096)},
    "precreated": {},  # fsck: the pool's inode numbers (a stripe file of them is expected)
    "status": {},
    "metrics": {},  # Prometheus families (pvfs.metrics)
    # a mount's lease connection: the manager calls it back on it (daemons/mgr/leases.py)
    "lease_register": {"client": Field(text(64))},
}
#: The manager's requests that may name an inode by its path instead (``BY_PATH``): a native
#: client's call is then one round trip, the manager walking the path as ``resolve`` does.
#: op -> ((path field, the inode field it fills, whether a final symlink is followed), ...).
_DIR = ("dir", "parent", True)
_PATH = ("path", "ino", True)
BY_PATH: dict[str, tuple[tuple[str, str, bool], ...]] = {
    **dict.fromkeys(("create", "mkdir", "rmdir", "unlink", "symlink", "mknod"), (_DIR,)),
    "rename": (_DIR, ("new_dir", "new_parent", True)),
    "link": (("path", "ino", False), ("new_dir", "new_parent", True)),
    "readlink": (("path", "ino", False),),
    **dict.fromkeys(("open", "setattr", "access", "getxattr", "setxattr", "listxattr",
                     "removexattr", "getstripe", "setstripe", "readdir"), (_PATH,)),
}
for _op, _names in BY_PATH.items():
    for _path, _ino, _ in _names:
        MGR_SCHEMAS[_op][_ino] = Field(integer(1, 2**63 - 1), False, 0)
        MGR_SCHEMAS[_op][_path] = Field(optional(PATH.check), False)

#: The manager's requests a lease holder names itself in (``lease``: its registered name):
#: those that may grant a lease, and the changes that recall the others' (mgr/leases.py).
LEASE_OPS = ("lookup", "getattr", "readdir", "create", "open", "setattr", "mkdir", "rmdir",
             "unlink", "rename", "symlink", "mknod", "link", "setxattr", "removexattr",
             "setstripe", "delegate", "ahead")
for _op in LEASE_OPS:
    MGR_SCHEMAS[_op]["lease"] = Field(optional(text(64)), False)

_WRITE_ITEM = {"ino": integer(1, 2**63 - 1), "stripe": stripe,
               "off": integer(0, MAX_OFFSET), "len": integer(1, 1 << 20), "fresh": boolean}


def _write_items(v: Any) -> list[dict]:
    """``writes``' items: at most 1024 of (ino, stripe, off, len, fresh), nothing else."""
    if not isinstance(v, list) or not 0 < len(v) <= 1024:
        raise ValueError("must be a list of 1 to 1024 writes")
    out = []
    for item in v:
        if not isinstance(item, dict) or set(item) != set(_WRITE_ITEM):
            raise ValueError(f"each write must have exactly the fields {sorted(_WRITE_ITEM)}")
        out.append({k: check(item[k]) for k, check in _WRITE_ITEM.items()})
    return out


IOD_SCHEMAS: dict[str, dict[str, Field]] = {
    "ping": {},
    "read": {"ino": INO, "stripe": Field(stripe), "desc": Field(description_from_wire),
             "hint": Field(optional(collective_hint), False)},
    # mtime_ns: set on the stripe file after the bytes (a mount's delegated explicit mtime)
    "write": {"ino": INO, "stripe": Field(stripe), "desc": Field(description_from_wire),
              "mtime_ns": Field(optional(integer(0, 2**63 - 1)), False),
              # from the client that created the file from the pool, writing it itself
              # (mgr create's ``fresh``): the pool's size promise may go unreported
              "fresh": Field(boolean, False, False)},
    # many small files' writes, their bytes one after the other in the bulk
    # (daemons/iod/smallwrites.py; from pvfs.client.behind)
    "writes": {"items": Field(_write_items)},
    # watch: the manager asks, and caches the answer if watched (iod/sizewatch.py)
    "size": {"ino": INO, "watch": Field(boolean, False, False)},
    "sizes": {"inos": Field(lambda v: _int_list(v, 4096)),
              "watch": Field(boolean, False, False)},
    # unwatch: the manager's own change; drop its size promise without reporting back
    "truncate": {"ino": INO, "local_size": Field(OFFSET),
                 "unwatch": Field(boolean, False, False)},
    # watch: promise again once it is done, and answer the share as ``size`` does
    "utime": {"ino": INO, "mtime_ns": Field(integer(0, 2**63 - 1)),
              "unwatch": Field(boolean, False, False), "watch": Field(boolean, False, False)},
    "create": {"ino": INO},
    "precreate": {"inos": Field(lambda v: _int_list(v, 4096)),  # the manager's pool
                  "watch": Field(boolean, False, False)},
    "unlink": {"ino": INO},
    "unlinks": {"inos": Field(lambda v: _int_list(v, 4096))},  # the manager's reaper
    "fsync": {"ino": INO, "data_only": Field(boolean, False, False)},
    "statfs": {},
    "stats": {"reset": Field(boolean, False, False)},
    "sched_get": {},
    "sched_set": {"algorithm": Field(text(16)),
                  "window": Field(optional(integer(1, 1 << 50)), False),
                  "gather": Field(optional(seconds(0.0, 10.0)), False),
                  # rs: decide a file's operation again at most this often (0: every request)
                  "decide": Field(optional(seconds(0.0, 10.0)), False)},
    # reactive scheduling (pvfs.models.rs): model parameters; emptying the emulated disk's cache
    "model_set": {"params": Field(model_params)},
    "disk_drop": {},
    "list": {"after": Field(integer(0, 2**63 - 1), False, 0),
             "limit": Field(integer(1, 65536), False, 4096)},
    "status": {},
    # coherence=sync mounts (daemons/holders.py)
    "cb_register": {"client": Field(text(64)), "block_size": Field(integer(512, 1 << 26))},
    "cb_hold": {"client": Field(text(64)), "ino": INO, "first": Field(integer(0, 2**50)),
                "count": Field(integer(1, 1 << 24))},
    "cb_invalidate": {"client": Field(text(64)), "ino": INO, "offset": Field(OFFSET),
                      "length": Field(OFFSET)},
    "cb_status": {},
    "metrics": {},  # Prometheus families (pvfs.metrics)
    "drop_cache": {},  # pvfs-admin cache drop: page cache of every stripe file
}


_AHEAD_ITEMS = {
    "create": {"op": text(8), "parent": integer(1, 2**63 - 1), "name": name,
               "mode": integer(0, 0o7777), "ino": integer(1, 2**63 - 1), "cred": cred,
               "now": integer(0, 2**63 - 1), "open": boolean, "deleg": boolean,
               "writing": boolean},  # its writer's data follow unreported (``fresh``)
    "unlink": {"op": text(8), "parent": integer(1, 2**63 - 1), "name": name, "cred": cred,
               "now": integer(0, 2**63 - 1)},
    "rmdir": {"op": text(8), "parent": integer(1, 2**63 - 1), "name": name, "cred": cred,
              "now": integer(0, 2**63 - 1)},
    # a directory made ahead, under a number delegated for directories (``delegate``'s dirs)
    "mkdir": {"op": text(8), "parent": integer(1, 2**63 - 1), "name": name,
              "mode": integer(0, 0o7777), "ino": integer(1, 2**63 - 1), "cred": cred,
              "now": integer(0, 2**63 - 1)},
    # a file created ahead and held alone: mode, owner, times (``times_now``: utimensat(NULL))
    "setattr": {"op": text(8), "ino": integer(1, 2**63 - 1), "cred": cred,
                "now": integer(0, 2**63 - 1), "mode": optional(integer(0, 0o7777)),
                "uid": optional(integer(0, 2**32 - 1)), "gid": optional(integer(0, 2**32 - 1)),
                "atime_ns": optional(integer(0, 2**63 - 1)),
                "mtime_ns": optional(integer(0, 2**63 - 1)), "times_now": boolean},
}


def _ahead_items(v: Any) -> list[dict]:
    """A mount's changes made ahead of the manager (``ahead``), in order: at most 1024
    creates, unlinks, rmdirs and setattrs, each with exactly the fields of its kind
    (:data:`_AHEAD_ITEMS`)."""
    if not isinstance(v, list) or len(v) > 1024:
        raise ValueError("must be a list of at most 1024 changes")
    out = []
    for item in v:
        kind = _AHEAD_ITEMS.get(item.get("op")) if isinstance(item, dict) else None
        if kind is None or set(item) != set(kind):
            raise ValueError("each change must be a create, mkdir, unlink, rmdir or "
                             "setattr with exactly its fields")
        out.append({k: check(item[k]) for k, check in kind.items()})
    return out


def _int_list(v: Any, max_len: int) -> list[int]:
    if not isinstance(v, list) or len(v) > max_len:
        raise ValueError(f"must be a list of at most {max_len} integers")
    return [integer(1, 2**63 - 1)(x) for x in v]


_ENVELOPE = ("op", "cred", "id")  # fields every request may carry besides its schema's
#: Each schema table's operations compiled once (:func:`_compiled`): id(table) -> (table,
#: {op: (allowed field names, ((name, check, required, default), ...))}).
_COMPILED: dict[int, tuple[dict, dict[str, tuple[frozenset, tuple]]]] = {}


def _compiled(schemas: dict[str, dict[str, Field]], op: str) -> tuple[frozenset, tuple]:
    """The allowed names and the field checks of ``op``, built once per table and op (a
    table is a module constant; a table changed after its first use is compiled again)."""
    got = _COMPILED.get(id(schemas))
    if got is None or got[0] is not schemas:
        got = _COMPILED[id(schemas)] = (schemas, {})
    ops = got[1]
    c = ops.get(op)
    if c is None:
        schema = schemas[op]
        c = ops[op] = (frozenset(schema) | frozenset(_ENVELOPE),
                       tuple((k, f.check, f.required, f.default) for k, f in schema.items()))
    return c


def check(schemas: dict[str, dict[str, Field]], header: dict) -> tuple[str, dict]:
    """Validate a request header against its operation's schema -> (op, clean fields)."""
    op = header.get("op")
    if not isinstance(op, str) or op not in schemas:
        raise ValueError(f"unknown operation {op!r}")
    allowed, fields = _compiled(schemas, op)
    if not allowed.issuperset(header):
        for key in header:
            if key not in allowed:
                raise ValueError(f"{op}: unexpected field {key!r}")
    clean: dict[str, Any] = {}
    for key, fcheck, required, default in fields:
        if key in header:
            try:
                clean[key] = fcheck(header[key])
            except TooLong as exc:
                raise TooLong(f"{op}: field {key!r} {exc}", exc.errno) from None
            except ValueError as exc:
                raise ValueError(f"{op}: field {key!r} {exc}") from None
        elif required:
            raise ValueError(f"{op}: missing field {key!r}")
        else:
            clean[key] = default
    try:
        clean["cred"] = cred(header["cred"]) if "cred" in header else CRED.default
    except ValueError as exc:
        raise ValueError(f"{op}: field 'cred' {exc}") from None
    return op, clean
