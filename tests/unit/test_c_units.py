"""The C units of pvfs._native call in one direction (csrc/native.h, "Units"; issue 28).

Each csrc/*.c file is a unit. A unit depends on another when it names a non-static function
or object the other defines (a call, or a reference such as engine.c's use of opt1's ops
table). The units and those dependencies must form a DAG, and native.h's unit order must be
one of its topological orders: every unit names only units listed before it. Calls through
function pointers (a policy's ops) are not seen; they go from the engine down to sched.c.
"""

from __future__ import annotations

import re
from itertools import pairwise
from pathlib import Path

import pytest

CSRC = Path(__file__).resolve().parents[2] / "csrc"

_LEX = re.compile(
    r"""(?P<skip>/\*.*?\*/                      # comments
                |//[^\n]*
                |"(?:\\.|[^"\\\n])*"              # string and character literals
                |'(?:\\.|[^'\\\n])*'
                |^[ \t]*\#[^\n]*(?:\\\n[^\n]*)*)   # preprocessor lines, continued ones too
      |(?P<id>[A-Za-z_]\w*)
      |(?P<p>[{}()\[\];=,])""",
    re.DOTALL | re.MULTILINE | re.VERBOSE,
)
_KEYWORDS = {"if", "for", "while", "switch", "return", "sizeof", "__attribute__", "defined"}


def tokens(text: str) -> list[str]:
    """Identifiers and the punctuation that matters, without comments, literals and #lines."""
    return [m.group() for m in _LEX.finditer(text) if m.lastgroup != "skip"]


def _close(toks: list[str], i: int) -> int:
    """Index of the bracket that closes the one at toks[i]."""
    pair = {"(": ")", "[": "]", "{": "}"}[toks[i]]
    depth = 0
    for k in range(i, len(toks)):
        if toks[k] == toks[i]:
            depth += 1
        elif toks[k] == pair:
            depth -= 1
            if depth == 0:
                return k
    raise ValueError("unbalanced " + toks[i])


def _ident(t: str) -> bool:
    return t[0].isalpha() or t[0] == "_"


def definitions(toks: list[str]) -> tuple[set[str], set[str]]:
    """The functions and objects a unit defines at file scope: (non-static, static) names."""
    public: set[str] = set()
    private: set[str] = set()
    decl: list[str] = []                 # identifiers, and "()" "[]" "{}" for groups
    i = 0

    def define(name: str | None) -> None:
        if name is not None and "extern" not in decl and "typedef" not in decl:
            (private if "static" in decl else public).add(name)

    while i < len(toks):
        t = toks[i]
        if t in ("(", "[", "{"):
            j = _close(toks, i)
            if t == "{" and "()" in decl:
                # A function body: the name stands before the parameter list.
                define(decl[decl.index("()") - 1])
                decl = []
            else:
                decl.append(t + toks[j])
            i = j + 1
        elif t in ("=", ";"):
            if t == "=" or "()" not in decl:    # not a prototype
                # The declarator: the last name, after a struct or enum body if there is one.
                tail = decl[decl.index("{}") + 1:] if "{}" in decl else decl
                names = [x for x in tail if _ident(x)]
                forward = decl[:1] in (["struct"], ["union"], ["enum"]) and len(decl) == 2
                define(names[-1] if names and not forward else None)
            while t == "=" and toks[i] != ";":   # past the initializer
                i = _close(toks, i) + 1 if toks[i] in ("(", "[", "{") else i + 1
            decl = []
            i += 1
        else:
            if _ident(t):
                decl.append(t)
            i += 1
    return public, private


_DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+(\w+)((?:\\\n|[^\n])*)", re.MULTILINE)


def header_expansions(headers: list[str]) -> dict[str, set[str]]:
    """What a name of a header stands for: a macro's body, a static inline function's body."""
    out: dict[str, set[str]] = {}
    for text in headers:
        for m in _DEFINE.finditer(text):
            out.setdefault(m.group(1), set()).update(
                t for t in tokens(m.group(2)) if _ident(t))
        toks = tokens(text)
        for k, t in enumerate(toks):
            if t == "inline":
                name = toks[toks.index("(", k) - 1]
                body = toks.index("{", k)
                out.setdefault(name, set()).update(
                    x for x in toks[body:_close(toks, body)] if _ident(x))
    return out


def unit_graph(sources: dict[str, str],
               expand: dict[str, set[str]] | None = None) -> dict[str, dict[str, set[str]]]:
    """unit -> {unit it depends on -> the names it uses from there}. expand: what the
    headers' macros and inline functions stand for (their uses name what they name)."""
    expand = expand or {}
    toks = {unit: tokens(text) for unit, text in sources.items()}
    owner: dict[str, str] = {}
    private: dict[str, set[str]] = {}
    for unit, ts in toks.items():
        public, private[unit] = definitions(ts)
        for name in public:
            assert name not in owner, f"{name} defined in {owner[name]} and {unit}"
            owner[name] = unit
    graph: dict[str, dict[str, set[str]]] = {unit: {} for unit in sources}
    for unit, ts in toks.items():
        names, todo = set(), [t for t in ts if _ident(t)]
        while todo:
            t = todo.pop()
            if t not in names:
                names.add(t)
                todo.extend(expand.get(t, ()))
        for t in names - private[unit]:
            other = owner.get(t)
            if other is not None and other != unit:
                graph[unit].setdefault(other, set()).add(t)
    return graph


