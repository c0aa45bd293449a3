"""The figures: runs named by their run, mean ± sd over seeds as drawn, one colour per method."""

import statistics
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pytest
from matplotlib.collections import PolyCollection
from matplotlib.colors import to_rgb

from commands import compare_plots, plot_runs
from common.settings import PROJECT_ROOT
from server import figure_style
from tests.commands.run_records import rows, write_run

SEED_1 = [0.2, 0.5, 0.7, 0.8]
SEED_2 = [0.3, 0.4, 0.9, 0.85]
OTHER = [0.1, 0.2, 0.3, 0.4]


def _band(poly: PolyCollection) -> dict[float, tuple[float, float]]:
    """x -> (lowest, highest) y of a fill_between polygon."""
    out: dict[float, tuple[float, float]] = {}
    for x, y in poly.get_paths()[0].vertices:
        low, high = out.get(float(x), (np.inf, -np.inf))
        out[float(x)] = (min(low, float(y)), max(high, float(y)))
    return out


def test_a_comparison_plot_labels_runs_by_name_and_bands_one_sd_over_seeds(
    tmp_path: Path,
) -> None:
    times = [1.0, 2.0, 3.0, 4.0]
    write_run(tmp_path / "topk" / "seed-42", rows(SEED_1, times), collective="allgather")
    write_run(tmp_path / "topk" / "seed-7", rows(SEED_2, times), collective="allgather")
    write_run(tmp_path / "dense" / "seed-42", rows(OTHER, times))
    # a run's folder (both seeds) and a seed's folder: named by the run, never "seed-42"
    records, methods = plot_runs.load([tmp_path / "topk", tmp_path / "dense" / "seed-42"])
    fig = compare_plots.accuracy_figure(records, methods, x_axis="rounds", title="")
    ax = fig.axes[0]

    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["topk", "dense"]
    (band,) = [c for c in ax.collections if isinstance(c, PolyCollection)]  # one seed: no band
    by_x = _band(band)
    topk_line = ax.get_lines()[0]
    for i, x in enumerate(topk_line.get_xdata()):
        seeds = [SEED_1[i], SEED_2[i]]
        mean, sd = statistics.fmean(seeds), statistics.stdev(seeds)
        assert topk_line.get_ydata()[i] == pytest.approx(mean)
        assert by_x[float(x)] == pytest.approx((mean - sd, mean + sd))
    assert ax.get_lines()[1].get_ydata() == pytest.approx(OTHER)
    # the band is in its line's colour, and each line in its method's
    assert to_rgb(band.get_facecolor()[0]) == to_rgb(topk_line.get_color())
    assert topk_line.get_color() == figure_style.colour_of("allgather")
    assert ax.get_lines()[1].get_color() == figure_style.colour_of("dense")
    fig.canvas.draw()
    assert all(float(t).is_integer() for t in ax.get_xticks())  # rounds are whole
    plt.close(fig)


def test_seeds_at_different_virtual_times_are_interpolated_onto_a_common_grid(
    tmp_path: Path,
) -> None:
    write_run(tmp_path / "a" / "seed-1", rows(SEED_1, [1.0, 2.0, 3.0, 4.0]))
    write_run(tmp_path / "a" / "seed-2", rows(SEED_2, [1.5, 2.5, 3.5, 4.5]))
    records, methods = plot_runs.load([tmp_path / "a"])
    fig = compare_plots.accuracy_figure(records, methods, x_axis="virtual_time_s", title="")
    ax = fig.axes[0]
    line = ax.get_lines()[0]
    # every time a seed recorded, inside the span both cover: 1.5 .. 4.0
    assert list(line.get_xdata()) == [1.5, 2.0, 2.5, 3.0, 3.5, 4.0]
    # seed 1 at 2.0 as recorded, seed 2 halfway between its rounds at 1.5 and 2.5
    at_2 = [SEED_1[1], (SEED_2[0] + SEED_2[1]) / 2]
    assert line.get_ydata()[1] == pytest.approx(statistics.fmean(at_2))
    low, high = _band(ax.collections[0])[2.0]
    assert high - low == pytest.approx(2 * statistics.stdev(at_2))
    plt.close(fig)


def test_one_colour_per_method_and_scadles_is_its_streaming_settings() -> None:
    colours = figure_style.method_colours()
    assert len(set(colours.values())) == len(colours)  # no two methods share one
    with (PROJECT_ROOT / "configs" / "scadles.toml").open("rb") as fh:
        scadles = tomllib.load(fh)
    with (PROJECT_ROOT / "configs" / "dsgd.toml").open("rb") as fh:
        dsgd = tomllib.load(fh)
    assert figure_style.method_of(scadles) == figure_style.SCADLES
    assert figure_style.method_of(scadles | {"collective": "powersgd"}) == figure_style.SCADLES
    assert figure_style.method_of(dsgd) == "dense"
    # truncation alone (dsgd-S1-normal-truncation) is still dsgd's dense
    assert figure_style.method_of(dsgd | {"buffer-policy": "truncation"}) == "dense"
    assert figure_style.colour_of("no such method") == figure_style.UNKNOWN_COLOUR


def test_plot_runs_writes_a_png_and_an_svg_beside_it(tmp_path: Path) -> None:
    write_run(tmp_path / "runs" / "a" / "seed-1", rows(SEED_1, [1.0, 2.0, 3.0, 4.0]))
    out = tmp_path / "figure.png"
    plot_runs.main([str(tmp_path / "runs" / "a"), "--out", str(out), "--x", "rounds"])
    assert out.read_bytes()[:4] == b"\x89PNG"
    assert ET.parse(out.with_suffix(".svg")).getroot().tag.endswith("svg")
    with pytest.raises(SystemExit, match="no summary.json"):
        (tmp_path / "runs" / "b" / "seed-1").mkdir(parents=True)
        plot_runs.main([str(tmp_path / "runs" / "b"), "--out", str(out)])
