"""The field readers every wire parser uses: what they accept, and the words they refuse in
(the parsers' refusals, which logs and tests quote, come from here)."""

from __future__ import annotations

import math
import re
from typing import Any

import pytest
from flwr.app import ConfigRecord, RecordDict

from wire.fields import (
    all_or_none,
    config_record,
    flag,
    integer,
    metric_record,
    no_booleans,
    number,
    one_of,
    optional_integers,
    optional_number,
    text,
    within,
)


@pytest.mark.parametrize(
    ("value", "bounds", "message"),
    [
        (2.0, {}, "k 2.0 is not an integer"),
        (True, {}, "k True is not an integer"),
        (None, {}, "k None is not an integer"),
        (-1, {"least": 0}, "k -1 is not an integer >= 0"),
        (4, {"least": 0, "most": 3}, "k 4 is not an integer in 0..3"),
        (0, {"least": 1, "what": "a positive integer"}, "k 0 is not a positive integer"),
    ],
)
def test_integer_refuses_in_words_that_name_the_key_and_the_bounds(
    value: Any, bounds: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        integer({"k": value}, "k", **bounds)


def test_integer_and_number_return_what_they_accept() -> None:
    assert integer({"k": 3}, "k", least=0, most=3) == 3
    assert number({"k": 2}, "k") == 2.0 and isinstance(number({"k": 2}, "k"), float)
    assert optional_number({}, "k") is None and optional_number({"k": 0.5}, "k") == 0.5


@pytest.mark.parametrize(
    ("value", "bounds", "message"),
    [
        (math.nan, {}, "k nan is not a finite number"),
        (False, {}, "k False is not a finite number"),
        ("1", {}, "k '1' is not a finite number"),
        (0, {"above": 0}, "k 0 is not a finite number > 0"),
        (-0.5, {"least": 0}, "k -0.5 is not a finite number >= 0"),
        (math.inf, {"least": 0, "what": "a non-negative number"}, "k inf is not a non-negative"),
    ],
)
def test_number_refuses_what_is_not_finite_or_out_of_bounds(
    value: Any, bounds: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(message)}"):
        number({"k": value}, "k", **bounds)


def test_the_other_readers_name_the_key_and_what_it_should_be() -> None:
    assert optional_integers({}, "k") is None and optional_integers({"k": [1, 2]}, "k") == (1, 2)
    with pytest.raises(ValueError, match=r"^k \[1\.0\] is not a list of integers$"):
        optional_integers({"k": [1.0]}, "k")
    with pytest.raises(ValueError, match="^k '' is not a directory$"):
        text({"k": ""}, "k", what="a directory")
    assert one_of({"k": "b"}, "k", ("a", "b")) == "b"
    with pytest.raises(ValueError, match="^k 'c' is not one of a, b$"):
        one_of({"k": "c"}, "k", ("a", "b"))
    assert flag({"k": 1}, "k") is True and flag({"k": 0}, "k") is False
    with pytest.raises(ValueError, match="^k 2 is not 0 or 1$"):
        flag({"k": 2}, "k")
    with pytest.raises(ValueError, match=r"^k 6 is not in 0\.\.5$"):
        within("k", 6, 0, 5)
    with pytest.raises(ValueError, match="^a and b must be integers, not booleans$"):
        no_booleans({"a": 1, "b": True}, ("a", "b"), "integers")


def test_a_group_of_fields_comes_whole_or_not_at_all() -> None:
    assert all_or_none({"a": 1, "b": 2}, ("a", "b"), "g") is True
    assert all_or_none({}, ("a", "b"), "g") is False
    with pytest.raises(ValueError, match="^g incomplete: b missing$"):
        all_or_none({"a": 1}, ("a", "b"), "g")


def test_records_are_read_from_a_message_by_kind() -> None:
    content = RecordDict({"config": ConfigRecord({"x": 1})})
    assert config_record(content, "config")["x"] == 1
    with pytest.raises(ValueError, match="^missing MetricRecord 'config'$"):
        metric_record(content, "config")
