from pathlib import Path

import pytest
from flwr.common.config import parse_config_args

from commands.run_config import format_overrides, parse_overrides, resolve_settings
from common.settings import ConfigError


def test_bare_words_are_strings_and_numbers_stay_numbers() -> None:
    parsed = parse_overrides(
        "num-server-rounds=3 seed=7 results-dir=/tmp/x collective=dense learning-rate=0.1"
    )
    assert parsed == {
        "num-server-rounds": 3,
        "seed": 7,
        "results-dir": "/tmp/x",
        "collective": "dense",
        "learning-rate": 0.1,
    }


def test_quoted_values_and_empty_text() -> None:
    assert parse_overrides("device-mix='all-wifi' dataset=\"digits\"") == {
        "device-mix": "all-wifi",
        "dataset": "digits",
    }
    assert parse_overrides("") == {} and parse_overrides(None) == {}


def test_toml_file(tmp_path: Path) -> None:
    path = tmp_path / "preset.toml"
    path.write_text('partitioner = "labels"\nlabels-per-client = 1\n')
    assert parse_overrides(str(path)) == {"partitioner": "labels", "labels-per-client": 1}


def test_what_we_pass_to_flwr_run_parses_back_to_the_same_values() -> None:
    config = {"results-dir": "/tmp/a b", "seed": 3, "learning-rate": 0.25, "collective": "dense"}
    assert parse_config_args([format_overrides(config)]) == config


def test_bad_configuration_stops_before_anything_starts() -> None:
    with pytest.raises(ConfigError, match="unknown run-config key.*'rounds'"):
        resolve_settings({"rounds": 3})
    with pytest.raises(ConfigError, match="partitioner = 'random' is not allowed"):
        resolve_settings({"partitioner": "random"})
    with pytest.raises(ConfigError, match="device-mix = 'moon' is not defined"):
        resolve_settings({"device-mix": "moon"})
    with pytest.raises(ConfigError, match="cannot parse run-config text"):
        parse_overrides("seed 3")


def test_results_dir_is_made_absolute_with_a_timestamped_default() -> None:
    settings = resolve_settings({}, now=0.0)
    assert Path(settings.run.results_dir).is_absolute()
    assert Path(settings.run.results_dir).parent.name == "results"
    assert settings.run.results_dir.endswith("-dense")
    assert resolve_settings({"results-dir": "/tmp/somewhere"}).run.results_dir == "/tmp/somewhere"


def test_presets_then_pairs_in_order(tmp_path: Path) -> None:
    first, second = tmp_path / "a.toml", tmp_path / "b.toml"
    first.write_text('batch-policy = "rate"\nseed = 1\n')
    second.write_text("seed = 2\n")
    parsed = parse_overrides(f"{first} {second} seed=3 stream-rates='12, 40, 300'")
    assert parsed == {"batch-policy": "rate", "seed": 3, "stream-rates": "12, 40, 300"}
    with pytest.raises(ConfigError, match="preset 'missing.toml' not found"):
        parse_overrides("missing.toml")


def test_a_rate_list_and_a_bool_survive_the_trip_to_flwr_run() -> None:
    config = {"stream-rates": "12, 40, 300", "stream-rates-vary": True}
    assert parse_config_args([format_overrides(config)]) == config
