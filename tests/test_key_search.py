"""GET /api/experiments/{id}/keys: the pickers' search of an experiment's metric keys (issue 43):
a part of the name in any case, the experiment's own keys only, each once, by name, at most
`limit` with `more`; LIKE's wildcards taken literally."""

from __future__ import annotations

from app.db import session_scope
from tests.factories import add_metric_keys, admin_run, make_run


def keys_experiment() -> tuple[int, int]:
    """An experiment of two runs with keys, and another experiment with keys of its own."""
    first = make_run()
    with session_scope() as session:
        from app.runs.models import Run

        exp = session.get(Run, first).experiment_id  # type: ignore[union-attr]
        second = admin_run(session, experiment_id=exp)
        other = admin_run(session)
        other_exp = session.get(Run, other).experiment_id  # type: ignore[union-attr]
        add_metric_keys(
            session, run_id=first, keys=["train/loss", "val/acc", "grad/layer_1/norm", "a_b%c"]
        )
        add_metric_keys(session, run_id=second, keys=["train/loss", "val/Loss", "axbyc"])
        add_metric_keys(session, run_id=other, keys=["train/loss_other"])
    return exp, other_exp


def search(client, headers, exp: int, **params: object):
    return client.get(f"/api/experiments/{exp}/keys", params=params, headers=headers)


def test_keys_found_by_part_of_the_name(client, admin_headers) -> None:
    exp, other = keys_experiment()
    got = search(client, admin_headers, exp, q="LOSS").json()
    assert got == {"keys": ["train/loss", "val/Loss"], "more": False}
    everything = search(client, admin_headers, exp).json()
    assert everything["keys"] == sorted(
        ["a_b%c", "axbyc", "grad/layer_1/norm", "train/loss", "val/Loss", "val/acc"]
    )
    # % and _ are the name's own characters, not wildcards
    assert search(client, admin_headers, exp, q="_b%").json()["keys"] == ["a_b%c"]
    assert search(client, admin_headers, other, q="loss").json()["keys"] == ["train/loss_other"]
    assert search(client, admin_headers, exp, q="nothing").json() == {"keys": [], "more": False}


def test_keys_limit_and_more(client, admin_headers) -> None:
    exp, _ = keys_experiment()
    got = search(client, admin_headers, exp, limit=2).json()
    assert got == {"keys": ["a_b%c", "axbyc"], "more": True}


def test_keys_refusals_name_the_field(client, admin_headers) -> None:
    exp, _ = keys_experiment()
    r = search(client, admin_headers, exp, limit=201)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "limit"]
    r = search(client, admin_headers, exp, q="a\x00b")
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "q"]
    assert search(client, admin_headers, 999_999, q="x").status_code == 404
