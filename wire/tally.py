"""What one client carried and took in one exchange: the tally the clock charges.

Plain data, built where replies are parsed (both halves of a collective) and read by the
server's ledger and clock.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MeasuredTimes:
    """One client's exchange in one phase as measured on the wall clock (timing = measured)."""

    download_s: float  # server push -> client handler start (SuperNode poll, ClientApp start)
    busy_s: float  # client handler start -> reply made (waits, training, compression)
    upload_s: float  # reply made -> server pulled it
    train_s: float = 0.0  # of busy_s: local SGD alone (training replies)


@dataclass(frozen=True)
class ClientWork:
    """What one client carried and computed in one phase."""

    client: int  # partition id
    bytes_down: int
    samples: int  # trained on in this phase, over all its steps
    bytes_up: int
    wait_s: float = 0.0  # streams: time spent waiting for samples, from the round's start
    measured: MeasuredTimes | None = None  # when set, the clock charges these times
    steps: int = 0  # local SGD steps in this phase
