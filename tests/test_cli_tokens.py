"""`torchyard token create` (torchyard/cli/tokens.py) against a served app: the token alone on
stdout, good for MLFLOW_TRACKING_TOKEN (the real mlflow client logs with it), its life as asked."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime
from pathlib import Path

import httpx
import mlflow
import pytest
from mlflow.tracking import MlflowClient

from tests.conftest import make_user
from torchyard.cli import main
from torchyard.cli.client import CliError
from torchyard.cli.tokens import duration_hours


@pytest.mark.parametrize(("text", "hours"), [("30d", 720), ("12h", 12), ("2w", 336), ("90m", 1.5)])
def test_expiry_durations(text: str, hours: float) -> None:
    assert duration_hours(text) == hours


@pytest.mark.parametrize("text", ["30", "0d", "-1d", "1y", "d"])
def test_a_bad_expiry_is_refused(text: str) -> None:
    with pytest.raises(CliError, match="--expires"):
        duration_hours(text)


def test_token_create_prints_a_token_mlflow_logs_with(
    mlflow_server: str,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TORCHYARD_CLI_CONFIG", str(tmp_path / "cli.json"))
    username, _password, headers = make_user()
    login = headers["Authorization"].split()[1]
    args = [
        "token",
        "create",
        "--server",
        mlflow_server,
        "--token",
        login,
        "--name",
        "mlflow laptop",
    ]
    assert main([*args, "--expires", "2h"]) == 0
    captured = capsys.readouterr()
    token = captured.out.strip()
    assert token and "\n" not in token
    assert "mlflow laptop" in captured.err and "MLFLOW_TRACKING_TOKEN" in captured.err

    with httpx.Client(base_url=mlflow_server, timeout=30) as api:
        listed = api.get("/api/tokens", headers={"Authorization": f"Bearer {token}"}).json()
    mine = next(t for t in listed if t["name"] == "mlflow laptop")
    left = datetime.fromisoformat(mine["expires_at"]) - datetime.now(UTC)
    assert 1.9 * 3600 < left.total_seconds() <= 2 * 3600

    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", token)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    mlflow.set_tracking_uri(mlflow_server)
    client = MlflowClient()
    run = client.create_run(client.create_experiment(f"token-{secrets.token_hex(4)}"))
    assert client.get_run(run.info.run_id).info.user_id == username

    assert main([*args, "--expires", "soon"]) == 1
    assert "--expires 'soon'" in capsys.readouterr().err
