"""What every collective shares: the Collective protocol, the round plan it is given, the
participants it aggregates, its exchanges, and the log of what happened.

A collective owns both halves of one exchange: the client half (``client_train`` turns a
client's update into its reply payload, ``client_actions`` answer any further message types)
and the server half (``decode`` reads one training reply's payload; ``program`` is the rest of
the round: a generator that yields each further ``Exchange`` for the strategy to send, and a
``Screen`` or ``Combine`` of contributions for the strategy's defence to answer (``defend``:
the one place the defence is applied, so that no collective can skip it), and returns the
``Aggregate``). Collective modules import no server code: a ClientApp loads them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from logging import WARNING
from typing import ClassVar, Protocol

import numpy as np
from flwr.app import ArrayRecord, Message, RecordDict
from flwr.common.logger import log
from numpy.typing import NDArray

from common.settings import Settings
from compress.base import Compressor
from timing.cost import Link, LinkLike, slowest_link
from wire.codec import Sparse
from wire.layout import Layout
from wire.nbytes import content_nbytes
from wire.phases import PhaseRequest
from wire.tally import ClientWork, MeasuredTimes
from wire.train_instruction import TrainInstruction
from wire.train_reply import TrainReply, compress_s_of

Vector = NDArray[np.float32]
REASON_CHARS = 300  # longest refusal reason kept (log line and record)
Indices = NDArray[np.int64]


# --- client half -----------------------------------------------------------------------------


@dataclass(frozen=True)
class ClientRound:
    """What a collective's client half gets once local training is done."""

    state: RecordDict  # the node's context.state (residual, held vectors)
    update: Vector  # this round's local update, flat
    instruction: TrainInstruction
    layout: Layout
    compressor: Compressor
    rng: np.random.Generator  # seeded per client and round (stochastic compressors)
    # Entries sent every round beside the Top-k: the model's buffers (batch-norm statistics
    # are moving averages, not gradients: held back by error feedback they overshoot)
    always_sent: Indices = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    error_feedback_clip: float = 0.0  # ||e|| at most this x ||update|| (0: no bound)
    content: RecordDict = field(default_factory=RecordDict)  # the instruction as it came


def sent_whole(layout: Layout, buffers: Indices, dense_vectors: bool) -> Indices:
    """The entries a compressed round sends whole beside its Top-k: the model's buffers, and
    with ``topk-dense-vectors`` every array of at most one dimension (biases, norm scales and
    shifts: few entries whose error-feedback release would come in bursts)."""
    if not dense_vectors:
        return buffers
    return np.union1d(buffers, layout.vector_positions())


@dataclass(frozen=True)
class ClientAction:
    """A further phase's request at a client (e.g. Allreduce's ``indices`` and ``values``)."""

    state: RecordDict
    request: PhaseRequest
    content: RecordDict  # the request as it came (its arrays)
    compressor: Compressor
    rng: np.random.Generator


ActionHandler = Callable[[ClientAction], ArrayRecord]  # -> the reply's compressed payload


@dataclass(frozen=True)
class ClientPayload:
    """The collective's part of a training reply."""

    update: ArrayRecord | None = None  # dense: in the model's layout
    sparse: ArrayRecord | None = None  # compressed
    # the collective's own records and metrics beside them (its ``reply_arrays`` and
    # ``reply_metrics``)
    records: Mapping[str, ArrayRecord] = field(default_factory=dict)
    metrics: Mapping[str, float] = field(default_factory=dict)


# --- server half -----------------------------------------------------------------------------


@dataclass(frozen=True)
class DenseUpdate:
    """A full update vector: applied by adding it to the model."""

    vector: Vector

    def apply_to(self, model: Vector) -> Vector:
        return model + self.vector


Update = DenseUpdate | Sparse


@dataclass
class Participant:
    """One client's standing in the round: its training reply and what it contributes."""

    node_id: int
    reply: TrainReply
    bytes_up: int  # of its training reply
    measured: MeasuredTimes | None  # timing = "measured": its training exchange
    contribution: Vector | Sparse | None = None  # dense update, its TopK(e), or e[I]
    compress_s: float = 0.0  # all phases

    @property
    def partition_id(self) -> int:
        return self.reply.partition_id

    @property
    def num_examples(self) -> int:
        return self.reply.num_examples


Weights = Callable[[Sequence[Participant]], list[float]]


