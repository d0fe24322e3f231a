"""``pvfs-admin key generate``: the shared key every daemon and client authenticates with.

The key file holds 64 random hex digits, mode 0600; the config names it (``[security]
key_file``). Copy both to every node: whoever can read the key file can use the file system
(docs/security.md).
"""

from __future__ import annotations

import argparse
import dataclasses
import os

from pvfs.cli.common import PROG, add_command, load_config
from pvfs.cli.output import CliError, emit


def register(sub: argparse._SubParsersAction) -> None:
    key = add_command(sub, "key", help="create the shared authentication key",
                      func=lambda a: _usage(key), example=f"{PROG} key generate")
    ksub = key.add_subparsers(title="actions", metavar="ACTION")
    p = add_command(ksub, "generate", help="write a new key file (mode 0600) and name it in "
                    "the config", func=cmd_generate, example=f"""\
{PROG} key generate                        # <config dir>/pvfs.key
{PROG} --config /srv/pvfs/pvfs.toml key generate --enable   # also on loopback
scp /srv/pvfs/pvfs.toml /srv/pvfs/pvfs.key node2:/srv/pvfs/  # every node needs both""",
                    description="Write a random key to a file only its owner may read and set "
                    "[security] key_file in the config.\nAuthentication is on whenever an "
                    "address in the config is not loopback; --enable turns it on\nfor a "
                    "loopback-only file system too. Restart the daemons (down, up) and mounts "
                    "to use the new key.")
    p.add_argument("--key-file", metavar="PATH",
                   help="where to write it (default: the config's key_file, else pvfs.key "
                   "next to the config)")
    p.add_argument("--enable", action="store_true",
                   help="set [security] auth = true (needed on loopback-only file systems)")
    p.add_argument("--force", action="store_true", help="replace an existing key file")


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.error("an action is required: generate")
    return 2


def cmd_generate(args: argparse.Namespace) -> int:
    from pvfs.cluster import launch
    from pvfs.protocol.auth import generate_key_file

    cfg = load_config(args)
    path = os.path.abspath(args.key_file or cfg.key_file
                           or os.path.join(os.path.dirname(cfg.path), "pvfs.key"))
    if os.path.exists(path) and not args.force:
        raise CliError(f"key generate {path}", "a key file exists already (use --force to "
                       "replace it; running daemons keep the old key until restarted)")
    generate_key_file(path)
    new = dataclasses.replace(cfg, key_file=path, auth=True if args.enable else cfg.auth)
    new = launch.write_config(new, cfg.path)
    data = {"config": new.path, "key_file": path, "auth": new.auth_enabled}
    emit(args.json, data, lambda d: (
        f"wrote {d['key_file']} (mode 0600) and set it in {d['config']}\n"
        + ("authentication is on: restart the daemons and mounts, and copy the config and the "
           "key file to every node" if d["auth"] else
           f"authentication stays off (every address is loopback); `{PROG} key generate "
           "--enable --force` turns it on")))
    return 0
