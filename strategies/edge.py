"""EdgeStrategy: one synchronous round, read top to bottom.

``configure_train``: choose (ratio policy, then collective policy) → plan (nodes, learning
rate, injection, replica payloads) → the training instructions, which Flower's ``start`` sends.
``aggregate_train``: accept the training replies → the collective's program (any further
exchanges, each sent through the grid in the loop below) → aggregate → apply to the global
model and advance the replicas → observe (policies, link estimates) → record (the ledger).
``start``: the loop of Flower's ``Strategy.start`` (train, then centralized evaluation; no
client-side evaluation), which can also stop once the virtual clock passes a budget.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from logging import INFO, WARNING

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.common.logger import log
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAvg, Result
from flwr.serverapp.strategy.strategy_utils import sample_nodes

from compress.base import Compressor
from strategies.bounds import Bounds
from strategies.collectives.base import (
    Aggregate,
    Collective,
    Defence,
    Participant,
    Phase,
    Program,
    Replies,
    RoundLog,
    RoundPlan,
    Vector,
    Weights,
)
from strategies.guard import UpdateGuard
from strategies.identity import Identities
from strategies.ledger import Ledger, RoundStats, own_samples
from strategies.policies.collective import AutoCollective, FixedCollective
from strategies.policies.lr import LearningRates
from strategies.policies.ratio import RatioPolicy
from strategies.policies.round_times import TRAIN_PHASE, RoundTimes
from strategies.policies.server_optimizer import ServerOptimizer
from strategies.policies.statistics import StatisticsPolicy
from strategies.relay import Relay
from strategies.replicas import Replicas
from strategies.sampling import ClientSampler
from wire.codec import Sparse, topk_count
from wire.keys import (
    BATCH_SIZE,
    CONFIG_KEY,
    IDENTIFY,
    INJECT_KEY,
    LEARNING_RATE,
    LOCAL_STEPS,
    NUM_EXAMPLES,
    SEED,
    TRAIN,
    TRAIN_LOSS,
)
from wire.layout import Layout
from wire.messages import RoundConfig, Samples, TrainInstruction, TrainReply, parse_identity
from wire.nbytes import content_nbytes
from wire.tally import ClientWork


@dataclass(frozen=True)
class Policies:
    """What the strategy decides by: each a table entry chosen from the settings."""

    ratio: RatioPolicy
    collective: FixedCollective | AutoCollective
    weights: Weights
    learning_rates: LearningRates
    defence: Defence
    server_optimizer: ServerOptimizer
    statistics: StatisticsPolicy


@dataclass
class RoundState:
    """The round between ``configure_train`` and ``aggregate_train``."""

    server_round: int
    grid: Grid
    model: Vector  # the global model the round starts from
    collective: Collective
    ratio: float
    learning_rate: float
    local_steps: int
    batch_size: int
    bytes_down: dict[int, int]  # node -> bytes of its training instruction
    plan: RoundPlan
    model_payloads: dict[str, int] | None  # compressed: nodes per replica payload kind
    sampling: dict[str, object] | None = None  # clients-per-round: partitions, identify query
    connected: frozenset[int] = frozenset()  # every node connected, sampled or not


class EdgeStrategy(FedAvg):
    """Synchronous training over a plug-in collective, compressor and policies."""

    def __init__(
        self,
        *,
        num_clients: int,
        layout: Layout,
        collectives: dict[str, Collective],
        compressor: Compressor,
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
        self.compressor = compressor
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
        self.stats: dict[int, RoundStats] = {}
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
        after_round: Callable[[int, ArrayRecord, bool], None] | None = None,
    ) -> Result:
        """Train rounds ``first_round`` to ``num_rounds``, or fewer: with
        ``virtual_time_budget_s`` > 0 the last round is the first to end at or past that
        virtual time. Evaluation is centralized (``evaluate_fn`` before the first round, unless
        resuming, and after each); ``evaluate_config`` is unused. ``after_round`` sees each
        round's model once it is evaluated, and whether it is the last (checkpoints)."""
        train_config = ConfigRecord() if train_config is None else train_config
        result = Result(arrays=initial_arrays)

        def evaluate(server_round: int, arrays: ArrayRecord) -> None:
            metrics = None if evaluate_fn is None else evaluate_fn(server_round, arrays)
            if metrics is not None:
                result.evaluate_metrics_serverapp[server_round] = metrics

        if first_round == 1:
            evaluate(0, initial_arrays)
        arrays = initial_arrays
        for server_round in range(first_round, num_rounds + 1):
            replies = grid.send_and_receive(
                self.configure_train(server_round, arrays, train_config, grid), timeout=timeout
            )
            new_arrays, train_metrics = self.aggregate_train(server_round, replies)
            if new_arrays is not None:
                arrays = result.arrays = new_arrays
            if train_metrics is not None:
                result.train_metrics_clientapp[server_round] = train_metrics
            evaluate(server_round, arrays)
            spent = self.stats[server_round].virtual_time_s
            last = server_round == num_rounds or 0 < virtual_time_budget_s <= spent
            if after_round is not None:
                after_round(server_round, arrays, last)
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

    def __getstate__(self) -> dict[str, object]:
        """What a checkpoint keeps: everything but the round in flight (it holds the grid)."""
        state = self.__dict__.copy()
        state["current"] = None
        return state

    def take_resumable(self, fresh: EdgeStrategy) -> None:
        """After a resume: what a resumed run may change (server/checkpoint.py's
        RESUMABLE_KEYS) comes from this run's settings, as ``fresh`` was built from them:
        the round timeout and the bounds derived from it."""
        self.round_timeout_s, self.bounds = fresh.round_timeout_s, fresh.bounds

    def forget_clients(self) -> None:
        """After a restart of the federation: no node is known to hold a replica (each is
        sent the full model next)."""
        self.replicas.forget_holders()

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
        nodes, sampling, connected = self._nodes(grid, server_round)
        base = float(config[LEARNING_RATE])  # type: ignore[arg-type]
        lr = self.policies.learning_rates.for_round(base)
        round_config = RoundConfig(
            server_round=server_round,
            learning_rate=lr,
            local_steps=int(config[LOCAL_STEPS]),  # type: ignore[arg-type]
            batch_size=int(config[BATCH_SIZE]),  # type: ignore[arg-type]
            seed=int(config[SEED]),  # type: ignore[arg-type]
            round_start_s=self.ledger.clock.now_s,
            inject_partitions=self._sharers(server_round),
            inject_beta=None if self.relay is None else self.relay.plan.beta,
        )
        contents, payload_counts = self._instructions(
            round_config, collective, ratio, arrays, model, nodes
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
            bytes_down=_sizes(messages),
            plan=RoundPlan(
                server_round=server_round,
                size=self.layout.size,
                layout=self.layout,
                ratio=ratio,
                k=k,
                compressor=self.compressor,
                index_set=collective.round_index_set(),
                weights=self.policies.weights,
                defence=self.policies.defence,
                measure=self.ledger.measure,
                log=RoundLog(),
                max_compress_s=self.bounds.max_compress_s,
            ),
            model_payloads=payload_counts,
            sampling=sampling,
            connected=connected,
        )
        return messages

    def _nodes(
        self, grid: Grid, server_round: int
    ) -> tuple[list[int], dict[str, object] | None, frozenset[int]]:
        """The round's nodes, once at least ``min_available_nodes`` are connected (one
        listing): every one, or with a sampler those of its partitions (nodes not yet
        identified are asked their partition first); what the record says of it; and every
        node connected (a partition's owner still holds it while it is not sampled)."""
        _, connected = sample_nodes(grid, self.min_available_nodes, self.min_available_nodes)
        self.identities.saw(connected, server_round)
        if self.sampler is None:
            return sorted(connected), None, frozenset(connected)
        unknown = sorted(n for n in connected if n not in self.identities.partition_of)
        identified = self._identify(grid, unknown, connected) if unknown else 0
        owners = {p: n for n, p in self.identities.partition_of.items() if n in set(connected)}
        partitions, nodes = self.sampler.nodes(server_round, owners)
        return nodes, {"partitions": partitions, "identified": identified}, frozenset(connected)

    def _identify(self, grid: Grid, nodes: list[int], connected: list[int]) -> int:
        """Ask ``nodes`` their partition (an ``identify`` query); bind those that answer
        acceptably; return how many did. The rest are left out of sampling, with a warning."""
        messages = [
            Message(content=RecordDict(), message_type=IDENTIFY, dst_node_id=node) for node in nodes
        ]
        replies = list(grid.send_and_receive(messages, timeout=self.round_timeout_s))
        bound = 0
        for reply in self._by_seniority(replies):
            node = reply.metadata.src_node_id
            try:
                if reply.has_error():
                    raise ValueError(f"error reply: {reply.error.reason}")
                partition = parse_identity(reply.content, self.num_clients)
                self.identities.check(node, partition, connected)
            except ValueError as exc:
                log(WARNING, "node %d not sampled: its identify reply is refused: %s", node, exc)
                continue
            self.identities.bind(node, partition)
            bound += 1
        return bound

    def _sharers(self, server_round: int) -> tuple[int, ...] | None:
        if self.relay is None:
            return None
        return tuple(self.relay.plan.sharers(server_round, self.num_clients))

    def _instructions(
        self,
        round_config: RoundConfig,
        collective: Collective,
        ratio: float,
        arrays: ArrayRecord,
        model: Vector,
        nodes: list[int],
    ) -> tuple[dict[int, RecordDict], dict[str, int] | None]:
        """Each node's instruction; nodes sent the same share one content (measured once)."""
        if not collective.compressed:
            content = TrainInstruction(round_config, dense_model=arrays).to_content()
            return {node: content for node in nodes}, None
        compression = self.policies.ratio.config(ratio, collective.name)
        index_set = collective.round_index_set()
        hint_count = collective.round_hint_count()
        payloads = self.replicas.payloads(nodes, model)
        records = collective.round_records(ratio)
        by_payload = {
            id(p): TrainInstruction(
                round_config,
                replica=p,
                compression=compression,
                index_set=index_set,
                size=self.layout.size,
                hint_count=hint_count,
                records=records,
            ).to_content()
            for p in payloads.values()
        }
        contents = {node: by_payload[id(p)] for node, p in payloads.items()}
        return contents, self.replicas.counts(payloads)

    # --- exchanges, aggregation, apply, observe, record --------------------------------------

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        state = self.current
        if state is None or state.server_round != server_round:
            raise RuntimeError("aggregate_train called before configure_train")
        replies = list(replies)
        trained = self._accept_training(replies, state)
        self._note_failed(replies, trained, state)
        started = time.perf_counter()
        aggregate = self._run(state, state.collective.program(state.plan, trained))
        aggregate_s = time.perf_counter() - started
        self._note_batches(aggregate.participants, state)
        model = self._apply(state, aggregate)
        self.policies.ratio.observe(trained, aggregate)
        self.stats[server_round] = self._record(state, aggregate, aggregate_s)
        if not aggregate.participants:
            return None, None  # keep the old model
        loss = self.stats[server_round].train_loss
        return self.layout.unflatten(model), MetricRecord({TRAIN_LOSS: loss})

    def _run(self, state: RoundState, program: Program) -> Aggregate:
        """The collective's further exchanges, each sent through the grid, until it aggregates."""
        try:
            exchange = next(program)
            while True:
                sent = state.grid.send_and_receive(exchange.messages, timeout=self.round_timeout_s)
                exchange = program.send(Replies(list(sent), self.ledger.wall_s()))
        except StopIteration as done:
            aggregate: Aggregate = done.value
            return aggregate

    def _accept_training(self, replies: list[Message], state: RoundState) -> list[Participant]:
        """Training replies that pass every check, by partition id; logs the training phase."""
        plan, accepted, seen = state.plan, [], set()
        for msg in self._by_seniority(replies):
            node = msg.metadata.src_node_id
            try:
                if msg.has_error():
                    raise ValueError(f"client error: {msg.error.reason}")
                reply = TrainReply.parse(msg.content, self.num_clients)
                unread = sorted(set(msg.content.array_records) - self._reply_arrays(state))
                if unread:
                    raise ValueError(f"records nobody reads this round: {', '.join(unread)}")
                # Owners that are connected but not sampled this round keep their partitions.
                connected = state.connected | set(state.bytes_down)
                self.identities.check(node, reply.partition_id, connected)
                if reply.partition_id in seen:
                    raise ValueError(f"partition-id {reply.partition_id} already replied")
                relayed = 0 if self.relay is None else self.relay.relayed_to.get(node, 0)
                self.bounds.check(reply, state.local_steps, relayed)
                shared = self._shared(reply, state.plan.server_round)
                self.policies.ratio.check(reply)
                participant = Participant(
                    node_id=node,
                    reply=reply,
                    bytes_up=content_nbytes(msg.content),
                    measured=self.ledger.measure(msg),
                    compress_s=reply.compress_s or 0.0,
                )
                participant.contribution = state.collective.decode(reply, plan)
            except Exception as exc:  # whatever a reply holds, it costs that reply, not the run
                # Dense records name no phase (a dense round has one), as they always did.
                plan.log.refuse(node, TRAIN_PHASE if state.collective.compressed else None, exc)
                continue
            seen.add(reply.partition_id)
            self.identities.bind(node, reply.partition_id)
            if shared is not None:
                self._keep_shared(reply, shared)
            accepted.append(participant)
        # Replies arrive in completion order; sort so float sums are the same every run.
        accepted.sort(key=lambda p: p.partition_id)
        works = [
            ClientWork(
                p.partition_id,
                state.bytes_down.get(p.node_id, 0),
                p.num_examples,
                p.bytes_up,
                p.reply.stream.wait_s if p.reply.stream is not None else 0.0,
                p.measured,
                steps=state.local_steps,
            )
            for p in accepted
        ]
        wall_s = self.ledger.wall_s()
        plan.log.phases.append(Phase(TRAIN_PHASE, works, wall_s, sum(state.bytes_down.values())))
        return accepted

    def _by_seniority(self, replies: list[Message]) -> list[Message]:
        """Longest connected first: of several first claims of a partition, the senior one
        that passes every check binds it, and the others are then refused."""
        return sorted(replies, key=lambda m: self.identities.seniority(m.metadata.src_node_id))

    def _reply_arrays(self, state: RoundState) -> frozenset[str]:
        """The array records a training reply of this round may carry."""
        injected = frozenset() if self.relay is None else frozenset({INJECT_KEY})
        return state.collective.reply_arrays(state.plan) | injected

    def _keep_shared(self, reply: TrainReply, shared: Samples) -> None:
        assert self.relay is not None and reply.shared is not None  # _shared checked both
        self.relay.keep(reply.partition_id, shared, reply.shared)

    def _shared(self, reply: TrainReply, server_round: int) -> Samples | None:
        """The samples a reply shares (data injection), checked: only this round's sharers
        share, each within its allowance and the data set's range."""
        if reply.shared is None:
            return None
        if self.relay is None:
            raise ValueError(f"{INJECT_KEY} in a reply, but data injection is off")
        if reply.partition_id not in self.relay.plan.sharers(server_round, self.num_clients):
            raise ValueError(
                f"{INJECT_KEY}: partition {reply.partition_id} was not asked to share this round"
            )
        return self.relay.plan.check(reply.shared, reply.num_examples)

    def _note_failed(
        self, replies: list[Message], accepted: list[Participant], state: RoundState
    ) -> None:
        """Nodes this round was sent to whose reply never came or was not accepted.

        A node that is gone gets an error reply from the SuperLink (sent as node 0; the
        ledger's grid knows whom it stands for) or none before the round timeout."""
        reasons: dict[int, str] = {}
        for m in replies:
            node = self.ledger.error_destination(m) if m.has_error() else m.metadata.src_node_id
            reasons[node] = f"error reply ({m.error.reason})" if m.has_error() else "reply refused"
        ok = {p.node_id for p in accepted}
        for node in sorted(set(state.bytes_down) - ok):
            partition = self.identities.partition_of.get(node)
            who = f"node {node}" + (f" (partition {partition})" if partition is not None else "")
            state.plan.log.failed.append(
                f"{who}: {reasons.get(node, 'no reply before the round timeout')}"
            )
            log(WARNING, "%s; the round goes on without it", state.plan.log.failed[-1])

    def _note_batches(self, aggregated: list[Participant], state: RoundState) -> None:
        """For lr scaling: the global batch per local step of the round's own samples, over the
        replies aggregated (a refused or screened reply sets nothing). It is estimated as the
        number of clients times the median of their samples: a sum would follow one client's
        inflated claim (up to local steps x batch-max passes the bounds), the median is moved by
        no minority of them."""
        if aggregated:
            median = float(np.median([own_samples(p) for p in aggregated]))
            self.policies.learning_rates.observe(
                global_batch=round(len(aggregated) * median) // state.local_steps,
                batch_size=state.batch_size,
                num_clients=self.num_clients,
            )

    def _apply(self, state: RoundState, aggregate: Aggregate) -> Vector:
        """The new global model, by the server optimizer's step on the aggregate with the
        batch-norm statistics as their policy sets them; the replicas follow a compressed
        collective's step."""
        delta = aggregate.update if aggregate.participants else None
        model, applied = state.model, None
        refusal = None if delta is None else self.guard.refuse_update(delta)
        if delta is not None and refusal is None:
            step = self.policies.server_optimizer.step(delta)
            applied = self.policies.statistics.settle(state.model, step)
            model = applied.apply_to(state.model)
            refusal = self.guard.refuse_model(model)
        if refusal is not None:  # the round's step is not applied (strategies/guard.py)
            model, applied = state.model, None
            state.plan.log.refused.append(f"round {state.server_round}: {refusal}; not applied")
            log(WARNING, "edgeflex: round %d not applied: %s", state.server_round, refusal)
        elif delta is not None:
            self.guard.applied(delta)
        if state.collective.compressed:
            self.replicas.advance(
                sent_to=state.bytes_down,
                applied=applied if isinstance(applied, Sparse) else None,
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
            **self.policies.ratio.record(),
        )


def _sizes(messages: list[Message]) -> dict[int, int]:
    """Bytes of each node's instruction; a content shared by several is serialized once."""
    sizes: dict[int, int] = {}
    out = {}
    for m in messages:
        key = id(m.content)
        if key not in sizes:
            sizes[key] = content_nbytes(m.content)
        out[m.metadata.dst_node_id] = sizes[key]
    return out
