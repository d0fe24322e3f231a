"""The README's "Running on a cluster", done as it says, on machines that are network
namespaces (``test_cluster_support``): a hosts file, ``pvfs-admin init --hosts``, the config
and the key copied to every other host with scp, ``pvfs-admin up`` on each server host,
``status`` and ``df`` from a client, a mount there with real work on it (a tree copied in and
compared, a C program built with make, a git repository committed, cloned and logged),
``umount``, ``pvfs-admin down`` on each server host. Authentication is on (the addresses are
not loopback), as on any real cluster. Then the same with two clients mounted at once under
``coherence=sync``, each seeing what the other wrote.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from test_cluster_support import (
    CLIENT,
    CONFIG,
    DOWN,
    DOWN_ALL,
    INIT,
    MNT,
    UMOUNT,
    UP,
    UP_ALL,
    Machines,
    copy_to,
    needs_machines,
    readme_cluster,
)

pytestmark = [needs_machines, pytest.mark.slow]

README = Path(__file__).resolve().parents[2] / "README.md"

# A tree with what a copy can get wrong: empty and multi-stripe files, sizes at stripe
# boundaries, nesting, a symlink, an empty directory, modes.
MAKE_TREE = r"""
python3 - "$1" <<'EOF'
import os, random, sys
root = sys.argv[1]
rnd = random.Random(33)
sizes = [0, 1, 4095, 65535, 65536, 65537, 200000, (1 << 20) + 3]
for d in ("a", "a/b", "a/b/c", "d", "empty"):
    os.makedirs(os.path.join(root, d), exist_ok=True)
for i, size in enumerate(sizes * 2):
    d = ("a", "a/b", "a/b/c", "d")[i % 4]
    with open(os.path.join(root, d, f"f{i}.bin"), "wb") as fh:
        fh.write(rnd.randbytes(size))
