"""Reports a ratio policy may ask of clients, one line each: the instruction's key and its
parameter, the reply's metric and its check. The client computes them (client/reports.py,
one line each too); a policy names the kinds it asks for (strategies/policies/ratio.py)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

from wire.fields import is_number
from wire.keys import ADAPTIVE_RATIO, GAIN_GRID, REPORT_GAIN, RESIDUAL_SHARE

Report = list[float] | float  # a reply's report
Parameter = bool | float  # what the instruction asks with


def _gain_grid(value: Any) -> Report:
    if not isinstance(value, list) or not all(
        isinstance(g, float) and 0.0 < g <= 1.0 for g in value
    ):
        raise ValueError(f"{GAIN_GRID} must be numbers in (0, 1], got {value!r}")
    return [float(g) for g in value]


def _share(value: Any) -> Report:
    if not is_number(value) or not 0.0 <= value <= 1.0 or not math.isfinite(value):
        raise ValueError(f"{RESIDUAL_SHARE} {value!r} is not a number in [0, 1]")
    return float(value)


def _asked(value: Any) -> Parameter | None:
    """A yes/no request: True asks, False does not."""
    if not isinstance(value, bool):
        raise ValueError(f"{value!r} is not true or false")
    return True if value else None


def _ratio(value: Any) -> Parameter | None:
    """A request whose parameter is a compression ratio in (0, 1]."""
    if not is_number(value) or not 0.0 < value <= 1.0:
        raise ValueError(f"{value!r} is not a ratio in (0, 1]")
    return float(value)


@dataclass(frozen=True)
class ReportKind:
    request_key: str  # the instruction's key; its value is the kind's parameter
    parse_request: Callable[[Any], Parameter | None]  # None: the value does not ask
    reply_key: str  # the reply metric that carries the report
    parse_reply: Callable[[Any], Report]  # ValueError naming what is wrong
    # what the instruction says when the kind is not asked (None: nothing); the gain flag
    # has always gone with every compressed round, and records count its bytes
    unasked: bool | None = None


# kind (its reply key) -> how it travels
REPORT_KINDS: dict[str, ReportKind] = {
    GAIN_GRID: ReportKind(REPORT_GAIN, _asked, GAIN_GRID, _gain_grid, unasked=False),
    RESIDUAL_SHARE: ReportKind(ADAPTIVE_RATIO, _ratio, RESIDUAL_SHARE, _share),
}


def requests_to_config(reports: Mapping[str, Parameter], config: MutableMapping[str, Any]) -> None:
    """Write the asked reports (kind -> parameter) into an instruction's config."""
    for name, kind in REPORT_KINDS.items():
        if name in reports:
            config[kind.request_key] = reports[name]
        elif kind.unasked is not None:
            config[kind.request_key] = kind.unasked


def requests_from_config(config: Mapping[str, Any]) -> dict[str, Parameter]:
    """The reports an instruction asks for (kind -> parameter)."""
    asked = {}
    for name, kind in REPORT_KINDS.items():
        if kind.request_key in config:
            try:
                parameter = kind.parse_request(config[kind.request_key])
            except ValueError as err:
                raise ValueError(f"{kind.request_key}: {err}") from None
            if parameter is not None:
                asked[name] = parameter
    return asked


def reports_to_metrics(reports: Mapping[str, Report], metrics: MutableMapping[str, Any]) -> None:
    for name, value in reports.items():
        metrics[REPORT_KINDS[name].reply_key] = value


def reports_from_metrics(metrics: Mapping[str, Any]) -> dict[str, Report]:
    """A reply's reports, each checked."""
    return {
        name: kind.parse_reply(metrics[kind.reply_key])
        for name, kind in REPORT_KINDS.items()
        if kind.reply_key in metrics
    }
