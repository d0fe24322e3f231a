import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pvfs.protocol import schema
from pvfs.protocol.errors import raise_for
from pvfs.protocol.framing import FrameError, decode_header, frame, parse_prefix


def test_frame_round_trip():
    raw = frame({"op": "ping", "x": [1, 2]}, 7)
    hlen, blen = parse_prefix(raw[:16])
    assert blen == 7 and decode_header(raw[16:16 + hlen]) == {"op": "ping", "x": [1, 2]}


@pytest.mark.parametrize("prefix", [b"QQQQ" + bytes(12), b"PV01" + bytes(12),
                                    b"PV01" + (2 << 20).to_bytes(4, "little") + bytes(8)])
def test_bad_prefixes(prefix):
    with pytest.raises(FrameError):
        parse_prefix(prefix)


@given(st.binary(max_size=200))
def test_garbage_headers_never_escape_as_other_errors(data):
    try:
        decode_header(data)
    except FrameError:
        pass


def test_header_must_be_one_map():
    with pytest.raises(FrameError):
        decode_header(msgpack.packb([1, 2]))
    with pytest.raises(FrameError):
        decode_header(msgpack.packb({"a": 1}) + b"\x01")


def test_schema_checks_types_and_unknown_fields():
    op, f = schema.check(schema.MGR_SCHEMAS, {"op": "lookup", "parent": 1, "name": "a"})
    assert op == "lookup" and f["cred"] == (65534, 65534, ())
    for bad in ({"op": "lookup", "parent": 0, "name": "a"},
                {"op": "lookup", "parent": 1, "name": "a/b"},
                {"op": "lookup", "parent": 1, "name": ""},
                {"op": "lookup", "parent": 1},
                {"op": "lookup", "parent": 1, "name": "a", "extra": 1},
                {"op": "nope"},
                {"op": "lookup", "parent": True, "name": "a"},
                {"op": "lookup", "parent": 1, "name": "a", "cred": [0, 0]}):
        with pytest.raises(ValueError):
            schema.check(schema.MGR_SCHEMAS, bad)


def test_error_replies_raise_the_right_oserror():
    with pytest.raises(FileNotFoundError):
        raise_for({"err": 2, "msg": "no such file"})
    assert raise_for({"ok": 1}) == {"ok": 1}


def test_too_long_names_and_paths_are_enametoolong_not_einval():
    """The wire check must answer with the errno POSIX gives (issue 9), not EINVAL."""
    import errno

    ok = {"op": "lookup", "parent": 1, "name": "n" * 255}
    assert schema.check(schema.MGR_SCHEMAS, ok)[1]["name"] == "n" * 255
    cases = [({"op": "lookup", "parent": 1, "name": "n" * 256}, errno.ENAMETOOLONG),
             ({"op": "mkdir", "parent": 1, "name": "é" * 128, "mode": 0o755},
              errno.ENAMETOOLONG),
             ({"op": "rename", "parent": 1, "name": "a", "new_parent": 1,
               "new_name": "b" * 256}, errno.ENAMETOOLONG),
             ({"op": "resolve", "path": "/" + "p/" * 2048}, errno.ENAMETOOLONG),
             ({"op": "symlink", "parent": 1, "name": "l", "target": "t" * 4096},
              errno.ENAMETOOLONG),
             ({"op": "getxattr", "ino": 1, "name": "user." + "x" * 251}, errno.ERANGE),
             ({"op": "lookup", "parent": 1, "name": 5}, errno.EINVAL),
             ({"op": "lookup", "parent": 1, "name": "a/b"}, errno.EINVAL)]
    for header, code in cases:
        with pytest.raises(ValueError) as ei:
            schema.check(schema.MGR_SCHEMAS, header)
        assert schema.reply_errno(ei.value) == code, header["op"]
    schema.check(schema.MGR_SCHEMAS, {"op": "resolve", "path": "/" + "p" * 4094})
