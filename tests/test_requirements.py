"""A run's requirements: only plain package requirements from the index, refused lines named,
in the config (a 422) and in a snapshot's requirements.txt (worker.environments)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from app.experiments.config.validate import ConfigInvalid, validate_config
from app.experiments.requirements import (
    MAX_REQUIREMENTS,
    RequirementRefused,
    check_requirement,
    normal_form,
    parse_requirements_file,
)
from worker.environments import requirements_for

RECIPE = {"recipe": "tiny_mlp"}


@pytest.mark.parametrize(
    ("line", "taken"),
    [
        ("six", "six"),
        (" tomli-w == 1.2.0 ", "tomli-w==1.2.0"),
        ("requests[socks]>=2,<3", "requests[socks]<3,>=2"),
        ("pkg; python_version >= '3.8'", 'pkg; python_version >= "3.8"'),
    ],
)
def test_plain_requirements_are_taken_in_their_written_form(line: str, taken: str) -> None:
    assert check_requirement(line) == taken


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("-e .", "pip options"),
        ("--index-url https://evil.example/simple", "pip options"),
        ("-r other.txt", "pip options"),
        ("pkg @ https://evil.example/pkg.whl", "URL or a local path"),
        ("pkg@file:///tmp/pkg", "URL or a local path"),
        ("https://evil.example/pkg.whl", "URL or a local path"),
        ("git+https://github.com/x/y", "URL or a local path"),
        ("./vendor/pkg", "URL or a local path"),
        ("/tmp/pkg-1.0-py3-none-any.whl", "URL or a local path"),
        ("~/pkg", "URL or a local path"),
        ("C:\\pkg", "URL or a local path"),
        ("pkg-1.0-py3-none-any.whl", "URL or a local path"),
        ("pkg.tar.gz", "URL or a local path"),
        ("pkg==", "not a valid requirement"),
        ("", "empty"),
        ("a" * 400, "longer than"),
    ],
)
def test_options_urls_and_paths_are_refused(line: str, why: str) -> None:
    with pytest.raises(RequirementRefused, match=why):
        check_requirement(line)


def test_one_spelling_per_requirement_for_the_cache_key() -> None:
    assert normal_form("Tomli_W == 1.2.0") == normal_form("tomli-w==1.2.0")
    assert normal_form("x>=1,<2") == normal_form("X<2, >=1")
    assert normal_form("x[b,a]") == "x[a,b]"


def test_the_config_refuses_a_url_with_a_422_naming_the_item() -> None:
    config = {**RECIPE, "environment": {"requirements": ["six", "x @ https://e.example/x.whl"]}}
    with pytest.raises(ConfigInvalid) as err:
        validate_config(config, loc_prefix=("body", "config"))
    [error] = err.value.errors
    assert error["loc"] == ["body", "config", "environment", "requirements", 1]
    assert "URL or a local path" in error["msg"]


def test_the_config_caps_the_count_and_fills_in_the_default() -> None:
    assert validate_config(RECIPE, loc_prefix=())["environment"] == {"requirements": []}
    many = {**RECIPE, "environment": {"requirements": [f"p{i}" for i in range(201)]}}
    assert MAX_REQUIREMENTS == 200
    with pytest.raises(ConfigInvalid) as err:
        validate_config(many, loc_prefix=())
    assert err.value.errors[0]["loc"] == ["environment", "requirements"]
    ok = {**RECIPE, "environment": {"requirements": ["Six >= 1"]}}
    assert validate_config(ok, loc_prefix=())["environment"] == {"requirements": ["Six>=1"]}


def test_a_requirements_file_comments_and_blank_lines_are_left_out() -> None:
    text = "# pinned\nsix==1.17.0  # a comment\n\n  tomli-w\n-r more.txt\n"
    assert parse_requirements_file(text) == ["six==1.17.0", "tomli-w", "-r more.txt"]


def test_requirements_for_reads_the_snapshots_file_after_the_config(tmp_path: Path) -> None:
    assert requirements_for(["six"], None) == ["six"]
    assert requirements_for(["six"], tmp_path) == ["six"]  # no requirements.txt
    (tmp_path / "requirements.txt").write_text("tomli-w==1.2.0\nsix\n")
    assert requirements_for(["six"], tmp_path) == ["six", "tomli-w==1.2.0"]


def test_requirements_for_refuses_an_option_in_the_file_naming_it(tmp_path: Path) -> None:
    (tmp_path / "requirements.txt").write_text("six\n\n--extra-index-url https://evil/simple\n")
    with pytest.raises(RequirementRefused, match=r"requirements.txt, line 3: .*pip options"):
        requirements_for([], tmp_path)


def test_requirements_for_refuses_a_link_or_a_huge_file(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("six\n")
    snapshot = tmp_path / "snapshot"
    snapshot.mkdir()
    os.symlink(secret, snapshot / "requirements.txt")
    with pytest.raises(RequirementRefused, match="not a regular file"):
        requirements_for([], snapshot)
    (snapshot / "requirements.txt").unlink()
    (snapshot / "requirements.txt").write_text("six\n" * 20_000)
    with pytest.raises(RequirementRefused, match="larger than"):
        requirements_for([], snapshot)
