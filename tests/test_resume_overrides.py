"""Resume with overrides: merged onto the parent's config and validated as a whole, the
final.pt rule (a checkpoint that reached the epochs needs more), and one real resume that
trains on with more epochs and another lr."""

from __future__ import annotations

import torch
from torch import nn

from app.db import session_scope
from app.runs.models import Checkpoint
from app.settings import get_settings
from tests.conftest import wait_for_status
from tests.test_resume import new_run
from torchyard.runtime.checkpoint import load_optimizer_state


def add_checkpoint(run_id: int, name: str, *, epoch: int, step: int) -> None:
    relative = f"checkpoints/{name}"
    path = get_settings().run_dir(run_id) / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"not really torch")
    with session_scope() as session:
        session.add(
            Checkpoint(
                run_id=run_id, name=name, epoch=epoch, step=step, size_bytes=16, path=relative
            )
        )


def resume(client, headers, run_id: int, checkpoint: str, overrides=None):
    body: dict = {"checkpoint": checkpoint}
    if overrides is not None:
        body["overrides"] = overrides
    return client.post(f"/api/runs/{run_id}/resume", json=body, headers=headers)


def test_overrides_are_merged_onto_the_parents_config(client, user_headers) -> None:
    run = new_run(client, user_headers)  # epochs 2, lr 0.05 (a run override), seed 31
    add_checkpoint(run["id"], "epoch-0001.pt", epoch=1, step=20)
    r = resume(client, user_headers, run["id"], "epoch-0001.pt", {"params": {"lr": 0.01}})
    assert r.status_code == 201, r.text
    config = r.json()["config"]
    assert config["params"]["lr"] == 0.01 and config["params"]["epochs"] == 2
    assert config["seed"] == 31 and config["recipe"] == "tiny_mlp"
    rest = {k: v for k, v in config["params"].items() if k != "lr"}
    assert rest == {k: v for k, v in run["config"]["params"].items() if k != "lr"}


def test_overrides_are_validated_and_the_422_names_the_field(client, user_headers) -> None:
    run = new_run(client, user_headers)
    add_checkpoint(run["id"], "epoch-0001.pt", epoch=1, step=20)
    r = resume(client, user_headers, run["id"], "epoch-0001.pt", {"params": {"lr": "fast"}})
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"] == ["body", "overrides", "params", "lr"]
    r = resume(client, user_headers, run["id"], "epoch-0001.pt", {"bogus": 1})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][:3] == [
        "body",
        "overrides",
        "bogus",
    ]
    r = resume(client, user_headers, run["id"], "epoch-0001.pt", {"params": {"epochs": 0}})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][-1] == "epochs"


def test_final_pt_without_more_epochs_is_refused_saying_to_raise_them(client, user_headers) -> None:
    run = new_run(client, user_headers)  # epochs 2
    add_checkpoint(run["id"], "final.pt", epoch=2, step=40)
    for overrides in (None, {"params": {"lr": 0.01}}, {"params": {"epochs": 2}}):
        r = resume(client, user_headers, run["id"], "final.pt", overrides)
        assert r.status_code == 422, r.text
        error = r.json()["detail"][0]
        assert error["loc"] == ["body", "overrides", "params", "epochs"]
        assert "raise params.epochs above 2" in error["msg"]
    r = resume(client, user_headers, run["id"], "final.pt", {"params": {"epochs": 3}})
    assert r.status_code == 201 and r.json()["config"]["params"]["epochs"] == 3


def test_a_changed_lr_takes_effect_after_the_optimizer_state_is_loaded() -> None:
    model = nn.Linear(3, 1)
    old = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.ones(2, 3)).sum().backward()
    old.step()
    saved = old.state_dict()

    plain = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    plain.load_state_dict(saved)
    assert plain.param_groups[0]["lr"] == 0.1  # why the helper exists: torch restores the old lr

    new = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    load_optimizer_state(new, saved)
    assert new.param_groups[0]["lr"] == 0.01
    buf = new.state[model.weight]["momentum_buffer"]
    assert torch.equal(buf, old.state[model.weight]["momentum_buffer"])  # the state is restored
    before = model.weight.detach().clone()
    model.zero_grad()
    model(torch.ones(2, 3)).sum().backward()
    assert model.weight.grad is not None
    grad = model.weight.grad.detach().clone()
    new.step()
    # SGD with momentum: p -= lr * (momentum * buf + grad), with the NEW lr.
    expected = before - 0.01 * (0.9 * buf_before(buf, grad) + grad)
    assert torch.allclose(model.weight.detach(), expected, atol=1e-6)


def buf_before(updated: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    """The momentum buffer before the last step (step() updates it in place)."""
    return (updated - grad) / 0.9


def test_a_resumed_run_trains_on_with_more_epochs_and_the_new_lr(live_stack) -> None:
    tiny = {"recipe": "tiny_mlp", "params": {"epochs": 2, "steps_per_epoch": 5, "lr": 0.05}}
    with live_stack.admin_client() as api:
        exp = api.post("/api/experiments", json={"name": "resume-more", "config": tiny}).json()
        first = api.post(f"/api/experiments/{exp['id']}/runs").json()
        assert wait_for_status(api, first["id"], {"succeeded", "failed"})["status"] == "succeeded"
        ckpts = {c["name"]: c for c in api.get(f"/api/runs/{first['id']}/checkpoints").json()}
        assert ckpts["final.pt"]["epoch"] == 2 and ckpts["final.pt"]["step"] == 10

        body = {"checkpoint": "final.pt", "overrides": {"params": {"epochs": 4, "lr": 0.2}}}
        r = api.post(f"/api/runs/{first['id']}/resume", json=body)
        assert r.status_code == 201, r.text
        second = r.json()
        assert second["config"]["params"]["lr"] == 0.2 and second["config"]["params"]["epochs"] == 4
        done = wait_for_status(api, second["id"], {"succeeded", "failed"})
        assert done["status"] == "succeeded", done

        b = api.get(f"/api/runs/{second['id']}/metrics").json()["series"]
        assert b["train/loss"]["step"] == list(range(11, 21))  # continues after step 10
        assert b["epoch"]["value"] == [3.0, 4.0]
        log = api.get(f"/api/runs/{second['id']}/logs").text
        assert "resumed after epoch 2 step 10; optimizer lr 0.2" in log  # the optimizer's own lr
        final = {c["name"]: c for c in api.get(f"/api/runs/{second['id']}/checkpoints").json()}
        assert final["final.pt"]["epoch"] == 4 and final["final.pt"]["step"] == 20
        shown = api.get(f"/api/runs/{second['id']}").json()
        assert shown["config"]["params"]["lr"] == 0.2
