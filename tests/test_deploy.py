"""The team deployment files (docker-compose.yml, .env.example, the Dockerfiles), checked
without a Docker engine: there is none on the CI machines, so the images are not built here.

The YAML checks always run. When a working `docker compose` plugin or `docker-compose` binary
is on PATH, `config -q` also validates the file against Compose's own schema; without one the
YAML checks below are the check (reported in the test's output, not skipped).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.settings import Settings

REPO = Path(__file__).resolve().parent.parent
COMPOSE = REPO / "docker-compose.yml"
ENV_EXAMPLE = REPO / ".env.example"

# Settings a team has to see in .env.example (the rest keep working defaults).
TEAM_SETTINGS = {
    "database_url",
    "broker_url",
    "data_dir",
    "artifact_store",
    "secret_key",
    "admin_password",
    "token_ttl_hours",
    "worker_host",
    "fake_gpus",
    "worker_concurrency",
    "lease_ttl_seconds",
    "starvation_seconds",
    "job_isolation",
}
# Compose variables of .env.example that are not torchyard settings.
CONTAINER_VARIABLES = {
    "POSTGRES_USER",
    "POSTGRES_PASSWORD",
    "POSTGRES_DB",
    "POSTGRES_BIND",
    "REDIS_BIND",
    "REDIS_PASSWORD",
    "API_BIND",
}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(data, dict)
    return data


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, Any]:
    return dict(compose["services"])


def env_example() -> dict[str, str]:
    """Variable -> value for every assignment line; each must follow a comment line."""
    values: dict[str, str] = {}
    previous = ""
    for line in ENV_EXAMPLE.read_text().splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            name, sep, value = stripped.partition("=")
            assert sep and re.fullmatch(r"[A-Z][A-Z0-9_]*", name), f"not NAME=value: {line!r}"
            assert previous.startswith("#"), f"{name} in .env.example has no comment above it"
            assert name not in values, f"{name} twice in .env.example"
            values[name] = value
        previous = stripped
    return values


def command_text(service: dict[str, Any]) -> str:
    command = service["command"]
    return command if isinstance(command, str) else " ".join(command)


def test_services_and_images(services: dict[str, Any]) -> None:
    assert set(services) == {"postgres", "redis", "api", "worker"}
    assert services["postgres"]["image"].startswith("postgres:")
    assert services["redis"]["image"].startswith("redis:")
    assert services["api"]["build"] == {"context": ".", "dockerfile": "app/Dockerfile"}
    assert services["worker"]["build"] == {"context": ".", "dockerfile": "worker/Dockerfile"}
    for path in ("app/Dockerfile", "worker/Dockerfile", ".dockerignore"):
        assert (REPO / path).is_file(), path


def test_every_service_restarts_unless_stopped(services: dict[str, Any]) -> None:
    for name, service in services.items():
        assert service.get("restart") == "unless-stopped", name


def test_healthchecks(services: dict[str, Any]) -> None:
    def test_of(name: str) -> str:
        check = services[name]["healthcheck"]["test"]
        return check if isinstance(check, str) else " ".join(check)

    assert "pg_isready" in test_of("postgres")
    assert "redis-cli ping" in test_of("redis")
    api_check = test_of("api")
    assert "python" in api_check and "urllib" in api_check and "/api/ready" in api_check
    assert ":8000/" in api_check


def test_startup_order_waits_for_healthy_services(services: dict[str, Any]) -> None:
    api_deps = services["api"]["depends_on"]
    assert api_deps["postgres"]["condition"] == "service_healthy"
    assert api_deps["redis"]["condition"] == "service_healthy"
    # the worker starts on a schema the api has upgraded
    assert services["worker"]["depends_on"]["api"]["condition"] == "service_healthy"


def test_api_upgrades_the_schema_then_serves_as_up_does_with_several_processes(
    services: dict[str, Any],
) -> None:
    """`torchyard serve`: the supervisor of `up` (a warmed spare, no health-ping kills), not
    uvicorn's --workers (issue 39)."""
    command = command_text(services["api"])
    upgrade, serve = command.find("torchyard db upgrade"), command.find("torchyard serve ")
    assert 0 <= upgrade < serve, command
    # `&&`: a failed migration must not start a server
    assert "&&" in command[upgrade:serve], command
    assert "uvicorn" not in command and "--workers" not in command
    assert "--host 0.0.0.0" in command and "--port 8000" in command
    assert services["api"]["environment"]["TORCHYARD_API_PROCESSES"].endswith(":-4}")
    assert any(
        str(p).endswith(":8000:8000") or str(p) == "8000:8000" for p in services["api"]["ports"]
    )


