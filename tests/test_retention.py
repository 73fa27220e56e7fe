"""Checkpoint retention: the policy's choice (worker.retention.kept) and the config's 422s."""

from __future__ import annotations

from worker.retention import Candidate, Policy, kept, policy_of


def _ckpts(n: int) -> list[Candidate]:
    made = [
        Candidate(i, f"epoch-{i:04d}.pt", i * 10, f"checkpoints/epoch-{i:04d}.pt", None)
        for i in range(1, n + 1)
    ]
    return [*made, Candidate(n + 1, "final.pt", n * 10, "checkpoints/final.pt", None)]


def test_keeps_the_last_two_the_best_and_final() -> None:
    ckpts = _ckpts(6)
    values = {1: 0.2, 2: 0.9, 3: 0.5, 4: 0.4, 5: 0.3, 6: 0.1, 7: 0.1}
    assert kept(ckpts, Policy(2, 1, "val/acc", "max"), values) == {2, 5, 6, 7}
    assert kept(ckpts, Policy(2, 1, "val/loss", "min"), values) == {5, 6, 7}  # best is 6
    assert kept(ckpts, Policy(1, 2, "val/acc", "max"), values) == {2, 3, 6, 7}


def test_without_a_metric_only_the_last_and_final_stay() -> None:
    ckpts = _ckpts(5)
    assert kept(ckpts, Policy(2, 1, None, "max"), {}) == {4, 5, 6}


def test_a_checkpoint_without_a_finite_value_is_never_the_best() -> None:
    ckpts = _ckpts(4)
    values = {1: float("nan"), 2: None, 3: 0.1, 4: 0.2}
    assert kept(ckpts, Policy(1, 1, "m", "min"), values) == {3, 4, 5}


def test_a_config_from_before_the_policy_gets_the_default() -> None:
    assert policy_of({"recipe": "tiny_mlp"}) == Policy(2, 1, None, "max")


def test_the_config_default_is_the_latest_two_and_the_best_one(client, user_headers) -> None:
    r = client.post(
        "/api/experiments",
        json={"name": "ret", "config": {"recipe": "tiny_mlp"}},
        headers=user_headers,
    )
    assert r.status_code == 201, r.text
    assert r.json()["config"]["checkpoints"] == {
        "keep_last": 2,
        "keep_best": 1,
        "metric": None,
        "mode": "max",
    }


def test_a_bad_retention_config_is_a_clear_422(client, user_headers) -> None:
    for bad, loc, words in (
        ({"keep_last": 0}, "keep_last", "greater than or equal to 1"),
        ({"keep_best": -1}, "keep_best", "greater than or equal to 0"),
        ({"mode": "avg"}, "mode", "'max' or 'min'"),
        ({"metric": ""}, "metric", "at least 1 character"),
        ({"keep_every": 3}, "keep_every", "Extra inputs are not permitted"),
    ):
        config = {"recipe": "tiny_mlp", "checkpoints": bad}
        r = client.post(
            "/api/experiments", json={"name": "ret", "config": config}, headers=user_headers
        )
        assert r.status_code == 422, (bad, r.text)
        errors = r.json()["detail"]
        assert any(e["loc"][-1] == loc and words in e["msg"] for e in errors), (bad, errors)
        assert all("checkpoints" in e["loc"] for e in errors)
