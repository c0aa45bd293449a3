"""Who leads an Allreduce round (``leader``: STAR, by position; VAR, by the largest claimed
||TopK(e)||²), and how a leader is judged: its claim against the others' (at most
``CLAIM_SPREAD`` x their median), its values at its own indices against its claim, and its
index set by how much of their own Top-k energy the others hold there."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from numpy.typing import NDArray

from collectives.allreduce.names import TOPK_NORM2
from collectives.base import Participant

CLAIM_TOLERANCE = 0.05  # relative: 8-bit values change the energy by far less
# Clients train one model at one learning rate on batches from one data set: their Top-k
# energies differ by a few times (at most 5.7x the median of the others' in the honest runs of
# benchmarks/claim_spread.py, non-IID and rate-sized batches among them), never by a hundred.
CLAIM_SPREAD = 100.0
MIN_CLAIMS = 3
# An honest leader's I is its own Top-k, and clients of one model hold much of their Top-k
# energy there: the median over the others of ||e[I]||² / ||TopK(e)||² was at least 0.048
# (Dirichlet 0.1), 0.18-0.23 with IID data, in the honest runs of benchmarks/claim_spread.py. An
# index set where they hold almost none was not chosen for the model (indices 0..k-1 of the
# MLP: 0.008-0.01, and training stops, A20 0.11 against 0.96; benchmarks/attacks.py ``var-pin``).
# The floor is less than half the least honest share. A random set of k is not caught (about
# c / (Top-k's share of ||e||²), like an honest non-IID leader's) and only slows a round. A
# false alarm costs little: that leader leads no more, and the round goes on with the
# others' values.
INDEX_SHARE_FLOOR = 0.02
MIN_JUDGES = 3  # other trusted clients whose shares judge a leader's index set


def claim_of(p: Participant) -> float:
    """A participant's ||TopK(e)||² claim (its decode checked it is there and >= 0)."""
    return p.reply.collective_metrics.get(TOPK_NORM2, 0.0)


def _star_leader(server_round: int, participants: Sequence[Participant]) -> Participant:
    return participants[server_round % len(participants)]


def _var_leader(server_round: int, participants: Sequence[Participant]) -> Participant:
    return max(participants, key=lambda p: (claim_of(p), -p.partition_id))


STAR, VAR = "star", "var"
Leader = Callable[[int, Sequence[Participant]], Participant]
LEADERS: dict[str, Leader] = {STAR: _star_leader, VAR: _var_leader}


def implausible_claims(participants: Sequence[Participant]) -> dict[int, str]:
    """Node id -> why its ||TopK(e)||² claim is refused: more than ``CLAIM_SPREAD`` x the median
    of the others' claims (a claim the server can only check after it has led a round). From
    three claims up: of two, either may be the odd one."""
    claims = [claim_of(p) for p in participants]
    reasons: dict[int, str] = {}
    if len(claims) < MIN_CLAIMS:
        return reasons
    for i, p in enumerate(participants):
        typical = float(np.median(claims[:i] + claims[i + 1 :]))  # never empty: MIN_CLAIMS
        if typical > 0.0 and claims[i] > CLAIM_SPREAD * typical:
            reasons[p.node_id] = (
                f"topk-norm2 {claims[i]:g} exceeds {CLAIM_SPREAD:g} x the median of the "
                f"others' claims ({typical:g})"
            )
    return reasons


def own_topk_share(p: Participant, chosen: NDArray[np.bool_]) -> float | None:
    """||e[I]||² / ||TopK(e)||² of one client, at most 1: how much of its own Top-k energy it
    sent at the leader's indices (1 for the leader). Both over the weights: ``chosen`` marks
    the entries of I that are not buffers, as TopK(e) leaves buffers out. None before its
    values came."""
    values, norm2 = p.contribution, claim_of(p)
    if not isinstance(values, np.ndarray):
        return None
    at = values[chosen]
    energy = float(at.astype(np.float64) @ at)
    return min(1.0, energy / norm2) if norm2 > 0 else 1.0


def shared_index_factor(participants: Sequence[Participant], chosen: NDArray[np.bool_]) -> float:
    """Mean over clients (by examples) of their ``own_topk_share``."""
    shares, weights = [], []
    for p in participants:
        share = own_topk_share(p, chosen)
        if share is not None:
            shares.append(share)
            weights.append(p.num_examples)
    return float(np.average(shares, weights=weights))


def others_share(
    leader: Participant, judges: Sequence[Participant], chosen: NDArray[np.bool_]
) -> float | None:
    """The median over the ``judges`` other than the leader of their ``own_topk_share`` at
    its index set; None with fewer than ``MIN_JUDGES`` of them."""
    shares = [
        share
        for p in judges
        if p is not leader and (share := own_topk_share(p, chosen)) is not None
    ]
    return float(np.median(shares)) if len(shares) >= MIN_JUDGES else None
