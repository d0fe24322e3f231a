"""Protocol fuzzing: malformed and hostile frames to every daemon (issue 2, SPEC §10).

Whatever arrives, a daemon answers with an error or closes the connection; it never crashes
and never creates a file outside its data directory.
"""

from __future__ import annotations

import os
import socket
import struct
from pathlib import Path

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pvfs.cluster.launch import ping
from pvfs.protocol.framing import MAGIC, PREFIX, decode_header, parse_prefix

SETTINGS = settings(max_examples=60, deadline=None)


def exchange(ep, raw: bytes, timeout: float = 3.0) -> dict | None:
    """Send raw bytes; the reply header, or None if the daemon closed the connection."""
    with socket.create_connection((ep.host, ep.port), timeout=timeout) as s:
        try:
            s.sendall(raw)
            s.shutdown(socket.SHUT_WR)
        except OSError:
            return None
        try:
            prefix = b""
            while len(prefix) < 16:
                chunk = s.recv(16 - len(prefix))
                if not chunk:
                    return None
                prefix += chunk
            hlen, _ = parse_prefix(prefix)
            body = b""
            while len(body) < hlen:
                chunk = s.recv(hlen - len(body))
                if not chunk:
                    return None
                body += chunk
            return decode_header(body)
        except (TimeoutError, ConnectionResetError):
            return None


def framed(header, bulk: bytes = b"", bulk_len: int | None = None) -> bytes:
    body = msgpack.packb(header, use_bin_type=True)
    return PREFIX.pack(MAGIC, len(body), len(bulk) if bulk_len is None else bulk_len) + body + bulk


values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**63, 2**64 - 1) | st.text(max_size=20)
    | st.binary(max_size=20) | st.floats(allow_nan=False),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=10)

MGR_OPS = ["lookup", "getattr", "setattr", "create", "open", "mkdir", "rename", "readdir",
           "symlink", "link", "setxattr", "resolve", "unlink", "setstripe", "inodes"]
IOD_OPS = ["read", "write", "size", "truncate", "create", "unlink", "fsync", "sched_set", "list"]


def endpoints(cluster):
    return [cluster.config.manager, *cluster.config.iods]


def all_alive(cluster) -> bool:
    return all(ping(ep, 2.0) is not None for ep in endpoints(cluster))


def files_outside(cluster, before: set[str]) -> set[str]:
    now = {str(p) for p in Path(cluster.dir).rglob("*")}
    allowed = [os.path.join(e.data_dir, "") for e in (cluster.config.manager, *cluster.config.iods)]
    allowed.append(os.path.join(cluster.config.run_dir, ""))
    return {p for p in now - before if not any(p.startswith(a) for a in allowed)}


@given(junk=st.binary(max_size=300))
@SETTINGS
def test_random_bytes(pvfs_cluster, junk):
    for ep in endpoints(pvfs_cluster):
        reply = exchange(ep, junk)
        assert reply is None or reply.get("err")


@given(op=st.sampled_from(MGR_OPS), fields=st.dictionaries(
    st.sampled_from(["ino", "parent", "name", "mode", "flags", "path", "target", "new_parent",
                     "new_name", "stripe", "value", "size", "cookie", "limit", "cred"]),
    values, max_size=6))
@SETTINGS
def test_wrong_types_to_the_manager(pvfs_cluster, op, fields):
    reply = exchange(pvfs_cluster.config.manager, framed({"op": op, **fields}))
    assert reply is None or isinstance(reply, dict)
    assert ping(pvfs_cluster.config.manager, 2.0) is not None


@given(op=st.sampled_from(IOD_OPS), ino=st.integers(-5, 2**64 - 1), stripe=values | st.just([0, 4, 4096]),
       desc=values | st.lists(st.integers(-10, 2**63), max_size=5).map(lambda l: ["s", *l])
       | st.just(["r", [2**62, 10]]) | st.just(["s", 0, 1, 1, 2**30]),
       bulk=st.binary(max_size=64), claimed=st.one_of(st.none(), st.integers(0, 128)))
@SETTINGS
def test_bad_descriptions_offsets_and_counts_to_iods(pvfs_cluster, op, ino, stripe, desc, bulk,
                                                     claimed):
    before = {str(p) for p in Path(pvfs_cluster.dir).rglob("*")}
    header = {"op": op, "ino": ino, "stripe": stripe, "desc": desc, "local_size": ino}
    for ep in pvfs_cluster.config.iods[:2]:
        reply = exchange(ep, framed(header, bulk if op == "write" else b"",
                                    claimed if op == "write" else None))
        assert reply is None or reply.get("err") or op in ("size", "create", "unlink", "fsync",
                                                           "truncate", "list", "read", "write")
        assert ping(ep, 2.0) is not None
    assert not files_outside(pvfs_cluster, before)


