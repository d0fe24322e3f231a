"""Imports go one way (docs/architecture.md, "Layers"): the core at the bottom; daemons, the
mount and traces on it; the checker on the mount and traces; the benchmarks and studies on
those; the CLI on top. Every import counts, the lazy ones inside functions included, since
the package map of setup.py (``pvfs.cli`` is ``cli/``) hides them from tools that read folders.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def package_roots() -> dict[str, str]:
    """setup.py's PACKAGE_ROOTS (package -> folder), read without running setup()."""
    tree = ast.parse((ROOT / "setup.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "PACKAGE_ROOTS":
            return ast.literal_eval(node.value)
    raise AssertionError("setup.py has no PACKAGE_ROOTS")


# part -> the parts it may import (itself always). Daemons may share daemons/*.py modules
# but no daemon package (mgr, iod, gcache) imports another: they talk over the wire.
ALLOWED = {
    "core": set(),
    "daemons": {"core"},
    "fuse": {"core"},
    "traces": {"core"},
    "check": {"core", "fuse", "traces"},
    "bench": {"core", "daemons", "fuse", "traces"},
    "cli": {"core", "fuse", "traces", "check", "bench"},
}
PART_OF_PACKAGE = {"pvfs": "core", "pvfs.daemons": "daemons", "pvfs.fuse": "fuse",
                   "pvfs.traces": "traces", "pvfs.check": "check", "pvfs.bench": "bench",
                   "pvfs.cli": "cli"}


def part_of(module: str) -> str | None:
    best = None
    for pkg in PART_OF_PACKAGE:
        inside = module == pkg or module.startswith(pkg + ".")
        if inside and (best is None or len(pkg) > len(best)):
            best = pkg
    return PART_OF_PACKAGE[best] if best else None


def modules() -> list[tuple[str, Path]]:
    """(module name, file) of every Python module of the distribution."""
    found = []
    for pkg, folder in package_roots().items():
        base = ROOT / folder
        for f in sorted(base.rglob("*.py")):
            rel = f.relative_to(base).with_suffix("").parts
            if rel[-1] == "__init__":
                rel = rel[:-1]
            name = ".".join([pkg, *rel])
            if part_of(name) == PART_OF_PACKAGE.get(pkg) or pkg == "pvfs":
                found.append((name, f))
    # a folder mapped to a sub-package of pvfs is not also the core's
    owners = {f: n for n, f in found if part_of(n) != "core"}
    return [(n, f) for n, f in found if part_of(n) != "core" or f not in owners]


def imported(name: str, path: Path) -> list[tuple[int, str]]:
    """Every module ``path`` imports, at any depth of its code, with the line."""
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            out.append((node.lineno, target))
            # "from pvfs import cli" names a part as an attribute
            out += [(node.lineno, f"{target}.{a.name}") for a in node.names
                    if part_of(f"{target}.{a.name}") not in (None, part_of(target))]
    return out


def daemon_package(module: str) -> str | None:
    parts = module.split(".")
    if len(parts) >= 4 and parts[:2] == ["pvfs", "daemons"]:
        return parts[2]
    return None


def violations(scanned: list[tuple[str, Path]] | None = None) -> list[str]:
    bad = []
    for name, path in scanned if scanned is not None else modules():
        src = part_of(name)
        for line, target in imported(name, path):
            dst = part_of(target)
            if dst is None or dst == src and src != "daemons":
                continue
            shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
            where = f"{shown}:{line} ({src}) imports {target} ({dst})"
            if dst != src and dst not in ALLOWED[src]:
                bad.append(where)
            elif src == dst == "daemons":
                mine, theirs = daemon_package(name), daemon_package(target)
                if mine and theirs and mine != theirs:
                    bad.append(where + ": one daemon imports another")
    return bad


def test_every_module_is_scanned():
    names = {n for n, _ in modules()}
    for must in ("pvfs.config", "pvfs.cluster.launch", "pvfs.daemons.iod.server",
                 "pvfs.fuse.operations", "pvfs.cli.main", "pvfs.check.machine",
                 "pvfs.bench.caching.study", "pvfs.traces.format"):
        assert must in names


def test_imports_go_one_way():
    assert violations() == []


def test_allowed_parts_have_no_loop():
    seen: dict[str, int] = {}

    def visit(part: str) -> None:
        assert seen.get(part) != 1, f"loop through {part}"
        if seen.get(part) == 2:
            return
        seen[part] = 1
        for up in ALLOWED[part]:
            visit(up)
        seen[part] = 2

    for part in ALLOWED:
        visit(part)


@pytest.mark.parametrize("src,target", [
    ("pvfs.collective._file", "pvfs.cli.main"),
    ("pvfs.traces.format", "pvfs.bench.caching.study"),
    ("pvfs.daemons.gcache.server", "pvfs.daemons.iod.rs"),
])
def test_the_scan_can_fail(tmp_path, src, target):
    """A planted lazy import inside a function is caught."""
    real = modules()
    path = next(f for n, f in real if n == src)
    planted = tmp_path / path.name
    planted.write_text(path.read_text() + f"\n\ndef _planted():\n    import {target}\n")
    assert any(target in v for v in violations([(n, planted if n == src else f)
                                                for n, f in real]))
