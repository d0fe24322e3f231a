"""``pvfs-admin check``: property-based consistency testing of a live file system (SPEC §9).

Hypothesis state machines drive several clients at once -- native API connections and
mounted directories, mixed -- through opens, reads, writes, truncates, renames, links,
unlinks, fsyncs, sync writes, xattrs and striping changes, and check every result against a
model of what the chosen coherence mode promises (:mod:`pvfs.check.model`). A violation is
shrunk to a short sequence of steps, printed, and written as a trace for ``pvfs-admin replay``.

It sits above the core: it drives ``pvfs.connect`` and mounts like any user would; nothing in
``src/pvfs`` imports it. ``docs/check.md`` is the user guide.
"""

from pvfs.check.runner import Options as Options
from pvfs.check.runner import Result as Result
from pvfs.check.runner import run as run
