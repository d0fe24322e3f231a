"""Fixtures shared by the unit tests."""

from __future__ import annotations

import pytest

from pvfs.daemons.mgr.store import MetaStore
from pvfs.layout.stripe import Stripe


@pytest.fixture
def store(tmp_path):
    """A manager's metadata store for 4 I/O daemons, files striped over all of them."""
    s = MetaStore(str(tmp_path / "meta.sqlite"), 4, Stripe(0, -1, 65536))
    yield s
    s.close()
