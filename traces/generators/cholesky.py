"""Out-of-core sparse Cholesky factorisation by supernodal panels.

The Cholesky trace of the discretionary-caching paper (Vilayannur et al., §5) comes from a
sparse Cholesky code that stores the factor as panels (supernodes) and uses synchronous reads
and writes. This generator builds a random sparse structure the way a symbolic factorisation
would see it:

- an elimination tree of supernodes, numbered in postorder (children before parents), grown
  by random splits so that it looks like a nested-dissection tree;
- each supernode J has ``cols(J)`` columns and a row structure ``struct(J)``: the ancestors its
  off-diagonal rows fall in. The parent is always there and every other member is inherited
  from the parent's structure (each kept with probability ``keep``), which is exactly the
  containment rule of symbolic Cholesky (struct(J) \\ {parent} ⊆ struct(parent));
- panel J stores ``rows(J) × cols(J)`` elements, ``rows(J) = cols(J) + Σ cols(a), a ∈ struct(J)``.

Left-looking factorisation: for each panel J in postorder, read J's entries of A (the input
file), read every factored panel K that updates J (J ∈ struct(K)), write J to the factor file.
Each panel is written once and read by the panels it updates, |struct(K)| times. Parallel
form: panels of equal height in the tree are independent; they are dealt cyclically to the
processes and heights are separated by barriers.
"""

from __future__ import annotations

import random
from typing import Any

from pvfs.traces.format import Flag, Trace
from pvfs.traces.generators._build import TraceBuilder, chunked, resolve_params

DEFAULTS: dict[str, Any] = {
    "panels": 64,
    "cols_min": 8,
    "cols_max": 32,
    "keep": 0.5,
    "elem": 8,
    "req": 0,
    "think": 0.0,
}


class Structure:
    """A supernodal elimination tree in postorder.

    Attributes:
        parent: parent panel of each panel (-1 for a root).
        cols: columns per panel.
        struct: ancestors each panel updates (its off-diagonal row blocks), nearest first.
        rows: stored rows per panel.
        height: 0 for leaves, 1 + the largest child height otherwise.
    """

    def __init__(self, parent: list[int], cols: list[int], struct: list[list[int]]) -> None:
        self.parent = parent
        self.cols = cols
        self.struct = struct
        self.rows = [c + sum(cols[a] for a in s) for c, s in zip(cols, struct, strict=True)]
        self.height = [0] * len(parent)
        for j, par in enumerate(parent):  # postorder: children come first
            if par >= 0:
                self.height[par] = max(self.height[par], self.height[j] + 1)

    def updaters(self) -> list[list[int]]:
        """For each panel J the panels K with J in struct(K), in postorder."""
        out: list[list[int]] = [[] for _ in self.parent]
        for k, s in enumerate(self.struct):
            for j in s:
                out[j].append(k)
        return out


def make_structure(panels: int, cols_min: int, cols_max: int, keep: float,
                   rng: random.Random) -> Structure:
    """A random supernodal structure with ``panels`` panels (see the module docstring)."""
    parent = [-1] * panels
    children: list[list[int]] = [[] for _ in range(panels)]
    counter = [0]

    def grow(size: int) -> int:
        # Children's subtrees first, then the root of this subtree: postorder numbering.
        rest = size - 1
        kids = []
        while rest > 0:
            if kids or rest == 1 or rng.random() < 0.2:
                part = rest  # the last child takes the rest; sometimes a chain
            else:
                part = rng.randint(1, rest - 1)
            kids.append(grow(part))
            rest -= part
        me = counter[0]
        counter[0] += 1
        for kid in kids:
            parent[kid] = me
            children[me].append(kid)
        return me

    grow(panels)
    cols = [rng.randint(cols_min, cols_max) for _ in range(panels)]
    struct: list[list[int]] = [[] for _ in range(panels)]
    for j in range(panels - 1, -1, -1):  # parents before children
        par = parent[j]
        if par >= 0:
            struct[j] = [par] + [a for a in struct[par] if rng.random() < keep]
    return Structure(parent, cols, struct)


def cholesky(nprocs: int, params: dict[str, Any] | None = None, seed: int = 0) -> Trace:
    """Supernodal left-looking sparse Cholesky over panels in elimination-tree postorder.

    Models the Cholesky trace of Vilayannur et al. (discretionary caching, §5): the sparse
    factor stored as panels, each written once and read by every panel it updates.

    Raises:
        ValueError: for bad structure parameters.
    """
    p = resolve_params(DEFAULTS, params)
    if p["panels"] < 1 or not 1 <= p["cols_min"] <= p["cols_max"] or not 0 <= p["keep"] <= 1:
        raise ValueError("need panels >= 1, 1 <= cols_min <= cols_max, 0 <= keep <= 1")
    rng = random.Random(seed)
    st = make_structure(p["panels"], p["cols_min"], p["cols_max"], p["keep"], rng)
    sizes = [r * c * p["elem"] for r, c in zip(st.rows, st.cols, strict=True)]
    offsets = [0]
    for s in sizes[:-1]:
        offsets.append(offsets[-1] + s)
    total = offsets[-1] + sizes[-1]
    b = TraceBuilder(nprocs, "cholesky", p, seed)
    fa = b.file("cholesky/A", total)
    fl = b.file("cholesky/L")
    b.open_all(fa, Flag.RD)
    b.open_all(fl)
    updaters = st.updaters()
    for h in range(max(st.height) + 1):
        level = [j for j in range(p["panels"]) if st.height[j] == h]
        b.barrier(f"cholesky height {h}")
        for i, j in enumerate(level):
            rank = i % nprocs
            for o, n in chunked(offsets[j], sizes[j], p["req"]):
                b.read(rank, fa, o, n)
            for k in updaters[j]:
                for c, (o, n) in enumerate(chunked(offsets[k], sizes[k], p["req"])):
                    b.read(rank, fl, o, n, p["think"] if c == 0 else 0.0)
            for o, n in chunked(offsets[j], sizes[j], p["req"]):
                b.write(rank, fl, o, n)
    b.barrier("teardown")
    b.close_all(fa)
    b.close_all(fl)
    return b.build()
