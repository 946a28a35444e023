"""Settings: `lace.toml` in the working folder, else `$LACE_HOME/config.toml` (or `$LACE_CONFIG`),
with `LACE_...` environment variables on top (e.g. `LACE_LIMITS__MAX_RUNNING=32`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from lace.core.errors import LaceError

DEMO_MODEL = "demo/coordinator"


class Limits(BaseModel):
    """How much runs at once, and how model failures are retried."""

    model_config = ConfigDict(extra="forbid")
    max_running: int = Field(default=16, ge=1, description="model calls in flight at once")
    per_provider: dict[str, int] = Field(default_factory=dict,
                                         description="model calls in flight per provider")
    model_retries: int = Field(default=4, ge=0, description="retries of a transient failure")
    retry_base_s: float = Field(default=1.0, ge=0, description="first backoff delay")
    retry_max_s: float = Field(default=30.0, ge=0, description="longest backoff delay")


class Settings(BaseSettings):
    """Everything configurable; unknown keys are errors so typos do not pass silently."""

    model_config = SettingsConfigDict(env_prefix="LACE_", env_nested_delimiter="__",
                                      extra="forbid")
    model: str = DEMO_MODEL
    limits: Limits = Field(default_factory=Limits)

    @classmethod
    def settings_customise_sources(
        cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource, dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        path = config_path()
        if path is not None:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=path))
        return tuple(sources)


def config_path() -> Path | None:
    """`$LACE_CONFIG`, else `./lace.toml`, else `$LACE_HOME/config.toml`, if it exists."""
    named = os.environ.get("LACE_CONFIG")
    if named:
        if not Path(named).is_file():
            raise LaceError(f"LACE_CONFIG names {named}, which is not a file.")
        return Path(named)
    from lace.store.db import lace_home

    for candidate in (Path("lace.toml"), lace_home() / "config.toml"):
        if candidate.is_file():
            return candidate
    return None


def load_settings(**overrides: Any) -> Settings:
    """The settings, or one clear error naming the bad key and the file it came from."""
    try:
        return Settings(**overrides)
    except ValidationError as error:
        problem = error.errors(include_url=False)[0]
        where = ".".join(str(part) for part in problem["loc"])
        raise LaceError(f"Bad setting {where} in {config_path() or 'the environment'}: "
                        f"{problem['msg']}") from None
    except ValueError as error:  # malformed TOML
        raise LaceError(f"Cannot read {config_path()}: {error}") from None


def default_model() -> str:
    """The root agent's model: `--model`, else `$LACE_MODEL`, else lace's offline demo model."""
    return os.environ.get("LACE_MODEL") or DEMO_MODEL
