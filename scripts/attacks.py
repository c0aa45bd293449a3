"""One hostile client against each defence: final accuracy under attack and clean.

Each run is the real ServerApp and ClientApps in process (``scripts.in_process``), 10 clients,
150 rounds; the attacker is partition 0 (node 100), whose replies are rewritten on the way
to the server:
- ``scale``: its update x 1e6, every round;
- ``huge-once``: its update's values set to 1e30, in round 10;
- ``flip``: its update x −10 (sign-flipped), every round;
- ``examples``: num-examples 10**12, every round;
- ``var-claim``: ||TopK(e)||² claimed 1e300 (VAR leader), every round;
- ``var-pin``: ||TopK(e)||² claimed 50 x its own (within the 100 x bound, so it leads under
  VAR), and when it leads it names indices 0..k-1 and sends values there whose energy is what it
  claimed: its claim checks out, its index set is useless;
- ``inject``: injected samples with features 1e30, every round;
- ``batch-claim``: honest updates, num-examples and stream-samples claimed 1024 (one local
  step of the largest batch, within the bounds), every round: it would drive the linearly
  scaled learning rate up;
- ``junk-record``: honest replies with a 4 MB record nobody reads attached, every round;
- ``restart``: ``flip``, and after every 4th training reply it comes back as a new node
  (sooner than the screen judges a history, were histories kept per node id);
- ``absent-2``, not an attack: partitions 0 and 1 never answer, what any defence that refuses
  ``collude-2`` is left with;
- ``collude-2``, ``collude-3``: partitions 0 and 1 (and 2) send one and the same update, the
  first colluder's of the phase x −10 (sign-flipped), every round: a coalition the screen
  must not count as the rest.
The ``flagship`` mode is configs/flagship.toml (600 rounds) under its default defence; the
``-sampled`` modes train 4 of the 10 clients a round.

    .venv/bin/python -m scripts.attacks --out /tmp/attacks             # all runs, two at a time
    .venv/bin/python -m scripts.attacks --out /tmp/attacks --modes flagship --seeds 42
    .venv/bin/python -m scripts.attacks --out /tmp/attacks --attacks clean collude-2 \
        --defences clip-screen
    .venv/bin/python -m scripts.attacks --out /tmp/attacks --table     # the table only
"""

from __future__ import annotations

import argparse
import json
import logging
import tomllib
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, Message, RecordDict

from common.settings import PROJECT_ROOT, Settings
from scripts.in_process import InProcessGrid, run_server_app, set_task_identity
from scripts.run_simulation import parse_overrides, resolve_settings
from strategies.collectives.allreduce import TOPK_NORM2, TRAIN_INDICES, TRAIN_VALUES
from wire.codec import raw_array
from wire.keys import (
    ARRAYS_KEY,
    INDICES,
    INJECT_KEY,
    MASK,
    METRICS_KEY,
    NUM_EXAMPLES,
    SPARSE_KEY,
    STREAM_SAMPLES,
    TRAIN,
)
from wire.keys import VALUES as VALUES_ARRAY
from wire.messages import Samples

ATTACKER = 100
COLLUDERS = {"collude-2": (100, 101), "collude-3": (100, 101, 102)}
# Not an attack: these partitions never answer. Any defence that refuses the colluders trains
# without their data, so this is the best it can do. (A node that never answers costs the
# round timeout, so those runs time out in 1 s: every other reply is in by then, in process.)
ABSENT = {"absent-2": (100, 101)}
GRID_FILE = PROJECT_ROOT / "configs" / "measure" / "attacks.toml"


@dataclass(frozen=True)
class Mode:
    """One row of the attack grid (configs/attacks.toml)."""

    overlay: str  # run config over the grid's ``common``
    defences: tuple[str, ...]
    attacks: tuple[str, ...]


def load_grid(path: Path = GRID_FILE) -> tuple[str, dict[str, Mode]]:
    """(common run config, modes) of an attack grid; an unknown key, attack or group is an
    error that names the file and the key."""
    spec = tomllib.loads(path.read_text())
    known = {*ATTACKS, *COLLUDERS, *ABSENT}
    groups = {name: tuple(attacks) for name, attacks in spec.get("groups", {}).items()}
    for name, members in groups.items():
        if unknown := sorted(set(members) - known):
            raise SystemExit(f"{path}: groups.{name}: unknown attacks {unknown}")
    modes = {}
    for name, row in spec.get("modes", {}).items():
        if extra := sorted(set(row) - {"overlay", "defences", "attacks"}):
            raise SystemExit(f"{path}: modes.{name}: unknown keys {extra}")
        attacks: list[str] = []
        for entry in row.get("attacks", []):
            if entry not in groups and entry not in known:
                raise SystemExit(f"{path}: modes.{name}.attacks: unknown attack {entry!r}")
            attacks.extend(groups.get(entry, (entry,)))
        modes[name] = Mode(str(row.get("overlay", "")), tuple(row["defences"]), tuple(attacks))
    return str(spec.get("common", "")), modes


