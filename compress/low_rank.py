"""PowerSGD's low-rank maths (Vogels et al., NeurIPS 2019), per weight matrix, in NumPy.

The maths both halves of the ``powersgd`` collective (collectives/powersgd.py)
share. One round, for each weight matrix M_i of client i
(its update plus its error-feedback residual; ``matrix_shape`` says which parameters are
matrices, the rest travel dense):

1. every client sends P_i = M_i Q, with Q the same on every client (``initial_q`` in the first
   round, the aggregated Q of the last round after it: the warm start that makes one step of
   power iteration per round enough);
2. the server averages the P_i and orthonormalises the mean (``orthonormalise``): P̂;
3. every client sends Q_i = M_iᵀ P̂ (``second_factor``); the server averages them: Q;
4. the round's update of that matrix is P̂ Qᵀ (``approximation``), the mean of the clients'
   own P̂ Q_iᵀ because the maths is linear: a sum of compressed updates is the compressed sum,
   which is what makes the scheme Allreduce-compatible;
5. each client keeps M_i - P̂ Q_iᵀ as its residual (``residual``): what its own approximation
   did not carry, fed back next round (update = decoded + new residual).

Rank from the compression ratio (the schedules keep choosing c; ``rank_for`` turns it into r):
a rank-r round sends r (rows + cols) values of a rows x cols matrix instead of rows x cols, so
r = floor(c rows cols / (rows + cols)), at least 1 and at most min(rows, cols).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from flwr.app import ArrayRecord
from numpy.typing import NDArray

from wire.codec import PayloadError, Sparse, decode_values, raw_array, read_raw
from wire.keys import FACTORED_TABLE, VALUES
from wire.layout import Layout

Matrix = NDArray[np.float32]
Indices = NDArray[np.int64]

# A column of P with less than this share of the largest column's norm left once the ones before
# it are taken out is dependent on them (float32's rounding of P = M Q is near 1e-7 of it).
DEPENDENT_COLUMN = 1e-5
Q_SEED_STREAM = 0x95D  # the stream of the seeded generator the first Q is drawn from


def matrix_shape(shape: tuple[int, ...]) -> tuple[int, int] | None:
    """The (rows, cols) a parameter is compressed as: a matrix as it is, a convolution's
    (out, in, kh, kw) as (out, in x kh x kw); None for a vector or a scalar (sent dense)."""
    if len(shape) < 2:
        return None
    return shape[0], math.prod(shape[1:])


@dataclass(frozen=True)
class Block:
    """One weight matrix of the flat model vector: where it starts and its matrix shape."""

    start: int
    rows: int
    cols: int

    @property
    def size(self) -> int:
        return self.rows * self.cols

    def of(self, vector: NDArray[np.float32]) -> Matrix:
        """The block's matrix in ``vector`` (a view: writing to it writes the vector)."""
        return vector[self.start : self.start + self.size].reshape(self.rows, self.cols)


def blocks(layout: Layout, whole: Indices) -> tuple[list[Block], Indices]:
    """The matrices of a model's flat vector that travel as factors, and the positions that
    travel dense: vectors and scalars, and every array ``whole`` touches (batch-norm
    buffers; every vector under ``whole-vectors``)."""
    touched = np.zeros(layout.size, dtype=bool)
    touched[whole] = True
    matrices: list[Block] = []
    dense: list[Indices] = []
    offset = 0
    for shape in layout.shapes:
        n = math.prod(shape)
        as_matrix = matrix_shape(shape)
        if as_matrix is None or touched[offset : offset + n].any():
            dense.append(np.arange(offset, offset + n, dtype=np.int64))
        else:
            matrices.append(Block(offset, *as_matrix))
        offset += n
    return matrices, np.concatenate(dense) if dense else np.zeros(0, dtype=np.int64)


def rank_for(ratio: float, rows: int, cols: int) -> int:
    """The rank whose two factors are at most ``ratio`` of the matrix (at least 1); at ratio
    1 (a dense round) the full rank, which sends the update whole."""
    if not 0.0 < ratio <= 1.0:
        raise ValueError(f"compression ratio must be in (0, 1], got {ratio}")
    if ratio == 1.0:
        return min(rows, cols)
    return max(1, min(rows, cols, math.floor(ratio * rows * cols / (rows + cols))))


