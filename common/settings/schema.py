"""The run's settings as typed sections: what each key is, its type, bounds and meaning.

A run config is flat kebab-case keys, as Flower users type them; each key is a field of one
section (``num-clients`` is ``settings.run.num_clients``). Defaults live in
``[tool.flwr.app.config]`` of pyproject.toml only. Rules between keys that name no plug-in
are validators here; a rule about a plug-in lives with it (``common/settings/load.py``).
"""

from __future__ import annotations

import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from common.rates import check_stream_rates
from wire.stream_samples import parse_broker


class Section(BaseModel):
    # strict: 1.5 is not an integer, "true" not a bool; an int is a number
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, allow_inf_nan=False)


def key(field_name: str) -> str:
    return field_name.replace("_", "-")


def rule(ok: bool, message: str) -> None:
    if not ok:
        raise ValueError(message)


class Run(Section):
    """How long, on how many clients, and where the records go."""

    num_clients: int = Field(ge=1, description="number of clients (SuperNodes) in the run")
    num_server_rounds: int = Field(ge=1, description="synchronous training rounds")
    virtual_time_budget_s: float = Field(ge=0, description="stop at this virtual time (0: off)")
    seed: int = Field(ge=0, description="seed for data split, partitions, model init, batches")
    min_clients: int = Field(ge=0, description="fewest clients a round starts with (0: all)")
    clients_per_round: int = Field(ge=0, description="clients sampled a round, seeded (0: all)")
    round_timeout_s: float = Field(gt=0, description="seconds to wait for replies in a round")
    results_dir: str = Field(description='where records go; "": results/<timestamp>-<collective>')
    checkpoint_every: int = Field(ge=0, description="checkpoint every N rounds, the last (0: no)")
    resume_from: str = Field(description='continue the run checkpointed in this directory ("": no)')

    @model_validator(mode="after")
    def _at_most_all_clients(self) -> Run:
        for name in ("clients_per_round", "min_clients"):
            value = getattr(self, name)
            rule(
                value <= self.num_clients,
                f"{key(name)} ({value}) exceeds num-clients ({self.num_clients})",
            )
        return self


class Data(Section):
    """What clients train on and how it is split; data injection against non-IID data."""

    dataset: str = Field(
        description='"digits" (bundled), "mnist1d" (generated), "synthetic" (FedProx\'s, per '
        'client), "npz:PATH" and the other local files, or a Hugging Face dataset name'
    )
    synthetic_alpha: float = Field(ge=0, description="synthetic: FedProx's α, model-mean spread")
    synthetic_beta: float = Field(ge=0, description="synthetic: how much clients' data differ (β)")
    synthetic_test_clients: int = Field(ge=0, description="synthetic: test on N clients' (0: all)")
    mnist1d_samples: int = Field(ge=100, description="mnist1d: samples generated (80 % train)")
    test_fraction: float = Field(gt=0, lt=1, description="share held out for server evaluation")
    validation_fraction: float = Field(ge=0, lt=1, description="training data the server keeps")
    partitioner: str = Field(description="how training data is split over clients")
    dirichlet_alpha: float = Field(gt=0, description="concentration of the dirichlet partitioner")
    labels_per_client: int = Field(ge=1, description="labels per client, labels partitioner")
    injection_alpha: float = Field(ge=0, le=1, description="injection: share of clients sharing")
    injection_beta: float = Field(ge=0, le=1, description="injection: share of a sharer's batch")

    @model_validator(mode="after")
    def _injection_on_or_off(self) -> Data:
        on = (self.injection_alpha > 0, self.injection_beta > 0)
        rule(
            on[0] == on[1],
            "injection-alpha and injection-beta are both 0 (off) or both > 0, "
            f"got {self.injection_alpha} and {self.injection_beta}",
        )
        return self


