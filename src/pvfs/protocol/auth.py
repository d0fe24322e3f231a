"""Shared-key authentication of every connection (SPEC §10): HMAC-SHA256 challenge–response.

Every process of a file system that may talk to its daemons holds one secret key, read from
the key file the config names (``[security] key_file``, mode 0600). When authentication is on
(by default whenever an address in the config is not loopback), a connection starts with a
mutual handshake before any operation, all in ordinary frames::

    client -> daemon  {"op": "auth_hello", "nonce": Nc, "role": R}
    daemon -> client  {"nonce": Nd, "proof": HMAC(K, "pvfs-auth-v1 daemon" | Nc | Nd)}
    client -> daemon  {"op": "auth", "proof": HMAC(K, "pvfs-auth-v1 client" | Nd | Nc | R)}
    daemon -> client  {"ok": true}        or  {"err": EACCES, "msg": ...} and close

Both sides contribute a fresh 32-byte nonce, so neither proof can be replayed, and the two
proofs carry different labels, so a daemon answering hellos is no oracle for client proofs.
The client checks the daemon's proof before it sends its own: it never talks to a daemon that
does not know the key. A client without a key sends its first request as usual; the daemon
answers it with EACCES ("authentication required") and closes, so the caller sees a clear
error rather than a hang. HMAC authenticates the ends of a connection when it opens; it does
not encrypt data or protect frames after the handshake (see docs/security.md).
"""

from __future__ import annotations

import errno
import hashlib
import hmac
import ipaddress
import os
import secrets
import socket
import stat

from pvfs.protocol.framing import PREFIX_SIZE, FrameError, decode_header, frame, parse_prefix

NONCE_SIZE = 32
MIN_KEY_CHARS = 32
LABEL_DAEMON = b"pvfs-auth-v1 daemon"
LABEL_CLIENT = b"pvfs-auth-v1 client"
HELLO_OP = "auth_hello"
PROOF_OP = "auth"
# A connection must finish its handshake within this many seconds (daemon side).
HANDSHAKE_TIMEOUT = 10.0

REQUIRED_MSG = ("authentication required: this daemon accepts only clients holding the file "
                "system's key ([security] key_file in the config)")
WRONG_KEY_MSG = "authentication failed: wrong key"


class AuthError(PermissionError):
    """Authentication was refused or failed (errno EACCES)."""

    def __init__(self, msg: str) -> None:
        super().__init__(errno.EACCES, msg)


# ---------------------------------------------------------------------------- key files

