"""A round's training reply, as a client builds it and the server reads it: the client's
metrics (``TrainReply``, its stream's ``StreamReport`` and ``LiveCounts``, its compress-s, the
reports a policy asked for) and one payload, the dense update (``arrays``) or a compressed one
(``sparse``). ``TrainReply.parse`` checks the metrics and raises ``ValueError`` naming what is
wrong; the arrays are kept as they came, for the collective to check.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from flwr.app import ArrayRecord, MetricRecord, RecordDict

from wire.fields import all_or_none, integer, metric_record, no_booleans, number
from wire.keys import (
    ARRAYS_KEY,
    BUFFER_BYTES,
    BUFFER_SAMPLES,
    COMPRESS_S,
    INJECT_KEY,
    LIVE_METRICS,
    MEASURED_METRICS,
    METRICS_KEY,
    NUM_EXAMPLES,
    PARTITION_ID,
    SPARSE_KEY,
    STREAM_METRICS,
    STREAM_RATE,
    STREAM_SAMPLES,
    TRAIN_LOSS,
    WAIT_S,
)
from wire.reports import REPORT_KINDS, Report, reports_from_metrics, reports_to_metrics


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
