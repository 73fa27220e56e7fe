"""app/users/ceilings.py and its API: ceilings on what a run may ask (issue 37). On e30f233
a member's `memory_gb: 65536`, `cpus: 4096`, `disk_gb: 1000000` and `max_processes: 4194304`
were accepted (201) and applied."""

from __future__ import annotations

import os

import pytest

from app.users.ceilings import box_defaults

CONFIG = {"recipe": "tiny_mlp", "params": {"epochs": 1}}


def experiment(client, headers, resources=None) -> int:
    config = {**CONFIG, "resources": resources or {}}
    r = client.post("/api/experiments", json={"name": "c", "config": config}, headers=headers)
    assert r.status_code == 201, r.text
    return int(r.json()["id"])


def launch(client, headers, exp_id: int, resources=None):
    overrides = {"resources": resources} if resources else {}
    return client.post(
        f"/api/experiments/{exp_id}/runs", json={"overrides": overrides}, headers=headers
    )


def test_the_box_defaults_are_its_ram_less_a_reserve_its_cores_and_a_share_of_its_disk() -> None:
    box = box_defaults()
    ram_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1024**3
    assert box.memory_gb is not None and ram_gib * 0.85 < box.memory_gb < ram_gib
    assert box.cpus == len(os.sched_getaffinity(0))
    assert box.disk_gb is not None and box.disk_gb > 0
    assert box.max_processes == 4096


@pytest.mark.parametrize(
    ("field", "asked"),
    [("memory_gb", 65536), ("cpus", 4096), ("disk_gb", 1_000_000), ("max_processes", 4_194_304)],
)
def test_a_member_asking_above_the_box_is_422_naming_the_field_and_the_ceiling(
    client, user_headers, field: str, asked: float
) -> None:
    ceiling = box_defaults().get(field)  # type: ignore[arg-type]
    r = client.post(
        "/api/experiments",
        json={"name": "big", "config": {**CONFIG, "resources": {field: asked}}},
        headers=user_headers,
    )
    assert r.status_code == 422, r.text
    (error,) = r.json()["detail"]
    assert error["loc"] == ["body", "config", "resources", field]
    assert f"above the ceiling of {ceiling:g}" in error["msg"] and "this box" in error["msg"]
    exp_id = experiment(client, user_headers)
    r = launch(client, user_headers, exp_id, {field: asked})
    assert r.status_code == 422 and field in r.text, r.text


def test_an_admin_sets_ceilings_per_role_and_per_user_and_the_users_win(
    client, admin_headers, user_headers
) -> None:
    me = client.get("/api/users/me", headers=user_headers).json()
    r = client.put(
        "/api/ceilings/roles/member", json={"memory_gb": 2, "cpus": 1}, headers=admin_headers
    )
    assert r.status_code == 200, r.text
    r = client.put(f"/api/ceilings/users/{me['id']}", json={"cpus": 1.5}, headers=admin_headers)
    assert r.status_code == 200, r.text
    mine = client.get("/api/ceilings/me", headers=user_headers).json()
    assert mine["ceilings"]["memory_gb"] == 2 and mine["ceilings"]["cpus"] == 1.5
    assert mine["sources"] == {
        "memory_gb": "role",
        "cpus": "user",
        "disk_gb": "box",
        "max_processes": "box",
    }
    table = client.get("/api/ceilings", headers=admin_headers).json()
    assert table["roles"]["member"]["memory_gb"] == 2
    assert table["users"][me["username"]] == {
        "memory_gb": None,
        "cpus": 1.5,
        "disk_gb": None,
        "max_processes": None,
    }
    exp_id = experiment(client, user_headers)
    r = launch(client, user_headers, exp_id, {"memory_gb": 3})
    assert r.status_code == 422, r.text
    assert "above the ceiling of 2 GiB for role member" in r.text
    r = launch(client, user_headers, exp_id, {"cpus": 2})
    assert r.status_code == 422 and f"of 1.5 CPUs for {me['username']}" in r.text, r.text
    # Within them: the run gets what it asked.
    r = launch(client, user_headers, exp_id, {"memory_gb": 1.5, "cpus": 1})
    assert r.status_code == 201, r.text
    assert r.json()["config"]["resources"]["memory_gb"] == 1.5


