"""The manager's calls to the I/O daemons for metadata: a file's size from its stripe files.

The manager takes no part in reads and writes, but a file's size, mtime and blocks are those
its stripe files imply (SPEC §1), and truncates and explicit mtimes change the stripe files.
This part holds the channels to the I/O daemons and makes those calls: overlapped across a
file's daemons in one task (``rpc.call_many``), answered from the size cache while the daemons
keep it true (sizecache.py), batched per daemon for listings.
"""

from __future__ import annotations

from pvfs.config import Config
from pvfs.layout.stripe import Stripe, local_size, logical_size
from pvfs.protocol.rpc import Channel, call_many

from .group import GroupCommit
from .sizecache import SizeCache

__all__ = ["StripeFiles"]


def _blocks(per_iod: list[int | None]) -> int | None:
    """A file's st_blocks: the 512-byte blocks its stripe files really use, summed (None
    if a daemon did not say: the client then falls back to the size)."""
    return None if any(b is None for b in per_iod) else sum(per_iod)  # type: ignore[arg-type]


def _fill(attrs: dict, stripe: Stripe, shares: list) -> None:
    """A file's size, mtime and blocks from its stripe files' (rank order). An empty stripe
    file's mtime does not count: it holds no data written later than the inode's mtime (a
    truncation sets that too), and a file's explicit mtime then need not be set on it."""
    attrs["size"] = logical_size(stripe, [s for s, _, _ in shares])
    attrs["mtime_ns"] = max([attrs["mtime_ns"]] + [m for s, m, _ in shares if s])
    attrs["blocks"] = _blocks([b for _, _, b in shares])


