"""`torchyard session start/extend/stop` (torchyard/cli/sessions.py) against a served app: the
URL alone on stdout, a --code folder uploaded as its snapshot (an unknown digest refused), the
requirements file's lines in the session's environment, an extension of a session that does not
run refused with the server's words, a stop that cancels it."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.conftest import make_user
from torchyard.cli import main


def test_session_start_extend_stop(
    mlflow_server: str,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TORCHYARD_CLI_CONFIG", str(tmp_path / "cli.json"))
    _username, _password, headers = make_user()
    login = ["--server", mlflow_server, "--token", headers["Authorization"].split()[1]]
    reqs = tmp_path / "requirements.txt"
    reqs.write_text("# tools\nrich>=13\n\n")
    code = tmp_path / "project"
    code.mkdir()
    (code / "explore.py").write_text("print('hi')\n")
    args = ["session", "start", "--gpus", "0", "--hours", "2", "--requirements", str(reqs)]
    args += ["--code", str(code)]
    assert main([*args, *login]) == 0
    captured = capsys.readouterr()
    url = captured.out.strip()
    run_id = int(url.rstrip("/").split("/")[-2])
    assert url == f"{mlflow_server}/sessions/{run_id}/lab/"
    assert f"session {run_id}" in captured.err
    with httpx.Client(base_url=mlflow_server, headers=headers, timeout=30) as api:
        run = api.get(f"/api/runs/{run_id}").json()
    assert run["config"]["session"] == {"hours": 2}
    assert run["config"]["environment"]["requirements"] == ["rich>=13"]
    assert run["config"]["code"].startswith("sha256:")  # the folder, uploaded as a snapshot
    with httpx.Client(base_url=mlflow_server, headers=headers, timeout=30) as api:
        unknown = api.post("/api/sessions", json={"gpus": 0, "code": "sha256:" + "0" * 64})
    assert unknown.status_code == 422 and "no code snapshot" in unknown.text

    assert main(["session", "extend", str(run_id), "--hours", "1", *login]) == 1
    assert "is not running" in capsys.readouterr().err

    assert main(["session", "stop", str(run_id), *login]) == 0
    with httpx.Client(base_url=mlflow_server, headers=headers, timeout=30) as api:
        assert api.get(f"/api/runs/{run_id}").json()["status"] == "cancelled"
