"""The agent's partition from a child process: the same arrays, and a failure that says why."""

from __future__ import annotations

import numpy as np
import pytest

from client.data_process import partition_in_child
from commands.run_config import parse_overrides, resolve_settings
from common.data import client_partition

pytestmark = pytest.mark.slow  # starts processes


def test_the_child_makes_the_partition_the_node_would_make_itself() -> None:
    settings = resolve_settings(parse_overrides("num-clients=3 partitioner=dirichlet seed=4"))
    made = partition_in_child(settings.to_run_config(), 1)
    expected = client_partition(settings, 1)
    assert made.x.dtype == np.float32 and made.y.dtype == np.int64
    np.testing.assert_array_equal(made.x, expected.x)
    np.testing.assert_array_equal(made.y, expected.y)


def test_a_child_that_fails_says_why() -> None:
    settings = resolve_settings(parse_overrides("num-clients=3"))
    with pytest.raises(RuntimeError, match="making partition 7 failed: .*outside 0..2"):
        partition_in_child(settings.to_run_config(), 7)
