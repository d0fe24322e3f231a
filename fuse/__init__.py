"""The pvfs FUSE mount client (SPEC §5): pyfuse3 + trio over the async client, with the local
block cache. ``pvfs-admin mount`` / ``python -m pvfs.fuse``; see ``docs/mount.md``."""

from .mount import list_mounts as list_mounts
from .mount import mount as mount
from .mount import unmount as unmount
from .operations import Operations as Operations
from .options import MountOptions as MountOptions
from .options import parse_options as parse_options

__all__ = ["MountOptions", "Operations", "list_mounts", "mount", "parse_options", "unmount"]