def _scaled(content: RecordDict, factor: float | None, value: float | None = None) -> RecordDict:
    """The update times ``factor`` (or every value set to ``value``), dense or sparse."""
    out = RecordDict(dict(content.items()))
    if ARRAYS_KEY in content.array_records:
        record = content.array_records[ARRAYS_KEY]
        out[ARRAYS_KEY] = ArrayRecord(
            {
                name: Array(_change(array.numpy(), factor, value).astype(np.float32))
                for name, array in record.items()
            }
        )
    if SPARSE_KEY in content.array_records:
        record = ArrayRecord(dict(content.array_records[SPARSE_KEY].items()))
        if VALUES_ARRAY in record:
            values = np.frombuffer(record[VALUES_ARRAY].data, "<f4")
            record[VALUES_ARRAY] = raw_array(_change(values, factor, value).astype("<f4"))
        out[SPARSE_KEY] = record
    return out


def _change(x: np.ndarray, factor: float | None, value: float | None) -> np.ndarray:
    return np.full_like(x, value) if value is not None else x * factor


def _metric(key: str, value: float) -> Callable[[RecordDict, int], RecordDict]:
    def rewrite(content: RecordDict, server_round: int) -> RecordDict:
        if METRICS_KEY in content.metric_records and key in content.metric_records[METRICS_KEY]:
            content.metric_records[METRICS_KEY][key] = value
        return content

    return rewrite


def _claim_batches(content: RecordDict, server_round: int) -> RecordDict:
    for key in (NUM_EXAMPLES, STREAM_SAMPLES):
        content = _metric(key, 1024)(content, server_round)
    return content


def _junk(content: RecordDict, server_round: int) -> RecordDict:
    out = RecordDict(dict(content.items()))
    out["attachment"] = ArrayRecord({"junk": raw_array(np.zeros(4 << 20, dtype=np.uint8))})
    return out


def _inject(content: RecordDict, server_round: int) -> RecordDict:
    x = np.full((4, 64), 1e30, dtype=np.float32)
    out = RecordDict(dict(content.items()))
    out[INJECT_KEY] = Samples(x, np.arange(4, dtype=np.int64)).to_record()
    return out


class VarPin:
    """``var-pin``, told its phase by what a reply holds: a training reply's claim, the
    leader's indices, then values at them. Its state lives for one round."""

    CLAIM_FACTOR = 50.0

    def __init__(self) -> None:
        self.claim = 0.0
        self.led = False

    def __call__(self, content: RecordDict, server_round: int) -> RecordDict:
        metrics = content.metric_records.get(METRICS_KEY)
        if metrics is not None and TOPK_NORM2 in metrics:
            self.claim, self.led = float(metrics[TOPK_NORM2]) * self.CLAIM_FACTOR, False  # type: ignore[arg-type]
            metrics[TOPK_NORM2] = self.claim
            return content
        record = content.array_records.get(SPARSE_KEY)
        if record is None:
            return content
        out = RecordDict(dict(content.items()))
        if INDICES in record:
            count = record[INDICES].shape[0]
            out[SPARSE_KEY] = ArrayRecord({INDICES: raw_array(np.arange(count, dtype="<i4"))})
            self.led = True
        elif MASK in record:
            bits = np.unpackbits(np.frombuffer(record[MASK].data, np.uint8))
            pinned = np.arange(bits.size) < int(bits.sum())
            out[SPARSE_KEY] = ArrayRecord({MASK: raw_array(np.packbits(pinned))})
            self.led = True
        elif self.led and VALUES_ARRAY in record:  # a model without buffers: I is its k indices
            k = record[VALUES_ARRAY].shape[0]
            values = np.full(k, np.sqrt(self.claim / k), dtype="<f4")
            out[SPARSE_KEY] = ArrayRecord({VALUES_ARRAY: raw_array(values)})
        return out


