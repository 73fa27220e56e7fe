"""The import graph of a source tree, read from the source (no module is imported), and what a
name in it stands for: the checker under tests/test_architecture.py.

What counts as an import, so that no way of loading a module gets past the rules: `import` and
`from ... import` at any depth in a file (a function's, or `if TYPE_CHECKING:`, alike),
relative ones resolved against the file's package, and `importlib.import_module(...)`,
`__import__(...)` or `runpy.run_module(...)` with a constant string, whatever name the function
was imported under. A dynamic import whose name is not a constant is listed apart
(`Tree.unnamed_imports`): the graph cannot know it, so the rules allow it only where a
test names it.

The edges are Python's own: importing `a.b.c` from outside `a` runs `a/__init__.py` and
`a/b/__init__.py` first, so the module depends on those too; a module inside `a.b` started
after them and does not, unless it takes a name that `a.b`'s `__init__` defines
(`from a.b import helper`). `from a.b import c` where `c` is a module depends on `a.b.c`.
"""

from __future__ import annotations

import ast
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from textwrap import dedent

JOB_PACKAGE = "torchyard"  # what runs inside a job
JOB_LIBRARIES = frozenset({"numpy", "torch", JOB_PACKAGE})
# The wheel's other parts under the same name, which never run inside a job: the client CLI
# (it installs without the server) and the composition root (the only importer of both app and
# worker). The job's modules never import them.
OUTSIDE_THE_JOB = ("torchyard.cli", "torchyard.compose")
DYNAMIC_IMPORTERS = frozenset(
    {"importlib.import_module", "builtins.__import__", "__import__", "runpy.run_module"}
)


@dataclass(frozen=True)
class Import:
    line: int
    module: str  # absolute: what `import` names, or the `from` part of `from m import n`
    names: tuple[str, ...] = ()  # what `from m import ...` takes (a module or a name in m)
    dynamic: bool = False

    @property
    def candidates(self) -> list[str]:
        """Every module the import may load: m, and m.n for each n it takes (`from .. import
        worker` at the top of a package: worker)."""
        return [self.module, *(f"{self.module}.{n}".lstrip(".") for n in self.names)]


@dataclass
class Module:
    name: str
    path: Path
    package: bool  # an __init__.py
    tree: ast.Module
    bindings: dict[str, str] = field(default_factory=dict)  # name -> qualified name
    imports: list[Import] = field(default_factory=list)
    unnamed: list[int] = field(default_factory=list)  # lines of non-constant dynamic imports

    @property
    def home(self) -> str:
        """The package a relative import starts from."""
        return self.name if self.package else self.name.rpartition(".")[0]


def first_party_packages(root: Path) -> list[str]:
    """The repository's top-level packages (a folder with an __init__.py), but the tests': a
    package added later is checked without a change here."""
    return sorted(
        p.name for p in root.iterdir() if (p / "__init__.py").is_file() and p.name != "tests"
    )