def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine's loopback interface (no name resolution)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def generate_key_file(path: str) -> None:
    """Write a fresh random key (64 hex digits) to ``path`` with mode 0600, atomically."""
    path = os.path.abspath(path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, (secrets.token_hex(32) + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def read_key_file(path: str) -> bytes:
    """The key in ``path``; PermissionError if group or others may read or write it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise FileNotFoundError(errno.ENOENT, f"key file {path} does not exist "
                                "(create one with `pvfs-admin key generate`)") from None
    except PermissionError:
        raise PermissionError(errno.EACCES, f"cannot read key file {path}: permission denied "
                              "(only its owner may use this file system)") from None
    try:
        st = os.fstat(fd)
        if st.st_mode & 0o077:
            raise PermissionError(
                errno.EACCES, f"key file {path} has mode {stat.S_IMODE(st.st_mode):04o}: group "
                f"or others may access it; refusing to use it (run: chmod 600 {path})")
        data = os.read(fd, 4096).strip()
    finally:
        os.close(fd)
    if len(data) < MIN_KEY_CHARS:
        raise ValueError(f"key file {path} holds {len(data)} characters; at least "
                         f"{MIN_KEY_CHARS} are needed (`pvfs-admin key generate` writes 64)")
    return data


def key_for(config) -> bytes | None:
    """The key a process of this file system authenticates with, or None when auth is off.

    Raises OSError/ValueError with a clear message when auth is on and the key file is
    missing, unreadable or not private.
    """
    if not config.auth_enabled:
        return None
    if not config.key_file:
        raise ValueError("authentication is on (an address in the config is not loopback, or "
                         "[security] auth = true) but [security] key_file is not set; run "
                         "`pvfs-admin key generate`")
    return read_key_file(config.key_file)


# ---------------------------------------------------------------------------- the messages

def _mac(key: bytes, label: bytes, *parts: bytes) -> bytes:
    h = hmac.new(key, label, hashlib.sha256)
    for p in parts:
        h.update(len(p).to_bytes(2, "big"))
        h.update(p)
    return h.digest()


def hello(role: str) -> tuple[dict, bytes]:
    nonce = os.urandom(NONCE_SIZE)
    return {"op": HELLO_OP, "nonce": nonce, "role": role[:64]}, nonce


def _check_challenge(reply: dict, key: bytes, cnonce: bytes, name: str) -> bytes:
    """The daemon's nonce, once its proof checks out."""
    if reply.get("err"):
        if reply.get("err") == errno.EINVAL:
            raise AuthError(f"{name}: the daemon does not authenticate (is it running without "
                            "a key? [security] in its config); refusing to use it")
        raise AuthError(f"{name}: {reply.get('msg') or 'authentication refused'}")
    dnonce, proof = reply.get("nonce"), reply.get("proof")
    if not isinstance(dnonce, bytes) or len(dnonce) != NONCE_SIZE or not isinstance(proof, bytes):
        raise AuthError(f"{name}: malformed authentication challenge")
    if not hmac.compare_digest(proof, _mac(key, LABEL_DAEMON, cnonce, dnonce)):
        raise AuthError(f"authentication failed: wrong key for {name} (the daemon does not "
                        "hold this client's key, or is not a daemon of this file system)")
    return dnonce


def _proof(key: bytes, cnonce: bytes, dnonce: bytes, role: str) -> dict:
    return {"op": PROOF_OP,
            "proof": _mac(key, LABEL_CLIENT, dnonce, cnonce, role[:64].encode())}


def _check_ok(reply: dict, name: str) -> None:
    if reply.get("err"):
        msg = reply.get("msg") or "authentication refused"
        raise AuthError(f"{name}: {msg}" + (" for this client" if msg == WRONG_KEY_MSG else ""))
    if reply.get("ok") is not True:
        raise AuthError(f"{name}: malformed authentication reply")


# ---------------------------------------------------------------------------- client, blocking

def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionResetError(errno.ECONNRESET, "peer closed the connection")
        buf += chunk
    return bytes(buf)


def _recv_header(sock: socket.socket, name: str) -> dict:
    try:
        hlen, blen = parse_prefix(_recv_exact(sock, PREFIX_SIZE))
        header = decode_header(_recv_exact(sock, hlen))
    except FrameError as exc:
        raise AuthError(f"{name}: malformed authentication frame: {exc}") from None
    if blen:
        raise AuthError(f"{name}: bulk data in an authentication frame")
    return header


def client_handshake_sync(sock: socket.socket, key: bytes, role: str, name: str,
                          timeout: float) -> None:
    """Authenticate a fresh blocking socket (both ways); AuthError if that fails."""
    old = sock.gettimeout()
    sock.settimeout(timeout)
    try:
        msg, cnonce = hello(role)
        sock.sendall(frame(msg))
        dnonce = _check_challenge(_recv_header(sock, name), key, cnonce, name)
        sock.sendall(frame(_proof(key, cnonce, dnonce, role)))
        _check_ok(_recv_header(sock, name), name)
    except TimeoutError:
        raise TimeoutError(errno.ETIMEDOUT, f"{name}: no authentication reply within "
                           f"{timeout:g} s") from None
    except ConnectionError as exc:
        raise AuthError(f"{name}: connection closed during authentication ({exc.strerror or exc})"
                        "; wrong key?") from None
    finally:
        sock.settimeout(old)


# ---------------------------------------------------------------------------- client, trio

async def client_handshake(sock, key: bytes, role: str, name: str, timeout: float) -> None:
    """Authenticate a fresh trio socket (both ways); AuthError if that fails."""
    import trio

    from pvfs.protocol import aio

    async def recv() -> dict:
        try:
            got = await aio.recv_frame(sock, timeout)
        except FrameError as exc:
            raise AuthError(f"{name}: malformed authentication frame: {exc}") from None
        if got is None:
            raise AuthError(f"{name}: connection closed during authentication; wrong key?")
        if got[1]:
            raise AuthError(f"{name}: bulk data in an authentication frame")
        return got[0]

    try:
        with trio.fail_after(timeout):
            msg, cnonce = hello(role)
            await aio.send_frame(sock, msg)
            dnonce = _check_challenge(await recv(), key, cnonce, name)
            await aio.send_frame(sock, _proof(key, cnonce, dnonce, role))
            _check_ok(await recv(), name)
    except trio.TooSlowError:
        raise TimeoutError(errno.ETIMEDOUT, f"{name}: no authentication reply within "
                           f"{timeout:g} s") from None
    except ConnectionError as exc:
        raise AuthError(f"{name}: connection closed during authentication ({exc.strerror or exc})"
                        "; wrong key?") from None


# ---------------------------------------------------------------------------- daemon side

async def server_handshake(sock, key: bytes, peer: str, log) -> bool:
    """Run the daemon's half on a fresh trio socket; True once the client proved the key.

    Never raises for anything the peer sends: a peer that skips the handshake gets an EACCES
    reply to its first request (its bulk, if small, drained so the reply can be read), a wrong
    proof gets EACCES, garbage or silence gets the connection closed. Every refusal is logged.
    The caller closes the socket when this returns False.
    """
    import trio

    from pvfs.protocol import aio
    from pvfs.protocol.errors import error_reply

    try:
        with trio.fail_after(HANDSHAKE_TIMEOUT):
            got = await aio.recv_frame(sock, HANDSHAKE_TIMEOUT)
            if got is None:
                return False
            header, blen = got
            if header.get("op") != HELLO_OP:
                log.warning("refused %s: no authentication (op %r without the handshake)",
                            peer, header.get("op"))
                if blen <= (64 << 20):
                    await aio.drain(sock, blen)
                    await aio.send_frame(sock, error_reply(errno.EACCES, REQUIRED_MSG))
                return False
            cnonce, role = header.get("nonce"), header.get("role")
            if (blen or not isinstance(cnonce, bytes) or len(cnonce) != NONCE_SIZE
                    or not isinstance(role, str) or len(role) > 64):
                log.warning("refused %s: malformed authentication hello", peer)
                return False
            dnonce = os.urandom(NONCE_SIZE)
            await aio.send_frame(sock, {"nonce": dnonce,
                                        "proof": _mac(key, LABEL_DAEMON, cnonce, dnonce)})
            got = await aio.recv_frame(sock, HANDSHAKE_TIMEOUT)
            if got is None:
                log.warning("refused %s (%s): closed during authentication (the client did "
                            "not accept this daemon's key)", peer, role)
                return False
            header, blen = got
            proof = header.get("proof")
            expect = _mac(key, LABEL_CLIENT, dnonce, cnonce, role.encode())
            if (blen or header.get("op") != PROOF_OP or not isinstance(proof, bytes)
                    or not hmac.compare_digest(proof, expect)):
                log.warning("refused %s (%s): authentication failed: wrong key", peer, role)
                if not blen:
                    await aio.send_frame(sock, error_reply(errno.EACCES, WRONG_KEY_MSG))
                return False
            await aio.send_frame(sock, {"ok": True})
            return True
    except (FrameError, OSError, trio.TooSlowError, trio.BrokenResourceError,
            UnicodeError) as exc:
        log.warning("refused %s: authentication did not complete: %s", peer, exc)
        return False
