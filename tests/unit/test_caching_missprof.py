"""``python -m pvfs.bench.caching.missprof``: a read's time split at the backend."""

from __future__ import annotations

import pytest

from pvfs.bench.caching.missprof import summarise


def _run(read_s: float, backend_read_s: float, write_list_s: float = 0.0,
         reads: int = 100) -> dict:
    out = {"reads": reads, "read_s": read_s, "backend_read_s": backend_read_s}
    if write_list_s:
        out["backend_write_list_s"] = write_list_s
    return out


def test_split_and_paired_ratio():
    runs = {"none": [_run(0.10, 0.09), _run(0.20, 0.19), _run(0.12, 0.11)],
            "local": [_run(0.13, 0.10, 0.01), _run(0.22, 0.18), _run(0.15, 0.12)]}
    got = summarise(runs)
    # ms per read: the whole read, its backend reads and the rest (what the cache did)
    assert got["none"]["read_ms"][0] == pytest.approx(1.2)
    assert got["none"]["rest_ms"][0] == pytest.approx(0.1)
    assert got["local"]["backend_write_list_ms"][2] == pytest.approx(0.1)  # hi: one run
    assert got["local"]["rest_ms"][0] == pytest.approx(0.3)  # of 0.2, 0.4, 0.3
    lo, hi = got["local"]["rest_ms"][1:]
    assert lo <= got["local"]["rest_ms"][0] <= hi
    # local ÷ none paired by round: 1.3, 1.1, 1.25 -> median 1.25
    assert got["local_read_vs_none"][0] == pytest.approx(1.25)
    assert got["local_read_vs_none"][1] == pytest.approx(1.1)
    assert got["local_read_vs_none"][2] == pytest.approx(1.3)


def test_one_setup_has_no_ratio():
    got = summarise({"local": [_run(0.1, 0.05)]})
    assert "local_read_vs_none" not in got
    assert got["local"]["rest_ms"][0] == pytest.approx(0.5)


def test_global_miss_ratios_and_miss_share():
    def g(read_s: float, share: float) -> dict:
        return {**_run(read_s, read_s - 0.01), "global": {"read_miss_share": share}}

    runs = {"none": [_run(0.10, 0.09), _run(0.20, 0.19), _run(0.10, 0.09)],
            "local": [_run(0.12, 0.10), _run(0.22, 0.20), _run(0.11, 0.10)],
            "both": [g(0.20, 0.9), g(0.36, 0.95), g(0.19, 0.94)]}
    got = summarise(runs)
    # both ÷ none by round: 2.0, 1.8, 1.9; both ÷ local: 1.667, 1.636, 1.727
    assert got["both_read_vs_none"][0] == pytest.approx(1.9)
    assert got["both_read_vs_local"][0] == pytest.approx(0.20 / 0.12)
    assert got["local_read_vs_none"][0] == pytest.approx(1.1)
    assert got["both"]["global_read_miss_share"][0] == pytest.approx(0.94)
    assert "global_read_miss_share" not in got["local"]


def test_backend_reads_beside_writes_are_counted_apart():
    def r(ws: int, w_s: float) -> dict:
        return {**_run(0.2, 0.1), "backend_reads": 100, "backend_read_ws": ws,
                "backend_read_w_s": w_s}

    got = summarise({"local": [r(20, 0.04), r(10, 0.01), r(0, 0.0)]})["local"]
    assert got["backend_read_w_share"][0] == pytest.approx(0.1)
    assert got["backend_read_w_ms"][0] == pytest.approx(1.5)  # of 2.0 and 1.0 ms
    # the rest: 0.06 s / 80, 0.09 s / 90, 0.1 s / 100 -> 0.75, 1.0, 1.0 ms
    assert got["backend_read_clean_ms"][0] == pytest.approx(1.0)
    assert "backend_read_w_share" not in summarise({"none": [_run(0.1, 0.05)]})["none"]


def test_a_backend_read_split_at_its_worker_thread():
    r = {**_run(0.2, 0.1), "backend_threads": 100, "backend_dispatch_s": 0.02,
         "backend_thread_s": 0.07, "backend_return_s": 0.01}
    got = summarise({"local": [r]})["local"]
    assert got["backend_dispatch_ms"][0] == pytest.approx(0.2)
    assert got["backend_thread_ms"][0] == pytest.approx(0.7)
    assert got["backend_return_ms"][0] == pytest.approx(0.1)
    assert "backend_thread_ms" not in summarise({"none": [_run(0.1, 0.05)]})["none"]


def test_pool_takes_several_files_rounds_together(tmp_path):
    import json

    from pvfs.bench.caching.missprof import pool

    paths = []
    for i, (n, loc) in enumerate([((0.10, 0.20), (0.13, 0.22)), ((0.12,), (0.15,))]):
        p = tmp_path / f"r{i}.json"
        p.write_text(json.dumps({"rounds": len(n), "machine": {"load": [1.0, 1.0, 1.0]},
                                 "runs": {"none": [_run(x, x) for x in n],
                                          "local": [_run(x, x) for x in loc]}}))
        paths.append(str(p))
    got = pool(paths)
    assert got["rounds"] == 3 and [f["file"] for f in got["pooled"]] == ["r0.json", "r1.json"]
    # ratios by round: 1.3, 1.1, 1.25 -> median 1.25
    assert got["summary"]["local_read_vs_none"][0] == pytest.approx(1.25)
