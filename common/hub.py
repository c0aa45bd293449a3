"""Can a Hugging Face dataset be loaded here: the hub answers within seconds, or ``datasets``
holds a copy in its cache (what ``load_dataset`` falls back to when the hub cannot be
reached)? Asked before anything starts and again where the data is loaded."""

from __future__ import annotations

import threading

PROBE_TIMEOUT_S = 2.0  # a reachable hub answers a dataset_info request well within this


def _hub_error(name: str, timeout_s: float) -> str | None:
    """None when the hub describes ``name`` within ``timeout_s``; else why not. The probe
    runs in a daemon thread: a name lookup that hangs cannot hold the launcher."""
    import huggingface_hub

    outcome: list[str | None] = []

    def probe() -> None:
        try:
            huggingface_hub.HfApi().dataset_info(name, timeout=timeout_s)
            outcome.append(None)
        except Exception as exc:  # offline mode, DNS failure, refused, unknown repo
            outcome.append(f"{type(exc).__name__}: {exc}")

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(timeout_s + 0.5)
    return outcome[0] if outcome else f"no answer within {timeout_s:.0f} s"


def _cached(name: str) -> bool:
    """``datasets`` has a prepared copy of ``name`` in its cache (its own lookup)."""
    from datasets.load import CachedDatasetModuleFactory

    try:
        CachedDatasetModuleFactory(name).get_module()
    except Exception:  # not cached (FileNotFoundError), or a name its cache cannot hold
        return False
    return True


def hub_problem(name: str, timeout_s: float = PROBE_TIMEOUT_S) -> str | None:
    """None when dataset ``name`` can be loaded here; else a message naming ``dataset`` and
    what to do."""
    error = _hub_error(name, timeout_s)
    if error is None or _cached(name):
        return None
    return (
        f"dataset = {name!r} is not a local data set, so it comes from the Hugging Face Hub, "
        f"which cannot be reached ({error}) and has no copy in the datasets cache. Run once "
        "where the hub is reachable (the cache keeps it), use your own files (dataset = "
        '"npz:PATH", docs/data-and-models.md), or dataset = "digits", which ships with '
        "scikit-learn."
    )