class Training(Section):
    """The model, each client's local SGD, and the server's step."""

    model: str = Field(description="from the registry, or your own: package.module:factory")
    device: str = Field(
        description="where clients train: auto takes CUDA, then MPS, else the CPU; an edge "
        "agent takes its own --device instead"
    )
    local_steps: int = Field(ge=1, description="SGD steps per client per round")
    batch_size: int = Field(ge=1, description="samples per local SGD step")
    learning_rate: float = Field(gt=0, description="client SGD step size")
    lr_scaling: str = Field(description="linear: lr x global batch / (batch-size x clients)")
    lr_scale_max: float = Field(ge=0, description="linear lr scaling: largest factor (0: no cap)")
    server_optimizer: str = Field(description="what the server does with the aggregate")
    server_learning_rate: float = Field(gt=0, description="η, the server optimizer's step size")
    server_momentum: float = Field(ge=0, lt=1, description="fedavgm: β of the momentum")
    server_beta1: float = Field(ge=0, lt=1, description="adaptive optimizers: first-moment decay")
    server_beta2: float = Field(ge=0, lt=1, description="adaptive optimizers: second-moment decay")
    server_tau: float = Field(gt=0, description="adaptive optimizers: τ, added to √(second moment)")
    batch_norm_statistics: str = Field(description="where global batch-norm statistics come from")
    batch_norm_diagnosis: bool = Field(description="record accuracy at recomputed statistics")


class Compression(Section):
    """What a compressed client sends: which coordinates, how their values travel, and what
    error feedback keeps."""

    selector: str = Field(description="which coordinates a client sends (docs/methods.md)")
    encoding: str = Field(description="how the sent values travel")
    qsgd_levels: int = Field(ge=1, description="qsgd: s, levels per sign (2s + 1 in all)")
    qsgd_bucket: int = Field(ge=0, description="qsgd: values per norm (0: one norm a message)")
    compression_ratio: float = Field(gt=0, le=1, description="c, the share of entries sent")
    error_feedback_clip: float = Field(ge=0, description="||e|| <= this x ||update|| (0: off)")
    whole_vectors: bool = Field(description="send the 1-D arrays whole, as the buffers are")


class Collective(Section):
    """How compressed updates are exchanged and combined."""

    collective: str = Field(description="the exchange of every round, or auto: chosen per round")
    auto_collectives: str = Field(description="auto: its candidates, comma-separated, in order")
    leader: str = Field(description="allreduce: who picks the shared indices")
    index_policy: str = Field(description="allreduce: where a shared Top-k index set comes from")
    index_hints: float = Field(
        ge=0, le=1, description="residual-hints: indices a client reports, x k"
    )
    powersgd_rank: int = Field(ge=0, description="powersgd: factors' rank (0: from the ratio)")
    aggregation_weights: str = Field(description="weights of client updates in the aggregate")


class Ratio(Section):
    """Each round's compression ratio."""

    cr_schedule: str = Field(description="fixed ratio or the NSGA-II schedule")
    cr_min: float = Field(gt=0, le=1, description="nsga2: lowest c")
    cr_max: float = Field(gt=0, le=1, description="nsga2: highest c")
    cr_warmup_rounds: int = Field(ge=0, description="nsga2: rounds at compression-ratio first")
    cr_population: int = Field(ge=4, description="nsga2: population size")
    cr_generations: int = Field(ge=1, description="nsga2: generations")
    cr_selection: str = Field(description="nsga2: how a point is chosen from the front")
    cr_weight_time: float = Field(gt=0, lt=1, description="nsga2 asf: weight on time")
    cr_progress_exponent: float = Field(ge=0, description="nsga2 progress: β, rounds as gain^−β")
    cr_ratio_ramp: float = Field(
        ge=0, description="nsga2: most c grows by in a round, x (0: no cap)"
    )
    adaptive_delta: float = Field(
        ge=0, le=1, description="ScaDLES: compress if most residual shares <= δ (0: off)"
    )
    sparsity_warmup_rounds: int = Field(
        ge=0, description="DGC's warm-up: round t <= N sends c^(t/(N+1))"
    )

    @model_validator(mode="after")
    def _range(self) -> Ratio:
        rule(
            self.cr_min < self.cr_max,
            f"cr-min ({self.cr_min}) must be below cr-max ({self.cr_max})",
        )
        ramp = self.cr_ratio_ramp
        rule(ramp == 0 or ramp >= 1, f"cr-ratio-ramp must be 0 (no limit) or >= 1, got {ramp}")
        return self


