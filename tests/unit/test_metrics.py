"""The Prometheus text format of pvfs.metrics and the tiny HTTP handler."""

from __future__ import annotations

import socket

import trio

from pvfs import metrics
from pvfs.daemons.httpmetrics import serve_metrics


def test_counters_histogram_and_gauges_render_and_parse_back():
    m = metrics.Metrics("iod3")
    m.request("read", 0.0003)
    m.request("read", 0.02)
    m.request("write", 20.0, error=True)
    m.request("ping")
    m.add_bytes("read", 4096)
    text = metrics.render(m.families({"pvfs_connections": ("Open connections.", 7)}))
    assert "# TYPE pvfs_request_duration_seconds histogram" in text
    s = metrics.parse(text)
    d = ("daemon", "iod3")
    assert s[("pvfs_requests_total", (d, ("op", "read")))] == 2
    assert s[("pvfs_requests_total", (d, ("op", "ping")))] == 1
    assert s[("pvfs_request_errors_total", (d, ("op", "write")))] == 1
    assert s[("pvfs_bytes_total", (d, ("direction", "read")))] == 4096
    assert s[("pvfs_connections", (d,))] == 7
    bucket = "pvfs_request_duration_seconds_bucket"
    assert s[(bucket, (d, ("le", "0.00025"), ("op", "read")))] == 0
    assert s[(bucket, (d, ("le", "0.0005"), ("op", "read")))] == 1
    assert s[(bucket, (d, ("le", "0.025"), ("op", "read")))] == 2
    assert s[(bucket, (d, ("le", "10.0"), ("op", "write")))] == 0  # 20 s: only in +Inf
    assert s[(bucket, (d, ("le", "+Inf"), ("op", "write")))] == 1
    assert s[("pvfs_request_duration_seconds_count", (d, ("op", "read")))] == 2
    assert abs(s[("pvfs_request_duration_seconds_sum", (d, ("op", "read")))] - 0.0203) < 1e-9
    assert ("pvfs_request_duration_seconds_count", (d, ("op", "ping"))) not in s


def test_merge_keeps_one_help_and_type_per_family():
    a, b = metrics.Metrics("iod0"), metrics.Metrics("iod1")
    a.request("read", 0.001)
    b.request("read", 0.001)
    text = metrics.render(metrics.merge(a.families(), b.families()))
    assert text.count("# TYPE pvfs_requests_total counter") == 1
    s = metrics.parse(text)
    assert s[("pvfs_requests_total", (("daemon", "iod0"), ("op", "read")))] == 1
    assert s[("pvfs_requests_total", (("daemon", "iod1"), ("op", "read")))] == 1


def test_label_values_are_escaped():
    fam = [{"name": "x", "type": "gauge", "help": "h", "samples": [["", {"a": 'q"\\\n'}, 1]]}]
    assert metrics.render(fam) == '# HELP x h\n# TYPE x gauge\nx{a="q\\"\\\\\\n"} 1\n'


def _get(port: int, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(request)
        out = b""
        try:
            while chunk := s.recv(65536):
                out += chunk
        except ConnectionResetError:  # a refused oversized request may be reset
            out += b"<reset>"
    return out


def test_http_handler_serves_metrics_and_refuses_the_rest():
    async def main() -> list[bytes]:
        async with trio.open_nursery() as nursery:
            addr = await nursery.start(serve_metrics, "127.0.0.1", 0, lambda: "up 1\n")
            port = addr[1]
            answers = []
            for req in (b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", b"GET /nope HTTP/1.0\r\n\r\n",
                        b"POST /metrics HTTP/1.0\r\n\r\n", b"\r\n\r\n", b"x" * 20000,
                        b"GET /metrics HTTP/1.0\r\n\r\n"):
                answers.append(await trio.to_thread.run_sync(_get, port, req))
            nursery.cancel_scope.cancel()
        return answers

    ok, missing, post, empty, huge, again = trio.run(main)
    assert ok.startswith(b"HTTP/1.0 200 OK\r\n") and ok.endswith(b"\r\n\r\nup 1\n")
    assert b"Content-Type: text/plain; version=0.0.4" in ok
    assert missing.startswith(b"HTTP/1.0 404")
    assert post.startswith(b"HTTP/1.0 405")
    assert empty.startswith(b"HTTP/1.0 400")
    assert huge.startswith(b"HTTP/1.0 400") or huge == b"<reset>"
    assert again == ok  # still serving