class Defence(Protocol):
    """Robust aggregation (strategies/policies/robust.py): how contributions combine."""

    @property
    def screens(self) -> bool: ...

    def screen(
        self, partitions: Sequence[int], vectors: Sequence[Vector], positions: Indices | None
    ) -> list[str | None]: ...

    def refusing(self) -> set[int]: ...

    def combine(self, vectors: Sequence[Vector], weights: Sequence[float]) -> Vector: ...

    def sparse_values(self, values: Sequence[Vector]) -> Sequence[Vector]: ...


Measure = Callable[[Message], MeasuredTimes | None]


@dataclass(frozen=True)
class Phase:
    """One exchange of the round as the clock will charge it."""

    name: str
    works: list[ClientWork]
    wall_s: float | None  # the server's wall time of the exchange (timing = "measured")
    bytes_down: int  # everything sent in it


@dataclass
class RoundLog:
    """What happened in a round's exchanges: phases, refused replies, nodes that failed."""

    phases: list[Phase] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)

    def refuse(self, node: int, phase: str | None, reason: BaseException | str) -> None:
        """Note a refused reply: the reason, bounded in length (it may quote the client)."""
        where = f"node {node}" if phase is None else f"node {node} ({phase})"
        text = str(reason)
        if isinstance(reason, BaseException) and not isinstance(reason, ValueError | KeyError):
            text = f"{type(reason).__name__}: {text}"  # not one of ours: name what it was
        if len(text) > REASON_CHARS:
            text = f"{text[: REASON_CHARS - 20]}...({len(text)} chars)"
        log(WARNING, "Refused reply from %s: %s", where, text)
        self.refused.append(f"{where}: {text}")


@dataclass(frozen=True)
class Replies:
    """The replies to one exchange and its wall time at the server."""

    messages: list[Message]
    wall_s: float | None


@dataclass(frozen=True)
class Exchange:
    """Messages the strategy sends through the grid for the program's next phase."""

    messages: list[Message]


@dataclass(frozen=True)
class RoundPlan:
    """What the server half needs to know of the round."""

    server_round: int
    size: int  # d, the model's length
    layout: Layout
    ratio: float
    k: int  # entries a compressed reply carries
    compressor: Compressor
    weights: Weights  # aggregation weights of participants
    # partitions the defence judged against (its verdicts so far: none of them leads)
    distrusted: frozenset[int]
    measure: Measure  # measured times of a reply (None under modelled timing)
    log: RoundLog
    max_compress_s: float = math.inf  # a phase reply's compress-s bound (strategies/bounds.py)


class CompactUpdate(Protocol):
    """An update in an encoding of its own that decodes to one Sparse, the same on every CPU."""

    def to_sparse(self) -> Sparse: ...

    def to_record(self) -> ArrayRecord: ...


@dataclass(frozen=True)
class Aggregate:
    participants: list[Participant]  # whose contributions were aggregated, by partition id
    update: Update | None  # None: nothing to apply
    # the round's measured gain over the clients' own Top-k gain at c, for a gain model that
    # scales that curve (SHARED_INDEX_GAIN); None where not measured
    gain_factor: float | None = None
    # ``update`` in a smaller encoding for the replicas (PowerSGD's factors); sent instead of
    # it when the step applied is exactly the update (strategies/replicas.py)
    compact: CompactUpdate | None = None


@dataclass(frozen=True)
class Screen:
    """A program's request: the defence's judgement of these participants' contributions
    (``positions``: where their entries sit in the model, None: the whole model). The answer's
    participants are the ones kept; the rest are refused in the round's log."""

    participants: list[Participant]
    phase: str | None
    positions: Indices | None = None


@dataclass(frozen=True)
class Combine:
    """A program's request: the defence's combination of these participants' contributions,
    screened first unless a Screen of this phase came before (a collective cannot combine
    what was not judged). Contributions at the same coordinates come back as one vector;
    sparse ones (each at its own indices) as each one's values, for the collective to sum."""

    participants: list[Participant]
    phase: str | None
    positions: Indices | None = None
    # False: combine without screening, leaving out only the partitions the defence already
    # judged against; for contributions whose senders' next ones are screened (PowerSGD's
    # P_i: their (Q_i, dense) vectors are), so that a screen sees one vector a round
    judge: bool = True


@dataclass(frozen=True)
class Defended:
    """The answer to a Screen or Combine: the participants kept, and their combination."""

    participants: list[Participant]
    combined: Vector | None = None  # Combine of contributions at the same coordinates
    values: list[Vector] = field(default_factory=list)  # Combine of sparse contributions


Request = Exchange | Screen | Combine
Program = Generator[Request, Replies | Defended, Aggregate]


