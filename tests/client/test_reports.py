"""What clients report for the ratio policies is measured over the weights, not the buffers."""

import numpy as np
import pytest
from flwr.app import ConfigRecord, RecordDict

from client.reports import CLIENT_REPORTS, reports
from compress.gain import DEFAULT_GAIN_GRID, gain_curve
from wire.keys import ADAPTIVE_RATIO, GAIN_GRID, METRICS_KEY, REPORT_GAIN, RESIDUAL_SHARE
from wire.reports import REPORT_KINDS
from wire.train_instruction import CompressionConfig
from wire.train_reply import TrainReply

NO_BUFFERS = np.zeros(0, dtype=np.int64)


def _update_with_loud_buffers() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    update = rng.normal(0.0, 0.01, 5000).astype(np.float32)
    buffers = np.arange(4990, 5000, dtype=np.int64)
    update[buffers] = 1.0  # counters move by 1 a step; weights by a learning rate's worth
    return update, buffers


def test_the_gain_grid_leaves_the_buffers_out() -> None:
    update, buffers = _update_with_loud_buffers()
    asked = CompressionConfig(ratio=0.01, collective="allgather", reports={GAIN_GRID: True})
    got = reports(RecordDict(), update, asked, buffers)
    assert set(got) == {GAIN_GRID}
    gains = got[GAIN_GRID]
    # as many weights as a round at each ratio sends: ceil(c x 5000) of the 4990
    scaled = [c * 5000 / 4990 for c in DEFAULT_GAIN_GRID]
    assert gains == gain_curve(np.delete(update, buffers), scaled)
    # Counted, the ten buffers alone would hold most of the energy at c = 0.002 (k = 10).
    counted = reports(RecordDict(), update, asked, NO_BUFFERS)[GAIN_GRID]
    assert isinstance(counted, list) and isinstance(gains, list)
    assert DEFAULT_GAIN_GRID[1] == 0.002
    assert counted[1] > 0.9 and gains[1] < 0.1


def test_the_adaptive_residual_share_leaves_the_buffers_out() -> None:
    update, buffers = _update_with_loud_buffers()
    asked = CompressionConfig(ratio=0.01, collective="allgather", reports={RESIDUAL_SHARE: 0.002})
    got = reports(RecordDict(), update, asked, buffers)
    assert set(got) == {RESIDUAL_SHARE}
    share = got[RESIDUAL_SHARE]
    kept = gain_curve(np.delete(update, buffers), [0.002 * 5000 / 4990])[0]
    assert share == pytest.approx(1.0 - kept)
    assert isinstance(share, float) and share > 0.8  # the weights' share, not the buffers'


def test_every_kind_on_the_wire_is_one_the_client_computes() -> None:
    assert set(CLIENT_REPORTS) == set(REPORT_KINDS)


def test_a_compressed_instruction_asks_for_what_its_policy_names_and_nothing_else() -> None:
    config = ConfigRecord()
    CompressionConfig(0.01, "allgather", reports={RESIDUAL_SHARE: 0.002}).add_to(config)
    assert config[REPORT_GAIN] is False  # the gain flag goes with every compressed round
    parsed = CompressionConfig.parse(config)
    assert parsed is not None and parsed.reports == {RESIDUAL_SHARE: 0.002}
    config[ADAPTIVE_RATIO] = 2.0
    with pytest.raises(ValueError, match="adaptive-ratio: 2.0 is not a ratio in"):
        CompressionConfig.parse(config)


def test_a_reply_report_out_of_range_is_refused_by_name() -> None:
    content = TrainReply(0, 10, 0.1, reports={RESIDUAL_SHARE: 0.5}).to_content()
    content.metric_records[METRICS_KEY][RESIDUAL_SHARE] = 1.5
    with pytest.raises(ValueError, match="residual-share 1.5 is not a number in"):
        TrainReply.parse(content, num_clients=1)
