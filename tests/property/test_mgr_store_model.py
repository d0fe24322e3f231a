"""The metadata store against an in-memory tree model (hypothesis state machine).

The model is a dict of inodes (type, link count, children by name, symlink target) plus open
counts; each rule predicts the errno (or success) of one store call and applies it. After
every step the whole tree is compared through paged readdir and getattr.
"""

from __future__ import annotations

import errno
import os

import hypothesis.strategies as st
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from pvfs.daemons.mgr.store import ROOT_INO, Cred, MetaStore
from pvfs.layout.stripe import Stripe

ROOT = Cred(0, 0)
NAMES = st.sampled_from(["a", "b", "c", "d"])
FLAGS = st.sampled_from([0, 0, 1, 2])


class Node:
    def __init__(self, kind: str, parent: int | None = None, target: str = "") -> None:
        self.kind, self.parent, self.target = kind, parent, target
        self.children: dict[str, int] = {}
        self.nlink = 2 if kind == "dir" else 1


class StoreModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.store = MetaStore(":memory:", 3, Stripe(0, -1, 4096))
        self.nodes: dict[int, Node] = {ROOT_INO: Node("dir", ROOT_INO)}
        self.opened: dict[int, int] = {}

    def teardown(self) -> None:
        self.store.close()

    # -- model helpers

    def dirs(self) -> list[int]:
        return sorted(i for i, n in self.nodes.items() if n.kind == "dir")

    def within(self, ino: int, ancestor: int) -> bool:
        while True:
            if ino == ancestor:
                return True
            if ino == ROOT_INO:
                return False
            ino = self.nodes[ino].parent  # type: ignore[assignment]

    def expect(self, code: int | None, fn, *args):
        """Run a store call; it must fail with ``code`` (or succeed when None)."""
        try:
            result = fn(*args)
        except OSError as exc:
            assert exc.errno == code, f"{fn.__name__}{args}: {exc!r}, model says {code}"
            return None
        assert code is None, f"{fn.__name__}{args} succeeded, model says {errno.errorcode[code]}"
        return result

    def drop(self, ino: int) -> bool:
        """One name of ``ino`` is gone; True if the store must hand its data back now."""
        n = self.nodes[ino]
        n.nlink -= 1
        if n.kind == "dir" or (n.kind == "symlink" and n.nlink == 0):
            del self.nodes[ino]
            return False
        return n.kind == "file" and n.nlink == 0 and not self.opened.get(ino)

    def reaped(self, attrs: dict | None, must: bool, ino: int | None) -> None:
        assert (attrs is not None) == must, (attrs, must)
        if attrs is not None:
            assert attrs["ino"] == ino and attrs["nlink"] == 0
            self.store.admin.remove_inode(ino)  # the server's second phase
            del self.nodes[ino]

    # -- rules

    @rule(data=st.data(), name=NAMES)
    def mkdir(self, data, name):
        p = data.draw(st.sampled_from(self.dirs()))
        code = errno.EEXIST if name in self.nodes[p].children else None
        a = self.expect(code, self.store.mkdir, p, name, 0o755, ROOT)
        if a:
            self.nodes[a["ino"]] = Node("dir", p)
            self.nodes[p].children[name] = a["ino"]
            self.nodes[p].nlink += 1

    @rule(data=st.data(), name=NAMES, excl=st.booleans())
    def create(self, data, name, excl):
        p = data.draw(st.sampled_from(self.dirs()))
        old = self.nodes[p].children.get(name)
        code = None
        if old is not None:
            code = errno.EEXIST if excl else errno.EISDIR if self.nodes[old].kind == "dir" else None
        r = self.expect(code, self.store.create, p, name, 0o644, ROOT, None, excl)
        if r:
            attrs, created = r
            assert created == (old is None)
            if created:
                self.nodes[attrs["ino"]] = Node("file", p)
                self.nodes[p].children[name] = attrs["ino"]
            else:
                assert attrs["ino"] == old

    @rule(data=st.data(), name=NAMES, dest=st.sampled_from(["a", "/b", "../c", "x/y"]))
    def symlink(self, data, name, dest):
        p = data.draw(st.sampled_from(self.dirs()))
        code = errno.EEXIST if name in self.nodes[p].children else None
        a = self.expect(code, self.store.symlink, p, name, dest, ROOT)
        if a:
            self.nodes[a["ino"]] = Node("symlink", p, dest)
            self.nodes[p].children[name] = a["ino"]
            assert self.store.readlink(a["ino"]) == dest

    @rule(data=st.data(), name=NAMES)
    def link(self, data, name):
        src = data.draw(st.sampled_from(sorted(i for i, n in self.nodes.items() if n.nlink)))
        p = data.draw(st.sampled_from(self.dirs()))
        code = None
        if name in self.nodes[p].children:
            code = errno.EEXIST
        elif self.nodes[src].kind == "dir":
            code = errno.EPERM
        if self.expect(code, self.store.link, src, p, name, ROOT):
            self.nodes[p].children[name] = src
            self.nodes[src].nlink += 1

    @rule(data=st.data(), name=NAMES)
    def unlink(self, data, name):
        p = data.draw(st.sampled_from(self.dirs()))
        ino = self.nodes[p].children.get(name)
        code = None
        if ino is None:
            code = errno.ENOENT
        elif self.nodes[ino].kind == "dir":
            code = errno.EISDIR
        try:
            attrs = self.store.unlink(p, name, ROOT)
        except OSError as exc:
            assert exc.errno == code, (exc, code)
            return
        assert code is None and ino is not None
        del self.nodes[p].children[name]
        self.reaped(attrs, self.drop(ino), ino)

    @rule(data=st.data(), name=NAMES)
    def rmdir(self, data, name):
        p = data.draw(st.sampled_from(self.dirs()))
        ino = self.nodes[p].children.get(name)
        code = None
        if ino is None:
            code = errno.ENOENT
        elif self.nodes[ino].kind != "dir":
            code = errno.ENOTDIR
        elif self.nodes[ino].children:
            code = errno.ENOTEMPTY
        try:
            self.store.rmdir(p, name, ROOT)
        except OSError as exc:
            assert exc.errno == code, (exc, code)
            return
        assert code is None and ino is not None
        del self.nodes[p].children[name]
        self.nodes[p].nlink -= 1
        self.drop(ino)

    @rule(data=st.data(), name=NAMES, new_name=NAMES, flags=FLAGS)
    def rename(self, data, name, new_name, flags):
        p = data.draw(st.sampled_from(self.dirs()))
        q = data.draw(st.sampled_from(self.dirs()))
        src, dst = self.nodes[p].children.get(name), self.nodes[q].children.get(new_name)
        code = self.rename_errno(p, q, src, dst, flags)
        try:
            attrs = self.store.rename(p, name, q, new_name, ROOT, flags)
        except OSError as exc:
            assert exc.errno == code, (exc, code)
            return
        assert code is None and src is not None
        if dst == src:
            assert attrs is None
            return
        sn = self.nodes[src]
        if flags == 2:
            assert dst is not None
            dn = self.nodes[dst]
            self.nodes[p].children[name], self.nodes[q].children[new_name] = dst, src
            if sn.kind == "dir":
                sn.parent = q
                self.nodes[p].nlink -= 1
                self.nodes[q].nlink += 1
            if dn.kind == "dir":
                dn.parent = p
                self.nodes[q].nlink -= 1
                self.nodes[p].nlink += 1
            assert attrs is None
            return
        must = False
        if dst is not None:
            if self.nodes[dst].kind == "dir":
                self.nodes[q].nlink -= 1
            must = self.drop(dst)
        del self.nodes[p].children[name]
        self.nodes[q].children[new_name] = src
        if sn.kind == "dir":
            sn.parent = q
            self.nodes[p].nlink -= 1
            self.nodes[q].nlink += 1
        self.reaped(attrs, must, dst)

    def rename_errno(self, p: int, q: int, src: int | None, dst: int | None,
                     flags: int) -> int | None:
        if src is None:
            return errno.ENOENT
        if dst is not None and flags == 1:
            return errno.EEXIST
        if dst is None and flags == 2:
            return errno.ENOENT
        sn, dn = self.nodes[src], None if dst is None else self.nodes[dst]
        if sn.kind == "dir" and self.within(q, src):
            return errno.EINVAL
        if dn is not None and dn.kind == "dir" and self.within(p, dst):  # type: ignore[arg-type]
            return errno.EINVAL if flags == 2 else errno.ENOTEMPTY
        if dn is None or dst == src or flags == 2:
            return None
        if sn.kind == "dir" and dn.kind != "dir":
            return errno.ENOTDIR
        if sn.kind != "dir" and dn.kind == "dir":
            return errno.EISDIR
        return errno.ENOTEMPTY if dn.kind == "dir" and dn.children else None

    def live_files(self) -> list[int]:
        return sorted(i for i, n in self.nodes.items() if n.kind == "file" and n.nlink)

    @precondition(lambda self: self.live_files())
    @rule(data=st.data())
    def open(self, data):
        ino = data.draw(st.sampled_from(self.live_files()))
        self.store.open(ino, os.O_RDWR, ROOT)
        self.opened[ino] = self.opened.get(ino, 0) + 1

    @precondition(lambda self: self.opened)
    @rule(data=st.data())
    def release(self, data):
        ino = data.draw(st.sampled_from(sorted(self.opened)))
        attrs = self.store.release(ino)
        self.opened[ino] -= 1
        if not self.opened[ino]:
            del self.opened[ino]
        self.reaped(attrs, not self.opened.get(ino) and self.nodes[ino].nlink == 0, ino)

    # -- invariants

    @invariant()
    def tree_matches(self):
        for ino, node in self.nodes.items():
            a = self.store.getattr(ino)
            assert (a["type"], a["nlink"]) == (node.kind, node.nlink), (ino, a, node.__dict__)
            assert self.store.nfile(ino) == self.opened.get(ino, 0)
            if node.kind != "dir":
                continue
            seen, cookie = {}, 0
            while page := self.store.readdir(ino, ROOT, cookie, 2):
                for name, attrs, _ in page:
                    assert name not in seen
                    seen[name] = attrs["ino"]
                cookie = page[-1][2]
            assert seen.pop(".") == ino and seen.pop("..") == node.parent
            assert seen == node.children

    @invariant()
    def counts_match(self):
        c = self.store.admin.counts()
        kinds = [n.kind for n in self.nodes.values()]
        assert (c["files"], c["dirs"], c["symlinks"]) == (
            kinds.count("file"), kinds.count("dir"), kinds.count("symlink"))


TestStoreModel = StoreModel.TestCase
TestStoreModel.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