def initial_q(cols: int, rank: int, seed: int) -> Matrix:
    """The first round's Q: standard normal, the same on every client for a seed."""
    rng = np.random.default_rng([seed, Q_SEED_STREAM, cols, rank])
    return rng.standard_normal((cols, rank)).astype(np.float32)


def first_factor(matrix: Matrix, q: Matrix) -> Matrix:
    """P_i = M_i Q."""
    return np.asarray(matrix @ q, dtype=np.float32)


def orthonormalise(p: Matrix) -> Matrix:
    """Orthonormal columns spanning ``p``'s: Gram-Schmidt in float64, each column taken twice
    against the ones before it ("twice is enough"). A column that is (up to float32's rounding
    of P) a combination of the ones before it becomes zero instead of a unit vector of rounding
    noise: an update's factors are often rank-deficient (a classifier's output rows sum to
    zero), and a noise column would not be orthogonal to the rest. P̂ P̂ᵀ stays a projection:
    onto the span of ``p`` less the directions below ``DEPENDENT_COLUMN`` of its largest."""
    out = np.array(p, dtype=np.float64)
    floor = DEPENDENT_COLUMN * float(np.linalg.norm(out, axis=0).max(initial=0.0))
    for i in range(out.shape[1]):
        column = out[:, i]
        for _ in range(2):
            column -= out[:, :i] @ (out[:, :i].T @ column)
        norm = float(np.linalg.norm(column))
        if norm <= floor or norm == 0.0:
            column[:] = 0.0
        else:
            column /= norm
    return out.astype(np.float32)


def second_factor(matrix: Matrix, p_hat: Matrix) -> Matrix:
    """Q_i = M_iᵀ P̂."""
    return np.asarray(matrix.T @ p_hat, dtype=np.float32)


def approximation(p_hat: Matrix, q: Matrix) -> Matrix:
    """P̂ Qᵀ: the aggregated Q gives the round's update, a client's own Q_i its share.

    Summed one rank at a time in float64 with elementwise operations, not a BLAS product: a
    product of two float32 is exact in float64 and the sum's order is fixed, so the server's
    model and every client's replica get the same float32 bits on any CPU."""
    out = np.zeros((p_hat.shape[0], q.shape[0]), dtype=np.float64)
    for column in range(p_hat.shape[1]):
        out += np.multiply.outer(p_hat[:, column].astype(np.float64), q[:, column])
    return out.astype(np.float32)


def residual(matrix: Matrix, p_hat: Matrix, own_q: Matrix) -> Matrix:
    """What the client's own approximation did not carry: M_i - P̂ Q_iᵀ."""
    return np.asarray(matrix - approximation(p_hat, own_q), dtype=np.float32)


@dataclass(frozen=True)
class FactorShape:
    """One round's factors over a model: its matrices with their ranks, and the positions sent
    dense. Factors travel flat, block after block, each row-major: P (rows x rank) in the
    first exchange, followed there by the dense positions' values; Q (cols x rank) in the
    second."""

    blocks: tuple[Block, ...]
    ranks: tuple[int, ...]
    dense: Indices
    size: int  # the model's length

    @classmethod
    def of(cls, matrices: list[Block], dense: Indices, size: int, ranks: list[int]) -> FactorShape:
        for block, rank in zip(matrices, ranks, strict=True):
            if not 1 <= rank <= min(block.rows, block.cols):
                raise ValueError(
                    f"rank {rank} of a {block.rows}x{block.cols} matrix is not in "
                    f"1..{min(block.rows, block.cols)}"
                )
        return cls(tuple(matrices), tuple(ranks), dense, size)

    @property
    def p_count(self) -> int:
        return sum(b.rows * r for b, r in zip(self.blocks, self.ranks, strict=True))

    @property
    def q_count(self) -> int:
        return sum(b.cols * r for b, r in zip(self.blocks, self.ranks, strict=True))

    def split_p(self, flat: NDArray[np.float32]) -> list[Matrix]:
        return self._split(flat, [b.rows for b in self.blocks])

    def split_q(self, flat: NDArray[np.float32]) -> list[Matrix]:
        return self._split(flat, [b.cols for b in self.blocks])

    def _split(self, flat: NDArray[np.float32], lengths: list[int]) -> list[Matrix]:
        out, offset = [], 0
        for length, rank in zip(lengths, self.ranks, strict=True):
            out.append(flat[offset : offset + length * rank].reshape(length, rank))
            offset += length * rank
        return out

    def to_table(self) -> NDArray[np.int64]:
        """(start, rows, cols, rank) per block: what a client keeps between the exchanges."""
        return np.array(
            [(b.start, b.rows, b.cols, r) for b, r in zip(self.blocks, self.ranks, strict=True)],
            dtype=np.int64,
        ).reshape(-1, 4)

    @classmethod
    def from_table(cls, table: NDArray[np.int64], size: int) -> FactorShape:
        matrices = [Block(int(start), int(rows), int(cols)) for start, rows, cols, _ in table]
        covered = np.zeros(size, dtype=bool)
        for block in matrices:
            covered[block.start : block.start + block.size] = True
        return cls.of(matrices, np.flatnonzero(~covered), size, [int(rank) for *_, rank in table])


