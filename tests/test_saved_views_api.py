"""Saved views through the API (app/saved_views), in-process on the suite's database (SQLite,
and PostgreSQL in the services pass): who sees, opens and deletes which view, the one default
per experiment, and a hostile `state` refused with the field named."""

from __future__ import annotations

import pytest

from tests.conftest import make_user

STATE = {
    "filter": {"text": "lr<=0.01 and val/acc>0.5", "status": "succeeded", "tag": "best"},
    "sort": "-summary.val/acc.max",
    "columns": ["train/loss.last", "val/acc.max"],
    "group": {"by": "params.lr", "band": "std"},
    "charts": {"keys": ["val/acc"], "smoothing": 0.6, "x": "wall", "log": True, "clip": False},
}


def experiment(client, headers: dict[str, str]) -> int:
    config = {"recipe": "digits_cnn", "params": {}, "seed": 1}
    r = client.post("/api/experiments", json={"name": "views", "config": config}, headers=headers)
    assert r.status_code == 201, r.text
    return int(r.json()["id"])


def save(client, headers, experiment_id: int | None, **body):
    payload = {"name": "v", "experiment_id": experiment_id, "shared": False, "state": STATE}
    return client.post("/api/views", json={**payload, **body}, headers=headers)


def test_a_saved_view_answers_201_with_its_url_and_reads_back_the_same_state(
    client, user_headers
) -> None:
    exp = experiment(client, user_headers)
    r = save(client, user_headers, exp, name="best first", shared=True)
    assert r.status_code == 201, r.text
    view_id, url = r.json()["id"], r.json()["url"]
    assert url == f"/experiments/{exp}?view={view_id}"
    got = client.get(f"/api/views/{view_id}", headers=user_headers).json()
    assert got["state"] == STATE and got["name"] == "best first" and got["shared"] is True
    assert got["is_default"] is False and got["url"] == url


def test_list_shows_mine_and_the_shared_ones_never_a_teammates_private_one(client) -> None:
    alice, bob = make_user()[2], make_user()[2]
    exp = experiment(client, alice)
    shared = save(client, alice, exp, name="team", shared=True).json()["id"]
    private = save(client, alice, exp, name="mine").json()["id"]
    bobs = save(client, bob, exp, name="bob's").json()["id"]
    listed = {v["id"] for v in client.get(f"/api/views?experiment_id={exp}", headers=bob).json()}
    assert listed == {shared, bobs}
    listed = {v["id"] for v in client.get(f"/api/views?experiment_id={exp}", headers=alice).json()}
    assert listed == {shared, private}
    # A private view is another's: it does not exist for bob, by id either.
    assert client.get(f"/api/views/{private}", headers=bob).status_code == 404
    assert client.delete(f"/api/views/{private}", headers=bob).status_code == 404
    assert client.get(f"/api/views/{shared}", headers=bob).json()["owner"]


def test_only_the_owner_or_an_admin_deletes_a_view(client, admin_headers) -> None:
    alice, bob = make_user()[2], make_user()[2]
    view_id = save(client, alice, None, shared=True).json()["id"]
    r = client.delete(f"/api/views/{view_id}", headers=bob)
    assert r.status_code == 403 and "belongs to another user" in r.json()["detail"]
    assert client.delete(f"/api/views/{view_id}", headers=alice).status_code == 204
    assert client.get(f"/api/views/{view_id}", headers=alice).status_code == 404
    other = save(client, alice, None, shared=True).json()["id"]
    assert client.delete(f"/api/views/{other}", headers=admin_headers).status_code == 204


def test_a_viewer_opens_shared_views_but_saves_none(client) -> None:
    alice, viewer = make_user()[2], make_user(role="viewer")[2]
    view_id = save(client, alice, None, shared=True).json()["id"]
    assert client.get(f"/api/views/{view_id}", headers=viewer).status_code == 200
    assert save(client, viewer, None).status_code == 403


@pytest.mark.parametrize(
    ("state", "loc"),
    [
        ({**STATE, "script": "alert(1)"}, ["body", "state", "script"]),
        ({**STATE, "charts": {"smoothing": 5}}, ["body", "state", "charts", "smoothing"]),
        ({**STATE, "charts": {"colour": "red"}}, ["body", "state", "charts", "colour"]),
        ({**STATE, "filter": {"text": "x" * 2001}}, ["body", "state", "filter", "text"]),
        ({**STATE, "columns": ["k"] * 201}, ["body", "state", "columns"]),
        ({**STATE, "columns": [{"deep": [[[1]]]}]}, ["body", "state", "columns", 0]),
        ({**STATE, "sort": ["-id"]}, ["body", "state", "sort"]),
        ({"charts": {"keys": ["k" * 300] * 60}}, ["body", "state"]),  # over 16 KiB
    ],
)
def test_a_hostile_state_is_a_422_naming_the_field_and_stores_nothing(
    client, user_headers, state: dict, loc: list
) -> None:
    before = len(client.get("/api/views", headers=user_headers).json())
    r = client.post(
        "/api/views", json={"name": "x", "shared": True, "state": state}, headers=user_headers
    )
    assert r.status_code == 422, r.text
    assert [e["loc"] for e in r.json()["detail"]][0] == loc, r.json()
    assert len(client.get("/api/views", headers=user_headers).json()) == before


def test_a_view_of_a_missing_experiment_is_a_422_naming_experiment_id(client, user_headers) -> None:
    r = save(client, user_headers, 999_999)
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"] == ["body", "experiment_id"]


def test_one_default_view_per_experiment_set_by_its_owner(client, admin_headers) -> None:
    owner, member = make_user()[2], make_user()[2]
    exp = experiment(client, owner)
    first = save(client, member, exp, name="a", shared=True).json()["id"]
    second = save(client, owner, exp, name="b", shared=True).json()["id"]
    private = save(client, owner, exp, name="c").json()["id"]
    url = "/api/views/{}/default"
    # The member who saved it may not make it the experiment's default: the owner decides.
    r = client.put(url.format(first), json={"default": True}, headers=member)
    assert r.status_code == 403
    assert client.put(url.format(first), json={"default": True}, headers=owner).json()["is_default"]
    r = client.put(url.format(private), json={"default": True}, headers=owner)
    assert r.status_code == 422 and "shared" in r.json()["detail"][0]["msg"]
    r = client.put(url.format(second), json={"default": True}, headers=admin_headers)
    assert r.status_code == 200
    defaults = [
        v["id"]
        for v in client.get(f"/api/views?experiment_id={exp}", headers=member).json()
        if v["is_default"]
    ]
    assert defaults == [second]
    r = client.put(url.format(second), json={"default": False}, headers=owner)
    assert r.json()["is_default"] is False


def test_deleting_the_experiment_deletes_its_views(client, user_headers) -> None:
    exp = experiment(client, user_headers)
    view_id = save(client, user_headers, exp, shared=True).json()["id"]
    assert client.delete(f"/api/experiments/{exp}", headers=user_headers).status_code in (200, 204)
    assert client.get(f"/api/views/{view_id}", headers=user_headers).status_code == 404
