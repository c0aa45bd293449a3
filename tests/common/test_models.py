import numpy as np
import pytest
import torch

from common.data import DIGITS_SPEC, SYNTHETIC_SPEC
from common.models import MODELS, build_model, num_parameters
from common.params import model_to_vector, vector_to_model
from wire.layout import Layout

# The MNIST-1D paper's models are as small as published (tests/common/test_mnist1d.py).
DIGITS_MODELS = sorted(set(MODELS) - {"mlp100", "cnn1d", "cnn1d-bn", "cnn1d-gn"})


@pytest.mark.parametrize("name", DIGITS_MODELS)
def test_models_are_big_enough_for_communication_to_matter(name: str) -> None:
    model = build_model(name, DIGITS_SPEC, seed=0)
    assert num_parameters(model) >= 50_000
    assert model(torch.zeros(4, 64)).shape == (4, 10)


def test_the_large_mlp_has_resnet18s_size() -> None:
    parameters = num_parameters(build_model("mlp-11m", SYNTHETIC_SPEC, seed=0))
    assert 11_000_000 < parameters < 11_300_000  # ResNet-18 for CIFAR-10: 11.17 M


def test_same_seed_same_weights_and_global_rng_untouched() -> None:
    torch.manual_seed(123)
    expected_next = torch.rand(1)
    torch.manual_seed(123)
    a = model_to_vector(build_model("mlp", DIGITS_SPEC, seed=5))
    b = model_to_vector(build_model("mlp", DIGITS_SPEC, seed=5))
    c = model_to_vector(build_model("mlp", DIGITS_SPEC, seed=6))
    assert torch.rand(1) == expected_next
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


@pytest.mark.parametrize("name", DIGITS_MODELS)
def test_weights_are_those_torch_manual_seed_draws(name: str) -> None:
    """Only the CPU generator is seeded: the weights every record was made with."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(9)
        expected = model_to_vector(MODELS[name](DIGITS_SPEC))
    np.testing.assert_array_equal(model_to_vector(build_model(name, DIGITS_SPEC, seed=9)), expected)


def test_flatten_and_unflatten_round_trip() -> None:
    model = build_model("cnn", DIGITS_SPEC, seed=1)
    layout = Layout.of_model(model)
    vector = model_to_vector(model)
    assert vector.shape == (layout.size,)
    record = layout.unflatten(vector)
    np.testing.assert_array_equal(layout.flatten(record), vector)
    other = build_model("cnn", DIGITS_SPEC, seed=2)
    vector_to_model(other, vector)
    np.testing.assert_array_equal(model_to_vector(other), vector)


def test_unknown_model_is_named() -> None:
    with pytest.raises(ValueError, match="unknown model 'vit'; allowed: mlp, mlp-bn, cnn"):
        build_model("vit", DIGITS_SPEC, seed=0)


def test_batch_norm_statistics_travel_with_the_weights() -> None:
    """The running statistics are part of the flat vector, so clients and server share them."""
    model = build_model("mlp-bn", DIGITS_SPEC, seed=1)
    model.train()
    model(torch.randn(16, 64) * 3 + 1)  # moves running_mean / running_var / num_batches_tracked
    vector = model_to_vector(model)
    other = build_model("mlp-bn", DIGITS_SPEC, seed=1)
    vector_to_model(other, vector)
    for name, tensor in model.state_dict().items():
        torch.testing.assert_close(other.state_dict()[name], tensor, msg=name)
    assert int(other.state_dict()["2.num_batches_tracked"]) == 1
    layout = Layout.of_model(model)
    np.testing.assert_array_equal(layout.flatten(layout.unflatten(vector)), vector)