def test_worker_runs_torchyard_worker_with_all_gpus_reserved(services: dict[str, Any]) -> None:
    worker = services["worker"]
    assert command_text(worker) == "torchyard worker"
    devices = worker["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}]
    dockerfile = (REPO / "worker/Dockerfile").read_text()
    # The worker's stack; NVML inventory; SummaryWriter scripts
    assert '"/tmp/torchyard[server,gpu,tensorboard]"' in dockerfile
    assert "download.pytorch.org/whl/cpu" not in dockerfile  # the CUDA build of torch
    api_dockerfile = (REPO / "app/Dockerfile").read_text()
    assert "download.pytorch.org/whl/cpu" in api_dockerfile
    assert '"/tmp/torchyard[server]"' in api_dockerfile  # the server, no test tools


def test_settings_come_from_the_env_file_and_artifacts_are_shared(
    compose: dict[str, Any], services: dict[str, Any]
) -> None:
    for name in ("postgres", "api", "worker"):
        assert services[name]["env_file"] in (".env", [".env"]), name
    data_dir = env_example()["TORCHYARD_DATA_DIR"]
    for name in ("api", "worker"):
        assert f"artifacts:{data_dir}" in services[name]["volumes"], name
    assert any(
        v.startswith("pgdata:/var/lib/postgresql/data") for v in services["postgres"]["volumes"]
    )
    assert {"pgdata", "artifacts"} <= set(compose["volumes"])


def test_env_example_documents_real_settings_and_every_team_setting() -> None:
    values = env_example()
    fields = set(Settings.model_fields)
    settings = {n for n in values if n.startswith("TORCHYARD_")}
    unknown = {n for n in settings if n.removeprefix("TORCHYARD_").lower() not in fields}
    assert not unknown, f"not settings of app/settings.py: {sorted(unknown)}"
    assert TEAM_SETTINGS <= fields  # this list itself stays in step with Settings
    missing = {f for f in TEAM_SETTINGS if f"TORCHYARD_{f.upper()}" not in settings}
    assert not missing, f".env.example does not document: {sorted(missing)}"
    assert set(values) - settings <= CONTAINER_VARIABLES, set(values) - settings
    # the values are what the compose services are called and what the settings accept
    assert values["TORCHYARD_DATABASE_URL"].startswith("postgresql+psycopg://")
    assert "@postgres:5432/" in values["TORCHYARD_DATABASE_URL"]
    assert values["TORCHYARD_BROKER_URL"] == "redis://:change-me-redis@redis:6379/0"
    assert values["REDIS_PASSWORD"] == "change-me-redis"  # jobs share the worker's network
    assert f":{values['POSTGRES_PASSWORD']}@" in values["TORCHYARD_DATABASE_URL"]
    parsed = Settings.model_validate(
        {n.removeprefix("TORCHYARD_").lower(): v for n, v in values.items() if n in settings}
    )
    assert str(parsed.data_dir) == values["TORCHYARD_DATA_DIR"]


def test_every_variable_the_compose_file_interpolates_is_in_env_example() -> None:
    text = COMPOSE.read_text()
    # ${NAME...} is compose interpolation; $${NAME} is left to the container's shell
    used = set(re.findall(r"(?<!\$)\$\{([A-Z][A-Z0-9_]*)", text))
    shell = set(re.findall(r"\$\$\{([A-Z][A-Z0-9_]*)", text))
    assert used and shell
    assert (used | shell) <= set(env_example()), (used | shell) - set(env_example())


def compose_command() -> list[str] | None:
    """A Compose that works here: the docker plugin, else docker-compose; None if neither."""
    candidates: list[list[str]] = []
    if shutil.which("docker"):
        candidates.append(["docker", "compose"])
    if shutil.which("docker-compose"):
        candidates.append(["docker-compose"])
    for candidate in candidates:
        try:
            probe = subprocess.run(
                [*candidate, "version"], capture_output=True, text=True, timeout=30
            )
        except (OSError, subprocess.TimeoutExpired):
            continue
        if probe.returncode == 0:
            return candidate
    return None


def test_compose_config_when_a_compose_client_is_present(tmp_path: Path) -> None:
    command = compose_command()
    if command is None:
        if shutil.which("docker") and os.environ.get("CI") == "true":
            pytest.fail(
                "a docker client is here but no compose: `make compose` installs Debian's "
                "docker-compose so that `config` is checked"
            )
        # No docker client at all: the YAML tests above are the check.
        print("no working `docker compose` / `docker-compose`: validated by the YAML tests only")
        return
    project = tmp_path / "project"
    for path in ("docker-compose.yml", "app/Dockerfile", "worker/Dockerfile", ".dockerignore"):
        (project / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / path, project / path)
    shutil.copy(ENV_EXAMPLE, project / ".env")
    result = subprocess.run(
        [*command, "-f", str(project / "docker-compose.yml"), "config", "-q"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr


def test_the_team_worker_requires_the_job_sandbox_and_may_build_it(
    services: dict[str, Any],
) -> None:
    """docs/security.md: a team deployment isolates every job or does not start its worker."""
    assert env_example()["TORCHYARD_JOB_ISOLATION"] == "bwrap"
    worker = services["worker"]
    assert "SYS_ADMIN" in worker["cap_add"]
    assert {"seccomp=unconfined", "apparmor=unconfined"} <= set(worker["security_opt"])
    assert "bubblewrap" in (REPO / "worker/Dockerfile").read_text()
    assert "cap_add" not in services["api"]  # the api runs no job


def test_the_multi_node_override_puts_the_worker_in_the_hosts_network(
    services: dict[str, Any],
) -> None:
    """docker-compose.multi-node.yml (docs/multi-node.md): the other GPU hosts reach a worker's
    jobs at its host's address, so the worker leaves compose's bridge network; its address is
    required there, and every variable it interpolates is documented in .env.example."""
    path = REPO / "docker-compose.multi-node.yml"
    override = yaml.safe_load(path.read_text())
    worker = override["services"]["worker"]
    assert worker["network_mode"] == "host"
    assert "NET_ADMIN" in worker["cap_add"]  # nft: the multi-node job's rules (job_firewall)
    assert "ports" not in worker  # nothing to publish in the host's network
    assert ":?" in worker["environment"]["TORCHYARD_WORKER_ADDRESS"]
    assert set(override["services"]) <= set(services)
    used = set(re.findall(r"(?<!\$)\$\{([A-Z][A-Z0-9_]*)", path.read_text()))
    assert used == {"TORCHYARD_WORKER_ADDRESS", "TORCHYARD_WORKER_INTERFACE"}
    assert used <= set(env_example())
