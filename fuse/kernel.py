"""The mount's front ends: how its handlers reach the kernel, behind one narrow interface.

A front end receives the kernel's requests, runs them on the handlers of
:class:`~.operations.Operations` and sends their replies. Two exist: the libfuse3 low-level
front end in C (``cfront.py`` over ``pvfs._fusefront``; the default where it is built) and
pyfuse3's session (the reference, ``-o frontend=pyfuse3``). The handlers do not know which one runs: what they
send to the kernel themselves goes through ``ops.view.kernel``, a :class:`Kernel`:

* ``invalidate_inode(ino, attr_only)`` and ``invalidate_entry(parent, name)``: blocking
  notifications (the kernel may wait for write-back of the pages it drops), called in a
  worker thread, never on the thread that answers requests;
* ``stats()``: the front end's name and counters, for ``user.pvfs.stats``;
* ``readdir_reply(token, name, entry, next_id) -> bool``: add one entry to the readdir
  reply whose token the front end handed to ``Operations.readdir`` (False: full).

Both front ends take pyfuse3's ``EntryAttributes``, ``FileInfo`` and ``StatvfsData`` from the
handlers (plain data classes that work without a pyfuse3 session) and turn the handlers'
``FUSEError`` into the errno of the reply.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import pyfuse3

from .options import FRONTENDS

if TYPE_CHECKING:
    from .operations import Operations

__all__ = ["FRONTENDS", "Front", "Kernel", "Pyfuse3Front", "make_front"]


class Kernel(Protocol):
    """What the handlers send to the kernel (see the module's docstring)."""

    def invalidate_inode(self, ino: int, attr_only: bool = False) -> None: ...

    def invalidate_entry(self, parent: int, name: bytes) -> None: ...

    def readdir_reply(self, token: Any, name: bytes, entry: pyfuse3.EntryAttributes,
                      next_id: int) -> bool: ...

    def stats(self) -> dict:
        """The front end's name and counters (``user.pvfs.stats``' ``frontend``)."""


class Front(Protocol):
    """A front end's life cycle, as ``mount.py`` drives it."""

    kernel: Kernel

    def init(self, ops: Operations, mountpoint: str, options: set[str]) -> None:
        """Mount ``mountpoint`` and make ready to serve ``ops``."""

    async def main(self, max_tasks: int) -> None:
        """Serve until unmounted or :meth:`terminate`; at most ``max_tasks`` handlers at once."""

    def terminate(self) -> None:
        """Make :meth:`main` return (a signal asked to unmount)."""

    def close(self) -> None:
        """Unmount (if still mounted) and free the session."""


class _Pyfuse3Kernel:
    """The notifications and readdir replies of pyfuse3's one global session."""

    @staticmethod
    def invalidate_inode(ino: int, attr_only: bool = False) -> None:
        pyfuse3.invalidate_inode(ino, attr_only)

    @staticmethod
    def invalidate_entry(parent: int, name: bytes) -> None:
        pyfuse3.invalidate_entry(parent, name)

    readdir_reply = staticmethod(pyfuse3.readdir_reply)

    @staticmethod
    def stats() -> dict:
        return {"name": "pyfuse3"}


class Pyfuse3Front:
    """pyfuse3's session with trio (the reference front end)."""

    kernel: Kernel = _Pyfuse3Kernel()

    def init(self, ops: Operations, mountpoint: str, options: set[str]) -> None:
        pyfuse3.init(ops, mountpoint, options)

    async def main(self, max_tasks: int) -> None:
        await pyfuse3.main(min_tasks=4, max_tasks=max_tasks)

    def terminate(self) -> None:
        pyfuse3.terminate()

    def close(self) -> None:
        pyfuse3.close(unmount=True)


def make_front(name: str) -> Front:
    """The front end called ``name`` (one of :data:`FRONTENDS`).

    Raises:
        ValueError: an unknown name, or the C front end is not built here.
    """
    if name == "pyfuse3":
        return Pyfuse3Front()
    if name == "c":
        from .cfront import CFront

        return CFront()
    raise ValueError(f"frontend must be one of {', '.join(FRONTENDS)}")
