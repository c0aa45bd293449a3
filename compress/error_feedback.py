"""Error feedback, generic over selectors and encodings (GRACE's memory: compensate, then
update after the compression).

    e = update + residual            (compensate)
    sent = decode(encode(e[I]))      (what the receiver will see at the indices I)
    residual = e - sent at I, e elsewhere

so a lossy encoding's error (quantisation, a sign's magnitude) is fed back like the entries
left out: ``update = sent + new residual - old residual`` for every selector and encoding. The
residual is kept with the node's other vectors (state/vectors.py).
"""

from __future__ import annotations

import numpy as np
from flwr.app import RecordDict

from compress.base import Encoded, Encoding, Indices, Vector
from state.vectors import load_vector, store_vector

RESIDUAL_KEY = "ef-residual"


class ErrorFeedback:
    """Residual memory of one client: what was computed but has not arrived yet."""

    def __init__(self, residual: Vector) -> None:
        self.residual = residual

    @classmethod
    def from_state(cls, state: RecordDict, size: int) -> ErrorFeedback:
        residual = load_vector(state, RESIDUAL_KEY)
        if residual is None:
            residual = np.zeros(size, dtype=np.float32)  # nothing held back yet
        if residual.shape != (size,):
            raise ValueError(f"stored residual has {residual.size} entries, the model {size}")
        return cls(residual)

    def compensate(
        self, update: Vector, clip: float = 0.0, exempt: Indices | None = None
    ) -> Vector:
        """e = update + residual. With ``clip`` > 0, e is scaled so that its norm is at most
        clip x the update's (both outside ``exempt``, the entries sent whole, which keep
        their value): a residual grown large is released gradually and its excess dropped."""
        compensated = update + self.residual
        if clip <= 0.0:
            return compensated
        scaled = np.ones(update.size, dtype=bool)
        if exempt is not None and exempt.size:
            scaled[exempt] = False
        bound = clip * float(np.linalg.norm(update[scaled].astype(np.float64)))
        norm = float(np.linalg.norm(compensated[scaled].astype(np.float64)))
        if norm > bound:
            compensated[scaled] *= np.float32(bound / norm)
        return compensated

    def keep(self, compensated: Vector, indices: Indices, decoded: Vector) -> None:
        """residual = e − what the receiver decodes (``decoded`` at ``indices``, 0 elsewhere)."""
        residual = compensated.copy()
        residual[indices] = compensated[indices] - decoded
        self.residual = residual

    def to_state(self, state: RecordDict) -> None:
        store_vector(state, RESIDUAL_KEY, self.residual)


def compensate(
    state: RecordDict, update: Vector, clip: float = 0.0, exempt: Indices | None = None
) -> Vector:
    """The first half of a compressed client's step: e = update + its residual (clipped as
    ``ErrorFeedback.compensate`` says)."""
    return ErrorFeedback.from_state(state, update.size).compensate(update, clip, exempt)


def send_at(
    state: RecordDict,
    compensated: Vector,
    indices: Indices,
    encoding: Encoding,
    rng: np.random.Generator,
) -> Encoded:
    """The second half: encode e at ``indices`` and keep the rest (and the encoding's error)
    as the residual."""
    encoded = encoding.encode(compensated[indices], rng)
    memory = ErrorFeedback(compensated)
    memory.keep(compensated, indices, encoded.decoded)
    memory.to_state(state)
    return encoded
