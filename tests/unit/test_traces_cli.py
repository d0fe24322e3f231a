"""The replay/trace subcommands, driven through argparse as pvfs-admin will drive them."""

from __future__ import annotations

import argparse
import json

import pytest

from pvfs.traces import format as fmt
from pvfs.traces.cli import add_subcommands, build_parser, main


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_registers_on_foreign_subparsers() -> None:
    parser = argparse.ArgumentParser(prog="pvfs-admin")
    sub = parser.add_subparsers(dest="cmd")
    add_subcommands(sub)
    args = parser.parse_args(["replay", "--workload", "lu", "--procs", "2", "--target", "/x"])
    assert callable(args.func) and args.workload == "lu"
    args = parser.parse_args(["trace", "stats", "f.trace", "--json"])
    assert callable(args.func)
    help_text = build_parser().format_help()
    assert "replay" in help_text and "trace" in help_text


def test_help_has_examples(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["replay", "--help"])
    assert exc.value.code == 0
    assert "examples:" in capsys.readouterr().out


def test_generate_show_stats(capsys, tmp_path) -> None:
    out = tmp_path / "lu.mpk"
    code, text, _ = run(capsys, "trace", "generate", "lu", "--procs", "2", "--param", "n=32",
                        "--param", "slabs=4", "-o", str(out), "--json")
    assert code == 0 and json.loads(text)["records"] > 0
    assert fmt.load(out).generator["params"]["n"] == 32
    code, text, _ = run(capsys, "trace", "show", str(out), "--limit", "3")
    assert code == 0 and "lu/matrix" in text and "more" in text
    code, text, _ = run(capsys, "trace", "show", str(out), "--json", "--limit", "-1")
    assert code == 0 and len(json.loads(text)["records"]) == len(fmt.load(out).records)
    code, text, _ = run(capsys, "trace", "stats", str(out), "--json")
    st = json.loads(text)
    assert code == 0 and st["bytes_written"] == 32 * 32 * 8
    code, text, _ = run(capsys, "trace", "stats", str(out))
    assert "reuse distance" in text


def test_import_and_list(capsys, tmp_path) -> None:
    from pathlib import Path

    import pvfs.traces

    sample = Path(pvfs.traces.__file__).parent / "samples" / "strace-small.txt"
    code, _, _ = run(capsys, "trace", "import", str(sample), "-o", str(tmp_path / "s.trace"))
    assert code == 0 and fmt.load(tmp_path / "s.trace").nprocs == 2
    code, text, _ = run(capsys, "trace", "list", "--json")
    assert code == 0 and "btio" in json.loads(text)


def test_usage_errors_exit_2(capsys, tmp_path) -> None:
    code, _, err = run(capsys, "trace", "generate", "lu", "--param", "bogus=1",
                       "-o", str(tmp_path / "x"))
    assert code == 2 and "unknown parameter" in err
    code, _, err = run(capsys, "trace", "generate", "btio", "--procs", "3",
                       "-o", str(tmp_path / "x"))
    assert code == 2 and "square" in err
    (tmp_path / "junk").write_text("nothing to see\n")
    code, _, _ = run(capsys, "trace", "stats", str(tmp_path / "junk"))
    assert code == 2
    code, _, err = run(capsys, "replay", "--workload", "lu", "--param", "x", "--target", "/t")
    assert code == 2 and "k=v" in err
    with pytest.raises(SystemExit) as exc:
        main(["replay", "--target", "/t"])  # neither --workload nor --trace
    assert exc.value.code == 2


def test_replay_json_and_plot(capsys, tmp_path) -> None:
    code, text, _ = run(capsys, "replay", "--workload", "strided", "--param", "sizes=16K",
                        "--procs", "2", "--target", str(tmp_path / "t"), "--json", "--verify",
                        "-o", str(tmp_path / "r.json"), "--plot", str(tmp_path / "p.png"))
    res = json.loads(text)
    assert code == 0 and res["verify_errors"] == 0 and res["procs"] == 2
    assert res["ops"]["listio_write"] == 2 and (tmp_path / "p.png").stat().st_size > 0
    code, text, _ = run(capsys, "replay", "--workload", "strided", "--param", "sizes=16K",
                        "--procs", "2", "--target", str(tmp_path / "t2"), "--label", "again",
                        "--plot", str(tmp_path / "cmp.png"), "--compare", str(tmp_path / "r.json"))
    assert code == 0 and "application service time" in text
    assert (tmp_path / "cmp.png").stat().st_size > 0


def test_replay_trace_procs_mismatch(capsys, tmp_path) -> None:
    path = tmp_path / "t.trace"
    run(capsys, "trace", "generate", "mining", "--procs", "2", "-o", str(path))
    code, _, err = run(capsys, "replay", "--trace", str(path), "--procs", "3",
                       "--target", str(tmp_path / "d"))
    assert code == 2 and "ranks" in err
