"""Synthetic(α, β): the FedProx paper's heterogeneous benchmark (Li et al., MLSys 2020, section
5.1, after Shamir et al. 2014), generated per client, seeded, with no download.

Client k draws u_k ~ N(0, α) and B_k ~ N(0, β) (α and β standard deviations, as in FedProx's
code); its model W_k (10 x 60) and b_k have entries ~ N(u_k, 1); its feature mean v_k has
entries ~ N(B_k, 1); x ~ N(v_k, Σ) with Σ diagonal, Σ_jj = j^-1.2; y = argmax(W_k x + b_k).
β sets how much the clients' data differ; α is meant to set how much their models do (below).
Client k has floor(lognormal(4, 2)) + 50 samples, as in FedProx's generator.

As published, α does not change the labels: W_k and b_k are u_k plus standard normals, which
adds u_k (sum(x) + 1) to every class's logit alike and leaves the argmax where it was (the
remaining standard-normal parts make the clients' models differ whatever α is). Data
heterogeneity comes from β and from each client's own draws.

Each client's numbers come from its own generator (seed, k): client k's data is the same in a
run of 10 clients as in a run of 1,000, and any one client is made without the others.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

NUM_FEATURES, NUM_CLASSES = 60, 10
SAMPLES_LOGNORMAL = (4.0, 2.0)  # mean and sigma of the log of a client's sample count
MIN_SAMPLES = 50
_FEATURE_STD = np.arange(1, NUM_FEATURES + 1, dtype=np.float64) ** -0.6  # sqrt(j^-1.2)


def client_samples(
    alpha: float, beta: float, seed: int, client: int
) -> tuple[NDArray[np.float32], NDArray[np.int64]]:
    """All of client ``client``'s samples: features (n, 60) float32 and labels (n,) int64."""
    if alpha < 0 or beta < 0:
        raise ValueError(f"synthetic alpha and beta must be >= 0, got {alpha} and {beta}")
    if client < 0:
        raise ValueError(f"client must be >= 0, got {client}")
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(client,)))
    model_mean, data_mean = rng.normal(0.0, alpha), rng.normal(0.0, beta)
    weights = rng.normal(model_mean, 1.0, (NUM_FEATURES, NUM_CLASSES))
    bias = rng.normal(model_mean, 1.0, NUM_CLASSES)
    feature_mean = rng.normal(data_mean, 1.0, NUM_FEATURES)
    count = int(rng.lognormal(*SAMPLES_LOGNORMAL)) + MIN_SAMPLES
    x = feature_mean + _FEATURE_STD * rng.standard_normal((count, NUM_FEATURES))
    y = np.argmax(x @ weights + bias, axis=1)  # softmax keeps the argmax
    return x.astype(np.float32), y.astype(np.int64)


def split_point(count: int, test_fraction: float) -> int:
    """How many of a client's ``count`` samples it trains on; the rest go to the server's test
    set (at least one each way)."""
    return min(max(1, round(count * (1.0 - test_fraction))), count - 1)
