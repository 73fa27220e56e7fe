"""The HTTP layer, found by what the code does rather than by file names, and each place outside
it that answers in HTTP terms: the checker behind tests/test_architecture.py's status-code rule.

The layer (`http_layer`):
- route modules: a module that makes a router or an app (fastapi's APIRouter or FastAPI,
  starlette's Router or Starlette), declares routes on one (`@router.get(...)`,
  `router.add_api_route(...)`, `app.include_router(...)`), or defines a route class (a
  subclass of fastapi's APIRoute: how its routes answer, as MLflow's shape does);
- error mappers: a module that installs exception handlers (`app.add_exception_handler`,
  `@app.exception_handler`): app/http_errors.py, the one mapping of domain errors;
- request dependencies: a module that the two above import (or that another dependency
  imports) and that declares one (`Depends(...)`, `Security(...)`).

What answers in HTTP terms (`http_answers`), every name resolved to what it stands for
(tests/import_graph.py: an alias, `import fastapi as fa`, a re-export through another module):
fastapi's or starlette's HTTPException (or WebSocketException) reached in any way; their
`status` constants (`status.HTTP_409_CONFLICT`); and a status code given to a response: a
response class called with one, `status_code=` passed one, `response.status_code = ...`. A
status code there is an int from 100 to 599, a `status` constant, an `http.HTTPStatus`
member, or a module-level name bound to one of those; a status a function was handed
(templating's `render(..., status_code=...)`) is its caller's, checked there.
"""

from __future__ import annotations

import ast

from tests.import_graph import Module, Tree

WEB = ("fastapi", "starlette")
ROUTER_CLASSES = frozenset(
    {
        "fastapi.APIRouter",
        "fastapi.routing.APIRouter",
        "fastapi.FastAPI",
        "fastapi.applications.FastAPI",
        "starlette.routing.Router",
        "starlette.applications.Starlette",
    }
)
ROUTE_CLASSES = frozenset({"fastapi.routing.APIRoute", "starlette.routing.Route"})
ROUTE_METHODS = frozenset(
    {"get", "post", "put", "patch", "delete", "head", "options", "trace", "api_route"}
    | {"route", "websocket", "api_websocket_route", "websocket_route"}
    | {"add_api_route", "add_route", "add_api_websocket_route", "add_websocket_route"}
    | {"include_router", "mount"}
)
HTTP_EXCEPTIONS = frozenset({"HTTPException", "WebSocketException"})
STATUS_PREFIXES = frozenset({"HTT", "WS_"})
RESPONSE_PACKAGES = frozenset({*WEB, "sse_starlette"})
HANDLER_METHODS = frozenset({"add_exception_handler", "exception_handler"})
DEPENDENCY_MARKERS = frozenset(
    {"fastapi.Depends", "fastapi.param_functions.Depends", "fastapi.Security"}
    | {"fastapi.params.Depends", "fastapi.param_functions.Security"}
)


def _web(name: str | None) -> bool:
    return name is not None and name.split(".")[0] in WEB


def is_http_exception(name: str | None) -> bool:
    return name is not None and _web(name) and name.rpartition(".")[2] in HTTP_EXCEPTIONS


def is_status_constant(name: str | None) -> bool:
    """fastapi.status.HTTP_404_NOT_FOUND, starlette.status.WS_1008_POLICY_VIOLATION, ..."""
    parts = (name or "").split(".")
    return (
        _web(name)
        and len(parts) >= 3
        and parts[-2] == "status"
        and parts[-1][:3] in STATUS_PREFIXES
    )


def _is_response_class(name: str | None) -> bool:
    return (
        name is not None and name.split(".")[0] in RESPONSE_PACKAGES and name.endswith("Response")
    )


class Layer:
    def __init__(self, tree: Tree) -> None:
        self.tree = tree
        self._calls_of: dict[str, list[tuple[ast.Call, str | None]]] = {}
        self.routers = self._router_names()
        self.route_modules = {n for n, m in tree.modules.items() if self._declares_routes(m)}
        self.error_mappers = {n for n, m in tree.modules.items() if self._maps_errors(m)}
        self.dependencies = self._dependency_modules(self.route_modules | self.error_mappers)

    @property
    def modules(self) -> set[str]:
        return self.route_modules | self.error_mappers | self.dependencies

    def _calls(self, module: Module) -> list[tuple[ast.Call, str | None]]:
        """The module's calls, each with what it calls (read once per module)."""
        if module.name not in self._calls_of:
            self._calls_of[module.name] = [
                (node, self.tree.qualify(module, node.func))
                for node in ast.walk(module.tree)
                if isinstance(node, ast.Call)
            ]
        return self._calls_of[module.name]

    def _router_names(self) -> set[str]:
        """Each name a router or app is bound to (`module.router`, `module.app`), a function's
        local `app = FastAPI()` included."""
        found = set()
        for module in self.tree.modules.values():
            for node in ast.walk(module.tree):
                if (
                    isinstance(node, ast.Assign | ast.AnnAssign)
                    and isinstance(node.value, ast.Call)
                    and self.tree.qualify(module, node.value.func) in ROUTER_CLASSES
                ):
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    found |= {f"{module.name}.{t.id}" for t in targets if isinstance(t, ast.Name)}
        return found

    def _is_router(self, module: Module, node: ast.expr) -> bool:
        if isinstance(node, ast.Name) and f"{module.name}.{node.id}" in self.routers:
            return True
        return self.tree.qualify(module, node) in self.routers

    def _declares_routes(self, module: Module) -> bool:
        for node in ast.walk(module.tree):
            if isinstance(node, ast.ClassDef) and any(
                self.tree.qualify(module, base) in ROUTE_CLASSES for base in node.bases
            ):
                return True
            if not isinstance(node, ast.Call):
                continue
            if self.tree.qualify(module, node.func) in ROUTER_CLASSES:
                return True
            func = node.func
            if (
                isinstance(func, ast.Attribute)
                and func.attr in ROUTE_METHODS
                and self._is_router(module, func.value)
            ):
                return True
        return False

    def _maps_errors(self, module: Module) -> bool:
        return any(
            isinstance(call.func, ast.Attribute) and call.func.attr in HANDLER_METHODS
            for call, _name in self._calls(module)
        )

    def _dependency_markers(self, module: Module) -> list[ast.Call]:
        return [call for call, name in self._calls(module) if name in DEPENDENCY_MARKERS]

    def _dependency_modules(self, start: set[str]) -> set[str]:
        """The modules whose functions the layer's `Depends(...)` name, and the modules it
        imports that declare a dependency of their own (`SessionDep = Annotated[Session,
        Depends(get_db)]`), until no more are found."""
        found: set[str] = set()
        todo = sorted(start)
        seen = set(todo)
        while todo:
            module = self.tree.modules[todo.pop()]
            named = set()
            for call in self._dependency_markers(module):
                given = [*call.args[:1], *(k.value for k in call.keywords if k.arg == "dependency")]
                for node in given:
                    owner = self.tree.owner(self.tree.qualify(module, node) or "")
                    if owner is not None:
                        named.add(owner)
            imported = {t for _l, t in self.tree.edges(module)}
            declaring = {t for t in imported if self._dependency_markers(self.tree.modules[t])}
            for target in sorted((named | declaring) - seen):
                seen.add(target)
                found.add(target)
                todo.append(target)
        return found - start


