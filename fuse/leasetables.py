"""The tables of what a leasing mount knows (leases.py), each change also made in a mirror.

``LeaseCache.attrs`` (inode -> attributes) and ``LeaseCache.dirs`` (directory -> its names)
are dicts whose every change goes through the methods below, so a mirror sees them all: the
C front end keeps the directories' attributes and names beside its worker threads, which
answer a getattr of a leased directory and a lookup of a name a leased, complete directory
does not hold without a trip through Python (``cmirrors.DirMirror``, csrc/front/answers.c and
names.c). The attribute dicts themselves are never changed in place (a change replaces
them), and a directory's names change only through :meth:`_Dir.put` and :meth:`_Dir.pop`.
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["LeaseMirror"]


class LeaseMirror(Protocol):
    """Where the leased directories' attributes and names and the session's end are kept
    beside the mount's tables."""

    def keep(self, ino: int, a: dict) -> None: ...
    def drop(self, ino: int) -> None: ...
    def drop_all(self) -> None: ...
    def until(self, t: float) -> None: ...
    def dir(self, ino: int, complete: bool, names: dict[str, int]) -> None: ...
    def name(self, ino: int, name: str, child: int) -> None: ...
    def unname(self, ino: int, name: str) -> None: ...
    def complete(self, ino: int, complete: bool) -> None: ...
    def forget_dir(self, ino: int) -> None: ...
    def forget_dirs(self) -> None: ...


class _Dir:
    """What the mount knows of a leased directory's entries."""

    __slots__ = ("_complete", "entries", "ino", "mirror", "names", "stale")

    def __init__(self, complete: bool = False) -> None:
        self.names: dict[str, int] = {}  # name -> inode; 0: known not to be there
        self.entries = 0  # names known to be there (the directory's size, when complete)
        self._complete = complete
        # Names the kernel may still cache for the session's term that this mount no longer
        # knows (renamed, a create refused): dropped from the kernel with the others.
        self.stale: set[str] = set()
        self.ino = 0  # set, with the mirror, while it is in the table
        self.mirror: LeaseMirror | None = None

    @property
    def complete(self) -> bool:
        """Every name it does not know is not there."""
        return self._complete

    @complete.setter
    def complete(self, value: bool) -> None:
        self._complete = value
        if self.mirror is not None:
            self.mirror.complete(self.ino, value)

    def put(self, name: str, ino: int) -> None:
        """``name`` names ``ino`` (0: known not to be there)."""
        old = self.names.get(name)
        self.names[name] = ino
        self.entries += bool(ino) - bool(old)
        if self.mirror is not None:
            self.mirror.name(self.ino, name, ino)

    def pop(self, name: str) -> int | None:
        """Forget what ``name`` names; what it named."""
        old = self.names.pop(name, None)
        self.entries -= bool(old)
        if self.mirror is not None:
            self.mirror.unname(self.ino, name)
        return old

    def kernel_names(self) -> list[str]:
        """Every name the kernel may cache in this directory beyond ``entry_timeout``."""
        return [*self.names, *self.stale]


class _Mirrored(dict):
    """A dict whose every change goes through ``__setitem__``, ``pop`` and ``clear``, which
    the subclasses extend to tell the mirror; the other changing methods use them."""

    __slots__ = ("mirror",)

    def __init__(self) -> None:
        super().__init__()
        self.mirror: LeaseMirror | None = None

    def __delitem__(self, ino: int) -> None:
        self.pop(ino)

    def popitem(self):
        ino = next(reversed(self))
        return ino, self.pop(ino)

    def setdefault(self, ino, default=None):
        if ino not in self:
            self[ino] = default
        return self[ino]

    def update(self, *args, **kw) -> None:
        for ino, value in dict(*args, **kw).items():
            self[ino] = value


class _Dirs(_Mirrored):
    """The leased directories (inode -> :class:`_Dir`). A directory leaving the table is
    cut from the mirror, so a stale reference to it changes nothing there."""

    __slots__ = ()

    def mirror_to(self, mirror: LeaseMirror | None) -> None:
        old, self.mirror = self.mirror, mirror
        if old is not None:
            old.forget_dirs()
        for ino, d in self.items():
            d.mirror = mirror
            if mirror is not None:
                mirror.dir(ino, d.complete, d.names)

    def __setitem__(self, ino: int, d: _Dir) -> None:
        old = super().get(ino)
        if old is not None and old is not d:
            old.mirror = None
        super().__setitem__(ino, d)
        d.ino, d.mirror = ino, self.mirror
        if self.mirror is not None:
            self.mirror.dir(ino, d.complete, d.names)

    def pop(self, ino: int, *default):
        d = super().pop(ino, *default)
        if isinstance(d, _Dir):
            d.mirror = None
            if self.mirror is not None:
                self.mirror.forget_dir(ino)
        return d

    def clear(self) -> None:
        for d in self.values():
            d.mirror = None
        super().clear()
        if self.mirror is not None:
            self.mirror.forget_dirs()


class _Attrs(_Mirrored):
    """The leased attributes (inode -> attributes); a directory's and a regular file's also
    in the mirror."""

    __slots__ = ()

    def __setitem__(self, ino: int, a: dict) -> None:
        old = super().get(ino)
        super().__setitem__(ino, a)
        if self.mirror is not None:
            if a.get("type") in ("dir", "file"):
                self.mirror.keep(ino, a)
            elif old is not None:
                self.mirror.drop(ino)

    def pop(self, ino: int, *default):
        a = super().pop(ino, *default)
        if self.mirror is not None:
            self.mirror.drop(ino)
        return a

    def clear(self) -> None:
        super().clear()
        if self.mirror is not None:
            self.mirror.drop_all()
