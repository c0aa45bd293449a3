"""The comparison runner on configs/compare/smoke.toml, and comparison files that are wrong."""

import json
import os
import re
from pathlib import Path

import pytest

from commands import compare, compare_runtime, compare_spec
from commands.run import FLWR_DIR
from common.settings import ConfigError
from tests.helpers import processes_with_env


@pytest.mark.slow  # each run is a simulation of its own
def test_smoke_comparison_runs_writes_table_and_plots_and_resumes(tmp_path: Path) -> None:
    out = tmp_path / "smoke"
    mine = str(FLWR_DIR / f"lane-{os.getpid()}-")  # this process's lanes, not another's
    assert compare.main(["smoke", "--out", str(out), "--jobs", "2"]) == 0
    assert (out / "lanes" / "0" / "superlink.log").read_text().count("Created run") == 2
    for run in ("dense", "topk-0.1"):
        assert (out / run / "seed-3" / "summary.json").exists()
        assert (out / run / "seed-3" / "run.log").read_text()  # the run's own output
    for name in (
        "comparison.csv",
        "comparison.md",
        "accuracy_vs_time.png",
        "accuracy_vs_bytes.png",
    ):
        assert (out / name).stat().st_size > 0
    table = (out / "comparison.md").read_text()
    assert "| dense |" in table and "| topk-0.1 |" in table
    assert "| 1.00x (dense) |" in table  # the baseline against itself
    csv_lines = (out / "comparison.csv").read_text().splitlines()
    assert [line.split(",")[0] for line in csv_lines[1:]] == ["dense", "topk-0.1"]

    # A second call skips both runs (their records are kept as they were) and rewrites the table.
    stamps = {
        run: (out / run / "seed-3" / "summary.json").stat().st_mtime_ns
        for run in ("dense", "topk-0.1")
    }
    jobs = compare.plan(compare_spec.load(compare_spec.find("smoke")), out)
    assert all(job.done for job in jobs)
    assert compare.main(["smoke", "--out", str(out)]) == 0
    # An edited entry is not taken from the old records.
    edited = compare.plan(compare_spec.load(compare_spec.find("smoke")), out)[1]
    edited.expected["learning-rate"] = 0.123
    assert edited.recorded and not edited.done
    assert stamps == {
        run: (out / run / "seed-3" / "summary.json").stat().st_mtime_ns
        for run in ("dense", "topk-0.1")
    }
    # The lane stopped its SuperLink and Ray: none of their processes is still alive.
    assert not processes_with_env("FLWR_HOME", mine)
    assert not processes_with_env("RAY_TMPDIR", f"{compare_runtime.RAY_TEMP}lane-{os.getpid()}-")


def test_same_seed_same_partitions_for_every_run(tmp_path: Path) -> None:
    comparison = compare_spec.load(compare_spec.find("smoke"))
    jobs = compare.plan(comparison, tmp_path)
    assert [(j.run, j.seed) for j in jobs] == [("dense", 3), ("topk-0.1", 3)]
    for job in jobs:
        assert job.overrides["seed"] == 3 and job.overrides["num-clients"] == 3
        assert job.overrides["results-dir"] == str(tmp_path / job.run / "seed-3")


HEAD = 'baseline = "a"\ntarget = 0.9\nseeds = [1]\n'
RUN_A = '[[runs]]\nname = "a"\n'


@pytest.mark.parametrize(
    ("text", "match"),
    [
        (HEAD, "missing 'runs'"),
        (HEAD.replace('"a"', '"b"') + RUN_A, "baseline 'b'"),
        (HEAD.replace("0.9", "1.5") + RUN_A, "target must be"),
        (HEAD.replace("[1]", "[1, 1]") + RUN_A, "distinct"),
        (HEAD + "rounds = 3\n" + RUN_A, "'rounds'"),
        (HEAD + RUN_A + RUN_A, "used twice"),
        (HEAD + RUN_A + "[runs.config]\nseed = 4\n", "set by the runner"),
        (
            HEAD + RUN_A + '[runs.config]\ncollective = "x"\n',
            "run 'a' \\(seed 1\\): collective = 'x'",
        ),
        (HEAD + RUN_A + 'presets = ["configs/nope.toml"]\n', "not found"),
    ],
)
def test_bad_comparison_files_are_named(tmp_path: Path, text: str, match: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=match):
        compare_spec.load(path)


@pytest.mark.slow  # every run of every file resolved twice: over 5 s
def test_check_passes_every_shipped_comparison_file_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    names = sorted(p.stem for p in compare_spec.COMPARE_DIR.glob("*.toml"))
    assert {"smoke", "scaling", "startup"} <= set(names)
    for name in names:
        assert compare.main([name, "--check", "--out", str(tmp_path / name)]) == 0, name
        plan = capsys.readouterr().out
        comparison = compare_spec.load(compare_spec.find(name))
        for run in comparison.runs:
            for seed in comparison.seeds:
                assert f"{run.name}  seed {seed}  {tmp_path / name / run.name}" in plan
    assert not any(tmp_path.iterdir())


