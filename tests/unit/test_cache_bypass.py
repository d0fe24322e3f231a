"""Segment bypass bits: the xattr text format and the cache honouring the bits."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pvfs.cache import BlockCache, Bypass, BypassEntry, BypassTable, format_bypass, parse_bypass
from pvfs.cache.testing import MemoryBackend

BS = 64


def test_parse_examples() -> None:
    assert parse_bypass("") == []
    assert parse_bypass("0-15:rl,wl;16:none") == [
        BypassEntry(0, 15, Bypass.READ_LOCAL | Bypass.WRITE_LOCAL),
        BypassEntry(16, 16, Bypass.NONE),
    ]
    assert parse_bypass(" *:all  3:rg ") == [
        BypassEntry(None, None, Bypass.ALL),
        BypassEntry(3, 3, Bypass.READ_GLOBAL),
    ]


@pytest.mark.parametrize(
    "bad", ["0-15", "0-15:", "a:rl", "5-3:rl", "0:rx", "1-2-3:rl", "-1:rl", "0:rl,,wl",
            f"{1 << 49}:rl"],
)
def test_parse_rejects(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_bypass(bad)


def test_table_canonical_form() -> None:
    t = BypassTable()
    t.set_xattr(7, "0-3:rl;4-7:rl;2:none;*:wg")
    assert t.get_xattr(7) == "*:wg;0-1:rl;2:none;3-7:rl"
    assert t.flags(7, 100) == Bypass.WRITE_GLOBAL
    assert t.flags(7, 2) == Bypass.NONE
    assert t.bypass_read(7, 5) and not t.bypass_write(7, 5)
    t.set_xattr(7, b"")
    assert t.get_xattr(7) == "" and t.flags(7, 0) == Bypass.NONE
    with pytest.raises(ValueError):
        t.set_xattr(7, b"\xff")
    with pytest.raises(ValueError):
        t.set_range(7, 3, 1, Bypass.ALL)


flags_st = st.sampled_from(list(Bypass))
entry_st = st.one_of(
    st.builds(lambda f: BypassEntry(None, None, f), flags_st),
    st.builds(lambda a, n, f: BypassEntry(a, a + n, f),
              st.integers(0, 40), st.integers(0, 10), flags_st),
)


@given(st.lists(entry_st, max_size=8))
def test_table_matches_naive_model(entries: list[BypassEntry]) -> None:
    t = BypassTable()
    t.apply(1, entries)
    default = Bypass.NONE
    naive: dict[int, Bypass] = {}
    for e in entries:
        if e.first is None:
            default = e.flags
        else:
            for s in range(e.first, e.last + 1):  # type: ignore[operator]
                naive[s] = e.flags
    for s in range(60):
        assert t.flags(1, s) == naive.get(s, default)
    # the canonical text round-trips to the same bits
    t2 = BypassTable()
    t2.set_xattr(1, t.get_xattr(1))
    assert all(t2.flags(1, s) == t.flags(1, s) for s in range(60))
    assert t2.get_xattr(1) == t.get_xattr(1)


def test_format_bypass() -> None:
    assert format_bypass(Bypass.NONE, []) == ""
    assert format_bypass(Bypass.ALL, [(0, 0, Bypass.NONE)]) == "*:rl,wl,rg,wg;0:none"


@pytest.mark.trio
async def test_read_bypass_skips_cache() -> None:
    be = MemoryBackend()
    be.files[1] = bytearray(bytes(range(256)) * 2)
    cache = BlockCache(be, block_size=BS, capacity=64 * BS, segment_blocks=2)
    cache.bypass.set_xattr(1, "1:rl")  # type: ignore[attr-defined]  # blocks 2-3
    data = await cache.read(1, 0, 8 * BS, file_size=8 * BS)
    assert data == bytes(be.files[1])
    s = cache.stats()
    assert s["bypassed_reads"] == 2 and s["misses"] == 6 and s["blocks_cached"] == 6
    be.reads.clear()
    await cache.read(1, 0, 8 * BS, file_size=8 * BS)
    assert be.reads == [(1, 2 * BS, 2 * BS)]  # only the bypassed segment goes out again
    assert cache.stats()["hits"] == 6


@pytest.mark.trio
async def test_read_bypass_still_sees_own_dirty_data() -> None:
    be = MemoryBackend()
    cache = BlockCache(be, block_size=BS, capacity=64 * BS)
    await cache.write(1, 0, b"mine")
    cache.bypass.set_xattr(1, "*:rl")  # type: ignore[attr-defined]
    assert await cache.read(1, 0, 10, file_size=0) == b"mine"


@pytest.mark.trio
async def test_write_bypass_goes_through_and_updates_copies() -> None:
    be = MemoryBackend()
    be.files[1] = bytearray(b"o" * (8 * BS))
    cache = BlockCache(be, block_size=BS, capacity=64 * BS, segment_blocks=4)
    await cache.read(1, 0, 8 * BS, file_size=8 * BS)
    cache.bypass.set_xattr(1, "1:wl")  # type: ignore[attr-defined]  # blocks 4-7
    await cache.write(1, 3 * BS, b"n" * (2 * BS))  # block 3 cached, block 4 through
    assert be.writes == [(1, 4 * BS, BS)]
    assert cache.stats()["bypassed_writes"] == 1
    expect = b"o" * (3 * BS) + b"n" * (2 * BS) + b"o" * (3 * BS)
    assert await cache.read(1, 0, 8 * BS, file_size=8 * BS) == expect
    await cache.write(1, 7 * BS, b"new", file_size=8 * BS)
    assert cache.stats()["blocks_cached"] == 8  # bypassed writes never insert
    await cache.flush(1)
    assert bytes(be.files[1]) == expect[: 7 * BS] + b"new" + b"o" * (BS - 3)
