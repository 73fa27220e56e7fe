"""Every request the client CLI makes, in one table: method, path template (as the server's
`/openapi.json` writes it), the query parameters it may send and the kind of body.

`Api` (torchyard/cli/client.py) takes only a `Call` built from an `Endpoint` here, and checks
the query and body it is given against the endpoint's, so a command cannot name a path the
table lacks; tests/test_cli_contract.py checks the table against the app's OpenAPI document
(each method and path exists, with those path, query and body parameters), so the table cannot
name what the server does not have.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal
from urllib.parse import quote

Body = Literal["json", "form", "multipart", "content"]
_PLACEHOLDER = re.compile(r"\{(\w+)\}")


@dataclass(frozen=True)
class Call:
    """One request's method and filled-in path, made by an Endpoint."""

    endpoint: Endpoint
    path: str

    @property
    def method(self) -> str:
        return self.endpoint.method


@dataclass(frozen=True)
class Endpoint:
    """``template``: OpenAPI's path with ``{name}`` placeholders; a name in ``slashes`` may hold
    `/` (a file's path under a run), any other is one path segment."""

    method: str
    template: str
    query: frozenset[str] = frozenset()
    body: Body | None = None
    slashes: frozenset[str] = frozenset()

    @property
    def path_params(self) -> frozenset[str]:
        return frozenset(_PLACEHOLDER.findall(self.template))

    def __call__(self, **values: int | str) -> Call:
        if set(values) != self.path_params:
            wanted = sorted(self.path_params)
            raise TypeError(f"{self.template} takes {wanted}, not {sorted(values)}")

        def fill(match: re.Match[str]) -> str:
            name = match.group(1)
            return quote(str(values[name]), safe="/" if name in self.slashes else "")

        return Call(self, _PLACEHOLDER.sub(fill, self.template))


def _q(*names: str) -> frozenset[str]:
    return frozenset(names)


AUTH_TOKEN = Endpoint("POST", "/api/auth/token", body="form")
ME = Endpoint("GET", "/api/me")
FLEET = Endpoint("GET", "/api/fleet", query=_q("window"))
TOKEN_CREATE = Endpoint("POST", "/api/tokens", body="json")
CODE_UPLOAD = Endpoint("POST", "/api/code", body="multipart")

EXPERIMENTS = Endpoint("GET", "/api/experiments")
EXPERIMENT_CREATE = Endpoint("POST", "/api/experiments", body="json")
EXPERIMENT = Endpoint("GET", "/api/experiments/{experiment_id}")
EXPERIMENT_EDIT = Endpoint("PATCH", "/api/experiments/{experiment_id}", body="json")
EXPERIMENT_DELETE = Endpoint("DELETE", "/api/experiments/{experiment_id}")
EXPERIMENT_RUN_CREATE = Endpoint("POST", "/api/experiments/{experiment_id}/runs", body="json")

RUNS = Endpoint(
    "GET",
    "/api/runs",
    query=_q("experiment_id", "status", "owner", "tag", "filter", "sort", "limit", "cursor"),
)
RUN = Endpoint("GET", "/api/runs/{run_id}")
RUN_EDIT = Endpoint("PATCH", "/api/runs/{run_id}", body="json")
RUN_DELETE = Endpoint("DELETE", "/api/runs/{run_id}")
RUN_CANCEL = Endpoint("POST", "/api/runs/{run_id}/cancel")
RUN_RESUME = Endpoint("POST", "/api/runs/{run_id}/resume", body="json")
RUN_CHECKPOINTS = Endpoint("GET", "/api/runs/{run_id}/checkpoints")
RUN_CHECKPOINT = Endpoint("GET", "/api/runs/{run_id}/checkpoints/{name}")
RUN_FILES = Endpoint("GET", "/api/runs/{run_id}/files")
RUN_FILE = Endpoint("GET", "/api/runs/{run_id}/files/{path}", slashes=_q("path"))
RUN_LOGS = Endpoint("GET", "/api/runs/{run_id}/logs", query=_q("rank", "node", "tail", "offset"))
RUN_EVENTS = Endpoint("GET", "/api/runs/{run_id}/events", query=_q("after", "log_offset"))
RUN_METRICS = Endpoint("GET", "/api/runs/{run_id}/metrics", query=_q("keys", "step_min"))

