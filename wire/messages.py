"""The messages of a round as typed dataclasses: ``to_content()`` builds the RecordDict that
travels, ``parse()`` reads one back and raises ``ValueError`` (``PayloadError`` for arrays)
naming what is wrong.

A round's training instruction carries a ``RoundConfig`` (what every client is told) and either
the dense model or a replica payload plus a ``CompressionConfig``. A training reply carries the
client's metrics and one payload: the dense update (``arrays``) or a compressed one
(``sparse``). The Allreduce leader phases add index and value requests and their replies.
Arrays are checked by whoever knows what this phase expects (the collective), not here.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, MetricRecord, RecordDict
from numpy.typing import NDArray

from wire.codec import (
    PayloadError,
    Sparse,
    array_record,
    decode_indices,
    indices_record,
    load_numpy,
    read_raw,
    short,
    values_record,
)
from wire.fields import (
    all_or_none,
    config_record,
    flag,
    integer,
    metric_record,
    no_booleans,
    number,
    one_of,
    optional_integers,
    optional_number,
    text,
    within,
)
from wire.keys import (
    ARRAYS_KEY,
    BASE_VERSION,
    BATCH_SIZE,
    BUFFER_BYTES,
    BUFFER_SAMPLES,
    COLLECTIVE,
    COMPRESS_S,
    COMPRESSION_RATIO,
    CONFIG_KEY,
    DELTA,
    DELTA_KEY,
    FACTORED_TABLE,
    FULL,
    INDEX_SET_KEY,
    INJECT_BETA,
    INJECT_KEY,
    INJECT_PARTITIONS,
    LEARNING_RATE,
    LIVE_METRICS,
    LOCAL_STEPS,
    MEASURED_METRICS,
    METRICS_KEY,
    MODEL_KEY,
    MODEL_VERSION,
    NUM_EXAMPLES,
    PARTITION_ID,
    PATCH,
    PATCH_KEY,
    PAYLOAD,
    PAYLOADS,
    RESTORED,
    ROUND_START_S,
    SAMPLES_X,
    SAMPLES_Y,
    SEED,
    SERVER_ROUND,
    SPARSE_KEY,
    STATE_DIR,
    STREAM_METRICS,
    STREAM_RATE,
    STREAM_SAMPLES,
    TRAIN_LOSS,
    VALUES,
    WAIT_S,
)
from wire.reports import (
    REPORT_KINDS,
    Parameter,
    Report,
    reports_from_metrics,
    reports_to_metrics,
    requests_from_config,
    requests_to_config,
)

Vector = NDArray[np.float32]
Indices = NDArray[np.int64]


# --- instructions ----------------------------------------------------------------------------


@dataclass(frozen=True)
class RoundConfig:
    """What every training instruction of a round says, whatever the collective."""

    server_round: int
    learning_rate: float
    local_steps: int
    batch_size: int
    seed: int
    round_start_s: float  # virtual time at which the round starts (streams read up to it)
    inject_partitions: tuple[int, ...] | None = None  # data injection: who shares this round
    inject_beta: float | None = None  # data injection: the share of its batch a sharer sends

    def to_config(self) -> ConfigRecord:
        config = ConfigRecord(
            {
                LEARNING_RATE: self.learning_rate,
                LOCAL_STEPS: self.local_steps,
                BATCH_SIZE: self.batch_size,
                SEED: self.seed,
                ROUND_START_S: self.round_start_s,
                SERVER_ROUND: self.server_round,
            }
        )
        if self.inject_partitions is not None and self.inject_beta is not None:
            config[INJECT_PARTITIONS] = list(self.inject_partitions)
            config[INJECT_BETA] = self.inject_beta
        return config

    @classmethod
    def parse(cls, config: ConfigRecord) -> RoundConfig:
        sharers = optional_integers(config, INJECT_PARTITIONS)
        return cls(
            server_round=integer(config, SERVER_ROUND),
            learning_rate=number(config, LEARNING_RATE),
            local_steps=integer(config, LOCAL_STEPS),
            batch_size=integer(config, BATCH_SIZE),
            seed=integer(config, SEED),
            round_start_s=number(config, ROUND_START_S),
            inject_partitions=sharers,
            inject_beta=optional_number(config, INJECT_BETA),
        )


@dataclass(frozen=True)
class CompressionConfig:
    """A compressed collective's instructions: its ratio and what clients must report."""

    ratio: float
    collective: str
    # the reports the ratio policy asks for: kind (wire/reports.py) -> its parameter
    reports: Mapping[str, Parameter] = dataclasses.field(default_factory=dict)

    def add_to(self, config: ConfigRecord) -> None:
        config[COMPRESSION_RATIO] = self.ratio
        config[COLLECTIVE] = self.collective
        requests_to_config(self.reports, config)

    @classmethod
    def parse(cls, config: ConfigRecord) -> CompressionConfig | None:
        if COMPRESSION_RATIO not in config:
            return None
        ratio = number(config, COMPRESSION_RATIO)
        if not 0.0 < ratio <= 1.0:
            raise ValueError(f"{COMPRESSION_RATIO} {ratio} is not in (0, 1]")
        return cls(
            ratio=ratio,
            collective=str(config.get(COLLECTIVE, "")),
            reports=requests_from_config(config),
        )


