"""``call_many`` raises only once every daemon it asked has answered (protocol/rpc.py).

The manager undoes a create whose stripe files could not all be made by unlinking them on
the daemons that did answer. CI caught an orphaned stripe file (fsck: "no inode") after an
I/O daemon was killed during a create: the first daemon's failure was raised at once, the
other daemon's create was still running, and the undo's unlink reached it first.
"""

from __future__ import annotations

import errno
import socket

import pytest
import trio

from pvfs.protocol import aio
from pvfs.protocol.rpc import Channel, call_many

pytestmark = pytest.mark.trio


async def _listener() -> tuple[trio.socket.SocketType, int]:
    sock = trio.socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    await sock.bind(("127.0.0.1", 0))
    sock.listen(4)
    return sock, sock.getsockname()[1]


async def _dies_on_request(listener) -> None:
    """A daemon killed while it holds the request: the connection closes without a reply."""
    conn, _ = await listener.accept()
    with conn:
        await aio.recv_frame(conn, 5.0)


async def _answers_late(listener, log: list[str], delay: float) -> None:
    conn, _ = await listener.accept()
    with conn:
        got = await aio.recv_frame(conn, 5.0)
        await trio.sleep(delay)
        log.append(f"done {got[0]['op']}")
        await aio.send_frame(conn, {"ok": True})
        await aio.recv_frame(conn, 5.0, idle_timeout=5.0)  # until the caller closes


async def _channels(*ports: int) -> list[Channel]:
    return [Channel("127.0.0.1", p, 2.0, 5.0, name=f"iod{i}") for i, p in enumerate(ports)]


async def test_a_failure_is_raised_after_the_other_daemons_answered():
    dead, dead_port = await _listener()
    slow, slow_port = await _listener()
    log: list[str] = []
    with dead, slow:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_dies_on_request, dead)
            nursery.start_soon(_answers_late, slow, log, 0.3)
            chans = await _channels(dead_port, slow_port)
            with pytest.raises(OSError) as info:
                await call_many([(ch, {"op": "create", "ino": 7}) for ch in chans], 5.0)
            log.append("raised")
            assert info.value.errno == errno.ECONNRESET
            for ch in chans:
                ch.close()
            nursery.cancel_scope.cancel()
        assert log == ["done create", "raised"]


async def test_a_daemon_that_never_answers_ends_the_wait_at_the_timeout():
    dead, dead_port = await _listener()
    mute, mute_port = await _listener()
    with dead, mute:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_dies_on_request, dead)
            nursery.start_soon(_answers_late, mute, [], 60.0)
            chans = await _channels(dead_port, mute_port)
            with trio.fail_after(5.0), pytest.raises(OSError) as info:
                await call_many([(ch, {"op": "create", "ino": 7}) for ch in chans], 0.5)
            assert info.value.errno == errno.ECONNRESET  # the failure, not the wait, is reported
            for ch in chans:
                ch.close()
            nursery.cancel_scope.cancel()
