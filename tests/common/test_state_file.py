"""An object's state as data (common/state_file.py): what is written comes back, shared things
stay shared, code comes from the fresh build and never from the file."""

import json
from collections import deque

import numpy as np
import pytest
import torch

from common.state_file import StateError, dump_state, load_state
from strategies.policies.round_times import RoundTimes
from timing.link_estimator import LinkEstimator


def _round_trip(value: object, fresh: object) -> object:
    tree, arrays = dump_state(value)
    tree = json.loads(json.dumps(tree))  # as it is stored
    return load_state(tree, arrays, fresh)


def test_data_comes_back_with_shared_references_and_cycles() -> None:
    shared = np.arange(4, dtype=np.float32)
    estimator = LinkEstimator(window=6)
    for n in range(1, 6):
        estimator.observe(3, "up", nbytes=1000 * n, seconds=0.1 * n + 0.01)
    value = {
        "estimator": estimator,
        "twice": [shared, shared],
        "numbers": (1, 2.5, float("inf"), float("nan"), np.float64(0.25), np.int64(7)),
        "sets": ({1, 2}, frozenset({"a"})),
        "window": deque([1, 2], maxlen=3),
        "rng": np.random.default_rng(5),
        3: "an int key",
    }
    value["self"] = value
    back = _round_trip(value, fresh=None)
    assert isinstance(back, dict)
    assert back["self"] is back
    assert back["twice"][0] is back["twice"][1]
    np.testing.assert_array_equal(back["twice"][0], shared)
    assert back["numbers"][:3] == (1, 2.5, float("inf")) and np.isnan(back["numbers"][3])
    assert type(back["numbers"][4]) is np.float64 and type(back["numbers"][5]) is np.int64
    assert back["sets"] == ({1, 2}, frozenset({"a"}))
    assert back["window"] == deque([1, 2]) and back["window"].maxlen == 3
    assert back["rng"].random() == np.random.default_rng(5).random()
    assert back[3] == "an int key"
    restored = back["estimator"]
    assert type(restored) is LinkEstimator and restored is not estimator
    assert restored.estimate(3) == estimator.estimate(3) is not None
    restored.observe(3, "up", nbytes=9000, seconds=0.9)  # goes on as the original would
    estimator.observe(3, "up", nbytes=9000, seconds=0.9)
    assert restored.estimate(3) == estimator.estimate(3)


def test_code_is_taken_from_the_fresh_build_and_methods_bound_to_the_rebuilt_owner() -> None:
    compressor_bytes = torch.nn.Linear(2, 2)
    times = RoundTimes.__new__(RoundTimes)
    times.__dict__.update(size=3, values_nbytes=lambda k: 4 * k, module=compressor_bytes)
    times.__dict__["own"] = times.links  # a method of the object itself
    fresh = RoundTimes.__new__(RoundTimes)
    fresh_module = torch.nn.Linear(2, 2)
    fresh.__dict__.update(size=0, values_nbytes=lambda k: 2 * k, module=fresh_module)
    fresh.__dict__["own"] = fresh.links
    back = _round_trip(times, fresh)
    assert isinstance(back, RoundTimes) and back is not fresh
    assert back.size == 3  # data from the file
    assert back.values_nbytes(10) == 20  # type: ignore[attr-defined]  # code from the build
    assert back.__dict__["own"].__self__ is back  # re-bound to the rebuilt object
    assert back.__dict__["module"] is fresh_module  # the build's module, the file's tensors
    torch.testing.assert_close(fresh_module.weight, compressor_bytes.weight)


def test_a_tree_naming_a_class_outside_edgeflex_or_code_is_refused() -> None:
    with pytest.raises(StateError, match="not a class of edgeflex's own packages"):
        load_state({"$id": 0, "$object": "subprocess:Popen", "fields": {}}, {}, None)
    # A path through a module's globals to another library's class (its __del__ deletes files).
    reached = {"$id": 0, "$object": "common.state_file:torch.hub.tempfile._TemporaryFileCloser"}
    with pytest.raises(StateError, match="is not a class defined in 'common.state_file'"):
        load_state(reached | {"fields": {}}, {}, None)
    with pytest.raises(StateError, match="a scalar of dtype .* is not a number"):
        load_state({"$scalar": "V1", "value": 2**31 - 1}, {}, None)  # 2 GiB each
    with pytest.raises(StateError, match="OverflowError"):
        load_state({"$id": 0, "$deque": [], "maxlen": 2**70}, {}, None)
    with pytest.raises(StateError, match="expects code here and this build has none"):
        load_state({"$id": 0, "$list": [{"$fresh": True}]}, {}, [1])
    with pytest.raises(StateError, match="names an array the file does not hold"):
        load_state({"$id": 0, "$array": "a9"}, {}, None)
    with pytest.raises(StateError, match="cannot be written as data"):
        dump_state({"x": object()})
    with pytest.raises(StateError, match=r"state\[0\]: a builtins:method-wrapper cannot be"):
        dump_state([object().__repr__])  # could not be bound to the rebuilt object
    with pytest.raises(StateError, match=r"state\[0\]: an array of Python objects"):
        dump_state([np.array([None])])