@dataclass(frozen=True)
class ReplicaPayload:
    """How a client's replica of the global model gets to ``version``: the ``full`` model, the
    last ``delta`` (from ``version - 1``), a ``patch`` (the model's values wherever it changed
    since ``base``, for a replica that sat rounds out), or nothing (``current``: it is there
    already)."""

    kind: str
    version: int
    full: Vector | None = None
    delta: Sparse | None = None
    patch: Sparse | None = None
    base: int | None = None  # patch: the version it applies to
    # the delta in a smaller encoding that decodes to it exactly (PowerSGD's factors): sent
    # instead of ``delta``, and what a client reads instead of it (client/replica.py)
    compact: ArrayRecord | None = None

    @property
    def base_version(self) -> int:
        """The version the client's replica must be at for this payload to apply."""
        if self.kind == DELTA:
            return self.version - 1
        if self.kind == PATCH:
            assert self.base is not None
            return self.base
        return self.version

    def add_to(self, config: ConfigRecord, content: RecordDict) -> None:
        config[MODEL_VERSION] = self.version
        config[PAYLOAD] = self.kind
        if self.kind == FULL:
            assert self.full is not None
            content[MODEL_KEY] = values_record(self.full)
        elif self.kind == DELTA:
            assert self.delta is not None or self.compact is not None
            config[BASE_VERSION] = self.version - 1
            if self.compact is not None:
                content[DELTA_KEY] = self.compact
            else:
                assert self.delta is not None
                content[DELTA_KEY] = self.delta.to_record()
        elif self.kind == PATCH:
            assert self.patch is not None
            config[BASE_VERSION] = self.base_version
            content[PATCH_KEY] = self.patch.to_record()

    @classmethod
    def parse(cls, config: ConfigRecord, content: RecordDict, size: int) -> ReplicaPayload:
        """``size``: the model's length."""
        kind = one_of(config, PAYLOAD, PAYLOADS)
        version = integer(config, MODEL_VERSION)
        if kind == FULL:
            full = read_raw(array_record(content, MODEL_KEY), VALUES, "float32")
            return cls(FULL, version, full=full.astype(np.float32))
        if kind == DELTA:
            if integer(config, BASE_VERSION) != version - 1:
                raise ValueError(f"{BASE_VERSION} must be {MODEL_VERSION} - 1")
            record = array_record(content, DELTA_KEY)
            if FACTORED_TABLE in record:
                return cls(DELTA, version, compact=record)
            return cls(DELTA, version, delta=Sparse.from_record(record, size))
        if kind == PATCH:
            base = integer(config, BASE_VERSION)
            if not 0 <= base < version:
                raise ValueError(f"{BASE_VERSION} {base} must be in 0..{MODEL_VERSION} - 1")
            patch = Sparse.from_record(array_record(content, PATCH_KEY), size)
            return cls(PATCH, version, patch=patch, base=base)
        return cls(kind, version)


