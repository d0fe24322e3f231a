"""Structural invariants of every workload generator."""

from __future__ import annotations

from collections import Counter, defaultdict

import pytest

from pvfs.traces.format import Op, Trace
from pvfs.traces.generators import (
    GENERATORS,
    NAMES,
    checkpoint,
    cholesky,
    db2,
    describe,
    generate,
    lu,
    thesis,
)
from pvfs.traces.generators._build import resolve_params
from pvfs.units import parse_size

SMALL: dict[str, dict[str, object]] = {
    "thesis": {"sizes": "16K,64K"},
    "single": {"sizes": "16K"},
    "strided": {"sizes": "16K,32K"},
    "random16": {"sizes": "64K"},
    "random32": {"sizes": "64K"},
    "lu": {"n": 64, "slabs": 6},
    "cholesky": {"panels": 24, "cols_min": 2, "cols_max": 6},
    "db2": {"scale": 0.0002, "lookups": 8},
    "titan": {"grid": 6, "times": 2, "chunk": 4096, "queries": 3},
    "mining": {"db": 64 << 10, "passes": 2, "req": 16 << 10},
    "pgrep": {"files": 4, "file_min": 8 << 10, "file_max": 32 << 10},
    "btio": {"n": 6, "dumps": 3, "readback": True},
    "flash": {"blocks": 3, "vary": 1, "nxb": 4},
    "s3d": {"nx": 4},
}


def writes_of(trace: Trace, fid: int) -> list[tuple[int, int]]:
    return [e for r in trace.records if r.file == fid and r.is_write for e in r.extents()]


def reads_of(trace: Trace, fid: int) -> list[tuple[int, int]]:
    return [e for r in trace.records if r.file == fid and r.is_read for e in r.extents()]


def assert_tiles(extents: list[tuple[int, int]], start: int, length: int) -> None:
    """The extents cover [start, start+length) exactly once."""
    pos = start
    for off, n in sorted(extents):
        assert off == pos, f"gap or overlap at {off} (expected {pos})"
        pos += n
    assert pos == start + length


def test_all_generators_registered_and_documented() -> None:
    assert set(NAMES) == set(SMALL)
    for name, (func, _) in GENERATORS.items():
        doc = func.__doc__ or ""
        assert "model" in doc.lower(), name
        assert describe(name)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("nprocs", [1, 4])
def test_valid_and_deterministic(name: str, nprocs: int) -> None:
    if name == "btio" and nprocs not in (1, 4):
        pytest.skip("square counts only")
    a = generate(name, nprocs, SMALL[name], seed=7)
    b = generate(name, nprocs, SMALL[name], seed=7)
    a.validate()
    assert a.records == b.records
    assert a.generator["name"] == name and a.generator["seed"] == 7
    assert a.nprocs == nprocs
    assert len(a.phases) == 1 + sum(1 for r in a.records if r.op == Op.BARRIER) // nprocs


@pytest.mark.parametrize("name", ["random16", "db2", "titan", "cholesky", "flash"])
def test_seed_changes_random_workloads(name: str) -> None:
    assert generate(name, 4, SMALL[name], 1).records != generate(name, 4, SMALL[name], 2).records


def test_params_parse_and_reject() -> None:
    assert parse_size("64K") == 65536 and parse_size("2MiB") == 2 << 20 and parse_size("10") == 10
    with pytest.raises(ValueError):
        parse_size("lots")
    assert resolve_params({"a": 1, "b": [1], "c": False}, {"a": "4K", "b": "1,2K", "c": "yes"}) \
        == {"a": 4096, "b": [1, 2048], "c": True}
    with pytest.raises(ValueError, match="unknown parameter"):
        generate("lu", 2, {"nope": "1"})
    with pytest.raises(ValueError, match="unknown workload"):
        generate("nope", 2)


# ------------------------------------------------------------------------------- thesis
def test_strided_has_16_regions_per_request() -> None:
    tr = generate("strided", 4, SMALL["strided"])
    listios = [r for r in tr.records if r.op == Op.LISTIO]
    assert listios and all(len(r.regions or ()) == 16 for r in listios)
    # One request per task per phase, regions of all tasks tile the file in each phase.
    per_phase: dict[tuple[bool, int], list] = defaultdict(list)
    for r in listios:
        per_phase[(r.is_write, r.length)].extend(r.regions or ())
    for (_, length), regions in per_phase.items():
        assert_tiles(regions, 0, length * 4)


