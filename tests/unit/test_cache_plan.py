"""Bypass plans from trace profiles (traces/plan.py)."""

from __future__ import annotations

import pytest

from pvfs.cache import BypassTable
from pvfs.traces.format import FileEntry, Op, Record, Trace
from pvfs.traces.generators import generate
from pvfs.traces.plan import load_plan, make_plan, phase_bits, phase_records, save_plan

SEG = 4 * 4096


def rec(rank, op, fid=0, off=0, n=0):
    return Record(rank, 0.0, op, fid, off, n)


def small_trace() -> Trace:
    t = Trace(nprocs=2, files=[FileEntry(0, "a", 10 * SEG), FileEntry(1, "b", 10 * SEG)])
    # phase 0: segment 0 of a read three times, segment 5 once; b's segment 2 twice
    t.records += [rec(0, Op.READ, 0, 0, 100), rec(1, Op.READ, 0, 10, 100),
                  rec(0, Op.READ, 0, 200, 10), rec(1, Op.READ, 0, 5 * SEG, 4096),
                  rec(0, Op.WRITE, 1, 2 * SEG, 10), rec(1, Op.READ, 1, 2 * SEG + 5, 10),
                  rec(0, Op.BARRIER, -1), rec(1, Op.BARRIER, -1),
                  # phase 1: only b, segment 7, twice
                  rec(0, Op.READ, 1, 7 * SEG, 10), rec(1, Op.READ, 1, 7 * SEG, 10)]
    t.phases = ["one", "two"]
    return t


def test_phases_split_at_barriers():
    phases = dict(phase_records(small_trace()))
    assert sorted(phases) == [0, 1]
    assert len(phases[0]) == 6 and len(phases[1]) == 2


def test_fine_plan_keeps_reused_segments_per_phase():
    plan = make_plan(small_trace(), global_bytes=64 * SEG)
    p0, p1 = phase_bits(plan, 0), phase_bits(plan, 1)
    assert p0 == {"a": "*:rg,wg;0:none", "b": "*:rg,wg;2:none"}
    assert p1 == {"b": "*:rg,wg;7:none"}
    table = BypassTable()
    table.set_xattr(5, p0["a"])  # the values are valid user.pvfs.bypass text
    assert not table.flags(5, 0) and table.flags(5, 5)


def test_fine_plan_respects_the_global_cache_size():
    plan = make_plan(small_trace(), global_bytes=SEG)  # room for one segment
    p0 = phase_bits(plan, 0)
    assert p0["a"] == "*:rg,wg;0:none"  # the most used one wins
    assert p0["b"] == "*:rg,wg"


def test_coarse_plan_is_per_file_and_program_wide():
    plan = make_plan(small_trace(), global_bytes=4 * SEG, coarse=True)
    assert plan["coarse"]
    for k in (0, 1):
        bits = phase_bits(plan, k)
        # b: 4 uses over segments 2 and 7; a: 4 uses over segments 0 and 5 - both fit in 4
        assert set(bits) == {"a", "b"} and all(v == "" for v in bits.values())
    tight = make_plan(small_trace(), global_bytes=2 * SEG, coarse=True)
    assert sorted(phase_bits(tight, 0).values()) == ["", "*:rg,wg"]


def test_plan_file_round_trip(tmp_path):
    plan = make_plan(generate("lu", 2, {"n": 128, "slabs": 4}, seed=1))
    path = str(tmp_path / "lu.plan")
    save_plan(plan, path)
    assert load_plan(path) == plan
    (tmp_path / "bad").write_text("{}")
    with pytest.raises(ValueError):
        load_plan(str(tmp_path / "bad"))
    with pytest.raises(ValueError):
        make_plan(small_trace(), global_bytes=0)