class Coalition:
    """Colluders that send one update: the first colluder's of a phase, x −10, in every
    colluder's own reply of that phase (their metrics stay their own)."""

    def __init__(self) -> None:
        self.phase: tuple[int, str] | None = None  # (round, message type) of ``update``
        self.update: dict[str, ArrayRecord] = {}

    def __call__(self, content: RecordDict, phase: tuple[int, str]) -> RecordDict:
        if phase != self.phase:
            flipped = _scaled(content, -10.0)
            self.phase = phase
            self.update = {k: flipped.array_records[k] for k in UPDATE_RECORDS if k in flipped}
            return flipped
        out = RecordDict(dict(content.items()))
        for key, record in self.update.items():
            if key in out:
                out[key] = record
        return out


ATTACKS: dict[str, Callable[[RecordDict, int], RecordDict]] = {
    "scale": lambda c, r: _scaled(c, 1e6),
    "huge-once": lambda c, r: _scaled(c, None, 1e30) if r == 10 else c,
    "flip": lambda c, r: _scaled(c, -10.0),
    "examples": _metric(NUM_EXAMPLES, 10**12),
    "var-claim": _metric(TOPK_NORM2, 1e300),
    "var-pin": VarPin(),
    "inject": _inject,
    "batch-claim": _claim_batches,
    "junk-record": _junk,
    "restart": lambda c, r: _scaled(c, -10.0),
}

COMMON, MODES = load_grid()

# attack -> after how many of its training replies the attacker comes back as a new node
RESTARTS = {"restart": 4}

UPDATE_RECORDS = (ARRAYS_KEY, SPARSE_KEY)
UPDATE_ATTACKS = {"scale", "huge-once", "flip", "restart", *COLLUDERS}
# attacks on Allreduce's leader phases rewrite every reply of the round
PHASE_ATTACKS = {"var-pin"}


class AttackGrid(InProcessGrid):
    """The in-process federation with node 100's training replies rewritten by ``attack``."""

    def __init__(self, settings: Settings, attack: str | None) -> None:
        super().__init__(settings)
        self.attack = ATTACKS.get(attack or "")
        self.fail_nodes = set(ABSENT.get(attack or "", ()))
        self.coalition = Coalition() if attack in COLLUDERS else None
        self.attackers = COLLUDERS.get(attack or "", (ATTACKER,))
        # Allreduce's values come in their own phase: an update attack rewrites those too.
        self.rewrites = {TRAIN, TRAIN_VALUES} if attack in UPDATE_ATTACKS else {TRAIN}
        if attack in PHASE_ATTACKS:
            self.rewrites = {TRAIN, TRAIN_INDICES, TRAIN_VALUES}
        self.round = 0
        self.restart_every = RESTARTS.get(attack or "")
        self.attacker_replies = 0
        self.restart_pending = False

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> list[Message]:
        messages = list(messages)
        kind = messages[0].metadata.message_type if messages else None
        if kind == TRAIN:  # the ServerApp's timed grid pushes one message at a time: read the round
            self.round = int(messages[0].content.config_records["config"]["server-round"])  # type: ignore[arg-type]
        replies = super().send_and_receive(messages, timeout=timeout)
        if (self.attack is None and self.coalition is None) or kind not in self.rewrites:
            return replies
        replies = [
            Message(content=self._rewrite(r.content, str(kind)), metadata=r.metadata)  # type: ignore[call-overload]
            if r.metadata.src_node_id in self.attackers and not r.has_error()
            else r
            for r in replies
        ]
        if kind == TRAIN and any(r.metadata.src_node_id in self.attackers for r in replies):
            self._restart_maybe()
        return replies

    def _restart_maybe(self) -> None:
        """``restart``: after every ``restart_every``-th training reply, the attacker's
        SuperNode comes back under a new node id (its partition and state kept), as a device
        that restarts to shed its record would; between rounds (``get_node_ids``), since the
        round's later phases still go to the id it answered under."""
        self.attacker_replies += 1
        if self.restart_every is not None and self.attacker_replies % self.restart_every == 0:
            self.restart_pending = True

    def get_node_ids(self) -> list[int]:
        if self.restart_pending:
            self.restart_pending = False
            (old,) = self.attackers
            new = 1000 + self.attacker_replies
            self.contexts[new] = self.contexts.pop(old)
            self.contexts[new].node_id = new
            self.attackers = (new,)
        return super().get_node_ids()

    def _rewrite(self, content: RecordDict, kind: str) -> RecordDict:
        if self.coalition is not None:
            return self.coalition(content, (self.round, kind))
        assert self.attack is not None
        return self.attack(content, self.round)


