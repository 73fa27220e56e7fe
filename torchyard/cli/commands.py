"""Client commands that start or steer runs: login, submit, follow, resume, cancel."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from torchyard.cli import endpoints as ep
from torchyard.cli.client import Api, ApiError, CliError
from torchyard.cli.code_upload import ship
from torchyard.cli.common import (
    CLIENT_PANEL,
    EXIT_INTERRUPTED,
    RunArg,
    ServerOpt,
    TokenOpt,
    connect,
    err,
    find_checkpoint,
    out,
)
from torchyard.cli.config import Target, config_path, load_config, resolve, save_config
from torchyard.cli.follow import follow as follow_run
from torchyard.cli.specs import apply_sets, read_spec

FOLLOW_HELP = "show progress until the run ends; exit 0 succeeded, 1 failed, 3 cancelled"
FollowOpt = Annotated[bool, typer.Option("--follow", "-f", help=FOLLOW_HELP)]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="print only the new run's id")]
CODE_HELP = (
    "upload DIR as the run's code: what git tracks there (tracked and untracked-not-ignored "
    "files; outside git every file but .git, __pycache__, virtual environments, node_modules "
    "and files over 50 MiB), with the commit, branch, remote and uncommitted diff recorded; "
    "`script` is then relative to DIR. Default for a config with a `script` and no `code`: "
    "the CONFIG file's directory"
)
NO_CODE_HELP = "upload no code: `script` names a file in the server's workspace, as before"


def login(
    server: ServerOpt = None,
    username: Annotated[str | None, typer.Option(help="prompted for when omitted")] = None,
    password_stdin: Annotated[
        bool, typer.Option("--password-stdin", help="read the password from stdin's first line")
    ] = False,
) -> None:
    """Log in and save the server and a token to the CLI config (mode 0600)."""
    path = config_path()
    config = load_config(path)
    target = resolve(server_flag=server, token_flag=None, config=config)
    if password_stdin:
        if username is None:
            raise typer.BadParameter("--password-stdin needs --username", param_hint="--username")
        password = sys.stdin.readline().rstrip("\r\n")
    else:
        username = username or typer.prompt("username")
        password = typer.prompt("password", hide_input=True)
    with Api(Target(target.server, None)) as api:
        try:
            token = api.json(ep.AUTH_TOKEN(), data={"username": username, "password": password})
        except ApiError as e:
            if e.status == 401:
                raise CliError(f"login failed (401): {e.detail}") from e
            raise
    access_token = str(token["access_token"])
    with Api(Target(target.server, access_token)) as api:
        me = api.json(ep.ME())
    config.server = target.server
    config.tokens[target.server] = access_token
    try:
        save_config(path, config)
    except OSError as e:
        raise CliError(f"cannot save the CLI config {path}: {e.strerror or e}") from e
    role = " (admin)" if me.get("is_admin") else ""
    out.print(f"logged in to {target.server} as {me['username']}{role}; token saved to {path}")
    if me.get("must_change_password"):
        out.print(
            "your password was generated for you: change it before anything else "
            f"(torchyard users passwd {me['username']})"
        )


def _run_created(api: Api, run: dict[str, Any], what: str, quiet: bool) -> None:
    if quiet:
        out.print(run["id"])
    else:
        page = api.page_url(ep.RUN_PAGE(run_id=run["id"]))
        out.print(f"run {run['id']} {run['status']} ({what}): {page}")


def _follow_or_exit(api: Api, run_id: int, follow: bool) -> None:
    if not follow:
        return
    try:
        code = follow_run(api, run_id, console=err)
    except KeyboardInterrupt:
        err.print(f"stopped following; run {run_id} keeps running (torchyard cancel {run_id})")
        raise typer.Exit(EXIT_INTERRUPTED) from None
    raise typer.Exit(code)


def submit(
    config_file: Annotated[
        Path | None,
        typer.Argument(
            metavar="CONFIG",
            help="YAML/JSON: an experiment spec {name, description, config} or a bare config",
            show_default=False,
        ),
    ] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", metavar="KEY=VALUE", help="e.g. params.lr=0.01 (repeatable)"),
    ] = None,
    name: Annotated[str | None, typer.Option(help="experiment name (default: file's)")] = None,
    experiment: Annotated[
        int | None,
        typer.Option(help="add a run to this experiment (CONFIG/--set become overrides)"),
    ] = None,
    priority: Annotated[int, typer.Option(min=-1000, max=1000, help="higher starts first")] = 0,
    pool: Annotated[
        str | None,
        typer.Option(
            metavar="NAME",
            help="the pool whose workers run it (resources.pool: 'local', or a Slurm pool)",
            show_default=False,
        ),
    ] = None,
    code: Annotated[
        Path | None,
        typer.Option("--code", metavar="DIR", help=CODE_HELP, file_okay=False, show_default=False),
    ] = None,
    no_code: Annotated[bool, typer.Option("--no-code", help=NO_CODE_HELP)] = False,
    follow: FollowOpt = False,
    quiet: QuietOpt = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Submit a run: a new experiment from CONFIG, or a new run of --experiment ID.

    A config with a `script` ships its code: CONFIG's directory (or --code DIR) as git sees it.
    With --no-code the script is one in the server's workspace instead."""
    sets = set_ or []
    if config_file is None and experiment is None:
        raise typer.BadParameter("give a CONFIG file, or --experiment ID", param_hint="CONFIG")
    if name is not None and experiment is not None:
        raise typer.BadParameter(
            "names a new experiment; not with --experiment", param_hint="--name"
        )
    spec = read_spec(config_file) if config_file is not None else None
    config = apply_sets(spec.config if spec else {}, sets)
    if pool is not None:  # the name as typed (a --set value is a YAML scalar: 1e3 a number)
        resources = config.get("resources")
        config["resources"] = {**(resources if isinstance(resources, dict) else {}), "pool": pool}
    code_dir = _code_dir(config, config_file, code=code, no_code=no_code, new=experiment is None)
    body: dict[str, Any]
    with connect(server, token) as api:
        if code_dir is not None:
            script = config.get("script")
            config.update(
                ship(
                    api,
                    code_dir,
                    script=script if isinstance(script, str) else None,
                    console=err,
                )
            )
        if experiment is None:
            assert spec is not None
            # One request, one transaction: the experiment commits with its run or not at all
            # (issue 39: a second request cut or refused left an experiment without a run).
            body = {
                "name": name or spec.name,
                "description": spec.description,
                "config": config,
                "run": {"overrides": {}, "priority": priority},
            }
            created = api.json(ep.EXPERIMENT_CREATE(), json=body)
            experiment, run = int(created["id"]), created["run"]
        else:
            body = {"overrides": config, "priority": priority}
            run = api.json(ep.EXPERIMENT_RUN_CREATE(experiment_id=experiment), json=body)
        _run_created(api, run, f"experiment {experiment}", quiet)
        _follow_or_exit(api, int(run["id"]), follow)


