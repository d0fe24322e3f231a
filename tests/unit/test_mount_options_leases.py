"""Leases are on by default and turn themselves off where they would skip a permission
check (fuse/options.py)."""

from __future__ import annotations

import pytest

from pvfs.fuse.options import parse_options


def test_leases_are_on_by_default() -> None:
    assert parse_options("").leases
    assert not parse_options("leases=0").leases


def test_without_default_permissions_leases_turn_themselves_off() -> None:
    opts = parse_options("default_permissions=0")
    assert not opts.leases and not opts.default_permissions


def test_asking_for_leases_without_default_permissions_is_refused() -> None:
    with pytest.raises(ValueError, match="leases need default_permissions"):
        parse_options("leases,default_permissions=0")
