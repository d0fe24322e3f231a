"""The native API's public names (SPEC §4; issue 2 keeps these names) all resolve."""

import pvfs

NAMES = {"connect", "FileSystem", "File", "Stat", "AsyncClient", "mdbi", "Stripe", "Regions",
         "Strided", "Nested", "Config", "load_config"}


def test_every_public_name_is_exported():
    assert NAMES <= set(pvfs.__all__)
    for name in pvfs.__all__:
        assert getattr(pvfs, name) is not None


def test_file_and_filesystem_methods():
    for meth in ("read", "write", "seek", "tell", "pread", "pwrite", "fsync", "truncate", "close",
                 "read_list", "write_list", "read_strided", "write_strided", "set_partition"):
        assert callable(getattr(pvfs.File, meth))
    for meth in ("open", "stat", "listdir", "mkdir", "rmdir", "unlink", "rename", "symlink",
                 "link", "truncate", "getstripe", "setstripe", "statfs"):
        assert callable(getattr(pvfs.FileSystem, meth))
    assert callable(pvfs.mdbi.open)
