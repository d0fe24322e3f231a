"""``python -m pvfs.bench.caching.missprocs``: missprof's nodes in processes of their own."""

from __future__ import annotations

import pytest

from pvfs.bench.caching.missprocs import _merge
from pvfs.bench.caching.missprof import summarise


def test_nodes_accounts_merge_into_one_run():
    a = {"reads": 10, "read_s": 0.02, "backend_read_s": 0.015, "time_s": 1.0,
         "local": [{"hits": 1}]}
    b = {"reads": 30, "read_s": 0.04, "backend_read_s": 0.03, "backend_read_ws": 2,
         "time_s": 1.5, "local": [{"hits": 2}]}
    got = _merge([a, b])
    assert got["time_s"] == 1.5  # the slower node's
    assert got["reads"] == 40 and got["read_s"] == pytest.approx(0.06)
    assert got["backend_read_ws"] == 2 and got["local"] == [{"hits": 1}, {"hits": 2}]
    s = summarise({"local": [got]})["local"]
    assert s["read_ms"][0] == pytest.approx(1.5) and s["rest_ms"][0] == pytest.approx(0.375)
