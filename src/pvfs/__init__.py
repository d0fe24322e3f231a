"""pvfs: a parallel file system in the line of PVFS.

The native API (SPEC §4)::

    import pvfs
    fs = pvfs.connect("/path/to/pvfs.toml")
    with fs.open("/data/out", "wb", stripe=pvfs.Stripe(base=0, pcount=4, ssize=65536)) as f:
        f.write(b"...")

The pure-Python parts (layout, config, protocol) import without the C extension; the client
names below load it on first use.
"""

__version__ = "0.1.0"

from pvfs.config import Config as Config
from pvfs.config import load as load_config
from pvfs.layout.describe import Nested as Nested
from pvfs.layout.describe import Regions as Regions
from pvfs.layout.describe import Strided as Strided
from pvfs.layout.stripe import Stripe as Stripe

_CLIENT_NAMES = {
    "connect": ("pvfs.client.fs", "connect"),
    "FileSystem": ("pvfs.client.fs", "FileSystem"),
    "File": ("pvfs.client.file", "File"),
    "Stat": ("pvfs.client.attrs", "Stat"),
    "AsyncClient": ("pvfs.client.aclient", "AsyncClient"),
    "AccessHint": ("pvfs.client.hints", "AccessHint"),
    "mdbi": ("pvfs.client.mdbi", None),
}

__all__ = [
    "AccessHint",
    "AsyncClient",
    "Config",
    "File",
    "FileSystem",
    "Nested",
    "Regions",
    "Stat",
    "Strided",
    "Stripe",
    "connect",
    "load_config",
    "mdbi",
]


def __getattr__(name: str):
    if name not in _CLIENT_NAMES:
        raise AttributeError(f"module 'pvfs' has no attribute {name!r}")
    import importlib

    module, attr = _CLIENT_NAMES[name]
    value = importlib.import_module(module)
    if attr is not None:
        value = getattr(value, attr)
    globals()[name] = value
    return value
