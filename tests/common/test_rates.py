import numpy as np
import pytest

from common.rates import RATE_FLOOR, RATE_SETS, check_stream_rates, client_rate


@pytest.mark.parametrize("name", sorted(RATE_SETS))
def test_rate_sets_have_the_papers_mean_and_deviation(name: str) -> None:
    spec = RATE_SETS[name]
    draws = np.array([client_rate(name, i, 4000, seed=1) for i in range(4000)])
    assert draws.min() >= RATE_FLOOR
    if name == "S1":  # the uniform range reaches below zero: the floor lifts the mean
        assert draws.mean() > spec.mean
        return
    assert draws.mean() == pytest.approx(spec.mean, rel=0.05)
    assert draws.std() == pytest.approx(spec.sd, rel=0.08)


def test_same_arguments_same_rate_and_rounds_vary_it() -> None:
    assert client_rate("S2", 3, 10, seed=7) == client_rate("S2", 3, 10, seed=7)
    per_round = {client_rate("S2", 3, 10, seed=7, server_round=r) for r in range(1, 6)}
    assert len(per_round) == 5


def test_explicit_list_and_bad_values_name_the_problem() -> None:
    assert client_rate("12, 40, 300", 2, 3, seed=0) == 300.0
    with pytest.raises(ValueError, match="lists 2 rates for 3 clients"):
        check_stream_rates("1,2", 3)
    with pytest.raises(ValueError, match="allowed values: off, S1"):
        check_stream_rates("S3", 3)
    with pytest.raises(ValueError, match="'x' is not a number"):
        check_stream_rates("1,x,3", 3)
    with pytest.raises(ValueError, match="must be a finite number > 0"):
        check_stream_rates("1,nan,3", 3)
    with pytest.raises(ValueError, match="streams are off"):
        client_rate("off", 0, 3, seed=0)
