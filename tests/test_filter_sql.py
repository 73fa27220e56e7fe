"""The filter language through GET /api/runs (app/runs/query/filter_sql.py): bare metric and param
keys, and/or, parentheses, in, ~ on name and tags, the old forms kept; a refused filter is a
422 naming the position."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import select

from app.auth.models import User
from app.db import session_scope
from app.metrics.ingest import ingest_points
from app.runs.models import Run, RunTag
from app.runs.query.params import record_config
from tests.conftest import make_user
from tests.factories import add_run

# name, lr, opt, tags, val/acc points (the last is the last value)
RUNS = [
    ("resnet-a", 0.1, "sgd", ["best", "gpu"], [0.5, 0.95, 0.7]),
    ("resnet-b", 0.01, "adam", ["gpu"], [0.6, 0.92]),
    ("mlp-small", 0.001, "adam", [], [0.3, 0.4]),
    ("MLP-big", 0.05, "sgd", ["baseline"], []),
]


@pytest.fixture(scope="module")
def team() -> tuple[str, dict[str, str], list[int]]:
    username, _, headers = make_user()
    ids = []
    with session_scope() as session:
        owner = session.scalars(select(User.id).where(User.username == username)).one()
        for name, lr, opt, tags, acc in RUNS:
            config = {"recipe": "tiny_mlp", "seed": 7, "params": {"lr": lr, "opt": opt}}
            run_id = add_run(session, owner_id=owner, status="succeeded", config=config)
            record_config(session, run_id=run_id, config=config)
            session.get_one(Run, run_id).name = name
            session.add_all(RunTag(run_id=run_id, tag=t) for t in tags)
            points = [("val/acc", step, v, float(step)) for step, v in enumerate(acc)]
            if points:
                ingest_points(session, run_id=run_id, points=points)
            ids.append(run_id)
    return username, headers, ids


def _names(client: Any, team: tuple[str, dict[str, str], list[int]], *filters: str) -> list[str]:
    username, headers, _ = team
    params = {"owner": username, "sort": "id", "filter": list(filters)}
    r = client.get("/api/runs", params=params, headers=headers)
    assert r.status_code == 200, r.text
    return [run["name"] for run in r.json()["runs"]]


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("val/acc>0.8", ["resnet-b"]),  # the last value: resnet-a ended at 0.7
        ("val/acc.max>0.9", ["resnet-a", "resnet-b"]),
        ("val/acc.min<0.5", ["mlp-small"]),
        ("summary.val/acc.max>0.9", ["resnet-a", "resnet-b"]),  # the older form
        ("lr<=0.01", ["resnet-b", "mlp-small"]),
        ("params.lr<=0.01", ["resnet-b", "mlp-small"]),
        ("params.params.lr<=0.01", ["resnet-b", "mlp-small"]),  # the older form
        ("seed=7", [r[0] for r in RUNS]),
        ("opt=adam and lr>0.005", ["resnet-b"]),
        ("opt=adam or lr>0.05", ["resnet-a", "resnet-b", "mlp-small"]),
        ("opt = sgd and (val/acc.max>0.9 or tags~base)", ["resnet-a", "MLP-big"]),
        ("(opt = sgd and val/acc.max>0.9) or tags~base", ["resnet-a", "MLP-big"]),
        ("opt = sgd and val/acc.max>0.9 or tags~base", ["resnet-a", "MLP-big"]),
        ("lr in (0.1, 0.001)", ["resnet-a", "mlp-small"]),
        ("opt in ('adam')", ["resnet-b", "mlp-small"]),
        ("name in (resnet-b, MLP-big)", ["resnet-b", "MLP-big"]),
        ("name~mlp", ["mlp-small", "MLP-big"]),  # any case
        ("name~'%'", []),  # a LIKE wildcard is a plain character
        ("tags~gp", ["resnet-a", "resnet-b"]),
        ("tags=gpu and tags!=best", ["resnet-b"]),
        ("tag in (best, baseline)", ["resnet-a", "MLP-big"]),
        ("status in (succeeded, failed) and name~resnet", ["resnet-a", "resnet-b"]),
        ("val/acc>0.5 and nope=3", []),  # a key no run has matches nothing
        ("opt>b", ["resnet-a", "MLP-big"]),  # text compares as text
    ],
)
def test_the_grammar_finds_the_right_runs(client, team, text: str, names: list[str]) -> None:
    assert _names(client, team, text) == names


def test_repeated_filters_must_all_hold(client, team) -> None:
    assert _names(client, team, "tags~gpu", "lr<0.05") == ["resnet-b"]


@pytest.mark.parametrize(
    ("text", "msg"),
    [
        ("val/acc.max>", "position 12: expected a value after '>'"),
        ("lr>0.1 and (name~a or", "position 21: expected a key"),
        ("status=sleeping", "position 0: status takes = != or in, and one of queued"),
        ("id~3", "position 0: id takes a number"),
        ("tags>a", "position 0: tags take = != ~ or in"),
        ("summary.val/acc.max>high", "position 0: summary.val/acc.max is a number"),
    ],
)
def test_a_refused_filter_is_a_422_naming_the_position(client, team, text: str, msg: str) -> None:
    _, headers, _ = team
    r = client.get("/api/runs", params={"filter": text}, headers=headers)
    assert r.status_code == 422, r.text
    (detail,) = r.json()["detail"]
    assert detail["loc"] == ["query", "filter"] and detail["msg"].startswith(msg), detail