@dataclass(frozen=True)
class TrainInstruction:
    """One training instruction: the round's config and the model, dense or as a replica
    payload with the compression config; the collective's own records and config entries."""

    round: RoundConfig
    dense_model: ArrayRecord | None = None  # the dense collective: the model in its layout
    replica: ReplicaPayload | None = None  # compressed collectives
    compression: CompressionConfig | None = None
    # the collective's own records and config entries (``round_records``, ``round_config``),
    # sent with the content; a client's collective reads them from it (``ClientRound.content``)
    records: Mapping[str, ArrayRecord] = dataclasses.field(default_factory=dict)
    config: Mapping[str, int | float] = dataclasses.field(default_factory=dict)

    @classmethod
    def parse(cls, content: RecordDict, size: int) -> TrainInstruction:
        """``size``: the model's length, as the client builds it."""
        config = config_record(content, CONFIG_KEY)
        compression = CompressionConfig.parse(config)
        if compression is None:
            dense_model = array_record(content, ARRAYS_KEY)  # refused before the round's config
            return cls(RoundConfig.parse(config), dense_model=dense_model)
        return cls(
            RoundConfig.parse(config),
            replica=ReplicaPayload.parse(config, content, size),
            compression=compression,
        )

    def to_content(self) -> RecordDict:
        config = self.round.to_config()
        content = RecordDict({CONFIG_KEY: config})
        if self.dense_model is not None:
            content[ARRAYS_KEY] = self.dense_model
        if self.compression is not None:
            self.compression.add_to(config)
        if self.replica is not None:
            self.replica.add_to(config, content)
        for key, record in self.records.items():
            content[key] = record
        for key, value in self.config.items():
            config[key] = value
        return content


def count_in(content: RecordDict, key: str, most: int) -> int:
    """An instruction's count ``key`` in 0..``most`` (0 when absent)."""
    config = config_record(content, CONFIG_KEY)
    if key not in config:
        return 0
    return within(key, integer(config, key), 0, most)


def index_set_of(content: RecordDict, size: int) -> Indices | None:
    """The shared index set an instruction or value request carries, if any."""
    if INDEX_SET_KEY not in content.array_records:
        return None
    return decode_indices(content.array_records[INDEX_SET_KEY], size)


@dataclass(frozen=True)
class PhaseRequest:
    """An Allreduce leader-phase request: the leader's indices, or everyone's values at I."""

    server_round: int
    ratio: float
    index_set: Indices | None = None  # values phase only
    size: int = 0

    def to_content(self) -> RecordDict:
        config = ConfigRecord({SERVER_ROUND: self.server_round, COMPRESSION_RATIO: self.ratio})
        content = RecordDict({CONFIG_KEY: config})
        if self.index_set is not None:
            content[INDEX_SET_KEY] = indices_record(self.index_set, self.size)
        return content

    @classmethod
    def parse(cls, content: RecordDict) -> PhaseRequest:
        config = config_record(content, CONFIG_KEY)
        return cls(integer(config, SERVER_ROUND), number(config, COMPRESSION_RATIO))


# --- replies ---------------------------------------------------------------------------------


def only_known(content: RecordDict, arrays: frozenset[str], metrics: frozenset[str]) -> None:
    """ValueError naming any record or metric a reply of this kind never carries (nobody would
    read it, yet its bytes would be received and charged to the round), or a known record of
    the wrong kind."""
    unknown = sorted(set(content) - arrays - {METRICS_KEY})
    if unknown:
        raise ValueError(f"records nobody reads: {', '.join(unknown)}")
    kinds = {name: content.array_records for name in arrays} | {METRICS_KEY: content.metric_records}
    wrong = sorted(name for name in content if name not in kinds[name])
    if wrong:
        raise ValueError(f"records of the wrong kind: {', '.join(wrong)}")
    extra = sorted(set(content.metric_records.get(METRICS_KEY, {})) - metrics)
    if extra:
        raise ValueError(f"metrics nobody reads: {', '.join(extra)}")


