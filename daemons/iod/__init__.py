"""The I/O daemon: stores each file's share in one local stripe file, serves data requests."""
