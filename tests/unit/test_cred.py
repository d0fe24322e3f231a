"""The one credential type (pvfs.protocol.cred) of the clients, the mount and the manager."""

from __future__ import annotations

import errno

import pytest

from pvfs.protocol import schema
from pvfs.protocol.cred import MAX_GROUPS, MAX_ID, ROOT, WIRE_GROUPS, Cred


def test_one_type_everywhere() -> None:
    from pvfs.client import aclient
    from pvfs.daemons.mgr import perms, store
    from pvfs.fuse import handles

    assert aclient.Cred is perms.Cred is store.Cred is handles.Cred is Cred
    assert aclient.ROOT == ROOT == Cred(0, 0)


def test_wire_form_round_trips_through_the_schema() -> None:
    c = Cred(1000, 100, [5, 6, 7])
    assert c.groups == (5, 6, 7) and hash(c) == hash(Cred(1000, 100, (5, 6, 7)))
    assert c.to_wire() == [1000, 100, [5, 6, 7]]
    assert Cred(*schema.cred(c.to_wire())) == c


def test_wire_cuts_groups_the_header_would_refuse() -> None:
    many = Cred(1, 1, tuple(range(WIRE_GROUPS + 10)))
    assert len(many.to_wire()[2]) == WIRE_GROUPS == schema.MAX_GROUPS
    assert many.in_group(WIRE_GROUPS + 5)  # locally every group still counts


@pytest.mark.parametrize(("uid", "gid", "groups"), [
    (-1, 0, ()), (0, MAX_ID + 1, ()), ("0", 0, ()), (0, 0, (MAX_ID + 1,)), (0, 0, "12"),
    (0, 0, tuple(range(MAX_GROUPS + 1))), (True, 0, ()),
])
def test_invalid_is_einval(uid, gid, groups) -> None:
    with pytest.raises(OSError) as info:
        Cred(uid, gid, groups)
    assert info.value.errno == errno.EINVAL


def test_root_and_groups() -> None:
    assert ROOT.is_root and not Cred(1, 1).is_root
    c = Cred(5, 10, (20,))
    assert c.in_group(10) and c.in_group(20) and not c.in_group(30)
