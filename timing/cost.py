"""Alpha-beta cost models of collectives, as small pure functions.

Symbols as in docs/methods.md (the cost models): N workers, a message of M bytes,
α latency (s), β = 1 / bandwidth (s per byte), log = log2, c the compression ratio. Each
function returns seconds. Each collective module keeps its own table of these by topology
(``peer_cost`` looks one up).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeVar

if TYPE_CHECKING:
    from common.settings import Settings


@dataclass(frozen=True)
class Link:
    """Latency α (s) and β = 1 / bandwidth (s per byte) of a link."""

    alpha_s: float
    beta_s_per_byte: float

    def __post_init__(self) -> None:
        if not (math.isfinite(self.alpha_s) and self.alpha_s >= 0):
            raise ValueError(f"latency must be >= 0, got {self.alpha_s}")
        if not (math.isfinite(self.beta_s_per_byte) and self.beta_s_per_byte > 0):
            raise ValueError(f"beta must be > 0, got {self.beta_s_per_byte}")

    @classmethod
    def from_bandwidth(cls, latency_s: float, bytes_per_s: float) -> Link:
        if not bytes_per_s > 0:
            raise ValueError(f"bandwidth must be > 0, got {bytes_per_s}")
        return cls(latency_s, 1.0 / bytes_per_s)


def _check(n: int, nbytes: float) -> None:
    if n < 1:
        raise ValueError(f"need at least one worker, got {n}")
    if nbytes < 0:
        raise ValueError(f"message size must be >= 0, got {nbytes}")


def star(n: int, nbytes: float, link: Link) -> float:
    """Parameter server / star: 2α + 2(N−1)·M·β."""
    _check(n, nbytes)
    return 2 * link.alpha_s + 2 * (n - 1) * nbytes * link.beta_s_per_byte


def ring_allreduce(n: int, nbytes: float, link: Link) -> float:
    """Ring allreduce: 2(N−1)α + 2·((N−1)/N)·M·β."""
    _check(n, nbytes)
    return 2 * (n - 1) * link.alpha_s + 2 * ((n - 1) / n) * nbytes * link.beta_s_per_byte


def tree_allreduce(n: int, nbytes: float, link: Link) -> float:
    """Tree allreduce: 2α·logN + 2·logN·M·β."""
    _check(n, nbytes)
    log_n = math.log2(n)
    return 2 * link.alpha_s * log_n + 2 * log_n * nbytes * link.beta_s_per_byte


def broadcast(n: int, nbytes: float, link: Link) -> float:
    """Broadcast: α·logN + logN·M·β."""
    _check(n, nbytes)
    log_n = math.log2(n)
    return link.alpha_s * log_n + log_n * nbytes * link.beta_s_per_byte


def allgather(n: int, nbytes: float, link: Link) -> float:
    """Allgather: α·logN + (N−1)·M·β."""
    _check(n, nbytes)
    return link.alpha_s * math.log2(n) + (n - 1) * nbytes * link.beta_s_per_byte


def allgather_topk(n: int, model_bytes: float, ratio: float, link: Link) -> float:
    """Allgather of Top-k values and indices: α·logN + 2·M·c·β·(N−1)."""
    _check(n, model_bytes)
    return link.alpha_s * math.log2(n) + 2 * model_bytes * ratio * link.beta_s_per_byte * (n - 1)


def dense_ring(n: int, model_bytes: float, ratio: float, link: Link) -> float:
    """A dense update over a ring: the ring allreduce of the model (c is not read)."""
    return ring_allreduce(n, model_bytes, link)


def dense_tree(n: int, model_bytes: float, ratio: float, link: Link) -> float:
    """A dense update over a tree: the tree allreduce of the model (c is not read)."""
    return tree_allreduce(n, model_bytes, link)


def artopk_ring(n: int, model_bytes: float, ratio: float, link: Link) -> float:
    """AR-Top-k over a ring: α·[2(N−1) + logN] + M·c·β·[2(N−1)/N + logN]."""
    _check(n, model_bytes)
    log_n = math.log2(n)
    return link.alpha_s * (2 * (n - 1) + log_n) + model_bytes * ratio * link.beta_s_per_byte * (
        2 * (n - 1) / n + log_n
    )


def artopk_tree(n: int, model_bytes: float, ratio: float, link: Link) -> float:
    """AR-Top-k over a tree: 3α·logN + 3·M·c·β·logN."""
    _check(n, model_bytes)
    log_n = math.log2(n)
    return 3 * link.alpha_s * log_n + 3 * model_bytes * ratio * link.beta_s_per_byte * log_n


# --- cross-overs: the first form wins while α/β is below the bound -------------------------


def ring_over_tree_bound(n: int, model_bytes: float, ratio: float) -> float:
    """AR-Top-k ring beats tree while α/β < [(logN − (N−1)/N) / (N−1−logN)]·M·c."""
    log_n = math.log2(n)
    return (log_n - (n - 1) / n) / (n - 1 - log_n) * model_bytes * ratio


def ring_over_allgather_bound(n: int, model_bytes: float, ratio: float) -> float:
    """AR-Top-k ring beats Allgather Top-k while α/β < [1 − 1/N − logN/(2(N−1))]·M·c."""
    return (1 - 1 / n - math.log2(n) / (2 * (n - 1))) * model_bytes * ratio


def tree_over_allgather_bound(n: int, model_bytes: float, ratio: float) -> float:
    """AR-Top-k tree beats Allgather Top-k while α/β < [(N−1)/logN − 3/2]·M·c."""
    return ((n - 1) / math.log2(n) - 1.5) * model_bytes * ratio


# --- this project's star-topology Top-k modes (what Flower carries physically) --------------

MESSAGE_OVERHEAD_BYTES = 200  # protobuf framing, config and metrics of one message (~150-250)


class LinkLike(Protocol):
    """Anything with a latency and two bandwidths (an estimate, a scheduled link)."""

    @property
    def latency_s(self) -> float: ...
    @property
    def uplink_bytes_per_s(self) -> float: ...
    @property
    def downlink_bytes_per_s(self) -> float: ...


# --- ring and tree topologies: the exchange as the paper's peer collectives would run it ------

STAR = "star"  # Flower's: every exchange through the server
RING, TREE = "ring", "tree"  # the papers' peer collectives
TOPOLOGIES = (STAR, RING, TREE)
PeerCost = Callable[[int, float, float, Link], float]  # (N, model bytes, c, link) -> seconds
DenseCost = Callable[[int, float, Link], float]  # (N, message bytes, link) -> seconds
Cost = TypeVar("Cost", PeerCost, DenseCost)


def peer_cost(costs: Mapping[str, Cost], topology: str, collective: str) -> Cost:
    """A collective's cost model on a ring or tree (``costs``: its own table by topology)."""
    if topology not in costs:
        raise ValueError(f"no peer cost model for topology {topology!r} and {collective!r}")
    return costs[topology]


