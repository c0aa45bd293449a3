"""Plot the ratio and collective a run chose over the rounds next to its link schedule.

    .venv/bin/python -m commands.plot_ratio_schedule RESULTS_DIR [--out FILE.png]

Reads ``rounds.jsonl`` and the run's resolved configuration; the link panel shows the
schedule's latency and bandwidth of client 0 (segments apply to every client). Writes
``ratio_schedule.png`` in RESULTS_DIR unless ``--out`` says otherwise, and prints two
summaries: the runs of rounds with one (ratio, collective), and per segment of the link
schedule the compute share of the round time, the collectives chosen and the ratios.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from common.settings import PROJECT_ROOT  # noqa: E402
from server import figure_style  # noqa: E402
from server.records import read_rounds  # noqa: E402
from timing.devices import DeviceProfile, load_catalog  # noqa: E402
from timing.network import load_schedule  # noqa: E402

LATENCY_COLOUR, BANDWIDTH_COLOUR = "#555555", "#000000"


def client0_links(config: Mapping[str, Any], rounds: Sequence[int]) -> list[DeviceProfile]:
    """Client 0's link in each of ``rounds`` under a run's resolved configuration."""
    devices = load_catalog(PROJECT_ROOT / config["devices-file"]).assign(
        config["device-mix"], config["num-clients"]
    )
    schedule = load_schedule(
        PROJECT_ROOT / config["networks-file"],
        config["network"],
        config["num-clients"],
        config["seed"],
    )
    return [schedule.profiles(r, devices)[0] for r in rounds]


def scatter_ratios(ax: Any, rows: Sequence[Mapping[str, Any]], size: float) -> None:
    """Each round's c on ``ax``, in the colour of the collective it ran (server/figure_style)."""
    for mode in sorted({r["collective"] for r in rows}):
        pts = [(r["round"], r["compression_ratio"]) for r in rows if r["collective"] == mode]
        ax.scatter(*zip(*pts, strict=True), s=size, color=figure_style.colour_of(mode), label=mode)


def draw_links(ax: Any, rounds: Sequence[int], links: Sequence[DeviceProfile]) -> None:
    """Client 0's latency (solid) and bandwidth (dashed) per round, in grey and black: the
    methods' colours are the collectives'."""
    ax.plot(rounds, [p.latency_s * 1e3 for p in links], color=LATENCY_COLOUR)
    ax.set_ylabel("latency (ms, solid)", color=LATENCY_COLOUR)
    twin = ax.twinx()
    bandwidth = [p.uplink_bytes_per_s * 8e-6 for p in links]
    twin.plot(rounds, bandwidth, color=BANDWIDTH_COLOUR, linestyle="--")
    twin.set_ylabel("bandwidth (Mbit/s, dashed)", color=BANDWIDTH_COLOUR)
    ax.set_xlabel("round")
    figure_style.integer_ticks(ax.xaxis)


@dataclass(frozen=True)
class LinkSegment:
    """The rounds a run spent on one link of the schedule, and what it chose there."""

    first_round: int
    last_round: int
    latency_ms: float
    uplink_mbps: float
    compute_share: float  # mean over the rounds of (round time - comm time) / round time
    rounds_by_collective: Mapping[str, int]
    ratios: tuple[float, ...]

    def describe(self) -> str:
        ratio_range = f"{min(self.ratios):.3g}-{max(self.ratios):.3g}"
        return (
            f"rounds {self.first_round:>3}-{self.last_round:>3}  {self.latency_ms:>5.0f} ms "
            f"{self.uplink_mbps:>6.1f} Mbit/s  compute {self.compute_share:>4.0%}  "
            + "".join(f"{name} {n:>3} " for name, n in sorted(self.rounds_by_collective.items()))
            + " "
            f"c median {statistics.median(self.ratios):.3g} ({ratio_range})"
        )


def link_segments(
    rows: Sequence[Mapping[str, Any]], links: Sequence[DeviceProfile]
) -> list[LinkSegment]:
    """Group consecutive rounds on the same link (client 0's; segments apply to every client)."""
    segments = []
    on_link = zip(rows, links, strict=True)
    for (latency_s, uplink), group in itertools.groupby(
        on_link, key=lambda pair: (pair[1].latency_s, pair[1].uplink_bytes_per_s)
    ):
        chosen = [r for r, _ in group]
        shares = [
            (r["round_time_s"] - r["comm_time_s"]) / r["round_time_s"]
            for r in chosen
            if r["round_time_s"] > 0
        ]
        segments.append(
            LinkSegment(
                first_round=chosen[0]["round"],
                last_round=chosen[-1]["round"],
                latency_ms=latency_s * 1e3,
                uplink_mbps=uplink * 8e-6,
                compute_share=statistics.fmean(shares) if shares else 0.0,
                rounds_by_collective=Counter(r["collective"] for r in chosen),
                ratios=tuple(r["compression_ratio"] for r in chosen),
            )
        )
    return segments


def plot(
    rows: Sequence[Mapping[str, Any]],
    config: Mapping[str, Any],
    links: Sequence[DeviceProfile],
    out: Path,
) -> None:
    rounds = [r["round"] for r in rows]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    scatter_ratios(top, rows, size=8)
    top.set_yscale("log")
    top.set_ylabel("compression ratio c")
    top.legend(loc="upper right")
    top.set_title(f"{config['network']}: ratio and collective per round")
    draw_links(bottom, rounds, links)
    fig.tight_layout()
    for path in figure_style.save(fig, out):
        print(f"wrote {path}")
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("results_dir", type=Path)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    rows = read_rounds(args.results_dir)
    config = json.loads((args.results_dir / "summary.json").read_text())["config"]
    rounds = [r["round"] for r in rows]
    links = client0_links(config, rounds)
    if any(r["compression_ratio"] < 1 for r in rows):
        plot(rows, config, links, args.out or args.results_dir / "ratio_schedule.png")
    else:  # a dense run: no ratio to plot, the segment summary still applies
        print("no compressed rounds: nothing to plot")
    for (ratio, collective), group in itertools.groupby(
        rows, key=lambda r: (r["compression_ratio"], r["collective"])
    ):
        same = list(group)
        print(f"rounds {same[0]['round']:>3}-{same[-1]['round']:>3}: c = {ratio:.4g}, {collective}")
    print("per link segment (client 0's link):")
    for segment in link_segments(rows, links):
        print("  " + segment.describe())


if __name__ == "__main__":
    main()
