"""Pipelined writes (``pvfs.client.pipeline``) against fake I/O daemons: a refused write is
reported once, by the handle's next call, naming the write; a reply that never comes is EIO
(the write's fate unknown); the replies are read in order, one write in flight per daemon."""

from __future__ import annotations

import errno
import socket
import threading

import pytest

from pvfs.client.datapath import DataPath
from pvfs.client.pipeline import WritePipe
from pvfs.config import Config, Endpoint
from pvfs.layout.describe import Regions
from pvfs.layout.stripe import Stripe
from pvfs.protocol.framing import PREFIX_SIZE, decode_header, frame, parse_prefix

UNIT = 65536


def _recv(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("closed")
        out += chunk
    return bytes(out)


class FakeDaemon:
    """Answers writes in order; ``refuse``: request numbers (from 0) refused with ENOSPC;
    ``hang_after``: stop answering (and close) after that many requests."""

    def __init__(self, refuse: set[int] = frozenset(), hang_after: int | None = None) -> None:
        self.refuse, self.hang_after = set(refuse), hang_after
        self.seen: list[tuple[int, int]] = []  # (offset of the request's first region, bulk)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        conn, _ = self.listener.accept()
        with conn:
            while True:
                try:
                    hlen, blen = parse_prefix(_recv(conn, PREFIX_SIZE))
                except (ConnectionError, OSError):
                    return
                header = decode_header(_recv(conn, hlen))
                _recv(conn, blen)
                n = len(self.seen)
                self.seen.append((header["desc"][1][0],
                                  blen))
                if self.hang_after is not None and n >= self.hang_after:
                    return  # no reply; the connection closes
                reply = ({"err": errno.ENOSPC, "msg": "no space left"} if n in self.refuse
                         else {"nbytes": blen})
                conn.sendall(frame(reply))

    def close(self) -> None:
        self.listener.close()


def _pipe(tmp_path, daemon: FakeDaemon) -> tuple[WritePipe, DataPath]:
    ep = Endpoint("127.0.0.1", daemon.port, str(tmp_path))
    config = Config(name="fake", manager=ep, iods=(ep,), request_timeout=5.0, auth=False)
    data = DataPath(config)
    return WritePipe(data, 7, Stripe(0, 1, UNIT), "/fake"), data


def _write(pipe: WritePipe, offset: int, n: int = UNIT) -> int:
    return pipe.write(Regions(((offset, n),)), bytes(n))


def test_a_refused_write_is_raised_once_by_the_next_call_naming_it(tmp_path):
    daemon = FakeDaemon(refuse={1})
    pipe, data = _pipe(tmp_path, daemon)
    try:
        assert _write(pipe, 0) == UNIT          # sent; its reply read by the next write
        assert _write(pipe, UNIT) == UNIT       # refused, but not known yet
        with pytest.raises(OSError) as err:     # reads write 1's refusal
            _write(pipe, 2 * UNIT)
        assert err.value.errno == errno.ENOSPC
        assert f"{UNIT} bytes at {UNIT}" in str(err.value)
        assert _write(pipe, 3 * UNIT) == UNIT   # reported once: the pipe goes on
        pipe.close()                            # settles: nothing left to report
        assert [off for off, _ in daemon.seen] == [0, UNIT, 2 * UNIT, 3 * UNIT]
    finally:
        data.close()
        daemon.close()


def test_an_error_read_by_the_last_settle_is_raised_by_close(tmp_path):
    daemon = FakeDaemon(refuse={0})
    pipe, data = _pipe(tmp_path, daemon)
    try:
        _write(pipe, 0)
        with pytest.raises(OSError) as err:
            pipe.close()
        assert err.value.errno == errno.ENOSPC
    finally:
        data.close()
        daemon.close()


def test_a_reply_that_never_comes_is_eio_with_the_write_named(tmp_path):
    daemon = FakeDaemon(hang_after=1)
    pipe, data = _pipe(tmp_path, daemon)
    try:
        _write(pipe, 0)
        _write(pipe, UNIT)                      # the daemon takes it and closes unanswered
        with pytest.raises(OSError) as err:
            pipe.settle()
            pipe.report()
        assert err.value.errno == errno.EIO
        assert "unknown" in str(err.value) and f"at {UNIT}" in str(err.value)
    finally:
        data.close()
        daemon.close()


def test_the_replies_of_many_writes_are_read_in_order(tmp_path):
    daemon = FakeDaemon()
    pipe, data = _pipe(tmp_path, daemon)
    try:
        for i in range(200):
            assert _write(pipe, i * 4096, 4096) == 4096
        pipe.close()
        assert [off for off, _ in daemon.seen] == [i * 4096 for i in range(200)]
        assert not pipe.owing
    finally:
        data.close()
        daemon.close()


def test_stripe_send_checks_its_arguments_before_any_io():
    from pvfs import _native
    from pvfs.client.datapath import pack_regions

    regions = pack_regions([(0, 10)])
    with pytest.raises(ValueError, match="owed has 1 entries for 2 ranks"):
        _native.stripe_send([-1, -1], b"h", b"", b"", UNIT, [False], 1.0)
    with pytest.raises(ValueError, match="owes a reply but has no socket"):
        _native.stripe_send([-1, -1], b"h", b"", b"", UNIT, [False, True], 1.0)
    with pytest.raises(ValueError, match="no socket for rank 0"):
        _native.stripe_send([-1], b"h", bytes(10), regions, UNIT, [False], 1.0)
    with pytest.raises(ValueError, match="more than the buffer"):
        _native.stripe_send([3], b"h", bytes(5), regions, UNIT, [False], 1.0)
    assert _native.stripe_send([-1], b"h", b"", b"", UNIT, [False], 1.0) == ([None], [None])


def test_only_a_reads_replies_are_taken_alone():
    from pvfs import _native
    from pvfs.client.datapath import pack_regions

    with pytest.raises(ValueError, match="only a read's replies"):
        _native.stripe_transfer([3], b"h", bytes(10), pack_regions([(0, 10)]), UNIT, 1, 1.0,
                                sent=True)
