"""What the server's ratio policies ask clients to report, from e = update + residual before
compression: the gain at every grid ratio (NSGA-II) and the smoothed residual share
(adaptive compression). Both are over the weights: a model's buffers are sent whole every
round, so counting them would inflate the gain at small ratios on models with batch norm."""

from __future__ import annotations

import numpy as np
from flwr.app import ConfigRecord, RecordDict

from compress.base import ErrorFeedback, Indices, Vector
from compress.gain import DEFAULT_GAIN_GRID, gain_curve
from wire.messages import CompressionConfig

ADAPTIVE_STATE_KEY = "adaptive"
ADAPTIVE_SMOOTHING = 0.3  # EWMA weight of the newest residual share


def smoothed_residual_share(state: RecordDict, share: float) -> float:
    """EWMA of this client's residual share, kept in ``context.state``."""
    if ADAPTIVE_STATE_KEY in state.config_records:
        previous = float(state.config_records[ADAPTIVE_STATE_KEY]["share"])  # type: ignore[arg-type]
        share = ADAPTIVE_SMOOTHING * share + (1 - ADAPTIVE_SMOOTHING) * previous
    state[ADAPTIVE_STATE_KEY] = ConfigRecord({"share": share})
    return min(1.0, max(0.0, share))


def reports(
    state: RecordDict, update: Vector, compression: CompressionConfig, always_sent: Indices
) -> tuple[list[float] | None, float | None]:
    """(gain grid, residual share) as the instructions ask; None for what they do not.
    ``always_sent``: the buffers' positions, left out."""
    if not compression.report_gain and compression.adaptive_ratio is None:
        return None, None
    compensated = ErrorFeedback.from_state(state, update.size).compensate(update)
    # A round at ratio c sends ceil(c x size) weights beside the buffers: over the weights
    # alone that is the ratio c x size / weights.
    scale = 1.0
    if always_sent.size:
        compensated = np.delete(compensated, always_sent)
        scale = update.size / max(1, compensated.size)
    grid = [c * scale for c in DEFAULT_GAIN_GRID] if scale != 1.0 else DEFAULT_GAIN_GRID
    gains = gain_curve(compensated, grid) if compression.report_gain else None
    share = None
    if compression.adaptive_ratio is not None:
        kept = gain_curve(compensated, [compression.adaptive_ratio * scale])[0]
        share = smoothed_residual_share(state, 1.0 - kept)
    return gains, share