def find_cycle(graph: dict[str, dict[str, set[str]]]) -> list[str] | None:
    """A cycle of units (first unit repeated at the end), or None for a DAG."""
    state: dict[str, int] = {}          # 1: on the DFS path, 2: done
    path: list[str] = []

    def visit(u: str) -> list[str] | None:
        state[u] = 1
        path.append(u)
        for v in sorted(graph.get(u, {})):
            if state.get(v) == 1:
                return path[path.index(v):] + [v]
            if v not in state and (c := visit(v)) is not None:
                return c
        path.pop()
        state[u] = 2
        return None

    for u in sorted(graph):
        if u not in state and (c := visit(u)) is not None:
            return c
    return None


def documented_order(header: str) -> list[str]:
    """native.h's unit order: the *.c names that begin the lines of its "Units" block."""
    m = re.search(r"^ \* Units\b[^\n]*\n(?: \*[^\n]*\n)*?((?: \*   +\w+\.c\b[^\n]*\n)+)",
                  header, re.MULTILINE)
    assert m, "native.h has no 'Units' block"
    return re.findall(r"^ \*   +(\w+\.c)\b", m.group(1), re.MULTILINE)


def order_violations(graph: dict[str, dict[str, set[str]]], order: list[str]) -> list[str]:
    rank = {u: k for k, u in enumerate(order)}
    return [f"{u} -> {v} ({', '.join(sorted(names))})"
            for u, deps in sorted(graph.items()) for v, names in sorted(deps.items())
            if rank[v] >= rank[u]]


def csrc_graph() -> dict[str, dict[str, set[str]]]:
    headers = [p.read_text() for p in sorted(CSRC.glob("*.h"))]
    return unit_graph({p.name: p.read_text() for p in sorted(CSRC.glob("*.c"))},
                      header_expansions(headers))


def test_units_form_a_dag() -> None:
    graph = csrc_graph()
    cycle = find_cycle(graph)
    assert cycle is None, "units call each other in a cycle: " + " -> ".join(
        f"{a} [{', '.join(sorted(graph[a][b]))}]" for a, b in pairwise(cycle))


def test_native_h_lists_the_unit_order() -> None:
    graph = csrc_graph()
    order = documented_order((CSRC / "native.h").read_text())
    assert sorted(order) == sorted(graph), "native.h's unit order must list every csrc/*.c once"
    assert order_violations(graph, order) == []


def test_the_parser_sees_the_calls() -> None:
    """Known uses across units are found (else the tests above prove nothing)."""
    graph = csrc_graph()
    assert "pv_serve_job" in graph["engine.c"]["stream.c"]
    assert "pv_conn_serve" in graph["engine.c"]["conn.c"]
    assert "pv_sched_opt1" in graph["engine.c"]["sched.c"]          # an object, not a call
    assert "pv_disk_write" in graph["stream.c"]["writeback.c"]
    assert "pv_err_set" in graph["disk.c"]["err.c"]                 # through pv_misuse()
    assert "pv_raise" in graph["module.c"]["pyerr.c"]


SYNTHETIC = {
    "a.c": """
        #include "x.h"
        static int helper(void) { return b_two(); }   /* a calls b */
        int a_one(int x) { return helper() + x; }
        const struct ops a_ops = { .f = a_one };
        """,
    "b.c": """
        int b_two(void) { return c_three("a_one()"); }   // a string names nothing
        """,
    "c.c": """
        static int b_two;                 /* a static of its own, not b's */
        int c_three(const char *s) { (void)s; return CALL(b_two); }
        """,
}


def test_a_cycle_is_found() -> None:
    graph = unit_graph(SYNTHETIC, header_expansions(["#define CALL(x) a_ops.f(x)\n"]))
    assert graph == {"a.c": {"b.c": {"b_two"}}, "b.c": {"c.c": {"c_three"}},
                     "c.c": {"a.c": {"a_ops"}}}
    assert find_cycle(graph) == ["a.c", "b.c", "c.c", "a.c"]
    assert order_violations(graph, ["c.c", "b.c", "a.c"]) == ["c.c -> a.c (a_ops)"]
    assert find_cycle(unit_graph(SYNTHETIC)) is None        # without the macro: no cycle
    assert order_violations(unit_graph(SYNTHETIC), ["c.c", "b.c", "a.c"]) == []


@pytest.mark.parametrize("unit", sorted(p.name for p in CSRC.glob("*.[ch]")))
def test_every_file_parses(unit: str) -> None:
    toks = tokens((CSRC / unit).read_text())
    for a, b in ("()", "[]", "{}"):
        assert toks.count(a) == toks.count(b), f"{unit}: {a}{b} unbalanced"
