"""The scheduling algorithms are named once, in ``pvfs.schedulers``: the C engine's list
(csrc/sched.c, ``_native.ALGORITHMS``) is held equal to it here, and the config, the model,
``pvfs-admin init``/``sched`` and the studies take their names from it (issue 28)."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pvfs import _native, schedulers
from pvfs.cli import main as climain
from pvfs.cli.main import build_parser
from pvfs.config import ALGORITHMS, FIXED_ALGORITHMS
from pvfs.models import rs

ROOT = Path(__file__).resolve().parents[2]
SCHED_C = ROOT / "csrc" / "sched.c"


def c_names(text: str) -> tuple[str, ...]:
    """The policies of sched.c's text in ``pv_sched_all``'s order, by their ``.so_name``."""
    tables = {name: re.search(r'\.so_name = "(\w+)"', body).group(1) for name, body in
              re.findall(r"struct pv_sched_ops (\w+) = \{(.*?)\n\};", text, re.DOTALL)}
    listed = re.search(r"pv_sched_all\[\] = \{([^}]*)\}", text)
    assert tables and listed, "sched.c: no ops tables or no pv_sched_all found"
    return tuple(tables[n] for n in re.findall(r"&(\w+)", listed.group(1)))


def test_c_and_python_lists_agree():
    assert _native.ALGORITHMS == schedulers.FIXED
    assert c_names(SCHED_C.read_text()) == schedulers.FIXED
    assert schedulers.ALGORITHMS == (*schedulers.FIXED, schedulers.SELECTOR)
    assert schedulers.DEFAULT in schedulers.FIXED
    assert set(schedulers.DESCRIPTIONS) == set(schedulers.ALGORITHMS)


def test_the_comparison_can_fail():
    """A fifth policy in sched.c, or two swapped in pv_sched_all, is seen."""
    text = SCHED_C.read_text()
    planted = text.replace("&pv_sched_opt4, NULL", "&pv_sched_opt4, &pv_sched_opt5, NULL") \
        + '\nconst struct pv_sched_ops pv_sched_opt5 = {\n    .so_name = "opt5",\n};\n'
    assert c_names(planted) != schedulers.FIXED
    swapped = text.replace("&pv_sched_opt1, &pv_sched_opt2", "&pv_sched_opt2, &pv_sched_opt1")
    assert swapped != text and c_names(swapped) != schedulers.FIXED


def test_users_take_the_one_list():
    assert FIXED_ALGORITHMS is schedulers.FIXED and ALGORITHMS is schedulers.ALGORITHMS
    assert rs.ALGORITHMS is schedulers.FIXED
    assert set(rs.TABLE_5_3) == set(schedulers.FIXED)
    from pvfs.bench.scheduling import plot, study

    assert study.ALGOS is schedulers.FIXED
    assert plot.ALGS[:len(schedulers.ALGORITHMS)] == schedulers.ALGORITHMS


def _sub(parser, name: str):
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return sub.choices[name]


def _choices(parser, *path: str) -> tuple:
    for name in path:
        parser = _sub(parser, name)
    algo = next(a for a in parser._actions if a.dest == "algorithm")
    return tuple(algo.choices), algo.default


def test_cli_offers_exactly_the_algorithms():
    parser = build_parser()
    assert _choices(parser, "sched", "set") == (schedulers.ALGORITHMS, None)
    assert _choices(parser, "init") == (schedulers.ALGORITHMS, schedulers.DEFAULT)


def test_sched_help_lists_every_algorithm():
    text = _sub(build_parser(), "sched").format_help()
    for alg in schedulers.ALGORITHMS:
        assert re.search(rf"\b{re.escape(alg)} {re.escape(schedulers.DESCRIPTIONS[alg])}",
                         text), alg


def test_init_with_the_reactive_selector(tmp_path, monkeypatch, capsys):
    from pvfs.config import load

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert climain.main(["init", "--dir", str(tmp_path / "fs"), "--iods", "2",
                         "--algorithm", "rs"]) == 0
    assert load(tmp_path / "fs" / "pvfs.toml").algorithm == "rs"
    assert climain.main(["init", "--dir", str(tmp_path / "fs2"), "--iods", "2"]) == 0
    assert load(tmp_path / "fs2" / "pvfs.toml").algorithm == schedulers.DEFAULT
    capsys.readouterr()


BLOCKER = textwrap.dedent("""
    import sys

    class Blocker:
        def find_spec(self, name, path=None, target=None):
            if name == "pvfs._native":
                raise ImportError("pvfs._native blocked")
            return None

    sys.meta_path.insert(0, Blocker())
""")


@pytest.mark.parametrize("module", ["pvfs.schedulers", "pvfs.config", "pvfs.models.rs",
                                    "pvfs.models.bypass", "pvfs"])
def test_imports_without_the_c_extension(module):
    """pvfs/__init__.py promises it: the pure-Python parts load without pvfs._native."""
    code = BLOCKER + textwrap.dedent(f"""
        import {module}
        assert "pvfs._native" not in sys.modules
        from pvfs.config import ALGORITHMS, parse
        cfg = parse({{"manager": {{"address": "127.0.0.1:1", "data_dir": "m"}},
                     "iod": [{{"address": "127.0.0.1:2", "data_dir": "i"}}],
                     "scheduler": {{"algorithm": "rs"}}}})
        assert cfg.algorithm == "rs" and ALGORITHMS[-1] == "rs"
        try:
            import pvfs._native
        except ImportError:
            pass
        else:
            raise AssertionError("the blocker let pvfs._native through")
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=60, check=False)
    assert r.returncode == 0, r.stderr


def test_engine_accepts_every_fixed_algorithm_and_not_rs():
    with _native.Engine() as eng:
        for a in schedulers.FIXED:
            eng.algorithm = a
            assert eng.algorithm == a
        with pytest.raises(ValueError):
            eng.algorithm = schedulers.SELECTOR
