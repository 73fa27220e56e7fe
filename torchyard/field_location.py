"""How a field error's location is written for a person, in one place for the server and the
client CLI alike: the CLI installs without the server (`pip install torchyard`), so the one
formatter lives in the base package, standard library only, and `app.errors` takes it from
here."""

from __future__ import annotations

from collections.abc import Sequence


def location_text(loc: Sequence[str | int]) -> str:
    """A location's parts joined by dots, less the leading ``body`` (the user wrote the body's
    fields, not the word), so ``["body", "metrics", 0, "value"]`` reads ``metrics.0.value``;
    '' for the body itself. The CLI, MLflow's messages, the forms and the sweep checks all
    show it this way."""
    parts = list(loc)
    if parts and parts[0] == "body":
        parts = parts[1:]
    return ".".join(str(part) for part in parts)
