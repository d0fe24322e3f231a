"""``pvfs-admin``: the administration tool (subcommands in the modules beside this one)."""
