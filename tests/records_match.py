"""Comparing run records across machines: what must be exact, what floating point may move.

PyTorch's CPU kernels (MKL, oneDNN, ATen's vectorised paths) are chosen by the processor, so
one seed gives floats that differ in the last bits from one CPU to another. Records are
therefore compared field by field: integers, strings, booleans and None exactly, floats within
``FLOAT_REL_TOL``, recursively through nested records.

A last-bit difference can also change a decision. The one that does so first is a Top-k cut:
when the k-th largest magnitude and the largest one left out are nearly equal, another CPU may
keep the other entry, and from then on the run follows a neighbouring path (floats apart by up
to a few percent, a downlink union a few entries larger or smaller). ``TopkCutSpy`` measures
every cut's margin during a run; from the first round with a cut closer than ``TIE_MARGIN``,
records are compared in their decisions only (``DECISION_FIELDS``).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray

import compress.topk
from server.records import RunRecorder

# Across the CPU paths this machine can force (native, MKL_CBWR=COMPATIBLE/AVX2/SSE4_2,
# ATEN_CPU_CAPABILITY=default, ONEDNN_MAX_CPU_ISA=SSE41, one thread) and the machine that
# recorded tests/golden, record floats before any changed decision were at most 2.2e-7 apart
# (relative): the tolerance leaves a factor of about 50.
FLOAT_REL_TOL = 1e-5
# Floats that should be zero can come out as rounding residue (a sum of cancelling terms).
FLOAT_ABS_TOL = 1e-12
# The smallest relative gap at a Top-k cut that no CPU path is taken to cross. A forced path
# (MKL_CBWR=COMPATIBLE) was seen to swap the entries of a cut with a gap of 4e-6.
TIE_MARGIN = 1e-5
# What a run decides rather than computes: these must agree even after a near-tie.
DECISION_FIELDS = (
    "round",
    "num_clients",
    "collective",
    "compression_ratio",
    "learning_rate",
    "refused",
    "failed",
    "time_source",
    "model_payloads",
)


def differences(got: Any, want: Any, path: str = "") -> list[str]:
    """Every place where ``got`` and ``want`` differ beyond floating point, named by its path."""
    if isinstance(want, dict) and isinstance(got, dict):
        if got.keys() != want.keys():
            extra, missing = sorted(got.keys() - want.keys()), sorted(want.keys() - got.keys())
            return [f"{path or '.'}: keys differ (extra {extra}, missing {missing})"]
        return [d for key in want for d in differences(got[key], want[key], f"{path}.{key}")]
    if isinstance(want, list) and isinstance(got, list):
        if len(got) != len(want):
            return [f"{path}: {len(got)} items, want {len(want)}"]
        pairs = enumerate(zip(got, want, strict=True))
        return [d for i, (g, w) in pairs for d in differences(g, w, f"{path}[{i}]")]
    if type(got) is not type(want):
        return [f"{path}: {got!r} ({type(got).__name__}), want {want!r} ({type(want).__name__})"]
    if isinstance(want, float):
        if math.isclose(got, want, rel_tol=FLOAT_REL_TOL, abs_tol=FLOAT_ABS_TOL):
            return []
        if math.isnan(got) and math.isnan(want):
            return []
        return [f"{path}: {got!r}, want {want!r} (relative tolerance {FLOAT_REL_TOL:g})"]
    return [] if got == want else [f"{path}: {got!r}, want {want!r}"]


def decisions(row: dict[str, Any]) -> dict[str, Any]:
    """What a round decided: ``DECISION_FIELDS``, the phases it ran, and which fields it has."""
    out = {key: row.get(key) for key in DECISION_FIELDS}
    out["phases"] = [phase["name"] for phase in row.get("phases", [])]
    out["fields"] = sorted(row)
    return out


def round_differences(
    got: Sequence[dict[str, Any]], want: Sequence[dict[str, Any]], near_tie_round: int | None
) -> list[str]:
    """Rounds before ``near_tie_round`` in full, that round and later ones in their decisions."""
    if len(got) != len(want):
        return [f"{len(got)} rounds, want {len(want)}"]
    out: list[str] = []
    for g, w in zip(got, want, strict=True):
        if near_tie_round is None or w["round"] < near_tie_round:
            out += differences(g, w, f"round {w['round']}")
        else:
            out += differences(decisions(g), decisions(w), f"round {w['round']} (decisions)")
    return out


def cut_margin(values: NDArray[np.float32], k: int) -> float:
    """How close a Top-k cut of ``values`` (magnitudes) is to keeping another entry: the
    relative gap between the k-th largest value and its nearest distinct neighbour across the
    cut. Exact ties are broken by index on every machine and do not count; a cut among zeros
    (the k-th largest is 0) cannot move."""
    if values.size <= k:
        return math.inf
    ranked = np.sort(values.astype(np.float64))[::-1]
    kth = ranked[k - 1]
    if kth == 0.0:
        return math.inf
    below = ranked[ranked < kth]
    gaps = [kth - below[0]] if below.size else []
    if ranked[k] == kth:  # a tie straddles the cut: an entry just above it may join the tie
        above = ranked[ranked > kth]
        gaps += [above[-1] - kth] if above.size else []
    return min(gaps, default=math.inf) / kth


class TopkCutSpy:
    """The smallest Top-k cut margin of each recorded round of a run (1-based)."""

    def __init__(self) -> None:
        self.round_margins: list[float] = []
        self._current = math.inf

    def near_tie_round(self, margin: float = TIE_MARGIN) -> int | None:
        """The first round with a cut closer than ``margin``, or None."""
        return next((r for r, m in enumerate(self.round_margins, 1) if m < margin), None)

    @contextmanager
    def watching(self, monkeypatch: pytest.MonkeyPatch) -> Iterator[TopkCutSpy]:
        """Spy on every cut (``compress.topk._exact``, where each k-th value is decided) and
        close a round whenever the recorder writes one."""
        exact, record_round = compress.topk._exact, RunRecorder.record_round

        def spied_exact(
            magnitude: NDArray[np.float32], positions: NDArray[np.int64], k: int
        ) -> NDArray[np.int64]:
            self._current = min(self._current, cut_margin(magnitude[positions], k))
            return exact(magnitude, positions, k)

        def spied_record_round(recorder: RunRecorder, *args: Any, **kwargs: Any) -> Any:
            self.round_margins.append(self._current)
            self._current = math.inf
            return record_round(recorder, *args, **kwargs)

        with monkeypatch.context() as patch:
            patch.setattr(compress.topk, "_exact", spied_exact)
            patch.setattr(RunRecorder, "record_round", spied_record_round)
            yield self
