"""The mount's default local cache size: a share of RAM, within [128 MiB, 1 GiB] (issue 11)."""

from __future__ import annotations

from pvfs.fuse.options import (
    CACHE_MAX,
    CACHE_MIN,
    MountOptions,
    default_cache_size,
    mem_total,
    parse_options,
)

MiB = 1 << 20
GiB = 1 << 30


def test_a_share_of_ram_within_bounds() -> None:
    assert default_cache_size(512 * MiB) == CACHE_MIN == 128 * MiB
    assert default_cache_size(4 * GiB) == 256 * MiB
    assert default_cache_size(24 * GiB) == CACHE_MAX == GiB
    assert default_cache_size(3 * GiB + 5) == 192 * MiB  # whole MiB
    assert default_cache_size(0) == CACHE_MIN  # unknown RAM


def test_reads_memtotal(tmp_path) -> None:
    info = tmp_path / "meminfo"
    info.write_text("MemTotal:       8388608 kB\nMemFree: 1 kB\n")
    assert mem_total(str(info)) == 8 * GiB
    assert mem_total(str(tmp_path / "absent")) is None


def test_options_default_and_override() -> None:
    assert MountOptions().cache_size == default_cache_size()
    assert default_cache_size() * 0.85 > 64 * MiB  # a 64 MiB working set fits by default
    assert parse_options("cache_size=32M").cache_size == 32 * MiB
