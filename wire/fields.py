"""Typed readers of the fields of a received record, so that every parser of the wire package
checks a field one way and refuses it in the same words: ``"{key} {value!r} is not {what}"``
(a ``ValueError``), e.g. ``server-round 2.0 is not an integer``.

A bool is not a number here: Python's ``bool`` is an ``int``, and a ConfigRecord may carry
one where a number belongs. Imports only the standard library (Flower's record types are
annotations only), so that ``stream_samples`` can use the predicates and stay free of Flower.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeGuard

if TYPE_CHECKING:
    from flwr.app import ConfigRecord, MetricRecord, RecordDict

Record = Mapping[str, Any]  # a ConfigRecord, a MetricRecord, or a dict of their values


def is_integer(value: Any) -> TypeGuard[int]:
    """An int and not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> TypeGuard[int | float]:
    """An int or a float and not a bool; it may be infinite or NaN."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def _refusal(key: str, value: Any, what: str) -> ValueError:
    """The error of a field that is not ``what`` it should be."""
    return ValueError(f"{key} {value!r} is not {what}")


def config_record(content: RecordDict, key: str) -> ConfigRecord:
    """The ConfigRecord ``key`` of a message; ValueError when it has none."""
    if key not in content.config_records:
        raise ValueError(f"missing ConfigRecord {key!r}")
    return content.config_records[key]


def metric_record(content: RecordDict, key: str) -> MetricRecord:
    """The MetricRecord ``key`` of a message; ValueError when it has none."""
    if key not in content.metric_records:
        raise ValueError(f"missing MetricRecord {key!r}")
    return content.metric_records[key]


def _integer_words(least: int | None, most: int | None) -> str:
    if least is None:
        return "an integer" if most is None else f"an integer <= {most}"
    return f"an integer >= {least}" if most is None else f"an integer in {least}..{most}"


def integer(
    record: Record,
    key: str,
    *,
    least: int | None = None,
    most: int | None = None,
    what: str | None = None,
) -> int:
    """``record[key]``: an integer in ``least``..``most`` (either bound optional), refused
    when absent; ``what`` words the refusal instead of the bounds."""
    value = record.get(key)
    if (
        not is_integer(value)
        or (least is not None and value < least)
        or (most is not None and value > most)
    ):
        raise _refusal(key, value, what or _integer_words(least, most))
    return value


def _number_words(above: float | None, least: float | None) -> str:
    if above is not None:
        return f"a finite number > {above}"
    return "a finite number" if least is None else f"a finite number >= {least}"


def number(
    record: Record,
    key: str,
    *,
    above: float | None = None,
    least: float | None = None,
    what: str | None = None,
) -> float:
    """``record[key]`` as a float: a finite number ``> above`` or ``>= least`` (bounds
    optional), refused when absent; ``what`` words the refusal instead of the bounds."""
    value = record.get(key)
    if (
        not is_number(value)
        or not math.isfinite(value)
        or (above is not None and value <= above)
        or (least is not None and value < least)
    ):
        raise _refusal(key, value, what or _number_words(above, least))
    return float(value)


def optional_number(record: Record, key: str) -> float | None:
    """``record[key]`` as a finite float, or None when absent."""
    return number(record, key) if key in record else None


def optional_integers(record: Record, key: str) -> tuple[int, ...] | None:
    """``record[key]``: a list of integers, or None when absent. A list of bools passes (bool
    is an int): the instruction that carries one has always been read so."""
    value = record.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, int) for v in value):
        raise _refusal(key, value, "a list of integers")
    return tuple(value)


def text(record: Record, key: str, what: str = "a non-empty string") -> str:
    """``record[key]``: a non-empty string, refused when absent."""
    value = record.get(key)
    if not isinstance(value, str) or not value:
        raise _refusal(key, value, what)
    return value


def one_of(record: Record, key: str, choices: Sequence[str]) -> str:
    """``record[key]``: one of ``choices``, refused when absent."""
    value = record.get(key)
    if value not in choices:
        raise _refusal(key, value, f"one of {', '.join(choices)}")
    return str(value)


def flag(record: Record, key: str) -> bool:
    """``record[key]``: a yes/no a MetricRecord carries as 0 or 1 (it holds no bools)."""
    value = record.get(key)
    if value not in (0, 1) or isinstance(value, bool):
        raise _refusal(key, value, "0 or 1")
    return bool(value)


def within(key: str, value: int, least: int, most: int) -> int:
    """``value`` (read as an integer already) in ``least``..``most``: a refusal of its own,
    for what is an integer but out of range."""
    if not least <= value <= most:
        raise ValueError(f"{key} {value} is not in {least}..{most}")
    return value


def no_booleans(record: Record, keys: Sequence[str], kinds: str) -> None:
    """Refuse a bool in any of ``keys`` in one message (``kinds``: what they must be)."""
    if any(isinstance(record.get(key), bool) for key in keys):
        raise ValueError(f"{' and '.join(keys)} must be {kinds}, not booleans")


def all_or_none(record: Record, keys: Sequence[str], what: str) -> bool:
    """True if ``record`` has every key of a group that travels together (``what``), False if
    none; ValueError names the missing ones."""
    missing = [key for key in keys if key not in record]
    if len(missing) == len(keys):
        return False
    if missing:
        raise ValueError(f"{what} incomplete: {', '.join(sorted(missing))} missing")
    return True