def exchange(messages: list[Message]) -> Generator[Request, Replies | Defended, Replies]:
    """Send ``messages`` (``replies = yield from exchange(...)``)."""
    answer = yield Exchange(messages)
    assert isinstance(answer, Replies)
    return answer


def screen(
    participants: list[Participant], phase: str | None, positions: Indices | None = None
) -> Generator[Request, Replies | Defended, list[Participant]]:
    """The participants the defence keeps (``kept = yield from screen(...)``)."""
    answer = yield Screen(participants, phase, positions)
    assert isinstance(answer, Defended)
    return answer.participants


def combine(
    participants: list[Participant],
    phase: str | None,
    positions: Indices | None = None,
    judge: bool = True,
) -> Generator[Request, Replies | Defended, Defended]:
    """The defence's combination (``defended = yield from combine(...)``)."""
    answer = yield Combine(participants, phase, positions, judge)
    assert isinstance(answer, Defended)
    return answer


def defend(
    request: Screen | Combine, plan: RoundPlan, defence: Defence, screened_phases: set[str | None]
) -> Defended:
    """The strategy's answer to a program's Screen or Combine: where every collective's
    contributions meet the defence. ``screened_phases``: this round's, so far."""
    kept = request.participants
    if isinstance(request, Combine) and not request.judge:
        distrusted = defence.refusing()
        kept = [p for p in kept if p.partition_id not in distrusted]
    elif request.phase not in screened_phases:
        kept = screened(plan, defence, kept, request.phase, request.positions)
        screened_phases.add(request.phase)
    if isinstance(request, Screen) or not kept:
        return Defended(kept)
    contributions = [p.contribution for p in kept]
    if all(isinstance(c, Sparse) for c in contributions):
        values = [c.values for c in contributions]  # type: ignore[union-attr]
        return Defended(kept, values=list(defence.sparse_values(values)))
    combined = defence.combine(contributions, plan.weights(kept))  # type: ignore[arg-type]
    return Defended(kept, combined=combined)


def screened(
    plan: RoundPlan,
    defence: Defence,
    participants: list[Participant],
    phase: str | None,
    positions: Indices | None = None,
) -> list[Participant]:
    """The participants whose contributions the defence keeps; the rest refused in the log.
    ``positions``: where the contributions' entries sit in the model (None: the whole model)."""
    if not defence.screens or not participants:
        return participants
    vectors = []
    for p in participants:
        assert p.contribution is not None, "screened before the contributions came in"
        contribution = p.contribution
        vectors.append(contribution.dense() if isinstance(contribution, Sparse) else contribution)
    reasons = defence.screen([p.partition_id for p in participants], vectors, positions)
    for p, reason in zip(participants, reasons, strict=True):
        if reason is not None:
            plan.log.refuse(p.node_id, phase, reason)
    return [p for p, reason in zip(participants, reasons, strict=True) if reason is None]


@dataclass(frozen=True)
class Outlook:
    """What a prediction of a round's time reads (strategies/policies/round_times.py)."""

    links: Sequence[LinkLike]  # every client's estimated link
    compute_s: Sequence[float]  # every client's last compute time
    ratio: float
    size: int  # d, the model's length
    values_nbytes: Callable[[int], int]  # the compressor's bytes for k values


# What the NSGA-II schedule takes a collective's gain (statistical efficiency) at c to be:
OWN_TOPK_GAIN = "own-topk"  # the clients' own Top-k gain curve, as they report it
SHARED_INDEX_GAIN = "shared-index"  # that curve scaled by the measured shared-index factor
# (a collective whose ``gain`` is None has no gain model, and the schedule does not offer it)


class ClientHalf(Protocol):
    """A collective's client half, read from its class (a ClientApp builds no server half)."""

    @property
    def name(self) -> str: ...

    @property
    def compressed(self) -> bool: ...

    @property
    def gain(self) -> str | None: ...

    @property
    def own_settings(self) -> tuple[str, ...]: ...

    @property
    def aligned(self) -> bool:
        """Every client's values of a round at the same coordinates."""
        ...

    def from_settings(self, settings: Settings, layout: Layout, always_sent: Indices) -> Collective:
        """The server half as the run's settings make it; ``always_sent``: the entries a
        compressed round sends whole (``sent_whole``)."""
        ...

    @property
    def client_actions(self) -> Mapping[str, ActionHandler]:
        """Handlers of further message types ("train.<action>")."""
        ...

    def client_train(self, job: ClientRound) -> ClientPayload:
        """The collective's part of a training reply."""
        ...


