import pytest

from benchmarks.round_overhead import per_round_wall_s, summary_row


def test_per_round_wall_time_leaves_out_start_up() -> None:
    rows = [{"wall_time_s": t} for t in (9.0, 10.0, 12.0, 16.0)]
    assert per_round_wall_s(rows) == [1.0, 2.0, 4.0]


def test_summary_row_medians_by_hand() -> None:
    def row(t: float, download: float) -> dict[str, object]:
        phase = {
            "name": "train",
            "download_s_max": download,
            "busy_s_max": 1.0,
            "train_s_max": 0.25,
            "upload_s_max": 0.5,
        }
        return {"wall_time_s": t, "time_source": "measured", "phases": [phase]}

    rows = [row(5.0, 99.0), row(8.0, 2.0), row(9.0, 4.0), row(15.0, 3.0)]
    # steps 3, 1, 6: median 3, mean 3.33; download medians over rounds 2-4: 3
    assert (
        summary_row("dep", rows)
        == "| dep | 4 | measured | 3.00 | 3.33 | 3.00 | 1.00 | 0.25 | 0.50 |"
    )
    modelled = [{"wall_time_s": 1.0}, {"wall_time_s": 1.5}]
    assert summary_row("sim", modelled) == "| sim | 2 | modelled | 0.50 | 0.50 |  |  |  |  |"
    with pytest.raises(ValueError, match="at least two rounds"):
        summary_row("x", [{"wall_time_s": 1.0}])
