"""Build glue: maps the design-card folders onto one `pvfs` distribution and builds the C
extensions: `pvfs._native` from csrc/*.c (the daemons' engine and the client's transfer) and
`pvfs._fusefront` from csrc/front/ (the mount's libfuse3 front end, docs/mount.md). The second
is its own extension because it links libfuse3, which the daemons must not need; it is built
only where `pkg-config fuse3` answers (the Makefile's `system` target installs libfuse3-dev).

Environment switches for the C build:
  PVFS_BUILD=release (default)  -O2, -Wall -Wextra -Werror
  PVFS_BUILD=debug              -O0 -g
  PVFS_BUILD=asan               -O1 -g -fsanitize=address,undefined (run Python with
                                LD_PRELOAD=$(gcc -print-file-name=libasan.so))
"""

import os
import shutil
import subprocess
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
# The client's exchange with the I/O daemons, plain C, built into both extensions.
XFER = list(Path("csrc/xfer").glob("*.c"))
native = Extension(
    "pvfs._native",
    sources=sorted(str(p) for p in [*Path("csrc").glob("*.c"), *XFER]),
    include_dirs=["csrc"],
    extra_compile_args=cflags,
    extra_link_args=ldflags,
)



def pkg_config(*args: str) -> list[str] | None:
    """``pkg-config ARGS fuse3`` split, or None where libfuse3's development files are
    missing (the mount then offers only the pyfuse3 front end)."""
    if shutil.which("pkg-config") is None:
        return None
    done = subprocess.run(["pkg-config", *args, "fuse3"], capture_output=True, text=True,
                          check=False)
    return done.stdout.split() if done.returncode == 0 else None


def fusefront() -> list[Extension]:
    cf, libs = pkg_config("--cflags"), pkg_config("--libs")
    if cf is None or libs is None:
        return []
    return [Extension(
        "pvfs._fusefront",
        sources=sorted(str(p) for p in [*Path("csrc/front").glob("*.c"), *XFER]),
        include_dirs=["csrc/front", "csrc"],
        extra_compile_args=cflags + cf + ["-pthread"],
        extra_link_args=ldflags + libs + ["-pthread"],
    )]


setup(
    packages=find_packages(),
    package_dir=PACKAGE_ROOTS,
    package_data={"pvfs.traces": ["samples/*"], "pvfs.daemons.mgr": ["schema.sql"]},
    ext_modules=[native, *fusefront()],
)
