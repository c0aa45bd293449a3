"""The ClientApp's settings: parsed once per run config, never served for a config that
differs only in a value's type."""

import pytest
from flwr.app import Context, RecordDict

from client.run_settings import run_settings
from common.settings import ConfigError, Settings, default_run_config


def _context(**changes: object) -> Context:
    config = default_run_config() | {k.replace("_", "-"): v for k, v in changes.items()}
    return Context(run_id=1, node_id=1, node_config={}, state=RecordDict(), run_config=config)


def test_one_run_config_is_parsed_once_into_what_the_schema_makes() -> None:
    first = run_settings(_context(num_clients=7))
    assert first is run_settings(_context(num_clients=7))
    assert first == Settings.from_run_config(_context(num_clients=7).run_config, tables=False)
    assert run_settings(_context(num_clients=8)).run.num_clients == 8


@pytest.mark.parametrize(
    ("key", "good", "bad"), [("packed_messages", True, 1), ("num_clients", 10, 10.0)]
)
def test_a_value_of_another_type_is_parsed_again(key: str, good: object, bad: object) -> None:
    """1 == True and 10 == 10.0 in Python (and hash alike): the strict schema refuses the
    second of each, so a config holding it must not get the first's settings."""
    run_settings(_context(**{key: good}))
    with pytest.raises(ConfigError, match=key.replace("_", "-")):
        run_settings(_context(**{key: bad}))
