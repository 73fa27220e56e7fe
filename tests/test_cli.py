"""The client CLI: config precedence, --set and spec files, the SSE parser and follow loop
(against a fake HTTP server), and end to end as a subprocess against the live stack."""

from __future__ import annotations

import io
import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch
from rich.console import Console

from tests.conftest import wait_for_status
from tests.stack import REPO, LiveStack, free_port
from torchyard.cli import main
from torchyard.cli.client import Api, describe_detail
from torchyard.cli.config import (
    DEFAULT_SERVER,
    CliConfig,
    ConfigError,
    Target,
    config_path,
    load_config,
    resolve,
    save_config,
)
from torchyard.cli.follow import follow
from torchyard.cli.specs import SpecError, apply_sets, parse_value, read_spec
from torchyard.cli.watch import RunState, SseEvent, SseParser

# --- config file and precedence ---------------------------------------------------------


def test_config_path_prefers_explicit_env_then_xdg_then_home(tmp_path: Path) -> None:
    explicit = tmp_path / "x.json"
    assert config_path({"TORCHYARD_CLI_CONFIG": str(explicit)}) == explicit
    xdg = config_path({"XDG_CONFIG_HOME": str(tmp_path)})
    assert xdg == tmp_path / "torchyard" / "cli.json"
    assert config_path({}) == Path.home() / ".config" / "torchyard" / "cli.json"


def test_flag_beats_env_beats_config_beats_default_for_server_and_token() -> None:
    config = CliConfig(server="http://box:8000", tokens={"http://box:8000": "t-file"})
    env = {"TORCHYARD_URL": "http://envbox:9000/", "TORCHYARD_TOKEN": "t-env"}
    assert resolve(server_flag="flagbox:1", token_flag="t-flag", config=config, env=env) == (
        Target("http://flagbox:1", "t-flag")
    )
    assert resolve(server_flag=None, token_flag=None, config=config, env=env) == Target(
        "http://envbox:9000", "t-env"
    )
    assert resolve(server_flag=None, token_flag=None, config=config, env={}) == Target(
        "http://box:8000", "t-file"
    )
    assert resolve(server_flag=None, token_flag=None, config=CliConfig(), env={}) == Target(
        DEFAULT_SERVER, None
    )


def test_a_saved_token_is_only_sent_to_the_server_it_was_issued_by() -> None:
    config = CliConfig(server="http://box:8000", tokens={"http://box:8000": "t-box"})
    other = resolve(server_flag="http://elsewhere:8000", token_flag=None, config=config, env={})
    assert other.token is None
    same = resolve(server_flag="http://box:8000/", token_flag=None, config=config, env={})
    assert same.token == "t-box"


def test_saved_config_is_private_and_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "cli.json"
    save_config(path, CliConfig(server="http://box:8000", tokens={"http://box:8000": "t"}))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_config(path) == CliConfig(server="http://box:8000", tokens={"http://box:8000": "t"})
    assert list(path.parent.iterdir()) == [path]  # no temp file left behind


def test_an_unreadable_config_is_reported_not_ignored(tmp_path: Path) -> None:
    path = tmp_path / "cli.json"
    path.write_text("{not json")
    with pytest.raises(ConfigError, match="cannot read the CLI config"):
        load_config(path)


# --- --set values and spec files ----------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("0.01", 0.01),
        ("1e-3", 0.001),
        ("3", 3),
        ("true", True),
        ("adam", "adam"),
        ("'3'", "3"),
        ("[1, 2]", [1, 2]),
    ],
)
def test_set_values_are_yaml_scalars_with_exponent_floats(text: str, value: object) -> None:
    parsed = parse_value(text)
    assert parsed == value and type(parsed) is type(value)


def test_set_assigns_dotted_keys_creating_mappings_without_touching_the_original() -> None:
    base = {"recipe": "tiny_mlp", "params": {"epochs": 3}}
    out = apply_sets(base, ["params.lr=0.5", "resources.gpus=0", "params.epochs=5", "seed=9"])
    assert out == {
        "recipe": "tiny_mlp",
        "params": {"epochs": 5, "lr": 0.5},
        "resources": {"gpus": 0},
        "seed": 9,
    }
    assert base == {"recipe": "tiny_mlp", "params": {"epochs": 3}}


@pytest.mark.parametrize("bad", ["params.lr", "=3", "params..lr=1", "recipe.x=1"])
def test_set_rejects_malformed_assignments(bad: str) -> None:
    with pytest.raises(SpecError, match="--set"):
        apply_sets({"recipe": "tiny_mlp"}, [bad])


