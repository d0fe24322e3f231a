"""Errors on the wire are ``{"err": errno, "msg": text}``; clients raise ``OSError``s.

``raise_for(reply)`` turns an error reply into the right ``OSError`` subclass (Python picks
``FileNotFoundError`` for ENOENT, ``PermissionError`` for EACCES, ...), so callers and the FUSE
layer map them back to errno naturally.
"""

from __future__ import annotations

import errno
import os


class ProtocolError(OSError):
    """The peer broke the protocol (bad frame, wrong reply); the connection is dropped."""

    def __init__(self, msg: str) -> None:
        super().__init__(errno.EPROTO, msg)


def error_reply(err: int, msg: str | None = None) -> dict:
    return {"err": int(err), "msg": msg or os.strerror(err)}


def from_exception(exc: BaseException) -> dict:
    """The error reply for an exception raised while serving a request."""
    if isinstance(exc, OSError) and exc.errno:
        return error_reply(exc.errno, exc.strerror or str(exc))
    if isinstance(exc, (ValueError, TypeError, KeyError)):
        return error_reply(errno.EINVAL, str(exc) or "invalid argument")
    return error_reply(errno.EIO, f"internal error: {type(exc).__name__}")


def make_oserror(err: int, msg: str, filename: str | None = None) -> OSError:
    if filename is not None:
        return OSError(err, msg, filename)
    return OSError(err, msg)


def raise_for(reply: dict, filename: str | None = None) -> dict:
    """Return ``reply`` if it is a success, else raise the OSError it carries."""
    err = reply.get("err")
    if err:
        if not isinstance(err, int) or err <= 0 or err > 4095:
            raise ProtocolError(f"bad error code in reply: {err!r}")
        msg = reply.get("msg")
        raise make_oserror(err, msg if isinstance(msg, str) else os.strerror(err), filename)
    return reply