def run_one(job: tuple[str, str | None, str, int, str]) -> dict[str, Any]:
    """One (mode, attack or None, defence, seed) run; its final and best accuracy."""
    mode, attack, defence, seed, _ = job
    set_task_identity()
    logging.getLogger("flwr").setLevel(logging.ERROR)
    results = _results(job)
    text = f"{COMMON} {MODES[mode].overlay} robust={defence} seed={seed} results-dir={results}"
    if attack in ABSENT:
        text += " round-timeout-s=1"
    if not (results / "summary.json").exists():
        run_server_app(AttackGrid(resolve_settings(parse_overrides(text)), attack))
    summary = json.loads((results / "summary.json").read_text())
    return {
        "mode": mode,
        "attack": attack or "clean",
        "defence": defence,
        "seed": seed,
        "final": summary["final_accuracy"],
        "best": summary["best_accuracy"],
        "a20": summary["last_rounds"]["mean_accuracy"],
    }


def jobs(
    out: str,
    seeds: list[int],
    modes: list[str] | None = None,
    attacks: list[str] | None = None,
    defences: list[str] | None = None,
) -> list[tuple[str, str | None, str, int, str]]:
    """Every (mode, attack, defence, seed) run asked for; ``None``: all of them."""
    return [
        (mode, attack, defence, seed, out)
        for mode, row in MODES.items()
        if modes is None or mode in modes
        for attack in (None, *row.attacks)
        if attacks is None or (attack or "clean") in attacks
        for defence in row.defences
        if defences is None or defence in defences
        for seed in seeds
    ]


def table(rows: list[dict[str, Any]]) -> str:
    """A20 (mean accuracy of the last 20 rounds), mean over seeds, per (mode, attack) and
    defence."""
    defences = ("none", "clip", "clip-screen", "trimmed-mean", "median")
    lines = [
        "| mode | attack | " + " | ".join(f"robust = {d}" for d in defences) + " |",
        "|---" * (len(defences) + 2) + "|",
    ]
    keys = sorted({(r["mode"], r["attack"]) for r in rows}, key=lambda k: (k[0], k[1] != "clean"))
    for mode, attack in keys:
        cells = []
        for defence in defences:
            a20s = [
                r["a20"]
                for r in rows
                if (r["mode"], r["attack"], r["defence"]) == (mode, attack, defence)
            ]
            cells.append(f"{np.mean(a20s):.4f}" if a20s else "")
        lines.append(f"| {mode} | {attack} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--seeds", type=int, nargs="+", default=[42, 7])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--modes", nargs="+", choices=sorted(MODES), help="default: all")
    parser.add_argument(
        "--attacks",
        nargs="+",
        choices=["clean", *sorted(ATTACKS), *COLLUDERS, *ABSENT],
        help="default: all",
    )
    parser.add_argument("--defences", nargs="+", help="default: each mode's")
    parser.add_argument("--table", action="store_true", help="only the table of finished runs")
    args = parser.parse_args()
    todo = jobs(args.out, args.seeds, args.modes, args.attacks, args.defences)
    if args.table:
        rows = [run_one(j) for j in todo if _done(j)]
    else:
        with ProcessPoolExecutor(args.jobs) as pool:
            rows = list(pool.map(run_one, todo))
    print(table(rows))
    _merge_rows(Path(args.out) / "attacks.json", rows)


def _merge_rows(path: Path, rows: list[dict[str, Any]]) -> None:
    """attacks.json: these rows over those of earlier runs into the same directory."""
    key = ("mode", "attack", "defence", "seed")
    old = json.loads(path.read_text()) if path.exists() else []
    merged = {tuple(r[k] for k in key): r for r in [*old, *rows]}
    path.write_text(json.dumps(sorted(merged.values(), key=lambda r: str(r)), indent=1))


def _results(job: tuple[str, str | None, str, int, str]) -> Path:
    mode, attack, defence, seed, out = job
    return Path(out) / f"{mode}-{attack or 'clean'}-{defence}-{seed}"


def _done(job: tuple[str, str | None, str, int, str]) -> bool:
    return (_results(job) / "summary.json").exists()


if __name__ == "__main__":
    main()
