"""Build glue: maps the design-card folders onto one `pvfs` distribution and builds the
single C extension `pvfs._native` from csrc/.

Environment switches for the C build:
  PVFS_BUILD=release (default)  -O2, -Wall -Wextra -Werror
  PVFS_BUILD=debug              -O0 -g
  PVFS_BUILD=asan               -O1 -g -fsanitize=address,undefined (run Python with
                                LD_PRELOAD=$(gcc -print-file-name=libasan.so))
"""

import os
from pathlib import Path

from setuptools import Extension, setup

# Folder of each top-level part -> the package it becomes (../shared/CONVENTIONS.md).
PACKAGE_ROOTS = {
    "pvfs": "src/pvfs",
    "pvfs.daemons": "daemons",
    "pvfs.fuse": "fuse",
    "pvfs.cli": "cli",
    "pvfs.traces": "traces",
    "pvfs.check": "check",
    "pvfs.bench": "bench",
}


def find_packages() -> list[str]:
    found = []
    for name, root in PACKAGE_ROOTS.items():
        for init in sorted(Path(root).rglob("__init__.py")):
            rel = init.parent.relative_to(root)
            parts = [] if str(rel) == "." else list(rel.parts)
            found.append(".".join([name, *parts]))
    return found


def c_flags() -> tuple[list[str], list[str]]:
    mode = os.environ.get("PVFS_BUILD", "release")
    common = ["-std=gnu11", "-Wall", "-Wextra", "-Werror", "-Wno-missing-field-initializers"]
    if mode == "debug":
        return common + ["-O0", "-g"], []
    if mode == "asan":
        san = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer"]
        return common + ["-O1", "-g"] + san, san
    return common + ["-O2"], []


cflags, ldflags = c_flags()
native = Extension(
    "pvfs._native",
    sources=sorted(str(p) for p in Path("csrc").glob("*.c")),
    include_dirs=["csrc"],
    extra_compile_args=cflags,
    extra_link_args=ldflags,
)

setup(
    packages=find_packages(),
    package_dir=PACKAGE_ROOTS,
    package_data={"pvfs.traces": ["samples/*"], "pvfs.daemons.mgr": ["schema.sql"]},
    ext_modules=[native],
)
