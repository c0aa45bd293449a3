"""Keys of older run configs, and what replaced them: a config that still uses one is refused
with the new key and value, never silently read. These are the old names, kept only to say
what they became; no code reads them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

# the collective an old compressed run used when its config named none (the old default)
OLD_DEFAULT_COLLECTIVE = "allgather"
# compressor -> the encoding of its values (both selected by Top-k)
OLD_COMPRESSORS = {"topk": "float32", "topk-q8": "int8"}


def _strategy(value: Any, config: Mapping[str, Any]) -> str:
    collective = config.get("collective", "dense")
    if value == "dense":
        new = "collective = 'dense'"
    elif collective == "dense":  # the config named no collective: the old default ran
        new = f"collective = {OLD_DEFAULT_COLLECTIVE!r}"
    else:
        new = f"collective = {collective!r} alone"
    return f"strategy is gone: collective names the exchange; for strategy = {value!r} use {new}"


def _compressor(value: Any, config: Mapping[str, Any]) -> str:
    encoding = OLD_COMPRESSORS.get(value)
    new = f"encoding = {encoding!r}" if encoding else "selector and encoding"
    return (
        f"compressor is gone: selector (which coordinates) and encoding (how values travel) "
        f"replace it; for compressor = {value!r} use {new} with selector = 'topk'"
    )


def _whole_vectors(value: Any, config: Mapping[str, Any]) -> str:
    return f"topk-dense-vectors is now whole-vectors (whole-vectors = {value!r})"


RENAMED_KEYS: dict[str, Callable[[Any, Mapping[str, Any]], str]] = {
    "strategy": _strategy,
    "compressor": _compressor,
    "topk-dense-vectors": _whole_vectors,
}


def upgraded(config: Mapping[str, Any]) -> dict[str, Any]:
    """An older run's recorded config in today's keys (what tables of old runs read)."""
    new = {k: v for k, v in config.items() if k not in RENAMED_KEYS}
    if "strategy" in config:
        dense = config["strategy"] == "dense"
        new["collective"] = "dense" if dense else config.get("collective", OLD_DEFAULT_COLLECTIVE)
    if "compressor" in config:
        new["encoding"] = OLD_COMPRESSORS.get(config["compressor"], config["compressor"])
    if "topk-dense-vectors" in config:
        new["whole-vectors"] = config["topk-dense-vectors"]
    return new