def flat(matrices: list[Matrix]) -> NDArray[np.float32]:
    """Matrices laid end to end, each row-major."""
    if not matrices:
        return np.zeros(0, dtype=np.float32)
    return np.concatenate([m.astype(np.float32).ravel() for m in matrices])


FACTORED_P = "factored-p"
FACTORED_Q = "factored-q"


@dataclass(frozen=True)
class Factored:
    """A model update as factors: P̂ Qᵀ per matrix, values at the dense positions. PowerSGD's
    aggregate, and how it reaches the replicas (r (rows + cols) values a matrix instead of the
    rows x cols of the same update as a Sparse). ``to_sparse`` is the update, computed the same
    way on every machine (``approximation``)."""

    shape: FactorShape
    p: tuple[Matrix, ...]
    q: tuple[Matrix, ...]
    dense_values: NDArray[np.float32]

    def to_sparse(self) -> Sparse:
        values = np.zeros(self.shape.size, dtype=np.float32)
        for block, p, q in zip(self.shape.blocks, self.p, self.q, strict=True):
            block.of(values)[:] = approximation(p, q)
        values[self.shape.dense] = self.dense_values
        return Sparse(np.arange(self.shape.size, dtype=np.int64), values, self.shape.size)

    def to_record(self) -> ArrayRecord:
        return ArrayRecord(
            {
                FACTORED_TABLE: raw_array(self.shape.to_table().astype("<i8").ravel()),
                FACTORED_P: raw_array(flat(list(self.p)).astype("<f4")),
                FACTORED_Q: raw_array(flat(list(self.q)).astype("<f4")),
                VALUES: raw_array(self.dense_values.astype("<f4")),
            }
        )

    @staticmethod
    def is_record(record: ArrayRecord) -> bool:
        return FACTORED_TABLE in record

    @classmethod
    def from_record(cls, record: ArrayRecord, size: int) -> Factored:
        """Checked: blocks inside the model, in order, not overlapping, valid ranks, every
        count exact, every value finite. PayloadError or ValueError names what is wrong."""
        unknown = set(record) - {FACTORED_TABLE, FACTORED_P, FACTORED_Q, VALUES}
        if unknown:
            raise PayloadError(f"arrays nobody reads in factors: {', '.join(sorted(unknown))}")
        table = read_raw(record, FACTORED_TABLE, "int64").astype(np.int64)
        if table.size % 4:
            raise PayloadError(f"{FACTORED_TABLE} has {table.size} entries, not rows of 4")
        table = table.reshape(-1, 4)
        end = 0
        for start, rows, cols, _ in table:
            if start < end or rows < 1 or cols < 1 or start + rows * cols > size:
                raise PayloadError(
                    f"{FACTORED_TABLE}: a {rows}x{cols} block at {start} does not fit a model "
                    f"of {size} after position {end}"
                )
            end = int(start + rows * cols)
        shape = FactorShape.from_table(table, size)
        p = decode_values(ArrayRecord({VALUES: record[FACTORED_P]}), shape.p_count)
        q = decode_values(ArrayRecord({VALUES: record[FACTORED_Q]}), shape.q_count)
        dense = decode_values(record, shape.dense.size)
        return cls(shape, tuple(shape.split_p(p)), tuple(shape.split_q(q)), dense)