class StripeFiles:
    """Channels to the I/O daemons and the manager's metadata calls over them (a part of the
    manager, ``server.stripes``)."""

    def __init__(self, config: Config, key: bytes | None, sizes: SizeCache,
                 group: GroupCommit) -> None:
        self.config = config
        self.sizes = sizes
        self.group = group
        self.channels = [Channel(e.host, e.port, config.connect_timeout, config.request_timeout,
                                 max_idle=32, name=f"iod{i} ({e.address})", manager=False,
                                 key=key, role="mgr")
                         for i, e in enumerate(config.iods)]

    def close(self) -> None:
        for ch in self.channels:
            ch.close()

    def iods_of(self, stripe: list[int] | Stripe) -> list[tuple[int, int]]:
        """(rank, iod index) of every share of a file."""
        s = stripe if isinstance(stripe, Stripe) else Stripe(*stripe)
        return [(r, s.iod_of_rank(r, self.config.niods)) for r in range(s.pcount)]

    async def each(self, calls: list[tuple[int, dict]]) -> list[dict]:
        """Run calls to several I/O daemons concurrently; the first failure is raised."""
        if not calls:
            return []
        return await call_many([(self.channels[iod], header) for iod, header in calls],
                               self.config.request_timeout)

    async def with_size(self, attrs: dict) -> dict:
        """Fill a file's size and mtime from its stripe files (SPEC §1): from the size
        cache while the I/O daemons keep it true, else asked of each of them."""
        if attrs.get("type") != "file":
            return attrs
        stripe = Stripe(*attrs["stripe"])
        ino = attrs["ino"]
        shares = self.sizes.get(ino)
        if shares is None:
            token = self.sizes.begin(ino)
            replies = await self.each([(iod, {"op": "size", "ino": ino,
                                                     "watch": self.sizes.wants_watch(ino)})
                                        for _, iod in self.iods_of(stripe)])
            shares = [(r["local_size"], r["mtime_ns"], r.get("blocks")) for r in replies]
            self.sizes.install(ino, token, shares, all(r.get("watched") for r in replies))
        _fill(attrs, stripe, shares)
        return attrs

    async def with_sizes(self, entries: list[dict]) -> set[int]:
        """Fill sizes of many files with one batched call per I/O daemon. Returns the files
        whose promise a daemon declined (a change of it was in progress there), not cached."""
        files = [a for a in entries if a.get("type") == "file"]
        if not files:
            return set()
        known = {a["ino"]: self.sizes.get(a["ino"]) for a in files}
        wanted: dict[int, list[int]] = {}
        tokens = {}
        for a in files:
            if known[a["ino"]] is None:
                tokens[a["ino"]] = self.sizes.begin(a["ino"])
                for _, iod in self.iods_of(a["stripe"]):
                    wanted.setdefault(iod, []).append(a["ino"])
        watch = all(self.sizes.wants_watch(ino) for ino in tokens)  # one flag per request
        calls = [(iod, {"op": "sizes", "inos": inos, "watch": watch})
                 for iod, inos in wanted.items()]
        replies = await self.each(calls)
        got: dict[tuple[int, int], tuple[int, int, int | None]] = {}
        unwatched: set[int] = set()
        for (iod, header), reply in zip(calls, replies):
            watched = reply.get("watched") or [False] * len(header["inos"])
            for ino, (size, mtime, *blocks), w in zip(header["inos"], reply["sizes"], watched):
                got[(iod, ino)] = (size, mtime, blocks[0] if blocks else None)
                if not w:
                    unwatched.add(ino)
        for a in files:
            stripe = Stripe(*a["stripe"])
            shares = known[a["ino"]]
            if shares is None:
                shares = [got[(iod, a["ino"])] for _, iod in self.iods_of(stripe)]
                self.sizes.install(a["ino"], tokens[a["ino"]], shares,
                                   a["ino"] not in unwatched)
            _fill(a, stripe, shares)
        return unwatched if watch else set()

    async def truncate(self, attrs: dict, size: int) -> None:
        stripe = Stripe(*attrs["stripe"])
        await self.change(attrs["ino"], [
            (iod, {"op": "truncate", "ino": attrs["ino"],
                   "local_size": local_size(stripe, rank, size)})
            for rank, iod in self.iods_of(stripe)])

    async def change(self, ino: int, calls: list[tuple[int, dict]]) -> None:
        """The manager's own change of a file's stripe files (truncate, utime): its cached
        size goes before and after (a fetch begun in between is not kept), and the daemons
        drop their promise without reporting back (``unwatch``; sizecache.py)."""
        await self.group.durable()  # the store's change first (a crash keeps it or neither)
        self.sizes.forget([ino], reported=False)
        try:
            await self.each([(iod, {**header, "unwatch": True}) for iod, header in calls])
        finally:
            self.sizes.forget([ino], reported=False)

    async def set_mtime(self, attrs: dict) -> None:
        """The manager's utime of a file's stripe files (an explicit mtime must outlast
        their older ones): as :meth:`change`, but the daemons promise again and answer the
        shares they now have, kept in the size cache (so the reply's size and the next stat
        need no second round trip to them). Only the stripe files that may count are
        changed: with the shares cached, not the empty ones nor those already no newer
        (:func:`_fill` ignores or keeps them as they are) -- one daemon for a small file."""
        ino, mtime = attrs["ino"], attrs["mtime_ns"]
        await self.group.durable()  # the store's change first (a crash keeps it or neither)
        known = self.sizes.get(ino)
        ranks = self.iods_of(attrs["stripe"])
        if known is not None:  # (their daemons watch them: a change is reported)
            ranks = [(r, iod) for r, iod in ranks if known[r][0] and known[r][1] > mtime]
            if not ranks:
                return
        self.sizes.forget([ino], reported=False)
        token = self.sizes.begin(ino)  # (a report from now on takes it back)
        watch = self.sizes.wants_watch(ino)
        try:
            replies = await self.each([
                (iod, {"op": "utime", "ino": ino, "mtime_ns": mtime, "unwatch": True,
                       "watch": watch}) for _, iod in ranks])
        except BaseException:
            self.sizes.forget([ino], reported=False)
            raise
        if not watch or not self.sizes.current(ino, token):
            # Not watched (a hot file: the daemons answered no shares), or another fetch
            # began meanwhile: it may have measured before the utime reached a daemon (whose
            # promise the utime then dropped unreported): none is kept.
            self.sizes.forget([ino], reported=False)
            return
        shares = list(known) if known is not None else [None] * len(ranks)
        for (r, _), reply in zip(ranks, replies):
            shares[r] = (reply["local_size"], reply["mtime_ns"], reply.get("blocks"))
        self.sizes.install(ino, token, shares, all(r.get("watched") for r in replies))
