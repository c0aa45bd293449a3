"""The collective contract: a base class with a default for everything optional, and the data
both halves of a round exchange with the strategy.

A collective owns both halves of one way to exchange updates. The client half is class-level
(a ClientApp builds no server half): ``client_train`` turns a client's update into its reply
payload, ``client_actions`` answer any further message types. The server half is an instance
(``from_settings``): ``decode`` reads one training reply's payload, ``program`` is the rest of
the round (collectives/program.py), ``star_round_s`` and ``peer_exchange_s``
predict its time. Collective modules import no server code: a ClientApp loads them.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Protocol, Self

import numpy as np
from flwr.app import ArrayRecord, Message, RecordDict
from numpy.typing import NDArray

from common.settings import Settings
from compress.base import Encoding, SelectionSeed, Selector
from compress.error_feedback import compensate
from state.fields import Fields
from timing.cost import STAR, Link, LinkLike, PeerCost, peer_cost, slowest_link
from wire.codec import Sparse, topk_count
from wire.keys import SPARSE_KEY
from wire.layout import Layout
from wire.phases import PhaseRequest
from wire.tally import MeasuredTimes
from wire.train_instruction import TrainInstruction
from wire.train_reply import TrainReply

if TYPE_CHECKING:
    from collectives.program import ExchangeLog, Program

Vector = NDArray[np.float32]
Indices = NDArray[np.int64]
NOTHING = np.zeros(0, dtype=np.int64)
# Kinds of entry a client keeps in its context.state (client/state.py reads them back checked)
VECTOR_ENTRY, ARRAYS, CONFIG = "vector", "arrays", "config"


# --- client half -----------------------------------------------------------------------------


@dataclass(frozen=True)
class ClientJob:
    """What a collective's client half gets once local training is done."""

    state: RecordDict  # the node's context.state (residual, held vectors)
    update: Vector  # this round's local update, flat
    instruction: TrainInstruction
    layout: Layout
    selector: Selector
    encoding: Encoding
    rng: np.random.Generator  # seeded per client and round (stochastic encodings)
    run_seed: int = 0
    partition_id: int = 0
    # Entries a compressed round sends whole beside its selection: the model's buffers
    # (batch-norm statistics are moving averages, not gradients: held back by error feedback
    # they overshoot), and with whole-vectors every array of at most one dimension
    whole: Indices = field(default_factory=lambda: NOTHING)
    error_feedback_clip: float = 0.0  # ||e|| at most this x ||update|| (0: no bound)
    content: RecordDict = field(default_factory=RecordDict)  # the instruction as it came

    @property
    def k(self) -> int:
        """Entries chosen at this round's compression ratio (beside ``whole``)."""
        assert self.instruction.compression is not None
        return topk_count(self.update.size, self.instruction.compression.ratio)

    @property
    def own_seed(self) -> SelectionSeed:
        """This client's draw of the round (a per-client seeded selection)."""
        return SelectionSeed(self.run_seed, self.instruction.round.server_round, self.partition_id)

    @property
    def shared_seed(self) -> SelectionSeed:
        """The round's draw every client shares (an Allreduce-compatible seeded selection)."""
        return SelectionSeed(self.run_seed, self.instruction.round.server_round)

    def compensated(self, exempt: Indices | None = None) -> Vector:
        """Error feedback's first half, the same in every compressed collective: e = update +
        residual, clipped outside ``exempt`` (default: the entries sent whole)."""
        whole = self.whole if exempt is None else exempt
        return compensate(self.state, self.update, self.error_feedback_clip, whole)


def whole_entries(layout: Layout, buffers: Indices, vectors: bool) -> Indices:
    """The entries a compressed round sends whole: the model's buffers, and with
    ``whole-vectors`` every array of at most one dimension (biases, norm scales and shifts:
    few entries whose error-feedback release would come in bursts)."""
    if not vectors:
        return buffers
    return np.union1d(buffers, layout.vector_positions())


@dataclass(frozen=True)
class ClientAction:
    """A further phase's request at a client (e.g. Allreduce's ``indices`` and ``values``)."""

    state: RecordDict
    request: PhaseRequest
    content: RecordDict  # the request as it came (its arrays)
    encoding: Encoding
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


class CompactUpdate(Protocol):
    """An update in an encoding of its own that decodes to one Sparse, the same on every CPU."""

    def to_sparse(self) -> Sparse: ...

    def to_record(self) -> ArrayRecord: ...


@dataclass
class Participant:
    """One client's standing in the round: its training reply and what it contributes."""

    node_id: int
    reply: TrainReply
    bytes_up: int  # of its training reply
    measured: MeasuredTimes | None  # timing = "measured": its training exchange
    contribution: Vector | Sparse | None = None  # dense update, its selection, or e[I]
    compress_s: float = 0.0  # all phases

    @property
    def partition_id(self) -> int:
        return self.reply.partition_id

    @property
    def num_examples(self) -> int:
        return self.reply.num_examples


AggregationWeights = Callable[[Sequence[Participant]], list[float]]
Measure = Callable[[Message], MeasuredTimes | None]


