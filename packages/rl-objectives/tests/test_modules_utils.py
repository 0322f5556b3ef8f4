"""rl.modules.utils (TorchRL's scale mappings) and the removed NormalParamWrapper."""

from __future__ import annotations

import collections
import math

import pytest
import torch
from tensordict.nn import NormalParamExtractor
from torch import nn

import rl.modules
from rl.modules import NormalParamWrapper
from rl.modules import distributions as dists
from rl.modules.utils import (
    OrderedDict,
    biased_softplus,
    get_env_transforms_from_module,
    get_primers_from_module,
    inv_softplus,
    mappings,
)


def softplus(x: float) -> float:
    return math.log1p(math.exp(x))


class TestScaleMappings:
    @pytest.mark.parametrize("bias", [0.5, 1.0, 3.0])
    def test_biased_softplus_returns_its_bias_at_zero(self, bias):
        out = biased_softplus(bias)(torch.zeros(4))
        torch.testing.assert_close(out, torch.full((4,), bias))

    def test_biased_softplus_against_a_hand_computation(self):
        # softplus(x + log(exp(bias - min_val) - 1)) + min_val, with bias 2, min_val 0.1
        x = torch.tensor([-3.0, 0.5, 4.0])
        shift = math.log(math.expm1(2.0 - 0.1))
        expected = torch.tensor([softplus(v + shift) + 0.1 for v in x.tolist()])
        torch.testing.assert_close(biased_softplus(2.0, min_val=0.1)(x), expected)
        # the output never goes below min_val
        assert biased_softplus(2.0, min_val=0.1)(torch.tensor(-1e4)).item() == pytest.approx(0.1)

    def test_inv_softplus_inverts_softplus(self):
        x = torch.tensor([0.01, 0.5, 1.0, 5.0])
        torch.testing.assert_close(nn.functional.softplus(inv_softplus(x)), x)
        # a float stays a float: log(e - 1) for 1.0
        assert isinstance(inv_softplus(1.0), float)
        assert inv_softplus(1.0) == pytest.approx(math.log(math.e - 1.0))

    @pytest.mark.parametrize(
        "key, bias, min_val",
        [("biased_softplus_1.0", 1.0, 0.01), ("biased_softplus_2.0_0.5", 2.0, 0.5)],
    )
    def test_mappings_parses_the_biased_softplus_keys(self, key, bias, min_val):
        fn = mappings(key)
        assert isinstance(fn, biased_softplus)
        assert fn.min_val == min_val
        torch.testing.assert_close(fn(torch.zeros(2)), torch.full((2,), bias))

    def test_mappings_named_functions(self):
        x = torch.tensor([-1.0, 0.0, 2.0])
        torch.testing.assert_close(mappings("exp")(x), x.exp())
        torch.testing.assert_close(mappings("softplus")(x), nn.functional.softplus(x))
        torch.testing.assert_close(mappings("relu")(x), torch.tensor([0.0, 0.0, 2.0]))

    def test_unknown_mapping_raises_with_the_key(self):
        with pytest.raises(NotImplementedError, match="Unknown mapping not_a_mapping"):
            mappings("not_a_mapping")

    def test_same_objects_as_tensordict_and_rl_modules(self):
        import tensordict.nn.utils as td_utils

        assert mappings is td_utils.mappings and biased_softplus is td_utils.biased_softplus
        assert OrderedDict is collections.OrderedDict
        assert get_primers_from_module is rl.modules.get_primers_from_module
        assert get_env_transforms_from_module is rl.modules.get_env_transforms_from_module


class TestNormalParamWrapper:
    def test_building_one_raises_and_names_the_replacement(self):
        with pytest.raises(
            RuntimeError, match=r"in favor of `tensordict\.nn\.NormalParamExtractor`"
        ):
            NormalParamWrapper(nn.Linear(3, 4))

    def test_the_message_carries_the_arguments_over(self):
        with pytest.raises(
            RuntimeError,
            match=r"NormalParamExtractor\(scale_mapping='exp', scale_lb=0\.001\)",
        ):
            NormalParamWrapper(nn.Linear(3, 4), scale_mapping="exp", scale_lb=1e-3)

    def test_exported_from_distributions_and_the_replacement_works(self):
        assert dists.NormalParamWrapper is NormalParamWrapper
        net = nn.Sequential(nn.Linear(3, 4), NormalParamExtractor(scale_mapping="exp"))
        torch.manual_seed(0)
        x = torch.randn(5, 3)
        loc, scale = net(x)
        raw = net[0](x)
        torch.testing.assert_close(loc, raw[:, :2])
        torch.testing.assert_close(scale, raw[:, 2:].exp())