def slowest_link(links: Sequence[LinkLike]) -> Link:
    """What a peer collective sees of estimated links: the longest latency, the least bandwidth
    either way."""
    return Link.from_bandwidth(
        max(e.latency_s for e in links),
        min(min(e.uplink_bytes_per_s, e.downlink_bytes_per_s) for e in links),
    )


def transfer_s(link: LinkLike, nbytes: float, up: bool) -> float:
    """latency + bytes / bandwidth, uplink or downlink."""
    rate = link.uplink_bytes_per_s if up else link.downlink_bytes_per_s
    return link.latency_s + nbytes / rate


def star_phase_s(
    links: Sequence[LinkLike],
    down_bytes: float,
    up_bytes: float,
    compute_s: Sequence[float] | None = None,
) -> float:
    """One exchange through Flower's star: each client's message down, its compute (none in a
    phase without training), its reply up; the slowest client ends the phase."""
    computes = [0.0] * len(links) if compute_s is None else compute_s
    return max(
        transfer_s(link, down_bytes, False) + c + transfer_s(link, up_bytes, True)
        for link, c in zip(links, computes, strict=True)
    )


def check(settings: Settings) -> list[str]:
    """What each topology can charge: the ring and the tree charge the papers' formulas (Top-k
    float32 values with their indices), and only the modelled star has a server link."""
    from compress import ENCODINGS, SELECTORS

    timing, compression = settings.timing, settings.compression
    errors = []
    if timing.topology != STAR:
        float32 = ENCODINGS[compression.encoding].from_settings(compression).values_nbytes(1) == 4
        if not float32 or SELECTORS[compression.selector].draws:
            errors.append(
                f"topology = {timing.topology!r} charges the papers' formulas for Top-k's "
                f"float32 values and indices; selector = {compression.selector!r} with "
                f"encoding = {compression.encoding!r} can only be charged on the star topology"
            )
    server_link = (timing.server_uplink_mbps, timing.server_downlink_mbps, timing.server_latency_ms)
    if any(server_link) and (timing.topology != STAR or timing.timing == "measured"):
        errors.append(
            "server-uplink-mbps, server-downlink-mbps and server-latency-ms model the server's "
            f"link in the modelled star (topology = {STAR!r}, timing = 'modelled'); got "
            f"topology = {timing.topology!r}, timing = {timing.timing!r}"
        )
    if timing.timing == "measured" and timing.topology != STAR:
        errors.append(
            f"timing = 'measured' measures Flower's star exchanges; topology = "
            f"{timing.topology!r} can only be modelled"
        )
    return errors