def is_in(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def is_stdlib(module: str) -> bool:
    return module.split(".")[0] in sys.stdlib_module_names


class Tree:
    """Every module of ``packages`` under ``root``, parsed once."""

    def __init__(self, root: Path, packages: list[str] | None = None) -> None:
        self.root = root
        self.packages = packages if packages is not None else first_party_packages(root)
        self.modules: dict[str, Module] = {}
        for package in self.packages:
            for path in sorted((root / package).rglob("*.py")):
                parts = list(path.relative_to(root).with_suffix("").parts)
                is_package = parts[-1] == "__init__"
                name = ".".join(parts[:-1] if is_package else parts)
                tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
                self.modules[name] = Module(name, path, is_package, tree)
        for module in self.modules.values():
            _read_imports(module)

    def relative(self, module: Module) -> str:
        return module.path.relative_to(self.root).as_posix()

    def in_package(self, package: str) -> list[Module]:
        return [m for name, m in self.modules.items() if is_in(name, package)]

    def owner(self, name: str) -> str | None:
        """The longest first-party module that `name` is or is inside of."""
        while name and name not in self.modules:
            name = name.rpartition(".")[0]
        return name or None

    def qualify(self, module: Module, node: ast.expr) -> str | None:
        """What `node` (a name or an attribute chain) stands for in ``module``, by its
        canonical name: an alias, a module-level rename or a re-export through another
        first-party module followed to where the thing is defined (`fastapi.HTTPException`
        however it was reached); None for a local value."""
        if isinstance(node, ast.Name):
            found = module.bindings.get(node.id)
            return self.canonical(found) if found else None
        if isinstance(node, ast.Attribute):
            base = self.qualify(module, node.value)
            return self.canonical(f"{base}.{node.attr}") if base else None
        return None

    def canonical(self, name: str, depth: int = 0) -> str:
        owner = self.owner(name)
        if owner is None or owner == name or depth > 20:
            return name
        first, _, rest = name[len(owner) + 1 :].partition(".")
        target = self.modules[owner].bindings.get(first)
        if target is None or target == name:
            return name
        return self.canonical(f"{target}.{rest}" if rest else target, depth + 1)

    def named(self, imp: Import) -> list[str]:
        """The modules an import names: `from m import n` names m.n when that is a module,
        else m (n is a name m defines)."""
        if not imp.names:
            return [imp.module]
        found = [f"{imp.module}.{n}" for n in imp.names if f"{imp.module}.{n}" in self.modules]
        if len(found) < len(imp.names):
            found.append(imp.module)
        return found

    def edges(self, module: Module) -> Iterator[tuple[int, str]]:
        """(line, first-party module) for each module that ``module`` makes Python run, or
        takes a name from."""
        for imp in module.imports:
            for named in self.named(imp):
                owner = self.owner(named)
                if owner is None:
                    continue
                parts = owner.split(".")
                for i in range(1, len(parts) + 1):
                    target = ".".join(parts[:i])
                    started = is_in(module.name, target)  # a package ``module`` is inside of
                    if target != module.name and (not started or target == owner):
                        yield imp.line, target

    def graph(self) -> dict[str, set[str]]:
        return {name: {t for _l, t in self.edges(m)} for name, m in self.modules.items()}


def constant_text(node: ast.expr) -> str | None:
    """A string the expression always is: a literal, literals joined by + or an f-string of
    literals."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = constant_text(node.left), constant_text(node.right)
        return left + right if left is not None and right is not None else None
    if isinstance(node, ast.JoinedStr):
        parts = [constant_text(v) for v in node.values]
        return "".join(p for p in parts if p is not None) if None not in parts else None
    return None


def _absolute(module: Module, level: int, name: str | None) -> str:
    if not level:
        return name or ""
    base = module.home.split(".")
    base = base[: len(base) - (level - 1)]
    return ".".join([*base, *([name] if name else [])])


def _read_imports(module: Module) -> None:
    """The module's import statements and the names they bind (any depth), then the dynamic
    imports (which need the bindings: `from importlib import import_module as load`)."""
    calls: list[ast.Call] = []
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                module.imports.append(Import(node.lineno, alias.name))
                if alias.asname:
                    module.bindings[alias.asname] = alias.name
                else:
                    top = alias.name.split(".")[0]
                    module.bindings[top] = top
        elif isinstance(node, ast.ImportFrom):
            source = _absolute(module, node.level, node.module)
            names = tuple(alias.name for alias in node.names)
            module.imports.append(Import(node.lineno, source, names))
            for alias in node.names:
                if alias.name != "*":
                    module.bindings[alias.asname or alias.name] = f"{source}.{alias.name}"
        elif isinstance(node, ast.Call):
            calls.append(node)
    for statement in _top_level(module.tree.body):  # module-level renames: E = HTTPException
        if (
            isinstance(statement, ast.Assign)
            and isinstance(statement.value, ast.Name | ast.Attribute)
            and (target := _qualified_in(module, statement.value))
        ):
            for name in statement.targets:
                if isinstance(name, ast.Name):
                    module.bindings.setdefault(name.id, target)
    for call in calls:
        function = _qualified_in(module, call.func)
        if function is None and isinstance(call.func, ast.Name) and call.func.id == "__import__":
            function = "__import__"
        if function not in DYNAMIC_IMPORTERS or not call.args:
            continue
        text = constant_text(call.args[0])
        if text is None:
            module.unnamed.append(call.lineno)
            continue
        if text.startswith(".") and function == "importlib.import_module":
            level = len(text) - len(text.lstrip("."))
            text = _absolute(module, level, text.lstrip(".") or None)
        module.imports.append(Import(call.lineno, text, dynamic=True))


def _qualified_in(module: Module, node: ast.expr) -> str | None:
    """qualify() within one module, before the tree is complete (no re-exports followed)."""
    if isinstance(node, ast.Name):
        return module.bindings.get(node.id)
    if isinstance(node, ast.Attribute):
        base = _qualified_in(module, node.value)
        return f"{base}.{node.attr}" if base else None
    return None


def _top_level(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The module's own statements, those under a top-level if/try included."""
    for statement in body:
        yield statement
        if isinstance(statement, ast.If | ast.Try):
            for block in ("body", "orelse", "finalbody"):
                yield from _top_level(getattr(statement, block, []))
            for handler in getattr(statement, "handlers", []):
                yield from _top_level(handler.body)


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (its modules in order, the first again at the end) per group of modules that
    import each other (a strongly connected component), in name order; [] when there is none."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []

    def connect(node: str) -> None:  # Tarjan's algorithm
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for dep in sorted(graph.get(node, ())):
            if dep not in index:
                connect(dep)
                low[node] = min(low[node], low[dep])
            elif dep in on_stack:
                low[node] = min(low[node], index[dep])
        if low[node] == index[node]:
            group = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.add(member)
                if member == node:
                    break
            if len(group) > 1 or node in graph.get(node, ()):
                groups.append(group)

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * len(graph) + 1000))
    try:
        for node in sorted(graph):
            if node not in index:
                connect(node)
    finally:
        sys.setrecursionlimit(limit)
    return sorted((_cycle_through(graph, group) for group in groups), key=lambda c: c[0])


