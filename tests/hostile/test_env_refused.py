"""Issue 37: the loader's and libc's variables are refused wherever a member can give a run's
config (an experiment, a run's overrides, a sweep's parameters), with a 422 naming the
variable, and nothing is stored. On e30f233 every name here but LD_PRELOAD and
LD_LIBRARY_PATH was accepted (201)."""

from __future__ import annotations

import pytest

REFUSED = (
    "LD_AUDIT",
    "LD_PRELOAD",
    "LD_LIBRARY_PATH",
    "LD_DEBUG_OUTPUT",
    "LD_BIND_NOW",
    "MALLOC_CONF",
    "MALLOC_ARENA_MAX",
    "MALLOC_CHECK_",
    "GCONV_PATH",
    "GETCONF_DIR",
    "GLIBC_TUNABLES",
    "HOSTALIASES",
    "LOCALDOMAIN",
    "LOCPATH",
    "NIS_PATH",
    "NLSPATH",
    "RESOLV_HOST_CONF",
    "RES_OPTIONS",
    "TZDIR",
)
CONFIG = {"recipe": "tiny_mlp", "params": {"epochs": 1}}


@pytest.mark.parametrize("name", REFUSED)
def test_a_loader_variable_in_an_experiments_env_is_422_naming_it(
    client, user_headers, name: str
) -> None:
    config = {**CONFIG, "env": {"HF_HUB_OFFLINE": "1", name: "/tmp/x"}}
    r = client.post("/api/experiments", json={"name": name, "config": config}, headers=user_headers)
    assert r.status_code == 422, r.text
    assert any(
        e["loc"][:3] == ["body", "config", "env"] and e["msg"].startswith(f"Value error, {name}:")
        for e in r.json()["detail"]
    ), r.json()
    listed = client.get("/api/experiments", headers=user_headers).json()
    assert not [e for e in listed if e["name"] == name]


@pytest.mark.parametrize("name", ["LD_AUDIT", "GCONV_PATH", "MALLOC_CONF"])
def test_a_loader_variable_in_a_runs_overrides_is_422_naming_it(
    client, user_headers, name: str
) -> None:
    exp = client.post(
        "/api/experiments", json={"name": "e", "config": CONFIG}, headers=user_headers
    ).json()
    r = client.post(
        f"/api/experiments/{exp['id']}/runs",
        json={"overrides": {"env": {name: "/tmp/x"}}},
        headers=user_headers,
    )
    assert r.status_code == 422 and name in r.text, r.text
    runs = client.get(f"/api/runs?experiment_id={exp['id']}", headers=user_headers).json()
    assert runs["runs"] == []


def test_a_job_may_still_set_its_own_tools_variables(client, user_headers) -> None:
    """Not a deny-list of everything: what only changes the job's own tools (its Python, its
    pip, its shell) reaches the job, since no root process gets a run's variables at all
    (tests/hostile/test_root_never_sees_a_runs_env.py)."""
    env = {
        "PYTHONSTARTUP": "/x.py",
        "PYTHONUSERBASE": "/x",
        "BASH_ENV": "/x.sh",
        "ENV": "/x.sh",
        "PIP_INDEX_URL": "http://127.0.0.1:1/simple",
        "PIP_CONFIG_FILE": "/x.conf",
        "SSL_CERT_FILE": "/x.pem",
        "HF_HUB_OFFLINE": "1",
    }
    config = {**CONFIG, "env": env}
    r = client.post("/api/experiments", json={"name": "ok", "config": config}, headers=user_headers)
    assert r.status_code == 201, r.text
    assert r.json()["config"]["env"] == env