_WRITE_ITEMS = st.lists(st.fixed_dictionaries({
    "ino": st.integers(-5, 2**64 - 1) | values, "stripe": values | st.just([0, 4, 4096]),
    "off": st.integers(-5, 2**63) | values, "len": st.integers(-5, 1 << 21) | values,
    "fresh": st.booleans() | values}), max_size=4)


@given(items=_WRITE_ITEMS | values, bulk=st.binary(max_size=64),
       claimed=st.one_of(st.none(), st.integers(0, 128)))
@SETTINGS
def test_bad_batches_of_small_writes_to_iods(pvfs_cluster, items, bulk, claimed):
    before = {str(p) for p in Path(pvfs_cluster.dir).rglob("*")}
    for ep in pvfs_cluster.config.iods[:2]:
        reply = exchange(ep, framed({"op": "writes", "items": items}, bulk, claimed))
        assert reply is None or isinstance(reply, dict)
        assert ping(ep, 2.0) is not None
    assert not files_outside(pvfs_cluster, before)


@pytest.mark.parametrize("name", ["../escape", "..", ".", "a/b", "/abs", "x" * 300, "nul\x00"])
def test_path_traversal_in_names_is_refused(pvfs_cluster, name):
    before = {str(p) for p in Path(pvfs_cluster.dir).rglob("*")}
    for op in ("create", "mkdir", "symlink"):
        reply = exchange(pvfs_cluster.config.manager,
                         framed({"op": op, "parent": 1, "name": name, "mode": 0o644,
                                 "target": "/etc/passwd"}))
        assert reply is not None and reply.get("err") in (22, 36, 17), (op, name, reply)
    assert not files_outside(pvfs_cluster, before)


@pytest.mark.parametrize("raw", [
    MAGIC + struct.pack("<IQ", 10, 0) + b"\x81",              # truncated header
    MAGIC + struct.pack("<IQ", 1 << 30, 0),                   # oversized header
    MAGIC + struct.pack("<IQ", 1, 1 << 40) + b"\x80",          # absurd bulk on a control op
    b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",                      # another protocol
])
def test_broken_framing_closes_the_connection(pvfs_cluster, raw):
    for ep in endpoints(pvfs_cluster):
        reply = exchange(ep, raw)
        assert reply is None or reply.get("err")
    assert all_alive(pvfs_cluster)


def test_write_with_wrong_bulk_length_is_refused_and_connection_survives(pvfs_cluster):
    ep = pvfs_cluster.config.iods[0]
    with socket.create_connection((ep.host, ep.port), timeout=5) as s:
        s.sendall(framed({"op": "write", "ino": 999999, "stripe": [0, 4, 4096],
                          "desc": ["r", [0, 10]]}, b"abc"))
        s.sendall(framed({"op": "ping"}))
        replies = []
        buf = b""
        while len(replies) < 2:
            chunk = s.recv(65536)
            assert chunk
            buf += chunk
            while len(buf) >= 16:
                hlen, _ = parse_prefix(buf[:16])
                if len(buf) < 16 + hlen:
                    break
                replies.append(decode_header(buf[16:16 + hlen]))
                buf = buf[16 + hlen:]
    assert replies[0]["err"] == 22 and "version" in replies[1]


@pytest.fixture(scope="module")
def granted_file(pvfs_cluster):
    """A file every daemon has open and has granted to its engine's fast path (csrc/fast.c):
    headers naming it are read by C, not Python."""
    data = os.urandom(256 * 1024)
    with pvfs_cluster.connect() as fs, fs.open("/fuzz-granted", "w+b") as f:
        f.pwrite(data, 0)
        f.pread(len(data), 0)
        return f.ino, f.stripe.to_wire()


@given(cut=st.integers(0, 200), pos=st.integers(0, 200), byte=st.integers(0, 255),
       op=st.sampled_from(["read", "write"]), claimed=st.integers(0, 70000))
@SETTINGS
def test_mutated_headers_of_a_granted_file_to_iods(pvfs_cluster, granted_file, cut, pos, byte,
                                                   op, claimed):
    """Headers of reads and writes of a granted file with one byte changed, or cut short:
    the engine's reader declines what it does not read as Python would (the daemon answers
    or closes); no daemon dies."""
    ino, stripe = granted_file
    body = bytearray(msgpack.packb({"op": op, "ino": ino, "stripe": stripe,
                                    "desc": ["r", [0, 70000, 100000, 5]], "cred": [0, 0, []]}))
    body[pos % len(body)] = byte
    body = bytes(body[:len(body) - cut % len(body)] if cut % 3 == 0 else body)
    raw = PREFIX.pack(MAGIC, len(body), claimed if op == "write" else 0) + body
    for ep in pvfs_cluster.config.iods:
        reply = exchange(ep, raw + (bytes(claimed) if op == "write" else b""))
        assert reply is None or isinstance(reply, dict)
        assert ping(ep, 2.0) is not None


def test_daemons_survive_the_fuzzing(pvfs_cluster):
    assert all_alive(pvfs_cluster)
