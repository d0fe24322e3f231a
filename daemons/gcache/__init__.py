"""The global cache daemon (SPEC §6): ``server`` (trio, requests and write-back), ``store``
(the slab of blocks), ``transfer`` (slab <-> I/O daemons, zero-copy), ``schema``."""
