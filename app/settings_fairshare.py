"""The settings of fair share between users (issue 42): a part of the one settings class
(app/settings.py inherits it), kept here so that each module stays small. How they are used:
app/gpus/fairshare.py and docs/fleet.md "Fair share"."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field
from pydantic_settings import BaseSettings

# A weight: a user's share is their weight over the weights of everyone running or waiting.
Weight = Annotated[float, Field(gt=0, allow_inf_nan=False)]


class FairShareSettings(BaseSettings):
    # Half-life of a user's GPU-hours in fair share: an hour of GPU time this long ago counts
    # half. 0: fair share off (equal-priority runs go by submit time alone).
    fair_share_half_life_hours: float = Field(default=24.0, ge=0, allow_inf_nan=False)
    # A user's weight when an admin set none for them, by role ({"admin": 2}); a role not
    # named weighs 1. Effective usage = decayed GPU-hours / weight.
    fair_share_role_weights: dict[str, Weight] = Field(default_factory=dict)
    # What a run that starts is charged ahead, per GPU, until it has run longer: its user's
    # mean finished run length when they have one, else this (hours).
    fair_share_default_run_hours: float = Field(default=1.0, gt=0, allow_inf_nan=False)
