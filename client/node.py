"""What a node knows of itself: its partition (node config), its data, its own stream rate,
where the run's state store keeps its vectors."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from flwr.app import Array, ArrayRecord, Context

from common.data import ArrayData, client_partition
from common.settings import Settings
from state.store import node_directory, run_directory
from wire.codec import read_npy
from wire.keys import NODE_NUM_PARTITIONS, NODE_PARTITION_ID, NODE_STREAM_RATE, SAMPLES_X, SAMPLES_Y

LOCAL_DATA_KEY = "local-data"


def node_identity(context: Context, settings: Settings) -> int:
    """This node's partition id, checked against the run's number of clients."""
    config = context.node_config
    for key in (NODE_PARTITION_ID, NODE_NUM_PARTITIONS):
        if key not in config:
            raise ValueError(f"node config lacks {key!r} (pass it with --node-config)")
    partition_id = int(config[NODE_PARTITION_ID])
    num_partitions = int(config[NODE_NUM_PARTITIONS])
    if num_partitions != settings.run.num_clients:
        raise ValueError(
            f"node has num-partitions={num_partitions} but the run has "
            f"num-clients={settings.run.num_clients}; they must agree"
        )
    return partition_id


def store_directory(context: Context, settings: Settings) -> Path | None:
    """This node's directory in the run's state store, when the server made one."""
    if not run_directory(settings.deployment.state_store_dir, context.run_id).is_dir():
        return None
    partition_id = node_identity(context, settings)
    return node_directory(settings.deployment.state_store_dir, context.run_id, partition_id)


def node_stream_rate(context: Context) -> float | None:
    """The device's own stream rate (node config ``stream-rate``, samples/s), if it sets one."""
    if NODE_STREAM_RATE not in context.node_config:
        return None
    value = context.node_config[NODE_STREAM_RATE]
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"node config stream-rate = {value!r} is not a number")
    if value <= 0:
        raise ValueError(f"node config stream-rate must be > 0 samples/s, got {value}")
    return float(value)


def keep_local_data(context: Context, data: ArrayData) -> None:
    """Keep ``data`` as the node's partition (``local_data`` reads it from now on)."""
    context.state[LOCAL_DATA_KEY] = ArrayRecord(
        {SAMPLES_X: Array(data.x), SAMPLES_Y: Array(data.y)}
    )


def local_data(context: Context, settings: Settings, partition_id: int) -> ArrayData:
    """The node's partition, kept in ``context.state`` so it is loaded once per node."""
    if LOCAL_DATA_KEY not in context.state:
        keep_local_data(context, client_partition(settings, partition_id))
    record = context.state[LOCAL_DATA_KEY]
    assert isinstance(record, ArrayRecord)
    # read_npy, not Array.numpy: NumPy's np.load parses each header with ast.literal_eval.
    return ArrayData(
        x=np.array(read_npy(record[SAMPLES_X].data, SAMPLES_X), dtype=np.float32),
        y=np.array(read_npy(record[SAMPLES_Y].data, SAMPLES_Y), dtype=np.int64),
    )