@dataclass(frozen=True)
class LiveCounts:
    """A live stream's running counts since its agent started: every sample that reached the
    buffer was trained on, dropped by the buffer policy, or is still buffered."""

    published: int
    received: int
    invalid: int
    trained: int
    dropped: int
    buffered: int

    def to_metrics(self) -> dict[str, int]:
        return dict(zip(LIVE_METRICS, dataclasses.astuple(self), strict=True))

    @classmethod
    def parse(cls, metrics: Mapping[str, Any]) -> LiveCounts | None:
        """None when the reply carries none; ValueError names a bad or inconsistent one."""
        if not all_or_none(metrics, LIVE_METRICS, "live stream counts"):
            return None
        counts = cls(*(integer(metrics, key, least=0) for key in LIVE_METRICS))
        accounted = counts.trained + counts.dropped + counts.buffered
        if accounted != counts.received:
            raise ValueError(
                f"live counts do not add up: trained {counts.trained} + dropped "
                f"{counts.dropped} + buffered {counts.buffered} != received {counts.received}"
            )
        return counts


@dataclass(frozen=True)
class StreamReport:
    """A streaming client's round: its rate, its wait, its buffer and its own samples."""

    rate: float  # samples/s
    wait_s: float
    buffer_samples: int
    buffer_bytes: int
    samples: int  # own stream samples trained on this round (all local steps)
    live: LiveCounts | None = None  # a live stream's running counts

    def to_metrics(self) -> dict[str, int | float]:
        metrics: dict[str, int | float] = {
            STREAM_RATE: self.rate,
            WAIT_S: self.wait_s,
            BUFFER_SAMPLES: self.buffer_samples,
            BUFFER_BYTES: self.buffer_bytes,
            STREAM_SAMPLES: self.samples,
        }
        if self.live is not None:
            metrics.update(self.live.to_metrics())
        return metrics

    @classmethod
    def parse(cls, metrics: Mapping[str, Any]) -> StreamReport | None:
        """None when the reply carries no stream metrics; ValueError names a bad one."""
        if not all_or_none(metrics, STREAM_METRICS, "stream metrics"):
            return None
        no_booleans(metrics, (STREAM_RATE, WAIT_S), "numbers")
        return cls(
            number(metrics, STREAM_RATE, above=0),
            number(metrics, WAIT_S, least=0),
            integer(metrics, BUFFER_SAMPLES, least=0),
            integer(metrics, BUFFER_BYTES, least=0),
            integer(metrics, STREAM_SAMPLES, least=0),
            LiveCounts.parse(metrics),
        )


@dataclass(frozen=True)
class Samples:
    """Raw samples (data injection): features and labels."""

    x: NDArray[np.float32]
    y: NDArray[np.int64]

    def to_record(self) -> ArrayRecord:
        return ArrayRecord(
            {
                SAMPLES_X: Array(np.ascontiguousarray(self.x)),
                SAMPLES_Y: Array(np.ascontiguousarray(self.y)),
            }
        )

    @classmethod
    def parse(cls, record: ArrayRecord) -> Samples:
        """Checked before loading: two arrays, x float32 (n, features) and y int64 (n,)."""
        if set(record) != {SAMPLES_X, SAMPLES_Y}:
            raise ValueError(
                f"{INJECT_KEY} must hold arrays 'x' and 'y', got {short(sorted(record))}"
            )
        x, y = record[SAMPLES_X], record[SAMPLES_Y]
        if x.dtype != "float32" or y.dtype != "int64":
            raise ValueError(f"{INJECT_KEY}: x must be float32 and y int64")
        if len(x.shape) != 2 or tuple(y.shape) != (x.shape[0],):
            raise ValueError(
                f"{INJECT_KEY}: expected x of shape (n, features) and y of shape (n,), got "
                f"{short(tuple(x.shape))} and {short(tuple(y.shape))}"
            )
        return cls(
            load_numpy(x, SAMPLES_X, "float32"),  # type: ignore[arg-type]
            load_numpy(y, SAMPLES_Y, "int64"),  # type: ignore[arg-type]
        )