def test_spec_file_with_config_gives_name_description_and_config(tmp_path: Path) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text("name: sweep\ndescription: lr sweep\nconfig:\n  recipe: tiny_mlp\n")
    spec = read_spec(path)
    assert (spec.name, spec.description, spec.config) == (
        "sweep",
        "lr sweep",
        {"recipe": "tiny_mlp"},
    )


def test_bare_config_file_is_named_after_the_file(tmp_path: Path) -> None:
    path = tmp_path / "digits-small.json"
    path.write_text(json.dumps({"recipe": "digits_cnn", "params": {"lr": 0.01}}))
    spec = read_spec(path)
    assert spec.name == "digits-small" and spec.config["params"] == {"lr": 0.01}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("- a list\n", "must hold a mapping"),
        ("config: {}\nextra: 1\n", "unknown key"),
        ("config: [1]\n", "must be a mapping"),
        ("recipe: [unclosed\n", "not valid"),
    ],
)
def test_bad_spec_files_say_what_is_wrong(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(content)
    with pytest.raises(SpecError, match=message):
        read_spec(path)


# --- SSE parsing, run state, errors ---------------------------------------------------------


def test_sse_parser_dispatches_on_blank_lines_and_skips_comments() -> None:
    parser = SseParser()
    lines = [": keep-alive", "", "event: status", 'data: {"status":', 'data: "running"}', ""]
    events = [e for e in map(parser.feed, lines) if e is not None]
    assert events == [SseEvent("status", '{"status":\n"running"}')]


def test_run_state_tracks_epoch_latest_values_status_and_log_offset() -> None:
    state = RunState.from_run({"id": 4, "status": "queued", "config": {"params": {"epochs": 3}}})
    series = {
        "train/loss": {"step": [1, 2], "value": [0.9, 0.7]},
        "epoch": {"step": [2], "value": [1.0]},
    }
    state.apply(SseEvent("metrics", json.dumps({"series": series})))
    state.apply(SseEvent("log", json.dumps({"text": "x", "offset": 120})))
    state.apply(SseEvent("status", json.dumps({"status": "running", "error": None})))
    assert state.position() == "epoch 1/3" and state.status == "running"
    assert state.metrics_line() == "train/loss 0.7000"
    assert json.loads(state.after_param()) == {"train/loss": 2, "epoch": 2}
    assert state.log_offset == 120 and not state.finished


def test_422_detail_lists_each_error_location_and_message() -> None:
    body = {
        "detail": [
            {"loc": ["body", "config", "params", "lr"], "msg": "Input should be > 0"},
            {"loc": ["query", "rank"], "msg": "too big"},
        ]
    }
    response = httpx.Response(422, json=body)
    assert describe_detail(response) == "config.params.lr: Input should be > 0; query.rank: too big"


# --- following against a fake HTTP server (httpx.MockTransport) ---------------------------


def _sse(*events: tuple[str, dict]) -> bytes:
    return "".join(f"event: {e}\ndata: {json.dumps(d)}\n\n" for e, d in events).encode()


def test_follow_reconnects_where_a_dropped_stream_stopped(monkeypatch) -> None:
    monkeypatch.setattr("torchyard.cli.follow.RETRY_SECONDS", (0.0,))
    run = {"id": 7, "status": "running", "config": {"params": {"epochs": 2}}, "error": None}
    stream_params: list[dict[str, str]] = []

    def server(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/events"):
            stream_params.append(dict(request.url.params))
            if len(stream_params) == 1:  # the connection ends before the run does
                return httpx.Response(200, content=_sse(("metrics", _points(1.0, 10))))
            run["status"] = "succeeded"
            return httpx.Response(200, content=_sse(("status", {"status": "succeeded"})))
        if request.url.path.endswith("/logs"):
            return httpx.Response(200, text="x", headers={"X-Log-Size": "42"})
        return httpx.Response(200, json=run)

    with open(os.devnull, "w") as devnull:
        transport = httpx.MockTransport(server)
        with Api(Target("http://fake", "t"), transport=transport) as api:
            assert follow(api, 7, console=Console(file=devnull)) == 0
    assert stream_params[0] == {"after": "{}", "log_offset": "42"}
    assert json.loads(stream_params[1]["after"]) == {"epoch": 10, "train/loss": 10}


def test_follow_polls_the_run_when_the_server_cannot_stream(monkeypatch) -> None:
    monkeypatch.setattr("torchyard.cli.follow.POLL_SECONDS", 0.0)
    run = {"id": 8, "status": "running", "config": {"params": {"epochs": 1}}, "error": None}
    seen: list[str] = []

    def server(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.path.rsplit("/", 1)[-1])
        if request.url.path.endswith("/events"):
            return httpx.Response(503, json={"detail": "streaming is off"})
        if request.url.path.endswith("/metrics"):
            run["status"] = "failed"
            run["error"] = "RuntimeError: boom"
            return httpx.Response(200, json=_points(1.0, 3))
        return httpx.Response(200, json=run)

    with open(os.devnull, "w") as devnull:
        transport = httpx.MockTransport(server)
        with Api(Target("http://fake", "t"), transport=transport) as api:
            assert follow(api, 8, console=Console(file=devnull)) == 1
    assert seen.count("events") == 1 and "metrics" in seen


def test_follow_says_each_pip_line_while_the_environment_builds_then_running() -> None:
    run = {"id": 9, "status": "queued", "config": {}, "error": None, "phase": None}
    built = {"env_build_seconds": 41.25, "duration_seconds": 3.5}
    phases = [
        ("starting", None),
        ("building environment", "Looking in links: /opt/wheels"),
        ("building environment", "Collecting appdirs==1.4.4"),
        ("building environment", "Collecting appdirs==1.4.4"),  # no news: said once
        ("training", "Successfully installed appdirs-1.4.4"),
    ]
    events = [
        ("status", {"status": "running", "phase": p, "env_build_line": line, **built})
        for p, line in phases
    ]

    def server(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/events"):
            run.update(status="succeeded", phase=None, **built)
            return httpx.Response(200, content=_sse(*events, ("status", {"status": "succeeded"})))
        if request.url.path.endswith("/logs"):
            return httpx.Response(200, text="", headers={"X-Log-Size": "0"})
        return httpx.Response(200, json=run)

    out = io.StringIO()
    with Api(Target("http://fake", "t"), transport=httpx.MockTransport(server)) as api:
        assert follow(api, 9, console=Console(file=out, width=200)) == 0
    assert out.getvalue().splitlines() == [
        "run 9: queued",
        "run 9: starting",
        "run 9: building environment: Looking in links: /opt/wheels",
        "run 9: building environment: Collecting appdirs==1.4.4",
        "run 9: running",
        "run 9 succeeded (environment 41.2 s, training 3.5 s)  ",
    ]


def _points(epoch: float, step: int) -> dict:
    return {
        "series": {
            "epoch": {"step": [step], "value": [epoch]},
            "train/loss": {"step": [step], "value": [0.5]},
        }
    }


# --- main(): usage and connection errors, no server needed ---------------------------------


def test_submit_without_config_or_experiment_is_a_usage_error(capsys) -> None:
    assert main(["submit"]) == 2
    assert "give a CONFIG file" in capsys.readouterr().err


def test_unreachable_server_is_one_line_and_exit_1(capsys, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("TORCHYARD_CLI_CONFIG", str(tmp_path / "cli.json"))
    url = f"http://127.0.0.1:{free_port()}"
    assert main(["ls", "--server", url]) == 1
    err = capsys.readouterr().err
    assert err == f"error: cannot reach the torchyard server at {url} (connection refused)\n"


# --- end to end: the CLI as a subprocess against a real server, worker and torch jobs ------


class Cli:
    def __init__(self, stack: LiveStack, config: Path) -> None:
        self.stack = stack
        self.env = {
            k: v for k, v in os.environ.items() if k not in ("TORCHYARD_URL", "TORCHYARD_TOKEN")
        }
        self.env.update(TORCHYARD_CLI_CONFIG=str(config), COLUMNS="200")

    def __call__(
        self, *args: str, stdin: str | None = None, cwd: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "torchyard.cli", *args],
            cwd=cwd or REPO,
            env=self.env,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=120,
        )


def logged_in_cli(live_stack: LiveStack, config: Path) -> Cli:
    """A CLI logged in as the suite's admin, its config at `config` (each module its own)."""
    runner = Cli(live_stack, config)
    login = runner(
        "login", "--server", live_stack.base_url, "--username", "admin", "--password-stdin",
        stdin=live_stack.admin_password + "\n",
    )  # fmt: skip
    assert login.returncode == 0, login.stderr
    return runner


@pytest.fixture(scope="module")
def cli(live_stack: LiveStack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cli]:
    config = tmp_path_factory.mktemp("cli") / "config" / "cli.json"
    runner = Cli(live_stack, config)
    login = runner(
        "login", "--server", live_stack.base_url, "--username", "admin", "--password-stdin",
        stdin=live_stack.admin_password + "\n",
    )  # fmt: skip
    assert login.returncode == 0, login.stderr
    assert f"logged in to {live_stack.base_url} as admin" in login.stdout
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    yield runner


TINY = "recipe: tiny_mlp\nparams:\n  epochs: 2\n  steps_per_epoch: 5\nseed: 3\n"


@pytest.mark.slow
def test_submit_follow_ls_logs_and_download_through_the_cli(cli: Cli, tmp_path: Path) -> None:
    spec = tmp_path / "smoke.yaml"
    spec.write_text(TINY)
    done = cli("submit", str(spec), "--set", "params.lr=1e-2", "--set", "params.epochs=3", "-f")
    assert done.returncode == 0, done.stderr
    run_id = int(done.stdout.split()[1])  # "run 12 queued (experiment 5): http://.../runs/12"
    assert f"{cli.stack.base_url}/runs/{run_id}" in done.stdout
    assert "epoch 3/3" in done.stderr and "val/acc" in done.stderr
    assert f"run {run_id} succeeded" in done.stderr

    listed = cli("ls", "--json")
    run = next(r for r in json.loads(listed.stdout) if r["id"] == run_id)
    assert run["status"] == "succeeded" and run["config"]["params"]["lr"] == 0.01
    # the real worker's forwarder kept the summaries: 3 epochs x 5 steps, val once an epoch
    assert run["summary"]["train/loss"]["step"] == 15 and run["summary"]["val/acc"]["step"] >= 3
    table = cli("ls", "--limit", "5")
    assert table.returncode == 0 and "smoke" in table.stdout and "succeeded" in table.stdout

    logs = cli("logs", str(run_id))
    assert logs.returncode == 0 and f"run {run_id} finished" in logs.stdout

    got = cli("download", str(run_id), "-o", str(tmp_path), cwd=tmp_path)
    assert got.returncode == 0, got.stderr
    state = torch.load(tmp_path / "final.pt", weights_only=True)
    assert "model" in state and state["epoch"] == 3


@pytest.mark.slow
def test_cancel_exits_3_when_followed_and_a_failing_run_exits_1(cli: Cli, tmp_path: Path) -> None:
    spec = tmp_path / "long.yaml"
    spec.write_text(TINY)
    sets = ["--set", "params.epochs=1000", "--set", "params.step_sleep=0.2"]
    run_id = int(cli("submit", str(spec), *sets, "-q").stdout)
    with cli.stack.admin_client() as api:
        wait_for_status(api, run_id, {"running"}, timeout=60)
        cancelled = cli("cancel", str(run_id))
        assert (
            cancelled.returncode == 0 and f"cancel requested for run {run_id}" in cancelled.stdout
        )
        assert cli("follow", str(run_id)).returncode == 3
        assert api.get(f"/api/runs/{run_id}").json()["status"] == "cancelled"

    failing = cli("submit", str(spec), "--set", "params.fail_at_step=3", "--follow")
    assert failing.returncode == 1
    assert "failed" in failing.stderr and "failing on purpose at step 3" in failing.stderr


@pytest.mark.slow
def test_a_refused_token_or_a_dead_server_is_one_line_without_traceback(cli: Cli) -> None:
    refused = cli("ls", "--token", "not-a-token")
    dead = cli("ls", "--server", f"http://127.0.0.1:{free_port()}")
    for result in (refused, dead):
        assert result.returncode == 1
        assert len(result.stderr.splitlines()) == 1 and "Traceback" not in result.stderr
    assert refused.stderr.startswith("error: the server refused the token (401)")
    assert "run torchyard login" in refused.stderr
    assert dead.stderr.startswith("error: cannot reach the torchyard server")
    invalid = cli("submit", "--experiment", "999999", "--set", "params.lr=0.1")
    assert invalid.returncode == 1 and invalid.stderr.startswith("error: not found (404)")


@pytest.mark.slow
def test_runs_delete_and_experiments_delete_need_yes(cli: Cli, tmp_path: Path) -> None:
    spec = tmp_path / "gone.yaml"
    spec.write_text(TINY)
    run_id = int(cli("submit", str(spec), "-q").stdout)
    with cli.stack.admin_client() as api:
        run = wait_for_status(api, run_id, {"succeeded"}, timeout=120)
        asked = cli("runs", "delete", str(run_id))
        assert asked.returncode == 2 and "--yes" in asked.stdout
        assert api.get(f"/api/runs/{run_id}").status_code == 200

        deleted = cli("runs", "delete", str(run_id), "--yes")
        assert deleted.returncode == 0, deleted.stderr
        assert f"deleted run {run_id};" in deleted.stdout and "freed" in deleted.stdout
        assert api.get(f"/api/runs/{run_id}").status_code == 404

        experiment = run["experiment_id"]
        assert cli("experiments", "delete", str(experiment)).returncode == 2
        gone = cli("experiments", "delete", str(experiment), "-y")
        assert gone.returncode == 0 and f"deleted experiment {experiment}" in gone.stdout
        assert api.get(f"/api/experiments/{experiment}").status_code == 404


SWEEP = """experiment_id: {experiment}
method: random
metric: {{name: val/acc, goal: maximize}}
parameters:
  params.lr: {{distribution: log_uniform, min: 1e-3, max: {top}}}
max_runs: 2
max_concurrent: 2
seed: 5
"""


@pytest.mark.slow
def test_sweep_from_a_spec_file_follows_to_the_best_and_a_bad_spec_names_the_field(
    cli: Cli, tmp_path: Path
) -> None:
    with cli.stack.admin_client() as api:
        body = {"name": "sweepbase", "config": {"recipe": "tiny_mlp", "params": {"epochs": 1}}}
        experiment = api.post("/api/experiments", json=body).json()["id"]
    spec = tmp_path / "sweep.yaml"
    spec.write_text(SWEEP.format(experiment=experiment, top="1e-1"))
    done = cli("sweep", str(spec), "--follow")
    assert done.returncode == 0, done.stderr
    sweep_id = int(done.stdout.split()[1])  # "sweep 3 running: http://.../sweeps/3"
    assert f"{cli.stack.base_url}/sweeps/{sweep_id}" in done.stdout
    with cli.stack.admin_client() as api:
        sweep = api.get(f"/api/sweeps/{sweep_id}").json()
    assert sweep["status"] == "succeeded" and len(sweep["trials"]) == 2
    best = sweep["best"]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"sweep {sweep_id} succeeded: 2/2 done"), done.stderr
    assert f"best val/acc {best['value']:.4g} (run {best['run_id']}: params.lr=" in last

    bad = tmp_path / "bad.yaml"
    bad.write_text(SWEEP.format(experiment=experiment, top="1e-3"))  # min == max
    refused = cli("sweep", str(bad))
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert refused.stderr.startswith("error: invalid request (422): parameters.params.lr.min:")


@pytest.mark.slow
def test_sweep_show_ls_and_cancel_a_running_sweep(cli: Cli, tmp_path: Path) -> None:
    """What a W&B user reaches for after `sweep SPEC`: its state, the list, and a cancel (its
    queued trials cancelled, the running one stopped); a second cancel is the API's 409."""
    config: dict[str, Any] = {"recipe": "tiny_mlp", "params": {"epochs": 1, "steps_per_epoch": 200}}
    with cli.stack.admin_client() as api:
        body: dict[str, Any] = {
            "name": "sweepcancel",
            "config": {**config, "params": {**config["params"]}},
        }
        body["config"]["params"]["step_sleep"] = 0.05  # 10 s a trial: still running below
        experiment = api.post("/api/experiments", json=body).json()["id"]
    spec = tmp_path / "long.yaml"
    spec.write_text(
        SWEEP.format(experiment=experiment, top="1e-1")
        .replace("max_runs: 2", "max_runs: 3")
        .replace("max_concurrent: 2", "max_concurrent: 1")
    )
    started = cli("sweep", "start", str(spec), "--quiet")
    assert started.returncode == 0, started.stderr
    sweep_id = int(started.stdout)

    shown = cli("sweep", "show", str(sweep_id))
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith(f"sweep {sweep_id} running: 0/3 done"), shown.stdout
    assert "best: none yet" in shown.stdout
    listed = cli("sweep", "ls", "--experiment", str(experiment), "--json")
    assert [s["id"] for s in json.loads(listed.stdout)] == [sweep_id]
    table = cli("sweep", "ls")
    rows = [line.split()[:3] for line in table.stdout.splitlines()]
    assert [str(sweep_id), f"#{experiment}", "running"] in rows, table.stdout

    cancelled = cli("sweep", "cancel", str(sweep_id))
    assert cancelled.returncode == 0, cancelled.stderr
    assert cancelled.stdout.startswith(f"sweep {sweep_id} cancelled:"), cancelled.stdout
    with cli.stack.admin_client() as api:
        sweep = api.get(f"/api/sweeps/{sweep_id}").json()
        assert sweep["status"] == "cancelled" and len(sweep["trials"]) == 1
        wait_for_status(api, sweep["trials"][0]["run_id"], {"cancelled"}, timeout=60)
    again = cli("sweep", "cancel", str(sweep_id))
    assert again.returncode == 1 and "Traceback" not in again.stderr
    assert "(409)" in again.stderr and "already ended (cancelled)" in again.stderr, again.stderr
    missing = cli("sweep", "show", "999999")
    assert missing.returncode == 1 and "(404)" in missing.stderr, missing.stderr
