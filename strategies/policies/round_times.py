"""Predicted round times per collective, from links estimated online (``collective = auto``
and the NSGA-II ratio schedule read them).

Every exchange's measured or modelled download and upload times feed a link estimator per
client; training phases give each client's compute time. Each collective predicts its own round
from them (``Collective.star_round_s``, ``peer_exchange_s``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

from collectives.base import Collective, Outlook
from collectives.program import Phase
from state.fields import Fields, int_keys
from timing.clock import PhaseTiming
from timing.link_estimator import DOWN, UP, LinkEstimate, LinkEstimator
from wire.fields import is_number

TRAIN_PHASE = "train"


class RoundTimes:
    def __init__(
        self,
        num_clients: int,
        size: int,
        topology: str,
        collectives: Mapping[str, Collective],
        values_nbytes: Callable[[int], int] = lambda count: 4 * count,
    ) -> None:
        self.num_clients = num_clients
        self.size = size
        self.topology = topology
        # the collectives predicted, by name (ties in a choice go to the first)
        self.collectives = dict(collectives)
        self.values_nbytes = values_nbytes  # the compressor's bytes for k values
        self.estimator = LinkEstimator(window=48)
        self.compute_s: dict[int, float] = {}  # last virtual compute time per client

    def links(self) -> list[LinkEstimate] | None:
        """Every client's estimated link, or None while one is unknown."""
        links = [self.estimator.estimate(c) for c in range(self.num_clients)]
        known = [link for link in links if link is not None]
        return known if len(known) == self.num_clients else None

    def slowest_compute_s(self) -> float:
        """The slowest client's last compute time (virtual), 0 before any round."""
        return max(self.compute_s.values(), default=0.0)

    def predict(self, ratio: float) -> dict[str, float] | None:
        """Each collective's predicted round time at ``ratio`` from the estimated links."""
        known = self.links()
        if known is None:
            return None
        compute = [self.compute_s.get(c, 0.0) for c in range(self.num_clients)]
        outlook = Outlook(known, compute, ratio, self.size, self.values_nbytes)
        return {
            name: collective.round_s(self.topology, outlook)
            for name, collective in self.collectives.items()
        }

    def observe(self, phases: Sequence[Phase], timings: Sequence[PhaseTiming]) -> None:
        """Each client's transfers in each exchange of the round just charged."""
        for phase, timing in zip(phases, timings, strict=True):
            for work in phase.works:
                t = timing.clients[work.client]
                self.estimator.observe(work.client, DOWN, work.bytes_down, t.download_s)
                self.estimator.observe(work.client, UP, work.bytes_up, t.upload_s)
                if phase.name == TRAIN_PHASE:
                    self.compute_s[work.client] = t.compute_s

    STATE_SCHEMA = 1

    def state_dict(self) -> dict[str, object]:
        return {
            "schema": self.STATE_SCHEMA,
            "estimator": self.estimator.state_dict(),
            "compute_s": int_keys(self.compute_s),
        }

    def load_state_dict(self, state: object) -> None:
        fields = Fields("round times", state, self.STATE_SCHEMA)
        self.estimator.load_state_dict(fields.raw("estimator"))
        self.compute_s = fields.int_map("compute_s", _seconds)
        fields.done()

    def estimated_links(self) -> dict[str, list[float]]:
        """Per client: [latency ms, uplink Mbit/s, downlink Mbit/s] as estimated now."""
        out = {}
        for client in range(self.num_clients):
            e = self.estimator.estimate(client)
            if e is not None:
                out[str(client)] = [
                    round(e.latency_s * 1e3, 4),
                    round(e.uplink_bytes_per_s * 8e-6, 4),
                    round(e.downlink_bytes_per_s * 8e-6, 4),
                ]
        return out


def _seconds(value: object) -> float:
    if not is_number(value) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{value!r} is not a number of seconds")
    return float(value)