def test_single_block_one_contiguous_request_per_task() -> None:
    tr = generate("single", 4, {"sizes": "64K", "ops": "write"})
    writes = [r for r in tr.records if r.op == Op.WRITE]
    assert len(writes) == 4 and sorted(r.rank for r in writes) == [0, 1, 2, 3]
    assert_tiles([(r.offset, r.length) for r in writes], 0, 64 * 1024 * 2)


@pytest.mark.parametrize("name,blocks", [("random16", 16), ("random32", 32)])
def test_random_blocks_per_task(name: str, blocks: int) -> None:
    tr = generate(name, 4, {"sizes": "64K", "ops": "read"})
    reads = [r for r in tr.records if r.op == Op.READ]
    assert Counter(r.rank for r in reads) == {k: blocks for k in range(4)}
    assert_tiles([(r.offset, r.length) for r in reads], 0, 64 * 1024 * 2)
    assert tr.files[0].size >= 64 * 1024 * 2  # read-only study: the file pre-exists
    order = [r.offset for r in reads if r.rank == 0]
    assert order != sorted(order)  # random order within a task


def test_thesis_phases_and_sweep() -> None:
    tr = generate("thesis", 2, {"sizes": "16K,32K"})
    labels = [p for p in tr.phases if ":" in p]
    assert len(labels) == 4 * 2 * 2
    assert "strided:read:32768" in labels
    sweep = thesis.thesis_sweep()
    assert len(sweep) == 50 and sweep[0] == 128 << 10 and sweep[-1] == 256 << 20


# ----------------------------------------------------------------------------------- LU
@pytest.mark.parametrize("nprocs", [1, 3, 4])
def test_lu_slab_reads_and_writes(nprocs: int) -> None:
    n, k = 64, 6
    tr = generate("lu", nprocs, {"n": n, "slabs": k, "req": 2048})
    ext = lu.slab_extents(n, k, 8)
    read_bytes, written, phase_written = Counter(), Counter(), {}
    phase = 0
    per_rank_phase: dict[int, int] = defaultdict(int)
    for r in tr.records:
        if r.op == Op.BARRIER:
            per_rank_phase[r.rank] += 1
            continue
        phase = per_rank_phase[r.rank]
        for i, (off, length) in enumerate(ext):
            if r.op in (Op.READ, Op.WRITE) and off <= r.offset < off + length:
                if r.op == Op.READ:
                    read_bytes[i] += r.length
                    if i in phase_written:  # a temporary read comes after its write
                        assert phase > phase_written[i] or r.rank == i % nprocs
                else:
                    written[i] += r.length
                    phase_written[i] = phase
                    assert r.rank == i % nprocs  # slabs dealt cyclically
    for i, (_, length) in enumerate(ext):
        assert written[i] == length  # written exactly once
        assert read_bytes[i] == (k - i) * length  # K-1-i temporaries + 1 active


# ----------------------------------------------------------------------------- Cholesky
def test_cholesky_structure_and_counts() -> None:
    import random

    st = cholesky.make_structure(40, 2, 5, 0.5, random.Random(3))
    for j, par in enumerate(st.parent):
        assert par == -1 or par > j  # postorder
        if par >= 0:
            assert st.struct[j][0] == par
            assert set(st.struct[j][1:]) <= set(st.struct[par])  # symbolic containment
    tr = generate("cholesky", 3, {"panels": 40, "cols_min": 2, "cols_max": 5}, seed=3)
    fl = next(f.id for f in tr.files if f.name == "cholesky/L")
    writes = Counter(r.offset for r in tr.records if r.file == fl and r.op == Op.WRITE)
    reads = Counter(r.offset for r in tr.records if r.file == fl and r.op == Op.READ)
    assert len(writes) == 40 and set(writes.values()) == {1}
    offsets = sorted(writes)
    for k, off in enumerate(offsets):
        assert reads[off] == len(st.struct[k])


# ---------------------------------------------------------------------------------- DB2
def test_db2_page_aligned_and_in_bounds() -> None:
    tr = generate("db2", 4, SMALL["db2"])
    sizes = {f.id: f.size for f in tr.files}
    temp_ids = {f.id for f in tr.files if f.name.endswith("temp")}
    for r in tr.records:
        for off, n in r.extents():
            assert off % db2.PAGE == 0 and n % db2.PAGE == 0 and n >= db2.PAGE
            assert n <= db2.EXTENT
            if r.is_read and r.file not in temp_ids:
                assert off + n <= sizes[r.file]
    for fid in temp_ids:  # temp files are written and re-read
        assert writes_of(tr, fid) and reads_of(tr, fid)
    assert len([p for p in tr.phases if p.startswith("db2 Q")]) == 5


