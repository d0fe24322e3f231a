"""Importers on the sample files under traces/samples/ (written to the documented layouts)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

import pvfs.traces
from pvfs.traces.format import Flag, Op, TraceFormatError
from pvfs.traces.importers import detect, import_stream, load_any
from pvfs.traces.importers._common import relative_name
from pvfs.traces.importers.darshan import import_darshan
from pvfs.traces.importers.mambo import import_mambo
from pvfs.traces.importers.strace import import_strace

SAMPLES = Path(pvfs.traces.__file__).parent / "samples"


def sample(name: str):
    return io.StringIO((SAMPLES / name).read_text())


def ops(trace, rank=None):
    return [(r.op, r.file, r.offset, r.length) for r in trace.records
            if rank is None or r.rank == rank]


def test_samples_present_and_detected() -> None:
    for name, kind in (("mambo-small.txt", "mambo"), ("darshan-dxt-small.txt", "darshan"),
                       ("strace-small.txt", "strace")):
        path = SAMPLES / name
        assert detect(path.read_text()) == kind
        assert load_any(path).generator["params"]["format"].startswith(kind)


def test_mambo() -> None:
    tr = import_mambo(sample("mambo-small.txt"))
    assert tr.nprocs == 2
    assert [f.name for f in tr.files] == ["home/umd/lu/matrix.dat", "home/umd/lu/out.dat"]
    r0 = ops(tr, 0)
    assert r0[:4] == [(Op.OPEN, 0, 0, 0), (Op.READ, 0, 0, 8192), (Op.SEEK, 0, 16384, 0),
                      (Op.READ, 0, 16384, 4096)]  # offset -1 resolved from the seek
    listio = [r for r in tr.records if r.op == Op.LISTIO]
    assert len(listio) == 1 and listio[0].rank == 1
    assert listio[0].regions == ((0, 1024), (4096, 1024), (8192, 1024))
    assert not listio[0].flags & Flag.WR
    write = next(r for r in tr.records if r.op == Op.WRITE)
    assert (write.file, write.length) == (1, 4096)
    assert tr.files[0].size == 20480  # reads reach 20480: the input pre-exists
    # think time = growth of the process clock
    assert next(r for r in tr.records if r.op == Op.READ and r.rank == 1).think == 0.003


def test_mambo_errors() -> None:
    with pytest.raises(TraceFormatError, match="header"):
        import_mambo(io.StringIO("oops\n"))
    with pytest.raises(TraceFormatError, match="promises"):
        import_mambo(io.StringIO("1 1 5\nf\n2 1 7 0 0 0 0 10\n"))
    with pytest.raises(TraceFormatError, match="unknown op"):
        import_mambo(io.StringIO("1 1 1\nf\n9 1 7 0 0 0 0 10\n"))


def test_darshan() -> None:
    tr = import_darshan(sample("darshan-dxt-small.txt"))
    assert tr.nprocs == 2
    names = [f.name for f in tr.files]
    assert names == ["scratch/run/output.dat", "scratch/run/input.dat"]
    out = names.index("scratch/run/output.dat")
    writes = [(r.rank, r.offset, r.length) for r in tr.records if r.op == Op.WRITE]
    assert sorted(writes) == [(0, 0, 65536), (0, 65536, 65536), (1, 131072, 65536),
                              (1, 196608, 65536)]  # the MPIIO duplicate is ignored
    r1 = ops(tr, 1)
    assert r1[0][0] == Op.OPEN and r1[1] == (Op.READ, names.index("scratch/run/input.dat"),
                                             4096, 16384)
    assert r1[2][0] == Op.CLOSE
    reread = next(r for r in tr.records if r.op == Op.READ and r.rank == 0)
    assert reread.think == pytest.approx(0.03)  # 0.0500 start - 0.0200 previous end
    assert tr.files[out].size == 65536
    mpiio = import_darshan(sample("darshan-dxt-small.txt"), module="X_MPIIO")
    assert [(r.offset, r.length) for r in mpiio.records if r.op == Op.WRITE] == [(0, 131072)]


def test_darshan_errors() -> None:
    with pytest.raises(TraceFormatError, match="before any"):
        import_darshan(io.StringIO(" X_POSIX 0 write 0 0 10 0.1 0.2\n"))
    with pytest.raises(TraceFormatError, match="Wt/Rd"):
        import_darshan(io.StringIO("# DXT, file_id: 1, file_name: /a\n"
                                   " X_POSIX 0 poke 0 0 10 0.1 0.2\n"))


def test_strace() -> None:
    tr = import_strace(sample("strace-small.txt"))
    assert tr.nprocs == 2
    names = [f.name for f in tr.files]
    inp, out = names.index("data/input.bin"), names.index("data/out.bin")
    assert ops(tr, 0)[2:] == [
        (Op.OPEN, inp, 0, 0), (Op.READ, inp, 0, 4096), (Op.READ, inp, 4096, 1000),
        (Op.SEEK, inp, 100, 0), (Op.READ, inp, 100, 200),  # joined from unfinished/resumed
        (Op.READ, inp, 2048, 512), (Op.CLOSE, inp, 0, 0)]
    assert ops(tr, 1) == [
        (Op.OPEN, out, 0, 0), (Op.WRITE, out, 0, 12), (Op.WRITE, out, 8192, 4096),
        (Op.WRITE, out, 12, 4), (Op.FSYNC, out, 0, 0), (Op.CLOSE, out, 0, 0)]  # dup shares pos
    opened = next(r for r in tr.records if r.op == Op.OPEN and r.file == out)
    assert opened.flags == Flag.WR | Flag.CREAT | Flag.TRUNC
    assert "nonexistent" not in " ".join(names)  # failed calls skipped
    assert tr.files[inp].size == 5096
    first_read = next(r for r in tr.records if r.op == Op.READ)
    assert first_read.think == pytest.approx(0.0001, abs=1e-6)


def test_strace_needs_timestamps() -> None:
    with pytest.raises(TraceFormatError):
        import_strace(io.StringIO('read(3, "x", 1) = 1\n'))


def test_relative_names_stay_inside() -> None:
    assert relative_name("/../../etc/passwd") == "etc/passwd"
    assert relative_name("a/./b//c") == "a/b/c"
    assert relative_name("we ird*name") == "we_ird_name"
    assert relative_name("/") == "unnamed"


def test_import_stream_unknown() -> None:
    with pytest.raises(ValueError):
        import_stream(io.StringIO(""), "nope")
    assert detect("hello world") is None
