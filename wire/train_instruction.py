"""A round's training instruction, as the server builds it and a client reads it:
``TrainInstruction.to_content()`` builds the RecordDict that travels, ``parse()`` reads one back
and raises ``ValueError`` (``PayloadError`` for arrays) naming what is wrong.

It carries a ``RoundConfig`` (what every client is told) and either the dense model or a
``ReplicaPayload`` plus a ``CompressionConfig``, and the collective's own records and config
entries. Arrays are checked by whoever knows what this phase expects (the collective), not here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, RecordDict
from numpy.typing import NDArray

from wire.codec import Sparse, array_record, read_raw, values_record
from wire.fields import config_record, integer, number, one_of, optional_integers, optional_number
from wire.keys import (
    ARRAYS_KEY,
    BASE_VERSION,
    BATCH_SIZE,
    COLLECTIVE,
    COMPRESSION_RATIO,
    CONFIG_KEY,
    DELTA,
    DELTA_KEY,
    FACTORED_TABLE,
    FULL,
    INJECT_BETA,
    INJECT_PARTITIONS,
    LEARNING_RATE,
    LOCAL_STEPS,
    MODEL_KEY,
    MODEL_VERSION,
    PATCH,
    PATCH_KEY,
    PAYLOAD,
    PAYLOADS,
    ROUND_START_S,
    SEED,
    SERVER_ROUND,
    VALUES,
)
from wire.reports import Parameter, requests_from_config, requests_to_config

Vector = NDArray[np.float32]


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
    # sent with the content; a client's collective reads them from it (``ClientJob.content``)
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
