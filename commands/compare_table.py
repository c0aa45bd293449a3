"""The comparison table: per run, mean ± sd over seeds of what its records say.

Per seed: A20, S20 and M20 (the mean, sd and worst test accuracy of the last 20 rounds;
server/last_rounds.py), final and best accuracy (CSV only: one round each), virtual seconds to
the target (first round whose 5-round moving mean reaches it), speedup against the baseline run
of the same seed (its time to target / this run's), uplink and downlink bytes, communication
time (virtual seconds spent transferring, summed over rounds), and the peak buffer (the largest
occupancy of any client, in samples, over the run; streaming runs only). Means and sample
standard deviations are over the seeds where the value exists; ``reached`` counts the seeds
that reached the target; S20 and M20 are shown for the worst seed (largest S20, smallest M20).
"""

from __future__ import annotations

import csv
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from server.last_rounds import SMOOTHING, WINDOW, LastRounds, time_to_target

METRICS = (
    "a20",
    "s20",
    "m20",
    "final_accuracy",
    "best_accuracy",
    "time_to_target_s",
    "speedup",
    "bytes_up",
    "bytes_down",
    "comm_time_s",
    "peak_buffer_samples",
)


@dataclass(frozen=True)
class SeedResult:
    a20: float
    s20: float
    m20: float
    final_accuracy: float
    best_accuracy: float
    time_to_target_s: float | None
    bytes_up: int
    bytes_down: int
    peak_buffer_samples: int | None
    comm_time_s: float = 0.0


def seed_result(rows: Sequence[Mapping[str, Any]], target: float) -> SeedResult:
    if not rows:
        raise ValueError("a run without rounds")
    hit = time_to_target([dict(r) for r in rows], target)
    buffers = [r["stream"]["buffer_samples_max"] for r in rows if r.get("stream")]
    last = LastRounds.of([float(r["accuracy"]) for r in rows])
    return SeedResult(
        a20=last.mean_accuracy,
        s20=last.sd_accuracy,
        m20=last.worst_accuracy,
        final_accuracy=float(rows[-1]["accuracy"]),
        best_accuracy=max(float(r["accuracy"]) for r in rows),
        time_to_target_s=None if hit is None else hit[1],
        bytes_up=sum(int(r["bytes_up"]) for r in rows),
        bytes_down=sum(int(r["bytes_down"]) for r in rows),
        peak_buffer_samples=max(buffers) if buffers else None,
        comm_time_s=sum(float(r.get("comm_time_s", 0.0)) for r in rows),
    )


@dataclass(frozen=True)
class Stat:
    mean: float | None
    sd: float | None  # None with fewer than two values
    n: int
    low: float | None = None
    high: float | None = None


def stat(values: Sequence[float | None]) -> Stat:
    present = [float(v) for v in values if v is not None]
    if not present:
        return Stat(None, None, 0)
    sd = statistics.stdev(present) if len(present) > 1 else None
    return Stat(statistics.fmean(present), sd, len(present), min(present), max(present))


def summarise(
    results: Mapping[str, Mapping[int, SeedResult]], baselines: Mapping[str, str]
) -> dict[str, dict[str, Stat]]:
    """Per run, per metric: the stat over seeds. Speedup pairs each seed with the same seed
    of the run's baseline (``baselines``: run name -> baseline run name)."""
    out: dict[str, dict[str, Stat]] = {}
    for name, by_seed in results.items():
        base = results.get(baselines[name], {})
        speedups: list[float | None] = []
        for seed, result in by_seed.items():
            base_t = base[seed].time_to_target_s if seed in base else None
            own_t = result.time_to_target_s
            speedups.append(base_t / own_t if base_t is not None and own_t else None)
        seeds = list(by_seed.values())
        out[name] = {
            "a20": stat([r.a20 for r in seeds]),
            "s20": stat([r.s20 for r in seeds]),
            "m20": stat([r.m20 for r in seeds]),
            "final_accuracy": stat([r.final_accuracy for r in seeds]),
            "best_accuracy": stat([r.best_accuracy for r in seeds]),
            "time_to_target_s": stat([r.time_to_target_s for r in seeds]),
            "speedup": stat(speedups),
            "bytes_up": stat([float(r.bytes_up) for r in seeds]),
            "bytes_down": stat([float(r.bytes_down) for r in seeds]),
            "comm_time_s": stat([r.comm_time_s for r in seeds]),
            "peak_buffer_samples": stat([r.peak_buffer_samples for r in seeds]),
        }
    return out


def _cell(s: Stat, scale: float = 1.0, digits: int = 2) -> str:
    if s.mean is None:
        return "-"
    text = f"{s.mean / scale:.{digits}f}"
    return text if s.sd is None else f"{text} ± {s.sd / scale:.{digits}f}"


def _worst(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def write_csv(path: Path, table: Mapping[str, Mapping[str, Stat]], seeds: int) -> None:
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        header = ["run", "seeds"]
        for metric in METRICS:
            header += [f"{metric}_mean", f"{metric}_sd", f"{metric}_n"]
        writer.writerow(header)
        for name, stats in table.items():
            row: list[Any] = [name, seeds]
            for metric in METRICS:
                s = stats[metric]
                row += ["" if s.mean is None else s.mean, "" if s.sd is None else s.sd, s.n]
            writer.writerow(row)


def markdown(
    table: Mapping[str, Mapping[str, Stat]],
    *,
    target: float,
    baselines: Mapping[str, str],
    seeds: int,
) -> str:
    lines = [
        f"| run | A20 | worst S20 | worst M20 | reached {target:g} | virtual s to {target:g} "
        "| speedup (baseline) | MB up | MB down | comm s | peak buffer (samples) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, s in table.items():
        lines.append(
            "| "
            + " | ".join(
                [
                    name,
                    _cell(s["a20"], digits=4),
                    _worst(s["s20"].high),
                    _worst(s["m20"].low),
                    f"{s['time_to_target_s'].n}/{seeds}",
                    _cell(s["time_to_target_s"], digits=1),
                    "-"
                    if s["speedup"].mean is None
                    else f"{_cell(s['speedup'])}x ({baselines[name]})",
                    _cell(s["bytes_up"], scale=1e6, digits=1),
                    _cell(s["bytes_down"], scale=1e6, digits=1),
                    _cell(s["comm_time_s"], digits=1),
                    _cell(s["peak_buffer_samples"], digits=0),
                ]
            )
            + " |"
        )
    return "\n".join(lines) + "\n\n" + footer(target)


def footer(target: float) -> str:
    """What the columns of :func:`markdown` mean, printed under the table."""
    t, w = f"{target:g}", WINDOW
    lines = (
        f"A20: a seed's mean test accuracy over its last {w} rounds; mean ± sd over seeds.",
        f"worst S20: the sd of those {w} rounds' accuracy (how much it still swings from "
        "round to round), of the seed where it is largest.",
        f"worst M20: the lowest accuracy of those {w} rounds, of the seed where it is lowest.",
        f"reached {t}: the seeds whose {SMOOTHING}-round moving mean reached {t}; "
        f"virtual s to {t}: the virtual time of that round.",
        f"speedup: the baseline's virtual s to {t} over this run's, seed by seed.",
        "MB up / down: bytes sent, all rounds; comm s: virtual seconds spent transferring; "
        "peak buffer: the largest occupancy of any client's stream buffer.",
    )
    return "".join(f"- {line}\n" for line in lines)
