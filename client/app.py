"""The ClientApp: wiring only. Reads its node's identity, loads its data, trains, replies."""

from __future__ import annotations

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, Context, Message
from flwr.clientapp import ClientApp

from client.training import batch_rng, local_sgd
from common.data import ArrayData, client_partition, data_spec
from common.models import build_model
from common.params import Layout
from common.settings import Settings
from strategies.dense import ARRAYS_KEY, CONFIG_KEY, reply_content

LOCAL_DATA_KEY = "local-data"

app = ClientApp()


def node_identity(context: Context, settings: Settings) -> int:
    """This node's partition id, checked against the run's number of clients."""
    config = context.node_config
    for key in ("partition-id", "num-partitions"):
        if key not in config:
            raise ValueError(f"node config lacks {key!r} (pass it with --node-config)")
    partition_id, num_partitions = int(config["partition-id"]), int(config["num-partitions"])
    if num_partitions != settings.num_clients:
        raise ValueError(
            f"node has num-partitions={num_partitions} but the run has "
            f"num-clients={settings.num_clients}; they must agree"
        )
    return partition_id


def local_data(context: Context, settings: Settings, partition_id: int) -> ArrayData:
    """The node's partition, kept in ``context.state`` so it is loaded once per node."""
    if LOCAL_DATA_KEY not in context.state:
        data = client_partition(settings, partition_id)
        context.state[LOCAL_DATA_KEY] = ArrayRecord({"x": Array(data.x), "y": Array(data.y)})
    record = context.state[LOCAL_DATA_KEY]
    assert isinstance(record, ArrayRecord)
    return ArrayData(
        x=np.asarray(record["x"].numpy(), dtype=np.float32),
        y=np.asarray(record["y"].numpy(), dtype=np.int64),
    )


@app.train()
def train(msg: Message, context: Context) -> Message:
    torch.set_num_threads(1)  # several simulated clients share two cores
    settings = Settings.from_run_config(context.run_config)
    partition_id = node_identity(context, settings)
    data = local_data(context, settings, partition_id)
    received = msg.content.array_records[ARRAYS_KEY]
    config = msg.content.config_records[CONFIG_KEY]
    layout = Layout.of_record(received)
    model = build_model(settings.model, data_spec(settings), seed=settings.seed)
    result = local_sgd(
        model,
        layout.flatten(received),
        data,
        steps=int(config["local-steps"]),  # type: ignore[arg-type]
        batch_size=int(config["batch-size"]),  # type: ignore[arg-type]
        learning_rate=float(config["learning-rate"]),  # type: ignore[arg-type]
        rng=batch_rng(int(config["seed"]), partition_id, int(config["server-round"])),  # type: ignore[arg-type]
    )
    content = reply_content(
        layout.unflatten(result.update),
        partition_id=partition_id,
        num_examples=result.num_examples,
        train_loss=result.train_loss,
    )
    return Message(content=content, reply_to=msg)
