"""``pvfs-admin up --all`` / ``down --all``: every host of the config from one host, this one in
the command's process and the others over ssh -- real OpenSSH servers in the machines'
namespaces (``test_cluster_support``), a throwaway host key and user key, a temp ssh config
given the three ways the command honours (the user's own ``ssh``, ``--ssh-config FILE``,
``$PVFS_SSH``). A host that cannot be reached or fails is a row with the reason; the hosts
that did start are named; the exit status is 1. ``status`` shows per host what runs.
"""

from __future__ import annotations

import json
import re

import pytest
from test_cluster_support import (
    CONFIG,
    DOWN_ALL,
    UP_ALL,
    Machines,
    needs_machines,
)

pytestmark = [needs_machines, pytest.mark.slow]


def _rows(out: str) -> dict[str, dict]:
    data = json.loads(out)
    return {r["host"]: r for r in data["hosts"]}


def test_up_all_and_down_all_over_ssh(tmp_path):
    with Machines(tmp_path, ["node1", "node2"], servers=["node1", "node2"]) as m:
        m.sh("node1", "printf 'node1\\nnode2\\n' > hosts.txt\n"
                      "pvfs-admin init --hosts hosts.txt --dir /srv/pvfs\n"
                      "ssh node2 mkdir -p /srv/pvfs\n"
                      "scp -p /srv/pvfs/pvfs.toml /srv/pvfs/pvfs.key node2:/srv/pvfs/")
        host, (line,) = UP_ALL
        r = m.sh(host, line)
        assert re.search(r"^node1\s+here\s+ok\s+iod0 started \(pid \d+\), mgr started", r.stdout,
                         re.MULTILINE), r.stdout
        assert re.search(r"^node2\s+ssh\s+ok\s+iod1 started \(pid \d+\)", r.stdout, re.MULTILINE), r.stdout
        assert m.pid("node1", "mgr") and m.pid("node1", "iod0") and m.pid("node2", "iod1")
        # again: everything already runs, nothing new
        rows = _rows(m.sh(host, f"pvfs-admin --json up --all --config {CONFIG}").stdout)
        assert [d["started"] for d in rows["node2"]["done"]] == [False]
        # status, from either host: each daemon up, and per host what runs
        st = m.sh("node2", f"pvfs-admin status --config {CONFIG}").stdout
        assert re.search(r"^host\s+running\s+DOWN$", st, re.MULTILINE), st
        assert re.search(r"^node1\s+mgr, iod0\s+-$", st, re.MULTILINE), st
        assert re.search(r"^node2\s+iod1\s+-$", st, re.MULTILINE), st
        hosts = json.loads(m.sh("node1", f"pvfs-admin --json status --config {CONFIG}").stdout)
        assert hosts["hosts"] == [{"host": "node1", "up": ["mgr", "iod0"], "down": []},
                                  {"host": "node2", "up": ["iod1"], "down": []}]
        host, (line,) = DOWN_ALL
        r = m.sh(host, line)
        assert re.search(r"^node2\s+ssh\s+ok\s+iod1 stopped", r.stdout, re.MULTILINE), r.stdout
        assert re.search(r"^node1\s+here\s+ok\s+.*mgr stopped", r.stdout, re.MULTILINE), r.stdout
        for h in ("node1", "node2"):
            assert not m.running_in(h), m.running_in(h)


def test_hosts_that_fail_or_cannot_be_reached_are_named_and_the_status_is_1(tmp_path):
    """node3 gets the config but not the key (its `up` fails), then its sshd stops (it cannot
    be reached); node1 and node2 start and stop regardless, and every run says which hosts
    did what. Here without the user's ssh config: `--ssh-config`, then `$PVFS_SSH`."""
    hosts = ["node1", "node2", "node3"]
    with Machines(tmp_path, hosts, servers=hosts) as m:
        m.sh("node1", "printf 'node1\\nnode2\\nnode3\\n' > hosts.txt\n"
                      "pvfs-admin init --hosts hosts.txt --dir /srv/pvfs\n"
                      "for h in node2 node3; do ssh $h mkdir -p /srv/pvfs; done\n"
                      "scp -p /srv/pvfs/pvfs.toml /srv/pvfs/pvfs.key node2:/srv/pvfs/\n"
                      "scp -p /srv/pvfs/pvfs.toml node3:/srv/pvfs/")
        # plain ssh does not know these hosts: every remote host fails, clearly
        r = m.sh("node1", f"pvfs-admin up --all --config {CONFIG}", check=False, own_ssh=False)
        assert r.returncode == 1
        assert re.search(r"^node2\s+ssh\s+FAILED\s+FAILED: cannot reach it over ssh: ", r.stdout,
                         re.MULTILINE), r.stdout
        assert "2 of 3 hosts failed: node2, node3; started on: node1" in r.stderr, r.stderr
        # --ssh-config: node2 starts; node3's up fails for want of the key, and says so
        r = m.sh("node1", f"pvfs-admin --json up --all --config {CONFIG} "
                          f"--ssh-config {m.ssh_config}", check=False, own_ssh=False)
        assert r.returncode == 1, r.stdout + r.stderr
        rows = _rows(r.stdout)
        assert rows["node1"]["ok"] and rows["node1"]["via"] == "here"
        assert rows["node2"]["ok"] and [d["name"] for d in rows["node2"]["done"]] == ["iod1"]
        assert not rows["node3"]["ok"] and "/srv/pvfs/pvfs.key" in rows["node3"]["error"], rows
        assert "1 of 3 hosts failed: node3; started on: node1, node2" in r.stderr, r.stderr
        assert "`pvfs-admin down --all` stops those" in r.stderr
        assert m.pid("node2", "iod1") and not m.pid("node3", "iod2")
        st = m.sh("node1", f"pvfs-admin status --config {CONFIG}", check=False)
        assert st.returncode == 1 and re.search(r"^node3\s+-\s+iod2$", st.stdout, re.MULTILINE), st.stdout
        # pvfs-admin missing at that path on the other hosts
        r = m.sh("node1", f"pvfs-admin up --all --config {CONFIG} --ssh-config {m.ssh_config} "
                          "--remote-admin /nonexistent/pvfs-admin", check=False, own_ssh=False)
        assert r.returncode == 1
        assert re.search(r"^node2\s+ssh\s+FAILED\s+FAILED: /nonexistent/pvfs-admin not found "
                         r"there", r.stdout, re.MULTILINE), r.stdout
        # node3 unreachable; $PVFS_SSH names the ssh command
        m.stop_sshd("node3")
        r = m.sh("node1", f"pvfs-admin down --all --config {CONFIG}", check=False,
                 own_ssh=False, env={"PVFS_SSH": f"ssh -F {m.ssh_config}"})
        assert r.returncode == 1
        assert re.search(r"^node3\s+ssh\s+FAILED\s+FAILED: cannot reach it over ssh: ssh: "
                         r"connect to host node3 port 22: Connection refused", r.stdout,
                         re.MULTILINE), r.stdout
        assert re.search(r"^node2\s+ssh\s+ok\s+iod1 stopped", r.stdout, re.MULTILINE), r.stdout
        assert "1 of 3 hosts failed: node3; stopped on: node1, node2" in r.stderr, r.stderr
        for h in hosts:
            assert not m.running_in(h), (h, m.running_in(h))
