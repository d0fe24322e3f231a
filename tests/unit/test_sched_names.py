"""The scheduling algorithms are named once: the C engine's list (csrc/sched.c) is what the
config, the I/O daemon and `pvfs-admin sched set` accept, plus the reactive selector rs."""

from __future__ import annotations

import re
from pathlib import Path

from pvfs import _native
from pvfs.cli.main import build_parser
from pvfs.config import ALGORITHMS, FIXED_ALGORITHMS
from pvfs.models import rs

ROOT = Path(__file__).resolve().parents[2]


def test_c_and_python_lists_agree():
    assert FIXED_ALGORITHMS == _native.ALGORITHMS == rs.ALGORITHMS
    assert ALGORITHMS == (*_native.ALGORITHMS, "rs")
    # every ops table in sched.c is in the exported list, in order
    names = re.findall(r'\.so_name = "(\w+)"', (ROOT / "csrc" / "sched.c").read_text())
    assert tuple(names) == _native.ALGORITHMS
    assert set(rs.TABLE_5_3) == set(_native.ALGORITHMS)


def _choices(parser, *path: str) -> tuple:
    for name in path:
        sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
        parser = sub.choices[name]
    algo = next(a for a in parser._actions if a.dest == "algorithm")
    return tuple(algo.choices)


def test_cli_offers_exactly_the_algorithms():
    assert _choices(build_parser(), "sched", "set") == ALGORITHMS


def test_engine_accepts_every_fixed_algorithm_and_not_rs():
    import pytest

    with _native.Engine() as eng:
        for a in FIXED_ALGORITHMS:
            eng.algorithm = a
            assert eng.algorithm == a
        with pytest.raises(ValueError):
            eng.algorithm = "rs"
