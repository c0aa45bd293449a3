"""The ServerApp: reads the run config once, builds the pieces, calls ``strategy.start``."""

from __future__ import annotations

import shutil
import time
from logging import INFO, WARNING
from pathlib import Path

import numpy as np
from flwr.app import ArrayRecord, Context, MetricRecord
from flwr.common.logger import log
from flwr.serverapp import Grid, ServerApp
from flwr.superlink.grid import InMemoryGrid

from common.data import data_spec, server_test_split, server_validation_split
from common.flower_patches import shorten_grid_pull, tune_simulation_process
from common.models import build_model
from common.params import buffer_positions, model_to_vector
from common.settings import PROJECT_ROOT, Settings
from common.workload import check_workload
from compress import COMPRESSORS
from compress.state_store import (
    DISK,
    client_state_estimate,
    make_run_directory,
    run_directory,
    store_root,
    stored_clients,
    sweep_abandoned,
    usable_memory_bytes,
    uses_disk,
)
from server.build import (
    AUTO,
    COLLECTIVE_OF_STRATEGY,
    ROBUST,
    auto_candidates,
    bounds,
    predicted_collectives,
    ratio_policy,
    relay,
    server_optimizer,
    train_config_record,
)
from server.checkpoint import Checkpoint, checkpoint_path, read_checkpoint, write_checkpoint
from server.client_states import keep_only, restore_client_states, save_client_states
from server.evaluation import BatchNormDiagnosis, evaluate
from server.packed_grid import PackedGrid
from server.records import RunRecorder, default_results_dir, progress_line
from strategies.collectives import COLLECTIVES
from strategies.collectives.base import Indices, sent_whole
from strategies.collectives.dense import Dense
from strategies.edge import EdgeStrategy
from strategies.ledger import Ledger
from strategies.policies.collective import AutoCollective, FixedCollective
from strategies.policies.lr import LearningRates
from strategies.policies.round_times import RoundTimes
from strategies.policies.statistics import STATISTICS, Averaged, StatisticsPolicy
from strategies.policies.weights import WEIGHTS
from strategies.round_state import Policies
from strategies.sampling import ClientSampler
from timing.clock import ServerLink, VirtualClock
from timing.devices import load_catalog
from timing.network import load_schedule
from timing.timed_grid import DEFAULT_POLL_S, SIMULATION_POLL_S, TimedGrid
from wire.layout import Layout
from wire.stream_samples import parse_broker

app = ServerApp()
# Flower's simulation process imports this module before its engine starts: shorten the
# engine's pickup and keep numpy to one BLAS thread there (common/flower_patches.py).
tune_simulation_process()


def wait_for_nodes(grid: Grid, expected: int, timeout_s: float) -> None:
    """Block until ``expected`` nodes are connected; fail clearly on too few or too many."""
    deadline = time.monotonic() + timeout_s
    while True:
        connected = len(list(grid.get_node_ids()))
        if connected > expected:
            raise RuntimeError(
                f"{connected} nodes are connected but num-clients = {expected}; "
                "start exactly num-clients SuperNodes (in simulation, num-supernodes)"
            )
        if connected == expected:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"only {connected} of num-clients = {expected} nodes connected "
                f"within {timeout_s:.0f} s"
            )
        time.sleep(0.1)


def resolve_results_dir(settings: Settings) -> Path:
    path = (
        Path(settings.results_dir)
        if settings.results_dir
        else default_results_dir(settings.strategy)
    )
    return path if path.is_absolute() else Path.cwd() / path


def build_strategy(
    settings: Settings,
    clock: VirtualClock,
    layout: Layout,
    buffers: Indices | None = None,
    statistics: StatisticsPolicy | None = None,
) -> EdgeStrategy:
    """The strategy and its parts, as the settings choose them. ``buffers``: positions of the
    model's buffers, which compressed collectives send whole every round (with
    ``topk-dense-vectors``, every array of at most one dimension too); ``statistics``: where
    batch-norm statistics come from (default: the clients' averages)."""
    compressor = COMPRESSORS[settings.compressor]
    buffers = np.zeros(0, dtype=np.int64) if buffers is None else buffers
    always = sent_whole(layout, buffers, settings.topk_dense_vectors)
    collectives = {
        name: half.from_settings(settings, layout, always) for name, half in COLLECTIVES.items()
    }
    times = RoundTimes(
        settings.num_clients,
        layout.size,
        settings.topology,
        {name: collectives[name] for name in predicted_collectives(settings)},
        compressor.values_nbytes,
    )
    collective = COLLECTIVE_OF_STRATEGY[settings.strategy](settings)
    chooser = (
        AutoCollective(times, auto_candidates(settings))
        if collective == AUTO
        else FixedCollective(collective)
    )
    return EdgeStrategy(
        num_clients=settings.num_clients,
        layout=layout,
        collectives=collectives,
        compressor=compressor,
        policies=Policies(
            ratio=ratio_policy(settings),
            collective=chooser,
            weights=WEIGHTS[settings.aggregation_weights],
            learning_rates=LearningRates(settings.lr_scaling, settings.lr_scale_max),
            defence=ROBUST[settings.robust](settings, buffers),
            server_optimizer=server_optimizer(settings, buffers),
            statistics=Averaged() if statistics is None else statistics,
        ),
        times=times,
        ledger=Ledger(clock, settings.topology, layout.size, settings.timing == "measured"),
        bounds=bounds(settings),
        relay=relay(settings),
        sampler=(
            ClientSampler(settings.clients_per_round, settings.seed)
            if settings.clients_per_round
            else None
        ),
        min_clients=settings.min_clients,
        round_timeout_s=settings.round_timeout_s,
    )


