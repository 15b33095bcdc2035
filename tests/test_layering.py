"""The house rules of docs/architecture.md ("Layers"), read from the package's source: no reaching into another
module's private names, no import cycles, and the compiled kernels (``_native``) import nothing above them.

Python modules are read with ``ast``; the Cython sources (``.pyx``, ``.pxd``) as text. The rules:

- **private reaches**: ``obj._name`` is another module's business unless ``obj`` is ``self``, ``cls`` or ``super()``,
  or ``_name`` is the module's own: defined in it (a ``def``/``class``, an assignment to it, an annotation, a
  ``__slots__`` entry) or in a base class of one of its classes (followed through bloomwise's modules; a compiled
  base brings the names of the whole ``_native`` package). So a mixin declares the hooks it calls, and a class may
  use its own kind's fields on another instance (``copy``, ``|=``). Attributes of modules and objects that are not
  bloomwise's (``sys._getframe``) and namedtuple's public ``_replace``/``_asdict``/``_fields``/``_make`` are out of
  scope. In ``_native``, a name defined anywhere in the compiled package counts as its own (the kernels are one
  unit, sharing their ``.pxd`` declarations).
- **private imports**: ``from bloomwise.x import _name`` where ``_name`` is not a module (a leading underscore on a
  module marks it internal to the package, and importing it is how the package uses it).
- **cycles**: module A imports B (at the top or in a function, ``import_module("bloomwise...")`` included) and B
  imports A, directly or through others. ``from bloomwise.p import m`` with ``m`` a submodule is an import of ``m``;
  of another name, an import of ``p``'s ``__init__``. Importing ``p.m`` from outside package ``p`` also runs
  ``p``'s ``__init__`` (an import of it too); from inside ``p`` it is already running.
- **the ground floor**: nothing in ``_native`` imports a bloomwise module outside ``_native``.

The allow-lists below are empty: an entry must say why it is there, and one that no longer matches anything fails
its own test, so the lists only shrink.
"""
from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "src" / "bloomwise"
SELF_NAMES = {"self", "cls"}
NAMEDTUPLE_API = {"_replace", "_asdict", "_fields", "_make", "_field_defaults"}

# (module, attribute): reaches into another module's private name, allowed for the reason given.
ALLOWED_REACHES: set = set()

# (module, imported name): imports of another module's private name, allowed for the reason given.
ALLOWED_PRIVATE_IMPORTS: set = set()

# (importer, imported): import edges allowed to close a cycle, for the reason given.
ALLOWED_CYCLE_EDGES: set = set()


# ---- reading the package ---------------------------------------------------------------------------------------------
def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def python_modules() -> dict[str, tuple[Path, ast.Module]]:
    return {module_name(path): (path, ast.parse(path.read_text(), str(path))) for path in sorted(PACKAGE.rglob("*.py"))}


def cython_sources() -> dict[str, str]:
    return {str(path.relative_to(PACKAGE.parent)): path.read_text()
            for ext in ("pyx", "pxd") for path in sorted((PACKAGE / "_native").glob(f"*.{ext}"))}


MODULES = python_modules()
KNOWN_MODULES = set(MODULES) | {module_name(p) for p in PACKAGE.rglob("*.pyx")}
NATIVE_NAMES: set = set()  # filled below, once the Cython reader is defined


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def defined_names(tree: ast.AST) -> set[str]:
    """Every name a module defines: functions, classes, assigned or annotated names and attributes, __slots__."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.attr)
        elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__slots__"
                                                   for t in node.targets):
            names.update(c.value for c in ast.walk(node.value) if isinstance(c, ast.Constant)
                         and isinstance(c.value, str))
    return names


def foreign_module_aliases(tree: ast.AST) -> set[str]:
    """Names bound to modules or objects imported from outside bloomwise (their private names are not ours)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update((a.asname or a.name).split(".")[0] for a in node.names if not a.name.startswith("bloomwise"))
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and not (node.module or "").startswith("bloomwise"):
            names.update(a.asname or a.name for a in node.names)
    return names


def imported_from(module: str, tree: ast.AST) -> dict[str, str]:
    """Local name -> the bloomwise module it was imported from (``from bloomwise.x import Name``)."""
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            source = resolve_from(module, node)
            if source.split(".")[0] == "bloomwise":
                out.update({alias.asname or alias.name: source for alias in node.names})
    return out


