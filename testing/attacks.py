"""Hostile clients for tests and the attack table: an in-process federation whose
attacker (partition 0, node 100), colluders or absent partitions rewrite or drop replies on
their way to the server. What each attack does is listed in benchmarks/attacks.py, which runs
the grid of attacks, defences and modes."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np
from flwr.app import Array, ArrayRecord, Message, RecordDict

from collectives.allreduce.names import TOPK_NORM2, TRAIN_INDICES, TRAIN_VALUES
from common.settings import Settings
from testing.in_process import InProcessGrid
from wire.codec import raw_array
from wire.injection import Samples
from wire.keys import (
    ARRAYS_KEY,
    INDICES,
    INJECT_KEY,
    MASK,
    METRICS_KEY,
    NUM_EXAMPLES,
    SPARSE_KEY,
    STREAM_SAMPLES,
    TRAIN,
)
from wire.keys import VALUES as VALUES_ARRAY
from wire.packing import unpack

ATTACKER = 100
COLLUDERS = {"collude-2": (100, 101), "collude-3": (100, 101, 102)}
# Not an attack: these partitions never answer. Any defence that refuses the colluders trains
# without their data, so this is the best it can do. (A node that never answers costs the
# round timeout, so those runs time out in 1 s: every other reply is in by then, in process.)
ABSENT = {"absent-2": (100, 101)}


def scaled(content: RecordDict, factor: float | None, value: float | None = None) -> RecordDict:
    """The update times ``factor`` (or every value set to ``value``), dense or sparse."""
    out = RecordDict(dict(content.items()))
    if ARRAYS_KEY in content.array_records:
        record = content.array_records[ARRAYS_KEY]
        out[ARRAYS_KEY] = ArrayRecord(
            {
                name: Array(_change(array.numpy(), factor, value).astype(np.float32))
                for name, array in record.items()
            }
        )
    if SPARSE_KEY in content.array_records:
        record = ArrayRecord(dict(content.array_records[SPARSE_KEY].items()))
        if VALUES_ARRAY in record:
            values = np.frombuffer(record[VALUES_ARRAY].data, "<f4")
            record[VALUES_ARRAY] = raw_array(_change(values, factor, value).astype("<f4"))
        out[SPARSE_KEY] = record
    return out


def _change(x: np.ndarray, factor: float | None, value: float | None) -> np.ndarray:
    return np.full_like(x, value) if value is not None else x * factor


def _metric(key: str, value: float) -> Callable[[RecordDict, int], RecordDict]:
    def rewrite(content: RecordDict, server_round: int) -> RecordDict:
        if METRICS_KEY in content.metric_records and key in content.metric_records[METRICS_KEY]:
            content.metric_records[METRICS_KEY][key] = value
        return content

    return rewrite


def _claim_batches(content: RecordDict, server_round: int) -> RecordDict:
    for key in (NUM_EXAMPLES, STREAM_SAMPLES):
        content = _metric(key, 1024)(content, server_round)
    return content


def _junk(content: RecordDict, server_round: int) -> RecordDict:
    out = RecordDict(dict(content.items()))
    out["attachment"] = ArrayRecord({"junk": raw_array(np.zeros(4 << 20, dtype=np.uint8))})
    return out


def _inject(content: RecordDict, server_round: int) -> RecordDict:
    x = np.full((4, 64), 1e30, dtype=np.float32)
    out = RecordDict(dict(content.items()))
    out[INJECT_KEY] = Samples(x, np.arange(4, dtype=np.int64)).to_record()
    return out


class VarPin:
    """``var-pin``, told its phase by what a reply holds: a training reply's claim, the
    leader's indices, then values at them. Its state lives for one round."""

    CLAIM_FACTOR = 50.0

    def __init__(self) -> None:
        self.claim = 0.0
        self.led = False

    def __call__(self, content: RecordDict, server_round: int) -> RecordDict:
        metrics = content.metric_records.get(METRICS_KEY)
        if metrics is not None and TOPK_NORM2 in metrics:
            self.claim, self.led = float(metrics[TOPK_NORM2]) * self.CLAIM_FACTOR, False  # type: ignore[arg-type]
            metrics[TOPK_NORM2] = self.claim
            return content
        record = content.array_records.get(SPARSE_KEY)
        if record is None:
            return content
        out = RecordDict(dict(content.items()))
        if INDICES in record:
            count = record[INDICES].shape[0]
            out[SPARSE_KEY] = ArrayRecord({INDICES: raw_array(np.arange(count, dtype="<i4"))})
            self.led = True
        elif MASK in record:
            bits = np.unpackbits(np.frombuffer(record[MASK].data, np.uint8))
            pinned = np.arange(bits.size) < int(bits.sum())
            out[SPARSE_KEY] = ArrayRecord({MASK: raw_array(np.packbits(pinned))})
            self.led = True
        elif self.led and VALUES_ARRAY in record:  # a model without buffers: I is its k indices
            k = record[VALUES_ARRAY].shape[0]
            values = np.full(k, np.sqrt(self.claim / k), dtype="<f4")
            out[SPARSE_KEY] = ArrayRecord({VALUES_ARRAY: raw_array(values)})
        return out


