"""What clients report for the ratio policies is measured over the weights, not the buffers."""

import numpy as np
import pytest
from flwr.app import RecordDict

from client.reports import reports
from compress.gain import DEFAULT_GAIN_GRID, gain_curve
from wire.messages import CompressionConfig

NO_BUFFERS = np.zeros(0, dtype=np.int64)


def _update_with_loud_buffers() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    update = rng.normal(0.0, 0.01, 5000).astype(np.float32)
    buffers = np.arange(4990, 5000, dtype=np.int64)
    update[buffers] = 1.0  # counters move by 1 a step; weights by a learning rate's worth
    return update, buffers


def test_the_gain_grid_leaves_the_buffers_out() -> None:
    update, buffers = _update_with_loud_buffers()
    asked = CompressionConfig(ratio=0.01, collective="allgather", report_gain=True)
    gains, share = reports(RecordDict(), update, asked, buffers)
    assert share is None
    # as many weights as a round at each ratio sends: ceil(c x 5000) of the 4990
    scaled = [c * 5000 / 4990 for c in DEFAULT_GAIN_GRID]
    assert gains == gain_curve(np.delete(update, buffers), scaled)
    # Counted, the ten buffers alone would hold most of the energy at c = 0.002 (k = 10).
    counted, _ = reports(RecordDict(), update, asked, NO_BUFFERS)
    assert counted is not None and gains is not None
    assert DEFAULT_GAIN_GRID[1] == 0.002
    assert counted[1] > 0.9 and gains[1] < 0.1


def test_the_adaptive_residual_share_leaves_the_buffers_out() -> None:
    update, buffers = _update_with_loud_buffers()
    asked = CompressionConfig(ratio=0.01, collective="allgather", adaptive_ratio=0.002)
    gains, share = reports(RecordDict(), update, asked, buffers)
    assert gains is None
    kept = gain_curve(np.delete(update, buffers), [0.002 * 5000 / 4990])[0]
    assert share == pytest.approx(1.0 - kept)
    assert share > 0.8  # the weights' residual share, not the buffers'