@dataclass(frozen=True)
class RoundPlan:
    """What the server half needs to know of the round."""

    server_round: int
    size: int  # d, the model's length
    layout: Layout
    ratio: float
    k: int  # entries a compressed reply carries beside those sent whole
    selector: Selector
    encoding: Encoding
    weights: AggregationWeights
    # partitions the defence judged against (its verdicts so far: none of them leads)
    distrusted: frozenset[int]
    measure: Measure  # measured times of a reply (None under modelled timing)
    log: ExchangeLog
    max_compress_s: float = math.inf  # a phase reply's compress-s bound (strategies/bounds.py)
    run_seed: int = 0

    def seed_of(self, partition_id: int | None = None) -> SelectionSeed:
        """The round's draw: a client's own, or (None) the one every client shares."""
        return SelectionSeed(self.run_seed, self.server_round, partition_id)


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
class Outlook:
    """What a prediction of a round's time reads (strategies/policies/round_times.py)."""

    links: Sequence[LinkLike]  # every client's estimated link
    compute_s: Sequence[float]  # every client's last compute time
    ratio: float
    size: int  # d, the model's length
    values_nbytes: Callable[[int], int]  # the encoding's bytes for k values


# What the NSGA-II schedule takes a collective's gain (statistical efficiency) at c to be:
OWN_TOPK_GAIN = "own-topk"  # the clients' own Top-k gain curve, as they report it
SHARED_INDEX_GAIN = "shared-index"  # that curve scaled by the measured shared-index factor
# (a collective whose ``gain`` is None has no gain model, and the schedule does not offer it)


class Collective(ABC):
    """Both halves of one way to exchange updates (see the module docstring). A new collective
    subclasses this, writes what differs, and takes one line in the table
    (collectives/__init__.py); settings, ``collective = auto`` and the NSGA-II
    schedule then find it there.

    The replica contract. A compressed collective's clients keep a replica of the global model
    (strategies/replicas.py), brought up to date by each instruction. The replicas follow the
    step the server applied only when the ``Aggregate``'s ``update`` is a ``Sparse`` (it goes
    down as a delta or a patch) or the aggregate carries a ``compact`` encoding of that update
    (a ``CompactUpdate``, e.g. PowerSGD's factors); any other update (a ``DenseUpdate``) leaves
    the replicas behind, and every client is sent the full model in the next round.
    """

    name: ClassVar[str]
    compressed: ClassVar[bool] = True  # replicas and compression configs (else dense models)
    gain: ClassVar[str | None] = None  # OWN_TOPK_GAIN, SHARED_INDEX_GAIN, or None (no model)
    own_settings: ClassVar[tuple[str, ...]] = ()  # the run-config keys only this one reads
    reply_metrics: ClassVar[frozenset[str]] = frozenset()  # metrics of its own in a reply
    aligned: ClassVar[bool] = False  # every client's values of a round at the same coordinates
    client_actions: ClassVar[Mapping[str, ActionHandler]] = {}  # types "train.<action>"
    peer_costs: ClassVar[Mapping[str, PeerCost]] = {}  # its exchange on a ring or tree
    # what its client half keeps in context.state between phases: key -> kind (VECTOR_ENTRY...)
    client_state: ClassVar[Mapping[str, str]] = {}

    STATE_SCHEMA: ClassVar[int] = 1

    def state_dict(self) -> dict[str, object]:
        """What the server half learnt over rounds (none, by default)."""
        return {"schema": self.STATE_SCHEMA}

    def load_state_dict(self, state: object) -> None:
        """``state_dict``'s, checked; StateError naming the collective and the field."""
        Fields(f"collective {self.name}", state, self.STATE_SCHEMA).done()

    @classmethod
    def check(cls, settings: Settings) -> list[str]:
        """What is wrong with ``settings`` for a run that uses this collective (one line each,
        naming the keys)."""
        return []

    @classmethod
    def from_settings(
        cls, settings: Settings, layout: Layout, whole: Indices, step_is_aggregate: bool = True
    ) -> Self:
        """The server half as the run's settings make it; ``whole``: the entries a compressed
        round sends whole (``whole_entries``); ``step_is_aggregate``: the server applies each
        round's aggregate as it is (so a ``compact`` encoding of it can go to the replicas)."""
        return cls()

    @staticmethod
    @abstractmethod
    def client_train(job: ClientJob) -> ClientPayload:
        """The collective's part of a training reply."""

    def reply_arrays(self, plan: RoundPlan) -> frozenset[str]:
        """The array records this round's training replies carry for the collective; the
        strategy refuses any other (nobody would read it, yet it would be charged)."""
        return frozenset({SPARSE_KEY})

    def round_records(self, ratio: float) -> dict[str, ArrayRecord]:
        """Records of the collective's own that travel with this round's instructions."""
        return {}

    def round_config(self) -> dict[str, int | float]:
        """Entries of the collective's own in this round's instruction config."""
        return {}

    @abstractmethod
    def decode(self, reply: TrainReply, plan: RoundPlan) -> Vector | Sparse | None:
        """A training reply's contribution, checked (raises naming what is wrong); None when
        it comes in a further phase."""

    @abstractmethod
    def program(self, plan: RoundPlan, participants: list[Participant]) -> Program:
        """The rest of the round, from the accepted training replies to the ``Aggregate``."""

    @abstractmethod
    def star_round_s(self, outlook: Outlook) -> float:
        """Predicted seconds of a round of this collective's exchanges through Flower's star."""

    def peer_exchange_s(
        self, topology: str, n: int, model_bytes: float, ratio: float, link: Link
    ) -> float:
        """Seconds of this collective's exchange on a ring or tree (``peer_costs``)."""
        return peer_cost(self.peer_costs, topology, self.name)(n, model_bytes, ratio, link)

    def round_s(self, topology: str, outlook: Outlook) -> float:
        """The predicted round: its star exchanges as Flower carries them, or on a ring or tree
        the slowest client's compute and then the peer exchange."""
        if topology == STAR:
            return self.star_round_s(outlook)
        exchange = self.peer_exchange_s(
            topology,
            len(outlook.links),
            4 * outlook.size,
            outlook.ratio,
            slowest_link(outlook.links),
        )
        return max(outlook.compute_s) + exchange
