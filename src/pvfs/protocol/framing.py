"""Wire framing shared by every daemon and client.

Every message is one frame::

    +--------+-------------+-------------+----------------------+------------------+
    | "PV01" | header_len  | bulk_len    | msgpack header       | bulk bytes       |
    | 4 B    | u32 LE      | u64 LE      | header_len bytes     | bulk_len bytes   |
    +--------+-------------+-------------+----------------------+------------------+

The 16-byte prefix is fixed so that C code (the I/O daemon's engine, the client's
scatter/gather loop) can find the bulk data without parsing msgpack, and so that the Python
side never reads past a header into bulk data it is about to hand to C. The header is a
msgpack map decoded with bounds (``msgpack.unpackb``); bulk data is raw bytes with
no control messages inside it (thesis §3.2.2, stream-based I/O).
"""

from __future__ import annotations

import struct

import msgpack

MAGIC = b"PV01"
PREFIX = struct.Struct("<4sIQ")
PREFIX_SIZE = PREFIX.size  # 16

MAX_HEADER = 1 << 20  # a header (incl. a region list) is at most 1 MiB
MAX_BULK = 1 << 32  # at most 4 GiB of bulk data in one frame


class FrameError(ValueError):
    """A frame that breaks the framing rules; the connection must be dropped."""


def encode_header(header: dict) -> bytes:
    return msgpack.packb(header, use_bin_type=True)


def frame(header: dict, bulk_len: int = 0) -> bytes:
    """The prefix and header of a frame; ``bulk_len`` bytes of bulk must follow."""
    body = encode_header(header)
    if len(body) > MAX_HEADER:
        raise FrameError(f"header of {len(body)} bytes exceeds {MAX_HEADER}")
    return PREFIX.pack(MAGIC, len(body), bulk_len) + body


def parse_prefix(prefix: bytes) -> tuple[int, int]:
    """Validate a 16-byte prefix; returns (header_len, bulk_len)."""
    if len(prefix) != PREFIX_SIZE:
        raise FrameError("short frame prefix")
    magic, hlen, blen = PREFIX.unpack(prefix)
    if magic != MAGIC:
        raise FrameError("bad magic: not a pvfs peer or a different protocol version")
    if hlen == 0 or hlen > MAX_HEADER:
        raise FrameError(f"header length {hlen} out of range")
    if blen > MAX_BULK:
        raise FrameError(f"bulk length {blen} out of range")
    return hlen, blen


#: The bounds of a header's msgpack (a header is at most MAX_HEADER bytes: parse_prefix).
_LIMITS = {"max_str_len": 64 * 1024, "max_bin_len": MAX_HEADER, "max_array_len": 1 << 18,
           "max_map_len": 1 << 16, "max_ext_len": 0, "raw": False, "strict_map_key": True,
           "use_list": True}


def decode_header(body: bytes) -> dict:
    """Decode a header with the bounds above (one ``unpackb``: no unpacker to build per
    frame); it must be exactly one map."""
    try:
        obj = msgpack.unpackb(body, **_LIMITS)
    except msgpack.ExtraData as exc:
        raise FrameError("trailing bytes after header") from exc
    except (ValueError, TypeError, msgpack.FormatError, msgpack.StackError) as exc:
        if "incomplete input" in str(exc):
            raise FrameError("truncated header") from exc
        raise FrameError(f"undecodable header: {exc}") from exc
    if not isinstance(obj, dict):
        raise FrameError("header is not a map")
    return obj