def _status_names(tree: Tree, module: Module) -> set[str]:
    """Names the file binds to a status code (`CONFLICT = 409`, `code = 404` in a function)
    or to a table of them (`STATUS = {"missing": 404}`)."""
    names: set[str] = set()
    assignments = [n for n in ast.walk(module.tree) if isinstance(n, ast.Assign)]
    grew = True
    while grew:  # a name bound to another such name
        grew = False
        for node in assignments:
            value = node.value
            table = (
                isinstance(value, ast.Dict)
                and value.values
                and all(_is_status(tree, module, v, names) for v in value.values)
            )
            if table or _is_status(tree, module, value, names):
                for target in node.targets:
                    if isinstance(target, ast.Name) and target.id not in names:
                        names.add(target.id)
                        grew = True
    return names


def _is_status(tree: Tree, module: Module, node: ast.expr, named: set[str]) -> bool:
    """Whether the expression is a status code, or picks one (`a or 404`, `STATUS[code]`,
    `STATUS.get(code, 400)`); a value it was handed is not one."""
    if isinstance(node, ast.Constant):
        return type(node.value) is int and 100 <= node.value <= 599
    if isinstance(node, ast.Name) and node.id in named:
        return True
    if isinstance(node, ast.Name | ast.Attribute):
        name = tree.qualify(module, node) or ""
        return is_status_constant(name) or name.startswith("http.HTTPStatus.")
    if isinstance(node, ast.BoolOp):
        return any(_is_status(tree, module, v, named) for v in node.values)
    if isinstance(node, ast.IfExp):
        return any(_is_status(tree, module, v, named) for v in (node.body, node.orelse))
    if isinstance(node, ast.Subscript):
        return _is_status(tree, module, node.value, named)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return node.func.attr == "get" and (
            _is_status(tree, module, node.func.value, named)
            or any(_is_status(tree, module, a, named) for a in node.args[1:])
        )
    return False


def http_answers(tree: Tree, module: Module) -> list[str]:
    """Each place ``module`` answers in HTTP terms, as 'line N: what'."""
    found: list[tuple[int, str]] = []
    named = _status_names(tree, module)
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Name | ast.Attribute) and not isinstance(
            getattr(node, "ctx", None), ast.Store
        ):
            name = tree.qualify(module, node)
            if is_http_exception(name) or is_status_constant(name):
                found.append((node.lineno, f"uses {name}"))
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                name = tree.canonical(f"{node.module}.{alias.name}") if node.module else None
                if is_http_exception(name) or is_status_constant(name):
                    found.append((node.lineno, f"imports {name}"))
        if isinstance(node, ast.Call):
            callee = tree.qualify(module, node.func)
            is_response = _is_response_class(callee) or (
                isinstance(node.func, ast.Attribute) and node.func.attr == "TemplateResponse"
            )
            if is_response and any(_is_status(tree, module, a, named) for a in node.args):
                found.append((node.lineno, f"a status code to {callee or 'TemplateResponse'}"))
            for keyword in node.keywords:
                if keyword.arg == "status_code" and _is_status(tree, module, keyword.value, named):
                    found.append((node.lineno, "status_code= a status code"))
        if isinstance(node, ast.Assign) and _is_status(tree, module, node.value, named):
            for target in node.targets:
                if isinstance(target, ast.Attribute) and target.attr == "status_code":
                    found.append((node.lineno, ".status_code = a status code"))
    return [f"line {line}: {what}" for line, what in sorted(set(found))]


def http_outside_the_layer(tree: Tree, layer: Layer | None = None) -> dict[str, list[str]]:
    inside = (layer or Layer(tree)).modules
    return {
        tree.relative(module): found
        for name, module in tree.modules.items()
        if name not in inside and (found := http_answers(tree, module))
    }