class Collective(Protocol):
    """Both halves of one way to exchange updates (see the module docstring)."""

    name: ClassVar[str]
    compressed: ClassVar[bool]  # replicas and compression configs (else the dense model goes)
    gain: ClassVar[str | None]  # OWN_TOPK_GAIN, SHARED_INDEX_GAIN, or None (no gain model)
    own_settings: ClassVar[tuple[str, ...]]  # the run-config keys only this collective reads
    reply_metrics: ClassVar[frozenset[str]]  # metrics of its own in a training reply
    aligned: ClassVar[bool]  # every client's values of a round at the same coordinates
    client_actions: ClassVar[Mapping[str, ActionHandler]]  # further types: "train.<action>"

    @staticmethod
    def client_train(job: ClientRound) -> ClientPayload: ...

    def decode(self, reply: TrainReply, plan: RoundPlan) -> Vector | Sparse | None: ...

    def reply_arrays(self, plan: RoundPlan) -> frozenset[str]:
        """The array records this round's training replies carry for the collective; the
        strategy refuses any other (nobody would read it, yet it would be charged)."""
        ...

    def round_records(self, ratio: float) -> dict[str, ArrayRecord]:
        """Records of the collective's own that travel with this round's instructions."""
        ...

    def round_config(self) -> dict[str, int | float]:
        """Entries of the collective's own in this round's instruction config."""
        ...

    def program(self, plan: RoundPlan, participants: list[Participant]) -> Program: ...

    def star_round_s(self, outlook: Outlook) -> float:
        """Predicted seconds of a round of this collective's exchanges through Flower's star."""
        ...

    def peer_exchange_s(
        self, topology: str, n: int, model_bytes: float, ratio: float, link: Link
    ) -> float:
        """Seconds of this collective's exchange on a ring or tree (cost.py's models)."""
        ...


ReadReply = Callable[[Participant, Message], Vector]  # a phase reply's contribution, checked


def phase_replies(
    plan: RoundPlan,
    participants: list[Participant],
    phase: str,
    bytes_down: int,
    replies: Replies,
    read: ReadReply,
) -> list[Participant]:
    """The participants whose reply to a further phase ``read`` accepted, by partition id,
    each with that reply as its contribution; logs the phase, the refused and the failed.
    ``bytes_down``: of the request each participant was sent."""
    by_node = {p.node_id: p for p in participants}
    accepted: list[Participant] = []
    answered: set[int] = set()
    works: list[ClientWork] = []
    for msg in replies.messages:
        node = msg.metadata.src_node_id
        p = by_node.get(node)
        try:
            if p is None:
                raise ValueError("not a participant of this round")
            if node in answered:
                raise ValueError(f"a second {phase} reply from this node")
            if msg.has_error():
                raise ValueError(f"client error: {msg.error.reason}")
            contribution = read(p, msg)
            compress_s = compress_s_of(msg.content, plan.max_compress_s) or 0.0
            measured = plan.measure(msg)
        except Exception as exc:  # whatever a reply holds, it costs that reply, not the run
            plan.log.refuse(node, phase, exc)
            continue
        answered.add(node)
        p.contribution = contribution
        p.compress_s += compress_s
        accepted.append(p)
        works.append(
            ClientWork(
                p.partition_id, bytes_down, 0, content_nbytes(msg.content), measured=measured
            )
        )
    plan.log.phases.append(Phase(phase, works, replies.wall_s, sum(w.bytes_down for w in works)))
    plan.log.failed.extend(
        f"node {p.node_id} (partition {p.partition_id}) ({phase}): no usable reply"
        for p in participants
        if p.node_id not in answered
    )
    accepted.sort(key=lambda p: p.partition_id)
    return accepted


def round_s(collective: Collective, topology: str, outlook: Outlook) -> float:
    """A collective's predicted round time: its star exchanges as Flower carries them, or on a
    ring or tree the slowest client's compute and then its peer exchange."""
    if topology == "star":
        return collective.star_round_s(outlook)
    exchange = collective.peer_exchange_s(
        topology, len(outlook.links), 4 * outlook.size, outlook.ratio, slowest_link(outlook.links)
    )
    return max(outlook.compute_s) + exchange


def finished(aggregate: Aggregate) -> Program:
    """A program with no further request: the round ends with the training replies."""
    return aggregate
    yield  # a generator all the same


def weighted_loss(participants: Sequence[Participant]) -> float:
    """Training loss averaged by examples (nan when nobody was aggregated)."""
    if not participants:
        return math.nan
    return float(
        np.average(
            [p.reply.train_loss for p in participants],
            weights=[p.num_examples for p in participants],
        )
    )
