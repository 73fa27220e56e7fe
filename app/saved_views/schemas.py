"""The saved view's request and response bodies.

`state` is what a teammate's browser will apply, so it is hostile input: every key is named
(an unknown one is a 422 naming it), every string and list is bounded, the nesting is fixed
by these models (at most three levels), and the whole is capped in size
(MAX_STATE_BYTES as JSON), so a view can neither grow the table nor stall a page.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from app.timeutil import UtcDateTime

MAX_STATE_BYTES = 16_384
Text = Annotated[str, Field(max_length=2000)]
Key = Annotated[str, Field(min_length=1, max_length=300)]


class _Strict(BaseModel):
    # strict: `0` is not `false` and `"0.5"` not a number (a state is sent back as it is)
    model_config = ConfigDict(extra="forbid", strict=True)


class FilterState(_Strict):
    """The runs table's filters: the filter language's text, a status and a tag."""

    text: Text = ""
    status: Annotated[str, Field(max_length=32)] = ""
    tag: Annotated[str, Field(max_length=200)] = ""


class GroupState(_Strict):
    """Grouping of runs by a param or tag, with a band drawn around each group's mean."""

    by: Annotated[str, Field(max_length=300)] | None = None
    band: Annotated[str, Field(max_length=32)] | None = None


class ChartsState(_Strict):
    """The curves' setup: the keys charted (None: all), smoothing, x axis and log scale."""

    keys: Annotated[list[Key], Field(max_length=500)] | None = None
    smoothing: Annotated[float, Field(ge=0, le=0.99, allow_inf_nan=False)] = 0.0
    x: Annotated[str, Field(min_length=1, max_length=300)] = "step"
    log: bool = False
    clip: bool = False


class ViewState(_Strict):
    filter: FilterState = FilterState()
    sort: Annotated[str, Field(max_length=300)] = "-id"
    columns: Annotated[list[Key], Field(max_length=200)] | None = None
    group: GroupState = GroupState()
    charts: ChartsState = ChartsState()

    @model_validator(mode="before")
    @classmethod
    def _bounded(cls, data: Any) -> Any:
        if isinstance(data, dict) and len(json.dumps(data)) > MAX_STATE_BYTES:
            raise ValueError(f"the state is over {MAX_STATE_BYTES} bytes of JSON")
        return data


class ViewCreate(_Strict):
    name: str = Field(min_length=1, max_length=200, examples=["lr sweep, best first"])
    experiment_id: int | None = Field(None, gt=0)
    shared: bool = False
    state: ViewState


class ViewCreated(BaseModel):
    id: int
    url: str


class ViewOut(BaseModel):
    id: int
    name: str
    owner_id: int
    owner: str
    experiment_id: int | None
    shared: bool
    is_default: bool
    state: ViewState
    url: str
    created_at: UtcDateTime


class DefaultIn(_Strict):
    """Make the view its experiment's default (true), or no longer (false)."""

    default: bool
