"""One place where a mount handler's exceptions become errnos for the kernel.

A handler raises ``FUSEError(errno.X)`` where it finds the cause; ``OSError``s from the
manager or the I/O daemons carry their errno already. :func:`guard` turns everything else into
an errno: network failures become EIO (ETIMEDOUT stays ETIMEDOUT), an unexpected exception is
logged and becomes EIO. It counts both in the handler object's ``counters``.
"""

from __future__ import annotations

import errno
import functools
import logging
from collections.abc import Callable
from typing import Any

import trio
from pyfuse3 import FUSEError

from pvfs.protocol.auth import AuthError

log = logging.getLogger("pvfs.fuse")

# Network-level errnos: the daemon is unreachable or broke the protocol -> EIO for callers.
_NET_ERRNOS = {errno.ECONNREFUSED, errno.ECONNRESET, errno.ECONNABORTED, errno.EPIPE,
               errno.EHOSTUNREACH, errno.ENETUNREACH, errno.ENOTCONN, errno.EPROTO,
               errno.EBADMSG, errno.ESHUTDOWN}


def errno_of(exc: BaseException) -> int:
    if isinstance(exc, FUSEError):
        return exc.errno
    if isinstance(exc, (TimeoutError, trio.TooSlowError)):
        return errno.ETIMEDOUT
    if isinstance(exc, OSError) and exc.errno:
        return errno.EIO if exc.errno in _NET_ERRNOS else exc.errno
    if isinstance(exc, (ValueError, UnicodeError)):
        return errno.EINVAL
    return errno.EIO


def _refused(exc: BaseException) -> bool:
    """A handshake refused (here, or between the manager and an I/O daemon it asked): EACCES
    to the caller, who cannot tell it from a permission, so the log names the daemon and the
    key (issue 33)."""
    return isinstance(exc, AuthError) or (
        isinstance(exc, OSError) and exc.errno == errno.EACCES
        and "authentication" in str(exc))


def guard(fn: Callable) -> Callable:
    @functools.wraps(fn)
    async def wrapper(self: Any, *args: Any) -> Any:
        try:
            return await fn(self, *args)
        except FUSEError:
            raise
        except (OSError, ValueError, UnicodeError, trio.TooSlowError) as exc:
            code = errno_of(exc)
            if code in (errno.EIO, errno.ETIMEDOUT) or _refused(exc):
                self.counters["backend_errors"] += 1
                log.warning("%s: %s", fn.__name__, exc)
            raise FUSEError(code) from None
        except Exception:
            self.counters["internal_errors"] += 1
            log.exception("%s failed", fn.__name__)
            raise FUSEError(errno.EIO) from None
    return wrapper
