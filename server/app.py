"""The ServerApp: reads the run config once, builds the pieces, calls ``strategy.start``."""

from __future__ import annotations

import shutil
import time
from logging import INFO, WARNING
from pathlib import Path

from flwr.app import ArrayRecord, Context, MetricRecord
from flwr.common import log
from flwr.serverapp import Grid, ServerApp
from flwr.superlink.grid import InMemoryGrid

from common.accelerator import resolve
from common.flower_patches import shorten_grid_pull, tune_simulation_process
from common.settings import ConfigError, Settings
from server.build import build_run
from server.checkpoint import Checkpoint, checkpoint_path, read_checkpoint, write_checkpoint
from server.client_states import keep_only, restore_client_states, save_client_states
from server.evaluation import BatchNormDiagnosis, evaluate
from server.packed_grid import PackedGrid
from server.records import RunRecorder, default_results_dir, progress_line
from state.store import (
    DISK,
    RunDirectory,
    client_state_estimate,
    make_run_directory,
    run_directory,
    store_root,
    stored_clients,
    sweep_abandoned,
    usable_memory_bytes,
    uses_disk,
)
from strategies.ledger import RoundStats
from strategies.policies.collective import compressed
from timing.timed_grid import DEFAULT_POLL_S, SIMULATION_POLL_S, TimedGrid
from wire.stream_samples import parse_broker

Metric = int | float | list[int] | list[float]  # a MetricRecord's values
ACCURACY, LOSS = "accuracy", "loss"  # of the evaluation on the test split
VALIDATION_ACCURACY, VALIDATION_LOSS = "validation-accuracy", "validation-loss"

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


def check_simulated_nodes(
    grid: Grid, expected: int, timeout_s: float, settle_s: float = 0.2
) -> None:
    """A simulation registers all its nodes at once, as its ServerApp starts: once their
    count has held for ``settle_s``, a count other than num-clients fails now, not after
    ``round-timeout-s`` (deployed SuperNodes join over time: ``wait_for_nodes`` waits)."""
    deadline = time.monotonic() + timeout_s
    seen = -1
    while True:
        count = len(list(grid.get_node_ids()))
        if (count and count == seen) or time.monotonic() > deadline:
            break
        seen = count
        time.sleep(settle_s if count else 0.05)
    if count != expected:
        raise ConfigError(
            f"num-clients = {expected} but this simulation has {count} nodes: set "
            f"num-supernodes = {expected} (python -m commands.flwr_home start --num-supernodes "
            f"{expected}, or flwr run . --federation-config 'num-supernodes={expected}'), or "
            f"num-clients = {count}; python -m commands.run sets it for you"
        )


def resolve_results_dir(settings: Settings) -> Path:
    path = (
        Path(settings.run.results_dir)
        if settings.run.results_dir
        else default_results_dir(settings.collective.collective)
    )
    return path if path.is_absolute() else Path.cwd() / path


def _state_store(
    settings: Settings, run_id: int, parameters: int, shares_files: bool
) -> RunDirectory | None:
    """The run's state store directory, made when its clients keep their vectors on disk
    (state/store.py; only where they share this file system)."""
    if not shares_files:
        if settings.deployment.state_store == DISK:
            log(WARNING, "edgeflex: state-store = disk is for simulation; devices keep theirs")
        return None
    estimate = client_state_estimate(settings.run.num_clients, parameters, compressed(settings))
    memory = usable_memory_bytes()
    if not uses_disk(settings.deployment.state_store, estimate, memory):
        # stopped runs' directories go (one left with this run's id would tell its clients
        # to use a store); making the run's directory sweeps them too
        sweep_abandoned(store_root(settings.deployment.state_store_dir))
        return None
    store = make_run_directory(run_directory(settings.deployment.state_store_dir, run_id))
    free = shutil.disk_usage(store.path).free
    log(
        INFO,
        "edgeflex: clients keep their vectors in %s (state-store = %s; up to %.1f GB, memory "
        "%.1f GB, free disk %.1f GB)",
        store.path,
        settings.deployment.state_store,
        estimate / 1e9,
        memory / 1e9,
        free / 1e9,
    )
    if estimate > free:
        log(WARNING, "edgeflex: the state store can outgrow the free disk if every client trains")
    return store


def _remove_store(store: RunDirectory) -> None:
    """Say what the clients kept in the store (none: they could not see it), then remove it."""
    clients, stored = stored_clients(store.path)
    level = INFO if clients else WARNING
    log(level, "edgeflex: the state store held %d clients' vectors, %.1f MB", clients, stored / 1e6)
    shutil.rmtree(store.path, ignore_errors=True)
    store.release()