class Coalition:
    """Colluders that send one update: the first colluder's of a phase, x −10, in every
    colluder's own reply of that phase (their metrics stay their own)."""

    def __init__(self) -> None:
        self.phase: tuple[int, str] | None = None  # (round, message type) of ``update``
        self.update: dict[str, ArrayRecord] = {}

    def __call__(self, content: RecordDict, phase: tuple[int, str]) -> RecordDict:
        if phase != self.phase:
            flipped = scaled(content, -10.0)
            self.phase = phase
            self.update = {k: flipped.array_records[k] for k in UPDATE_RECORDS if k in flipped}
            return flipped
        out = RecordDict(dict(content.items()))
        for key, record in self.update.items():
            if key in out:
                out[key] = record
        return out


ATTACKS: dict[str, Callable[[RecordDict, int], RecordDict]] = {
    "scale": lambda c, r: scaled(c, 1e6),
    "huge-once": lambda c, r: scaled(c, None, 1e30) if r == 10 else c,
    "flip": lambda c, r: scaled(c, -10.0),
    "examples": _metric(NUM_EXAMPLES, 10**12),
    "var-claim": _metric(TOPK_NORM2, 1e300),
    "var-pin": VarPin(),
    "inject": _inject,
    "batch-claim": _claim_batches,
    "junk-record": _junk,
    "restart": lambda c, r: scaled(c, -10.0),
}


# attack -> after how many of its training replies the attacker comes back as a new node
RESTARTS = {"restart": 4}

UPDATE_RECORDS = (ARRAYS_KEY, SPARSE_KEY)
UPDATE_ATTACKS = {"scale", "huge-once", "flip", "restart", *COLLUDERS}
# attacks on Allreduce's leader phases rewrite every reply of the round
PHASE_ATTACKS = {"var-pin"}


class AttackGrid(InProcessGrid):
    """The in-process federation with node 100's training replies rewritten by ``attack``."""

    def __init__(self, settings: Settings, attack: str | None) -> None:
        super().__init__(settings)
        self.attack = ATTACKS.get(attack or "")
        self.fail_nodes = set(ABSENT.get(attack or "", ()))
        self.coalition = Coalition() if attack in COLLUDERS else None
        self.attackers = COLLUDERS.get(attack or "", (ATTACKER,))
        # Allreduce's values come in their own phase: an update attack rewrites those too.
        self.rewrites = {TRAIN, TRAIN_VALUES} if attack in UPDATE_ATTACKS else {TRAIN}
        if attack in PHASE_ATTACKS:
            self.rewrites = {TRAIN, TRAIN_INDICES, TRAIN_VALUES}
        self.round = 0
        self.restart_every = RESTARTS.get(attack or "")
        self.attacker_replies = 0
        self.restart_pending = False

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> list[Message]:
        messages = list(messages)
        kind = messages[0].metadata.message_type if messages else None
        if kind == TRAIN:  # the ServerApp's timed grid pushes one message at a time: read the round
            # (packed-messages: the ServerApp packs its instructions, the ClientApp its replies)
            config = unpack(messages[0].content).config_records["config"]
            self.round = int(config["server-round"])  # type: ignore[arg-type]
        replies = super().send_and_receive(messages, timeout=timeout)
        if (self.attack is None and self.coalition is None) or kind not in self.rewrites:
            return replies
        replies = [
            Message(content=self._rewrite(unpack(r.content), str(kind)), metadata=r.metadata)  # type: ignore[call-overload]
            if r.metadata.src_node_id in self.attackers and not r.has_error()
            else r
            for r in replies
        ]
        if kind == TRAIN and any(r.metadata.src_node_id in self.attackers for r in replies):
            self._restart_maybe()
        return replies

    def _restart_maybe(self) -> None:
        """``restart``: after every ``restart_every``-th training reply, the attacker's
        SuperNode comes back under a new node id (its partition and state kept), as a device
        that restarts to shed its record would; between rounds (``get_node_ids``), since the
        round's later phases still go to the id it answered under."""
        self.attacker_replies += 1
        if self.restart_every is not None and self.attacker_replies % self.restart_every == 0:
            self.restart_pending = True

    def get_node_ids(self) -> list[int]:
        if self.restart_pending:
            self.restart_pending = False
            (old,) = self.attackers
            new = 1000 + self.attacker_replies
            self.contexts[new] = self.contexts.pop(old)
            self.contexts[new].node_id = new
            self.attackers = (new,)
        return super().get_node_ids()

    def _rewrite(self, content: RecordDict, kind: str) -> RecordDict:
        if self.coalition is not None:
            return self.coalition(content, (self.round, kind))
        assert self.attack is not None
        return self.attack(content, self.round)
