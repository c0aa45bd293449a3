"""What the server's ratio policies ask clients to report, one line per kind of report, from
e = update + residual before compression: the gain at every grid ratio (NSGA-II) and the
smoothed residual share (adaptive compression). Both are over the weights: a model's buffers
are sent whole every round, so counting them would inflate the gain at small ratios on models
with batch norm. How each travels and is checked: wire/reports.py."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from flwr.app import ConfigRecord, RecordDict

from compress.base import Indices, Vector
from compress.error_feedback import compensate
from compress.gain import DEFAULT_GAIN_GRID, gain_curve
from wire.keys import GAIN_GRID, RESIDUAL_SHARE
from wire.reports import Parameter, Report
from wire.train_instruction import CompressionConfig

ADAPTIVE_STATE_KEY = "adaptive"
ADAPTIVE_SMOOTHING = 0.3  # EWMA weight of the newest residual share


@dataclass(frozen=True)
class ReportInput:
    """What every report is computed from: e over the weights (buffers left out), and the
    factor that turns a ratio of the whole model into one of the weights alone."""

    state: RecordDict
    compensated: Vector
    scale: float


def smoothed_residual_share(state: RecordDict, share: float) -> float:
    """EWMA of this client's residual share, kept in ``context.state``."""
    if ADAPTIVE_STATE_KEY in state.config_records:
        previous = float(state.config_records[ADAPTIVE_STATE_KEY]["share"])  # type: ignore[arg-type]
        share = ADAPTIVE_SMOOTHING * share + (1 - ADAPTIVE_SMOOTHING) * previous
    state[ADAPTIVE_STATE_KEY] = ConfigRecord({"share": share})
    return min(1.0, max(0.0, share))


def gain_grid(weights: ReportInput, parameter: Parameter) -> Report:
    # A round at ratio c sends ceil(c x size) weights beside the buffers: over the weights
    # alone that is the ratio c x size / weights.
    grid: tuple[float, ...] = DEFAULT_GAIN_GRID
    if weights.scale != 1.0:
        grid = tuple(c * weights.scale for c in DEFAULT_GAIN_GRID)
    return gain_curve(weights.compensated, grid)


def residual_share(weights: ReportInput, parameter: Parameter) -> Report:
    """``parameter``: the ratio c whose residual share, 1 − gain(c), to report."""
    kept = gain_curve(weights.compensated, [float(parameter) * weights.scale])[0]
    return smoothed_residual_share(weights.state, 1.0 - kept)


# report kind (wire/reports.py) -> how this client computes it
CLIENT_REPORTS: dict[str, Callable[[ReportInput, Parameter], Report]] = {
    GAIN_GRID: gain_grid,
    RESIDUAL_SHARE: residual_share,
}


def reports(
    state: RecordDict, update: Vector, compression: CompressionConfig, whole: Indices
) -> dict[str, Report]:
    """The reports the instructions ask for; ``whole``: the buffers' positions, left
    out."""
    if not compression.reports:
        return {}
    compensated = compensate(state, update)
    scale = 1.0
    if whole.size:
        compensated = np.delete(compensated, whole)
        scale = update.size / max(1, compensated.size)
    weights = ReportInput(state, compensated, scale)
    return {
        name: CLIENT_REPORTS[name](weights, parameter)
        for name, parameter in compression.reports.items()
    }
