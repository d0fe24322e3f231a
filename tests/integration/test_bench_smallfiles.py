"""bench/smallfiles.py runs end to end on a small scale: the native API's small-file loop
beside a local directory, its bytes checked, the JSON it records."""

from __future__ import annotations

import json

from pvfs.bench import smallfiles


def test_the_small_files_benchmark_records_every_variant(tmp_path, capsys):
    name = str(tmp_path / "smallfiles")
    assert smallfiles.main(["--procs", "1", "2", "--files", "30", "--size", "100",
                            "--repeats", "1", "--iods", "2", "--json", name]) == 0
    doc = json.loads((tmp_path / "smallfiles.json").read_text())
    assert [r["procs"] for r in doc["rounds"]] == [1, 2]
    for p in ("1", "2"):
        for v in ("pvfs", "ahead", "local"):
            # (CPU is counted in clock ticks: 30 local files may take none)
            assert doc["medians"][p][v] > 0 and doc["cpu_ms_per_file_medians"][p][v] >= 0
    assert doc["files_per_process"] == 30 and doc["size"] == 100
    assert doc["scratch"]  # where the files went: a journaled ext4 of its own, or /tmp
    assert "ahead files/s" in capsys.readouterr().out
