"""Which training replies a round accepts: every check a reply must pass before its update is
decoded (the message, the records the round reads, the partition's owner, the bounds of its
claims, the samples it shares, what the ratio policy asked for), and which nodes the round
goes on without."""

from __future__ import annotations

from dataclasses import dataclass
from logging import WARNING

from flwr.app import Message
from flwr.common import log

from collectives.base import Participant
from collectives.program import Phase
from strategies.bounds import Bounds
from strategies.identity import Identities
from strategies.ledger import Ledger
from strategies.membership import by_seniority
from strategies.policies.ratio import RatioPolicy
from strategies.policies.round_times import TRAIN_PHASE
from strategies.relay import Relay
from strategies.round_state import RoundState
from wire.injection import Samples
from wire.keys import INJECT_KEY
from wire.nbytes import content_nbytes
from wire.tally import ClientWork
from wire.train_reply import TrainReply


@dataclass(frozen=True)
class TrainingReplies:
    """The strategy's parts a training reply is judged by (made once a round: a resumed run
    may bring new bounds)."""

    num_clients: int
    identities: Identities
    bounds: Bounds
    relay: Relay | None
    ratio: RatioPolicy
    ledger: Ledger

    def accept(self, replies: list[Message], state: RoundState) -> list[Participant]:
        """Training replies that pass every check, by partition id; logs the training phase."""
        plan, accepted, seen = state.plan, [], set()
        for msg in by_seniority(replies, self.identities):
            node = msg.metadata.src_node_id
            try:
                if msg.has_error():
                    raise ValueError(f"client error: {msg.error.reason}")
                reply = TrainReply.parse(
                    msg.content,
                    self.num_clients,
                    self._reply_arrays(state),
                    state.collective.reply_metrics,
                )
                # Owners that are connected but not sampled this round keep their partitions.
                connected = state.connected | set(state.bytes_down)
                self.identities.check(node, reply.partition_id, connected)
                if reply.partition_id in seen:
                    raise ValueError(f"partition-id {reply.partition_id} already replied")
                relayed = 0 if self.relay is None else self.relay.relayed_to.get(node, 0)
                self.bounds.check(reply, state.local_steps, relayed)
                shared = self._shared(reply, state.plan.server_round)
                self.ratio.check(reply)
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

    def note_failed(
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
