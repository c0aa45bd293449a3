"""Replica payloads: a client that sat rounds out is brought up to date by a patch, exactly."""

import numpy as np
import pytest
from flwr.app import ConfigRecord, RecordDict

from client.replica import bring_up_to_date
from strategies.replicas import Replicas, patch_nbytes
from wire.codec import Sparse
from wire.keys import BASE_VERSION, CURRENT, DELTA, FULL, PATCH, PATCH_KEY
from wire.train_instruction import ReplicaPayload

SIZE = 1000


def _delta(rng: np.random.Generator, count: int) -> Sparse:
    indices = np.sort(rng.choice(SIZE, size=count, replace=False)).astype(np.int64)
    return Sparse(indices=indices, values=rng.normal(size=count).astype(np.float32), size=SIZE)


def _over_the_wire(payload: ReplicaPayload) -> ReplicaPayload:
    config, content = ConfigRecord(), RecordDict()
    payload.add_to(config, content)
    return ReplicaPayload.parse(config, content, SIZE)


def test_each_node_gets_the_smallest_payload_and_ends_bit_for_bit_at_the_model() -> None:
    rng = np.random.default_rng(3)
    replicas = Replicas()
    model = rng.normal(size=SIZE).astype(np.float32)
    states = {node: RecordDict() for node in range(4)}
    for node, state in states.items():  # round 1: everyone gets the full model and trains
        bring_up_to_date(state, _over_the_wire(replicas.payloads([node], model)[node]))
    replicas.advance(sent_to=states, applied=None, held=states)
    # Node 0 trains every round, node 1 every other round, node 2 sits out; node 3 is lost.
    for round_ in range(1, 7):
        update = _delta(rng, 20)
        model = update.apply_to(model)
        replicas.advance(sent_to=[], applied=update, held=[])
        nodes = [0] + ([1] if round_ % 2 == 0 else [])
        payloads = replicas.payloads(nodes, model)
        assert payloads[0].kind == DELTA
        if 1 in payloads:
            assert payloads[1].kind == PATCH and payloads[1].base == replicas.version - 2
            assert payloads[1].patch is not None and payloads[1].patch.indices.size <= 40
        for node, payload in payloads.items():
            replica = bring_up_to_date(states[node], _over_the_wire(payload))
            assert np.array_equal(replica, model)  # bit for bit, not merely close
        replicas.advance(sent_to=nodes, applied=None, held=nodes)
    replicas.forget_holders()
    assert replicas.kind_for(0) == FULL
    # Six rounds sat out: the patch covers every coordinate any of the six updates touched.
    replicas = Replicas()
    replicas.advance(sent_to=[], applied=None, held=[2])
    touched: set[int] = set()
    for _ in range(6):
        update = _delta(rng, 20)
        touched |= set(update.indices.tolist())
        model = update.apply_to(model)
        replicas.advance(sent_to=[], applied=update, held=[])
    patch = replicas.payloads([2], model)[2]
    assert patch.kind == PATCH and patch.patch is not None
    assert set(patch.patch.indices.tolist()) == touched
    assert np.array_equal(patch.patch.values, model[sorted(touched)])


def test_a_patch_no_smaller_than_the_model_is_sent_as_the_full_model() -> None:
    rng = np.random.default_rng(4)
    replicas = Replicas()
    model = np.zeros(SIZE, dtype=np.float32)
    replicas.advance(sent_to=[], applied=None, held=[7])
    for _ in range(2):  # every coordinate changes
        update = Sparse(np.arange(SIZE), rng.normal(size=SIZE).astype(np.float32), SIZE)
        model = update.apply_to(model)
        replicas.advance(sent_to=[], applied=update, held=[])
    assert patch_nbytes(SIZE, SIZE) >= 4 * SIZE
    assert replicas.payloads([7], model)[7].kind == FULL
    assert replicas.kind_for(8) == FULL  # never seen
    replicas.advance(sent_to=[], applied=None, held=[8])
    assert replicas.kind_for(8) == CURRENT


def test_a_patch_for_a_replica_at_another_version_is_refused() -> None:
    state = RecordDict()
    full = np.ones(SIZE, dtype=np.float32)
    bring_up_to_date(state, ReplicaPayload(FULL, 2, full=full))
    patch = Sparse(np.array([5]), np.array([3.0], dtype=np.float32), SIZE)
    with pytest.raises(ValueError, match="replica is at version 2, the server assumed 1"):
        bring_up_to_date(state, ReplicaPayload(PATCH, 4, patch=patch, base=1))
    replica = bring_up_to_date(state, ReplicaPayload(PATCH, 4, patch=patch, base=2))
    assert replica[5] == 3.0 and replica[4] == 1.0


def test_a_patch_on_the_wire_names_what_is_wrong() -> None:
    payload = ReplicaPayload(
        PATCH, 5, patch=Sparse(np.array([1]), np.array([1.0], np.float32), SIZE), base=3
    )
    config, content = ConfigRecord(), RecordDict()
    payload.add_to(config, content)
    config[BASE_VERSION] = 5
    with pytest.raises(ValueError, match="base-version 5 must be in 0..model-version - 1"):
        ReplicaPayload.parse(config, content, SIZE)
    config[BASE_VERSION] = 3
    del content[PATCH_KEY]
    with pytest.raises(ValueError, match="ArrayRecord 'patch' is missing"):
        ReplicaPayload.parse(config, content, SIZE)
