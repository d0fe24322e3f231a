"""What happens before a file's data leave the mount for the I/O daemons (with leases).

The block cache's backend (fuse/cachewire.py) awaits these before a write-back or a
write-through: a file's create made ahead goes first (the manager counts a pooled file
empty when it makes it, fuse/creates.py), a write delegation of it ends
(fuse/delegations.py), and the lease of its attributes is given up (fuse/leases.py) --
the I/O daemons' size reports would recall it otherwise. A gathered write-back of many
small files does the same for them all at once: one send of the creates, one ``writing``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .operations import Operations

__all__ = ["WriteHooks"]


class WriteHooks:
    """The hooks of one mount. The mount's parts are read at each call: the creates ahead
    and the delegations are made after the leases are wired."""

    def __init__(self, ops: Operations) -> None:
        self.ops = ops

    async def before_write(self, ino: int) -> None:
        """Before one file's data leave."""
        ops = self.ops
        if ops.ahead is not None:
            await ops.ahead.before_io(ino)
        # A file written alone until now keeps its lease: what this mount shows of it is
        # its own writes; the manager holds others until ``written`` (delegations.py).
        keep = ops.delegations is not None and ops.delegations.before_write(ino)
        await ops.leases.writing(ino, keep=keep)

    async def before_writes(self, inos: list[int]) -> dict[int, OSError]:
        """Before many files' data leave at once (a gathered write-back). Those whose create
        was refused may not leave (returned, with why)."""
        ops = self.ops
        refused: dict[int, OSError] = {}
        if ops.ahead is not None:
            if any(i in ops.ahead.pending_inos for i in inos):
                await ops.ahead.send_pending()
            for ino in inos:
                try:
                    ops.ahead.check(ino)
                except OSError as exc:
                    refused[ino] = exc
        go = [i for i in inos if i not in refused]
        keep = ops.delegations.before_writes(go) if ops.delegations is not None else set()
        await ops.leases.writing_many(go, keep)
        return refused
