"""Names several parts accept are defined once and taken from there (issue 28): the global
cache policies (``pvfs.models.bypass``), the caching study's setups and traces
(``pvfs.bench.caching.setups``), the emulated-disk presets (``pvfs.models.disk``) and the
mount's coherence modes (``pvfs.client.modes``). The scheduling algorithms:
test_sched_names.py."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from pvfs.bench.caching import setups
from pvfs.cli.main import build_parser
from pvfs.client.modes import COHERENCE_MODES
from pvfs.models import bypass
from pvfs.models.disk import DEFAULT_PRESET, PRESETS


def _parser(*path: str) -> argparse.ArgumentParser:
    parser = build_parser()
    for name in path:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[name]
    return parser


def _arg(parser: argparse.ArgumentParser, dest: str) -> argparse.Action:
    return next(a for a in parser._actions if a.dest == dest)


# ------------------------------------------------------------ global cache policies
def test_gcache_policies_are_the_classes_names():
    made = {name: bypass.make_policy(name, 10, 64) for name in bypass.POLICIES}
    assert all(p.name == name for name, p in made.items())
    assert bypass.POLICIES == ("all", "runtime", "adaptive", "sketch")  # the tools' order
    assert bypass.DEFAULT_POLICY in bypass.POLICIES
    with pytest.raises(ValueError, match="one of all, runtime, adaptive, sketch"):
        bypass.make_policy("nope")


def test_adaptive_rules_are_policy_names():
    p = bypass.make_policy("adaptive", 10, 64)
    rules = {p.rule}
    p.evidence = p.saturate
    rules.add(p.rule)
    assert rules == {bypass.RuntimeBypass.name, bypass.SketchAdmission.name}


def test_gcache_policy_command_offers_exactly_the_policies():
    assert tuple(_arg(_parser("gcache", "policy"), "policy").choices) == bypass.POLICIES


def test_gcache_config_default_policy():
    from pvfs.config import parse
    from pvfs.gcache.config import GcacheConfig, gcache_config

    cfg = parse({"manager": {"address": "127.0.0.1:1", "data_dir": "m"},
                 "iod": [{"address": "127.0.0.1:2", "data_dir": "i"}],
                 "gcache": {"addresses": "127.0.0.1:3"}})
    assert gcache_config(cfg).policy == GcacheConfig(()).policy == bypass.DEFAULT_POLICY


# ------------------------------------------------------------ the caching study
def test_study_setups_are_one_definition():
    from pvfs.bench.caching import study

    assert study.POLICIES is setups.POLICIES and study.Setup is setups.Setup
    assert study.TRACES is setups.TRACES and study.IOD_CACHE == setups.IOD_CACHE
    assert {s.policy for s in setups.POLICIES.values()} <= set(bypass.POLICIES)


def test_study_caching_defaults_are_the_study_names():
    p = _parser("study", "caching")
    assert _arg(p, "policies").default.split(",") == list(setups.POLICIES)
    assert _arg(p, "traces").default.split(",") == list(setups.TRACES)
    assert _arg(p, "storage").default == setups.STORAGE == f"emulated:{DEFAULT_PRESET}"
    assert _arg(p, "iod_cache").default == setups.IOD_CACHE


def test_setups_load_without_the_study():
    """The CLI reads them for --help: no trio, no traces."""
    code = ("import sys, pvfs.bench.caching.setups; "
            "assert not {'trio', 'pvfs.bench.caching.study'} & set(sys.modules), "
            "sorted(m for m in sys.modules if m.startswith(('trio', 'pvfs.bench')))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=60, check=False)
    assert r.returncode == 0, r.stderr


# ------------------------------------------------------------ disk presets
def test_study_scheduling_disks_are_the_presets():
    disk = _arg(_parser("study", "scheduling"), "disk")
    assert tuple(disk.choices) == tuple(PRESETS) and disk.default == DEFAULT_PRESET


def test_collective_bench_help_names_every_preset():
    text = _arg(_parser("bench", "collective"), "storage").help
    assert all(name in text for name in PRESETS)


# ------------------------------------------------------------ coherence modes
def test_mount_options_take_the_coherence_modes():
    pytest.importorskip("pyfuse3")
    from pvfs.fuse import options

    assert options.COHERENCE_MODES is COHERENCE_MODES
    assert options.MountOptions().coherence in COHERENCE_MODES
    for mode in COHERENCE_MODES:
        assert options.parse_options(f"coherence={mode}").coherence == mode
    with pytest.raises(ValueError, match="coherence must be one of none, sync"):
        options.parse_options("coherence=strict")
