"""pvfs-admin's command table (pvfs.cli.commands) and what the cmd_* modules share
(pvfs.cli.common): groups are listed once, statically, and no handler re-enters main()."""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

from pvfs.cli import commands, common
from pvfs.cli import main as climain

CLI = Path(climain.__file__).parent


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def test_subcommand_modules_never_import_main() -> None:
    # main imports them (through the table): importing main back would be a cycle.
    for path in sorted(CLI.glob("cmd_*.py")):
        assert "pvfs.cli.main" not in _imports(path), path.name
        assert "importlib" not in _imports(path), f"{path.name}: import groups statically"


def test_table_registers_every_core_group() -> None:
    sub = argparse.ArgumentParser().add_subparsers()
    for register in commands.CORE:
        register(sub)  # a group may also add to another's (``bench``): every one must load
    parser = climain.build_parser()
    names = set(parser._subparsers._group_actions[0].choices)
    assert set(sub.choices) <= names


def test_mount_group_follows_the_client() -> None:
    names = set(climain.build_parser()._subparsers._group_actions[0].choices)
    assert ("mount" in names) == common.mount_available() == climain.has_command("mount")


def test_shared_size_types() -> None:
    assert common.size_arg("64k") == 65536 and common.size_arg("0") == 0
    assert common.positive_size_arg("1M") == 1 << 20
    for bad, fn in (("x", common.size_arg), ("0", common.positive_size_arg)):
        try:
            fn(bad)
        except argparse.ArgumentTypeError:
            continue
        raise AssertionError(f"{fn.__name__}({bad!r}) accepted")
