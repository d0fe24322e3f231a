"""Request/reply channels to one daemon, for trio code (the async client, the mount's
coherence callbacks, the manager calling I/O daemons, I/O daemons calling the manager).

It lives in ``pvfs.protocol`` beside the framing it speaks because both daemons use it as
much as the clients do.

A channel keeps a small pool of idle connections; a call takes one (or opens one), sends a
frame, waits for the reply under the request timeout, and gives the connection back. A
connection that timed out or broke is closed, never reused, so a late reply can't be read as
the answer to a later request.
"""

from __future__ import annotations

import errno
from typing import NoReturn

import trio

from pvfs.protocol import aio, auth
from pvfs.protocol.errors import ProtocolError, raise_for
from pvfs.protocol.framing import FrameError
from pvfs.protocol.retry import BROKEN, may_resend


class Channel:
    """Calls to the daemon at host:port."""

    def __init__(self, host: str, port: int, connect_timeout: float, request_timeout: float,
                 max_idle: int = 8, name: str = "", manager: bool = True,
                 key: bytes | None = None, role: str = "client") -> None:
        self.host, self.port = host, port
        self.connect_timeout = connect_timeout
        self.request_timeout = request_timeout
        self.max_idle = max_idle
        self.name = name or f"{host}:{port}"
        self._idle: list = []
        self.closed = False
        self.manager = manager  # which operations may be resent (protocol/retry.py)
        self.key, self.role = key, role  # new connections authenticate with key (auth.py)

    async def _take(self):
        if self.closed:
            raise trio.ClosedResourceError(f"channel to {self.name} is closed")
        if self._idle:
            return self._idle.pop()
        try:
            sock = await aio.connect(self.host, self.port, self.connect_timeout)
        except TimeoutError:
            raise TimeoutError(errno.ETIMEDOUT,
                               f"{self.name}: no connection within {self.connect_timeout:g} s") from None
        except OSError as exc:
            raise OSError(exc.errno or errno.EHOSTUNREACH,
                          f"{self.name}: cannot connect: {exc.strerror or exc}") from None
        if self.key is not None:
            try:
                addr = f"{self.host}:{self.port}"
                await auth.client_handshake(
                    sock, self.key, self.role,
                    self.name if addr in self.name else f"{self.name} ({addr})",
                    self.connect_timeout)
            except BaseException:
                sock.close()
                raise
        return sock

    def _give_back(self, sock) -> None:
        if self.closed or len(self._idle) >= self.max_idle:
            sock.close()
        else:
            self._idle.append(sock)

    async def call(self, header: dict, bulk: bytes = b"", timeout: float | None = None,
                   check: bool = True) -> dict:
        """Send one request and return its reply header (OSError if it carries an error)."""
        reply, _ = await self.call_bulk(header, bulk, timeout, check, want_bulk=False)
        return reply

    def _drop_idle(self) -> None:
        for s in self._idle:
            s.close()
        self._idle.clear()

    async def call_bulk(self, header: dict, bulk: bytes = b"", timeout: float | None = None,
                        check: bool = True, want_bulk: bool = True) -> tuple[dict, bytes]:
        pooled = bool(self._idle)
        try:
            return await self._call_once(header, bulk, timeout, check, want_bulk)
        except OSError as exc:
            if not isinstance(exc, (TimeoutError, ProtocolError)) and exc.errno in BROKEN:
                # The daemon went away (maybe restarted): its other idle connections are dead.
                self._drop_idle()
                if pooled and may_resend(str(header.get("op")), exc.errno, self.manager):
                    return await self._call_once(header, bulk, timeout, check, want_bulk)
            raise

    async def _call_once(self, header: dict, bulk: bytes, timeout: float | None, check: bool,
                         want_bulk: bool) -> tuple[dict, bytes]:
        sock = await self._take()
        ok = False
        try:
            with trio.fail_after(timeout or self.request_timeout):
                await aio.send_frame(sock, header, bulk)
                got = await aio.recv_frame(sock, timeout or self.request_timeout)
                if got is None:
                    raise ConnectionResetError(errno.ECONNRESET, f"{self.name} closed the connection")
                reply, blen = got
                data = await aio.recv_exactly(sock, blen) if blen else b""
                if blen and not want_bulk:
                    raise ProtocolError(f"{self.name}: unexpected bulk data in reply")
            ok = True
        except trio.TooSlowError:
            raise TimeoutError(errno.ETIMEDOUT,
                               f"{self.name}: no reply within {timeout or self.request_timeout:g} s"
                               ) from None
        except FrameError as exc:
            raise ProtocolError(f"{self.name}: {exc}") from None
        except OSError as exc:
            if isinstance(exc, (TimeoutError, ProtocolError)):
                raise
            raise OSError(exc.errno or errno.EIO, f"{self.name}: {exc.strerror or exc}") from None
        finally:
            if ok:
                self._give_back(sock)
            else:
                sock.close()
        return (raise_for(reply) if check else reply), data

    def close(self) -> None:
        self.closed = True
        self._drop_idle()