def samples_of(content: RecordDict) -> Samples | None:
    """The injected samples a message carries, if any."""
    if INJECT_KEY not in content.array_records:
        return None
    return Samples.parse(content.array_records[INJECT_KEY])


def with_samples(content: RecordDict, record: ArrayRecord) -> RecordDict:
    """A copy of ``content`` (messages may share one) that also carries injected samples."""
    out = RecordDict(dict(content))
    out[INJECT_KEY] = record
    return out


# What a training reply may carry; each collective and policy reads its part of it.
TRAIN_REPLY_ARRAYS = frozenset({ARRAYS_KEY, SPARSE_KEY, INJECT_KEY})
REPORT_METRICS = tuple(kind.reply_key for kind in REPORT_KINDS.values())
TRAIN_REPLY_METRICS = frozenset(
    {
        PARTITION_ID,
        NUM_EXAMPLES,
        TRAIN_LOSS,
        *STREAM_METRICS,
        *LIVE_METRICS,
        *REPORT_METRICS,
        COMPRESS_S,
        *MEASURED_METRICS,
    }
)


@dataclass(frozen=True)
class TrainReply:
    """A training reply: the client's metrics and its payload (dense or compressed)."""

    partition_id: int
    num_examples: int
    train_loss: float
    stream: StreamReport | None = None
    update: ArrayRecord | None = None  # dense: the update in the model's layout
    sparse: ArrayRecord | None = None  # compressed: values and/or indices
    shared: ArrayRecord | None = None  # data injection: the samples this client shares
    compress_s: float | None = None
    # the collective's own records and metrics (its ``reply_arrays``, ``reply_metrics``):
    # shapes and numbers as they came, checked by its ``decode``
    collective_records: Mapping[str, ArrayRecord] = dataclasses.field(default_factory=dict)
    collective_metrics: Mapping[str, float] = dataclasses.field(default_factory=dict)
    # kind (wire/reports.py) -> report, as the instructions asked
    reports: Mapping[str, Report] = dataclasses.field(default_factory=dict)

    def to_content(self) -> RecordDict:
        metrics = MetricRecord(
            {
                PARTITION_ID: self.partition_id,
                NUM_EXAMPLES: self.num_examples,
                TRAIN_LOSS: self.train_loss,
            }
        )
        if self.stream is not None:
            metrics.update(self.stream.to_metrics())
        reports_to_metrics(self.reports, metrics)
        metrics.update(self.collective_metrics)
        if self.compress_s is not None:
            metrics[COMPRESS_S] = self.compress_s
        content = RecordDict({METRICS_KEY: metrics})
        for key, record in (
            (ARRAYS_KEY, self.update),
            (SPARSE_KEY, self.sparse),
            (INJECT_KEY, self.shared),
            *self.collective_records.items(),
        ):
            if record is not None:
                content[key] = record
        return content

    @classmethod
    def parse(
        cls,
        content: RecordDict,
        num_clients: int,
        arrays: frozenset[str] = TRAIN_REPLY_ARRAYS,
        collective_metrics: frozenset[str] = frozenset(),
    ) -> TrainReply:
        """Check the metrics every training reply carries; the arrays are kept as they came.
        ``arrays``: the records a reply may carry; ``collective_metrics``: the names of the
        collective's own metrics (finite numbers here, the collective checks the rest)."""
        only_known(content, arrays, TRAIN_REPLY_METRICS | collective_metrics)
        metrics = metric_record(content, METRICS_KEY)
        for key in (NUM_EXAMPLES, PARTITION_ID, TRAIN_LOSS):
            if key not in metrics:
                raise ValueError(f"metric {key!r} missing")
        no_booleans(metrics, (PARTITION_ID, NUM_EXAMPLES), "integers")
        partition_id = integer(metrics, PARTITION_ID, least=0, most=num_clients - 1)
        num_examples = integer(metrics, NUM_EXAMPLES, least=1, what="a positive integer")
        loss = number(metrics, TRAIN_LOSS, least=0)  # a cross-entropy is >= 0
        records = content.array_records
        return cls(
            partition_id=partition_id,
            num_examples=num_examples,
            train_loss=loss,
            stream=StreamReport.parse(metrics),
            update=records.get(ARRAYS_KEY),
            sparse=records.get(SPARSE_KEY),
            shared=records.get(INJECT_KEY),
            compress_s=compress_s_of(content),
            reports=reports_from_metrics(metrics),
            collective_records={
                name: record
                for name, record in records.items()
                if name not in (ARRAYS_KEY, SPARSE_KEY, INJECT_KEY)
            },
            collective_metrics={
                name: number(metrics, name) for name in collective_metrics if name in metrics
            },
        )


