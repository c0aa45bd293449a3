"""Comparison files (``configs/compare/<name>.toml``): named runs, a baseline, a target, seeds.

```toml
description = "what this comparison asks"
baseline = "dense"            # the name of one of the runs
target = 0.93                 # test accuracy for time-to-target and speedup
seeds = [42, 7]               # every run once per seed, on the same partitions, devices,
                              # stream rates and network schedule
[common]                      # run config shared by every run (optional)
num-server-rounds = 150

[[runs]]
name = "dense"
presets = ["configs/dsgd.toml"]   # optional, applied in order
baseline = "dense"                # optional: this run's own baseline (e.g. per network)
[runs.config]                     # optional, applied last
collective = "dense"

[[runs]]                          # a grid: one run per combination of the listed values
name = "{collective}-c{compression-ratio}"   # each varied key once, in braces
[runs.vary]                       # the first key varies slowest
collective = ["allgather", "allreduce"]
compression-ratio = [0.01, 0.1]
```

Every run's configuration is resolved and validated (with each seed) before anything starts.
docs/comparisons.md describes the format.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

from commands.run_config import parse_overrides, resolve_settings
from common.settings import PROJECT_ROOT, ConfigError

COMPARE_DIR = PROJECT_ROOT / "configs" / "compare"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_TOP_KEYS = {"description", "baseline", "target", "seeds", "common", "runs"}
_RUN_KEYS = {"name", "presets", "config", "baseline", "vary"}
_FIELD = re.compile(r"\{([^{}]*)\}")  # a varied key in a grid's name pattern
_RESERVED = {"seed", "results-dir"}  # the runner sets these


@dataclass(frozen=True)
class RunSpec:
    name: str
    presets: tuple[str, ...]
    config: Mapping[str, Any]
    baseline: str | None = None  # None: the comparison's baseline


@dataclass(frozen=True)
class Comparison:
    name: str
    description: str
    baseline: str
    target: float
    seeds: tuple[int, ...]
    common: Mapping[str, Any]
    runs: tuple[RunSpec, ...]
    sets: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # --set: over every run

    def baselines(self) -> dict[str, str]:
        """Each run's baseline: its own if it names one, else the comparison's."""
        return {r.name: r.baseline or self.baseline for r in self.runs}

    def overrides(self, run: RunSpec, seed: int, results_dir: Path) -> dict[str, Any]:
        """The run config of ``run`` under ``seed``: presets, common, own config, the
        command line's ``--set`` pairs, seed, dir."""
        out = parse_overrides(" ".join(run.presets)) if run.presets else {}
        out.update(self.common)
        out.update(run.config)
        out.update(self.sets)
        out["seed"] = seed
        out["results-dir"] = str(results_dir)
        return out


def find(name_or_path: str) -> Path:
    """``flexcomm`` means configs/compare/flexcomm.toml; a path is taken as it is."""
    path = Path(name_or_path)
    if path.suffix != ".toml":
        path = COMPARE_DIR / f"{name_or_path}.toml"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in COMPARE_DIR.glob("*.toml")))
        raise ConfigError(f"comparison {name_or_path!r} not found (known: {known})")
    return path


def _check_keys(where: str, table: Mapping[str, Any], allowed: set[str]) -> None:
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise ConfigError(
            f"{where}: unknown key(s) {', '.join(map(repr, unknown))}; "
            f"allowed: {', '.join(sorted(allowed))}"
        )


def _label(value: Any) -> str:
    """A varied value as it appears in a run's name: ``0.01``, ``32``, ``allgather``, ``true``."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def _fill(pattern: str, combination: Mapping[str, Any]) -> str:
    return _FIELD.sub(lambda match: _label(combination[match.group(1)]), pattern)


def expand(index: int, table: Any) -> list[RunSpec]:
    """``runs[index]``: one run, or a grid's runs (``vary``: the cross product of its lists,
    the first key slowest, each combination added to the entry's ``config`` and named by
    filling the entry's ``name`` pattern)."""
    if not isinstance(table, Mapping) or "vary" not in table:
        return [_run(index, table)]
    vary = table["vary"]
    where = f"runs[{index}] ({table.get('name')!r})"
    if not isinstance(vary, Mapping) or not vary:
        raise ConfigError(f"{where}: vary must be a table of key = [values]")
    for key, values in vary.items():
        if not isinstance(values, list) or not values or len(set(map(repr, values))) != len(values):
            raise ConfigError(f"{where}: vary.{key} must be a list of distinct values")
    config = table.get("config", {})
    clash = sorted(set(vary) & set(config)) if isinstance(config, Mapping) else []
    if clash:
        raise ConfigError(f"{where}: {', '.join(clash)} both varied and set in config")
    pattern = table.get("name")
    if not isinstance(pattern, str) or sorted(_FIELD.findall(pattern)) != sorted(vary):
        raise ConfigError(
            f"{where}: name must hold each varied key once in braces, e.g. "
            + "-".join(f"{{{key}}}" for key in vary)
        )
    runs = []
    for values in itertools.product(*vary.values()):
        combination = dict(zip(vary, values, strict=True))
        name = _fill(pattern, combination)
        entry = {k: v for k, v in table.items() if k != "vary"}
        runs.append(_run(index, entry | {"name": name, "config": {**config, **combination}}))
    return runs


