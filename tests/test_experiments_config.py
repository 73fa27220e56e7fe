"""The run config model (app/experiments/config/): one typed model from the API to the
launcher, every default in it, the stored JSON unchanged by a round trip through it."""

from __future__ import annotations

import dataclasses

import pytest

from app.experiments.config.model import RunConfig, ScriptConfig, run_config
from app.experiments.config.validate import ConfigInvalid, validate_config
from app.settings import get_settings
from tests.factories import DEFAULT_LIMITS
from torchyard.contract import RunSpec


def test_a_stored_config_read_back_and_stored_again_is_the_same_json() -> None:
    stored = validate_config(
        {"recipe": "tiny_mlp", "params": {"lr": 0.1}, "resources": {"nproc": 2}},
        loc_prefix=("config",),
    )
    assert stored["resources"] == {
        "gpus": 0,
        "nproc": 2,
        "launcher": "torchrun",
        "pool": "local",
        **DEFAULT_LIMITS,
    }
    assert run_config(stored).stored() == stored


def test_limits_default_to_the_settings_and_a_config_may_set_its_own(monkeypatch) -> None:
    monkeypatch.setattr(get_settings(), "run_memory_gb", 2.0)
    typed = run_config({"recipe": "tiny_mlp", "resources": {"disk_gb": 0.2}})
    assert typed.resources.memory_gb == 2 and typed.resources.disk_gb == 0.2
    assert typed.resources.cpus == 4 and typed.resources.max_processes == 4096


def test_a_workspace_scripts_config_has_no_code_keys() -> None:
    typed = run_config({"script": "train.py", "args": ["--x"], "seed": 3})
    assert isinstance(typed, ScriptConfig) and typed.args == ["--x"] and typed.code is None
    assert "code" not in typed.stored() and "code_origin" not in typed.stored()


def test_the_launch_spec_takes_the_models_defaults_and_has_none_of_its_own() -> None:
    assert run_config({"recipe": "tiny_mlp"}).run_spec() == RunSpec(
        nodes=1, nproc=1, gpus=0, max_restarts=0, launcher="torchrun"
    )
    assert all(f.default is dataclasses.MISSING for f in dataclasses.fields(RunSpec))
    spec = run_config(
        {"recipe": "tiny_mlp", "max_restarts": 2, "resources": {"gpus": 1, "launcher": "none"}}
    ).run_spec()
    assert spec == RunSpec(nodes=1, nproc=1, gpus=1, max_restarts=2, launcher="none")
    spec = run_config({"recipe": "tiny_mlp", "resources": {"nodes": 2, "nproc": 2}}).run_spec()
    assert spec == RunSpec(nodes=2, nproc=2, gpus=0, max_restarts=0, launcher="torchrun")


def test_a_multi_node_config_keeps_its_nodes_and_a_single_host_one_stores_none() -> None:
    stored = run_config({"recipe": "tiny_mlp", "resources": {"nodes": 3, "gpus": 2}}).stored()
    assert stored["resources"]["nodes"] == 3 and run_config(stored).stored() == stored
    assert "nodes" not in run_config({"recipe": "tiny_mlp"}).stored()["resources"]
    assert run_config({"recipe": "tiny_mlp", "resources": {"nodes": 1}}).resources.nodes == 1


@pytest.mark.parametrize(
    ("resources", "needle"),
    [
        ({"nodes": 0}, "greater than or equal to 1"),
        ({"nodes": 65}, "less than or equal to 64"),
        ({"nodes": 1.5}, "valid integer"),
        ({"nodes": 2, "launcher": "none"}, "starts its own ranks: nodes must be 1 (got 2)"),
        ({"nproc": 2, "launcher": "none"}, "starts its own ranks: nproc must be 1 (got 2)"),
    ],
)
def test_nodes_is_validated_like_the_other_resources(resources: dict, needle: str) -> None:
    with pytest.raises(ConfigInvalid) as caught:
        validate_config({"recipe": "tiny_mlp", "resources": resources}, loc_prefix=("config",))
    assert needle in str(caught.value.errors), caught.value.errors


def test_an_old_rows_config_whose_recipe_is_gone_still_gives_its_common_part() -> None:
    typed = run_config({"recipe": "renamed_since", "max_restarts": 2, "params": {"x": 1}})
    assert type(typed) is RunConfig
    assert typed.max_restarts == 2 and typed.resources.nproc == 1
    assert run_config({}).checkpoints.keep_last == 2


def test_an_invalid_common_part_is_still_an_error() -> None:
    with pytest.raises(ValueError):
        run_config({"recipe": "tiny_mlp", "resources": {"nproc": 0}})


def test_a_misspelled_script_or_key_is_named_with_the_key_meant() -> None:
    # issue 41: `scirpt:` was "unknown or missing recipe ... a script path in the workspace"
    with pytest.raises(ConfigInvalid) as caught:
        validate_config({"scirpt": "train.py", "params": {}}, loc_prefix=("body", "config"))
    assert [(e["loc"], e["msg"]) for e in caught.value.errors] == [
        (["body", "config", "scirpt"], "unknown key 'scirpt': did you mean script?")
    ]
    for config, loc, msg in (
        ({"recipe": "tiny_mlp", "sed": 1}, ["sed"], "unknown key 'sed': did you mean seed?"),
        (
            {"script": "x.py", "resources": {"gpu": 1}},
            ["resources", "gpu"],
            "unknown key 'gpu': did you mean gpus?",
        ),
        ({"recipe": "tiny_mlp", "zzzzzz": 1}, ["zzzzzz"], "unknown key 'zzzzzz'"),
    ):
        with pytest.raises(ConfigInvalid) as caught:
            validate_config(config, loc_prefix=("body", "config"))
        assert [(e["loc"], e["msg"]) for e in caught.value.errors] == [
            (["body", "config", *loc], msg)
        ], config
    # no recipe, no script and nothing misspelled: the recipe is what is missing
    with pytest.raises(ConfigInvalid, match="unknown or missing recipe"):
        validate_config({"params": {}}, loc_prefix=("body", "config"))


def test_an_unknown_key_is_an_error_naming_it() -> None:
    with pytest.raises(ConfigInvalid) as caught:
        validate_config({"recipe": "tiny_mlp", "bogus": 1}, loc_prefix=("body", "config"))
    assert [(e["type"], e["loc"]) for e in caught.value.errors] == [
        ("extra_forbidden", ["body", "config", "bogus"])
    ]
