"""Run records: ``rounds.jsonl`` (one line per round), ``summary.json`` and ``accuracy.png``
(with ``accuracy.svg``)."""

from __future__ import annotations

import json
import math
import re
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from server.last_rounds import LastRounds
from server.plots import plot_accuracy
from strategies.ledger import RoundStats
from strategies.policies.ratio import RATIO_RECORD_FIELDS

WALL_CLOCK_FIELDS = (
    "wall_time_s",
    "compress_s",
    "aggregate_s",
)  # the only fields that differ between runs with one seed (and ratio_solve's solve_s)


OMITTED_WHEN_NONE = ("sampling",)


def without_wall_clock(row: dict[str, Any]) -> dict[str, Any]:
    """A round's record without what the wall clock decides: equal for runs with one seed."""
    out = {k: v for k, v in row.items() if k not in WALL_CLOCK_FIELDS}
    if out.get("ratio_solve"):
        out["ratio_solve"] = {k: v for k, v in out["ratio_solve"].items() if k != "solve_s"}
    return out


def default_results_dir(strategy: str, now: float | None = None) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    return Path("results") / f"{stamp}-{strategy}"


def _finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None


class RunRecorder:
    """Appends one JSON line per round (flushed, so a crash keeps what was done)."""

    def __init__(
        self,
        results_dir: Path,
        resolved_config: dict[str, Any],
        workload: dict[str, Any] | None = None,
    ) -> None:
        self.results_dir = results_dir
        self._workload = workload
        self.results_dir.mkdir(parents=True, exist_ok=True)
        self.rounds_path = results_dir / "rounds.jsonl"
        self.rounds_path.write_text("")
        self._config = resolved_config
        self._rounds: list[dict[str, Any]] = []
        self._initial_accuracy = math.nan
        self._initial_loss = math.nan
        self._start = time.perf_counter()

    @property
    def rows(self) -> list[dict[str, Any]]:
        return list(self._rounds)

    @property
    def initial(self) -> tuple[float, float]:
        return self._initial_accuracy, self._initial_loss

    def resume(
        self, rows: list[dict[str, Any]], initial_accuracy: float, initial_loss: float
    ) -> None:
        """Continue a stopped run: its records so far become this run's first lines."""
        self._rounds = list(rows)
        self._initial_accuracy, self._initial_loss = initial_accuracy, initial_loss
        with self.rounds_path.open("w") as fh:
            fh.writelines(json.dumps(row) + "\n" for row in rows)

    def record_initial(self, accuracy: float, loss: float) -> None:
        self._initial_accuracy, self._initial_loss = accuracy, loss
        self._start = time.perf_counter()

    def record_round(
        self,
        stats: RoundStats,
        accuracy: float,
        loss: float,
        validation: tuple[float, float] | None = None,
        diagnosis: dict[str, float] | None = None,
    ) -> dict[str, Any]:
        """One round's line; ``validation``: (accuracy, loss) on the validation split, if any;
        ``diagnosis``: further figures of the round (batch-norm-diagnosis)."""
        row: dict[str, Any] = {
            "round": stats.round,
            "virtual_time_s": stats.virtual_time_s,
            "wall_time_s": time.perf_counter() - self._start,
            "accuracy": accuracy,
            "loss": loss,
            "bytes_up": stats.bytes_up,
            "bytes_down": stats.bytes_down,
            "compression_ratio": stats.compression_ratio,
            "collective": stats.collective,
            "num_clients": stats.num_clients,
        }
        extra = asdict(stats)
        for key in row:
            extra.pop(key, None)
        # every ratio policy's fields, null where this run's policy has none of them
        extra.update(dict.fromkeys(RATIO_RECORD_FIELDS) | extra.pop("ratio_policy"))
        for key in OMITTED_WHEN_NONE:  # newer fields: absent, as before they existed
            if extra.get(key) is None:
                extra.pop(key, None)
        extra["train_loss"] = _finite_or_none(extra["train_loss"])
        row.update(extra)
        if validation is not None:  # absent without a validation split, as before it existed
            row["validation_accuracy"], row["validation_loss"] = validation
        row.update(diagnosis or {})
        with self.rounds_path.open("a") as fh:
            fh.write(json.dumps(row) + "\n")
        self._rounds.append(row)
        return row

    def _validation_summary(self) -> dict[str, Any]:
        """A20, S20, M20 of the validation split, when the run had one."""
        accuracies = [r["validation_accuracy"] for r in self._rounds if "validation_accuracy" in r]
        if not accuracies:
            return {}
        return {"validation_last_rounds": LastRounds.of(accuracies).as_record()}

    def finish(self) -> dict[str, Any]:
        """Write ``summary.json`` and ``accuracy.png`` (and its SVG); return the summary."""
        rounds = self._rounds
        accuracies = [r["accuracy"] for r in rounds]
        summary = {
            "rounds": len(rounds),
            "initial_accuracy": self._initial_accuracy,
            "final_accuracy": accuracies[-1] if rounds else None,
            "best_accuracy": max(accuracies) if rounds else None,
            "best_round": rounds[accuracies.index(max(accuracies))]["round"] if rounds else None,
            "final_loss": rounds[-1]["loss"] if rounds else None,
            # A20, S20, M20: the last rounds' mean, spread and worst (server/last_rounds.py)
            "last_rounds": LastRounds.of(accuracies).as_record() if rounds else None,
            **self._validation_summary(),
            "virtual_time_s": rounds[-1]["virtual_time_s"] if rounds else 0.0,
            "wall_time_s": time.perf_counter() - self._start,
            "bytes_up": sum(r["bytes_up"] for r in rounds),
            "bytes_down": sum(r["bytes_down"] for r in rounds),
            "config": self._config,
        }
        if self._workload is not None:  # the model's size and counted training FLOPs
            summary["workload"] = self._workload
        (self.results_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        title = f"{self._config.get('collective', '')} on {self._config.get('dataset', '')}"
        plot_accuracy(
            rounds, self._initial_accuracy, self.results_dir / "accuracy.png", title, self._config
        )
        return summary


def read_rounds(results_dir: Path) -> list[dict[str, Any]]:
    with (results_dir / "rounds.jsonl").open() as fh:
        return [json.loads(line) for line in fh if line.strip()]


_PROGRESS = re.compile(
    r"edgeflex: round\s+(?P<round>\d+)/(?P<rounds>\d+)\s+acc (?P<accuracy>\S+)\s+"
    r"loss (?P<loss>\S+)\s+vtime\s+(?P<vtime>\S+) s\s+up\s+(?P<up>\S+) MB\s+"
    r"down\s+(?P<down>\S+) MB"
)


def parse_progress_line(line: str) -> dict[str, Any] | None:
    """The figures of a logged ``edgeflex: {progress_line}``, or None for any other line."""
    match = _PROGRESS.search(line)
    if match is None:
        return None
    return {
        "round": int(match["round"]),
        "rounds": int(match["rounds"]),
        "accuracy": float(match["accuracy"]),
        "loss": float(match["loss"]),
        "virtual_time_s": float(match["vtime"]),
        "megabytes": float(match["up"]) + float(match["down"]),  # this round's, both ways
    }


def progress_line(row: dict[str, Any], num_rounds: int) -> str:
    return (
        f"round {row['round']:>4}/{num_rounds}  acc {row['accuracy']:.4f}  "
        f"loss {row['loss']:.4f}  vtime {row['virtual_time_s']:9.2f} s  "
        f"up {row['bytes_up'] / 1e6:8.3f} MB  down {row['bytes_down'] / 1e6:8.3f} MB"
    )
