"""The `torchyard` console script: the client CLI, its own package, which the server never
imports and which imports nothing of the server.

Client commands (`login`, `submit`, `sweep`, `follow`, `ls`, `logs`, `cancel`, `download`,
`files`, `export`, `resume`, `token`, `users`, `views`, `runs delete`, `experiments edit|delete`)
speak only the REST API (every URL in torchyard/cli/endpoints.py), so they work from a laptop
against the team box, in the base install (`pip install torchyard`: typer, rich, httpx,
PyYAML). Server commands (`up`, `worker`, `db`, `admin`) run on the torchyard host: declared
here, their work is the composition root's (torchyard.compose), imported only when one runs
and the `server` extra is there. `main` returns the exit code instead of exiting, so tests and
the console-script wrapper share it.
"""

from __future__ import annotations

from collections.abc import Sequence

import httpx
import typer

from torchyard.cli import (
    admin,
    commands,
    delete,
    experiments,
    export,
    fleet,
    importers,
    run_files,
    runs,
    server,
    sessions,
    sweeps,
    tokens,
    users,
    views,
)
from torchyard.cli.client import CliError
from torchyard.cli.common import CLIENT_PANEL, err
from torchyard.cli.config import ConfigError
from torchyard.cli.specs import SpecError

__all__ = ["app", "main"]

EXIT_USAGE = 2

app = typer.Typer(
    name="torchyard",
    help="Launch, watch and fetch PyTorch training runs on a shared GPU box.",
    epilog="Exit codes: 0 ok (a followed run succeeded), 1 error or failed run, "
    "2 usage error, 3 followed run cancelled, 130 interrupted.",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
server.register(app)
commands.register(app)
runs.register(app)
run_files.register(app)
export.register(app)
importers.register(app)
sweeps.register(app)
views.register(app)
experiments.register()
delete.register(app, CLIENT_PANEL)
users.register(app)
tokens.register(app)
sessions.register(app)
admin.register(app)
fleet.register(app)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; errors become one `error: ...` line on stderr, never a traceback."""
    command = typer.main.get_command(app)
    try:
        command.main(args=list(argv) if argv is not None else None, prog_name="torchyard")
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except CliError as e:
        _error(e.message)
        return e.exit_code
    except SpecError as e:
        _error(str(e))
        return EXIT_USAGE
    except (ConfigError, OSError) as e:  # e.g. the config directory is not writable
        _error(str(e))
        return 1
    except httpx.InvalidURL as e:
        _error(f"invalid server URL: {e}")
        return EXIT_USAGE
    return 0


def _error(message: str) -> None:
    err.print(f"error: {message}", markup=False, highlight=False, soft_wrap=True)
