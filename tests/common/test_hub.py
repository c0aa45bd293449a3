"""A hub data set name is usable where the hub answers or the datasets cache holds a copy;
otherwise refused naming ``dataset`` and what to do (no test touches the network)."""

from pathlib import Path

import datasets.config
import pytest

from common.hub import hub_problem


@pytest.mark.usefixtures("no_hub")
def test_unreachable_and_not_cached_is_refused_with_what_to_do() -> None:
    problem = hub_problem("ylecun/mnist")
    assert problem is not None
    assert problem.startswith("dataset = 'ylecun/mnist' is not a local data set")
    assert "cannot be reached (" in problem and 'dataset = "npz:PATH"' in problem


@pytest.mark.usefixtures("no_hub")
def test_a_copy_in_the_datasets_cache_is_enough() -> None:
    # the layout datasets writes: <namespace>___<name>/<config>/<version>/<hash>
    cache = Path(datasets.config.HF_DATASETS_CACHE)
    assert hub_problem("ylecun/mnist") is not None
    (cache / "ylecun___mnist" / "mnist" / "0.0.0" / "77f3279").mkdir(parents=True)
    assert hub_problem("ylecun/mnist") is None
    assert hub_problem("uoft-cs/cifar10") is not None  # another name's copy is not it
