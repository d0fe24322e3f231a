"""No function of the product code, the studies or the benchmarks runs over 80 lines unless
its docstring says why ("Long because ..."): a long function hides steps that want names."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("src/pvfs", "daemons", "fuse", "cli", "traces", "check", "bench")
LIMIT = 80


def long_functions(paths) -> list[str]:
    found = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            lines = node.end_lineno - node.lineno + 1
            doc = ast.get_docstring(node) or ""
            if lines > LIMIT and "Long because" not in doc:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({lines} lines)")
    return found


def test_no_function_over_80_lines_without_a_reason():
    paths = [f for folder in FOLDERS for f in sorted((ROOT / folder).rglob("*.py"))]
    assert long_functions(paths) == []


def test_the_check_can_fail(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(LIMIT))
    (tmp_path / "m.py").write_text(f"def f():\n{body}\n\n\ndef g():\n"
                                   f"    \"\"\"Long because a table.\"\"\"\n{body}\n")
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        assert long_functions([tmp_path / "m.py"]) == ["m.py:1 f (81 lines)"]
    finally:
        ROOT = saved
