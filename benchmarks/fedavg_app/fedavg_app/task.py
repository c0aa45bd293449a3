"""The workload, from edgeflex's own data and model code, so both apps train the same thing."""

from __future__ import annotations

from functools import cache
from typing import Any

from common.data import client_partition, data_spec, server_test_split
from common.models import build_model
from common.settings import Settings, default_run_config


def settings(run_config: dict[str, Any]) -> Settings:
    config = default_run_config() | {
        key: run_config[key]
        for key in ("num-clients", "num-server-rounds", "seed", "learning-rate", "batch-size")
    }
    return Settings.from_run_config(config)


@cache
def partition(partition_id: int, run_config_items: tuple[tuple[str, Any], ...]):  # type: ignore[no-untyped-def]
    """Loaded once per simulation worker, as Flower's examples cache their data set."""
    return client_partition(settings(dict(run_config_items)), partition_id)


def model(s: Settings):  # type: ignore[no-untyped-def]
    return build_model(s.training.model, data_spec(s), seed=s.run.seed)


__all__ = ["model", "partition", "server_test_split", "settings"]
