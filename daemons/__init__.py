"""The pvfs daemons: ``mgr`` (metadata manager) and ``iod`` (I/O daemon)."""