def compress_s_of(content: RecordDict, most: float = math.inf) -> float | None:
    """A reply's compress-s (None when it has none); ValueError when it is not a time of at
    most ``most`` seconds."""
    metrics = content.metric_records.get(METRICS_KEY)
    if metrics is None or metrics.get(COMPRESS_S) is None:
        return None
    value = number(metrics, COMPRESS_S, least=0, what="a non-negative number")
    if value > most:
        raise ValueError(f"{COMPRESS_S} {value:g} exceeds the longest possible, {most:g} s")
    return value


@dataclass(frozen=True)
class PhaseReply:
    """A reply to a leader-phase request: indices (leader) or values at I, and compress-s."""

    sparse: ArrayRecord
    compress_s: float

    def to_content(self) -> RecordDict:
        return RecordDict(
            {SPARSE_KEY: self.sparse, METRICS_KEY: MetricRecord({COMPRESS_S: self.compress_s})}
        )

    @staticmethod
    def sparse_of(content: RecordDict) -> ArrayRecord:
        only_known(content, frozenset({SPARSE_KEY}), frozenset({COMPRESS_S, *MEASURED_METRICS}))
        return required_sparse(content.array_records.get(SPARSE_KEY))


def required_sparse(record: ArrayRecord | None) -> ArrayRecord:
    """A reply's compressed payload; PayloadError when it has none."""
    if record is None:
        raise PayloadError(f"ArrayRecord {SPARSE_KEY!r} is missing")
    return record


def identity_content(partition_id: int) -> RecordDict:
    """A node's answer to an identify query: its partition id."""
    return RecordDict({METRICS_KEY: MetricRecord({PARTITION_ID: partition_id})})


def parse_identity(content: RecordDict, num_clients: int) -> int:
    """The partition id of an identify reply; ValueError naming what is wrong."""
    metrics = metric_record(content, METRICS_KEY)
    return within(PARTITION_ID, integer(metrics, PARTITION_ID), 0, num_clients - 1)


@dataclass(frozen=True)
class StateRequest:
    """A save-state or restore-state query: the checkpoint's round and its clients' directory."""

    server_round: int
    directory: str

    def to_content(self) -> RecordDict:
        config = ConfigRecord({SERVER_ROUND: self.server_round, STATE_DIR: self.directory})
        return RecordDict({CONFIG_KEY: config})

    @classmethod
    def parse(cls, content: RecordDict) -> StateRequest:
        config = config_record(content, CONFIG_KEY)
        directory = text(config, STATE_DIR, what="a directory")
        return cls(integer(config, SERVER_ROUND), directory)


def state_reply(partition_id: int, restored: bool) -> RecordDict:
    """A node's answer to a state query: its partition id, and (restore) whether it took its
    saved state."""
    metrics = MetricRecord({PARTITION_ID: partition_id, RESTORED: int(restored)})
    return RecordDict({METRICS_KEY: metrics})


def parse_state_reply(content: RecordDict, num_clients: int) -> tuple[int, bool]:
    """(partition id, restored) of a state reply; ValueError naming what is wrong."""
    partition_id = parse_identity(content, num_clients)
    return partition_id, flag(content.metric_records[METRICS_KEY], RESTORED)
