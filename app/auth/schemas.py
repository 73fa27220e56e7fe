from pydantic import BaseModel, ConfigDict, Field

from app.timeutil import UtcDateTime


class TokenOut(BaseModel):
    access_token: str
    token_type: str = "bearer"


class TokenCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=100, examples=["laptop cli"])
    # Default: settings.token_ttl_hours; at most settings.token_max_ttl_hours (checked in api).
    ttl_hours: float | None = Field(None, gt=0, allow_inf_nan=False, examples=[24])


class TokenInfo(BaseModel):
    """A token as listed: never its secret, nor the secret's hash."""

    model_config = ConfigDict(from_attributes=True)

    id: int
    name: str
    created_at: UtcDateTime
    expires_at: UtcDateTime | None
    revoked_at: UtcDateTime | None
    last_used_at: UtcDateTime | None


class TokenCreated(TokenInfo):
    """The one response that carries the secret: it is stored only hashed."""

    access_token: str
    token_type: str = "bearer"
