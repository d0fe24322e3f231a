"""The mount's directory attributes from its own changes' replies (fuse/dirattrs.py)."""

from __future__ import annotations

import time

from pvfs.fuse.dirattrs import DirAttrs


def test_a_reply_with_the_parent_is_held_for_the_ttl():
    d = DirAttrs(0.2)
    reply = {"ino": 7, "parent": {"ino": 1, "mtime_ns": 5}}
    d.learn(1, reply)
    assert "parent" not in reply  # the child's attributes stay the child's
    attrs, left = d.get(1)
    assert attrs == {"ino": 1, "mtime_ns": 5} and 0 < left <= 0.2
    time.sleep(0.25)
    assert d.get(1) is None and d.hits == 1


def test_a_reply_without_the_parent_forgets_what_was_held():
    d = DirAttrs(5)
    d.learn(1, {"parent": {"ino": 1}})
    d.learn(1, {})  # an older manager, or the directory was gone
    assert d.get(1) is None


def test_forget_and_no_ttl():
    d = DirAttrs(5)
    d.learn(1, {"parent": {"ino": 1}})
    d.learn(2, {"parent": {"ino": 2}})
    d.forget(1)
    assert d.get(1) is None and d.get(2) is not None
    d.forget_all()
    assert d.get(2) is None
    off = DirAttrs(0)  # attr_timeout=0: every getattr goes to the manager
    off.learn(1, {"parent": {"ino": 1}})
    assert off.get(1) is None
