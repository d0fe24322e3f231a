"""Starting file systems for others to use: this host's daemons of a config (``launch``) and
several "hosts" on one machine in network namespaces (``netns``).

The CLI's ``pvfs-admin up/down``, the tests, the benchmarks and the studies all start daemons
through these modules; they start them as processes (``python -m pvfs.daemons.<name>``), so
the core never imports a daemon.
"""
