"""Shared-key authentication (SPEC §10, protocol/auth.py) against real daemons.

One file system with ``[security] auth = true`` on loopback; clients with the right key, a
wrong key, no key; raw sockets that skip or garble the handshake. Every refused peer must get
EACCES (or a closed connection) and no operation; the daemons must keep serving.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import Cluster, start_cluster
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pvfs
from pvfs.cluster.launch import down, ping, request
from pvfs.config import load
from pvfs.protocol import auth
from pvfs.protocol.framing import PREFIX_SIZE, decode_header, frame, parse_prefix


def _variant(cluster: Cluster, name: str, **changes: str) -> str:
    """A copy of the cluster's config with text replaced (another key, auth off, ...)."""
    text = Path(cluster.config_path).read_text()
    for old, new in changes.items():
        assert old in text
        text = text.replace(old, new)
    path = cluster.dir / name
    path.write_text(text)
    return str(path)


@pytest.fixture(scope="module")
def auth_cluster(tmp_path_factory):
    d = tmp_path_factory.mktemp("auth")
    auth.generate_key_file(str(d / "pvfs.key"))
    auth.generate_key_file(str(d / "other.key"))
    cluster = start_cluster(d, iods=2, key_file=str(d / "pvfs.key"), auth=True)
    try:
        yield cluster
    finally:
        down(cluster.config)


def _alive(cluster: Cluster) -> None:
    key = auth.read_key_file(cluster.config.key_file)
    for ep in (cluster.config.manager, *cluster.config.iods):
        assert ping(ep, 2.0, key) is not None, f"{ep.address} stopped answering"


def _recv_reply(s: socket.socket) -> dict | None:
    """The next reply header, or None if the daemon closed the connection."""
    buf = b""
    while len(buf) < PREFIX_SIZE:
        try:
            chunk = s.recv(PREFIX_SIZE - len(buf))
        except ConnectionResetError:
            return None
        if not chunk:
            return None
        buf += chunk
    hlen, _ = parse_prefix(buf)
    body = b""
    while len(body) < hlen:
        chunk = s.recv(hlen - len(body))
        if not chunk:
            return None
        body += chunk
    return decode_header(body)


def _closed(s: socket.socket) -> bool:
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True


# ---------------------------------------------------------------------------- clients

def test_right_key_works_end_to_end(auth_cluster):
    with auth_cluster.connect() as fs:
        fs.mkdir("/d")
        with fs.open("/d/f", "w+b") as f:  # manager -> iod create, client -> both iods
            f.write(os.urandom(1 << 20))
            f.fsync()
        assert fs.stat("/d/f").st_size == 1 << 20  # manager asks the iods for sizes
        assert fs.iod_call(1, "ping")["index"] == 1
        fs.unlink("/d/f")
    key = auth.read_key_file(auth_cluster.config.key_file)
    assert request(auth_cluster.config.manager, {"op": "status"}, 2.0, key)["role"] == "mgr"


def test_wrong_key_is_refused(auth_cluster):
    wrong = _variant(auth_cluster, "wrong.toml", **{"pvfs.key": "other.key"})
    with pytest.raises(PermissionError) as info:
        pvfs.connect(wrong)
    assert "authentication failed: wrong key for manager" in str(info.value)
    fs = pvfs.FileSystem(load(wrong))
    with pytest.raises(PermissionError, match="wrong key for iod0"):
        fs.iod_call(0, "ping")
    fs.close()
    _alive(auth_cluster)


def test_daemon_logs_a_client_proof_with_the_wrong_key(auth_cluster):
    """Drive the client half with a bad proof: the daemon says 'wrong key' and closes."""
    ep = auth_cluster.config.manager
    with socket.create_connection((ep.host, ep.port), timeout=5) as s:
        msg, _ = auth.hello("intruder")
        s.sendall(frame(msg))
        challenge = _recv_reply(s)
        assert set(challenge) == {"nonce", "proof"}
        s.sendall(frame({"op": "auth", "proof": b"\0" * 32}))
        reply = _recv_reply(s)
        assert reply["err"] == errno.EACCES and "wrong key" in reply["msg"]
        assert _closed(s)
    log = Path(auth_cluster.config.run_dir, "mgr.log").read_text()
    assert "(intruder): authentication failed: wrong key" in log


def test_no_key_is_refused(auth_cluster):
    nokey = _variant(auth_cluster, "nokey.toml", **{"auth = true": "auth = false"})
    with pytest.raises(PermissionError, match="authentication required"):
        pvfs.connect(nokey)
    fs = pvfs.FileSystem(load(nokey))
    with pytest.raises(PermissionError, match="authentication required"):
        fs.iod_call(1, "status")
    fs.close()
    _alive(auth_cluster)


