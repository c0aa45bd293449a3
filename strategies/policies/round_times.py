"""Predicted round times per collective, from links estimated online (``collective = auto``
and the NSGA-II ratio schedule read them).

Every exchange's measured or modelled download and upload times feed a link estimator per
client; training phases give each client's compute time; Allgather rounds give the overlap of
the clients' index sets (the union the next delta carries).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from compress.topk import sent_count
from strategies.collectives.allgather import Allgather
from strategies.collectives.allreduce import Allreduce
from strategies.collectives.base import Phase
from strategies.collectives.cost import Link, peer_exchange_s
from timing.clock import PhaseTiming
from timing.link_estimator import DOWN, UP, LinkEstimate, LinkEstimator
from wire.codec import topk_count

TRAIN_PHASE = "train"


class RoundTimes:
    def __init__(
        self,
        num_clients: int,
        size: int,
        topology: str,
        values_nbytes: Callable[[int], int] = lambda count: 4 * count,
        always_sent: int = 0,
        one_phase_hints: float | None = None,
    ) -> None:
        self.num_clients = num_clients
        self.size = size
        self.topology = topology
        self.values_nbytes = values_nbytes  # the compressor's bytes for k values
        self.always_sent = always_sent  # entries sent beside the Top-k (the model's buffers)
        # Allreduce with a one-phase index policy: its hint share (None: the leader's phases)
        self.one_phase_hints = one_phase_hints
        self.estimator = LinkEstimator(window=48)
        self.compute_s: dict[int, float] = {}  # last virtual compute time per client
        self.union_fraction = 1.0  # last Allgather union size / (N·k)

    def links(self) -> list[LinkEstimate] | None:
        """Every client's estimated link, or None while one is unknown."""
        links = [self.estimator.estimate(c) for c in range(self.num_clients)]
        known = [link for link in links if link is not None]
        return known if len(known) == self.num_clients else None

    def slowest_compute_s(self) -> float:
        """The slowest client's last compute time (virtual), 0 before any round."""
        return max(self.compute_s.values(), default=0.0)

    def predict(self, ratio: float) -> tuple[float, float] | None:
        """Predicted round time (Allgather, Allreduce) at ``ratio`` from the estimated links."""
        known = self.links()
        if known is None:
            return None
        compute = [self.compute_s.get(c, 0.0) for c in range(self.num_clients)]
        k = sent_count(topk_count(self.size, ratio), self.size, self.always_sent)
        values_nbytes = self.values_nbytes(k)
        union = min(self.size, math.ceil(self.union_fraction * self.num_clients * k))
        if self.topology == "star":
            return (
                Allgather.predict_star_s(known, compute, k, union, self.size, values_nbytes),
                Allreduce.predict_star_s(
                    known, compute, k, self.size, values_nbytes, self.one_phase_hints
                ),
            )
        link = Link.from_bandwidth(  # the peer collectives see the slowest link
            max(e.latency_s for e in known),
            min(min(e.uplink_bytes_per_s, e.downlink_bytes_per_s) for e in known),
        )
        n, model_bytes, slowest = self.num_clients, 4 * self.size, max(compute)
        return (
            slowest + peer_exchange_s(self.topology, "allgather", n, model_bytes, ratio, link),
            slowest + peer_exchange_s(self.topology, "allreduce", n, model_bytes, ratio, link),
        )

    def observe(self, phases: Sequence[Phase], timings: Sequence[PhaseTiming]) -> None:
        """Each client's transfers in each exchange of the round just charged."""
        for phase, timing in zip(phases, timings, strict=True):
            for work in phase.works:
                t = timing.clients[work.client]
                self.estimator.observe(work.client, DOWN, work.bytes_down, t.download_s)
                self.estimator.observe(work.client, UP, work.bytes_up, t.upload_s)
                if phase.name == TRAIN_PHASE:
                    self.compute_s[work.client] = t.compute_s

    def observe_union(self, union: int, senders: int, k: int) -> None:
        """An Allgather round's union of index sets against N·k."""
        self.union_fraction = union / (senders * k)

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
