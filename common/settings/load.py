"""A flat run config in, typed settings out: every problem of a config named at once.

Keys are checked first (unknown ones with the closest key, keys of older configs with what
replaced them), then each value (type, bounds, and for a key backed by a table, the names the
table holds), then the rules between keys: the schema's, and each plug-in's own. A table's
module may define ``check(settings) -> list[str]``: the rules about the plug-ins it holds,
read from where they live (``collectives``: each collective's ``check``).
"""

from __future__ import annotations

import difflib
import importlib
import re
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from common.settings.renamed import RENAMED_KEYS
from common.settings.schema import SECTION_OF, Settings, key

PROJECT_ROOT = Path(__file__).resolve().parents[2]

# Allowed values of a key whose implementations sit in a table come from that table, named
# "module:NAME" and read when settings are checked (the tables' modules import this package).
TABLES = {
    "collective": "strategies.policies.collective:COLLECTIVE_CHOICES",
    "leader": "collectives.allreduce:LEADERS",
    "index_policy": "collectives.allreduce:INDEX_POLICIES",
    "selector": "compress:SELECTORS",
    "encoding": "compress:ENCODINGS",
    "topology": "timing.cost:TOPOLOGIES",
    "cr_schedule": "strategies.policies.ratio:CR_SCHEDULES",
    "cr_selection": "strategies.policies.pareto:SELECTIONS",
    "buffer_policy": "client.buffer:BUFFER_POLICIES",
    "batch_policy": "common.batches:BATCH_POLICIES",
    "aggregation_weights": "strategies.policies.weights:WEIGHTS",
    "lr_scaling": "strategies.policies.lr:LR_SCALINGS",
    "partitioner": "common.data:PARTITIONERS",
    "model": "common.models:MODELS",
    "device": "common.accelerator:DEVICES",
    "robust": "strategies.policies.robust:DEFENCES",
    "server_optimizer": "strategies.policies.server_optimizer:SERVER_OPTIMIZERS",
    "batch_norm_statistics": "strategies.policies.statistics:STATISTICS",
    "state_store": "state.store:STATE_STORES",
}
REFERENCES = frozenset({"model"})  # keys that also take "package.module:attribute"
REFERENCE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


class ConfigError(ValueError):
    """A run config is not acceptable: the message names every key and value at fault."""


def _lookup(reference: str) -> Any:
    module, attribute = reference.split(":")
    return getattr(importlib.import_module(module), attribute)


def table_names(field_name: str) -> tuple[str, ...]:
    """The names a table-backed key allows: the keys of its table."""
    return tuple(_lookup(TABLES[field_name]))


def _value_error(error: Mapping[str, Any]) -> str:
    """One pydantic error in this project's words, naming the key."""
    loc = error["loc"]
    name = key(str(loc[-1])) if len(loc) > 1 else ""
    value, ctx = error["input"], error.get("ctx") or {}
    words = {
        "int_type": "must be an integer",
        "float_type": "must be a number",
        "bool_type": "must be true or false",
        "string_type": "must be a string",
        "finite_number": "must be finite",
    }
    bounds = {
        "greater_than_equal": ">=",
        "greater_than": ">",
        "less_than_equal": "<=",
        "less_than": "<",
    }
    kind = error["type"]
    if kind in words:
        return f"{name} {words[kind]}, got {value!r}"
    if kind in bounds:
        limit = next(iter(ctx.values()))
        return f"{name} must be {bounds[kind]} {limit}, got {value!r}"
    if kind == "literal_error":
        allowed = ", ".join(re.findall(r"'([^']*)'", ctx["expected"]))
        return f"{name} = {value!r} is not allowed; allowed values: {allowed}"
    return str(ctx["error"]) if kind == "value_error" else f"{name}: {error['msg']}"


def _key_errors(run_config: Mapping[str, Any]) -> list[str]:
    allowed = Settings.keys()
    errors = []
    for name in sorted(set(run_config) - set(allowed)):
        if name in RENAMED_KEYS:
            errors.append(RENAMED_KEYS[name](run_config[name], run_config))
            continue
        close = difflib.get_close_matches(name, allowed, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        errors.append(f"unknown run-config key {name!r}; {hint}docs/configuration.md lists them")
    missing = [name for name in allowed if name not in run_config]
    if missing:
        errors.append(f"missing run-config key(s): {', '.join(missing)}")
    return errors


def _name_errors(run_config: Mapping[str, Any]) -> list[str]:
    errors = []
    for field_name in TABLES:
        value = run_config.get(key(field_name))
        if not isinstance(value, str):  # missing, or not a string: the schema names it
            continue
        names = table_names(field_name)
        if value in names or (field_name in REFERENCES and REFERENCE.match(value)):
            continue
        close = difflib.get_close_matches(value, names, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        also = ", or package.module:factory" if field_name in REFERENCES else ""
        errors.append(
            f"{key(field_name)} = {value!r} is not allowed{hint}; allowed values: "
            f"{', '.join(names)}{also}"
        )
    return errors


def _plugin_errors(settings: Settings) -> list[str]:
    modules = dict.fromkeys(reference.split(":")[0] for reference in TABLES.values())
    errors: list[str] = []
    for module in modules:
        check = getattr(importlib.import_module(module), "check", None)
        if check is not None:
            errors += check(settings)
    return errors


def parse(run_config: Mapping[str, Any], *, tables: bool = True) -> Settings:
    """Validate ``run_config`` and return typed settings; ``tables = False`` (a ClientApp: the
    ServerApp checked the same config before it sent anything) skips the tables' names and the
    plug-ins' rules.

    Raises
    ------
    ConfigError
        Naming every key and value at fault, one line each.
    """
    errors = _key_errors(run_config)
    settings = None
    if all(key(name) in run_config for name in SECTION_OF):  # unknown keys aside: the values
        sections: dict[str, dict[str, Any]] = {s: {} for s in Settings.model_fields}
        for name, section in SECTION_OF.items():
            sections[section][name] = run_config[key(name)]
        try:
            settings = Settings.model_validate(sections)
        except ValidationError as exc:
            errors += [_value_error(e) for e in exc.errors(include_url=False)]
    if tables:
        names = _name_errors(run_config)
        errors += names
        if settings is not None and not names:  # plug-ins' rules read valid names only
            errors += _plugin_errors(settings)
    if errors:
        raise ConfigError(joined_errors(errors))
    assert settings is not None
    return settings


def joined_errors(errors: Iterable[str]) -> str:
    """One message for one problem, else a count and one line each."""
    errors = list(dict.fromkeys(errors))
    if len(errors) == 1:
        return errors[0]
    return f"{len(errors)} problems in the run config:\n" + "\n".join(f"- {e}" for e in errors)


def default_run_config(pyproject: Path = PROJECT_ROOT / "pyproject.toml") -> dict[str, Any]:
    """The defaults of ``[tool.flwr.app.config]`` (what ``flwr run`` starts from)."""
    with pyproject.open("rb") as fh:
        data = tomllib.load(fh)
    return dict(data["tool"]["flwr"]["app"]["config"])


def settings_with(**overrides: Any) -> Settings:
    """Defaults from pyproject with overrides given as Python names (for tests and scripts)."""
    config = default_run_config()
    config.update({key(k): v for k, v in overrides.items()})
    return parse(config)
