"""client/local_model.py: one model per process, whose weights load in place."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pytest
import torch
from torch import nn

from client.local_model import _check_loads_in_place, local_model
from common.data import DIGITS_SPEC
from common.params import model_to_vector


class CopiedState(nn.Linear):
    """A module whose state dict hands out copies of its tensors."""

    def state_dict(self, *args: object, **kwargs: object) -> OrderedDict[str, torch.Tensor]:  # type: ignore[override]
        return OrderedDict((k, v.detach().clone()) for k, v in super().state_dict().items())


def test_a_process_keeps_one_model_per_name_spec_seed_and_device() -> None:
    first = local_model("mlp-bn", DIGITS_SPEC, 5, "cpu")
    assert local_model("mlp-bn", DIGITS_SPEC, 5, "cpu") is first
    assert local_model("mlp-bn", DIGITS_SPEC, 6, "cpu") is not first
    assert first.layout.size == model_to_vector(first.module).size
    with pytest.raises(ValueError):  # shared by every message: read-only
        first.buffers[0] = 0


def test_the_load_check_leaves_the_weights_as_they_were() -> None:
    model = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2))
    before = model_to_vector(model)
    _check_loads_in_place("ok", model)
    np.testing.assert_array_equal(model_to_vector(model), before)


def test_a_module_whose_state_dict_holds_copies_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="model = 'copied': its state_dict"):
        _check_loads_in_place("copied", CopiedState(3, 2))