def test_db2_index_inner_pages_are_hot() -> None:
    tr = generate("db2", 2, {"scale": 0.01, "lookups": 50, "queries": "2"})
    idx = next(f.id for f in tr.files if f.name == "db2/p0/CUSTOMER.idx")
    pages = Counter(off // db2.PAGE for off, _ in reads_of(tr, idx))
    assert pages[0] == 50  # the root is read by every lookup
    leaves = [c for p, c in pages.items() if p > 0]
    assert max(leaves) < 50


# --------------------------------------------------------------------------- Titan etc.
def test_titan_batches_bounded() -> None:
    tr = generate("titan", 4, {**SMALL["titan"], "outstanding": 3, "query_frac": 0.5,
                               "queries": 8})
    listios = [r for r in tr.records if r.op == Op.LISTIO]
    assert listios and all(len(r.regions or ()) <= 3 for r in listios)
    chunk_reads = Counter((r.file, e) for r in listios for e in r.extents())
    assert max(chunk_reads.values()) > 1  # overlapping queries re-read chunks


def test_mining_full_scans_each_pass() -> None:
    tr = generate("mining", 3, SMALL["mining"])
    for r in range(3):
        fid = next(f.id for f in tr.files if f.name == f"mining/transactions{r}")
        got = reads_of(tr, fid)
        assert sum(n for _, n in got) == 2 * (64 << 10)
        assert {rec.rank for rec in tr.records if rec.file == fid and rec.is_read} == {r}


@pytest.mark.parametrize("mode", ["files", "blocks"])
def test_pgrep_reads_every_byte_once(mode: str) -> None:
    tr = generate("pgrep", 3, {**SMALL["pgrep"], "mode": mode})
    for f in tr.files:
        if f.name.startswith("pgrep/input"):
            assert_tiles(reads_of(tr, f.id), 0, f.size)


# ---------------------------------------------------------------------- checkpoint ones
@pytest.mark.parametrize("nprocs", [1, 4, 9])
def test_btio_tiles_each_array(nprocs: int) -> None:
    n, dumps = 7, 3
    tr = generate("btio", nprocs, {"n": n, "dumps": dumps})
    array = n ** 3 * checkpoint.BTIO_CELL
    by_dump: dict[int, list] = defaultdict(list)
    for off, length in writes_of(tr, 0):
        assert off // array == (off + length - 1) // array
        by_dump[off // array].append((off, length))
    assert sorted(by_dump) == list(range(dumps))
    for d, ext in by_dump.items():
        assert_tiles(ext, d * array, array)


def test_btio_needs_square() -> None:
    with pytest.raises(ValueError, match="square"):
        generate("btio", 3, SMALL["btio"])


@pytest.mark.parametrize("nprocs", [1, 4, 6, 8])
@pytest.mark.parametrize("listio", [True, False])
def test_s3d_tiles_each_array(nprocs: int, listio: bool) -> None:
    nx = 3
    tr = generate("s3d", nprocs, {"nx": nx, "listio": listio})
    px, py, pz = checkpoint.dims_create(nprocs)
    assert px * py * pz == nprocs
    points = px * py * pz * nx ** 3
    ext = writes_of(tr, 0)
    base = 0
    for _, nv in checkpoint.S3D_ARRAYS:
        size = nv * points * 8
        assert_tiles([e for e in ext if base <= e[0] < base + size], base, size)
        base += size
    assert sum(n for _, n in ext) == base


def test_flash_contiguous_appends_per_variable() -> None:
    tr = generate("flash", 4, SMALL["flash"])
    chk = next(f.id for f in tr.files if f.name == "flash/chk")
    ext = writes_of(tr, chk)
    header = 2048
    assert (0, header) in ext
    body = [e for e in ext if e != (0, header)]
    total = sum(n for _, n in body)
    assert_tiles(body, header, total)
    per_rank = Counter(r.rank for r in tr.records if r.file == chk and r.op == Op.WRITE)
    assert per_rank[1] == 24  # one append per variable


def test_dims_create() -> None:
    assert checkpoint.dims_create(8) == [2, 2, 2]
    assert checkpoint.dims_create(12) == [3, 2, 2]
    assert checkpoint.dims_create(7) == [7, 1, 1]