def _cycle_through(graph: dict[str, set[str]], group: set[str]) -> list[str]:
    """A shortest way from the group's first module back to itself, inside the group."""
    start = min(group)
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for dep in sorted(graph[node] & group):
                if dep == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [*reversed(path), start]
                if dep not in came_from:
                    came_from[dep] = node
                    following.append(dep)
        frontier = following
    raise AssertionError(f"no cycle through {sorted(group)}")


# --- the rules, as functions of a tree (tests/test_architecture.py runs them) -----------


def source_tree(root: Path, files: dict[str, str]) -> Tree:
    """A tree of the given files (path -> source) under ``root``, every folder a package."""
    for relative, text in files.items():
        path = root / relative
        for folder in reversed(path.relative_to(root).parents):
            if folder != Path("."):
                (root / folder).mkdir(exist_ok=True)
                (root / folder / "__init__.py").touch()
        path.write_text(dedent(text))
    return Tree(root)


def imports_of(tree: Tree, package: str, forbidden: str) -> list[str]:
    """Each import in ``package`` that may load ``forbidden``, as 'file:line: module'."""
    return [
        f"{tree.relative(module)}:{imp.line}: {imp.module or imp.candidates[-1]}"
        for module in tree.in_package(package)
        for imp in module.imports
        if any(is_in(name, forbidden) for name in imp.candidates)
    ]


def plugins(root: Path) -> dict[str, str]:
    """Module -> the library that loads it through an entry point (pyproject.toml)."""
    pyproject = root / "pyproject.toml"
    if not pyproject.is_file():
        return {}
    groups = tomllib.loads(pyproject.read_text())["project"].get("entry-points", {})
    return {
        value.partition(":")[0]: group.split(".")[0]
        for group, entries in groups.items()
        for value in entries.values()
    }


def job_imports_outside(tree: Tree) -> list[str]:
    """Each import of the job's package that is not of a library a job has."""
    loaded_by = plugins(tree.root)
    found = []
    for module in tree.in_package(JOB_PACKAGE):
        if any(is_in(module.name, part) for part in OUTSIDE_THE_JOB):
            continue
        allowed = JOB_LIBRARIES | {loaded_by.get(module.name, JOB_PACKAGE)}
        for imp in module.imports:
            name = imp.module or imp.candidates[-1]
            outside = any(is_in(c, part) for c in imp.candidates for part in OUTSIDE_THE_JOB)
            if outside or (not is_stdlib(name) and name.split(".")[0] not in allowed):
                found.append(f"{tree.relative(module)}:{imp.line}: {name}")
    return found


def import_cycles(tree: Tree) -> list[str]:
    return [" -> ".join(cycle) for cycle in cycles(tree.graph())]


def unnamed_imports(tree: Tree, allowed: dict[str, str]) -> list[str]:
    return [
        f"{tree.relative(module)}:{line}"
        for name, module in tree.modules.items()
        if name not in allowed
        for line in module.unnamed
    ]
