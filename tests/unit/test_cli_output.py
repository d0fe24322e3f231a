"""pvfs-admin formatting helpers: sizes, tables, JSON, progress bar policy."""

from __future__ import annotations

import io
import json

import pytest

from pvfs.cli import output


@pytest.mark.parametrize("text, value", [
    ("4096", 4096), ("64k", 65536), ("64K", 65536), ("1M", 1 << 20), ("1MiB", 1 << 20),
    ("2g", 2 << 30), ("1.5k", 1536), ("512b", 512), (" 8m ", 8 << 20), ("1t", 1 << 40),
])
def test_parse_size_accepts_binary_suffixes(text, value):
    assert output.parse_size(text) == value


@pytest.mark.parametrize("text", ["", "k", "12q", "-1", "1.3", "1e6", "64 kk", "0x10"])
def test_parse_size_rejects_garbage(text):
    with pytest.raises(ValueError):
        output.parse_size(text)


@pytest.mark.parametrize("n, text", [
    (None, "-"), (0, "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"), (1536, "1.5 KiB"),
    (1 << 20, "1.0 MiB"), (5 << 30, "5.0 GiB"), (3 << 40, "3.0 TiB"),
])
def test_human_size(n, text):
    assert output.human_size(n) == text


def test_human_duration():
    assert output.human_duration(None) == "-"
    assert output.human_duration(4.25) == "4.2s"
    assert output.human_duration(75) == "1m 15s"
    assert output.human_duration(3 * 3600 + 120) == "3h 2m"
    assert output.human_duration(86400 + 7200) == "1d 2h"


def test_table_aligns_columns_and_right_aligns_numbers():
    text = output.table([["a", 1, None], ["long-name", 12345, True]], ["name", "n", "flag"],
                        right=[1])
    lines = text.splitlines()
    assert lines[0].split() == ["name", "n", "flag"]
    assert lines[1] == "a              1  -"
    assert lines[2] == "long-name  12345  yes"
    # every column starts at the same offset on every line
    assert len({ln.index(ln.split()[1]) + len(ln.split()[1]) for ln in lines[1:]}) == 1


def test_key_values_aligns_values():
    text = output.key_values([("a", 1), ("longer", "x")])
    assert text.splitlines() == ["a:      1", "longer: x"]


def test_emit_json_round_trips_and_text_uses_renderer():
    buf = io.StringIO()
    data = {"x": [1, 2], "b": b"raw", "t": (1, 2)}
    output.emit(True, data, lambda d: "never", out=buf)
    assert json.loads(buf.getvalue()) == {"x": [1, 2], "b": "raw", "t": [1, 2]}
    buf = io.StringIO()
    output.emit(False, data, lambda d: f"{len(d)} keys\n\n", out=buf)
    assert buf.getvalue() == "3 keys\n"


def test_progress_only_on_a_terminal():
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert output.progress_wanted(stream=io.StringIO()) is False
    assert output.progress_wanted(stream=Tty()) is True
    assert output.progress_wanted(force=True, stream=io.StringIO()) is True
    assert output.progress_wanted(force=False, stream=Tty()) is False


def test_disabled_progress_counts_but_draws_nothing(capsys):
    with output.Progress(100, enabled=False) as bar:
        bar.describe("file")
        bar.update(60)
        bar.update(40)
        assert bar.done == 100 and not bar.enabled
    assert capsys.readouterr() == ("", "")


def test_format_mode():
    assert output.format_mode(0o100644) == "-rw-r--r--"
    assert output.format_mode(0o40755) == "drwxr-xr-x"


def test_cli_error_carries_status():
    e = output.CliError("what", "why", status=2)
    assert str(e) == "what: why" and e.status == 2