def test_limits_left_at_their_defaults_are_held_to_the_ceilings(
    client, admin_headers, user_headers
) -> None:
    """The settings' defaults (8 GiB, 4 CPUs) above a member's ceilings: the run runs within
    the ceilings instead of being refused, and its stored config says so."""
    r = client.put(
        "/api/ceilings/roles/member", json={"memory_gb": 1, "cpus": 0.5}, headers=admin_headers
    )
    assert r.status_code == 200, r.text
    exp_id = experiment(client, user_headers)
    run = launch(client, user_headers, exp_id)
    assert run.status_code == 201, run.text
    resources = run.json()["config"]["resources"]
    assert (resources["memory_gb"], resources["cpus"]) == (1, 0.5)


def test_an_admin_raises_a_ceiling_above_the_box(client, admin_headers, user_headers) -> None:
    me = client.get("/api/users/me", headers=user_headers).json()
    r = client.put(f"/api/ceilings/users/{me['id']}", json={"cpus": 64}, headers=admin_headers)
    assert r.status_code == 200, r.text
    exp_id = experiment(client, user_headers, {"cpus": 64})
    assert launch(client, user_headers, exp_id).status_code == 201


def test_null_falls_back_and_an_empty_body_removes_the_row(client, admin_headers) -> None:
    client.put("/api/ceilings/roles/viewer", json={"cpus": 1}, headers=admin_headers)
    assert "viewer" in client.get("/api/ceilings", headers=admin_headers).json()["roles"]
    r = client.put("/api/ceilings/roles/viewer", json={}, headers=admin_headers)
    assert r.status_code == 200 and r.json()["cpus"] is None
    assert "viewer" not in client.get("/api/ceilings", headers=admin_headers).json()["roles"]


def test_only_admins_see_or_set_ceilings(client, user_headers) -> None:
    me = client.get("/api/users/me", headers=user_headers).json()
    for method, url in (
        ("get", "/api/ceilings"),
        ("put", "/api/ceilings/roles/member"),
        ("put", f"/api/ceilings/users/{me['id']}"),
    ):
        r = client.request(method, url, json={"cpus": 4096}, headers=user_headers)
        assert r.status_code == 403, (url, r.text)
    assert client.get("/api/ceilings/me", headers=user_headers).status_code == 200


@pytest.mark.parametrize(
    ("url", "body", "loc"),
    [
        ("/api/ceilings/roles/owner", {"cpus": 1}, ["path", "role"]),
        ("/api/ceilings/roles/member", {"cpus": 0}, ["body", "cpus"]),
        ("/api/ceilings/roles/member", {"max_processes": 2}, ["body", "max_processes"]),
        ("/api/ceilings/roles/member", {"gpus": 2}, ["body", "gpus"]),
    ],
)
def test_a_malformed_ceiling_is_422_at_the_field(
    client, admin_headers, url: str, body: dict, loc: list
) -> None:
    r = client.put(url, json=body, headers=admin_headers)
    assert r.status_code == 422, r.text
    assert any(e["loc"] == loc for e in r.json()["detail"]), r.json()


def test_setting_ceilings_for_an_unknown_user_is_404(client, admin_headers) -> None:
    r = client.put("/api/ceilings/users/999999", json={"cpus": 1}, headers=admin_headers)
    assert r.status_code == 404 and "user 999999 not found" in r.text


def test_a_limit_the_launch_did_not_ask_is_held_not_refused(
    client, admin_headers, user_headers
) -> None:
    """An admin's experiment asks 8 CPUs; a member launching it gets their own ceiling. So
    does a resume of a run whose stored limit a ceiling has since passed (the disk's follows
    the free space: CI saw 37.4 GB stored against a ceiling of 37.3 GB)."""
    admin = client.get("/api/users/me", headers=admin_headers).json()
    r = client.put(f"/api/ceilings/users/{admin['id']}", json={"cpus": 64}, headers=admin_headers)
    assert r.status_code == 200, r.text
    exp_id = experiment(client, admin_headers, {"cpus": 8})
    r = client.put("/api/ceilings/roles/member", json={"cpus": 1}, headers=admin_headers)
    assert r.status_code == 200, r.text
    run = launch(client, user_headers, exp_id)
    assert run.status_code == 201, run.text
    assert run.json()["config"]["resources"]["cpus"] == 1
    asked = launch(client, user_headers, exp_id, {"cpus": 8})
    assert asked.status_code == 422 and "above the ceiling of 1 CPUs for role member" in asked.text
