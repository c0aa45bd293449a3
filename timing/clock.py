"""The virtual edge clock: the one place that turns bytes and work into seconds.

A round is a sequence of phases (one today; compression adds an index phase, streams add
waiting). Under timing = "measured" a client's times in a phase are the measured ones instead
of the models'. In a phase every participating client downloads, computes and uploads; the phase
ends when the slowest client is done (synchronous barrier), and the round takes the sum of
its phases. Transfers cost latency + bytes / bandwidth; a transfer of zero bytes costs nothing.
Compute costs steps x the device's step overhead + samples x the model's training FLOPs per
sample / the device's FLOP/s (timing/devices.py).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from state.fields import Fields
from timing.devices import MBPS, DeviceProfile
from timing.network import NetworkSchedule
from wire.tally import ClientWork


@dataclass(frozen=True)
class ClientTiming:
    download_s: float
    compute_s: float
    upload_s: float
    wait_s: float = 0.0
    train_s: float = 0.0  # measured only: local SGD, a part of compute_s

    @property
    def total_s(self) -> float:
        """Samples stream in while the model downloads: compute starts when both are done."""
        return max(self.download_s, self.wait_s) + self.compute_s + self.upload_s


@dataclass(frozen=True)
class PhaseTiming:
    name: str
    clients: Mapping[int, ClientTiming]
    exchange_s: float = 0.0  # a peer collective charged as a whole (ring or tree topology)
    wall_s: float | None = None  # measured: the server's push to last reply (or timeout)

    @property
    def duration_s(self) -> float:
        if self.wall_s is not None:
            return self.wall_s
        return max((t.total_s for t in self.clients.values()), default=0.0) + self.exchange_s

    @property
    def comm_s(self) -> float:
        """The phase's time with compute left out: its slowest transfers."""
        slowest = max((t.download_s + t.upload_s for t in self.clients.values()), default=0.0)
        return slowest + self.exchange_s


def transfer_s(
    num_bytes: int, bytes_per_s: float, latency_s: float, shared_s: float = 0.0
) -> float:
    """``shared_s``: the time the phase's bytes take through the server's shared link; a
    transfer ends no sooner than that (its path's slower stretch sets its pace)."""
    if num_bytes < 0:
        raise ValueError(f"a transfer cannot carry {num_bytes} bytes")
    return 0.0 if num_bytes == 0 else latency_s + max(num_bytes / bytes_per_s, shared_s)


@dataclass(frozen=True)
class ServerLink:
    """The server's own link in the star: a phase's downloads share its uplink, its uploads
    its downlink, and its latency adds to every transfer. Unlimited (inf, 0) by default."""

    uplink_bytes_per_s: float = math.inf
    downlink_bytes_per_s: float = math.inf
    latency_s: float = 0.0

    def __post_init__(self) -> None:
        for label, value in (
            ("uplink", self.uplink_bytes_per_s),
            ("downlink", self.downlink_bytes_per_s),
        ):
            if not value > 0:
                raise ValueError(f"the server's {label} must be > 0 (inf: unlimited), got {value}")
        if not (math.isfinite(self.latency_s) and self.latency_s >= 0):
            raise ValueError(f"the server's latency must be >= 0, got {self.latency_s}")

    @classmethod
    def from_mbps(cls, uplink_mbps: float, downlink_mbps: float, latency_ms: float) -> ServerLink:
        """0 Mbit/s: unlimited, as the run config says."""
        return cls(
            uplink_mbps * MBPS if uplink_mbps > 0 else math.inf,
            downlink_mbps * MBPS if downlink_mbps > 0 else math.inf,
            latency_ms / 1000.0,
        )

    def shared_s(self, works: Sequence[ClientWork]) -> tuple[float, float]:
        """Seconds the phase's downloads (sent on the server's uplink) and uploads (received
        on its downlink) take, all together, on the server's link; measured works aside."""
        down = sum(w.bytes_down for w in works if w.measured is None)
        up = sum(w.bytes_up for w in works if w.measured is None)
        return down / self.uplink_bytes_per_s, up / self.downlink_bytes_per_s