def _code_dir(
    config: dict[str, Any], config_file: Path | None, *, code: Path | None, no_code: bool, new: bool
) -> Path | None:
    """The directory to ship as the run's code, or None (a recipe, a workspace script, a
    config that already names its `code` snapshot, or --no-code)."""
    if code is not None and no_code:
        raise typer.BadParameter("--code and --no-code exclude each other", param_hint="--code")
    if code is not None:
        if "recipe" in config:
            raise typer.BadParameter(
                "ships a script's code; this config runs a built-in recipe", param_hint="--code"
            )
        return code
    if no_code or not new or config_file is None:
        return None
    if "script" in config and "code" not in config:
        return config_file.parent
    return None


def follow(run: RunArg, server: ServerOpt = None, token: TokenOpt = None) -> None:
    """Show a run's progress until it ends. Exit 0 succeeded, 1 failed, 3 cancelled."""
    with connect(server, token) as api:
        _follow_or_exit(api, run, True)


def resume(
    run: RunArg,
    checkpoint: Annotated[
        str | None, typer.Argument(help="checkpoint name (default: the newest)")
    ] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option(
            "--set", metavar="KEY=VALUE", help="override, e.g. params.epochs=20 (repeatable)"
        ),
    ] = None,
    follow: FollowOpt = False,
    quiet: QuietOpt = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Start a new run that continues RUN from one of its checkpoints, with --set overrides
    (more epochs, another lr); from final.pt, raise params.epochs."""
    overrides = apply_sets({}, set_ or [])
    with connect(server, token) as api:
        name = find_checkpoint(api, run, checkpoint)["name"]
        body = {"checkpoint": name, "overrides": overrides}
        new = api.json(ep.RUN_RESUME(run_id=run), json=body)
        _run_created(api, new, f"resuming run {run} from {name}", quiet)
        _follow_or_exit(api, int(new["id"]), follow)


def cancel(run: RunArg, server: ServerOpt = None, token: TokenOpt = None) -> None:
    """Cancel a run: every process of it ends and its GPUs are freed."""
    with connect(server, token) as api:
        result = api.json(ep.RUN_CANCEL(run_id=run))
        out.print(f"cancel requested for run {run} (status: {result['status']})")


def register(app: typer.Typer) -> None:
    for command in (login, submit, follow, resume, cancel):
        app.command(rich_help_panel=CLIENT_PANEL)(command)
