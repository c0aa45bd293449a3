"""Data injection: who shares, how much moves each way, and what a bad share gets."""

import numpy as np
import pytest
from flwr.app import ConfigRecord

from common.data import DIGITS_SPEC
from common.settings import ConfigError
from strategies.relay import InjectionPlan
from tests.helpers import federation_settings, last_round, run_in_process
from wire.injection import Samples

pytestmark = pytest.mark.usefixtures("task_identity")
SAMPLE_BYTES = DIGITS_SPEC.num_features * 4 + 8  # float32 features, int64 label
PLAN = InjectionPlan(0.5, 0.5, seed=5, num_features=DIGITS_SPEC.num_features, num_classes=10)


@pytest.mark.parametrize("collective", ["dense", "allgather"])
def test_injection_moves_the_configured_share_and_counts_its_bytes(collective: str) -> None:
    settings = federation_settings(
        collective=collective,
        num_clients=4,
        batch_size=16,
        injection_alpha=0.5,
        injection_beta=0.5,
    )
    _, run, _, run_stats = run_in_process(settings, rounds=3)
    for r in (1, 2, 3):
        stats = run_stats[r].injection
        assert stats is not None
        sharers = PLAN.sharers(r, 4)
        assert len(sharers) == 2  # alpha x clients
        assert stats["shared_samples"] == 2 * 8  # beta x batch from each sharer
        payload = stats["shared_samples"] * SAMPLE_BYTES
        assert payload <= stats["shared_bytes_up"] < payload + 2 * 400  # + framing per record
        if r == 1:
            assert stats["relayed_samples"] == 0  # nothing shared before round 1
            continue
        # Round r relays round r − 1's samples: 16 to each non-sharer, 8 to each sharer
        # (the other sharer's), never a client's own.
        assert stats["relayed_samples"] == 2 * 16 + 2 * 8
        payload = stats["relayed_samples"] * SAMPLE_BYTES
        assert payload <= stats["relayed_bytes_down"] < payload + 4 * 400
    if collective == "dense":  # the same model bytes every round: the difference is the relay
        extra = run_stats[2].bytes_down - run_stats[1].bytes_down
        assert extra == pytest.approx(run_stats[2].injection["relayed_bytes_down"], abs=4 * 8)


def test_bad_shares_are_refused_by_name() -> None:
    x = np.zeros((4, DIGITS_SPEC.num_features), dtype=np.float32)
    good = Samples(x, np.array([0, 1, 2, 3])).to_record()
    assert PLAN.check(good, batch=8) is not None
    too_many = Samples(x, np.array([0, 1, 2, 3])).to_record()
    with pytest.raises(ValueError, match="more than"):
        PLAN.check(too_many, batch=4)
    bad_label = Samples(x, np.array([0, 1, 2, 10])).to_record()
    with pytest.raises(ValueError, match="labels outside 0..9"):
        PLAN.check(bad_label, batch=8)
    nan = x.copy()
    nan[0, 0] = np.nan
    with pytest.raises(ValueError, match="non-finite"):
        PLAN.check(Samples(nan, np.arange(4)).to_record(), batch=8)
    wide = np.zeros((4, 3), dtype=np.float32)
    with pytest.raises(ValueError, match="expected x of shape"):
        PLAN.check(Samples(wide, np.arange(4)).to_record(), batch=8)
    ints = x.astype(np.float64)
    with pytest.raises(ValueError, match="float32"):
        PLAN.check(Samples(ints, np.arange(4)).to_record(), batch=8)


def test_injection_keys_must_come_together() -> None:
    with pytest.raises(ConfigError, match="both 0"):
        federation_settings(injection_alpha=0.5)


def test_features_outside_the_data_sets_range_are_refused() -> None:
    plan = InjectionPlan(
        0.5,
        0.5,
        seed=5,
        num_features=DIGITS_SPEC.num_features,
        num_classes=10,
        feature_range=(0.0, 1.0),
    )
    x = np.zeros((4, DIGITS_SPEC.num_features), dtype=np.float32)
    assert plan.check(Samples(x, np.arange(4)).to_record(), batch=8) is not None
    x[2, 5] = 1e30
    with pytest.raises(ValueError, match=r"outside the data set's \[0, 1\]"):
        plan.check(Samples(x, np.arange(4)).to_record(), batch=8)


def test_only_this_rounds_sharers_may_share() -> None:
    from tests.helpers import reply_message, train_reply

    settings = federation_settings(
        collective="dense", num_clients=4, batch_size=16, injection_alpha=0.25, injection_beta=0.5
    )
    _, run, grid, run_stats = run_in_process(settings, rounds=1)
    [sharer] = InjectionPlan(0.25, 0.5, settings.run.seed, 64, 10).sharers(2, 4)
    outsider = next(p for p in range(4) if p != sharer)
    # Round 2 by hand: the outsider's reply carries samples it was not asked for.

    arrays = run.layout.unflatten(run.current.model)
    config = ConfigRecord()
    messages = list(run.configure_train(2, arrays, config, grid))
    replies = list(grid.send_and_receive(messages))
    x = np.zeros((8, DIGITS_SPEC.num_features), dtype=np.float32)
    content = train_reply(outsider, 16, update=arrays, shared=Samples(x, np.arange(8)).to_record())
    forged = [r for r in replies if r.metadata.src_node_id != 100 + outsider]
    forged.append(reply_message(content, 100 + outsider))
    run.aggregate_train(2, forged)
    [refused] = last_round(run).refused
    assert f"partition {outsider} was not asked to share this round" in refused
