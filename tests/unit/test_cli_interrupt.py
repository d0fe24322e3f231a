"""``pvfs-admin`` exits 143 on SIGTERM and 130 on Ctrl-C, also when the KeyboardInterrupt
comes out of trio's nurseries wrapped in exception groups (a study's replay tasks)."""

from __future__ import annotations

import argparse

import pytest

from pvfs.cli import main as cli_main


def _with(monkeypatch, exc: BaseException, terminated: bool) -> int:
    def boom(args: argparse.Namespace) -> int:
        raise exc

    parser = argparse.ArgumentParser()
    parser.add_argument("-v", "--verbose", action="store_true")
    parser.set_defaults(func=boom)
    monkeypatch.setattr(cli_main, "build_parser", lambda argv, everything=False: parser)
    monkeypatch.setattr(cli_main, "_terminated", terminated)
    return cli_main.main([])


@pytest.mark.parametrize("terminated, status", [(True, 143), (False, 130)])
def test_a_nested_keyboard_interrupt_is_an_interrupt(monkeypatch, capsys, terminated, status):
    nested = BaseExceptionGroup("nursery", [BaseExceptionGroup("inner", [KeyboardInterrupt()])])
    assert _with(monkeypatch, nested, terminated) == status
    assert ("terminated" if terminated else "interrupted") in capsys.readouterr().err
    assert _with(monkeypatch, KeyboardInterrupt(), terminated) == status


def test_other_exception_groups_are_not_swallowed(monkeypatch):
    with pytest.raises(BaseExceptionGroup):
        _with(monkeypatch, BaseExceptionGroup("nursery", [SystemExit(3)]), True)


def test_an_interrupt_inside_trios_loop_is_an_interrupt(monkeypatch, capsys):
    """Raised inside trio's run loop itself, the KeyboardInterrupt becomes the cause of a
    TrioInternalError (a RuntimeError)."""
    try:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as ki:
            raise RuntimeError("internal error in Trio - please file a bug!") from ki
    except RuntimeError as exc:
        wrapped = exc
    assert _with(monkeypatch, wrapped, True) == 143
    assert "terminated" in capsys.readouterr().err


def test_other_runtime_errors_are_reported_as_errors(monkeypatch, capsys):
    assert _with(monkeypatch, RuntimeError("boom"), True) == 1
    assert "boom" in capsys.readouterr().err
