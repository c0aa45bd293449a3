"""EdgeStrategy: one synchronous round, read top to bottom.

``configure_train``: choose (ratio policy, then collective policy) → plan (nodes:
membership.py; learning rate, injection, replica payloads) → the training instructions
(instructions.py), which Flower's ``start`` sends. ``aggregate_train``: accept the training
replies (acceptance.py) → the collective's program (any further exchanges, each sent through
the grid in the loop below) → aggregate → apply to the global model (step.py) and advance the
replicas → observe (policies, link estimates) → record (the ledger).
``start``: the loop of Flower's ``Strategy.start`` (train, then centralized evaluation; no
client-side evaluation), which can also stop once the virtual clock passes a budget.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from logging import INFO

from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.common import log
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAvg, Result

from collectives.base import Aggregate, Collective, RoundPlan, Vector
from collectives.defence import defend
from collectives.program import Defended, Exchange, ExchangeLog, Program, Replies
from compress.base import Encoding, Selector
from state.archive import StateError
from state.fields import Fields
from strategies.acceptance import TrainingReplies
from strategies.bounds import Bounds
from strategies.guard import UpdateGuard
from strategies.identity import Identities
from strategies.instructions import instruction_sizes, instructions
from strategies.ledger import Ledger, RoundStats, own_samples
from strategies.membership import round_nodes
from strategies.policies.collective import AutoCollective
from strategies.policies.round_times import RoundTimes
from strategies.relay import Relay
from strategies.replicas import Replicas
from strategies.round_state import Policies, RoundState
from strategies.sampling import ClientSampler
from strategies.step import apply_step
from wire.codec import topk_count
from wire.keys import CONFIG_KEY, NUM_EXAMPLES, TRAIN, TRAIN_LOSS
from wire.layout import Layout
from wire.train_instruction import RoundConfig

# (the round's figures, its model, its evaluation, whether it is the last) -> None
AfterRound = Callable[[RoundStats, ArrayRecord, MetricRecord | None, bool], None]


@dataclass(frozen=True)
class LocalTraining:
    """What every training instruction starts from: the clients' local SGD."""

    learning_rate: float  # before the learning-rate policy scales it
    local_steps: int
    batch_size: int
    seed: int


