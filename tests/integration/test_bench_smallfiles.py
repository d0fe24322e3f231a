"""bench/smallfiles.py runs end to end on a small scale: the native API's small-file loop
beside a local directory, its bytes checked, the JSON it records."""

from __future__ import annotations

import json

from pvfs.bench import smallfiles


def test_the_small_files_benchmark_records_both_targets(tmp_path, capsys):
    name = str(tmp_path / "smallfiles")
    assert smallfiles.main(["--procs", "1", "2", "--files", "30", "--size", "100",
                            "--repeats", "1", "--iods", "2", "--json", name]) == 0
    doc = json.loads((tmp_path / "smallfiles.json").read_text())
    assert [r["procs"] for r in doc["rounds"]] == [1, 2]
    for p in ("1", "2"):
        assert doc["medians"][p]["pvfs"] > 0 and doc["medians"][p]["local"] > 0
    assert doc["files_per_process"] == 30 and doc["size"] == 100
    assert "pvfs files/s" in capsys.readouterr().out