os.chmod(os.path.join(root, "d", "f3.bin"), 0o600)
os.symlink("b/c/f2.bin", os.path.join(root, "a", "link"))
EOF
"""

LIB_H = "int add(int a, int b);\nint mul(int a, int b);\n"
MAIN_C = '#include <stdio.h>\n#include "lib.h"\nint main(void) { printf("%d\\n", add(2, 3) * mul(4, 5)); return 0; }\n'
ADD_C = '#include "lib.h"\nint add(int a, int b) { return a + b; }\n'
MUL_C = '#include "lib.h"\nint mul(int a, int b) { return a * b; }\n'
MAKEFILE = "prog: main.o add.o mul.o\n\t$(CC) -o $@ $^\n%.o: %.c lib.h\n\t$(CC) -O2 -c $<\n"


def tree_work(m: Machines, host: str, where: str) -> None:
    """A tree made on the client's own disk, copied in with cp -a, compared byte for byte
    and by listing (names, types, sizes, modes, link targets)."""
    src = f"$HOME/tree-{host}"
    m.sh(host, f"set -- {src}\n{MAKE_TREE}")
    listing = "find . -printf '%y %m %s %l %p\\n' | sort"
    r = m.sh(host, f"""
        cp -a {src} {where}
        diff -r --no-dereference {src} {where}
        [ "$(cd {src} && {listing})" = "$(cd {where} && {listing})" ]
        [ "$(cd {src} && find . -type f -exec sha256sum {{}} + | sort)" = \\
          "$(cd {where} && find . -type f -exec sha256sum {{}} + | sort)" ]
        echo tree ok""")
    assert r.stdout.strip().endswith("tree ok")


def build_work(m: Machines, host: str, where: str) -> None:
    """Three C files built with make -j2, run; make again builds nothing; a touched source
    rebuilds only its object (mtimes through the mount are right)."""
    files = {"lib.h": LIB_H, "main.c": MAIN_C, "add.c": ADD_C, "mul.c": MUL_C,
             "Makefile": MAKEFILE}
    writes = "\n".join(f"cat > {where}/{name} <<'EOF'\n{text}EOF" for name, text in files.items())
    r = m.sh(host, f"mkdir -p {where}\n{writes}\ncd {where}\nmake -j2\n./prog")
    assert r.stdout.strip().splitlines()[-1] == "100", r.stdout
    assert "up to date" in m.sh(host, f"cd {where} && sleep 1.1 && make -q && make").stdout
    r = m.sh(host, f"cd {where} && touch add.c && make && ./prog")
    assert "add.c" in r.stdout and "mul.c" not in r.stdout and "main.c" not in r.stdout, r.stdout
    assert r.stdout.strip().splitlines()[-1] == "100"


def git_work(m: Machines, host: str, where: str) -> None:
    """git init, two commits, clone, log and fsck of the clone -- all on the mount."""
    r = m.sh(host, f"""
        mkdir -p {where} && cd {where}
        git init -q repo && cd repo
        printf 'hello\\n' > README && mkdir src && printf 'int x;\\n' > src/x.c
        git add . && git commit -qm first
        printf 'more\\n' >> README && git commit -qam second
        cd .. && git clone -q repo clone
        git -C clone log --format=%s
        git -C clone fsck --strict
        cmp repo/README clone/README""")
    assert r.stdout.split() == ["second", "first"], r.stdout


def status_lists_every_daemon(m: Machines, host: str, out: str) -> None:
    for name, addr in (("mgr", "node1:7400"), ("iod0", "node1:7401"), ("iod1", "node2:7401")):
        assert re.search(rf"^{name}\s+{addr}\s+up\b", out, re.MULTILINE), out


def df_lists_every_iod(out: str) -> None:
    for name, addr in (("iod0", "node1:7401"), ("iod1", "node2:7401")):
        assert re.search(rf"^{name}\s+{addr}\s+\S", out, re.MULTILINE), out
    assert re.search(r"^total\s", out, re.MULTILINE), out


def readme_commands() -> list[str]:
    """The command lines of the README's cluster section's sh blocks, comments dropped."""
    text = README.read_text()
    section = text.split("## Running on a cluster", 1)[1].split("\n## ", 1)[0]
    lines = []
    for block in re.findall(r"```sh\n(.*?)```", section, re.DOTALL):
        for line in block.splitlines():
            line = re.sub(r"\s+#\s.*$", "", line).strip()
            if line and not line.startswith("#"):
                lines.append(line)
    return lines


def test_readme_cluster_section_is_what_these_tests_run():
    steps = [*INIT[1], *UP[1], *CLIENT[1], *UMOUNT[1], *DOWN[1], *UP_ALL[1], *DOWN_ALL[1]]
    assert readme_commands() == steps


def test_readme_cluster_path_with_a_mount_doing_real_work(tmp_path):
    with Machines(tmp_path, ["node1", "node2", "client1"], servers=["node1", "node2"]) as m:
        out = readme_cluster(m)
        assert "shared key: /srv/pvfs/pvfs.key" in out["init"]
        assert re.search(r"^iod0\s.*started$", out["up node1"], re.MULTILINE), out["up node1"]
        assert re.search(r"^mgr\s.*started$", out["up node1"], re.MULTILINE), out["up node1"]
        assert re.search(r"^iod1\s.*started$", out["up node2"], re.MULTILINE), out["up node2"]
        assert "mgr" not in out["up node2"]
        # each host got the same config and the same private key
        key = m.file("node1", "/srv/pvfs/pvfs.key")
        for h in ("node2", "client1"):
            assert m.file(h, "/srv/pvfs/pvfs.key").read_bytes() == key.read_bytes()
            assert m.file(h, "/srv/pvfs/pvfs.key").stat().st_mode & 0o777 == 0o600
        host, lines = CLIENT
        status = m.sh(host, lines[0]).stdout
        status_lists_every_daemon(m, host, status)
        df_lists_every_iod(m.sh(host, lines[1]).stdout)
        m.sh(host, "\n".join(lines[2:]))
        assert m.net.fuse_mounts(host) == [MNT]
        tree_work(m, host, f"{MNT}/tree")
        build_work(m, host, f"{MNT}/build")
        git_work(m, host, f"{MNT}/git")
        # the data is on both I/O daemon hosts, each in its own /srv
        for h in ("node1", "node2"):
            stripes = list(m.file(h, "/srv/pvfs/iod/stripes").rglob("*"))
            assert any(p.is_file() and p.stat().st_size for p in stripes), h
        assert f"mounted at {MNT}" in m.sh(host, CLIENT[1][0]).stdout
        m.sh(UMOUNT[0], UMOUNT[1][0])
        assert m.net.fuse_mounts(host) == []
        for h in DOWN[0]:
            r = m.sh(h, DOWN[1][0])
            assert "stopped" in r.stdout, r.stdout
            assert not m.running_in(h), m.running_in(h)
        r = m.sh(host, CLIENT[1][0], check=False)
        assert r.returncode == 1 and "DOWN" in r.stdout


def test_two_clients_mounted_at_once_under_coherence_sync(tmp_path):
    """The README's steps with client2 as well (the config and key copied there too); both
    mount with -o coherence=sync and work at the same time, then each reads, at once, what
    the other wrote."""
    hosts = ["node1", "node2", "client1", "client2"]
    with Machines(tmp_path, hosts, servers=["node1", "node2"]) as m:
        readme_cluster(m, clients=["client1", "client2"])
        assert "client2" in copy_to(["client1", "client2"])
        for c in ("client1", "client2"):
            status_lists_every_daemon(m, c, m.sh(c, CLIENT[1][0]).stdout)
            m.sh(c, f"{CLIENT[1][2]}\n{CLIENT[1][3]} -o coherence=sync")
        # both clients at work at once: a tree copy on one, a build on the other
        import threading

        errors: list[BaseException] = []

        def work(fn, host, where):
            try:
                fn(m, host, where)
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(tree_work, "client1", f"{MNT}/tree")),
                   threading.Thread(target=work, args=(build_work, "client2", f"{MNT}/build"))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        # each sees the other's work
        m.sh("client2", f"diff -r --no-dereference {m.net.home('client1')}/tree-client1 "
                        f"{MNT}/tree")
        assert m.sh("client1", f"{MNT}/build/prog").stdout.strip() == "100"
        # a change on one is seen by the other at once (no sleeping out attribute timeouts)
        m.sh("client1", f"printf 'v1\\n' > {MNT}/shared")
        assert m.sh("client2", f"cat {MNT}/shared").stdout == "v1\n"
        m.sh("client2", f"printf 'v2\\n' >> {MNT}/shared")
        assert m.sh("client1", f"cat {MNT}/shared").stdout == "v1\nv2\n"
        m.sh("client1", f"printf 'v3\\n' > {MNT}/shared")
        assert m.sh("client2", f"cat {MNT}/shared").stdout == "v3\n"
        # git across the two: client1 commits, client2 clones and commits, client1 pulls
        m.sh("client1", f"cd {MNT} && git init -q repo && cd repo && echo a > a && "
                        "git add a && git commit -qm one")
        m.sh("client2", f"cd {MNT} && git clone -q repo clone && cd clone && echo b > b && "
                        "git add b && git commit -qm two")
        r = m.sh("client1", f"cd {MNT}/repo && git pull -q ../clone main && git log --format=%s "
                            "&& git fsck --strict && cat b")
        assert r.stdout.split() == ["two", "one", "b"], r.stdout
        for c in ("client1", "client2"):
            m.sh(c, UMOUNT[1][0])
        for h in DOWN[0]:
            m.sh(h, DOWN[1][0])
            assert not m.running_in(h)
    assert CONFIG.startswith("/srv/")
