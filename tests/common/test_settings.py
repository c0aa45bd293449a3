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
from common.settings.load import SECTION_OF


def _value(settings: Settings, field_name: str) -> object:
    return getattr(getattr(settings, SECTION_OF[field_name]), field_name)


def test_defaults_parse_and_round_trip() -> None:
    settings = Settings.from_run_config(default_run_config())
    assert settings.collective.collective == "dense"
    assert Settings.from_run_config(settings.to_run_config()) == settings


def test_every_setting_has_a_default_in_pyproject() -> None:
    assert sorted(default_run_config()) == sorted(Settings.keys())


def test_every_key_is_in_one_section_under_its_own_name() -> None:
    keys = Settings.keys()
    assert len(keys) == len(set(keys)) == len(SECTION_OF)
    assert {key.replace("-", "_") for key in keys} == set(SECTION_OF)


def test_an_unknown_key_gets_the_closest_key() -> None:
    config = default_run_config() | {"num-round": 3}
    with pytest.raises(ConfigError, match="'num-round'; did you mean 'num-server-rounds'"):
        Settings.from_run_config(config)


def test_a_misspelt_name_gets_the_closest_name() -> None:
    with pytest.raises(ConfigError, match=r"'alreduce' is not allowed \(did you mean 'allreduce'"):
        settings_with(collective="alreduce")


def test_every_problem_of_a_config_is_named_at_once() -> None:
    config = default_run_config() | {"num-clients": 0, "learning-rate": "fast", "seed": -1}
    with pytest.raises(ConfigError) as caught:
        Settings.from_run_config(config)
    message = str(caught.value)
    assert message.startswith("3 problems in the run config:")
    for fault in ("num-clients must be >= 1", "learning-rate must be a number", "seed must be"):
        assert fault in message


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ({"strategy": "dense"}, "use collective = 'dense'"),
        ({"strategy": "topk"}, "use collective = 'allgather'"),  # the old default
        ({"strategy": "topk", "collective": "allreduce"}, "use collective = 'allreduce' alone"),
        ({"compressor": "topk-q8"}, "use encoding = 'int8' with selector = 'topk'"),
        ({"compressor": "topk"}, "use encoding = 'float32' with selector = 'topk'"),
        ({"topk-dense-vectors": True}, "topk-dense-vectors is now whole-vectors"),
    ],
)
def test_a_key_of_an_older_config_names_what_replaced_it(old: dict[str, object], new: str) -> None:
    with pytest.raises(ConfigError, match=new.replace("(", r"\(")):
        Settings.from_run_config(default_run_config() | old)


def test_an_older_recorded_config_reads_in_todays_keys() -> None:
    from common.settings.renamed import upgraded

    old = {"strategy": "topk", "compressor": "topk-q8", "topk-dense-vectors": True, "seed": 3}
    assert upgraded(old) == {
        "collective": "allgather",
        "encoding": "int8",
        "whole-vectors": True,
        "seed": 3,
    }
    assert upgraded({"strategy": "dense", "collective": "allreduce"}) == {"collective": "dense"}


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"collective": "fedsgd"},
            "collective = 'fedsgd' is not allowed; allowed values: dense, allgather, allreduce, "
            "powersgd, auto",
        ),
        ({"selector": "threshold"}, "allowed values: topk, randomk"),
        ({"encoding": "gzip"}, "allowed values: float32, int8, sign, qsgd"),
        ({"cr_ratio_ramp": 0.25}, "cr-ratio-ramp must be 0 (no limit) or >= 1, got 0.25"),
        (
            {"collective": "auto", "auto_collectives": "allreduce,alllgather"},
            "auto-collectives = 'allreduce,alllgather': name each of",
        ),
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
    learning_rate = settings_with(learning_rate=1).training.learning_rate
    assert learning_rate == 1.0 and isinstance(learning_rate, float)


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
    unchecked = Settings.from_run_config(defaults | {key: "no-such-name"}, tables=False)
    assert _value(unchecked, field_name) == "no-such-name"
    if isinstance(table, dict):  # registering an entry is all it takes to allow its name
        monkeypatch.setitem(table, "no-such-name", table[defaults[key]])
        accepted = Settings.from_run_config(defaults | {key: "no-such-name"})
        assert _value(accepted, field_name) == "no-such-name"


def test_own_model_is_a_reference_the_settings_accept() -> None:
    model = settings_with(model="my_package.models:small").training.model
    assert model == "my_package.models:small"


def test_a_coordinatewise_defence_needs_a_collective_whose_values_are_aligned() -> None:
    with pytest.raises(ConfigError, match="'allreduce' or 'powersgd'"):
        settings_with(collective="allgather", robust="median")
    assert settings_with(collective="allreduce", robust="median").trust.robust == "median"
    assert settings_with(collective="dense", robust="trimmed-mean").trust.robust == "trimmed-mean"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        # a plug-in's own rules, from its module
        ({"collective": "allreduce", "selector": "randomk", "leader": "var"}, "draws it from"),
        ({"collective": "allreduce", "encoding": "sign", "leader": "var"}, "does not keep"),
        ({"collective": "allgather", "selector": "randomk", "cr_schedule": "nsga2"}, "Top-k"),
        ({"collective": "allgather", "topology": "tree", "encoding": "qsgd"}, "star topology"),
        ({"collective": "allgather", "topology": "ring", "selector": "randomk"}, "star topology"),
        ({"collective": "dense", "adaptive_delta": 0.3}, "needs a compressed collective"),
    ],
)
def test_each_plug_in_refuses_settings_it_cannot_run(
    overrides: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        settings_with(**overrides)


def test_a_plug_in_takes_the_settings_that_fit_it() -> None:
    randomk = settings_with(collective="allreduce", selector="randomk").compression
    assert randomk.selector == "randomk"
    compression = settings_with(collective="allgather", encoding="qsgd", qsgd_levels=1).compression
    assert (compression.encoding, compression.qsgd_levels) == ("qsgd", 1)
    assert settings_with(collective="allreduce", encoding="sign").collective.leader == "star"
