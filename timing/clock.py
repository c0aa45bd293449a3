"""The virtual edge clock: the one place that turns bytes and work into seconds.

A round is a sequence of phases (one today; compression adds an index phase, streams add
waiting). Under timing = "measured" a client's times in a phase are the measured ones instead
of the models'. In a phase every participating client downloads, computes and uploads; the phase
ends when the slowest client is done (synchronous barrier), and the round takes the sum of
its phases. Transfers cost latency + bytes / bandwidth; a transfer of zero bytes costs nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from timing.devices import DeviceProfile
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


def transfer_s(num_bytes: int, bytes_per_s: float, latency_s: float) -> float:
    if num_bytes < 0:
        raise ValueError(f"a transfer cannot carry {num_bytes} bytes")
    return 0.0 if num_bytes == 0 else latency_s + num_bytes / bytes_per_s


class VirtualClock:
    """Cumulative virtual time of a run, advanced one round at a time."""

    def __init__(
        self, profiles: Mapping[int, DeviceProfile], schedule: NetworkSchedule | None = None
    ) -> None:
        self._devices = dict(profiles)
        self._profiles = dict(profiles)
        self._schedule = schedule
        self.now_s = 0.0

    def begin_round(self, server_round: int) -> None:
        """Apply the network schedule's links for ``server_round``."""
        if self._schedule is not None:
            self._profiles = self._schedule.profiles(server_round, self._devices)

    def profile(self, client: int) -> DeviceProfile:
        if client not in self._profiles:
            raise KeyError(f"no device profile for client {client}")
        return self._profiles[client]

    def client_timing(self, work: ClientWork) -> ClientTiming:
        if work.measured is not None:
            # On a device the wait comes after the download, inside the busy time.
            m = work.measured
            return ClientTiming(
                download_s=m.download_s, compute_s=m.busy_s, upload_s=m.upload_s, train_s=m.train_s
            )
        p = self.profile(work.client)
        if work.samples < 0:
            raise ValueError(f"client {work.client}: samples must be >= 0, got {work.samples}")
        if not work.wait_s >= 0:
            raise ValueError(f"client {work.client}: wait must be >= 0 s, got {work.wait_s}")
        return ClientTiming(
            download_s=transfer_s(work.bytes_down, p.downlink_bytes_per_s, p.latency_s),
            compute_s=work.samples / p.compute_samples_per_s,
            upload_s=transfer_s(work.bytes_up, p.uplink_bytes_per_s, p.latency_s),
            wait_s=work.wait_s,
        )

    def phase(
        self, name: str, works: Sequence[ClientWork], wall_s: float | None = None
    ) -> PhaseTiming:
        """``wall_s``: the phase as measured by the server, which then is its duration (a
        round that waited for a node that never answered took that long)."""
        clients = {w.client: self.client_timing(w) for w in works}
        return PhaseTiming(name=name, clients=clients, wall_s=wall_s)

    def peer_phases(self, works: Sequence[ClientWork], exchange_s: float) -> list[PhaseTiming]:
        """A round on a ring or tree: every client computes, then the peer exchange runs."""
        compute = {
            w.client: ClientTiming(
                0.0, w.samples / self.profile(w.client).compute_samples_per_s, 0.0, w.wait_s
            )
            for w in works
        }
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
