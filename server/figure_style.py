"""How every figure looks: one colour per method, integer round ticks, an SVG beside each PNG.

A run's method is its collective (or ``auto``), or ``scadles`` when it streams the way
``configs/scadles.toml`` does (its batch, buffer, weighting and learning-rate settings),
whatever its collective. Each method has one colour in every figure (Okabe-Ito, readable by
colour-blind readers), taken in the order of the collective choices' table, so a method keeps
its colour from figure to figure.

SVG rather than PDF beside each PNG: it shows in a browser and on the docs' pages, a paper
converts it (``rsvg-convert``, Inkscape) or includes it as it is, and its text stays text.
Written with a fixed hash salt and no date, so a figure drawn again from the same records
gives the same file.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
from matplotlib.axis import Axis  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from common.settings import PROJECT_ROOT  # noqa: E402
from strategies.policies.collective import COLLECTIVE_CHOICES  # noqa: E402

SCADLES = "scadles"
SCADLES_PRESET = PROJECT_ROOT / "configs" / "scadles.toml"
# What makes a run ScaDLES rather than its collective: how its clients stream and train
SCADLES_KEYS = ("batch-policy", "buffer-policy", "aggregation-weights", "lr-scaling")
# Okabe & Ito's palette without its yellow (faint on white); black sixth, for ScaDLES, so that
# it stands apart from dense's blue in the figures that compare the two
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#000000", "#56B4E9")
UNKNOWN_COLOUR = "#999999"
BAND_ALPHA = 0.2  # one standard deviation over seeds, under the mean's line
# The runs of one method (one colour) told apart: line styles, then markers on them
LINE_STYLES = ("-", "--", ":", "-.")
MARKERS = ("", "o", "s", "^", "v", "D")


def methods() -> tuple[str, ...]:
    """Every method a colour is kept for, in the order colours are given."""
    return (*COLLECTIVE_CHOICES, SCADLES)


def method_colours() -> dict[str, str]:
    """The one table from method to colour (a method past the palette's end repeats it)."""
    return {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(methods())}


@cache
def _scadles_streaming() -> dict[str, Any]:
    with SCADLES_PRESET.open("rb") as fh:
        preset = tomllib.load(fh)
    return {key: preset[key] for key in SCADLES_KEYS}


def method_of(config: Mapping[str, Any]) -> str:
    """A run's method from its resolved configuration (``summary.json``'s ``config``)."""
    if all(config.get(key) == value for key, value in _scadles_streaming().items()):
        return SCADLES
    return str(config.get("collective", ""))


def colour_of(method: str) -> str:
    return method_colours().get(method, UNKNOWN_COLOUR)


def integer_ticks(axis: Axis) -> None:
    """Rounds (and client counts) are whole: no tick at round 2.5."""
    axis.set_major_locator(MaxNLocator(integer=True))


def save(fig: Figure, png: Path, dpi: int = 110) -> list[Path]:
    """``png`` and the same figure as SVG beside it; return both paths."""
    svg = png.with_suffix(".svg")
    fig.savefig(png, dpi=dpi)
    with matplotlib.rc_context({"svg.hashsalt": "edgeflex"}):
        fig.savefig(svg, metadata={"Date": None})
    return [png, svg]