async def call_many(calls: list[tuple[Channel, dict]], timeout: float) -> list[dict]:
    """The same as ``ch.call(header)`` for every pair, overlapped in one task.

    Every request is sent before any reply is awaited, so N daemons answer in about the time
    of one, without a task or thread per daemon. The first error is raised after every other
    daemon has answered (or the timeout passed) and every connection is back in its pool or
    closed; a batch whose pooled connections turned out dead is resent once when every
    request in it may be (protocol/retry.py).
    """
    pooled = all(ch._idle for ch, _ in calls)
    try:
        return await _call_many_once(calls, timeout)
    except OSError as exc:
        if isinstance(exc, (TimeoutError, ProtocolError)) or exc.errno not in BROKEN:
            raise
        for ch, _ in calls:
            ch._drop_idle()
        if pooled and all(may_resend(str(h.get("op")), exc.errno, ch.manager) for ch, h in calls):
            return await _call_many_once(calls, timeout)
        raise


async def _call_many_once(calls: list[tuple[Channel, dict]], timeout: float) -> list[dict]:
    socks: list = []
    done: list[bool] = []
    first: Exception | None = None  # the first failure; the other replies are still awaited
    try:
        for ch, _ in calls:
            socks.append(await ch._take())
            done.append(False)
        replies: list[dict] = []
        with trio.fail_after(timeout):
            sent = []
            for sock, (_, header) in zip(socks, calls):
                try:
                    await aio.send_frame(sock, header)
                    sent.append(True)
                except OSError as exc:
                    first = first or exc
                    sent.append(False)
            # Every reply is awaited even after a failure: a caller that undoes the call
            # (a create whose stripe files could not all be made) must not race the
            # daemons still doing it.
            for i, (sock, (ch, _)) in enumerate(zip(socks, calls)):
                if not sent[i]:
                    continue
                try:
                    got = await aio.recv_frame(sock, timeout)
                    if got is None:
                        raise ConnectionResetError(errno.ECONNRESET,
                                                   f"{ch.name} closed the connection")
                    reply, blen = got
                    if blen:
                        raise ProtocolError(f"{ch.name}: unexpected bulk data in reply")
                except (OSError, FrameError) as exc:
                    first = first or exc
                    continue
                done[i] = True
                replies.append(reply)
        if first is not None:
            raise first
    except trio.TooSlowError:
        if first is None:
            raise TimeoutError(errno.ETIMEDOUT, f"no reply within {timeout:g} s") from None
        _raise_as_oserror(first)  # a daemon that failed says more than one that is slow
    except (OSError, FrameError) as exc:
        _raise_as_oserror(exc)
    finally:
        for (ch, _), sock, ok in zip(calls, socks, done):
            if ok:
                ch._give_back(sock)
            else:
                sock.close()
    for (ch, _), reply in zip(calls, replies):
        raise_for(reply)
    return replies


def _raise_as_oserror(exc: Exception) -> NoReturn:
    """Raise ``exc`` as the OSError callers expect (framing errors as ProtocolError)."""
    if isinstance(exc, FrameError):
        raise ProtocolError(str(exc)) from None
    if isinstance(exc, (TimeoutError, ProtocolError)):
        raise exc
    assert isinstance(exc, OSError)
    raise OSError(exc.errno or errno.EIO, f"{exc.strerror or exc}") from None