class Streams(Section):
    """ScaDLES' streaming clients."""

    stream_rates: str = Field(description='"off", S1, S2, S1-normal, S2-normal or "12, 40, 300"')
    stream_rates_vary: bool = Field(description="draw every client's rate anew each round")
    buffer_policy: str = Field(description="keep or drop leftovers")
    buffer_capacity: int = Field(ge=0, description="most samples buffered (0: no limit)")
    batch_policy: str = Field(description="fixed batch-size (waits) or rate-sized batches")
    batch_min: int = Field(ge=1, description="rate batches: smallest batch")
    batch_max: int = Field(ge=1, description="rate batches: largest batch")

    @model_validator(mode="after")
    def _batches(self) -> Streams:
        rule(
            self.batch_min <= self.batch_max,
            f"batch-min ({self.batch_min}) must not exceed batch-max ({self.batch_max})",
        )
        return self


class Timing(Section):
    """What the virtual clock charges: devices, links, and their shape."""

    devices_file: str = Field(description="TOML file of device presets and mixes")
    device_mix: str = Field(description="the device mix assigned across clients")
    networks_file: str = Field(description="TOML file of network presets")
    network: str = Field(description="network preset: how links change over rounds")
    topology: str = Field(description="what the clock charges: Flower's star, a ring or a tree")
    server_uplink_mbps: float = Field(ge=0, description="star: the server's uplink (0: unlimited)")
    server_downlink_mbps: float = Field(ge=0, description="star: its downlink (0: unlimited)")
    server_latency_ms: float = Field(ge=0, description="star: latency added to every transfer")
    timing: Literal["modelled", "measured"] = Field(
        description="modelled (virtual clock) or measured (deployment)"
    )


class Deployment(Section):
    """Processes, messages and clients' kept state."""

    short_polls: bool = Field(description="pull a reply's late objects after 10 ms (flwr 1.42)")
    packed_messages: bool = Field(description="a message's content as one Flower object (<= 4 MiB)")
    wake_broker: str = Field(description='"host:port" of an MQTT broker for wake-ups ("": poll)')
    state_store: str = Field(description="where simulated clients keep their vectors")
    state_store_dir: str = Field(description='the state store\'s absolute directory ("": temp dir)')

    @model_validator(mode="after")
    def _usable(self) -> Deployment:
        try:
            if self.wake_broker:
                parse_broker(self.wake_broker)
        except ValueError as exc:
            raise ValueError(f"wake-broker: {exc}") from None
        rule(
            not self.state_store_dir or Path(self.state_store_dir).is_absolute(),
            "state-store-dir must be an absolute path (every process of a simulation resolves "
            f"it alike), got {self.state_store_dir!r}",
        )
        return self


class Trust(Section):
    """The defence against hostile clients."""

    robust: str = Field(description="how updates are screened and combined")
    robust_clip: float = Field(ge=1, description="clip: the largest norm, x the round's median")
    robust_trim: float = Field(ge=0, lt=0.5, description="trimmed-mean: share cut from each end")


class Settings(Section):
    """Resolved configuration of one run, by section; ``from_run_config`` checks a flat one."""

    run: Run
    data: Data
    training: Training
    compression: Compression
    collective: Collective
    ratio: Ratio
    streams: Streams
    timing: Timing
    deployment: Deployment
    trust: Trust

    @model_validator(mode="after")
    def _across_sections(self) -> Settings:
        check_stream_rates(self.streams.stream_rates, self.run.num_clients)
        if self.training.batch_norm_diagnosis:
            rule(
                self.data.validation_fraction > 0,
                "batch-norm-diagnosis: recomputes statistics "
                "on the validation split, so it needs validation-fraction > 0",
            )
        return self

    @classmethod
    def from_run_config(cls, run_config: Mapping[str, Any], *, tables: bool = True) -> Settings:
        """Validate ``run_config`` (common/settings/load.py); ConfigError names every fault."""
        from common.settings.load import parse

        return parse(run_config, tables=tables)

    @classmethod
    def keys(cls) -> list[str]:
        """Every run-config key, kebab-case, in the schema's order."""
        return [key(name) for name in SECTION_OF]

    def to_run_config(self) -> dict[str, Any]:
        """The flat run config of these settings, kebab-case keys in the schema's order."""
        return {
            key(name): value for part in self.model_dump().values() for name, value in part.items()
        }


# field -> the section that holds it, in the schema's order
SECTION_OF = {
    name: section
    for section, info in Settings.model_fields.items()
    for name in typing.cast(type[BaseModel], info.annotation).model_fields
}
