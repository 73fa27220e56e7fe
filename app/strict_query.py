"""Unknown query parameters on the API are a 422, as unknown config keys are.

FastAPI ignores a query parameter a route does not declare, so a typo (`?max_point=100`)
silently does nothing and the client never learns why. Every API router gets this as a
dependency: it compares the request's parameter names with the ones the route (and its
dependencies) declare.
"""

from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.routing import APIRoute

from app.errors import Invalid, field_error

_DECLARED: dict[int, frozenset[str]] = {}


def _query_names(dependant: Any) -> set[str]:
    """The query parameters of a route's dependency tree (its own and its dependencies')."""
    names = {param.alias for param in dependant.query_params}
    for sub in dependant.dependencies:
        names |= _query_names(sub)
    return names


def _declared(route: APIRoute) -> frozenset[str]:
    names = _DECLARED.get(id(route))
    if names is None:
        names = frozenset(_query_names(route.dependant))
        _DECLARED[id(route)] = names
    return names


def reject_unknown_query(request: Request) -> None:
    route = request.scope.get("route")
    if not isinstance(route, APIRoute):
        return
    declared = _declared(route)
    unknown = [name for name in request.query_params if name not in declared]
    if unknown:
        takes = ", ".join(sorted(declared)) or "no query parameters"
        raise Invalid(
            [
                field_error(
                    ["query", name],
                    f"unknown query parameter; this route takes: {takes}",
                    request.query_params.get(name),
                    kind="extra_forbidden",
                )
                for name in unknown
            ]
        )