class VirtualClock:
    """Cumulative virtual time of a run, advanced one round at a time."""

    def __init__(
        self,
        profiles: Mapping[int, DeviceProfile],
        schedule: NetworkSchedule | None = None,
        *,
        flops_per_sample: float,
        server: ServerLink = ServerLink(),
    ) -> None:
        if not (math.isfinite(flops_per_sample) and flops_per_sample > 0):
            raise ValueError(f"training FLOPs per sample must be > 0, got {flops_per_sample}")
        self._devices = dict(profiles)
        self._profiles = dict(profiles)
        self._schedule = schedule
        self.flops_per_sample = flops_per_sample
        self.server = server
        self.now_s = 0.0

    STATE_SCHEMA = 1

    def state_dict(self) -> dict[str, object]:
        """The virtual time so far (each round's links come from the schedule, by round)."""
        return {"schema": self.STATE_SCHEMA, "now_s": self.now_s}

    def load_state_dict(self, state: object) -> None:
        fields = Fields("virtual clock", state, self.STATE_SCHEMA)
        self.now_s = fields.number("now_s", least=0.0)
        fields.done()

    def begin_round(self, server_round: int) -> None:
        """Apply the network schedule's links for ``server_round``."""
        if self._schedule is not None:
            self._profiles = self._schedule.profiles(server_round, self._devices)

    def profile(self, client: int) -> DeviceProfile:
        if client not in self._profiles:
            raise KeyError(f"no device profile for client {client}")
        return self._profiles[client]

    def client_timing(
        self, work: ClientWork, shared_s: tuple[float, float] = (0.0, 0.0)
    ) -> ClientTiming:
        """``shared_s``: the phase's downloads and uploads on the server's link (ServerLink)."""
        if work.measured is not None:
            # On a device the wait comes after the download, inside the busy time.
            m = work.measured
            return ClientTiming(
                download_s=m.download_s, compute_s=m.busy_s, upload_s=m.upload_s, train_s=m.train_s
            )
        p = self.profile(work.client)
        latency_s = p.latency_s + self.server.latency_s
        if not work.wait_s >= 0:
            raise ValueError(f"client {work.client}: wait must be >= 0 s, got {work.wait_s}")
        return ClientTiming(
            download_s=transfer_s(work.bytes_down, p.downlink_bytes_per_s, latency_s, shared_s[0]),
            compute_s=self.compute_s(work),
            upload_s=transfer_s(work.bytes_up, p.uplink_bytes_per_s, latency_s, shared_s[1]),
            wait_s=work.wait_s,
        )

    def compute_s(self, work: ClientWork) -> float:
        """The modelled compute of ``work`` on its client's device."""
        if work.samples < 0 or work.steps < 0:
            raise ValueError(
                f"client {work.client}: samples and steps must be >= 0, got {work.samples} "
                f"and {work.steps}"
            )
        return self.profile(work.client).compute_s(work.samples, work.steps, self.flops_per_sample)

    def phase(
        self, name: str, works: Sequence[ClientWork], wall_s: float | None = None
    ) -> PhaseTiming:
        """``wall_s``: the phase as measured by the server, which then is its duration (a
        round that waited for a node that never answered took that long)."""
        shared_s = self.server.shared_s(works)
        clients = {w.client: self.client_timing(w, shared_s) for w in works}
        return PhaseTiming(name=name, clients=clients, wall_s=wall_s)

    def peer_phases(self, works: Sequence[ClientWork], exchange_s: float) -> list[PhaseTiming]:
        """A round on a ring or tree: every client computes, then the peer exchange runs."""
        compute = {w.client: ClientTiming(0.0, self.compute_s(w), 0.0, w.wait_s) for w in works}
        return [PhaseTiming("compute", compute), PhaseTiming("exchange", {}, exchange_s)]

    def slowest_link(self, clients: Sequence[int]) -> tuple[float, float]:
        """(largest latency, smallest bandwidth in either direction) among ``clients``."""
        profiles = [self.profile(c) for c in clients]
        latency = max(p.latency_s for p in profiles)
        bandwidth = min(min(p.uplink_bytes_per_s, p.downlink_bytes_per_s) for p in profiles)
        return latency, bandwidth

    def advance(self, phases: Sequence[PhaseTiming]) -> float:
        """Add one round made of ``phases``; return its duration in seconds."""
        duration = sum(p.duration_s for p in phases)
        self.now_s += duration
        return duration