class EdgeStrategy(FedAvg):
    """Synchronous training over a plug-in collective, selector, encoding and policies."""

    def __init__(
        self,
        *,
        num_clients: int,
        layout: Layout,
        collectives: dict[str, Collective],
        selector: Selector,
        encoding: Encoding,
        training: LocalTraining,
        policies: Policies,
        times: RoundTimes,
        ledger: Ledger,
        bounds: Bounds,
        relay: Relay | None = None,
        sampler: ClientSampler | None = None,
        min_clients: int = 0,
        round_timeout_s: float = 600.0,
    ) -> None:
        super().__init__(
            fraction_train=1.0,
            fraction_evaluate=0.0,  # evaluation is centralized at the server
            # a round starts once min_clients are connected and goes to all connected nodes
            min_train_nodes=min_clients or num_clients,
            min_available_nodes=min_clients or num_clients,
            weighted_by_key=NUM_EXAMPLES,
            configrecord_key=CONFIG_KEY,
        )
        self.num_clients = num_clients
        self.layout = layout
        self.collectives = collectives
        self.selector = selector
        self.encoding = encoding
        self.training = training
        self.policies = policies
        self.times = times
        self.ledger = ledger
        self.bounds = bounds
        self.guard = UpdateGuard()  # a round that would destroy the model is not applied
        self.relay = relay
        self.sampler = sampler
        self.replicas = Replicas()
        self.round_timeout_s = round_timeout_s
        self.identities = Identities()  # which node speaks for which partition
        self.current: RoundState | None = None

    # --- the loop ------------------------------------------------------------------------------

    def start(
        self,
        grid: Grid,
        initial_arrays: ArrayRecord,
        num_rounds: int = 3,
        timeout: float = 3600,
        train_config: ConfigRecord | None = None,
        evaluate_config: ConfigRecord | None = None,
        evaluate_fn: Callable[[int, ArrayRecord], MetricRecord | None] | None = None,
        *,
        virtual_time_budget_s: float = 0.0,
        first_round: int = 1,
        after_round: AfterRound | None = None,
    ) -> Result:
        """Train rounds ``first_round`` to ``num_rounds``, or fewer: with
        ``virtual_time_budget_s`` > 0 the last round is the first to end at or past that
        virtual time. Evaluation is centralized (``evaluate_fn`` before the first round, unless
        resuming, and after each); ``train_config`` and ``evaluate_config`` are unused (the
        strategy holds its ``LocalTraining``). ``after_round`` gets each round's figures
        with its model and evaluation (records, checkpoints)."""
        train_config = ConfigRecord() if train_config is None else train_config
        result = Result(arrays=initial_arrays)

        def evaluate(server_round: int, arrays: ArrayRecord) -> MetricRecord | None:
            metrics = None if evaluate_fn is None else evaluate_fn(server_round, arrays)
            if metrics is not None:
                result.evaluate_metrics_serverapp[server_round] = metrics
            return metrics

        if first_round == 1:
            evaluate(0, initial_arrays)
        arrays = initial_arrays
        for server_round in range(first_round, num_rounds + 1):
            replies = grid.send_and_receive(
                self.configure_train(server_round, arrays, train_config, grid), timeout=timeout
            )
            new_arrays, train_metrics = self.aggregate_train(server_round, replies)
            assert self.current is not None and self.current.stats is not None
            stats = self.current.stats
            if new_arrays is not None:
                arrays = result.arrays = new_arrays
            if train_metrics is not None:
                result.train_metrics_clientapp[server_round] = train_metrics
            metrics = evaluate(server_round, arrays)
            spent = stats.virtual_time_s
            last = server_round == num_rounds or 0 < virtual_time_budget_s <= spent
            if after_round is not None:
                after_round(stats, arrays, metrics, last)
            if last and server_round < num_rounds:
                log(
                    INFO,
                    "edgeflex: virtual-time budget of %.1f s spent after round %d (%.1f s)",
                    virtual_time_budget_s,
                    server_round,
                    spent,
                )
                break
        return result

    STATE_SCHEMA = 1

    def state_dict(self) -> dict[str, object]:
        """What the run learnt and holds between rounds, part by part (what the settings
        decide is built from them again): the replicas, who holds which partition, the
        virtual clock, the link estimates, the guard's history, every policy's state, each
        collective's, and the samples the relay holds."""
        return {
            "schema": self.STATE_SCHEMA,
            "replicas": self.replicas.state_dict(),
            "identities": self.identities.state_dict(),
            "clock": self.ledger.clock.state_dict(),
            "times": self.times.state_dict(),
            "guard": self.guard.state_dict(),
            "policies": self.policies.state_dict(),
            "collectives": {name: c.state_dict() for name, c in self.collectives.items()},
            "relay": None if self.relay is None else self.relay.state_dict(),
        }

    def load_state_dict(self, state: object) -> None:
        """``state_dict``'s, onto this strategy built from the same settings; StateError
        naming the part and the field that do not fit."""
        fields = Fields("strategy", state, self.STATE_SCHEMA)
        size = self.layout.size
        self.replicas.load_state_dict(fields.raw("replicas"), size)
        self.identities.load_state_dict(fields.raw("identities"))
        self.ledger.clock.load_state_dict(fields.raw("clock"))
        self.times.load_state_dict(fields.raw("times"))
        self.guard.load_state_dict(fields.raw("guard"))
        self.policies.load_state_dict(fields.raw("policies"), size)
        collectives = fields.raw("collectives")
        if not isinstance(collectives, dict) or set(collectives) != set(self.collectives):
            raise StateError(f"strategy: collectives are not {', '.join(self.collectives)}")
        for name, collective in self.collectives.items():
            collective.load_state_dict(collectives[name])
        relay = fields.raw("relay")
        if (relay is None) != (self.relay is None):
            raise StateError("strategy: a relay's state where the settings make none, or none")
        if self.relay is not None:
            self.relay.load_state_dict(relay)
        fields.done()

    def take_over(self, node: int, partition: int, kept: bool, connected: set[int]) -> None:
        """After a restart: ``node`` holds ``partition`` now, with the state its old node had
        at the checkpoint when ``kept`` (its replica too), else afresh. ValueError when the
        partition is another connected node's."""
        self.identities.check(node, partition, connected)
        old = self.identities.owner_of.get(partition)
        self.identities.bind(node, partition)
        if kept and old is not None:
            self.replicas.take_over(old, node)

    def forget_clients(self, but: Collection[int] = ()) -> None:
        """After a restart of the federation: no node but those in ``but`` (which took their
        old state over) is known to hold a replica (each is sent the full model next)."""
        self.replicas.forget_holders(but)

    # --- choose and plan ---------------------------------------------------------------------

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        self.ledger.begin(server_round, grid)
        ratio = self.policies.ratio.choose(server_round, self.times)
        name = self.policies.collective.choose(
            server_round, ratio, self.policies.ratio.preferred_collective
        )
        collective = self.collectives[name]
        model = self.layout.flatten(arrays)
        nodes, sampling, connected = round_nodes(
            grid,
            server_round,
            self.min_available_nodes,
            self.identities,
            self.sampler,
            num_clients=self.num_clients,
            timeout_s=self.round_timeout_s,
        )
        training = self.training
        lr = self.policies.learning_rates.for_round(training.learning_rate)
        round_config = RoundConfig(
            server_round=server_round,
            learning_rate=lr,
            local_steps=training.local_steps,
            batch_size=training.batch_size,
            seed=training.seed,
            round_start_s=self.ledger.clock.now_s,
            inject_partitions=self._sharers(server_round),
            inject_beta=None if self.relay is None else self.relay.plan.beta,
        )
        contents, payload_counts = instructions(
            round_config,
            collective,
            self.policies.ratio.config(ratio, collective.name),
            arrays,
            model,
            nodes,
            self.replicas,
        )
        messages = [
            Message(content=contents[node], message_type=TRAIN, dst_node_id=node) for node in nodes
        ]
        if self.relay is not None:
            messages = self.relay.attach(messages, self.identities.partition_of)
        k = topk_count(self.layout.size, ratio)
        self.current = RoundState(
            server_round=server_round,
            grid=grid,
            model=model,
            collective=collective,
            ratio=ratio,
            learning_rate=lr,
            local_steps=round_config.local_steps,
            batch_size=round_config.batch_size,
            bytes_down=instruction_sizes(messages),
            plan=RoundPlan(
                server_round=server_round,
                size=self.layout.size,
                layout=self.layout,
                ratio=ratio,
                k=k,
                selector=self.selector,
                encoding=self.encoding,
                weights=self.policies.weights,
                distrusted=frozenset(self.policies.defence.refusing()),
                measure=self.ledger.measure,
                log=ExchangeLog(),
                max_compress_s=self.bounds.max_compress_s,
                run_seed=training.seed,
            ),
            model_payloads=payload_counts,
            sampling=sampling,
            connected=connected,
        )
        return messages

    def _sharers(self, server_round: int) -> tuple[int, ...] | None:
        if self.relay is None:
            return None
        return tuple(self.relay.plan.sharers(server_round, self.num_clients))

    # --- exchanges, aggregation, apply, observe, record --------------------------------------

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        state = self.current
        if state is None or state.server_round != server_round:
            raise RuntimeError("aggregate_train called before configure_train")
        replies = list(replies)
        judge = TrainingReplies(
            self.num_clients,
            self.identities,
            self.bounds,
            self.relay,
            self.policies.ratio,
            self.ledger,
        )
        trained = judge.accept(replies, state)
        judge.note_failed(replies, trained, state)
        started = time.perf_counter()
        aggregate = self._run(state, state.collective.program(state.plan, trained))
        aggregate_s = time.perf_counter() - started
        if aggregate.participants:  # lr scaling: the global batch of the round's own samples
            self.policies.learning_rates.observe_aggregated(
                [own_samples(p) for p in aggregate.participants],
                state.local_steps,
                state.batch_size,
                self.num_clients,
            )
        model = self._apply(state, aggregate)
        self.policies.ratio.observe(trained, aggregate)
        state.stats = self._record(state, aggregate, aggregate_s)
        if not aggregate.participants:
            return None, None  # keep the old model
        loss = state.stats.train_loss
        return self.layout.unflatten(model), MetricRecord({TRAIN_LOSS: loss})

    def _run(self, state: RoundState, program: Program) -> Aggregate:
        """The collective's program: each exchange sent through the grid, each screen or
        combination of contributions answered by the defence, until it aggregates."""
        screened_phases: set[str | None] = set()
        try:
            request = next(program)
            while True:
                answer: Replies | Defended
                if isinstance(request, Exchange):
                    sent = state.grid.send_and_receive(
                        request.messages, timeout=self.round_timeout_s
                    )
                    answer = Replies(list(sent), self.ledger.wall_s())
                else:
                    answer = defend(request, state.plan, self.policies.defence, screened_phases)
                request = program.send(answer)
        except StopIteration as done:
            aggregate: Aggregate = done.value
            return aggregate

    def _apply(self, state: RoundState, aggregate: Aggregate) -> Vector:
        """The new global model (strategies/step.py); the replicas follow a compressed
        collective's step."""
        model, applied = apply_step(state, aggregate, self.policies, self.guard)
        if state.collective.compressed:
            self.replicas.advance(
                sent_to=state.bytes_down,
                applied=applied,
                held=[p.node_id for p in aggregate.participants],
                compact=aggregate.compact,
            )
        return model

    def _record(self, state: RoundState, aggregate: Aggregate, aggregate_s: float) -> RoundStats:
        log_ = state.plan.log
        charge = self.ledger.charge(log_, state.collective, state.ratio)
        self.times.observe(log_.phases, charge.star)
        chooser = self.policies.collective
        return self.ledger.record(
            state.server_round,
            log_,
            charge,
            aggregate.participants,
            collective=state.collective.name,
            ratio=state.ratio,
            local_steps=state.local_steps,
            aggregate_s=aggregate_s,
            learning_rate=state.learning_rate,
            injection=None if self.relay is None else self.relay.stats,
            model_payloads=state.model_payloads,
            sampling=state.sampling,
            predicted=chooser.predicted,
            estimated_links=(
                self.times.estimated_links() if isinstance(chooser, AutoCollective) else None
            ),
            ratio_policy=self.policies.ratio.record(),
        )
