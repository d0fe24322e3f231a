"""Request schemas of the global cache daemon (checked like every daemon's, SPEC §10)."""

from __future__ import annotations

from typing import Any

from pvfs.layout.describe import MAX_OFFSET
from pvfs.protocol.schema import INO, OFFSET, Field, boolean, integer, optional, stripe, text

#: Largest read served in one request (the client splits longer ones).
MAX_READ = 64 << 20
#: Most regions in one list request (the mount's list I/O limit, ``cachewire``).
MAX_REGIONS = 16384


def regions(total: int | None) -> Any:
    """A list of ``[offset, length]`` pairs within the file's range (at most
    :data:`MAX_REGIONS`; with ``total``, at most that many bytes in all)."""
    def check(v: Any) -> list[tuple[int, int]]:
        if not isinstance(v, list) or not 1 <= len(v) <= MAX_REGIONS:
            raise ValueError(f"must be a list of 1 to {MAX_REGIONS} regions")
        out: list[tuple[int, int]] = []
        for r in v:
            if (not isinstance(r, list | tuple) or len(r) != 2
                    or any(type(x) is not int for x in r)
                    or r[0] < 0 or r[1] < 0 or r[0] + r[1] > MAX_OFFSET):
                raise ValueError("each region must be [offset, length] within the file range")
            out.append((r[0], r[1]))
        if total is not None and sum(n for _, n in out) > total:
            raise ValueError(f"the regions must add up to at most {total} bytes")
        return out
    return check


CLIENT = Field(optional(text(64)), False, None)

GCACHE_SCHEMAS: dict[str, dict[str, Field]] = {
    "ping": {},
    "status": {},
    "stats": {"reset": Field(boolean, False, False)},
    # data: bulk replies / bulk requests; ``client`` names a coherence=sync holder
    "read": {"ino": INO, "stripe": Field(stripe), "offset": Field(OFFSET),
             "length": Field(integer(0, MAX_READ)), "client": CLIENT},
    "write": {"ino": INO, "stripe": Field(stripe), "offset": Field(OFFSET),
              "sync": Field(boolean, False, False), "invalidate": Field(boolean, False, False),
              "client": CLIENT},
    "read_list": {"ino": INO, "stripe": Field(stripe), "regions": Field(regions(MAX_READ)),
                  "client": CLIENT},
    "write_list": {"ino": INO, "stripe": Field(stripe), "regions": Field(regions(None)),
                   "sync": Field(boolean, False, False),
                   "invalidate": Field(boolean, False, False), "client": CLIENT},
    "fsync": {"ino": INO, "stripe": Field(stripe), "data_only": Field(boolean, False, False)},
    "flush": {"ino": Field(integer(0, 2**63 - 1), False, 0)},
    "truncate": {"ino": INO, "size": Field(OFFSET), "fence": Field(boolean, False, False)},
    "truncated": {"ino": INO},
    "forget": {"ino": INO},
    "invalidate": {"ino": INO, "offset": Field(OFFSET), "length": Field(OFFSET)},
    "policy_set": {"policy": Field(text(16)), "threshold": Field(integer(0, 1 << 20), False, 25),
                   "drop": Field(boolean, False, False)},
    # the holder directory (coherence=sync), as at the I/O daemons
    "cb_register": {"client": Field(text(64)), "block_size": Field(integer(512, 1 << 26))},
    "cb_hold": {"client": Field(text(64)), "ino": INO, "first": Field(integer(0, 2**50)),
                "count": Field(integer(1, 1 << 24))},
    "cb_invalidate": {"client": Field(text(64)), "ino": INO, "offset": Field(OFFSET),
                      "length": Field(OFFSET)},
}
