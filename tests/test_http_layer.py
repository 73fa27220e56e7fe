"""The HTTP layer's checker (tests/http_layer.py) on small source trees: the layer is what
declares routes, maps errors or provides request dependencies, whatever the files are called,
and a module outside it answering in HTTP terms fails however it reaches them."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.http_layer import Layer, http_outside_the_layer
from tests.import_graph import source_tree

ROUTES = """
    import fastapi as fa
    from fastapi import HTTPException

    router = fa.APIRouter()
"""


@pytest.mark.parametrize(
    "service",
    [
        "import fastapi as fa\n\ndef f():\n    raise fa.HTTPException(409)\n",
        "from starlette.exceptions import HTTPException as E\n\ndef f():\n    raise E(409)\n",
        "from app.web.routes import HTTPException\n",  # a re-export through a route module
        "import app.web.routes as w\n\ndef f():\n    raise w.HTTPException(404)\n",
        "from fastapi.responses import JSONResponse\n\ndef f():\n"
        "    return JSONResponse({'a': 1}, status_code=409)\n",
        "from fastapi import Response, status\n\ndef f():\n"
        "    return Response(status_code=status.HTTP_409_CONFLICT)\n",
        "from starlette.status import HTTP_404_NOT_FOUND\n",
        "import starlette.responses as r\nCONFLICT = 409\n\ndef f():\n"
        "    return r.PlainTextResponse('no', CONFLICT)\n",
        "from http import HTTPStatus\n\ndef f(response):\n"
        "    response.status_code = HTTPStatus.CONFLICT\n",
    ],
)
@pytest.mark.parametrize("name", ["app/svc/service.py", "app/svc/api.py"])
def test_a_module_declaring_no_routes_answering_in_http_fails(
    tmp_path: Path, service: str, name: str
) -> None:
    """A route-less module is outside the layer, whatever its file is called."""
    tree = source_tree(tmp_path, {"app/web/routes.py": ROUTES, name: service})
    assert list(http_outside_the_layer(tree)) == [name]


def test_the_http_layer_is_what_declares_routes(tmp_path: Path) -> None:
    files = {
        "app/web/routes.py": ROUTES,
        "app/web/handlers.py": """
            from fastapi import status
            from app.web.routes import router
            from app.web.guard import Guard

            @router.post("/x", status_code=status.HTTP_201_CREATED)
            def create(guard: Guard) -> None: ...
        """,
        "app/web/guard.py": """
            from typing import Annotated
            from fastapi import Depends, HTTPException
            from app.web.checks import check

            def guard() -> None:
                raise HTTPException(403)

            Guard = Annotated[None, Depends(guard), Depends(check)]
        """,
        "app/web/checks.py": "from fastapi import HTTPException\n\ndef check(): ...\n",
        "app/web/route_class.py": "from fastapi.routing import APIRoute as R\n\nclass C(R): ...\n",
        "app/web/mapping.py": """
            from fastapi import FastAPI
            from fastapi.responses import JSONResponse

            def install(app: FastAPI) -> None:
                app.add_exception_handler(ValueError, lambda r, e: JSONResponse({}, 422))
        """,
        "app/web/senders.py": """
            import http.client

            def post(connection):
                try:
                    response = connection.getresponse()
                except http.client.HTTPException:
                    return None
                return response.status_code >= 400  # reading a status is a client's business
        """,
        "app/web/render.py": """
            from fastapi.templating import Jinja2Templates
            templates = Jinja2Templates(directory=".")

            def render(request, name, status_code=200):
                return templates.TemplateResponse(request, name, {}, status_code=status_code)
        """,
    }
    tree = source_tree(tmp_path, files)
    layer = Layer(tree)
    assert layer.route_modules == {"app.web.routes", "app.web.handlers", "app.web.route_class"}
    assert layer.error_mappers == {"app.web.mapping"}
    assert layer.dependencies == {"app.web.guard", "app.web.checks"}
    # the standard library's HTTPException is a client's; render passes on its caller's status
    assert http_outside_the_layer(tree) == {}