def _run(index: int, table: Any) -> RunSpec:
    where = f"runs[{index}]"
    if not isinstance(table, Mapping):
        raise ConfigError(f"{where} must be a table")
    _check_keys(where, table, _RUN_KEYS)
    name = table.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        raise ConfigError(f"{where}: name {name!r} must be letters, digits, '.', '_' or '-'")
    presets = table.get("presets", [])
    if not isinstance(presets, list) or not all(isinstance(p, str) for p in presets):
        raise ConfigError(f"run {name!r}: presets must be a list of file names")
    config = table.get("config", {})
    if not isinstance(config, Mapping):
        raise ConfigError(f"run {name!r}: config must be a table")
    reserved = sorted(_RESERVED & set(config))
    if reserved:
        raise ConfigError(f"run {name!r}: {', '.join(reserved)} is set by the runner")
    baseline = table.get("baseline")
    if baseline is not None and not isinstance(baseline, str):
        raise ConfigError(f"run {name!r}: baseline must be a run name")
    return RunSpec(name, tuple(presets), dict(config), baseline)


def parse_sets(pairs: Sequence[str]) -> dict[str, Any]:
    """``--set key=value`` pairs (values in TOML syntax, bare words taken as strings)."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, equals, value = pair.partition("=")
        if not equals or not key.strip() or not value.strip():
            raise ConfigError(f"--set {pair!r}: expected key=value")
        if key.strip() in _RESERVED:
            raise ConfigError(f"--set {key.strip()}: set by the runner (use --seeds)")
        out.update(parse_overrides(f"{key.strip()}={value.strip()}"))
    return out


def load(path: Path, sets: Mapping[str, Any] | None = None) -> Comparison:
    """Parse and check a comparison file, with ``sets`` (``--set``) over every run;
    ``ConfigError`` names what is wrong."""
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    _check_keys(str(path), data, _TOP_KEYS)
    for key in ("baseline", "target", "seeds", "runs"):
        if key not in data:
            raise ConfigError(f"{path}: missing {key!r}")
    runs = data["runs"]
    if not isinstance(runs, list) or not runs:
        raise ConfigError(f"{path}: runs must be a non-empty array of tables")
    specs = tuple(spec for i, table in enumerate(runs) for spec in expand(i, table))
    names = [r.name for r in specs]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ConfigError(f"{path}: run name(s) {', '.join(repeated)} used twice")
    for baseline in [data["baseline"], *(r.baseline for r in specs if r.baseline)]:
        if baseline not in names:
            raise ConfigError(f"{path}: baseline {baseline!r} is not one of {names}")
    target = data["target"]
    if isinstance(target, bool) or not isinstance(target, int | float) or not 0 < target <= 1:
        raise ConfigError(f"{path}: target must be an accuracy in (0, 1], got {target!r}")
    seeds = data["seeds"]
    if (
        not isinstance(seeds, list)
        or not seeds
        or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds)
        or len(set(seeds)) != len(seeds)
    ):
        raise ConfigError(f"{path}: seeds must be distinct integers >= 0, got {seeds!r}")
    common = data.get("common", {})
    if not isinstance(common, Mapping) or _RESERVED & set(common):
        raise ConfigError(f"{path}: common must be a table without seed or results-dir")
    comparison = Comparison(
        name=path.stem,
        description=str(data.get("description", "")),
        baseline=data["baseline"],
        target=float(target),
        seeds=tuple(seeds),
        common=dict(common),
        runs=specs,
        sets=dict(sets or {}),
    )
    for run in specs:  # every configuration is valid before anything starts
        for seed in comparison.seeds:
            try:
                resolve_settings(comparison.overrides(run, seed, PROJECT_ROOT / "results"))
            except ConfigError as exc:
                raise ConfigError(f"{path}: run {run.name!r} (seed {seed}): {exc}") from None
    return comparison


def subset(
    comparison: Comparison, runs: Sequence[str] | None, seeds: Sequence[int] | None
) -> Comparison:
    """Only the runs whose names match one of the ``runs`` patterns (fnmatch), with the
    baselines they are compared to, under ``seeds`` (each one of the file's); None keeps all."""
    chosen = comparison.runs
    if runs is not None:
        matched = {r.name for r in comparison.runs if any(fnmatch(r.name, p) for p in runs)}
        if not matched:
            raise ConfigError(f"{comparison.name}: no run matches {', '.join(runs)}")
        baselines = comparison.baselines()
        matched |= {baselines[name] for name in matched}
        chosen = tuple(r for r in comparison.runs if r.name in matched)
    if seeds is not None:
        unknown = sorted(set(seeds) - set(comparison.seeds))
        if unknown:
            raise ConfigError(
                f"{comparison.name}: seed(s) {unknown} are not among the file's {comparison.seeds}"
            )
    return dataclasses.replace(
        comparison,
        runs=chosen,
        seeds=comparison.seeds if seeds is None else tuple(dict.fromkeys(seeds)),
    )
