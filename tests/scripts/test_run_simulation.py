from pathlib import Path

import pytest
from flwr.common.config import parse_config_args

from common.settings import ConfigError
from scripts.run_simulation import format_overrides, parse_overrides, resolve_settings


def test_bare_words_are_strings_and_numbers_stay_numbers() -> None:
    parsed = parse_overrides(
        "num-server-rounds=3 seed=7 results-dir=/tmp/x strategy=dense learning-rate=0.1"
    )
    assert parsed == {
        "num-server-rounds": 3,
        "seed": 7,
        "results-dir": "/tmp/x",
        "strategy": "dense",
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
    config = {"results-dir": "/tmp/a b", "seed": 3, "learning-rate": 0.25, "strategy": "dense"}
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
    assert Path(settings.results_dir).is_absolute()
    assert Path(settings.results_dir).parent.name == "results"
    assert settings.results_dir.endswith("-dense")
    assert resolve_settings({"results-dir": "/tmp/somewhere"}).results_dir == "/tmp/somewhere"
