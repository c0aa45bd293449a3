"""The run's settings as a ClientApp reads them: parsed once per run config and process, not
on every message (a training message read them twice, about 1.3 ms each, profiled)."""

from __future__ import annotations

from functools import lru_cache

from flwr.app import Context

from common.settings import Settings

# (key, type name, value) per run-config key: the type's name keeps 1, 1.0 and True apart
# (equal and equally hashed in Python, refused or accepted differently by the schema)
ConfigItems = tuple[tuple[str, str, bool | int | float | str], ...]


@lru_cache(maxsize=8)  # a process serves one run at a time; a few in tests
def _parsed(items: ConfigItems) -> Settings:
    return Settings.from_run_config({key: value for key, _, value in items}, tables=False)


def run_settings(context: Context) -> Settings:
    """``context.run_config`` as Settings (frozen, so one object can serve every message);
    ConfigError as ``Settings.from_run_config`` raises it (errors are not kept)."""
    items = tuple(
        sorted((key, type(value).__name__, value) for key, value in context.run_config.items())
    )
    return _parsed(items)
