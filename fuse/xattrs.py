"""Extended attributes at the mount: the names it answers itself and the probes it caches.

Three kinds of names never reach the manager as plain xattrs:

- the *virtual* names of ``cachewire`` (``user.pvfs.stats``, ``.stripe``, ``.bypass``, ``.sync``,
  ``.drop``): the mount's own controls, read and set through ``getfattr``/``setfattr``;
- the ACL names ``ls -l`` asks for on every entry: the manager never stores ``system.*`` names
  (daemons/mgr/perms.py: ``xattr_rule`` refuses to set them, reads are ENODATA), so the mount
  answers as the manager would;
- the *probed* names the kernel and tools ask for on every file and almost never find
  (``security.capability`` before each write(2), ``security.selinux`` for ``ls -l``): their
  answers are cached per inode like the attributes (:class:`ProbedCache`).

:class:`Operations` (``fuse/operations.py``) keeps the pyfuse3 handlers and calls in here.
"""

from __future__ import annotations

import errno
import itertools
import os
import time
from collections.abc import Awaitable, Callable

from pyfuse3 import FUSEError

from pvfs.client.aclient import AsyncClient
from pvfs.protocol.cred import Cred

from . import cachewire
from .cachewire import Controls
from .handles import HandleTable

__all__ = ["ACL_XATTRS", "CAPS_XATTR", "PROBED_XATTRS", "ProbedCache", "VirtualXattrs"]

CAPS_XATTR = "security.capability"
PROBED_XATTRS = frozenset((CAPS_XATTR, "security.selinux"))
ACL_XATTRS = frozenset(("system.posix_acl_access", "system.posix_acl_default"))

# Cached (inode, name) answers, two per inode: an `ls -l` of a 10,000-entry directory must
# not push out the answers its own readdir just learned. Beyond it the oldest eighth goes.
_PROBED_MAX = 1 << 17


