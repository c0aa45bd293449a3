"""``flower-superlink`` that counts the HTTP requests it serves, by path (for ``cpu_load``).

    python -m benchmarks.count_requests COUNTS_FILE [flower-superlink arguments]

Every 0.5 s the counts so far are written to COUNTS_FILE as JSON ({path: requests}). Flower
1.42's SuperLink serves one request per object of a message (its Message, RecordDict,
records, arrays and array chunks), so a round's requests, not its bytes, set its cost.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

WRITE_EVERY_S = 0.5

Scope = MutableMapping[str, Any]


def count_fastapi_requests(counts: Counter[str]) -> None:
    """Count every HTTP request a FastAPI app of this process serves, by path."""
    from fastapi import FastAPI

    serve = FastAPI.__call__

    async def counted(
        app: FastAPI, scope: Scope, receive: Callable[[], Awaitable[Any]], send: Any
    ) -> None:
        if scope.get("type") == "http":
            counts[str(scope.get("path"))] += 1
        await serve(app, scope, receive, send)

    FastAPI.__call__ = counted  # type: ignore[method-assign,assignment]


def _write_forever(counts: Counter[str], path: Path) -> None:
    while True:
        partial = path.with_suffix(".partial")
        partial.write_text(json.dumps(dict(counts)))
        partial.replace(path)  # a reader never sees half a file
        time.sleep(WRITE_EVERY_S)


def read_counts(path: Path) -> Counter[str]:
    return Counter(json.loads(path.read_text())) if path.exists() else Counter()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args:
        print(__doc__, file=sys.stderr)
        return 2
    counts: Counter[str] = Counter()
    count_fastapi_requests(counts)
    threading.Thread(target=_write_forever, args=(counts, Path(args[0])), daemon=True).start()
    from flwr.superlink.cli.flower_superlink import flower_superlink

    sys.argv = ["flower-superlink", *args[1:]]
    flower_superlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
