"""When a request may be sent again after its connection broke.

Pooled connections outlive the daemon they were opened to: after a daemon restarts, every idle
connection to it is dead, and the first request on each fails although the daemon is back. So
a client that loses a connection drops every idle one to that daemon, and resends the request
once on a fresh connection if sending it twice cannot change the outcome. Reads and queries
are such requests; so are the I/O daemons' data and stripe-file calls (a write of the same
bytes to the same places, a truncate to the same length, creating or removing a stripe file
that is already there or gone). The manager's name-space changes are not: a retried ``mkdir``
whose first copy was applied would answer EEXIST.
"""

from __future__ import annotations

import errno

MGR_IDEMPOTENT = frozenset({
    "ping", "status", "resolve", "lookup", "getattr", "readlink", "readdir", "statfs", "access",
    "getxattr", "listxattr", "getstripe", "nfile", "inodes", "precreated",
    "sync", "sizes_changed",
})
IOD_IDEMPOTENT = frozenset({
    "ping", "status", "read", "write", "writes", "size", "sizes", "truncate", "utime", "create",
    "precreate", "unlink", "unlinks", "fsync", "statfs", "stats", "sched_get", "sched_set", "list",
    # coherence=sync: holdings are a set (a second hold adds nothing), and invalidating the
    # other holders' copies twice drops nothing more
    "cb_hold", "cb_invalidate",
})

# A connection that failed with one of these is dead; a timeout is not retried (the daemon
# may be alive but stuck, and the caller's time is already spent).
BROKEN = frozenset({errno.ECONNRESET, errno.EPIPE, errno.ECONNABORTED, errno.ENOTCONN,
                    errno.ECONNREFUSED})


def may_resend(op: str, err: int, to_manager: bool) -> bool:
    return err in BROKEN and op in (MGR_IDEMPOTENT if to_manager else IOD_IDEMPOTENT)
