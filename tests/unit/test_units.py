"""pvfs.units: the one size rule that mount options, pvfs-admin, trace generators and the
benchmarks share. The cases below are every form one of the four former copies accepted."""

from __future__ import annotations

import pytest

from pvfs.units import format_size, parse_size

KiB, MiB, GiB, TiB, PiB = 1 << 10, 1 << 20, 1 << 30, 1 << 40, 1 << 50


@pytest.mark.parametrize(("text", "value"), [
    # fuse/options.py: digits, k/m/g in any case, an optional "b" or "ib" after the letter
    ("4096", 4096), ("4k", 4 * KiB), ("64M", 64 * MiB), ("1g", GiB), ("0", 0),
    ("1kib", KiB), ("1KB", KiB), ("1b", 1), (" 2m ", 2 * MiB),
    # cli/output.py: t and p, decimals that come to whole bytes, space before the unit
    ("1t", TiB), ("1p", PiB), ("1.5k", 1536), ("512b", 512), (" 8m ", 8 * MiB),
    ("1MiB", MiB), ("2 g", 2 * GiB),
    # traces/generators: capital units, "MiB", decimals
    ("64K", 64 * KiB), ("2MiB", 2 * MiB), ("10", 10), ("1.5G", 3 * GiB // 2),
    # bench/fio/jobs.py: "Ki" without the b, as fio prints it
    ("256M", 256 * MiB), ("1GiB", GiB), ("1.5m", 3 * MiB // 2), ("4Ki", 4 * KiB),
    # exact arithmetic: 2**53 + 1 is where a float would be one byte off
    ("9007199254740993", (1 << 53) + 1), ("1.25t", 5 * TiB // 4), ("0.5k", 512),
])
def test_accepts_every_former_form(text: str, value: int) -> None:
    assert parse_size(text) == value


def test_int_passes_through() -> None:
    assert parse_size(123) == 123
    assert parse_size(0) == 0


@pytest.mark.parametrize("text", [
    "", "k", "M", "12q", "12Q", "-1", "-4k", "1e6", "64 kk", "0x10", "lots", "1.", ".5k",
    # not whole bytes: the trace and bench copies used to truncate these silently
    "1.3", "0.1k",
    # an "i" with no unit letter (two copies let "1ib" through as one byte)
    "1i", "1ib",
])
def test_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_size(text)


def test_rejects_negative_int() -> None:
    with pytest.raises(ValueError):
        parse_size(-1)


@pytest.mark.parametrize(("n", "text"), [
    (None, "-"), (0, "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"), (1536, "1.5 KiB"),
    (MiB, "1.0 MiB"), (5 * GiB, "5.0 GiB"), (3 * TiB, "3.0 TiB"), (2 * PiB, "2.0 PiB"),
    (1 << 70, "1024.0 EiB"),
])
def test_format_size(n: int | None, text: str) -> None:
    assert format_size(n) == text


@pytest.mark.parametrize("n", [0, 1, 512, KiB, 64 * KiB, 3 * MiB // 2, GiB, 5 * TiB])
def test_format_then_parse_round_trips_exact_multiples(n: int) -> None:
    # format_size is for people (one decimal); its output parses back wherever that is exact.
    text = format_size(n).replace(" ", "")
    assert parse_size(text) == n


def test_every_reader_of_sizes_uses_the_one_rule() -> None:
    # The four parts that read sizes must not grow their own copies again.
    from pvfs.cli import output
    from pvfs.fuse import options
    from pvfs.traces.generators import _build

    assert output.parse_size is parse_size
    assert options.parse_size is parse_size
    assert _build.parse_size is parse_size
    assert options.parse_options("cache_size=1.5M,block_size=4Ki").cache_size == 3 * MiB // 2
