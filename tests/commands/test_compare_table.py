"""The comparison table's arithmetic on hand-made records."""

from pathlib import Path

import pytest

from commands.compare_table import SeedResult, markdown, seed_result, stat, summarise, write_csv


def _rows(accuracies: list[float], step_s: float, buffers: list[int] | None = None) -> list[dict]:
    rows = []
    for i, acc in enumerate(accuracies):
        row = {
            "round": i + 1,
            "accuracy": acc,
            "virtual_time_s": step_s * (i + 1),
            "bytes_up": 100,
            "bytes_down": 1000,
            "comm_time_s": 0.5,
        }
        if buffers is not None:
            row["stream"] = {"buffer_samples_max": buffers[i]}
        rows.append(row)
    return rows


def test_seed_result_by_hand() -> None:
    accuracies = [0.2, 0.6, 0.9, 0.8, 0.9, 0.95]
    r = seed_result(_rows(accuracies, step_s=2.5, buffers=[5, 40, 12, 7, 3, 1]), target=0.8)
    mean = sum(accuracies) / 6
    assert r == SeedResult(
        a20=pytest.approx(mean),  # a run shorter than 20 rounds: all of them
        s20=pytest.approx((sum((a - mean) ** 2 for a in accuracies) / 6) ** 0.5),
        m20=0.2,
        final_accuracy=0.95,
        best_accuracy=0.95,
        time_to_target_s=15.0,  # round 3 is at 0.9, but the 5-round mean first is in round 6
        bytes_up=600,
        bytes_down=6000,
        peak_buffer_samples=40,
        comm_time_s=3.0,
    )
    never = seed_result(_rows([0.1, 0.2], step_s=1.0), target=0.85)
    assert never.time_to_target_s is None and never.peak_buffer_samples is None


def test_mean_and_sample_sd() -> None:
    s = stat([1.0, 2.0, 4.0, None])
    assert s.mean == pytest.approx(7 / 3) and s.n == 3
    assert s.sd == pytest.approx(
        ((1 - 7 / 3) ** 2 + (2 - 7 / 3) ** 2 + (4 - 7 / 3) ** 2) ** 0.5 / 2**0.5
    )
    assert stat([3.0]).sd is None and stat([None]).mean is None


def test_speedup_pairs_each_seed_with_the_baseline() -> None:
    def result(t: float | None) -> SeedResult:
        return SeedResult(0.9, 0.01 if t else 0.02, 0.88, 0.9, 0.95, t, 10, 20, None)

    results = {
        "base": {1: result(10.0), 2: result(30.0)},
        "fast": {1: result(5.0), 2: result(10.0)},  # 2x and 3x
        "slow": {1: result(None), 2: result(60.0)},  # only seed 2 reached: 0.5x
    }
    table = summarise(results, {"base": "base", "fast": "base", "slow": "base"})
    assert table["base"]["speedup"].mean == 1.0
    assert table["fast"]["speedup"].mean == pytest.approx(2.5)
    assert table["fast"]["speedup"].sd == pytest.approx(0.5**0.5)
    assert table["slow"]["speedup"].mean == pytest.approx(0.5) and table["slow"]["speedup"].n == 1
    assert table["slow"]["time_to_target_s"].n == 1
    text = markdown(table, target=0.9, baselines={n: "base" for n in results}, seeds=2)
    assert (
        "| fast | 0.9000 ± 0.0000 | 0.0100 | 0.8800 | 2/2 | 7.5 ± 3.5 | 2.50 ± 0.71x (base) |"
        in text
    )
    # the worst seed's S20: the one that never reached the target (0.02)
    assert "| slow | 0.9000 ± 0.0000 | 0.0200 | 0.8800 | 1/2 | 60.0 | 0.50x (base) |" in text
    # Under the table, each abbreviated column said in words, with the window and the target
    footer = text.partition("\n\n")[2].splitlines()
    assert (
        footer[0]
        == "- A20: a seed's mean test accuracy over its last 20 rounds; mean ± sd over seeds."
    )
    assert [line.split(":")[0] for line in footer] == [
        "- A20",
        "- worst S20",
        "- worst M20",
        "- reached 0.9",
        "- speedup",
        "- MB up / down",
    ]
    # A run may name its own baseline (one per network, say).
    own = summarise(results, {"base": "base", "fast": "slow", "slow": "base"})
    assert own["fast"]["speedup"].mean == pytest.approx(6.0) and own["fast"]["speedup"].n == 1


def test_csv_has_mean_sd_and_count_per_metric(tmp_path: Path) -> None:
    results = {"base": {1: SeedResult(0.55, 0.05, 0.5, 0.5, 0.6, 4.0, 10, 20, 3)}}
    path = tmp_path / "c.csv"
    write_csv(path, summarise(results, {"base": "base"}), seeds=1)
    header, row = path.read_text().splitlines()
    assert header.startswith("run,seeds,a20_mean,a20_sd,a20_n,s20_mean,s20_sd,s20_n,m20_mean")
    assert row == (
        "base,1,0.55,,1,0.05,,1,0.5,,1,0.5,,1,0.6,,1,4.0,,1,1.0,,1,10.0,,1,20.0,,1,0.0,,1,3.0,,1"
    )
