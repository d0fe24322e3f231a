"""What the Python side keeps in the C front end's tables for its workers (``-o frontend=c``):
the leased directories' and files' answers and names (:class:`DirMirror`, the lease tables'
mirror, ``leasetables.LeaseMirror``) and the files whose close a write delegation keeps
(:class:`KeptFiles`). csrc/front/answers.c, names.c and writes.c are the other side; cfront.py wires
them to a session.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .operations import Operations

__all__ = ["DirMirror", "KeptFiles"]


class DirMirror:
    """The leased directories' attributes and names and the session's end, kept in C for
    the workers (``leasetables.LeaseMirror``): a getattr of such a directory -- the kernel
    asks one after every create in it -- is answered there as :meth:`Operations.getattr`
    would answer it (the same entry, ``KernelView.entry``; the timeout the session's
    remaining time), a lookup of a name a complete one does not hold -- the one before
    each ``O_CREAT`` -- ENOENT (not cached by the kernel: nothing for a recall to drop),
    and a lookup of a name it holds whose inode's answer is kept there too with that entry
    (kept by the kernel until the session's end, as :meth:`Operations.lookup` lets it: a
    recall drops every name of the directory)."""

    def __init__(self, session: Any, ops: Operations) -> None:
        self.session, self.view = session, ops.view
        self.floor = float(ops.opts.attr_timeout)
        self._files = hasattr(session, "keep_file_attrs")  # (an extension built before: dirs)

    def keep(self, ino: int, a: dict) -> None:
        """A leased directory's or regular file's attributes, as Operations.getattr would
        answer them now (a file's: until this node writes it or changes its size --
        csrc/front/answers.c --, or its lease entry changes)."""
        if a.get("type") == "dir":
            self.session.keep_dir(ino, self.view.entry(a))
        elif self._files:
            # (entry() records the lease's size as the file's last seen at the manager, as
            # answering a getattr from the lease does: a read after the kernel learned the
            # size here must not stop at an older one)
            self.session.keep_file_attrs(ino, self.view.entry(a))

    def drop(self, ino: int) -> None:
        self.session.drop_dir(ino)

    def drop_all(self) -> None:
        self.session.drop_dirs()

    def until(self, t: float) -> None:
        self.session.lease_until(t, self.floor)

    def dir(self, ino: int, complete: bool, names: dict[str, int]) -> None:
        self.session.dir_names(ino, complete, [(os.fsencode(n), i) for n, i in names.items()])

    def name(self, ino: int, name: str, child: int) -> None:
        self.session.name_put(ino, os.fsencode(name), child)

    def unname(self, ino: int, name: str) -> None:
        self.session.name_pop(ino, os.fsencode(name))

    def complete(self, ino: int, complete: bool) -> None:
        self.session.dir_complete(ino, complete)

    def forget_dir(self, ino: int) -> None:
        self.session.dir_forget(ino)

    def forget_dirs(self) -> None:
        self.session.dirs_forget()


class KeptFiles:
    """The files held by write delegation whose close is kept (``delegations.KeptMirror``),
    marked in C: their flushes -- one per close(2), which Python's handler would return
    from at once -- are answered there (csrc/front/writes.c says why that is safe)."""

    def __init__(self, session: Any) -> None:
        self.keep = session.keep_file
        self.drop = session.drop_file
        self.drop_all = session.drop_files
