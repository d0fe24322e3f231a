"""Every benchmark and study driver of pvfs, in one place (``pvfs.bench``).

- top-level scripts (``stream.py``, ``meta.py``, ``apps.py``, ``memory.py``, ``fio/``,
  ``peers/``, ...) are what ``make bench`` runs; each writes JSON under ``bench/results/``;
- ``scheduling/`` (``pvfs-admin study scheduling``), ``caching/`` (``pvfs-admin study
  caching`` and the trace-driven cache simulator), ``collective/`` (``pvfs-admin bench
  collective``) and ``latency.py`` (``pvfs-admin bench latency``) are the studies the CLI
  calls: the CLI parses, calls one function here and prints.

Imports go one way: this package uses the core, traces and the mount; nothing below it
imports it (tests/unit/test_import_layers.py).
"""
