"""The trace format: both forms round-trip, validation catches broken traces."""

from __future__ import annotations

import io

import pytest

from pvfs.traces import format as fmt
from pvfs.traces.format import FileEntry, Flag, Op, Record, Trace, TraceFormatError


def sample() -> Trace:
    recs = [
        Record(0, 0.0, Op.OPEN, 0, 0, 0, Flag.RD | Flag.WR | Flag.CREAT),
        Record(1, 0.0, Op.OPEN, 0, 0, 0, Flag.RD),
        Record(0, 0.25, Op.WRITE, 0, 0, 4096),
        Record(0, 0.0, Op.BARRIER, -1, 0, 0),
        Record(1, 0.0, Op.BARRIER, -1, 0, 0),
        Record(1, 1e-6, Op.LISTIO, 0, 0, 30, 0, ((0, 10), (100, 20))),
        Record(0, 0.0, Op.LISTIO, 0, 8, 2, Flag.WR, ((8, 2),)),
        Record(0, 0.0, Op.SEEK, 0, 77, 0),
        Record(0, 0.0, Op.FSYNC, 0, 0, 0),
        Record(1, 0.0, Op.READ, 0, 4096, 512),
        Record(0, 0.0, Op.CLOSE, 0, 0, 0),
        Record(1, 0.0, Op.CLOSE, 0, 0, 0),
    ]
    return Trace(nprocs=2, files=[FileEntry(0, "dir/data", 8192)], records=recs,
                 generator={"name": "test", "params": {"a": 1}, "seed": 3},
                 phases=["setup", "work"])


@pytest.mark.parametrize("form", ["text", "msgpack"])
def test_round_trip(form: str) -> None:
    tr = sample()
    back = fmt.loads(fmt.dumps(tr, form))
    assert back.records == tr.records
    assert back.header() == tr.header()


def test_save_load_by_extension(tmp_path) -> None:
    tr = sample()
    fmt.save(tr, tmp_path / "t.mpk")
    fmt.save(tr, tmp_path / "t.trace")
    assert (tmp_path / "t.trace").read_text().startswith("# pvfs-trace 1\n")
    assert not (tmp_path / "t.mpk").read_bytes().startswith(b"#")
    assert fmt.load(tmp_path / "t.mpk").records == fmt.load(tmp_path / "t.trace").records
    assert len((tmp_path / "t.mpk").read_bytes()) < len((tmp_path / "t.trace").read_bytes())


def test_text_form_is_readable() -> None:
    text = fmt.dumps(sample()).decode()
    assert "1 1e-06 listio 0 0 30 - 0:10,100:20" in text
    assert "0 0 open 0 0 0 rd,wr,creat" in text


def test_flags_text() -> None:
    assert fmt.flags_to_text(0) == "-"
    assert fmt.flags_from_text("wr,creat,trunc") == Flag.WR | Flag.CREAT | Flag.TRUNC
    with pytest.raises(TraceFormatError):
        fmt.flags_from_text("bogus")


def test_record_helpers() -> None:
    w = Record(0, 0, Op.LISTIO, 0, 0, 3, Flag.WR, ((0, 1), (5, 2)))
    assert w.is_write and not w.is_read
    assert w.extents() == [(0, 1), (5, 2)]
    assert Record(0, 0, Op.OPEN, 0, 0, 0).extents() == []


def test_by_rank_keeps_order() -> None:
    per = sample().by_rank()
    assert [r.op for r in per[1]][:3] == [Op.OPEN, Op.BARRIER, Op.LISTIO]


@pytest.mark.parametrize("bad", [
    Record(2, 0, Op.READ, 0, 0, 1),  # rank out of range
    Record(0, 0, Op.READ, 5, 0, 1),  # unknown file
    Record(0, 0, Op.READ, 0, -1, 1),  # negative offset
    Record(0, 0, Op.LISTIO, 0, 0, 5, 0, ((0, 1),)),  # length != sum of regions
    Record(0, 0, Op.LISTIO, 0, 0, 0, 0, None),  # no regions
])
def test_validate_rejects(bad: Record) -> None:
    tr = Trace(nprocs=2, files=[FileEntry(0, "f")], records=[bad])
    with pytest.raises(TraceFormatError):
        tr.validate()


def test_validate_unbalanced_barriers() -> None:
    tr = Trace(nprocs=2, files=[], records=[Record(0, 0, Op.BARRIER, -1, 0, 0)])
    with pytest.raises(TraceFormatError, match="barriers"):
        tr.validate()


def test_rejects_newer_version_and_garbage() -> None:
    text = fmt.dumps(sample()).decode().replace('"version": 1', '"version": 99')
    with pytest.raises(TraceFormatError, match="version"):
        fmt.loads(text.encode())
    with pytest.raises(TraceFormatError):
        fmt.loads(b"\x93\x01\x02\x03")
    with pytest.raises(TraceFormatError):
        fmt.read_text(io.StringIO("# pvfs-trace 1\n# header {}\n"))
    bad_line = fmt.dumps(sample()).decode() + "0 0 explode 0 0 0 -\n"
    with pytest.raises(TraceFormatError, match="line"):
        fmt.loads(bad_line.encode())
