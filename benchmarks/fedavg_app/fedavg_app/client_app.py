"""One SGD step on 32 samples of the node's partition, as edgeflex's dense client does."""

from __future__ import annotations

import numpy as np
import torch
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from fedavg_app.task import model, partition, settings

app = ClientApp()


@app.train()
def train(msg: Message, context: Context) -> Message:
    torch.set_num_threads(1)
    s = settings(context.run_config)
    partition_id = int(context.node_config["partition-id"])
    data = partition(partition_id, tuple(sorted(context.run_config.items())))
    net = model(s)
    net.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    server_round = int(msg.content["config"]["server-round"])
    rng = np.random.default_rng([s.run.seed, partition_id, server_round])
    batch = rng.choice(len(data), size=min(s.training.batch_size, len(data)), replace=False)
    x, y = torch.from_numpy(data.x[batch]), torch.from_numpy(data.y[batch])
    optimizer = torch.optim.SGD(net.parameters(), lr=s.training.learning_rate)
    optimizer.zero_grad()
    loss = torch.nn.functional.cross_entropy(net(x), y)
    loss.backward()
    optimizer.step()
    content = RecordDict(
        {
            "arrays": ArrayRecord(net.state_dict()),
            "metrics": MetricRecord(
                {"train-loss": float(loss.detach()), "num-examples": len(batch)}
            ),
        }
    )
    return Message(content=content, reply_to=msg)
