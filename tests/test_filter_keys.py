"""Keys a runs filter names that no run of its experiment has (app/runs/query/filter_keys.py):
a 422 naming the key with the nearest known one, never a silent empty table (issue 41)."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import select

from app.auth.models import User
from app.db import session_scope
from app.metrics.ingest import ingest_points
from app.runs.models import Run
from app.runs.query.filter_keys import known, suggestion, unknown_key_message
from app.runs.query.params import record_config
from tests.conftest import make_user
from tests.factories import add_run

PARAMS = {"params.lr", "params.batch_size", "seed", "hparams.dropout"}
METRICS = {"val/acc", "train/loss"}


def test_a_key_is_known_as_the_filter_finds_it() -> None:
    for key in ("lr", "params.lr", "seed", "hparams.dropout", "val/acc", "val/acc.max"):
        assert known(PARAMS, METRICS, key), key
    for key in ("summary.val/acc.min", "name", "Tags", "status", "id"):
        assert known(PARAMS, METRICS, key), key
    for key in ("LR", "val/accuracy", "val/acc.top", "params.dropout", "summary.lr.max"):
        assert not known(PARAMS, METRICS, key), key


def test_did_you_mean_the_nearest_key_in_any_case() -> None:
    keys = ["batch_size", "hparams.dropout", "lr", "seed", "train/loss", "val/acc"]
    assert suggestion("val/accuracy", keys) == "val/acc"
    assert suggestion("LR", keys) == "lr"
    assert suggestion("params.batchsize", keys) == "batch_size"
    assert suggestion("zzzzzz", keys) is None
    message = unknown_key_message("val/accuracy", PARAMS, METRICS)
    assert message.startswith("no run here has the key 'val/accuracy': did you mean val/acc?")
    assert message.endswith("batch_size, hparams.dropout, lr, seed, train/loss, val/acc")
    assert unknown_key_message("zzzzzz", PARAMS, METRICS).startswith(
        "no run here has the key 'zzzzzz'. Keys: name, tags, status, id, batch_size"
    )


@pytest.fixture(scope="module")
def experiment() -> tuple[dict[str, str], int, list[int]]:
    username, _, headers = make_user()
    with session_scope() as session:
        owner = session.scalars(select(User.id).where(User.username == username)).one()
        ids: list[int] = []
        for name, lr in (("ext-1", 0.1), ("ext-2", 0.01), ("base", 0.001)):
            config = {"recipe": "tiny_mlp", "seed": 7, "params": {"lr": lr}}
            exp_id = session.get_one(Run, ids[0]).experiment_id if ids else None
            run_id = add_run(
                session, owner_id=owner, status="succeeded", config=config, experiment_id=exp_id
            )
            record_config(session, run_id=run_id, config=config)
            session.get_one(Run, run_id).name = name
            ingest_points(session, run_id=run_id, points=[("val/acc", 1, lr * 5, 1.0)])
            ids.append(run_id)
        exp_id = session.get_one(Run, ids[0]).experiment_id
    return headers, exp_id, ids


def _list(client: Any, experiment: tuple[dict[str, str], int, list[int]], text: str) -> Any:
    headers, exp_id, _ = experiment
    params = {"experiment_id": exp_id, "sort": "id", "filter": text}
    return client.get("/api/runs", params=params, headers=headers)


@pytest.mark.parametrize(
    ("text", "msg"),
    [
        ("val/accuracy>0.1", "position 0: no run here has the key 'val/accuracy': did you mean"),
        ("name~ext and LR<0.05", "position 13: no run here has the key 'LR': did you mean lr?"),
        ("val/acc.top>1", "position 0: no run here has the key 'val/acc.top'"),
    ],
)
def test_an_unknown_key_of_an_experiment_is_a_422_with_the_nearest(
    client, experiment, text: str, msg: str
) -> None:
    r = _list(client, experiment, text)
    assert r.status_code == 422, r.text
    (detail,) = r.json()["detail"]
    assert detail["loc"] == ["query", "filter"] and detail["msg"].startswith(msg), detail
    assert "Keys: name, tags, status, id, lr, recipe, seed, val/acc" in detail["msg"]


def test_known_keys_and_a_plain_word_list_the_runs(client, experiment) -> None:
    _, _, ids = experiment
    for text, want in (("lr<0.05", ids[1:]), ("val/acc.max>0.01", ids[:2]), ("ext-1", ids[:1])):
        r = _list(client, experiment, text)
        assert r.status_code == 200, r.text
        assert [run["id"] for run in r.json()["runs"]] == want, text
    r = _list(client, experiment, "ext or base")
    assert [run["name"] for run in r.json()["runs"]] == ["ext-1", "ext-2", "base"]