SESSION_START = Endpoint("POST", "/api/sessions", body="json")
SESSION_EXTEND = Endpoint("POST", "/api/sessions/{run_id}/extend", body="json")

SWEEPS = Endpoint("GET", "/api/sweeps", query=_q("experiment_id"))
SWEEP_CREATE = Endpoint("POST", "/api/sweeps", body="json")
SWEEP = Endpoint("GET", "/api/sweeps/{sweep_id}")
SWEEP_CANCEL = Endpoint("POST", "/api/sweeps/{sweep_id}/cancel")

USERS = Endpoint("GET", "/api/users")
USER_CREATE = Endpoint("POST", "/api/users", body="json")
USER_ME = Endpoint("GET", "/api/users/me")
USER_EDIT = Endpoint("PATCH", "/api/users/{user_id}", body="json")
MY_PASSWORD = Endpoint("POST", "/api/users/me/password", body="json")

CEILINGS = Endpoint("GET", "/api/ceilings")
CEILINGS_ME = Endpoint("GET", "/api/ceilings/me")
CEILINGS_ROLE = Endpoint("PUT", "/api/ceilings/roles/{role}", body="json")
CEILINGS_USER = Endpoint("PUT", "/api/ceilings/users/{user_id}", body="json")
FAIR_SHARE = Endpoint("GET", "/api/fair-share")
FAIR_SHARE_USER = Endpoint("PUT", "/api/fair-share/users/{user_id}", body="json")

VIEWS = Endpoint("GET", "/api/views", query=_q("experiment_id"))
VIEW_DELETE = Endpoint("DELETE", "/api/views/{view_id}")

# Every endpoint above, for the contract test.
ALL: tuple[Endpoint, ...] = tuple(v for v in list(globals().values()) if isinstance(v, Endpoint))

# The web pages the CLI prints links to (HTML, outside the OpenAPI document; the contract test
# checks them against the app's routes).
RUN_PAGE = Endpoint("GET", "/runs/{run_id}")
SWEEP_PAGE = Endpoint("GET", "/sweeps/{sweep_id}")
PAGES: tuple[Endpoint, ...] = (RUN_PAGE, SWEEP_PAGE)

# torchyard's MLflow tracking API (outside the OpenAPI document, as MLflow's own server has no
# such document): what `torchyard import` writes through, the same routes the `mlflow` client
# uses. The contract test checks each against the app's routes.
_MLFLOW = "/api/2.0/mlflow"
MLFLOW_EXPERIMENT_BY_NAME = Endpoint(
    "GET", f"{_MLFLOW}/experiments/get-by-name", query=_q("experiment_name")
)
MLFLOW_EXPERIMENT_CREATE = Endpoint("POST", f"{_MLFLOW}/experiments/create", body="json")
MLFLOW_RUNS_SEARCH = Endpoint("POST", f"{_MLFLOW}/runs/search", body="json")
MLFLOW_RUN_CREATE = Endpoint("POST", f"{_MLFLOW}/runs/create", body="json")
MLFLOW_RUN_UPDATE = Endpoint("POST", f"{_MLFLOW}/runs/update", body="json")
MLFLOW_RUN_DELETE = Endpoint("POST", f"{_MLFLOW}/runs/delete", body="json")
MLFLOW_LOG_BATCH = Endpoint("POST", f"{_MLFLOW}/runs/log-batch", body="json")
MLFLOW_ARTIFACT_UPLOAD = Endpoint(
    "PUT", "/api/2.0/mlflow-artifacts/artifacts/{path}", body="content", slashes=_q("path")
)
MLFLOW: tuple[Endpoint, ...] = (
    MLFLOW_EXPERIMENT_BY_NAME, MLFLOW_EXPERIMENT_CREATE, MLFLOW_RUNS_SEARCH, MLFLOW_RUN_CREATE,
    MLFLOW_RUN_UPDATE, MLFLOW_RUN_DELETE, MLFLOW_LOG_BATCH, MLFLOW_ARTIFACT_UPLOAD,
)  # fmt: skip
