"""A round's training instructions: the dense model for a dense round; for a compressed one
each node's replica payload with the compression config, the collective's index set, hint
count and records. Nodes sent the same payload share one content (serialized and measured
once)."""

from __future__ import annotations

from flwr.app import ArrayRecord, Message, RecordDict

from collectives.base import Collective, Vector
from strategies.replicas import Replicas
from wire.nbytes import content_nbytes
from wire.train_instruction import CompressionConfig, RoundConfig, TrainInstruction


def instructions(
    round_config: RoundConfig,
    collective: Collective,
    compression: CompressionConfig,
    arrays: ArrayRecord,
    model: Vector,
    nodes: list[int],
    replicas: Replicas,
) -> tuple[dict[int, RecordDict], dict[str, int] | None]:
    """Each node's instruction, and (compressed) how many nodes got each payload kind."""
    if not collective.compressed:
        content = TrainInstruction(round_config, dense_model=arrays).to_content()
        return {node: content for node in nodes}, None
    payloads = replicas.payloads(nodes, model)
    records = collective.round_records(compression.ratio)
    own_config = collective.round_config()
    by_payload = {
        id(p): TrainInstruction(
            round_config,
            replica=p,
            compression=compression,
            records=records,
            config=own_config,
        ).to_content()
        for p in payloads.values()
    }
    contents = {node: by_payload[id(p)] for node, p in payloads.items()}
    return contents, replicas.counts(payloads)


def instruction_sizes(messages: list[Message]) -> dict[int, int]:
    """Bytes of each node's instruction; a content shared by several is serialized once."""
    sizes: dict[int, int] = {}
    out = {}
    for m in messages:
        key = id(m.content)
        if key not in sizes:
            sizes[key] = content_nbytes(m.content)
        out[m.metadata.dst_node_id] = sizes[key]
    return out
