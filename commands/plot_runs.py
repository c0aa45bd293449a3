"""Overlay several runs: test accuracy against virtual time (or rounds), one line per run.

    .venv/bin/python -m commands.plot_runs DIR [DIR ...] --out FILE.png [--x rounds] [--title T]

Each line is labelled with its directory's name.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from server.records import read_rounds  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("dirs", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--x", choices=("virtual_time_s", "rounds"), default="virtual_time_s")
    parser.add_argument("--title", default="")
    args = parser.parse_args()
    fig, ax = plt.subplots(figsize=(7, 4))
    for directory in args.dirs:
        rows = read_rounds(directory)
        xs = [r["round"] if args.x == "rounds" else r["virtual_time_s"] for r in rows]
        ax.plot(xs, [r["accuracy"] for r in rows], label=directory.name, linewidth=1.2)
    ax.set_xlabel("round" if args.x == "rounds" else "virtual time (s)")
    ax.set_ylabel("test accuracy")
    ax.set_ylim(0.0, 1.0)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    if args.title:
        ax.set_title(args.title)
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    plt.close(fig)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
