"""Targets: spec parsing, flag mapping, the local directory target; the package's exports."""

from __future__ import annotations

import os

import pytest

import pvfs.traces
from pvfs.traces.format import FileEntry, Flag
from pvfs.traces.replay import LocalTarget, open_target
from pvfs.traces.replay.data import file_key, pattern
from pvfs.traces.replay.mpi import launched_by_mpiexec
from pvfs.traces.replay.targets import os_flags, parse_spec


def test_parse_spec() -> None:
    assert parse_spec("pvfs:///etc/pvfs.toml") == ("pvfs", "/etc/pvfs.toml", {})
    assert parse_spec("pvfs:///c.toml?root=/x") == ("pvfs", "/c.toml", {"root": "/x"})
    assert parse_spec("mount:/mnt/pvfs") == ("local", "/mnt/pvfs", {})
    assert parse_spec("file:///tmp/a") == ("local", "/tmp/a", {})
    assert parse_spec("relative/dir") == ("local", "relative/dir", {})
    with pytest.raises(ValueError):
        parse_spec("pvfs://")
    with pytest.raises(ValueError):
        parse_spec("s3://bucket")


def test_os_flags_never_append() -> None:
    assert os_flags(Flag.RD) == os.O_RDONLY
    assert os_flags(Flag.WR | Flag.CREAT) == os.O_WRONLY | os.O_CREAT
    assert os_flags(Flag.RD | Flag.WR | Flag.TRUNC) == os.O_RDWR | os.O_TRUNC
    assert not os_flags(Flag.WR | Flag.APPEND) & os.O_APPEND
    assert os_flags(Flag.WR | Flag.SYNC | Flag.EXCL) & os.O_SYNC


def test_local_target(tmp_path) -> None:
    t = open_target(str(tmp_path / "root"))
    assert isinstance(t, LocalTarget)
    t.prepare([FileEntry(0, "in/data", 3000), FileEntry(1, "out/new"),
               FileEntry(2, "in/empty", 0, exists=True)])
    assert t.size("in/data") == 3000 and t.size("out/new") is None and t.size("in/empty") == 0
    assert (tmp_path / "root/in/data").read_bytes() == pattern(file_key("in/data"), 0, 3000)
    h = t.open("out/new", Flag.RD | Flag.WR | Flag.CREAT)
    assert h.pwrite(b"abcdef", 4) == 6
    assert h.write_list([(0, 2), (20, 3)], b"XYZZY") == 5
    assert h.pread(100, 0) == b"XY\0\0abcdef" + bytes(10) + b"ZZY"
    assert h.read_list([(4, 3), (22, 4)]) == b"abcY\0\0\0"  # zeros past the end
    h.fsync()
    h.close()
    h.close()
    assert t.digest("out/new") is not None and t.digest("nope") is None
    t.remove("out/new")
    t.remove("out/new")
    assert t.size("out/new") is None
    t.close()


def test_pvfs_target_needs_native_api(monkeypatch) -> None:
    import pvfs

    if getattr(pvfs, "connect", None) is not None:
        monkeypatch.setattr(pvfs, "connect", None, raising=False)
    with pytest.raises(RuntimeError, match="native API"):
        open_target("pvfs:///nonexistent.toml")


def test_mpi_detection(monkeypatch) -> None:
    for var in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MPI_LOCALNRANKS", "PMIX_SIZE"):
        monkeypatch.delenv(var, raising=False)
    assert not launched_by_mpiexec()
    monkeypatch.setenv("PMI_SIZE", "4")
    assert launched_by_mpiexec()


def test_public_names_exported() -> None:
    for name in pvfs.traces.__all__:
        assert getattr(pvfs.traces, name) is not None
    assert pvfs.traces.FORMAT_VERSION == 1


def test_drop_caches_at_every_barrier(monkeypatch, tmp_path) -> None:
    from pvfs.traces.generators import generate
    from pvfs.traces.replay import engine

    calls = []
    monkeypatch.setattr(engine, "drop_caches", lambda: calls.append(1))
    trace = generate("mining", 1, {"db": 8192, "passes": 2, "req": 4096})
    barriers = sum(1 for r in trace.records if r.op.label == "barrier")
    waits = []
    target = LocalTarget(str(tmp_path))
    target.prepare(trace.files)
    res = engine.run_rank(0, trace.records, [f.name for f in trace.files], target,
                          lambda: waits.append(1), engine.ReplayOptions(drop_caches=True))
    assert res["errors"] == [] and len(calls) == barriers + 1
    assert len(waits) == 2 * (barriers + 1)


def test_drop_caches_needs_permission(monkeypatch, capsys, tmp_path) -> None:
    from pvfs.traces import cli
    from pvfs.traces.replay import engine

    monkeypatch.setattr(engine, "can_drop_caches", lambda: False)
    code = cli.main(["replay", "--workload", "mining", "--drop-caches", "--target",
                     str(tmp_path)])
    assert code == 2 and "drop_caches" in capsys.readouterr().err
