"""torchyard/runtime/member_view.py: the host's paths of a run, as a member is shown them."""

from __future__ import annotations

from torchyard.runtime.member_view import member_view

ENV = {
    "TORCHYARD_RUN_DIR": "/srv/ty/data/runs/12",
    "TORCHYARD_WORKSPACE": "/srv/ty/workspace",
}


def test_the_runs_own_paths_become_run_relative() -> None:
    text = 'File "/srv/ty/data/runs/12/work/train.py", line 3: /srv/ty/data/runs/12/work/x.csv'
    assert member_view(text, ENV) == 'File "work/train.py", line 3: work/x.csv'


def test_the_rest_of_the_data_dir_and_the_workspace_are_named_not_shown() -> None:
    text = (
        "/srv/ty/data/envs/ab12/bin/python /srv/ty/data/runs/3/checkpoints/a.pt "
        "/srv/ty/workspace/exp/t.py"
    )
    assert member_view(text, ENV) == (
        "<data>/envs/ab12/bin/python <data>/runs/3/checkpoints/a.pt workspace/exp/t.py"
    )


def test_outside_a_run_nothing_changes() -> None:
    assert member_view("/srv/ty/data/runs/12/work/x", {}) == "/srv/ty/data/runs/12/work/x"
    # a prefix of a longer name is not a folder of it
    assert member_view("/srv/ty/data/runs/123/x", ENV) == "<data>/runs/123/x"
