"""app/errors.py: the one builder of a field error and the one way its location is written
for a person (the CLI, MLflow's messages, the forms and the sweep checks all use it)."""

from __future__ import annotations

from app.errors import field_error
from torchyard.field_location import location_text


def test_a_location_reads_as_dotted_parts_without_the_leading_body() -> None:
    assert location_text(["body", "metrics", 0, "value"]) == "metrics.0.value"
    assert location_text(("query", "filter")) == "query.filter"
    assert location_text(["config", "optimizer", "lr"]) == "config.optimizer.lr"
    assert location_text(["body"]) == "" and location_text([]) == ""
    # only the request part is dropped: a field of the body named "body" stays
    assert location_text(["body", "message", "body"]) == "message.body"


def test_a_field_errors_location_is_what_the_text_shows() -> None:
    error = field_error(["body", "name"], "must not be empty", "")
    assert location_text(error["loc"]) == "name"
