"""Typed run settings, parsed once from Flower's run config (schema.py: the keys; load.py: the
checks; renamed.py: keys of older configs)."""

from common.settings.load import (
    PROJECT_ROOT,
    REFERENCE,
    TABLES,
    ConfigError,
    default_run_config,
    joined_errors,
    settings_with,
    table_names,
)
from common.settings.schema import Settings

__all__ = [
    "PROJECT_ROOT",
    "REFERENCE",
    "TABLES",
    "ConfigError",
    "Settings",
    "default_run_config",
    "joined_errors",
    "settings_with",
    "table_names",
]