def test_check_prints_what_differs_from_the_defaults_set_included(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["smoke", "--check", "--out", str(tmp_path), "--set", "learning-rate=0.05"]
    assert compare.main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == f"dense  seed 3  {tmp_path / 'dense' / 'seed-3'}  (to run)"
    assert lines[2].split() == [
        "num-clients=3",
        "num-server-rounds=6",
        "learning-rate=0.05",
        'stream-rates="S2"',
    ]
    assert "compression-ratio=0.1" in lines[4] and "learning-rate=0.05" in lines[4]


@pytest.mark.parametrize(
    ("sets", "match"),
    [
        (["learnin-rate=0.05"], "unknown run-config key 'learnin-rate'; did you mean"),
        (["learning-rate=-1"], "learning-rate"),
        (["seed=4"], "--set seed: set by the runner"),
        (["learning-rate"], "expected key=value"),
    ],
)
def test_a_bad_set_exits_2_naming_the_key_before_anything_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], sets: list[str], match: str
) -> None:
    argv = ["smoke", "--out", str(tmp_path / "out")]
    for pair in sets:
        argv += ["--set", pair]
    assert compare.main(argv) == 2
    assert re.search(match, capsys.readouterr().err)
    assert not (tmp_path / "out").exists()


def test_set_wins_over_the_file_for_every_run() -> None:
    comparison = compare_spec.load(
        compare_spec.find("smoke"), compare_spec.parse_sets(["compression-ratio=0.5"])
    )
    jobs = compare.plan(comparison, Path("/tmp/unused"))
    assert [j.expected["compression-ratio"] for j in jobs] == [0.5, 0.5]  # topk-0.1 says 0.1


def test_records_from_before_a_setting_existed_count_when_its_default_is_asked(
    tmp_path: Path,
) -> None:
    job = compare.plan(compare_spec.load(compare_spec.find("smoke")), tmp_path)[1]
    job.results_dir.mkdir(parents=True)
    old = {k: v for k, v in job.expected.items() if k != "virtual-time-budget-s"}
    (job.results_dir / "summary.json").write_text(json.dumps({"config": old}))
    assert job.done  # the records were written before the setting: it ran at its default
    job.expected["virtual-time-budget-s"] = 30.0
    assert not job.done  # this run asks for something the records did not do
    # A setting added after the plan was made (while the comparison ran), at its default.
    job.expected.pop("virtual-time-budget-s")
    (job.results_dir / "summary.json").write_text(json.dumps({"config": old | {"x-new": 0}}))
    assert not job.done  # not a setting: another configuration
    newer = old | {"virtual-time-budget-s": 0.0}
    (job.results_dir / "summary.json").write_text(json.dumps({"config": newer}))
    assert job.done


def test_a_subset_keeps_the_matching_runs_their_baselines_and_the_seeds_asked() -> None:
    resnet = compare_spec.load(compare_spec.find("resnet"))
    chosen = compare_spec.subset(resnet, ["auto-c0.01-*"], [7])
    assert [r.name for r in chosen.runs] == [
        "dense-c1",
        "auto-c0.01-c1",
        "dense-c2",
        "auto-c0.01-c2",
    ]
    assert chosen.seeds == (7,)
    assert compare_spec.subset(resnet, None, None) == resnet
    with pytest.raises(ConfigError, match="no run matches"):
        compare_spec.subset(resnet, ["nothing-*"], None)
    with pytest.raises(ConfigError, match=r"seed\(s\) \[5\]"):
        compare_spec.subset(resnet, None, [5])


GRID = """
[[runs]]
name = "{collective}-c{compression-ratio}"
presets = ["configs/dsgd.toml"]
[runs.config]
num-clients = 4
[runs.vary]
collective = ["allgather", "allreduce"]
compression-ratio = [0.01, 0.1]
"""


def test_a_grid_is_the_cross_product_first_key_slowest_named_by_its_pattern(
    tmp_path: Path,
) -> None:
    path = tmp_path / "grid.toml"
    path.write_text(HEAD + RUN_A + GRID)
    runs = compare_spec.load(path).runs
    assert [r.name for r in runs] == [
        "a",
        "allgather-c0.01",
        "allgather-c0.1",
        "allreduce-c0.01",
        "allreduce-c0.1",
    ]
    for run in runs[1:]:
        collective, _, ratio = run.name.partition("-c")
        assert run.config == {
            "num-clients": 4,
            "collective": collective,
            "compression-ratio": float(ratio),
        }
        assert run.presets == ("configs/dsgd.toml",)


@pytest.mark.parametrize(
    ("grid", "match"),
    [
        (GRID.replace("-c{compression-ratio}", ""), "each varied key once"),
        (GRID.replace('"{collective}', '"{topology}-{collective}'), "each varied key once"),
        (GRID.replace("[0.01, 0.1]", "[]"), "vary.compression-ratio must be a list"),
        (GRID.replace("[0.01, 0.1]", "[0.1, 0.1]"), "distinct values"),
        (GRID.replace("num-clients = 4", "collective = 'dense'"), "both varied and set"),
        (GRID.replace("[0.01, 0.1]", "[0.01, 2.0]"), r"'allgather-c2.0' \(seed 1\)"),
        (
            GRID.replace('collective = ["allgather", "allreduce"]', "seed = [1, 2]").replace(
                "{collective}", "{seed}"
            ),
            "set by the runner",
        ),
    ],
)
def test_bad_grids_are_named(tmp_path: Path, grid: str, match: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(HEAD + RUN_A + grid)
    with pytest.raises(ConfigError, match=match):
        compare_spec.load(path)
