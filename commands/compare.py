"""Run a comparison: every named run of a comparison file, once per seed, then a table and plots.

    .venv/bin/python -m commands.compare flexcomm              # configs/compare/flexcomm.toml
    .venv/bin/python -m commands.compare smoke --out /tmp/smoke --jobs 1
    make compare NAME=flexcomm
    .venv/bin/python -m commands.compare resnet --runs 'auto-c0.01-*' --seeds 42,7
    .venv/bin/python -m commands.compare smoke --set learning-rate=0.05 --check

Every run is validated (``--set`` pairs included) before anything starts; ``--check`` prints
the plan and exits. The runs share a lane: one SuperLink and one Ray serving them one after
another (``commands/compare_runtime.py``); ``--alone``: each run a ``commands.run`` with its
own, ``--jobs`` at once (default 2: one per core). A run writes to
``<out>/<run>/seed-<seed>/`` with its output in ``run.log`` there. A run whose
``summary.json`` exists with the configuration asked for is skipped, so an interrupted sweep
resumes where it stopped (an entry edited since is run again). On Ctrl-C everything started
is stopped by PID and nothing is left running.

Then, next to the runs: ``comparison.csv`` and ``comparison.md`` (mean ± sd over seeds) and
``accuracy_vs_time.png``, ``accuracy_vs_bytes.png`` and, when some run adapts its ratio or
collective, ``ratio_schedule.png``; runs named ``<group>-n<N>`` add
``comm_time_vs_clients.png``. Exit code 0 only when every run finished. docs/comparisons.md
describes the file format.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from commands import compare_plots, compare_runtime, compare_spec, compare_table
from commands.progress import startup_phase
from commands.run_config import format_overrides, resolve_settings
from common.settings import PROJECT_ROOT, ConfigError, default_run_config
from common.settings.renamed import upgraded
from server.records import read_rounds
from state.store import store_root, sweep_abandoned

DEFAULT_OUT = PROJECT_ROOT / "results" / "compare"
LANES = 1  # lanes at once (run_all says why)


@dataclass(frozen=True, eq=False)  # one object per (run, seed): hashed by identity
class Job:
    run: str
    seed: int
    results_dir: Path
    overrides: dict[str, Any]
    expected: dict[str, Any]  # the resolved run config, results-dir left out

    @property
    def recorded(self) -> bool:
        return (self.results_dir / "summary.json").exists()

    @property
    def done(self) -> bool:
        """Finished with the configuration the comparison file asks for now (records of an
        edited entry are not reused). A setting added after the records were written counts
        as matching where this run asks for its default, and one added after the plan was made
        where the records hold its default: a new setting's default keeps the behaviour it
        had before."""
        if not self.recorded:
            return False
        config = upgraded(json.loads((self.results_dir / "summary.json").read_text())["config"])
        config.pop("results-dir", None)
        defaults = default_run_config()
        expected = dict(self.expected)
        for key, value in defaults.items():
            config.setdefault(key, value)  # written before the setting existed
            expected.setdefault(key, value)  # planned before it existed (code changed since)
        return bool(config == expected)


def plan(comparison: compare_spec.Comparison, out: Path) -> list[Job]:
    """Seeds outermost, so a partial sweep has every run for its first seeds."""
    jobs = []
    for seed in comparison.seeds:
        for run in comparison.runs:
            directory = out / run.name / f"seed-{seed}"
            overrides = comparison.overrides(run, seed, directory)
            expected = resolve_settings(overrides).to_run_config()
            expected.pop("results-dir")
            jobs.append(Job(run.name, seed, directory, overrides, expected))
    return jobs


def describe_plan(comparison: compare_spec.Comparison, jobs: Sequence[Job]) -> str:
    """The plan as ``--check`` prints it: per (run, seed), its results directory, whether it
    is done, and the settings that differ from the defaults (seed and results-dir aside)."""
    defaults = default_run_config()
    lines = [
        f"{comparison.name}: {len(comparison.runs)} runs x {len(comparison.seeds)} seeds, "
        f"baseline {comparison.baseline}, target {comparison.target}"
    ]
    for job in jobs:
        changed = {k: v for k, v in job.expected.items() if k != "seed" and defaults.get(k) != v}
        state = "done" if job.done else "stale" if job.recorded else "to run"
        lines.append(f"{job.run}  seed {job.seed}  {job.results_dir}  ({state})")
        lines.append(f"    {format_overrides(changed) or '(defaults)'}")
    return "\n".join(lines)


def _start_alone(job: Job) -> subprocess.Popen[bytes]:
    """The run as ``commands.run`` runs it: a SuperLink and a Ray of its own."""
    with (job.results_dir / "run.log").open("wb") as log:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "commands.run",
                "--run-config",
                format_overrides(job.overrides),
            ],
            cwd=PROJECT_ROOT,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # Ctrl-C reaches us; we stop each run ourselves
        )


def _status(job: Job) -> str:
    """``round N/M`` of a running job, from its records so far, or its start-up phase."""
    path = job.results_dir / "rounds.jsonl"
    done = sum(1 for _ in path.open("rb")) if path.exists() else 0
    if done:
        return f"round {done}/{job.expected['num-server-rounds']}"
    log = job.results_dir / "run.log"
    return startup_phase(log.read_text(errors="replace") if log.exists() else "")


def _recorded_since(job: Job, started: dict[Job, float]) -> bool:
    """Whether ``job`` wrote its ``summary.json`` after it started (not a stale one)."""
    path = job.results_dir / "summary.json"
    return path.exists() and path.stat().st_mtime >= started[job]


def _stop(running: dict[Job, subprocess.Popen[bytes]]) -> None:
    """SIGTERM each run (alone: its handler stops its SuperLink and everything under it;
    on a lane: its ``flwr run``, the lane's SuperLink stops the rest), wait."""
    for proc in running.values():
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in running.values():
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def run_all(
    jobs: Sequence[Job],
    parallel: int,
    lanes_dir: Path,
    *,
    quiet: bool = False,
    alone: bool = False,
) -> list[Job]:
    """Run what is not done yet on a lane (one SuperLink and one Ray serving the runs one
    after another, its logs in ``lanes_dir``) or, with ``alone``, each run as
    ``commands.run`` (its own SuperLink and Ray), ``parallel`` at a time; return the jobs
    that failed."""
    todo = [j for j in jobs if not j.done]
    failed: list[Job] = []
    running: dict[Job, subprocess.Popen[bytes]] = {}
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    # One lane: two lanes at once lost one of two concurrent runs (its simulation ended without
    # records, flwr run exit 0) in three tries out of three, cause not found. A run's two
    # client actors keep two cores busy anyway.
    slots = min(parallel if alone else LANES, len(todo))
    with Progress(*columns, disable=quiet) as progress, contextlib.ExitStack() as stack:
        task = progress.add_task("runs", total=len(jobs), completed=len(jobs) - len(todo))
        try:
            free: list[compare_runtime.Lane | None] = [None] * slots
            if not alone and todo:
                progress.update(task, description="runs (starting SuperLink and Ray)")
                free = [
                    stack.enter_context(compare_runtime.lane(lanes_dir / f"{i}"))
                    for i in range(slots)
                ]
            lanes: dict[Job, compare_runtime.Lane | None] = {}  # the slot each run holds
            started: dict[Job, float] = {}
            while todo or running:
                while todo and free:
                    job, lanes[job] = todo.pop(0), free.pop()
                    job.results_dir.mkdir(parents=True, exist_ok=True)
                    log = job.results_dir / "run.log"
                    log.unlink(missing_ok=True)
                    lane, started[job] = lanes[job], time.time()
                    running[job] = (
                        _start_alone(job) if lane is None else lane.submit(job.overrides, log)
                    )
                for job, proc in list(running.items()):
                    if job in lanes and lanes[job] is not None and _recorded_since(job, started):
                        # Its records are written: the next run starts while this one's
                        # simulation and flwr run shut down (seconds; Ray queues the next
                        # run's actors until this one's are gone).
                        free.append(lanes.pop(job))
                    if proc.poll() is None:
                        continue
                    del running[job]
                    if job in lanes:
                        free.append(lanes.pop(job))
                    progress.advance(task)
                    if proc.returncode != 0 or not job.done:
                        failed.append(job)
                        progress.console.print(
                            f"[red]failed[/red] {job.run} seed {job.seed} "
                            f"(exit {proc.returncode}); see {job.results_dir / 'run.log'}"
                        )
                names = ", ".join(f"{j.run}/{j.seed} {_status(j)}" for j in running)
                progress.update(task, description=f"runs ({names})" if names else "runs")
                time.sleep(0.5)
        except KeyboardInterrupt:
            _stop(running)
            raise
        finally:
            # Once everything stopped: a run's store directory has no lock for a moment after
            # it is made, and a sweep beside a starting run would take it.
            stack.close()
            for root in {job.expected["state-store-dir"] for job in jobs}:
                sweep_abandoned(store_root(root))
    return failed


def report(comparison: compare_spec.Comparison, jobs: Sequence[Job], out: Path) -> list[Path]:
    """Table and plots over the finished runs; return the files written."""
    records: dict[str, list[list[dict[str, Any]]]] = {}
    results: dict[str, dict[int, compare_table.SeedResult]] = {}
    configs: dict[str, dict[str, Any]] = {}
    for job in jobs:
        if not job.done:
            continue
        rows = read_rounds(job.results_dir)
        records.setdefault(job.run, []).append(rows)
        results.setdefault(job.run, {})[job.seed] = compare_table.seed_result(
            rows, comparison.target
        )
        configs.setdefault(
            job.run, json.loads((job.results_dir / "summary.json").read_text())["config"]
        )
    baselines = comparison.baselines()
    missing = sorted({baselines[run] for run in results} - set(results))
    if missing:
        raise RuntimeError(f"the baseline(s) {', '.join(map(repr, missing))} have no finished run")
    table = compare_table.summarise(results, baselines)
    seeds = len(comparison.seeds)
    written = [out / "comparison.csv", out / "comparison.md"]
    compare_table.write_csv(written[0], table, seeds)
    header = f"# {comparison.name}\n\n"
    if comparison.description:
        header += f"{comparison.description}\n\n"
    written[1].write_text(
        header
        + f"Seeds: {', '.join(map(str, comparison.seeds))}; mean ± sd over seeds.\n\n"
        + compare_table.markdown(table, target=comparison.target, baselines=baselines, seeds=seeds)
    )
    title = f"{comparison.name} (mean over {seeds} seed{'s' if seeds > 1 else ''})"
    written += compare_plots.plot_accuracies(records, configs, out, title=title)
    extra = [
        compare_plots.plot_ratio_schedule(records, configs, out / "ratio_schedule.png"),
        compare_plots.plot_scaling(
            {n: s["comm_time_s"].mean or 0.0 for n, s in table.items()},
            configs,
            out / "comm_time_vs_clients.png",
            title=f"{comparison.name}: communication time",
        ),
    ]
    written += [path for path in extra if path is not None]
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("comparison", help="a name in configs/compare/ or a .toml path")
    parser.add_argument("--out", type=Path, default=None, help="default results/compare/NAME")
    parser.add_argument(
        "--jobs", type=int, default=2, help="with --alone: runs at once (default 2)"
    )
    parser.add_argument(
        "--runs",
        default=None,
        help="only runs matching these comma-separated name patterns (e.g. 'resnet-*'), "
        "with their baselines",
    )
    parser.add_argument(
        "--seeds", default=None, help="only these comma-separated seeds of the file's"
    )
    parser.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a setting for every run, over the file's (repeatable)",
    )
    parser.add_argument(
        "--alone",
        action="store_true",
        help="each run as commands.run runs it: a SuperLink and a Ray of its own (slower)",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="validate every run, print the plan and exit: nothing starts, nothing is written",
    )
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error("--jobs must be at least 1")
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        comparison = compare_spec.subset(
            compare_spec.load(
                compare_spec.find(args.comparison), compare_spec.parse_sets(args.sets)
            ),
            None if args.runs is None else args.runs.split(","),
            None if args.seeds is None else [int(s) for s in args.seeds.split(",")],
        )
    except (ConfigError, ValueError) as exc:
        print(f"edgeflex: bad comparison: {exc}", file=sys.stderr)
        return 2
    out = (args.out or DEFAULT_OUT / comparison.name).resolve()
    jobs = plan(comparison, out)
    if args.check:
        print(describe_plan(comparison, jobs))
        return 0
    out.mkdir(parents=True, exist_ok=True)
    skipped = sum(j.done for j in jobs)
    stale = [j for j in jobs if j.recorded and not j.done]
    print(
        f"edgeflex: {comparison.name}: {len(comparison.runs)} runs x {len(comparison.seeds)} "
        f"seeds in {out} ({skipped} already done, skipped)"
    )
    for job in stale:
        print(f"edgeflex: {job.run} seed {job.seed}: its records have another configuration; rerun")
    began = time.monotonic()
    try:
        failed = run_all(jobs, args.jobs, out / "lanes", alone=args.alone)
    except KeyboardInterrupt:
        print("edgeflex: interrupted; every running run was stopped", file=sys.stderr)
        return 130
    except RuntimeError as exc:  # a lane's SuperLink or Ray did not start
        print(f"edgeflex: {exc}", file=sys.stderr)
        return 1
    print(f"edgeflex: runs took {time.monotonic() - began:.0f} s")
    try:
        for path in report(comparison, jobs, out):
            print(f"edgeflex: wrote {path}")
    except RuntimeError as exc:
        print(f"edgeflex: no table: {exc}", file=sys.stderr)
        return 1
    print("\n" + (out / "comparison.md").read_text())
    if failed:
        print(f"edgeflex: {len(failed)} run(s) failed; rerun to retry them", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
