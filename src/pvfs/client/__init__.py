"""The native client: sync API (``connect``/``FileSystem``/``File``) and ``AsyncClient``."""
