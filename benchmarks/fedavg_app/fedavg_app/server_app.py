"""Flower's FedAvg with Strategy.start; centralized evaluation notes each round's end time."""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, MetricRecord
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

from fedavg_app.task import model, server_test_split, settings

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    s = settings(context.run_config)
    net = model(s)
    test = server_test_split(s)
    times_file = Path(str(context.run_config["times-file"]))
    ends: list[float] = []

    def evaluate(server_round: int, arrays: ArrayRecord) -> MetricRecord:
        net.load_state_dict(arrays.to_torch_state_dict())
        net.eval()
        with torch.no_grad():
            logits = net(torch.from_numpy(test.x))
            labels = torch.from_numpy(test.y)
            accuracy = float((logits.argmax(dim=1) == labels).double().mean())
        ends.append(time.perf_counter())
        times_file.write_text(json.dumps({"round_ends": ends, "accuracy": accuracy}))
        return MetricRecord({"accuracy": accuracy})

    strategy = FedAvg(
        fraction_train=1.0,
        fraction_evaluate=0.0,
        min_train_nodes=s.run.num_clients,
        min_available_nodes=s.run.num_clients,
    )
    strategy.start(
        grid=grid,
        initial_arrays=ArrayRecord(net.state_dict()),
        num_rounds=s.run.num_server_rounds,
        train_config=ConfigRecord({"lr": s.training.learning_rate}),
        evaluate_fn=evaluate,
    )
