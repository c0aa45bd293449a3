"""A seeded fuzzer of malformed and hostile replies, driven through the in-process federation.

Through the real ServerApp (``server.app.main``: records, evaluation, checkpoint; the model
read back from the checkpoint) or, faster, through the strategy alone (``--through
strategy``, what the test suite samples). Every case runs two rounds with three clients:
round 1 honest (identities and replicas bound), round 2 with one node's reply in one phase
replaced by a mutation of it. The outcome is one of
- ``refused``: the server refused that reply, naming the node, and the model equals the model
  of the same round without that reply;
- ``harmless``: accepted, and the model equals the honest round's;
- ``wrong``: anything else (accepted and changed the model, or refused with a different model);
- ``crashed``: an exception escaped the strategy.
Finite values that merely differ (a scaled update, random but valid bytes, a plausible norm
claim) are not malformed: robust aggregation and the leader's claim check answer those.

    .venv/bin/python -m tests.fuzz --cases 2000     # prints the table per phase
    .venv/bin/python -m tests.fuzz --cases 600 --through strategy
"""

from __future__ import annotations

import argparse
import math
import random
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Error, Message, MetricRecord, RecordDict

from client.node import LOCAL_DATA_KEY
from common.data import client_partition
from common.flower_patches import set_task_identity
from common.settings import Settings, settings_with
from server.checkpoint import CHECKPOINT_NAME
from server.checkpoint import KIND as CHECKPOINT
from server.records import read_rounds
from state.archive import read_archive
from testing.in_process import InProcessGrid, run_server_app
from tests.helpers import run_in_process
from wire.packing import is_packed, pack, unpack

DROPPED_WAIT_S = 2.0  # through the ServerApp: how long a round waits for a reply not coming
BASE = {"num_clients": 3, "batch_size": 16, "learning_rate": 0.3, "seed": 5}
# mode -> settings; phase -> (mode, message type, whose reply: a node id or "leader")
MODES: dict[str, dict[str, object]] = {
    "dense": {"collective": "dense"},
    "dense-streams": {
        "collective": "dense",
        "stream_rates": "S1",
        "batch_policy": "rate",
        "aggregation_weights": "rate",
    },
    "streams-lr": {
        "collective": "dense",
        "stream_rates": "S1",
        "batch_policy": "rate",
        "buffer_policy": "persistence",
        "buffer_capacity": 1024,
        "lr_scaling": "linear",
        "lr_scale_max": 2.0,
        "aggregation_weights": "rate",
    },
    "fedadam": {"collective": "dense", "server_optimizer": "fedadam"},
    "injection": {"collective": "dense", "injection_alpha": 0.34, "injection_beta": 0.5},
    "allgather": {"collective": "allgather", "compression_ratio": 0.05},
    "allgather-q8-nsga2": {
        "collective": "allgather",
        "encoding": "int8",
        "cr_schedule": "nsga2",
        "cr_warmup_rounds": 5,
        "compression_ratio": 0.05,
    },
    "adaptive": {"collective": "allgather", "compression_ratio": 0.05, "adaptive_delta": 1.0},
    "allgather-release": {
        "collective": "allgather",
        "compression_ratio": 0.05,
        "whole_vectors": True,
        "sparsity_warmup_rounds": 3,
        "error_feedback_clip": 2.0,
    },
    "allreduce-var": {
        "collective": "allreduce",
        "leader": "var",
        "compression_ratio": 0.05,
    },
    "allreduce-global": {
        "collective": "allreduce",
        "index_policy": "global",
        "compression_ratio": 0.05,
    },
    "allreduce-residual-hints": {
        "collective": "allreduce",
        "index_policy": "residual-hints",
        "compression_ratio": 0.05,
    },
}
PHASES: dict[str, tuple[str, str, int | str]] = {
    "dense train": ("dense", "train", 101),
    "dense train, streams": ("dense-streams", "train", 101),
    "dense train, streams + lr scaling": ("streams-lr", "train", 101),
    "dense train, fedadam": ("fedadam", "train", 101),
    "dense train, injection": ("injection", "train", "sharer"),
    "allgather train": ("allgather", "train", 101),
    "allgather train, q8 + gains": ("allgather-q8-nsga2", "train", 101),
    "allgather train, adaptive": ("adaptive", "train", 101),
    "allgather train, release controls": ("allgather-release", "train", 101),
    "allreduce train": ("allreduce-var", "train", 101),
    "allreduce indices": ("allreduce-var", "train.indices", "leader"),
    "allreduce values": ("allreduce-var", "train.values", 101),
    "allreduce-global train": ("allreduce-global", "train", 101),
    "allreduce-residual-hints train": ("allreduce-residual-hints", "train", 101),
}
BAD_VALUES: list[object] = [
    math.nan,
    math.inf,
    -math.inf,
    -1,
    0,
    -1e-9,
    1e12,
    1e300,
    2**62,
    [],
    [1.0, 2.0],
    [0.5] * 100_000,
]


