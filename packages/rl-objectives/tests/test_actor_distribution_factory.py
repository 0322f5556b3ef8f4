"""A ``distribution_class`` given as a factory (``functools.partial``), as TorchRL allows."""

import functools

import torch
from tensordict import TensorDict
from tensordict.nn import NormalParamExtractor, TensorDictModule

from rl.modules import ProbabilisticActor, TanhNormal


def test_partial_distribution_class_samples_within_its_bounds():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(3, 4), NormalParamExtractor())
    actor = ProbabilisticActor(
        TensorDictModule(net, ["obs"], ["loc", "scale"]),
        in_keys=["loc", "scale"],
        distribution_class=functools.partial(TanhNormal, low=-2.0, high=2.0),
        return_log_prob=True,
    )
    td = TensorDict(obs=torch.randn(64, 3), batch_size=[64])
    out = actor(td.clone())
    assert out["action"].shape == (64, 2) and out["action"].abs().max() <= 2.0
    dist = actor.get_dist(out)
    torch.testing.assert_close(out["action_log_prob"], dist.log_prob(out["action"]))
