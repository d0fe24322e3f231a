"""Loads the sanitized builds of pvfs's C extensions in place of the release ones, in every
Python process started with this folder on ``PYTHONPATH`` (the test runner, the daemons,
the mount): ``PVFS_SANITIZED_LIB`` names the folder ``setup.py build_ext`` wrote them to
with ``PVFS_BUILD=asan``. Each load is noted in ``PVFS_SANITIZED_LOADS`` (one line: pid and
module), so the test can tell that the mount's process ran the sanitized front end too.
tests/integration/test_sanitizers.py sets this up; nothing else uses it."""

import importlib.util
import os
import sys

_LIB = os.environ.get("PVFS_SANITIZED_LIB", "")
_LOADS = os.environ.get("PVFS_SANITIZED_LOADS", "")
_NAMES = ("pvfs._native", "pvfs._fusefront")


class _SanitizedFinder:
    """A meta path finder for the two extension modules only."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name not in _NAMES or not _LIB:
            return None
        stem = name.rpartition(".")[2] + "."
        for f in sorted(os.listdir(_LIB)):
            if f.startswith(stem) and f.endswith(".so"):
                if _LOADS:
                    with open(_LOADS, "a") as out:
                        out.write(f"{os.getpid()} {name}\n")
                return importlib.util.spec_from_file_location(name, os.path.join(_LIB, f))
        return None


sys.meta_path.insert(0, _SanitizedFinder)
