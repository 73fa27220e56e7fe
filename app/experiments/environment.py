"""The config's ``environment`` section: extra packages the run's job imports.

The worker builds a virtual environment per set of requirements, layered on its own (torch
and the worker's packages are shared, never reinstalled): worker/environments.py.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from app.experiments.requirements import (
    MAX_REQUIREMENT_CHARS,
    MAX_REQUIREMENTS,
    RequirementRefused,
    check_requirement,
)


def _requirement(line: str) -> str:
    try:
        return check_requirement(line)
    except RequirementRefused as exc:
        raise ValueError(str(exc)) from None


RequirementLine = Annotated[
    str, Field(max_length=MAX_REQUIREMENT_CHARS), AfterValidator(_requirement)
]


class Environment(BaseModel):
    model_config = ConfigDict(extra="forbid")

    requirements: list[RequirementLine] = Field(
        default_factory=list,
        max_length=MAX_REQUIREMENTS,
        description="PEP 508 requirements installed from the worker's package index into a "
        "virtual environment of the run's own, layered on the worker's (torch is shared); "
        "no pip options, URLs or local paths",
        examples=[["tomli-w==1.2.0"]],
    )
