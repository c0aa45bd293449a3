"""A part's state read back, field by field: what ``load_state_dict`` checks before it takes
anything. Every refusal is a ``StateError`` naming the part and the field; a field the part
does not read is refused too (``done``), so a file cannot carry what nobody looks at.

Numbers and strings are checked by the wire package's field readers (wire/fields.py), the
same words as a refused message; arrays by dtype and shape.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import numpy as np
from numpy.typing import NDArray

from state.archive import StateError
from wire import fields

SCHEMA = "schema"
T = TypeVar("T")


def int_keys(mapping: Mapping[int, T]) -> dict[str, T]:
    """A mapping with integer keys (node ids, partitions) as state: JSON keys are strings."""
    return {str(k): v for k, v in mapping.items()}


class Fields:
    """The fields of one part's state: ``part`` names it in every refusal, ``schema`` is the
    version this code writes and reads."""

    def __init__(self, part: str, state: Any, schema: int) -> None:
        if not isinstance(state, Mapping):
            raise StateError(f"{part}: not a mapping of fields ({type(state).__name__})")
        self.part, self._state, self._taken = part, state, {SCHEMA}
        if state.get(SCHEMA) != schema:
            raise StateError(f"{part}: schema {state.get(SCHEMA)!r}, this edgeflex reads {schema}")

    def _get(self, key: str) -> Any:
        if key not in self._state:
            raise StateError(f"{self.part}: {key} is missing")
        self._taken.add(key)
        return self._state[key]

    def _checked(self, read: Callable[[], T]) -> T:
        try:
            return read()
        except ValueError as exc:
            raise StateError(f"{self.part}: {exc}") from None

    def raw(self, key: str) -> Any:
        """A field as it is (a nested part, for that part's own ``load_state_dict``)."""
        return self._get(key)

    def integer(self, key: str, least: int | None = None) -> int:
        value = self._get(key)
        return self._checked(lambda: fields.integer({key: value}, key, least=least))

    def number(self, key: str, least: float | None = None, finite: bool = True) -> float:
        value = self._get(key)
        if not finite and fields.is_number(value) and not math.isfinite(value):
            return float(value)
        return self._checked(lambda: fields.number({key: value}, key, least=least))

    def optional_number(self, key: str) -> float | None:
        return None if self._get(key) is None else self.number(key)

    def text(self, key: str) -> str:
        value = self._get(key)
        return self._checked(lambda: fields.text({key: value}, key, "a string"))

    def optional_text(self, key: str) -> str | None:
        return None if self._get(key) is None else self.text(key)

    def flag(self, key: str) -> bool:
        value = self._get(key)
        if not isinstance(value, bool):
            raise StateError(f"{self.part}: {key} {value!r} is not true or false")
        return value

    def numbers(self, key: str, finite: bool = True) -> list[float]:
        values = self._get(key)
        ok = isinstance(values, list) and all(fields.is_number(v) for v in values)
        if not ok or (finite and not all(math.isfinite(v) for v in values)):
            raise StateError(f"{self.part}: {key} is not a list of finite numbers")
        return [float(v) for v in values]

    def integers(self, key: str) -> list[int]:
        values = self._get(key)
        if not isinstance(values, list) or not all(fields.is_integer(v) for v in values):
            raise StateError(f"{self.part}: {key} is not a list of integers")
        return list(values)

    def int_map(self, key: str, value: Callable[[Any], T]) -> dict[int, T]:
        """A mapping written with ``int_keys``; ``value`` checks each value (raising
        ValueError or StateError naming what is wrong)."""
        mapping = self._get(key)
        if not isinstance(mapping, Mapping):
            raise StateError(f"{self.part}: {key} is not a mapping")
        out: dict[int, T] = {}
        for k, v in mapping.items():
            if not (isinstance(k, str) and k.lstrip("-").isdigit()):
                raise StateError(f"{self.part}: {key} has a key {k!r} that is no integer")
            try:
                out[int(k)] = value(v)
            except (ValueError, TypeError) as exc:
                raise StateError(f"{self.part}: {key}[{k}]: {exc}") from None
        return out

    def array(
        self, key: str, dtype: str, shape: tuple[int | None, ...] = (None,), copy: bool = True
    ) -> NDArray[Any]:
        """An array of ``dtype`` and ``shape`` (None: any length on that axis); a copy unless
        ``copy`` is False (an array read from a file is the reader's own)."""
        value = self._get(key)
        if not isinstance(value, np.ndarray):
            raise StateError(f"{self.part}: {key} is not an array")
        if value.dtype != np.dtype(dtype):
            raise StateError(f"{self.part}: {key} has dtype {value.dtype}, expected {dtype}")
        fits = len(value.shape) == len(shape) and all(
            want is None or have == want for have, want in zip(value.shape, shape, strict=True)
        )
        if not fits:
            raise StateError(f"{self.part}: {key} has shape {value.shape}, expected {shape}")
        return value.copy() if copy else value

    def optional_indices(self, key: str, size: int) -> NDArray[np.int64] | None:
        """Strictly ascending int64 positions in a vector of ``size`` entries, or None."""
        indices = self.optional_array(key, "int64")
        if indices is not None:
            inside = not indices.size or (indices[0] >= 0 and indices[-1] < size)
            if not inside or np.any(np.diff(indices) <= 0):
                raise StateError(f"{self.part}: {key} is not ascending indices in 0..{size - 1}")
        return indices

    def optional_array(
        self, key: str, dtype: str, shape: tuple[int | None, ...] = (None,)
    ) -> NDArray[Any] | None:
        return None if self._get(key) is None else self.array(key, dtype, shape)

    def done(self) -> None:
        """Refuse the fields nobody read."""
        extra = set(self._state) - self._taken
        if extra:
            raise StateError(f"{self.part}: entries nobody reads: {', '.join(sorted(extra))}")


class Stateless:
    """A part with nothing to keep between rounds: its state is its schema alone."""

    STATE_SCHEMA = 1

    def state_dict(self) -> dict[str, object]:
        return {SCHEMA: self.STATE_SCHEMA}

    def load_state_dict(self, state: object) -> None:
        Fields(type(self).__name__, state, self.STATE_SCHEMA).done()