def inherited_names(module: str, tree: ast.AST, seen=None) -> set[str]:
    """The names defined by the base classes of the module's classes, through bloomwise's modules (a base from
    ``_native``: every name of the compiled package)."""
    seen = set() if seen is None else seen
    sources = imported_from(module, tree)
    names = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.ClassDef):
            continue
        for base in node.bases:
            source = sources.get(base.id) if isinstance(base, ast.Name) else None
            if source is None or source in seen:
                continue
            seen.add(source)
            if source.startswith("bloomwise._native"):
                names |= NATIVE_NAMES
            elif source in MODULES:
                base_tree = MODULES[source][1]
                names |= defined_names(base_tree) | inherited_names(source, base_tree, seen)
    return names


def private_reaches(name: str, tree: ast.AST) -> list[tuple[str, int]]:
    own = defined_names(tree) | inherited_names(name, tree) | NAMEDTUPLE_API
    foreign = foreign_module_aliases(tree)
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and is_private(node.attr)) or node.attr in own:
            continue
        base = node.value
        if isinstance(base, ast.Name) and (base.id in SELF_NAMES or base.id in foreign):
            continue
        if isinstance(base, ast.Call) and isinstance(base.func, ast.Name) and base.func.id == "super":
            continue
        found.append((node.attr, node.lineno))
    return found


