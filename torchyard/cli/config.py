"""Where the client CLI finds its server and token, and where `torchyard login` keeps them.

Precedence, for the server and for the token: a flag (`--server`, `--token`) beats the
environment (`TORCHYARD_URL`, `TORCHYARD_TOKEN`), which beats the config file, which beats the
default server. Tokens are stored per server URL, so a token saved for the team box is never
sent to another server named by `--server` or `TORCHYARD_URL`.

The file holds a bearer token, so it is written 0600 (atomically, through a temp file in the
same directory) and its directory 0700.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_SERVER = "http://127.0.0.1:8000"
CONFIG_ENV = "TORCHYARD_CLI_CONFIG"
SERVER_ENV = "TORCHYARD_URL"
TOKEN_ENV = "TORCHYARD_TOKEN"


class ConfigError(Exception):
    """The config file exists but cannot be read as ours."""


@dataclass
class CliConfig:
    """The file's content: the server `login` used last, and one token per server."""

    server: str | None = None
    tokens: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"server": self.server, "tokens": self.tokens}


@dataclass(frozen=True)
class Target:
    """The server to talk to and the token to send it (None: none known)."""

    server: str
    token: str | None


def config_path(env: Mapping[str, str] | None = None) -> Path:
    """$TORCHYARD_CLI_CONFIG, else $XDG_CONFIG_HOME/torchyard/cli.json, else ~/.config/..."""
    env = os.environ if env is None else env
    if env.get(CONFIG_ENV):
        return Path(env[CONFIG_ENV]).expanduser()
    base = Path(env["XDG_CONFIG_HOME"]) if env.get("XDG_CONFIG_HOME") else Path.home() / ".config"
    return base / "torchyard" / "cli.json"


def normalize_server(url: str) -> str:
    """`box:8000` and `http://box:8000/` name the same server as `http://box:8000`."""
    url = url.strip()
    if "://" not in url:
        url = "http://" + url
    return url.rstrip("/")


def load_config(path: Path) -> CliConfig:
    if not path.exists():
        return CliConfig()
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ConfigError(f"cannot read the CLI config {path}: {e}") from e
    if not isinstance(raw, dict):
        raise ConfigError(f"the CLI config {path} is not a JSON object")
    tokens = raw.get("tokens") or {}
    server = raw.get("server")
    return CliConfig(
        server=normalize_server(server) if isinstance(server, str) and server else None,
        tokens={
            normalize_server(k): v
            for k, v in tokens.items()
            if isinstance(k, str) and isinstance(v, str)
        },
    )


def save_config(path: Path, config: CliConfig) -> None:
    """Write atomically with mode 0600: the token never sits in a world-readable file."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".cli-", suffix=".json")  # mode 0600
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(config.to_json(), f, indent=2)
            f.write("\n")
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def resolve(
    *,
    server_flag: str | None,
    token_flag: str | None,
    config: CliConfig,
    env: Mapping[str, str] | None = None,
) -> Target:
    """Apply the precedence flag > environment > config file > default, for server and token."""
    env = os.environ if env is None else env
    server = normalize_server(server_flag or env.get(SERVER_ENV) or config.server or DEFAULT_SERVER)
    token = token_flag or env.get(TOKEN_ENV) or config.tokens.get(server)
    return Target(server=server, token=token)
