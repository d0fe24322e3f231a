"""pvfs-admin argument parsing: every subcommand, global options, usage errors, help text."""

from __future__ import annotations

import argparse

import pytest

from pvfs.cli import common
from pvfs.cli import main as climain

EXPECTED = {"init", "up", "down", "status", "ping", "df", "ls", "stat", "mkdir", "rm", "mv",
            "cp", "setstripe", "getstripe", "sched", "stats", "fsck"}


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _all_commands() -> list[tuple[str, argparse.ArgumentParser]]:
    out = []
    for name, p in _subparsers(climain.build_parser()).items():
        out.append((name, p))
        out += [(f"{name} {n}", q) for n, q in _subparsers(p).items()]
    return out


def test_every_expected_subcommand_is_registered():
    assert EXPECTED <= set(_subparsers(climain.build_parser()))
    assert {"show", "set"} <= set(_subparsers(_subparsers(climain.build_parser())["sched"]))


def _ids(v: object) -> str:
    return v if isinstance(v, str) else ""


@pytest.mark.parametrize("name, parser", _all_commands(), ids=_ids)
def test_every_subcommand_help_has_an_example(name, parser):
    """Optional groups (mount, replay, trace) included."""
    assert "example" in parser.format_help() and "pvfs-admin" in parser.epilog, name


@pytest.mark.parametrize("name, parser", [(n, p) for n, p in _all_commands()
                                          if n.split()[0] in EXPECTED], ids=_ids)
def test_every_core_subcommand_takes_json_and_config(name, parser):
    text = parser.format_help()
    assert "--json" in text and "--config" in text, name


@pytest.mark.parametrize("argv", [
    ["--config", "c.toml", "--json", "status"],
    ["status", "--config", "c.toml", "--json"],
    ["--json", "status", "--config", "c.toml"],
])
def test_global_options_before_or_after_the_subcommand(argv):
    args = climain.build_parser().parse_args(argv)
    assert args.config == "c.toml" and args.json is True and args.command == "status"


def test_global_options_default():
    args = climain.build_parser().parse_args(["df"])
    assert args.config is None and args.json is False and args.verbose is False


def test_sizes_with_suffixes():
    p = climain.build_parser()
    args = p.parse_args(["setstripe", "pvfs:/d", "--ssize", "1M", "--pcount", "2"])
    assert (args.ssize, args.pcount, args.base) == (1 << 20, 2, None)
    args = p.parse_args(["sched", "set", "opt3", "--window", "64k", "--iod", "1"])
    assert (args.algorithm, args.window, args.iod) == ("opt3", 65536, 1)
    args = p.parse_args(["cp", "--chunk", "4M", "a", "b", "pvfs:/"])
    assert args.chunk == 4 << 20 and args.sources == ["a", "b"] and args.dst == "pvfs:/"
    assert p.parse_args(["init", "--ssize", "256k"]).ssize == 256 << 10


@pytest.mark.parametrize("argv", [
    ["nosuch"], ["setstripe", "pvfs:/x", "--ssize", "12q"], ["sched", "set", "opt9"],
    ["ls", "--bogus"], ["mv", "pvfs:/only-one"], ["stats", "--iod", "x"],
])
def test_usage_errors_exit_2_with_one_line(argv, capsys):
    with pytest.raises(SystemExit) as info:
        climain.main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("pvfs-admin: ")


def test_no_subcommand_prints_help_and_exits_2(capsys):
    assert climain.main([]) == 2
    assert "subcommands" in capsys.readouterr().err


def test_sched_without_action_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as info:
        climain.main(["sched"])
    assert info.value.code == 2
    assert "show or set" in capsys.readouterr().err


def test_missing_config_is_one_line_exit_1(tmp_path, capsys):
    assert climain.main(["--config", str(tmp_path / "none.toml"), "status"]) == 1
    err = capsys.readouterr().err
    assert err == f"pvfs-admin: config: config file {tmp_path / 'none.toml'} does not exist\n"


def test_cp_between_two_local_paths_is_a_usage_error(tmp_path, capsys):
    cfg = tmp_path / "pvfs.toml"
    assert climain.main(["--config", str(cfg), "cp", "a", "b"]) == 2
    assert "neither side is inside pvfs" in capsys.readouterr().err


@pytest.mark.parametrize("text, path", [
    ("pvfs:/a/b", "/a/b"), ("/a/b/", "/a/b"), ("a//b", "/a/b"), ("pvfs:", "/"),
    ("pvfs:/a/../c", "/c"),
])
def test_pvfs_path(text, path):
    assert common.pvfs_path(text) == path


def test_init_refuses_to_overwrite_and_writes_a_loadable_config(tmp_path, monkeypatch, capsys):
    from pvfs.config import load

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    d = tmp_path / "fs"
    assert climain.main(["init", "--dir", str(d), "--iods", "3", "--ssize", "1M",
                         "--port", "17400"]) == 0
    cfg = load(d / "pvfs.toml")
    assert cfg.niods == 3 and cfg.stripe.ssize == 1 << 20 and cfg.manager.port == 17400
    marker = tmp_path / "home" / ".config" / "pvfs" / "last-config"
    assert marker.read_text().strip() == str(d / "pvfs.toml")
    capsys.readouterr()
    assert climain.main(["init", "--dir", str(d)]) == 1
    assert "already exists" in capsys.readouterr().err


def test_init_with_a_host_list(tmp_path, monkeypatch, capsys):
    from pvfs.config import load

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    hosts = tmp_path / "hosts"
    hosts.write_text("# cluster\nnode1\nnode2  # second\n\nnode3\n")
    assert climain.main(["--json", "init", "--dir", str(tmp_path / "fs"), "--hosts",
                         str(hosts)]) == 0
    cfg = load(tmp_path / "fs" / "pvfs.toml")
    assert cfg.manager.host == "node1"
    assert [e.host for e in cfg.iods] == ["node1", "node2", "node3"]
    assert climain.main(["init", "--dir", str(tmp_path / "x"), "--hosts",
                         str(tmp_path / "missing")]) == 1