def resolve_from(module: str, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    package = module.split(".") if (PACKAGE.parent / Path(*module.split(".")) / "__init__.py").exists() \
        else module.split(".")[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports_of(module: str, tree: ast.AST) -> list[tuple[str, str, int]]:
    """(imported bloomwise module, the name imported from it or "", line) for every import, function-level too."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, "", node.lineno) for a in node.names if a.name.split(".")[0] == "bloomwise"]
        elif isinstance(node, ast.ImportFrom):
            source = resolve_from(module, node)
            if source.split(".")[0] != "bloomwise":
                continue
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                out.append((submodule, "", node.lineno) if submodule in KNOWN_MODULES
                           else (source, alias.name, node.lineno))
        elif (isinstance(node, ast.Call) and isinstance(node.func, (ast.Name, ast.Attribute))
              and getattr(node.func, "id", getattr(node.func, "attr", None)) == "import_module"
              and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
              and node.args[0].value.startswith("bloomwise")):
            out.append((node.args[0].value, "", node.lineno))
    return out


def import_graph() -> dict[str, set[str]]:
    graph = {name: set() for name in MODULES}
    for name, (_, tree) in MODULES.items():
        for imported, _, _ in imports_of(name, tree):
            parts = imported.split(".")
            for depth in range(2, len(parts) + 1):  # the packages on the way run first (unless already running)
                target = ".".join(parts[:depth])
                inside = name == target or name.startswith(target + ".")
                if target in MODULES and target != name and (depth == len(parts) or not inside):
                    graph[name].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, stack, on_stack, result, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                result.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return result


# ---- the rules -------------------------------------------------------------------------------------------------------
def all_private_reaches() -> set[tuple[str, str]]:
    return {(name, attr) for name, (_, tree) in MODULES.items() for attr, _ in private_reaches(name, tree)}


def test_no_module_reaches_into_another_module_s_private_names():
    found = {}
    for name, (path, tree) in MODULES.items():
        for attr, line in private_reaches(name, tree):
            if (name, attr) not in ALLOWED_REACHES:
                found.setdefault((name, attr), f"{path.relative_to(PACKAGE.parent)}:{line}")
    assert not found, "private names reached from another module (give them a name in an internal interface):\n" + \
        "\n".join(f"  {where}: .{attr}" for (_, attr), where in sorted(found.items(), key=lambda item: item[1]))


def all_private_imports() -> dict[tuple[str, str], str]:
    found = {}
    for name, (path, tree) in MODULES.items():
        for source, imported, line in imports_of(name, tree):
            if is_private(imported) and source != name:
                found.setdefault((name, imported), f"{path.relative_to(PACKAGE.parent)}:{line} (from {source})")
    return found


def test_no_module_imports_another_module_s_private_names():
    found = {key: where for key, where in all_private_imports().items() if key not in ALLOWED_PRIVATE_IMPORTS}
    assert not found, "private names imported from another bloomwise module:\n" + \
        "\n".join(f"  {where}: {imported}" for (_, imported), where in sorted(found.items()))


def test_no_import_cycles_between_modules():
    graph = import_graph()
    for importer, imported in ALLOWED_CYCLE_EDGES:
        graph[importer].discard(imported)
    found = cycles(graph)
    assert not found, "import cycles (top-level and function-level imports):\n" + \
        "\n".join("  " + " <-> ".join(component) for component in found)


def package_of(module: str) -> str:
    """The unit a module belongs to: its subpackage of bloomwise (``bloomwise.cache``), or itself."""
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 2 or module in PACKAGES else module


PACKAGES = {name for name, (path, _) in MODULES.items() if path.name == "__init__.py"}


def test_no_import_cycles_between_packages():
    """The folders are the architecture: no two of them (cache, proxy, cli, web, reproduce, paradox, theory, ...) and
    no top-level module import each other."""
    graph: dict[str, set[str]] = {}
    for importer, imported in import_graph().items():
        unit = package_of(importer)
        graph.setdefault(unit, set())
        for target in imported:
            if package_of(target) != unit and (importer, target) not in ALLOWED_CYCLE_EDGES:
                graph[unit].add(package_of(target))
    for unit in list(graph.values()):
        for target in unit:
            graph.setdefault(target, set())
    found = cycles(graph)
    assert not found, "import cycles between packages:\n" + "\n".join("  " + " <-> ".join(c) for c in found)


NATIVE_IMPORT = re.compile(r"^\s*(?:from\s+(bloomwise(?:\.\w+)*)\s+c?import|c?import\s+(bloomwise(?:\.\w+)*))", re.M)
IMPORT_MODULE = re.compile(r"import_module\(\s*[\"'](bloomwise[\w.]*)")


def test_the_compiled_kernels_import_nothing_above_them():
    found = []
    sources = dict(cython_sources())
    sources.update({str(path.relative_to(PACKAGE.parent)): path.read_text()
                    for path in (PACKAGE / "_native").glob("*.py")})
    for where, text in sources.items():
        for match in list(NATIVE_IMPORT.finditer(text)) + list(IMPORT_MODULE.finditer(text)):
            imported = next(group for group in match.groups() if group)
            if imported != "bloomwise._native" and not imported.startswith("bloomwise._native."):
                found.append(f"{where}: {imported}")
    assert not found, "the compiled kernels import modules above them:\n" + "\n".join(found)


def native_defined_names(sources: dict[str, str]) -> set[str]:
    """The private names the compiled package defines (def, cdef, cpdef, class, assignments, declarations)."""
    own = set()
    for text in sources.values():
        for match in CYTHON_DEFINITION.finditer(text):
            own.update(group for group in match.groups() if group)
        own.update(re.findall(r"\b(_\w+)\b\s*(?:=|:)", text))
    return own


CYTHON_DEFINITION = re.compile(r"(?:\bdef|\bcdef|\bcpdef|\bclass)\s+(?:[\w\[\],* ]+\s+)?(_\w+)\s*[(:=\[]|"
                               r"^\s*(?:cdef\s+[\w* ]+\s+)?(_\w+)\s*(?:=|$)|\b(_\w+)\s*=", re.M)
CYTHON_ATTRIBUTE = re.compile(r"\b([A-Za-z_]\w*)\.(_[a-z]\w*)")
NATIVE_NAMES |= native_defined_names(cython_sources())


def test_the_compiled_kernels_reach_only_their_own_private_names():
    sources = cython_sources()
    found = []
    for where, text in sources.items():
        for number, line in enumerate(text.splitlines(), 1):
            code = line.split("#")[0]
            if re.match(r"\s*(>>> )?(from|import|cimport)\s", code):
                continue
            for obj, attr in CYTHON_ATTRIBUTE.findall(code):
                if obj != "bloomwise" and obj not in SELF_NAMES and attr not in NATIVE_NAMES and not (attr.startswith("__") and attr.endswith("__")):
                    found.append(f"{where}:{number}: {obj}.{attr}")
    assert not found, "the kernels read private names of modules above them:\n" + "\n".join(found)


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    """Every module ``start`` imports, directly or through others (an allowed cycle edge a -> b needs b to reach a,
    else it closes no cycle)."""
    seen, todo = set(), [start]
    while todo:
        for target in graph.get(todo.pop(), ()):
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


def test_allow_lists_have_no_stale_entries():
    """An entry whose violation is gone must go too (the lists only shrink)."""
    reaches = all_private_reaches()
    imports = set(all_private_imports())
    graph = import_graph()
    stale = [f"reach {key}" for key in ALLOWED_REACHES if key not in reaches]
    stale += [f"import {key}" for key in ALLOWED_PRIVATE_IMPORTS if key not in imports]
    stale += [f"cycle edge {key}" for key in ALLOWED_CYCLE_EDGES
              if key[1] not in graph.get(key[0], ()) or key[0] not in reachable(graph, key[1])]
    assert not stale, "allow-list entries that match nothing any more (delete them):\n" + "\n".join(stale)


@pytest.mark.parametrize("source, expected", [
    ("def f(other):\n    return other._payload()\n", [("_payload", 2)]),
    ("class A:\n    def f(self, other):\n        return self._x + other._x\n    def g(self):\n        self._x = 1\n", []),
    ("import sys\nsys._getframe()\n", []),
    ("from bloomwise import _format\n_format._read_payload\n", [("_read_payload", 2)]),
    ("class A:\n    __slots__ = ('_y',)\ndef f(a):\n    return a._y\n", []),
    ("def f(x):\n    return super()._z + x.__class__\n", []),
])
def test_the_reach_detector_detects(source, expected):
    assert private_reaches("bloomwise.example", ast.parse(source)) == expected


def test_the_cycle_detector_detects():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert reachable({"a": {"b"}, "b": {"c"}, "c": set(), "d": {"a"}}, "a") == {"b", "c"}
    assert cycles({"a": {"b"}, "b": set()}) == []
    tree = ast.parse("def later():\n    from bloomwise.cache import store\n    import bloomwise.theory\n"
                     "    importlib.import_module('bloomwise.plot')\n")
    assert sorted(source for source, _, _ in imports_of("bloomwise.x", tree)) == [
        "bloomwise.cache.store", "bloomwise.plot", "bloomwise.theory"]


# ---- function-level imports ------------------------------------------------------------------------------------------
def commented_lines(source: str) -> tuple[set[int], set[int]]:
    """(lines holding a comment, lines holding only a comment), read with tokenize."""
    with_comment, comment_only = set(), set()
    lines = source.splitlines()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            number = token.start[0]
            with_comment.add(number)
            if lines[number - 1].lstrip().startswith("#"):
                comment_only.add(number)
    return with_comment, comment_only


def uncommented_function_imports(module: str, source: str, tree: ast.AST) -> list[tuple[str, int]]:
    """(imported bloomwise module, line) of each import inside a function body that says nothing of why: no comment
    on its lines, nor on a comment line right above it or above the run of imports it continues."""
    with_comment, comment_only = commented_lines(source)
    imports = {}
    for function in ast.walk(tree):
        if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            imports.update({id(node): node for node in ast.walk(function)
                            if isinstance(node, (ast.Import, ast.ImportFrom))})
    found, run_ends = [], set()  # the last lines of the runs of imports under a comment line
    for node in sorted(imports.values(), key=lambda node: node.lineno):
        if node.lineno - 1 in comment_only | run_ends:
            run_ends.add(node.end_lineno)
            continue
        if any(line in with_comment for line in range(node.lineno, node.end_lineno + 1)):
            continue
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names if alias.name.split(".")[0] == "bloomwise"]
        else:
            source_module = resolve_from(module, node)
            targets = [source_module] if source_module.split(".")[0] == "bloomwise" else []
        if targets:
            found.append((targets[0], node.lineno))
    return found


def test_every_function_level_import_of_bloomwise_says_why():
    """An import of a bloomwise module inside a function hides an edge of the graph: it is at the top of the module
    unless it avoids an optional or heavy dependency (matplotlib, aiohttp, Dask; the cache system when a command
    only registers its options) or a real cycle, and then a comment says which."""
    found = []
    for name, (path, tree) in MODULES.items():
        for imported, line in uncommented_function_imports(name, path.read_text(), tree):
            found.append(f"  {path.relative_to(PACKAGE.parent)}:{line}: {imported}")
    assert not found, ("function-level imports of bloomwise modules without a comment saying why (move them to the "
                       "top, or say which dependency or cycle they avoid):\n" + "\n".join(found))


@pytest.mark.parametrize("source, expected", [
    ("def f():\n    from bloomwise.cache import store\n", [("bloomwise.cache", 2)]),
    ("def f():\n    import bloomwise.plot\n", [("bloomwise.plot", 2)]),
    ("async def f():\n    from . import units\n", [("bloomwise", 2)]),
    ("def f():\n    from bloomwise.cache import store  # heavy: numpy\n", []),
    ("def f():\n    # aiohttp, the web extra\n    from bloomwise.web import server\n", []),
    ("def f():\n    import json\n    from typing import Any\n", []),
    ("from bloomwise import units\nif True:\n    from bloomwise import theory\n", []),
    ("def f():\n    def g():\n        from bloomwise import theory\n", [("bloomwise", 3)]),
    ("def f():\n    import json  # stdlib\n    from bloomwise import theory\n", [("bloomwise", 3)]),
    ("def f():\n    # the web extra\n    import aiohttp\n    from bloomwise.web import server\n", []),
    ("def f():\n    # the web extra\n    import aiohttp\n\n    from bloomwise.web import server\n",
     [("bloomwise.web", 5)]),
])
def test_the_function_import_detector_detects(source, expected):
    assert uncommented_function_imports("bloomwise.example", source, ast.parse(source)) == expected
