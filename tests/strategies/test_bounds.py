"""Numbers a client reports are held to bounds the server can justify."""

import copy
import math
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from flwr.app import ArrayRecord, Message, RecordDict

from collectives.allreduce.leaders import implausible_claims
from collectives.allreduce.names import HINTS_KEY, TOPK_NORM2
from collectives.base import Participant
from common.settings import settings_with
from server.build import bounds
from strategies.bounds import Bounds
from testing.in_process import InProcessGrid
from tests.helpers import (
    TINY_SHAPES,
    RewriteRound,
    federation_settings,
    last_round,
    reply_message,
    run_in_process,
    start_round,
    tiny_record,
    tiny_strategy,
    train_reply,
)
from wire.codec import raw_array
from wire.keys import ARRAYS_KEY, GAIN_GRID
from wire.train_reply import LiveCounts, StreamReport, TrainReply

BOUNDS = Bounds(
    max_batch=32,
    max_rate=100.0,
    max_wait_s=10.0,
    max_compress_s=60.0,
    buffer_capacity=0,
    sample_bytes=4 * 2 + 8,  # two features
)
STREAM = StreamReport(rate=50.0, wait_s=1.0, buffer_samples=40, buffer_bytes=640, samples=32)


HUGE = LiveCounts(published=2**64, received=2**64, invalid=0, trained=2**64, dropped=0, buffered=0)


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        (TrainReply(0, 10**12, 1.0, STREAM), r"num-examples 1000000000000 exceeds 64 \(2 steps"),
        (TrainReply(0, 64, 1.0, stream=StreamReport(1e300, 1, 1, 1, 32)), "stream-rate"),
        (TrainReply(0, 64, 1.0, stream=StreamReport(50.0, 1e300, 1, 1, 32)), "wait-s"),
        (TrainReply(0, 32, 1.0, stream=StreamReport(50.0, 1.0, 1, 1, 33)), "stream-samples 33"),
        (
            TrainReply(0, 64, 1.0, STREAM, reports={GAIN_GRID: [0.5, 0.4, 1.0]}),
            "not non-decreasing",
        ),
        (TrainReply(0, 64, 1.0, STREAM, reports={GAIN_GRID: [0.5, 0.9]}), "ends at 0.9"),
        (TrainReply(0, 64, 1e300, STREAM), "train-loss 1e[+]300 exceeds 10000"),
        (TrainReply(0, 64, 1.0, STREAM, compress_s=1e300), "compress-s 1e[+]300 exceeds the round"),
        (TrainReply(0, 64, 1.0, stream=StreamReport(50.0, 1.0, 2**64 - 1, 0, 32)), "buffer-sam"),
        (TrainReply(0, 64, 1.0, stream=StreamReport(50.0, 1.0, 4, 65, 32)), "buffer-bytes 65"),
        (TrainReply(0, 9, 1.0, stream=StreamReport(50.0, 1.0, 9, 144, 9, HUGE)), "live-published"),
    ],
)
def test_claims_outside_their_bounds_are_named(reply: TrainReply, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        BOUNDS.check(reply, local_steps=2, relayed=0)


def test_a_stream_report_is_there_exactly_when_the_run_streams() -> None:
    """A streaming run's rate weights read every reply's stream report: one without it was
    accepted and then stopped the ServerApp (aggregation-weights = 'rate')."""
    with pytest.raises(ValueError, match="no stream report .* this run streams"):
        BOUNDS.check(TrainReply(0, 64, 1.0), local_steps=2, relayed=0)
    off = replace(BOUNDS, max_rate=math.inf, max_wait_s=0.0)
    off.check(TrainReply(0, 64, 1.0), local_steps=2, relayed=0)
    with pytest.raises(ValueError, match="a stream report, but this run's streams are off"):
        off.check(TrainReply(0, 64, 1.0, stream=STREAM), local_steps=2, relayed=0)


def test_honest_claims_pass_and_relayed_samples_count() -> None:
    BOUNDS.check(
        TrainReply(0, 64, 1.0, stream=STREAM, reports={GAIN_GRID: [0.1, 0.5, 1.0]}), 2, relayed=0
    )
    BOUNDS.check(TrainReply(0, 64 + 2 * 7, 1.0, stream=STREAM), local_steps=2, relayed=7)


def test_a_live_streams_measured_rate_may_pass_the_mark_by_five_percent() -> None:
    live = LiveCounts(published=9, received=9, invalid=0, trained=9, dropped=0, buffered=0)
    jittered = StreamReport(104.0, 1.0, 9, 144, 9, live=live)
    BOUNDS.check(TrainReply(0, 9, 1.0, stream=jittered), local_steps=2, relayed=0)
    with pytest.raises(ValueError, match="stream-rate 104 exceeds the run's largest, 100"):
        replayed = StreamReport(104.0, 1.0, 9, 144, 9)  # a replay's rate is exact
        BOUNDS.check(TrainReply(0, 9, 1.0, stream=replayed), local_steps=2, relayed=0)
    with pytest.raises(ValueError, match="stream-rate 106 exceeds the run's largest, 105"):
        too_fast = StreamReport(106.0, 1.0, 9, 144, 9, live=live)
        BOUNDS.check(TrainReply(0, 9, 1.0, stream=too_fast), local_steps=2, relayed=0)


def test_bounds_follow_the_settings() -> None:
    s1 = bounds(settings_with(stream_rates="S1", batch_policy="rate", local_steps=2))
    assert s1.max_batch == 1024 and s1.max_rate == pytest.approx(38 + math.sqrt(3) * 24)
    assert s1.max_wait_s == pytest.approx(2 * 1024 / 8.0 * 1.01)  # the floor rate, 8/s
    normal = bounds(settings_with(stream_rates="S1-normal"))
    assert normal.max_batch == 32 and normal.max_rate == pytest.approx(64 + 6 * 24)
    listed = bounds(settings_with(num_clients=3, stream_rates="5, 40, 300"))
    assert listed.max_rate == 300.0
    measured = bounds(settings_with(num_clients=3, stream_rates="5, 40, 300", timing="measured"))
    assert measured.max_wait_s == 600.0  # the round timeout
    assert bounds(settings_with()).max_rate == math.inf  # streams off


@pytest.mark.usefixtures("task_identity")
def test_an_inflated_example_count_cannot_take_over_the_aggregate() -> None:
    rng = np.random.default_rng(0)
    global_arrays, good, bad = tiny_record(rng), tiny_record(rng, 0.1), tiny_record(rng, 10.0)
    strategy = tiny_strategy(2)
    start_round(strategy, global_arrays, 2)
    arrays, _ = strategy.aggregate_train(
        1,
        [
            reply_message(train_reply(0, 5, update=good), 100),
            reply_message(train_reply(1, 10**12, update=bad), 101),
        ],
    )
    assert arrays is not None
    for k in TINY_SHAPES:
        expected = global_arrays[k].numpy() + good[k].numpy()
        np.testing.assert_allclose(arrays[k].numpy(), expected, atol=1e-7)
    assert "num-examples 1000000000000 exceeds" in last_round(strategy).refused[0]


class ClaimingGrid(InProcessGrid):
    """Node 101's ||TopK(e)||² claims, in every training reply, multiplied by ``factor``."""

    def __init__(self, settings, factor: float) -> None:  # type: ignore[no-untyped-def]
        super().__init__(settings)
        self.factor = factor

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> list[Message]:
        replies = super().send_and_receive(messages, timeout=timeout)
        for reply in replies:
            metrics = reply.content.metric_records.get("metrics")
            if reply.metadata.src_node_id == 101 and metrics and "topk-norm2" in metrics:
                metrics["topk-norm2"] = float(metrics["topk-norm2"]) * self.factor  # type: ignore[arg-type]
        return replies


VAR = {"collective": "allreduce", "leader": "var", "compression_ratio": 0.05}


def _led(settings, grid):  # type: ignore[no-untyped-def]
    """Three rounds over ``grid``: each round's figures, and the node asked for the index set
    each round (its leader)."""
    _, _, _, rounds = run_in_process(settings, rounds=3, grid=grid)
    return rounds, [node for kind, node in grid.sent if kind == "train.indices"]


@pytest.mark.usefixtures("task_identity")
def test_an_implausible_norm_claim_is_refused_before_it_can_lead() -> None:
    settings = federation_settings(**VAR)
    grid = ClaimingGrid(settings, 1e300)
    rounds, leaders = _led(settings, grid)
    assert 101 not in leaders
    for server_round in (1, 2, 3):
        (reason,) = rounds[server_round].refused
        assert reason.startswith("node 101 (train): topk-norm2 ")
        assert "exceeds 100 x the median of the others' claims" in reason
        assert rounds[server_round].num_clients == 2


@pytest.mark.usefixtures("task_identity")
def test_a_var_leader_caught_lying_leads_no_more() -> None:
    settings = federation_settings(**VAR)
    grid = ClaimingGrid(settings, 30.0)  # plausible, so it leads, but its values give it away
    rounds, leaders = _led(settings, grid)
    assert leaders[0] == 101 and 101 not in leaders[1:]
    assert "it leads no more" in rounds[1].refused[0]
    assert rounds[1].num_clients == 2  # the others' values at its indices
    assert rounds[2].refused == [] and rounds[2].num_clients == 3


def _claiming(claims: list[float]) -> list[Participant]:
    return [
        Participant(
            100 + i,
            TrainReply(i, 32, 1.0, collective_metrics={TOPK_NORM2: claim}),
            bytes_up=0,
            measured=None,
        )
        for i, claim in enumerate(claims)
    ]


def test_a_claim_is_judged_against_the_median_of_at_least_two_others() -> None:
    assert implausible_claims(_claiming([1.0, 2.0, 150.0])) == {}  # 100x of the others' 1.5
    assert list(implausible_claims(_claiming([1.0, 2.0, 151.0]))) == [102]
    assert implausible_claims(_claiming([1.0, 0.005])) == {}  # of two, either may be the odd one
    assert implausible_claims(_claiming([0.0, 0.0, 5.0])) == {}  # nothing to scale by


@pytest.mark.usefixtures("task_identity")
def test_a_streaming_reply_without_its_stream_report_is_refused_and_the_run_goes_on() -> None:
    """Rate weights (ScaDLES) read every accepted reply's rate: a reply with none of the five
    stream metrics used to pass the bounds and stop the ServerApp in aggregate_train."""
    from tests.fuzz import MutatingGrid
    from wire.keys import METRICS_KEY, STREAM_METRICS

    def strip(content):  # type: ignore[no-untyped-def]
        for key in STREAM_METRICS:
            del content.metric_records[METRICS_KEY][key]
        return content

    settings = settings_with(
        num_clients=3, seed=5, stream_rates="S1", aggregation_weights="rate", batch_size=16
    )
    grid = MutatingGrid(settings, "train", 101, strip)
    _, _, _, rounds = run_in_process(settings, 3, grid)
    assert grid.hit == 101
    refused = rounds[2].refused
    assert len(refused) == 1 and "no stream report" in refused[0]
    assert rounds[3].num_clients == 3 and not rounds[3].refused


def _with_record(name: str, size: int) -> Any:
    def add(content: RecordDict) -> RecordDict:
        content[name] = ArrayRecord({"junk": raw_array(np.zeros(size, dtype=np.uint8))})
        return content

    return add


@pytest.mark.usefixtures("task_identity")
@pytest.mark.parametrize(
    ("overrides", "name", "reason"),
    [
        ({}, "attachment", "records nobody reads: attachment"),
        ({}, HINTS_KEY, f"records nobody reads: {HINTS_KEY}"),  # dense reads no hints
        ({"collective": "allgather"}, ARRAYS_KEY, "nobody reads"),
    ],
)
def test_a_record_nobody_reads_is_refused_not_charged(
    overrides: dict[str, Any], name: str, reason: str
) -> None:
    """A 4 MB record nobody read was accepted and charged to the virtual clock, so rate
    batches grew to their cap: the reply is refused, and the round carries on without it."""
    from tests.fuzz import MutatingGrid

    settings = federation_settings(**overrides)
    clean = run_in_process(settings, rounds=3)[3]
    grid = MutatingGrid(settings, "train", 101, _with_record(name, 4 << 20))
    _, strategy, _, stats = run_in_process(settings, rounds=3, grid=grid)
    assert grid.hit == 101
    (refused,) = stats[2].refused
    assert refused.startswith("node 101") and reason in refused
    assert stats[2].num_clients == 2
    assert stats[2].bytes_up < clean[2].bytes_up < 4 << 20
    assert stats[3].num_clients == 3 and not stats[3].refused


def _negative_loss(content: RecordDict) -> None:
    content.metric_records["metrics"]["train-loss"] = -1.0  # refused


@pytest.mark.usefixtures("task_identity")
@pytest.mark.parametrize("buffer_policy", ["truncation", "persistence"])
def test_streaming_clients_go_on_after_a_round_that_accepted_nobody(buffer_policy: str) -> None:
    """Their streams were read through a round the server's clock never charged: the next
    round's start is before their last read. They go on from where their streams are."""
    settings = federation_settings(
        stream_rates="S1", batch_policy="rate", buffer_policy=buffer_policy, local_steps=2
    )
    _, strategy, _, stats = run_in_process(
        settings, rounds=4, grid=RewriteRound(settings, 2, _negative_loss)
    )
    assert stats[2].num_clients == 0 and len(stats[2].refused) == 3
    for later in (3, 4):
        assert stats[later].num_clients == 3, stats[later].failed


class ForgedLeaderReply(InProcessGrid):
    """The leader's index reply arrives as if from node 102 (``replace``), or node 102's
    forged one arrives before the leader's own (``first``)."""

    def __init__(self, settings, how: str) -> None:  # type: ignore[no-untyped-def]
        super().__init__(settings)
        self.how, self.forged = how, 0

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> list[Message]:
        messages = list(messages)
        replies = super().send_and_receive(messages, timeout=timeout)
        if not messages or messages[0].metadata.message_type != "train.indices":
            return replies
        (reply,) = replies
        leader = reply.metadata.src_node_id
        forger = 102 if leader != 102 else 101
        forged = Message(content=reply.content, metadata=copy.copy(reply.metadata))  # type: ignore[call-overload]
        forged.metadata.__dict__["_src_node_id"] = forger
        self.forged += 1
        return [forged] if self.how == "replace" else [forged, reply]


@pytest.mark.usefixtures("task_identity")
@pytest.mark.parametrize("how", ["replace", "first"])
def test_only_the_leader_answers_for_the_index_set(how: str) -> None:
    settings = federation_settings(**VAR)
    grid = ForgedLeaderReply(settings, how)
    _, _, _, rounds = run_in_process(settings, rounds=2, grid=grid)
    assert grid.forged == 2
    for server_round in (1, 2):
        stats = rounds[server_round]
        assert any("but not this round's leader" in r for r in stats.refused)
        assert stats.num_clients == (0 if how == "replace" else 3)


class PinningGrid(InProcessGrid):
    """Node 101 as the ``var-pin`` attacker of benchmarks/attacks.py, in every phase."""

    def __init__(self, settings) -> None:  # type: ignore[no-untyped-def]
        from testing.attacks import VarPin

        super().__init__(settings)
        self.attack = VarPin()

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> list[Message]:
        return [
            Message(content=self.attack(r.content, 0), metadata=r.metadata)  # type: ignore[call-overload]
            if r.metadata.src_node_id == 101 and not r.has_error()
            else r
            for r in super().send_and_receive(messages, timeout=timeout)
        ]


@pytest.mark.usefixtures("task_identity")
def test_a_var_leader_whose_index_set_holds_nothing_for_the_others_leads_no_more() -> None:
    """Its claim checks out (its values at its indices have the energy it claimed), but the
    others (three judges) hold almost none of their Top-k energy at indices 0..k-1."""
    settings = federation_settings(**VAR, num_clients=4)
    grid = PinningGrid(settings)
    rounds, leaders = _led(settings, grid)
    assert leaders[0] == 101 and 101 not in leaders[1:]
    (reason,) = rounds[1].refused
    assert reason.startswith("node 101 (values): the others hold a median ")
    assert "of their Top-k energy at its index set, below 0.02; it leads no more" in reason
    assert rounds[1].num_clients == 3  # the others' values at its indices
    assert rounds[2].refused == [] and rounds[2].num_clients == 4


class EmptyIndicesGrid(ClaimingGrid):
    """Node 101 claims 30x its norm (so it leads) and answers the index request with an
    empty record."""

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> list[Message]:
        replies = super().send_and_receive(messages, timeout=timeout)
        return [
            Message(content=RecordDict({"sparse": ArrayRecord()}), metadata=r.metadata)  # type: ignore[call-overload]
            if r.metadata.src_node_id == 101
            and "sparse" in r.content.array_records
            and r.metadata.message_type == "train.indices"
            else r
            for r in replies
        ]


@pytest.mark.usefixtures("task_identity")
def test_a_leader_whose_index_reply_is_refused_leads_no_more() -> None:
    """A malformed index set costs its round once, not every round."""
    settings = federation_settings(**VAR)
    grid = EmptyIndicesGrid(settings, 30.0)
    rounds, leaders = _led(settings, grid)
    assert leaders[0] == 101 and 101 not in leaders[1:]
    assert rounds[1].refused[0].startswith("node 101 (indices): ")
    assert rounds[1].num_clients == 0  # no index set, no round
    assert rounds[2].num_clients == 3