class ProbedCache:
    """Answers to :data:`PROBED_XATTRS`, cached for ``ttl`` seconds like the attributes.

    The kernel asks for ``security.capability`` before every write(2) to a FUSE file
    (file_remove_privs; FUSE never sets SB_NOSEC), so without the cache each 4 KiB write cost
    a manager round trip. Anyone may read ``security.*``, so the answer does not depend on the
    caller. This node's set/removexattr of the inode drops the entries (:meth:`changed`);
    another node's change shows after at most ``ttl``.

    Args:
        ttl: seconds an answer is kept (0: never cached).
        counters: the mount's counters; ``capability_hits`` counts answers from the cache.

    Attributes:
        mirror: the C front end's session (``caps_none(ino, until)``, ``caps_drop(ino)``),
            or None: each ``security.capability`` absence stored here is stored there with
            its expiry, and its workers answer the kernel's probe before each write(2)
            without a trip through Python (csrc/front/answers.c); every drop here drops it
            there first.
    """

    def __init__(self, ttl: float, counters: dict[str, int]) -> None:
        self.ttl = ttl
        self.counters = counters
        self.mirror = None
        # (inode, name) -> (expiry, value or None for ENODATA)
        self._answers: dict[tuple[int, str], tuple[float, bytes | None]] = {}
        self._gen = 0

    async def get(self, inode: int, name: str,
                  fetch: Callable[[], Awaitable[bytes]]) -> bytes:
        """The value of ``name`` on ``inode``: cached, or ``await fetch()`` and cache it.

        Raises:
            FUSEError: ENODATA (cached absence).
            OSError: from ``fetch``.
        """
        now = time.monotonic()
        key = (inode, name)
        got = self._answers.get(key)
        if got is not None and got[0] > now:
            self.counters["capability_hits"] += 1
            if got[1] is None:
                raise FUSEError(errno.ENODATA)
            return got[1]
        self._make_room()
        gen = self._gen
        try:
            value = await fetch()
        except OSError as exc:
            if exc.errno == errno.ENODATA and self.ttl > 0 and gen == self._gen:
                self._answers[key] = (now + self.ttl, None)
                if name == CAPS_XATTR and self.mirror is not None:
                    self.mirror.caps_none(inode, now + self.ttl)
            raise
        if self.ttl > 0 and gen == self._gen:
            self._answers[key] = (now + self.ttl, value)
        return value

    @property
    def gen(self) -> int:
        """Take before asking the manager for ``secx``; give to :meth:`learn` after."""
        return self._gen

    def learn(self, a: dict, gen: int) -> None:
        """An inode's attributes from the manager say whether it has any ``security.*``
        name (``secx``, from ``lookup``/``readdir``/``create``): none means every probed
        name is ENODATA, cached without asking (``ls -l``'s ``security.selinux`` of each
        entry, the first write's ``security.capability``). Not if this node changed an xattr
        since ``gen`` was taken. Some (``secx`` True): absences cached earlier are dropped."""
        if a.get("secx"):
            if self.mirror is not None:
                self.mirror.caps_drop(a["ino"])
            for name in PROBED_XATTRS:
                got = self._answers.get((a["ino"], name))
                if got is not None and got[1] is None:
                    del self._answers[(a["ino"], name)]
        elif a.get("secx") is False and self.ttl > 0 and gen == self._gen:
            self._make_room()
            expiry = time.monotonic() + self.ttl
            for name in PROBED_XATTRS:
                self._answers[(a["ino"], name)] = (expiry, None)
            if self.mirror is not None:
                self.mirror.caps_none(a["ino"], expiry)

    def _make_room(self) -> None:
        """Drop the oldest eighth of the answers when full (dicts keep insertion order)."""
        if len(self._answers) >= _PROBED_MAX:
            for key in list(itertools.islice(self._answers, _PROBED_MAX // 8)):
                del self._answers[key]

    def changed(self, inode: int) -> None:
        """Before and after this node changes an xattr of ``inode``: drop its cached answers,
        and keep a lookup in flight meanwhile from storing what it got."""
        if self.mirror is not None:
            self.mirror.caps_drop(inode)
        for name in PROBED_XATTRS:
            self._answers.pop((inode, name), None)
        self._gen += 1


class VirtualXattrs:
    """The mount's control names (``cachewire.VIRTUAL_XATTRS``): read, set and remove.

    Each method returns True (or the value) when it handled ``name``, so the caller passes
    every other name on to the manager.

    Args:
        client: the manager and I/O daemons.
        controls: the cache controls behind the names.
        table: per-inode state (``sync``).
        learn: the mount's attribute learner, for a new stripe of a file.
        kernel_invalidate: drops the kernel's pages of an inode (``cache drop``).
    """

    def __init__(self, client: AsyncClient, controls: Controls, table: HandleTable,
                 learn: Callable[[dict], dict],
                 kernel_invalidate: Callable[[int], Awaitable[None]]) -> None:
        self.client = client
        self.controls = controls
        self.table = table
        self.learn = learn
        self.kernel_invalidate = kernel_invalidate
        # Awaited before a new layout is asked for: a file whose data this mount holds
        # alone writes them back first, or the manager would find it empty (delegations.py).
        self.before_setstripe: Callable[[int], Awaitable[None]] | None = None

    async def get(self, inode: int, name: str, cred: Cred) -> bytes | None:
        """The value of a virtual ``name``; None if ``name`` is not one of them."""
        if name == cachewire.STATS_XATTR:
            return self.controls.stats_text()
        if name == cachewire.STRIPE_XATTR:
            stripe = await self.client.getstripe(inode, cred)
            if stripe is None:
                raise FUSEError(errno.ENODATA)
            return cachewire.format_stripe(stripe).encode()
        if name == cachewire.BYPASS_XATTR:
            return self.controls.get_bypass(inode)
        if name == cachewire.SYNC_XATTR:
            return self.controls.get_sync(inode)
        return None

    async def set(self, inode: int, name: str, value: bytes, cred: Cred) -> bool:
        """Apply a virtual ``name``; False if ``name`` is not one of them."""
        if name == cachewire.STATS_XATTR:
            raise FUSEError(errno.EPERM)
        if name == cachewire.DROP_XATTR:  # pvfs-admin cache drop (root only, like drop_caches)
            if cred.uid != 0:
                raise FUSEError(errno.EPERM)
            await self.controls.drop_cache(self.kernel_invalidate, inode)
            return True
        if name in (cachewire.BYPASS_XATTR, cachewire.SYNC_XATTR):
            await self.client.access(inode, os.W_OK, cred)
            if name == cachewire.BYPASS_XATTR:
                self.controls.set_bypass(inode, value)
            else:
                self.controls.set_sync(inode, value)
            return True
        if name == cachewire.STRIPE_XATTR:
            default = await self.client.getstripe(inode, cred) or self.client.config.stripe
            stripe = cachewire.parse_stripe(value.decode("ascii"), default)
            if self.before_setstripe is not None:
                await self.before_setstripe(inode)
            a = await self.client.setstripe(inode, stripe, cred)
            if a.get("type") == "file":
                self.learn(a)
            return True
        return False

    def remove(self, inode: int, name: str) -> bool:
        """Remove a virtual ``name`` (bypass and sync go back to their defaults); False if
        ``name`` is not one of them."""
        if name == cachewire.BYPASS_XATTR:
            self.controls.set_bypass(inode, b"")
            return True
        if name == cachewire.SYNC_XATTR:
            self.table.info(inode).sync = False
            return True
        if name in cachewire.VIRTUAL_XATTRS:
            raise FUSEError(errno.EPERM)
        return False