def test_client_refuses_a_daemon_without_authentication(tmp_path):
    """Mutual: a client with a key does not talk to daemons that skip the handshake."""
    cluster = start_cluster(tmp_path, iods=1)  # loopback, no [security]: auth off
    try:
        auth.generate_key_file(str(tmp_path / "k"))
        text = Path(cluster.config_path).read_text() + \
            f'\n[security]\nkey_file = "{tmp_path / "k"}"\nauth = true\n'
        (tmp_path / "keyed.toml").write_text(text)
        with pytest.raises(PermissionError, match="does not authenticate"):
            pvfs.connect(str(tmp_path / "keyed.toml"))
    finally:
        down(cluster.config)


# ---------------------------------------------------------------------------- the key file

def test_key_file_must_be_private(tmp_path):
    path = tmp_path / "k"
    auth.generate_key_file(str(path))
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert len(auth.read_key_file(str(path))) == 64
    for mode in (0o640, 0o604, 0o660):
        os.chmod(path, mode)
        with pytest.raises(PermissionError, match=f"mode {mode:04o}.*chmod 600"):
            auth.read_key_file(str(path))
    os.chmod(path, 0o600)
    path.write_text("short\n")
    with pytest.raises(ValueError, match="at least 32"):
        auth.read_key_file(str(path))
    with pytest.raises(FileNotFoundError, match="pvfs-admin key generate"):
        auth.read_key_file(str(tmp_path / "missing"))


def test_daemons_refuse_to_start_with_an_open_key_file(tmp_path):
    from pvfs.cluster.launch import make_config, up, write_config

    auth.generate_key_file(str(tmp_path / "k"))
    os.chmod(tmp_path / "k", 0o644)
    cfg = write_config(make_config(str(tmp_path), iods=1, key_file=str(tmp_path / "k"),
                                   auth=True), str(tmp_path / "pvfs.toml"))
    with pytest.raises(PermissionError, match="chmod 600"):
        up(cfg)
    down(cfg)


def test_auth_is_on_by_default_for_non_loopback_addresses(tmp_path):
    from pvfs.cluster.launch import make_config

    assert not make_config(str(tmp_path), iods=2).auth_enabled
    assert make_config(str(tmp_path), hosts=["10.0.0.1", "10.0.0.2"]).auth_enabled
    assert make_config(str(tmp_path), hosts=["node1"]).auth_enabled
    assert not make_config(str(tmp_path), hosts=["localhost", "127.0.0.2"]).auth_enabled
    assert make_config(str(tmp_path), iods=1, auth=True).auth_enabled
    with pytest.raises(ValueError, match="key_file is not set"):
        auth.key_for(make_config(str(tmp_path), hosts=["10.0.0.1"]))


# ---------------------------------------------------------------------------- raw sockets

OPS = [
    ({"op": "ping"}, b""),
    ({"op": "status"}, b""),
    ({"op": "resolve", "path": "/", "cred": [0, 0, []]}, b""),
    ({"op": "mkdir", "parent": 1, "name": "evil", "mode": 0o777, "cred": [0, 0, []]}, b""),
    ({"op": "create", "ino": 1, "cred": [0, 0, []]}, b""),
    ({"op": "write", "ino": 5, "stripe": [0, 1, 65536], "desc": [[0, 4096]]}, b"x" * 4096),
    ({"op": "unlink", "ino": 1}, b""),
]


@pytest.mark.parametrize("which", ["mgr", "iod0", "iod1"])
def test_a_raw_socket_without_the_handshake_gets_no_operation(auth_cluster, which):
    cfg = auth_cluster.config
    ep = cfg.manager if which == "mgr" else cfg.iods[int(which[3:])]
    for header, bulk in OPS:
        with socket.create_connection((ep.host, ep.port), timeout=5) as s:
            s.sendall(frame(header, len(bulk)) + bulk)
            reply = _recv_reply(s)
            assert reply == {"err": errno.EACCES, "msg": auth.REQUIRED_MSG}, header
            # A second request on the same connection finds it closed.
            try:
                s.sendall(frame({"op": "ping"}))
            except (BrokenPipeError, ConnectionResetError):
                pass
            assert _closed(s)
    with auth_cluster.connect() as fs:
        assert "evil" not in fs.listdir("/")
    _alive(auth_cluster)


def _hello_prefix() -> bytes:
    return frame(auth.hello("fuzz")[0])