def _state_store(
    settings: Settings, run_id: int, parameters: int, shares_files: bool
) -> Path | None:
    """The run's state store directory, made when its clients keep their vectors on disk
    (compress/state_store.py; only where they share this file system)."""
    if not shares_files:
        if settings.state_store == DISK:
            log(WARNING, "edgeflex: state-store = disk is for simulation; devices keep theirs")
        return None
    compressed = COLLECTIVE_OF_STRATEGY[settings.strategy](settings) != Dense.name
    estimate = client_state_estimate(settings.num_clients, parameters, compressed)
    memory = usable_memory_bytes()
    if not uses_disk(settings.state_store, estimate, memory):
        # stopped runs' directories go (one left with this run's id would tell its clients
        # to use a store); making the run's directory sweeps them too
        sweep_abandoned(store_root(settings.state_store_dir))
        return None
    store = run_directory(settings.state_store_dir, run_id)
    make_run_directory(store)
    free = shutil.disk_usage(store).free
    log(
        INFO,
        "edgeflex: clients keep their vectors in %s (state-store = %s; up to %.1f GB, memory "
        "%.1f GB, free disk %.1f GB)",
        store,
        settings.state_store,
        estimate / 1e9,
        memory / 1e9,
        free / 1e9,
    )
    if estimate > free:
        log(WARNING, "edgeflex: the state store can outgrow the free disk if every client trains")
    return store


def _remove_store(store: Path) -> None:
    """Say what the clients kept in the store (none: they could not see it), then remove it."""
    clients, stored = stored_clients(store)
    level = INFO if clients else WARNING
    log(level, "edgeflex: the state store held %d clients' vectors, %.1f MB", clients, stored / 1e6)
    shutil.rmtree(store, ignore_errors=True)


