"""Fewer manager round trips per file through the mount's handlers (issue 11).

unlink: no manager lookup for a name the mount gave the kernel, the cache of the removed file
dropped, dirty data never dropped for a file that may still have another name (one round trip
per remove instead of two). ``ls -l``'s probes of absent xattrs answered from a cache."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest
from fake_client import ROOT_INO, FakeClient

from pvfs.fuse.operations import Operations
from pvfs.fuse.options import MountOptions

pytestmark = pytest.mark.trio


class Client(FakeClient):
    """The fake file system with unlink and rename (one directory: names are global)."""

    async def unlink(self, parent: int, name: str, cred=None) -> None:
        self._call("unlink")
        del self.names[name]

    async def rename(self, parent: int, name: str, new_parent: int, new_name: str,
                     cred=None, flags: int = 0) -> None:
        self._call("rename")
        if flags & 2:
            self.names[name], self.names[new_name] = self.names[new_name], self.names[name]
        else:
            self.names[new_name] = self.names.pop(name)


def ctx() -> SimpleNamespace:
    return SimpleNamespace(uid=0, gid=0, pid=os.getpid(), umask=0o022)


async def new_file(ops: Operations, name: bytes, data: bytes) -> tuple[int, int]:
    info, entry = await ops.create(ROOT_INO, name, 0o644, os.O_RDWR, ctx())
    await ops.write(info.fh, 0, data)
    return entry.st_ino, info.fh


async def test_unlink_of_a_created_file_needs_no_lookup_and_drops_its_cache() -> None:
    client = Client()
    ops = Operations(client, MountOptions())
    ino, fh = await new_file(ops, b"f", b"x" * 8192)
    await ops.flush(fh)
    await ops.release(fh)
    assert ops.cache.size_hint(ino) == 8192  # blocks cached
    await ops.unlink(ROOT_INO, b"f", ctx())
    assert client.calls["lookup"] == 0 and client.calls["unlink"] == 1
    assert ops.cache.size_hint(ino) == 0 and ino not in ops.table.inodes
    assert "f" not in client.names


async def test_unlink_while_open_keeps_the_cache_of_the_open_file() -> None:
    client = Client()
    ops = Operations(client, MountOptions())
    _, fh = await new_file(ops, b"f", b"y" * 100)
    await ops.unlink(ROOT_INO, b"f", ctx())
    assert client.calls["lookup"] == 1  # dirty blocks: the manager says if a link remains
    assert await ops.read(fh, 0, 100) == b"y" * 100  # open-unlinked files stay readable


async def test_unknown_name_or_dirty_data_fall_back_to_a_lookup() -> None:
    client = Client()
    ops = Operations(client, MountOptions())
    _, fh = await new_file(ops, b"a", b"z" * 10)
    await ops.release(fh)  # written back at close: clean
    await client.create(ROOT_INO, "b", 0o644)  # made by another node: never named here
    await ops.unlink(ROOT_INO, b"b", ctx())
    assert client.calls["lookup"] == 1
    await ops.unlink(ROOT_INO, b"a", ctx())
    assert client.calls["lookup"] == 1


async def test_rename_moves_and_exchanges_the_remembered_names() -> None:
    client = Client()
    ops = Operations(client, MountOptions())
    a, fa = await new_file(ops, b"a", b"1")
    b, fb = await new_file(ops, b"b", b"2")
    for fh in (fa, fb):
        await ops.release(fh)
    await ops.rename(ROOT_INO, b"a", ROOT_INO, b"c", 0, ctx())
    await ops.rename(ROOT_INO, b"b", ROOT_INO, b"c", 2, ctx())  # exchange: c<->b
    assert ops.removals.names == {(ROOT_INO, "c"): b, (ROOT_INO, "b"): a}
    await ops.unlink(ROOT_INO, b"b", ctx())
    await ops.unlink(ROOT_INO, b"c", ctx())
    assert client.calls["lookup"] == 0 and client.names == {}


@pytest.mark.parametrize("name", ["security.selinux", "security.capability"])
async def test_ls_probes_of_absent_xattrs_are_cached_for_attr_timeout(name: str) -> None:
    import errno

    import pyfuse3

    client = Client()
    ops = Operations(client, MountOptions(attr_timeout=60.0))
    ino, _ = await new_file(ops, b"f", b"")
    for _ in range(3):  # ls -l of the same entry, three times: one manager call
        with pytest.raises(pyfuse3.FUSEError) as info:
            await ops.getxattr(ino, name.encode(), ctx())
        assert info.value.errno == errno.ENODATA
    assert client.calls["getxattr"] == 1
    client.nodes[ino].xattrs["user.x"] = b"1"  # other names always ask
    for _ in range(2):
        assert await ops.getxattr(ino, b"user.x", ctx()) == b"1"
    assert client.calls["getxattr"] == 3


async def test_acl_reads_are_answered_by_the_mount_as_the_manager_would() -> None:
    import errno

    import pyfuse3

    client = Client()
    ops = Operations(client, MountOptions())
    ino, _ = await new_file(ops, b"f", b"")
    for name in (b"system.posix_acl_access", b"system.posix_acl_default"):
        with pytest.raises(pyfuse3.FUSEError) as info:
            await ops.getxattr(ino, name, ctx())
        assert info.value.errno == errno.ENODATA
    assert client.calls["getxattr"] == 0