junk_frames = st.one_of(
    st.binary(max_size=64),
    st.builds(lambda h, b: frame(h) + b,
              st.dictionaries(st.sampled_from(["op", "nonce", "role", "proof", "x"]),
                              st.one_of(st.binary(max_size=40), st.text(max_size=8),
                                        st.integers(-2, 2**40), st.none(),
                                        st.sampled_from(["auth_hello", "auth", "ping"])),
                              max_size=4),
              st.binary(max_size=16)),
    st.builds(lambda hlen, blen: struct.pack("<4sIQ", b"PV01", hlen, blen),
              st.integers(0, 2**32 - 1), st.integers(0, 2**64 - 1)),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(first=st.booleans(), junk=st.lists(junk_frames, min_size=1, max_size=3))
def test_fuzzed_handshakes_never_authenticate_or_crash(auth_cluster, first, junk):
    """Garbage before or after a genuine hello: never an authenticated reply, no crash."""
    for ep in (auth_cluster.config.manager, auth_cluster.config.iods[0]):
        with socket.create_connection((ep.host, ep.port), timeout=5) as s:
            data = (_hello_prefix() if first else b"") + b"".join(junk)
            try:
                s.sendall(data)
                s.shutdown(socket.SHUT_WR)
                s.settimeout(12)
                while True:
                    got = _recv_reply(s)
                    if got is None:
                        break
                    assert got.get("ok") is not True  # nobody without the key gets in
                    assert "err" in got or set(got) == {"nonce", "proof"}
            except (OSError, ValueError):  # the daemon closed first
                pass
    _alive(auth_cluster)


# ---------------------------------------------------------------------------- the mount

def test_mount_and_callback_connection_authenticate(auth_cluster, tmp_path):
    from test_mount_support import Mount, fuse_available

    if not fuse_available():
        pytest.skip("needs /dev/fuse and fusermount3")
    with Mount(auth_cluster.config_path, tmp_path / "mnt", "coherence=sync") as m:
        (m.path / "through-mount").write_bytes(b"z" * 200_000)
        assert (m.path / "through-mount").read_bytes() == b"z" * 200_000
        key = auth.read_key_file(auth_cluster.config.key_file)
        holders = [request(ep, {"op": "cb_status"}, 2.0, key) for ep in auth_cluster.config.iods]
        assert all(h.get("clients", 0) >= 1 for h in holders), holders
        os.unlink(m.path / "through-mount")


# ---------------------------------------------------------------------------- the admin tool

def _admin(*argv: str, home: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PVFS_CONFIG"}
    env["HOME"] = str(home)
    return subprocess.run([sys.executable, "-m", "pvfs.cli.main", *argv], check=False,
                          capture_output=True, text=True, env=env, timeout=60)


def test_key_generate_then_up_status_and_a_client(tmp_path):
    """`key generate --enable` on a loopback file system: daemons and CLI use the key."""
    r = _admin("--json", "init", "--dir", str(tmp_path / "fs"), "--iods", "1", home=tmp_path)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["key_file"] is None  # loopback only: no key needed
    conf = str(tmp_path / "fs" / "pvfs.toml")
    r = _admin("--config", conf, "--json", "key", "generate", "--enable", home=tmp_path)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["auth"] is True and os.stat(out["key_file"]).st_mode & 0o777 == 0o600
    cfg = load(conf)
    assert cfg.key_file == out["key_file"] and cfg.auth is True
    r = _admin("--config", conf, "key", "generate", home=tmp_path)
    assert r.returncode == 1 and "exists already" in r.stderr
    try:
        assert _admin("--config", conf, "up", home=tmp_path).returncode == 0
        r = _admin("--config", conf, "--json", "status", home=tmp_path)
        assert r.returncode == 0 and json.loads(r.stdout)["all_up"], r.stdout + r.stderr
        with pvfs.connect(conf) as fs:
            fs.mkdir("/k")
        os.chmod(cfg.key_file, 0o644)
        r = _admin("--config", conf, "ls", "pvfs:/", home=tmp_path)
        assert r.returncode == 1 and "chmod 600" in r.stderr and "Traceback" not in r.stderr
        os.chmod(cfg.key_file, 0o600)
    finally:
        down(cfg)


def test_init_with_remote_hosts_generates_a_key(tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text("10.1.0.1\n10.1.0.2\n")
    r = _admin("--json", "init", "--dir", str(tmp_path / "fs"), "--hosts", str(hosts),
               home=tmp_path)
    assert r.returncode == 0, r.stderr
    key_file = json.loads(r.stdout)["key_file"]
    assert key_file and os.stat(key_file).st_mode & 0o777 == 0o600
    cfg = load(str(tmp_path / "fs" / "pvfs.toml"))
    assert cfg.auth_enabled and cfg.key_file == key_file
    assert len(auth.key_for(cfg)) == 64