Mutation = Callable[[RecordDict, random.Random], RecordDict | None]  # None: an error reply


def _copy(content: RecordDict) -> RecordDict:
    out = RecordDict()
    for key, record in content.items():
        if isinstance(record, ArrayRecord):
            out[key] = ArrayRecord(dict(record.items()))
        elif isinstance(record, MetricRecord):
            out[key] = MetricRecord(dict(record.items()))
        else:
            out[key] = ConfigRecord(dict(record.items()))  # type: ignore[arg-type]
    return out


def _metric(content: RecordDict, rng: random.Random) -> RecordDict:
    out = _copy(content)
    metrics = next(iter(out.metric_records.values()), None)
    if metrics is None:
        out["metrics"] = metrics = MetricRecord()
    keys = sorted(metrics) or ["num-examples"]
    key = rng.choice(keys)
    if rng.random() < 0.15:
        metrics.pop(key, None)
    else:
        metrics[key] = rng.choice(BAD_VALUES)  # type: ignore[assignment]
    return out


def _extra_metric(content: RecordDict, rng: random.Random) -> RecordDict:
    out = _copy(content)
    metrics = next(iter(out.metric_records.values()), None)
    if metrics is None:
        out["metrics"] = metrics = MetricRecord()
    metrics[rng.choice(["attachment", "num-examples-2", "lr", "sent-at"])] = rng.choice(
        [1.0, 2**62, [0.5] * 1000]
    )
    return out


def _drop_record(content: RecordDict, rng: random.Random) -> RecordDict:
    out = _copy(content)
    del out[rng.choice(sorted(out))]
    return out


def _extra_record(content: RecordDict, rng: random.Random) -> RecordDict:
    out = _copy(content)
    name = rng.choice(["injected", "sparse", "arrays", "unexpected"])
    if name in out:
        return _array(content, rng)
    out[name] = ArrayRecord({"x": Array(np.full((3, 2), 7.0, np.float32))})
    return out


