"""``pvfs.cli.common.finish_run``: the shared end of the study and bench commands."""

from __future__ import annotations

import argparse
import json

from pvfs.cli.common import finish_run


def _args(tmp_path, **kw) -> argparse.Namespace:
    base = {"output": None, "plot": None, "json": False}
    return argparse.Namespace(**(base | kw))


def test_output_plot_and_table(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setattr("sys.argv", ["pvfs-admin", "bench", "x", "--quick"])
    drawn = []
    out_path = tmp_path / "r.json"
    status = finish_run(_args(tmp_path, output=str(out_path), plot="p.png"), {"v": 1},
                        lambda d: f"table v={d['v']}",
                        lambda: (lambda d, path: drawn.append((d["v"], path))))
    assert status == 0
    saved = json.loads(out_path.read_text())
    assert saved == {"v": 1, "command": "pvfs-admin bench x --quick"}
    assert drawn == [(1, "p.png")]
    assert capsys.readouterr().out.strip() == "table v=1"


def test_json_and_no_plot_import_unless_asked(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setattr("sys.argv", ["pvfs-admin", "study"])

    def never():
        raise AssertionError("the plot module is imported only for --plot")

    assert finish_run(_args(tmp_path, json=True), {"v": 2}, str, never) == 0
    assert json.loads(capsys.readouterr().out) == {"v": 2, "command": "pvfs-admin study"}
