"""Everything a check run shares between examples: the clients, the mode, a private
connection for looking behind the clients' backs, and one directory per example.

The private connection (the native API on a pvfs run, plain ``os`` calls on a ``--target``
run) creates and removes each example's directory, reads a file back after a flush (the
model's *resync*), and takes the ``(size, mtime)`` stamp a mount compares on reopen. It is
never one of the checked clients.
"""

from __future__ import annotations

import errno
import os
import shutil
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pvfs.check.clients import STRIPE_XATTR, Client
from pvfs.check.model import MAX_FILE, FileModel

if TYPE_CHECKING:
    from pvfs.check.faults import Faults


@dataclass
class World:
    """The fixed part of a run (see the module docstring)."""

    clients: list[Client]
    mode: str
    run_dir: str  # below the file system's top (pvfs) or an absolute path (target)
    admin: Any = None  # pvfs.FileSystem on a pvfs run, None on a --target run
    faults: Faults | None = None
    niods: int = 0
    on_example: Any = None  # called with the number of examples started
    fault_epoch: bool = False
    xattrs: bool = True
    checks_nlink: bool = True

    @property
    def pauses(self) -> bool:
        """Whether a pause past every cache window can show something: a mount holding
        leases answers names and attributes for longer than its kernel's windows, and only
        a recall keeps them true (fuse/leases.py)."""
        return any(getattr(c, "leases", False) for c in self.clients)
    notes: list[str] = field(default_factory=list)
    examples: int = 0
    ops: dict[str, int] = field(default_factory=dict)  # steps run, by operation
    first_failure: tuple[int, float] | None = None  # (example, monotonic time) of the first

    # ----------------------------------------------------------------- examples
    def new_example(self) -> str:
        """A fresh directory for one example; its name relative to every client's top."""
        self.examples += 1
        if self.on_example is not None:
            self.on_example(self.examples)
        rel = f"{self.run_dir}/e{self.examples}"
        if self.admin is not None:
            self.admin.makedirs("/" + rel, exist_ok=True)
        else:
            os.makedirs(os.path.join(self.clients[0].directory, rel), exist_ok=True)
        return rel

    def end_example(self, rel: str, names: list[str]) -> None:
        """Remove the example's directory (best effort: a broken file system may refuse)."""
        if self.admin is None:
            shutil.rmtree(os.path.join(self.clients[0].directory, rel), ignore_errors=True)
            return
        for n in names:
            try:
                self.admin.unlink(f"/{rel}/{n}")
            except OSError:
                pass
        try:
            self.admin.rmdir("/" + rel)
        except OSError:
            pass

    def remove_run_dir(self) -> None:
        if self.admin is None:
            shutil.rmtree(os.path.join(self.clients[0].directory, self.run_dir),
                          ignore_errors=True)
            return
        try:
            for name in self.admin.listdir("/" + self.run_dir):
                for n in self.admin.listdir(f"/{self.run_dir}/{name}"):
                    self.admin.unlink(f"/{self.run_dir}/{name}/{n}")
                self.admin.rmdir(f"/{self.run_dir}/{name}")
            self.admin.rmdir("/" + self.run_dir)
        except OSError:
            pass

    def _path(self, name: str) -> str:
        return f"/{self.clients[0].root}/{name}"

    # ----------------------------------------------------------------- looking behind
    def stamp(self, name: str) -> tuple[int, int] | None:
        """``(size, mtime_ns)`` of ``name`` at the manager (None without one)."""
        if self.admin is None:
            return None
        try:
            s = self.admin.stat(self._path(name))
        except OSError:
            return None
        return int(s.st_size), int(s.st_mtime_ns)

    def read_back(self, f: FileModel) -> tuple[bytes, int] | None:
        """The daemons' content and size of ``f`` (None when it cannot be reached by name)."""
        if self.admin is None or not f.names:
            return None
        path = self._path(min(f.names))
        for _ in range(3):
            try:
                with self.admin.open(path, os.O_RDONLY) as h:
                    if int(h.ino) != f.ino:
                        return None
                    size = int(self.admin.stat(path).st_size)
                    return bytes(h.pread(MAX_FILE + 1, 0)), size
            except OSError as exc:
                if exc.errno in (errno.ENOENT, errno.ESTALE):
                    return None
                if not self.fault_epoch:
                    raise
                time.sleep(0.5)  # a restarted daemon is still coming up
        return None

    # ----------------------------------------------------------------- striping
    def fit_stripe(self, stripe: tuple[int, int, int]) -> tuple[int, int, int]:
        """``stripe`` cut to the number of I/O daemons."""
        base, pcount, ssize = stripe
        n = max(1, self.niods)
        if pcount == -1 or pcount > n:
            pcount = n
        return base % n, pcount, ssize

    def setstripe(self, client: Client, name: str, stripe: tuple[int, int, int]) -> None:
        if client.kind == "native":
            from pvfs import Stripe

            client.fs.setstripe(client.path(name), Stripe(*stripe))  # type: ignore[attr-defined]
        else:
            base, pcount, ssize = stripe
            client.setxattr(name, STRIPE_XATTR,
                            f"base={base},pcount={pcount},ssize={ssize}".encode())

    def getstripe(self, name: str) -> tuple[int, int, int] | None:
        if self.admin is None:
            return None
        s = self.admin.getstripe(self._path(name))
        return None if s is None else (int(s.base), int(s.pcount), int(s.ssize))