@app.main()
def main(grid: Grid, context: Context) -> None:
    settings = Settings.from_run_config(context.run_config)
    if settings.short_polls:
        shorten_grid_pull(settings.round_timeout_s)
    # Polls from 2 ms, doubling up to 0.1 s (Flower's: 3 s), or 5 ms in simulation, where a
    # poll is a lookup in this process; and times every exchange.
    poll_s = SIMULATION_POLL_S if isinstance(grid, InMemoryGrid) else DEFAULT_POLL_S
    # Clients that share the server's file system (Flower's simulation, the in-process
    # federation of tests) keep their state across a checkpoint (server/client_states.py).
    shares_files = isinstance(grid, InMemoryGrid) or bool(getattr(grid, "shares_files", False))
    if settings.packed_messages and not isinstance(grid, InMemoryGrid):
        grid = PackedGrid(grid)  # a simulation's messages never leave its process
    wake_ups = None
    if settings.wake_broker and not isinstance(grid, InMemoryGrid):  # agents: common/wake_ups.py
        from common.wake_ups import WakeUps, run_topic

        wake_ups = WakeUps(parse_broker(settings.wake_broker))
        wake_ups.listen(run_topic(context.run_id))
    grid = TimedGrid(grid, poll_s=poll_s, wake_ups=wake_ups)
    catalog = load_catalog(PROJECT_ROOT / settings.devices_file)
    profiles = catalog.assign(settings.device_mix, settings.num_clients)
    spec = data_spec(settings)
    test = server_test_split(settings)
    validation = server_validation_split(settings)
    workload = check_workload(settings.model, spec, seed=settings.seed)
    model = build_model(settings.model, spec, seed=settings.seed)
    layout = Layout.of_model(model)
    initial = layout.unflatten(model_to_vector(model))
    results_dir = resolve_results_dir(settings)
    recorder = RunRecorder(results_dir, settings.to_run_config(), workload.to_record())
    log(
        INFO,
        "edgeflex: %s, model %s (%d parameters, %.3g training FLOPs per sample), %d clients, "
        "records in %s",
        settings.strategy,
        settings.model,
        workload.parameters,
        workload.train_flops_per_sample,
        settings.num_clients,
        results_dir,
    )

    schedule = load_schedule(
        PROJECT_ROOT / settings.networks_file, settings.network, settings.num_clients, settings.seed
    )
    server_link = ServerLink.from_mbps(
        settings.server_uplink_mbps, settings.server_downlink_mbps, settings.server_latency_ms
    )
    clock = VirtualClock(
        profiles, schedule, flops_per_sample=workload.train_flops_per_sample, server=server_link
    )
    statistics = STATISTICS[settings.batch_norm_statistics](model, validation)
    strategy = build_strategy(settings, clock, layout, buffer_positions(model), statistics)
    first_round = 1
    resumed: tuple[Path, int] | None = None
    if settings.resume_from:
        checkpoint = read_checkpoint(
            Path(settings.resume_from), settings.to_run_config(), fresh=strategy
        )
        checkpoint.strategy.take_resumable(fresh=strategy)
        strategy = checkpoint.strategy
        resumed = checkpoint_path(Path(settings.resume_from)).parent, checkpoint.server_round
        initial = layout.unflatten(checkpoint.model)
        recorder.resume(checkpoint.rows, checkpoint.initial_accuracy, checkpoint.initial_loss)
        first_round = checkpoint.server_round + 1
        log(
            INFO,
            "edgeflex: resuming after round %d from %s",
            checkpoint.server_round,
            settings.resume_from,
        )

    def save(server_round: int, arrays: ArrayRecord, last: bool) -> None:
        every = settings.checkpoint_every
        if every and (last or server_round % every == 0):
            initial_accuracy, initial_loss = recorder.initial
            if shares_files:
                save_client_states(
                    grid, results_dir, server_round, settings.num_clients, settings.round_timeout_s
                )
            write_checkpoint(
                results_dir,
                Checkpoint(
                    server_round=server_round,
                    config=settings.to_run_config(),
                    model=layout.flatten(arrays),
                    strategy=strategy,
                    rows=recorder.rows,
                    initial_accuracy=initial_accuracy,
                    initial_loss=initial_loss,
                ),
            )
            if shares_files:
                keep_only(results_dir, server_round)  # the clients of this checkpoint only

    diagnose = (
        BatchNormDiagnosis(model, validation, test) if settings.batch_norm_diagnosis else None
    )

    def evaluate_global(server_round: int, arrays: ArrayRecord) -> MetricRecord:
        vector = layout.flatten(arrays)
        result = evaluate(model, vector, test)
        diagnosis = {} if diagnose is None else diagnose(vector)
        if server_round == 0:
            recorder.record_initial(result.accuracy, result.loss)
        else:
            checked = None if validation is None else evaluate(model, vector, validation)
            row = recorder.record_round(
                strategy.stats[server_round],
                result.accuracy,
                result.loss,
                None if checked is None else (checked.accuracy, checked.loss),
                diagnosis,
            )
            log(INFO, "edgeflex: %s", progress_line(row, settings.num_server_rounds))
        return MetricRecord({"accuracy": result.accuracy, "loss": result.loss})

    store = _state_store(settings, context.run_id, workload.parameters, shares_files)
    try:
        wait_for_nodes(grid, settings.num_clients, settings.round_timeout_s)
        if resumed is not None:
            taken_over: set[int] = set()
            if shares_files:
                taken_over = restore_client_states(
                    grid, strategy, *resumed, settings.num_clients, settings.round_timeout_s
                )
            strategy.forget_clients(but=taken_over)  # the others start afresh
        strategy.start(
            grid=grid,
            initial_arrays=initial,
            num_rounds=settings.num_server_rounds,
            timeout=settings.round_timeout_s,
            train_config=train_config_record(
                learning_rate=settings.learning_rate,
                local_steps=settings.local_steps,
                batch_size=settings.batch_size,
                seed=settings.seed,
            ),
            evaluate_fn=evaluate_global,
            virtual_time_budget_s=settings.virtual_time_budget_s,
            first_round=first_round,
            after_round=save,
        )
    finally:
        if wake_ups is not None:
            wake_ups.close()
        if store is not None:  # the run's scratch: a checkpoint holds the vectors themselves
            _remove_store(store)
    summary = recorder.finish()
    log(
        INFO,
        "edgeflex: done: final accuracy %.4f (best %.4f), virtual time %.1f s; records in %s",
        summary["final_accuracy"],
        summary["best_accuracy"],
        summary["virtual_time_s"],
        results_dir,
    )
