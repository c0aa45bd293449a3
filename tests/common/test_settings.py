import importlib

import pytest

from common.settings import (
    TABLES,
    ConfigError,
    Settings,
    default_run_config,
    settings_with,
    table_names,
)


def test_defaults_parse_and_round_trip() -> None:
    settings = Settings.from_run_config(default_run_config())
    assert settings.strategy == "dense"
    assert Settings.from_run_config(settings.to_run_config()) == settings


def test_every_setting_has_a_default_in_pyproject() -> None:
    assert sorted(default_run_config()) == sorted(Settings.keys())


def test_unknown_key_is_named_with_the_allowed_keys() -> None:
    config = default_run_config() | {"num-round": 3}
    with pytest.raises(ConfigError, match="'num-round'.*allowed keys: .*num-server-rounds"):
        Settings.from_run_config(config)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"strategy": "fedsgd"}, "strategy = 'fedsgd' is not allowed; allowed values: dense"),
        ({"partitioner": "shards"}, "allowed values: iid, dirichlet, labels"),
        (
            {"model": "vit"},
            "model = 'vit' is not allowed; allowed values: mlp, mlp-bn, cnn, resnet, mlp100, "
            "cnn1d, cnn1d-bn, cnn1d-gn, mlp-11m, or package.module:factory",
        ),
        ({"model": "my models:vit"}, "model = 'my models:vit' is not allowed"),
        ({"server_uplink_mbps": -1.0}, "server-uplink-mbps must be >= 0"),
        (
            {"server_uplink_mbps": 100.0, "topology": "ring"},
            "server-uplink-mbps, server-downlink-mbps and server-latency-ms model the server's "
            "link in the modelled star (topology = 'star', timing = 'modelled'); got topology = "
            "'ring'",
        ),
        ({"server_latency_ms": 5.0, "timing": "measured"}, "timing = 'measured'"),
        ({"dirichlet_alpha": 0.0}, "dirichlet-alpha must be > 0"),
        ({"dirichlet_alpha": -1.0}, "dirichlet-alpha must be > 0"),
        ({"learning_rate": -0.1}, "learning-rate must be > 0"),
        ({"num_clients": 0}, "num-clients must be >= 1"),
        ({"batch_size": 2.5}, "batch-size must be an integer"),
        ({"num_server_rounds": True}, "num-server-rounds must be an integer"),
        ({"test_fraction": 1.0}, "test-fraction must be < 1.0"),
        ({"learning_rate": float("nan")}, "learning-rate must be finite"),
        ({"device_mix": 3}, "device-mix must be a string"),
        ({"timing": "guessed"}, "allowed values: modelled, measured"),
        ({"state_store": "cloud"}, "allowed values: auto, memory, disk"),
        ({"state_store_dir": "scratch/store"}, "state-store-dir must be an absolute path"),
        ({"min_clients": -1}, "min-clients must be >= 0"),
        ({"min_clients": 11}, "min-clients (11) exceeds num-clients (10)"),
        ({"timing": "measured", "topology": "ring"}, "topology = 'ring' can only be modelled"),
    ],
)
def test_bad_values_name_the_key(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        settings_with(**overrides)


def test_missing_key_is_named() -> None:
    config = default_run_config()
    del config["seed"]
    with pytest.raises(ConfigError, match="missing run-config key.*seed"):
        Settings.from_run_config(config)


def test_integer_accepted_for_float_setting() -> None:
    assert settings_with(learning_rate=1).learning_rate == 1.0


@pytest.mark.parametrize("field_name", sorted(TABLES))
def test_allowed_names_come_from_the_implementing_table(
    field_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    module, attribute = TABLES[field_name].split(":")
    table = getattr(importlib.import_module(module), attribute)
    defaults = default_run_config()
    key = field_name.replace("_", "-")
    assert defaults[key] in table_names(field_name)  # the pyproject default is registered
    with pytest.raises(ConfigError, match=f"{key} = 'no-such-name' is not allowed"):
        Settings.from_run_config(defaults | {key: "no-such-name"})
    # A client does not check table names (it does not load the server's tables).
    assert (
        getattr(
            Settings.from_run_config(defaults | {key: "no-such-name"}, tables=False), field_name
        )
        == "no-such-name"
    )
    if isinstance(table, dict):  # registering an entry is all it takes to allow its name
        monkeypatch.setitem(table, "no-such-name", next(iter(table.values())))
        accepted = Settings.from_run_config(defaults | {key: "no-such-name"})
        assert getattr(accepted, field_name) == "no-such-name"


def test_own_model_is_a_reference_the_settings_accept() -> None:
    assert settings_with(model="my_package.models:small").model == "my_package.models:small"


def test_a_coordinatewise_defence_needs_a_collective_whose_values_are_aligned() -> None:
    with pytest.raises(ConfigError, match="'allreduce' or 'powersgd'"):
        settings_with(strategy="topk", collective="allgather", robust="median")
    assert (
        settings_with(strategy="topk", collective="allreduce", robust="median").robust == "median"
    )
    assert settings_with(strategy="dense", robust="trimmed-mean").robust == "trimmed-mean"