@app.main()
def main(grid: Grid, context: Context) -> None:
    settings = Settings.from_run_config(context.run_config)
    if isinstance(grid, InMemoryGrid):  # before anything is built or written
        check_simulated_nodes(grid, settings.run.num_clients, settings.run.round_timeout_s)
        # a simulation's clients train on this machine: refused before round 1 (under plain
        # `flwr run .`)
        resolve(settings.training.device)
    if settings.deployment.short_polls:
        shorten_grid_pull(settings.run.round_timeout_s)
    # Polls from 2 ms, doubling up to 0.1 s (Flower's: 3 s), or 5 ms in simulation, where a
    # poll is a lookup in this process; and times every exchange.
    poll_s = SIMULATION_POLL_S if isinstance(grid, InMemoryGrid) else DEFAULT_POLL_S
    # Clients that share the server's file system (Flower's simulation, the in-process
    # federation of tests) keep their state across a checkpoint (server/client_states.py).
    shares_files = isinstance(grid, InMemoryGrid) or bool(getattr(grid, "shares_files", False))
    if settings.deployment.packed_messages and not isinstance(grid, InMemoryGrid):
        grid = PackedGrid(grid)  # a simulation's messages never leave its process
    wake_ups = None
    if settings.deployment.wake_broker and not isinstance(
        grid, InMemoryGrid
    ):  # agents: common/wake_ups.py
        from common.wake_ups import WakeUps, run_topic

        wake_ups = WakeUps(parse_broker(settings.deployment.wake_broker))
        wake_ups.listen(run_topic(context.run_id))
    grid = TimedGrid(grid, poll_s=poll_s, wake_ups=wake_ups)
    parts = build_run(settings)
    model, layout, workload, strategy = parts.model, parts.layout, parts.workload, parts.strategy
    test, validation = parts.test, parts.validation
    initial = layout.unflatten(parts.initial)
    results_dir = resolve_results_dir(settings)
    recorder = RunRecorder(results_dir, settings.to_run_config(), workload.to_record())
    log(
        INFO,
        "edgeflex: %s, model %s (%d parameters, %.3g training FLOPs per sample), %d clients, "
        "records in %s",
        settings.collective.collective,
        settings.training.model,
        workload.parameters,
        workload.train_flops_per_sample,
        settings.run.num_clients,
        results_dir,
    )
    first_round = 1
    resumed: tuple[Path, int] | None = None
    if settings.run.resume_from:
        checkpoint = read_checkpoint(
            Path(settings.run.resume_from), settings.to_run_config(), fresh=strategy
        )
        resumed = checkpoint_path(Path(settings.run.resume_from)).parent, checkpoint.server_round
        initial = layout.unflatten(checkpoint.model)
        recorder.resume(checkpoint.rows, checkpoint.initial_accuracy, checkpoint.initial_loss)
        first_round = checkpoint.server_round + 1
        log(
            INFO,
            "edgeflex: resuming after round %d from %s",
            checkpoint.server_round,
            settings.run.resume_from,
        )

    def save(server_round: int, arrays: ArrayRecord, last: bool) -> None:
        every = settings.run.checkpoint_every
        if every and (last or server_round % every == 0):
            initial_accuracy, initial_loss = recorder.initial
            if shares_files:
                save_client_states(
                    grid,
                    results_dir,
                    server_round,
                    settings.run.num_clients,
                    settings.run.round_timeout_s,
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
        BatchNormDiagnosis(model, validation, test)
        if settings.training.batch_norm_diagnosis
        else None
    )

    def evaluate_global(server_round: int, arrays: ArrayRecord) -> MetricRecord:
        """Test accuracy and loss, on the validation split too when there is one, and the
        batch-norm diagnosis when asked for."""
        vector = layout.flatten(arrays)
        result = evaluate(model, vector, test)
        diagnosis = {} if diagnose is None else diagnose(vector)  # from round 0: it lags one
        if server_round == 0:  # the model before training: the records' starting point
            recorder.record_initial(result.accuracy, result.loss)
        metrics: dict[str, Metric] = {ACCURACY: result.accuracy, LOSS: result.loss, **diagnosis}
        if validation is not None and server_round > 0:
            checked = evaluate(model, vector, validation)
            metrics |= {VALIDATION_ACCURACY: checked.accuracy, VALIDATION_LOSS: checked.loss}
        return MetricRecord(metrics)

    def record(
        stats: RoundStats, arrays: ArrayRecord, metrics: MetricRecord | None, last: bool
    ) -> None:
        """The round's line in the records from its figures and evaluation; a checkpoint."""
        assert metrics is not None
        figures = {name: float(value) for name, value in metrics.items()}  # type: ignore[arg-type]
        validated = None
        if VALIDATION_ACCURACY in figures:
            validated = (figures.pop(VALIDATION_ACCURACY), figures.pop(VALIDATION_LOSS))
        accuracy, loss = figures.pop(ACCURACY), figures.pop(LOSS)
        row = recorder.record_round(stats, accuracy, loss, validated, figures)
        log(INFO, "edgeflex: %s", progress_line(row, settings.run.num_server_rounds))
        save(stats.round, arrays, last)

    store = _state_store(settings, context.run_id, workload.parameters, shares_files)
    try:
        wait_for_nodes(grid, settings.run.num_clients, settings.run.round_timeout_s)
        if resumed is not None:
            taken_over: set[int] = set()
            if shares_files:
                taken_over = restore_client_states(
                    grid, strategy, *resumed, settings.run.num_clients, settings.run.round_timeout_s
                )
            strategy.forget_clients(but=taken_over)  # the others start afresh
        strategy.start(
            grid=grid,
            initial_arrays=initial,
            num_rounds=settings.run.num_server_rounds,
            timeout=settings.run.round_timeout_s,
            evaluate_fn=evaluate_global,
            virtual_time_budget_s=settings.run.virtual_time_budget_s,
            first_round=first_round,
            after_round=record,
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
