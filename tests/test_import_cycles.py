"""No import circles in bench/ or report/: each module stands above the modules it imports.

The graph is read statically (ast) from every import statement of every module, at module
level and inside functions alike: an import moved into a function still ties the two modules
together, so it does not resolve a circle. Importing ``a.b.c`` also runs ``a`` and ``a.b``
(their ``__init__``), so those count as imported too.
"""
import ast

from tests.helpers import REPO

PACKAGES = ("bench", "report")


def modules() -> dict[str, object]:
    """{dotted module name: path} for every module of the packages, benchmark files included."""
    out = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            parts = path.relative_to(REPO).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def _imported(node, here: str, is_package: bool, known) -> set[str]:
    """The project modules one import statement names (with the packages above them)."""
    targets = []
    if isinstance(node, ast.Import):
        targets = [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
            anchor = here.split(".")
            anchor = anchor[:len(anchor) - node.level + (1 if is_package else 0)]
            base = ".".join(anchor + ([base] if base else []))
        for alias in node.names:
            sub = f"{base}.{alias.name}"
            targets.append(sub if sub in known else base)
    out = set()
    for name in targets:
        parts = name.split(".")
        for i in range(1, len(parts) + 1):
            prefix = ".".join(parts[:i])
            if prefix in known:
                out.add(prefix)
    return out


def graph() -> dict[str, set[str]]:
    known = modules()
    edges = {}
    for name, path in known.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        is_package = path.name == "__init__.py"
        deps = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                deps |= _imported(node, name, is_package, known)
        # a module's own packages are run before it: not an edge of its own making
        edges[name] = {d for d in deps if d != name and not name.startswith(d + ".")}
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """One circle (a -> b -> ... -> a) for each strongly connected group of modules (Tarjan)."""
    index, low, stack, on, groups = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(group)

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return [_circle(sorted(g), edges) for g in groups]


def _circle(group: list[str], edges) -> list[str]:
    """A shortest path from the group's first module back to itself, inside the group."""
    start, members = group[0], set(group)
    paths, seen = [[start]], {start}
    while paths:
        nxt = []
        for path in paths:
            for w in sorted(edges[path[-1]] & members):
                if w == start:
                    return path + [start]
                if w not in seen:
                    seen.add(w)
                    nxt.append(path + [w])
        paths = nxt
    return group


def test_the_graph_sees_the_project():
    edges = graph()
    assert "bench.cells.matrix" in edges["bench.fit.cells"] and "bench.fit.answer" in edges["bench.cli"]
    assert "bench.worker.sim.simulate" in edges["bench.worker.sim.server"]
    assert "report.claims" in edges["report.build"]


def test_the_check_finds_a_circle_with_a_function_level_import():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(edges) == [["a", "b", "c", "a"]]
    tree = ast.parse("def f():\n    from bench.cells import matrix\n")
    node = tree.body[0].body[0]
    assert _imported(node, "x", False, modules()) == {"bench", "bench.cells", "bench.cells.matrix"}


def test_no_import_circles():
    found = cycles(graph())
    assert not found, "import circles:\n" + "\n".join(" -> ".join(c) for c in found)
