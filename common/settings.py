"""Typed run settings, parsed once from Flower's run config.

Every key is kebab-case in the run config and has its default in
``[tool.flwr.app.config]`` of ``pyproject.toml``. An unknown key, a missing key,
a value of the wrong type or outside its allowed range stops the run before any
training, with a message that names the key and what is allowed.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common.flower_patches import check_flower
from common.rates import check_stream_rates
from common.synthetic import NUM_FEATURES
from compress.state_store import STATE_STORES
from wire.stream_samples import parse_broker

PROJECT_ROOT = Path(__file__).resolve().parents[1]

# Allowed values of a key whose implementations sit in a table come from that table,
# named "module:NAME" and read when settings are checked (the tables' modules import this one).
TABLES = {
    "strategy": "server.build:COLLECTIVE_OF_STRATEGY",
    "collective": "server.build:COLLECTIVE_CHOICES",
    "leader": "strategies.collectives.allreduce:LEADERS",
    "index_policy": "strategies.collectives.allreduce:INDEX_POLICIES",
    "compressor": "compress:COMPRESSORS",
    "topology": "timing.cost:TOPOLOGIES",
    "cr_schedule": "strategies.policies.ratio:CR_SCHEDULES",
    "cr_selection": "strategies.policies.nsga2:SELECTIONS",
    "buffer_policy": "client.buffer:BUFFER_POLICIES",
    "batch_policy": "client.buffer:BATCH_POLICIES",
    "aggregation_weights": "strategies.policies.weights:WEIGHTS",
    "lr_scaling": "strategies.policies.lr:LR_SCALINGS",
    "partitioner": "common.data:PARTITIONERS",
    "model": "common.models:MODELS",
    "robust": "server.build:ROBUST",
    "server_optimizer": "strategies.policies.server_optimizer:SERVER_OPTIMIZERS",
    "batch_norm_statistics": "strategies.policies.statistics:STATISTICS",
}
TIMINGS = ("modelled", "measured")
# A value of a key that takes references: a callable named "package.module:attribute"
REFERENCE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


def _lookup(reference: str) -> Any:
    """``module:NAME``, imported when settings are checked."""
    module, attribute = reference.split(":")
    return getattr(importlib.import_module(module), attribute)


def table_names(field_name: str) -> tuple[str, ...]:
    """The names a table-backed key allows: the keys of its table."""
    return tuple(_lookup(TABLES[field_name]))


class ConfigError(ValueError):
    """A run-config key or value is not acceptable."""


def _spec(
    *,
    choices: tuple[str, ...] | None = None,
    table: bool = False,
    references: bool = False,
    minimum: float | None = None,
    maximum: float | None = None,
    exclusive_minimum: bool = False,
    exclusive_maximum: bool = False,
    doc: str = "",
) -> Any:
    return field(
        metadata={
            "choices": choices,
            "table": table,
            "references": references,
            "minimum": minimum,
            "maximum": maximum,
            "exclusive_minimum": exclusive_minimum,
            "exclusive_maximum": exclusive_maximum,
            "doc": doc,
        }
    )


@dataclass(frozen=True)
class Settings:
    """Resolved configuration of one run. Field ``foo_bar`` is run-config key ``foo-bar``."""

    num_clients: int = _spec(minimum=1, doc="number of clients (SuperNodes) in the run")
    num_server_rounds: int = _spec(minimum=1, doc="synchronous training rounds")
    virtual_time_budget_s: float = _spec(
        minimum=0.0,
        doc="stop after the first round that ends at or past this virtual time (0: off; "
        "num-server-rounds stays the cap)",
    )
    seed: int = _spec(minimum=0, doc="seed for data split, partitions, model init, batches")
    dataset: str = _spec(
        doc='"digits" (bundled), "mnist1d" (MNIST-1D, generated here), "synthetic" (FedProx\'s '
        "Synthetic(α, β), generated per client) or a Hugging Face dataset name"
    )
    synthetic_alpha: float = _spec(
        minimum=0.0,
        doc="synthetic: FedProx's α, the spread of the clients' model means (as published it "
        "changes no label)",
    )
    synthetic_beta: float = _spec(
        minimum=0.0, doc="synthetic: how much the clients' data differ (FedProx's β)"
    )
    synthetic_test_clients: int = _spec(
        minimum=0,
        doc="synthetic: the server's test split holds the held-out samples of the first this "
        "many clients (all when fewer; 0: all), so evaluation does not grow with the federation",
    )
    mnist1d_samples: int = _spec(
        minimum=100,
        doc="mnist1d: samples generated (80 % train, 20 % test); 5000 is the published split "
        "(4,000 / 1,000), 20000 gives a 4,000-sample test split",
    )
    test_fraction: float = _spec(
        minimum=0.0,
        maximum=1.0,
        exclusive_minimum=True,
        exclusive_maximum=True,
        doc="share of the data held out at the server for centralized evaluation",
    )
    validation_fraction: float = _spec(
        minimum=0.0,
        maximum=1.0,
        exclusive_maximum=True,
        doc="share of the training data the server keeps as a validation split, evaluated "
        "every round beside the test split (0: none)",
    )
    partitioner: str = _spec(table=True, doc="how training data is split over clients")
    dirichlet_alpha: float = _spec(
        minimum=0.0, exclusive_minimum=True, doc="concentration of the dirichlet partitioner"
    )
    labels_per_client: int = _spec(minimum=1, doc="labels per client for the labels partitioner")
    model: str = _spec(
        table=True,
        references=True,
        doc="model from the registry, or your own: package.module:factory (a callable given "
        "the data's DataSpec that returns an nn.Module)",
    )
    strategy: str = _spec(table=True, doc="aggregation strategy")
    collective: str = _spec(
        table=True,
        doc="topk: how compressed updates are exchanged (docs/methods.md, the collectives); auto "
        "chooses per round the one of auto-collectives with the shortest predicted round",
    )
    auto_collectives: str = _spec(
        doc="collective = auto: the collectives it chooses from, comma-separated, in the order "
        "its first rounds try each once"
    )
    leader: str = _spec(table=True, doc="topk allreduce: who picks the shared indices")
    index_policy: str = _spec(
        table=True,
        doc="topk allreduce: leader (three phases), or one phase: residual-hints (learns "
        "where the residuals are) or global (freezes; for reference)",
    )
    index_hints: float = _spec(
        minimum=0.0,
        maximum=1.0,
        doc="allreduce residual-hints: residual indices each client reports, as a share of k "
        "(0: none, the server's estimate alone)",
    )
    powersgd_rank: int = _spec(
        minimum=0,
        doc="powersgd: the rank of every matrix's factors (at most its smaller side; 0: from "
        "compression-ratio, r = floor(c x rows x cols / (rows + cols)), at least 1)",
    )
    compressor: str = _spec(
        table=True, doc="compressed collectives: how the selected values travel"
    )
    compression_ratio: float = _spec(
        minimum=0.0, maximum=1.0, exclusive_minimum=True, doc="topk: fraction of entries sent"
    )
    local_steps: int = _spec(minimum=1, doc="SGD steps per client per round")
    batch_size: int = _spec(minimum=1, doc="samples per local SGD step")
    learning_rate: float = _spec(minimum=0.0, exclusive_minimum=True, doc="client SGD step size")
    devices_file: str = _spec(doc="TOML file of device presets and mixes (relative to the app)")
    device_mix: str = _spec(doc="name of the device mix assigned across clients")
    cr_schedule: str = _spec(table=True, doc="topk: fixed ratio or NSGA-II schedule")
    cr_min: float = _spec(minimum=0.0, maximum=1.0, exclusive_minimum=True, doc="nsga2: lowest c")
    cr_max: float = _spec(minimum=0.0, maximum=1.0, exclusive_minimum=True, doc="nsga2: highest c")
    cr_warmup_rounds: int = _spec(minimum=0, doc="nsga2: rounds at compression-ratio first")
    cr_population: int = _spec(minimum=4, doc="nsga2: population size")
    cr_generations: int = _spec(minimum=1, doc="nsga2: generations")
    cr_selection: str = _spec(
        table=True,
        doc="nsga2: progress (least predicted time per unit of progress), or on the paper's "
        "efficiencies: ASF, ASF on the normalised front, or the knee",
    )
    cr_weight_time: float = _spec(
        minimum=0.0,
        maximum=1.0,
        exclusive_minimum=True,
        exclusive_maximum=True,
        doc="nsga2 asf: weight on time (the rest on gain)",
    )
    cr_ratio_ramp: float = _spec(
        minimum=0.0,
        doc="nsga2: the largest factor c may rise by from one round to the next (0: no limit; "
        "else at least 1); it falls at once",
    )
    cr_progress_exponent: float = _spec(
        minimum=0.0,
        doc="nsga2 progress: β, rounds to a target taken to scale as gain^−β "
        "(0: time alone; 1: progress in proportion to the gain)",
    )
    topology: str = _spec(
        table=True, doc="what the virtual clock charges: star (Flower), ring or tree"
    )
    networks_file: str = _spec(doc="TOML file of network presets (relative to the app)")
    network: str = _spec(doc="network preset: how links change over rounds")
    server_uplink_mbps: float = _spec(
        minimum=0.0, doc="star: the server's uplink, shared by a phase's downloads (0: unlimited)"
    )
    server_downlink_mbps: float = _spec(
        minimum=0.0, doc="star: the server's downlink, shared by a phase's uploads (0: unlimited)"
    )
    server_latency_ms: float = _spec(
        minimum=0.0, doc="star: latency of the server's link, added to every transfer's"
    )
    round_timeout_s: float = _spec(
        minimum=0.0, exclusive_minimum=True, doc="seconds to wait for replies in a round"
    )
    min_clients: int = _spec(
        minimum=0,
        doc="fewest connected clients a round starts with (0: all num-clients); a round "
        "aggregates the replies that came",
    )
    clients_per_round: int = _spec(
        minimum=0,
        doc="partitions sampled to train each round, seeded (0: every connected client); "
        "the others keep their error-feedback residuals",
    )
    timing: str = _spec(
        choices=TIMINGS,
        doc="modelled: the virtual clock from device and network models; measured: from the "
        "times clients and server measure (deployment)",
    )
    short_polls: bool = _spec(
        doc="deployment, flwr 1.42.x: the ServerApp pulls a reply's late objects again after "
        "10 ms, not Flower's 1 s (pair with edgeflex-supernode on the nodes)"
    )
    packed_messages: bool = _spec(
        doc="deployment: each message's content travels as one Flower object (wire/packing.py) "
        "when it is at most 4 MiB, not one object per record and array"
    )
    wake_broker: str = _spec(
        doc='deployment: "host:port" of an MQTT broker through which the ServerApp and '
        'edgeflex-agent processes wake each other when a message or reply is waiting; "": '
        "both poll"
    )
    results_dir: str = _spec(doc='where records go; "" means results/<timestamp>-<strategy>')
    checkpoint_every: int = _spec(
        minimum=0,
        doc="write a checkpoint (results-dir/checkpoint.npz) every this many rounds and after "
        "the last (0: never)",
    )
    resume_from: str = _spec(
        doc='continue the run whose checkpoint is in this directory (or file); "": start anew'
    )
    state_store: str = _spec(
        choices=STATE_STORES,
        doc="simulation: where clients keep their residuals and replicas between rounds: "
        "memory (Flower's contexts), disk (a file per client and vector, read in the rounds "
        "it trains) or auto (disk when all clients' could exceed a quarter of memory)",
    )
    state_store_dir: str = _spec(
        doc='state-store on disk: a directory (shared by every machine of a Ray cluster); "" '
        "means the temporary directory's edgeflex-state; each run uses and removes its own"
    )
    stream_rates: str = _spec(
        doc='streams: "off", S1, S2, S1-normal, S2-normal or a list "12, 40, 300" (samples/s)'
    )
    stream_rates_vary: bool = _spec(doc="streams: draw every client's rate anew each round")
    buffer_policy: str = _spec(table=True, doc="streams: keep or drop leftovers")
    buffer_capacity: int = _spec(minimum=0, doc="streams: most samples buffered (0: no limit)")
    batch_policy: str = _spec(
        table=True, doc="streams: fixed batch-size (waits) or rate-sized batches"
    )
    batch_min: int = _spec(minimum=1, doc="streams, rate batches: smallest batch")
    batch_max: int = _spec(minimum=1, doc="streams, rate batches: largest batch")
    aggregation_weights: str = _spec(
        table=True, doc="weights of client updates in the aggregate: examples, stream rate, equal"
    )
    lr_scaling: str = _spec(
        table=True, doc="linear: learning rate x (global batch / batch-size x clients)"
    )
    lr_scale_max: float = _spec(minimum=0.0, doc="linear lr scaling: largest factor (0: no cap)")
    injection_alpha: float = _spec(
        minimum=0.0, maximum=1.0, doc="data injection: share of clients that share; 0: off"
    )
    injection_beta: float = _spec(
        minimum=0.0, maximum=1.0, doc="data injection: share of its batch a sharer sends"
    )
    robust: str = _spec(
        table=True,
        doc="the defence against hostile clients: how updates are screened and combined "
        "(docs/methods.md, hostile clients)",
    )
    robust_clip: float = _spec(
        minimum=1.0,
        doc="robust = clip, clip-screen: the largest update norm, x the round's median norm",
    )
    robust_trim: float = _spec(
        minimum=0.0,
        maximum=0.5,
        exclusive_maximum=True,
        doc="robust = trimmed-mean: share of updates cut from each end, per coordinate",
    )
    server_optimizer: str = _spec(
        table=True,
        doc="what the server does with the aggregate: sgd (adds it, x server-learning-rate), "
        "fedavgm, fedadam or fedyogi (Reddi et al. 2021)",
    )
    batch_norm_statistics: str = _spec(
        table=True,
        doc="where the global model's batch-norm statistics come from: averaged (the clients' "
        "running statistics) or recomputed (by the server at the new weights, on the "
        "validation split)",
    )
    batch_norm_diagnosis: bool = _spec(
        doc="record, per round, test accuracy with batch-norm statistics recomputed on the "
        "validation split at the evaluated weights and at the previous round's weights"
    )
    server_learning_rate: float = _spec(
        minimum=0.0, exclusive_minimum=True, doc="η, the server optimizer's step size"
    )
    server_momentum: float = _spec(
        minimum=0.0, maximum=1.0, exclusive_maximum=True, doc="fedavgm: β of the momentum"
    )
    server_beta1: float = _spec(
        minimum=0.0,
        maximum=1.0,
        exclusive_maximum=True,
        doc="fedadam, fedyogi: decay of the first moment",
    )
    server_beta2: float = _spec(
        minimum=0.0,
        maximum=1.0,
        exclusive_maximum=True,
        doc="fedadam, fedyogi: decay of the second moment",
    )
    server_tau: float = _spec(
        minimum=0.0,
        exclusive_minimum=True,
        doc="fedadam, fedyogi: τ, added to the square root of the second moment",
    )
    topk_dense_vectors: bool = _spec(
        doc="compressed rounds send every array of at most one dimension (biases, norm scales "
        "and shifts) whole beside the Top-k, as they send the buffers"
    )
    sparsity_warmup_rounds: int = _spec(
        minimum=0,
        doc="the first N rounds compress less: round t sends ratio c^(t/(N+1)) of the ratio c "
        "the policy chose (Lin et al.'s DGC warm-up); 0 is off",
    )
    error_feedback_clip: float = _spec(
        minimum=0.0,
        doc="clients scale the compensated update e = update + residual to a norm of at most "
        "this x the update's (outside what is sent whole); 0 is off",
    )
    adaptive_delta: float = _spec(
        minimum=0.0,
        maximum=1.0,
        doc="topk: compress (c) when most residual shares are <= this, else dense; 0: off",
    )

    @classmethod
    def keys(cls) -> list[str]:
        return [_key(f.name) for f in dataclasses.fields(cls)]

    @classmethod
    def from_run_config(cls, run_config: Mapping[str, Any], *, tables: bool = True) -> Settings:
        """Validate ``run_config`` and return typed settings.

        ``tables = False`` skips the table-backed names (a ClientApp: the ServerApp checked
        the same run config before it sent anything, and several tables sit in server code).

        Raises
        ------
        ConfigError
            Naming the offending key and the allowed keys or values.
        """
        allowed = cls.keys()
        unknown = sorted(set(run_config) - set(allowed))
        if unknown:
            raise ConfigError(
                f"unknown run-config key(s) {', '.join(repr(k) for k in unknown)}; "
                f"allowed keys: {', '.join(allowed)}"
            )
        missing = [k for k in allowed if k not in run_config]
        if missing:
            raise ConfigError(f"missing run-config key(s): {', '.join(missing)}")
        values = {
            f.name: _check(f, run_config[_key(f.name)], tables) for f in dataclasses.fields(cls)
        }
        settings = cls(**values)
        settings._check_together(tables)
        return settings

    def _check_together(self, tables: bool) -> None:
        """Rules that involve more than one key (``tables``: also those the tables decide)."""
        try:
            check_stream_rates(self.stream_rates, self.num_clients)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        if tables:
            self._check_coordinates()
        if self.dataset == "synthetic" and self.partitioner != "iid":
            raise ConfigError(
                f"partitioner = {self.partitioner!r} splits a data set over the clients; "
                "dataset = 'synthetic' is generated per client (its heterogeneity: "
                "synthetic-alpha, synthetic-beta)"
            )
        if self.dataset == "synthetic" and self.validation_fraction > 0:
            raise ConfigError(
                "validation-fraction needs a data set split at the server; dataset = "
                "'synthetic' is generated per client"
            )
        if self.dataset == "synthetic" and self.model == "cnn":
            raise ConfigError(
                f"model = 'cnn' needs images; dataset = 'synthetic' has {NUM_FEATURES} features"
            )
        if self.cr_min >= self.cr_max:
            raise ConfigError(f"cr-min ({self.cr_min}) must be below cr-max ({self.cr_max})")
        if self.batch_min > self.batch_max:
            raise ConfigError(
                f"batch-min ({self.batch_min}) must not exceed batch-max ({self.batch_max})"
            )
        if (self.injection_alpha > 0) != (self.injection_beta > 0):
            raise ConfigError(
                "injection-alpha and injection-beta are both 0 (off) or both > 0, got "
                f"{self.injection_alpha} and {self.injection_beta}"
            )
        if self.adaptive_delta > 0 and (self.strategy != "topk" or self.cr_schedule != "fixed"):
            raise ConfigError(
                "adaptive-delta needs strategy = 'topk' with cr-schedule = 'fixed' "
                f"(got strategy = {self.strategy!r}, cr-schedule = {self.cr_schedule!r})"
            )
        if self.clients_per_round > self.num_clients:
            raise ConfigError(
                f"clients-per-round ({self.clients_per_round}) exceeds num-clients "
                f"({self.num_clients})"
            )
        if self.min_clients > self.num_clients:
            raise ConfigError(
                f"min-clients ({self.min_clients}) exceeds num-clients ({self.num_clients})"
            )
        low_rank = self.collective == "powersgd" or (
            self.collective == "auto" and "powersgd" in self.auto_collectives.split(",")
        )
        if low_rank and self.compressor != "topk":
            raise ConfigError(
                f"compressor = {self.compressor!r} encodes Top-k values; collective 'powersgd' "
                "sends its factors as float32 (compressor = 'topk')"
            )
        if low_rank and self.adaptive_delta > 0:
            raise ConfigError(
                "adaptive-delta votes on the residual share Top-k leaves; collective "
                "'powersgd' leaves another (adaptive-delta = 0 with it)"
            )
        if self.compressor != "topk" and self.topology != "star":
            raise ConfigError(
                f"topology = {self.topology!r} charges the papers' formulas for float32 values; "
                f"compressor = {self.compressor!r} can only be charged on the star topology"
            )
        needs_validation = self.batch_norm_diagnosis or self.batch_norm_statistics == "recomputed"
        if needs_validation and self.validation_fraction == 0:
            key = "batch-norm-diagnosis" if self.batch_norm_diagnosis else "batch-norm-statistics"
            raise ConfigError(
                f"{key}: recomputes statistics on the validation split, so it needs "
                "validation-fraction > 0"
            )
        if self.short_polls:
            try:
                check_flower()
            except ValueError as exc:
                raise ConfigError(f"short-polls: {exc}") from None
        if self.wake_broker:
            try:
                parse_broker(self.wake_broker)
            except ValueError as exc:
                raise ConfigError(f"wake-broker: {exc}") from None
        server_link = (self.server_uplink_mbps, self.server_downlink_mbps, self.server_latency_ms)
        if any(server_link) and (self.topology != "star" or self.timing == "measured"):
            raise ConfigError(
                "server-uplink-mbps, server-downlink-mbps and server-latency-ms model the "
                "server's link in the modelled star (topology = 'star', timing = 'modelled'); "
                f"got topology = {self.topology!r}, timing = {self.timing!r}"
            )
        if self.state_store_dir and not Path(self.state_store_dir).is_absolute():
            raise ConfigError(
                f"state-store-dir must be an absolute path (every process of a simulation "
                f"resolves it alike), got {self.state_store_dir!r}"
            )
        if self.timing == "measured" and self.topology != "star":
            raise ConfigError(
                f"timing = 'measured' measures Flower's star exchanges; topology = "
                f"{self.topology!r} can only be modelled"
            )
        largest = self.batch_size if self.batch_policy == "fixed" else self.batch_max
        if 0 < self.buffer_capacity < largest:
            raise ConfigError(
                f"buffer-capacity ({self.buffer_capacity}) is smaller than the largest batch "
                f"({largest}); use 0 (no limit) or at least {largest}"
            )

    def _check_coordinates(self) -> None:
        """A defence that combines coordinate by coordinate needs every client's values at the
        same coordinates: the defences and the collectives say which do."""
        coordinatewise = _lookup("strategies.policies.robust:COORDINATEWISE")
        aligned = _lookup("strategies.collectives:ALIGNED")
        compressed = self.strategy == "topk"
        if self.robust in coordinatewise and compressed and self.collective not in aligned:
            raise ConfigError(
                f"robust = {self.robust!r} combines updates coordinate by coordinate, which "
                "needs them at the same coordinates: strategy = 'dense' or collective = "
                f"{' or '.join(repr(n) for n in sorted(aligned & set(table_names('collective'))))} "
                f"(got collective = {self.collective!r}, whose index sets differ per client)"
            )

    def to_run_config(self) -> dict[str, Any]:
        return {_key(k): v for k, v in dataclasses.asdict(self).items()}


def _key(field_name: str) -> str:
    return field_name.replace("_", "-")


def _check(f: dataclasses.Field[Any], value: Any, tables: bool) -> Any:
    key = _key(f.name)
    meta = f.metadata
    if f.type in ("int", int):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key} must be an integer, got {value!r}")
    elif f.type in ("float", float):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{key} must be a number, got {value!r}")
        value = float(value)
        if not math.isfinite(value):
            raise ConfigError(f"{key} must be finite, got {value!r}")
    elif f.type in ("bool", bool):
        if not isinstance(value, bool):
            raise ConfigError(f"{key} must be true or false, got {value!r}")
    elif f.type in ("str", str) and not isinstance(value, str):
        raise ConfigError(f"{key} must be a string, got {value!r}")
    choices = meta["choices"]
    if meta["table"] and tables:
        choices = table_names(f.name)
    is_reference = meta["references"] and REFERENCE.match(value) is not None
    if choices is not None and value not in choices and not is_reference:
        also = ", or package.module:factory" if meta["references"] else ""
        raise ConfigError(
            f"{key} = {value!r} is not allowed; allowed values: {', '.join(choices)}{also}"
        )
    low, high = meta["minimum"], meta["maximum"]
    if low is not None and (value < low or (meta["exclusive_minimum"] and value == low)):
        bound = ">" if meta["exclusive_minimum"] else ">="
        raise ConfigError(f"{key} must be {bound} {low}, got {value!r}")
    if high is not None and (value > high or (meta["exclusive_maximum"] and value == high)):
        bound = "<" if meta["exclusive_maximum"] else "<="
        raise ConfigError(f"{key} must be {bound} {high}, got {value!r}")
    return value


def default_run_config(pyproject: Path = PROJECT_ROOT / "pyproject.toml") -> dict[str, Any]:
    """The defaults of ``[tool.flwr.app.config]`` (what ``flwr run`` starts from)."""
    with pyproject.open("rb") as fh:
        data = tomllib.load(fh)
    return dict(data["tool"]["flwr"]["app"]["config"])


def settings_with(**overrides: Any) -> Settings:
    """Defaults from pyproject with overrides given as Python names (for tests and scripts)."""
    config = default_run_config()
    config.update({_key(k): v for k, v in overrides.items()})
    return Settings.from_run_config(config)