def _corrupt(array: Array, rng: random.Random) -> Array:
    kind = rng.randrange(8)
    data, shape, dtype, stype = array.data, tuple(array.shape), array.dtype, array.stype
    if kind == 0:
        stype = rng.choice(["pickle", "numpy.ndarray", "edgeflex.raw", ""])
    elif kind == 1:
        dtype = rng.choice(["float64", "int32", "int8", "float16", "bool", "object"])
    elif kind == 2:
        shape = rng.choice([(), (10**12,), (shape[0] * 2,) if shape else (2,), (1, 1, 1)])
    elif kind == 3:
        data = data[: rng.randrange(len(data) + 1)]
    elif kind == 4:
        data = data + bytes(rng.randrange(1, 64))
    elif kind == 5:  # same length, not a multiple of the element size any more
        data = data[:-1] + bytes(2) if data else b"\0"
    elif kind == 6 and dtype in ("float32", "float64") and len(data) >= 8:
        values = bytearray(data)
        at = rng.randrange(len(values) // 4) * 4
        values[at : at + 4] = np.array([rng.choice([np.nan, np.inf])], "<f4").tobytes()
        data = bytes(values)
    else:
        shape = (10**12,) if not shape or len(shape) == 1 else (10**12, *shape[1:])
    return Array(dtype=dtype, shape=shape, stype=stype, data=data)


def _array(content: RecordDict, rng: random.Random) -> RecordDict:
    out = _copy(content)
    records = sorted(out.array_records)
    if not records:
        return _metric(content, rng)
    record = out.array_records[rng.choice(records)]
    names = sorted(record)
    if not names:
        return _metric(content, rng)
    name = rng.choice(names)
    record[name] = _corrupt(record[name], rng)
    return out


def _error(content: RecordDict, rng: random.Random) -> None:
    return None


MUTATIONS: list[Mutation] = [_metric, _metric, _array, _array, _array, _drop_record]
MUTATIONS += [_extra_record, _extra_metric, _error]


_PARTITIONS: dict[tuple[object, ...], ArrayRecord] = {}


def _partition(settings: Settings, partition: int) -> ArrayRecord:
    key = (settings.run.seed, settings.run.num_clients, settings.data.partitioner, partition)
    if key not in _PARTITIONS:
        data = client_partition(settings, partition)
        _PARTITIONS[key] = ArrayRecord({"x": Array(data.x), "y": Array(data.y)})
    return _PARTITIONS[key]


class MutatingGrid(InProcessGrid):
    """Round 2: the chosen reply of the chosen phase is mutated (or dropped: ``mutate=None``)."""

    def __init__(self, settings: Settings, phase: str, target: int | str, mutate: object) -> None:
        super().__init__(settings)
        for context in self.contexts.values():  # the partitions, split once per run of the fuzzer
            partition = int(context.node_config["partition-id"])
            context.state[LOCAL_DATA_KEY] = _partition(settings, partition)
        self.phase, self.target, self.mutate = phase, target, mutate
        self.round = 0
        self.sharer: int | None = None  # of this round, under injection
        self.hit: int | None = None

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> list[Message]:
        """The strategy alone sends a phase's messages at once; the ServerApp's timed grid
        pushes them one at a time: the round comes from the training instructions."""
        messages = list(messages)
        kind = messages[0].metadata.message_type if messages else ""
        if kind == "train":
            config = unpack(messages[0].content).config_records["config"]
            server_round = int(config["server-round"])  # type: ignore[arg-type]
            if server_round != self.round:
                self.round, self.sharer = server_round, None
        replies = super().send_and_receive(messages, timeout=timeout)
        if self.round != 2 or kind != self.phase:
            return replies
        target = self._target(messages)
        out = []
        for reply in replies:
            if reply.metadata.src_node_id != target or self.mutate == "keep":
                out.append(reply)
                continue
            self.hit = target
            if self.mutate == "drop":
                continue
            # The ServerApp's messages travel packed (wire/packing.py): a reply is mutated as
            # its content, then packed again as the node would send it.
            mutated = self.mutate(unpack(reply.content))  # type: ignore[operator]
            if mutated is None:
                out.append(Message(error=Error(code=0, reason="boom"), metadata=reply.metadata))
            else:
                out.append(Message(content=_as_sent(mutated, reply), metadata=reply.metadata))
        return out

    def _target(self, messages: list[Message]) -> int | None:
        if self.target == "leader":
            return messages[0].metadata.dst_node_id
        if self.target == "sharer":  # the node asked to share this round (every message says)
            for m in messages:
                config = unpack(m.content).config_records.get("config")
                if config is not None and "inject-partitions" in config:
                    self.sharer = 100 + int(config["inject-partitions"][0])  # type: ignore[index]
            return self.sharer
        return int(self.target)


def _as_sent(mutated: RecordDict, reply: Message) -> RecordDict:
    """A mutated content as a node would send it: packed like the honest reply, or as it is
    when Flower's protobuf cannot hold it (an array shape beyond int32: such a content can
    only travel unpacked)."""
    if not is_packed(reply.content):
        return mutated
    try:
        return pack(mutated)
    except (ValueError, TypeError):
        return mutated


def _run(
    phase: str, mutate: object, through: str = "strategy"
) -> tuple[np.ndarray, list[str], int | None]:
    """Round 2's model, its refusals and the node whose reply was mutated (None: none was)."""
    return THROUGH[through](phase, mutate)


def _through_server_app(phase: str, mutate: object) -> tuple[np.ndarray, list[str], int | None]:
    mode, kind, target = PHASES[phase]
    with tempfile.TemporaryDirectory() as out:
        settings = settings_with(  # a dropped reply is waited for until the round times out
            **(BASE | MODES[mode]),
            num_server_rounds=2,
            checkpoint_every=2,
            results_dir=out,
            round_timeout_s=DROPPED_WAIT_S,
        )
        grid = MutatingGrid(settings, kind, target, mutate)
        run_server_app(grid)
        model = read_archive(Path(out) / CHECKPOINT_NAME, CHECKPOINT)["model"]["vector"]
        refused = read_rounds(Path(out))[1]["refused"]
    return model, refused, grid.hit


def _through_strategy(phase: str, mutate: object) -> tuple[np.ndarray, list[str], int | None]:
    mode, kind, target = PHASES[phase]
    settings = settings_with(**(BASE | MODES[mode]))
    grid = MutatingGrid(settings, kind, target, mutate)
    model, _, _, rounds = run_in_process(settings, 2, grid)
    return model, rounds[2].refused, grid.hit


THROUGH = {"server-app": _through_server_app, "strategy": _through_strategy}
OUTCOMES = ("refused", "harmless", "wrong", "crashed")


def fuzz(
    cases: int, seed: int = 0, through: str = "strategy", phases: Iterable[str] = PHASES
) -> tuple[dict[str, Counter[str]], list[str]]:
    """``cases`` mutated replies spread over the ``phases``: outcome counts per phase, and
    what the server said of each ``wrong`` case."""
    set_task_identity()
    rng = random.Random(seed)
    phases = list(phases)
    references = {p: (_run(p, "keep", through)[0], _run(p, "drop", through)[0]) for p in phases}
    counts: dict[str, Counter[str]] = {p: Counter() for p in phases}
    wrong: list[str] = []
    for case in range(cases):
        phase = phases[case % len(phases)]
        mutation = rng.choice(MUTATIONS)
        case_rng = random.Random(rng.getrandbits(32))
        honest, dropped = references[phase]
        try:
            mutate = lambda c, m=mutation, r=case_rng: m(c, r)  # noqa: E731
            model, refused, node = _run(phase, mutate, through)
        except Exception:  # what the suite exists to find
            counts[phase]["crashed"] += 1
            continue
        named = node is not None and any(r.startswith(f"node {node}") for r in refused)
        if named and np.array_equal(model, dropped):
            counts[phase]["refused"] += 1
        elif not named and np.array_equal(model, honest):
            counts[phase]["harmless"] += 1
        else:
            counts[phase]["wrong"] += 1
            wrong.append(f"{phase} ({mutation.__name__}): {refused}")
    return counts, wrong


def table(counts: dict[str, Counter[str]]) -> str:
    lines = ["| phase | tried | " + " | ".join(OUTCOMES) + " |", "|---" * (len(OUTCOMES) + 2) + "|"]
    total: Counter[str] = Counter()
    for phase, c in counts.items():
        total.update(c)
        lines.append(
            f"| {phase} | {sum(c.values())} | " + " | ".join(str(c[o]) for o in OUTCOMES) + " |"
        )
    lines.append(
        f"| all | {sum(total.values())} | " + " | ".join(str(total[o]) for o in OUTCOMES) + " |"
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", type=int, default=600)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--through", choices=sorted(THROUGH), default="server-app")
    args = parser.parse_args()
    counts, wrong = fuzz(args.cases, args.seed, args.through)
    print(table(counts))
    for case in wrong:
        print("wrong:", case)


if __name__ == "__main__":
    import logging

    logging.getLogger("flwr").setLevel(logging.ERROR)
    main()
