"""Actors and value operators compile with ``torch.compile(fullgraph=True)`` and match eager.

The ``eager`` backend captures the whole graph with dynamo (a graph break fails
``fullgraph=True``) and runs it with the eager kernels, so random samples match under the
same seed (but a categorical's draw: compiled, it is Gumbel-max instead of multinomial);
the ``inductor`` cases also check the generated code, and are marked slow (the first
inductor compile takes a minute on a small CPU).
"""

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import NormalParamExtractor, TensorDictModule
from torch import nn

from rl.core import Categorical, ExplorationType, OneHot, set_exploration_type
from rl.modules import MLP, Actor, ProbabilisticActor, QValueActor, TanhNormal, ValueOperator


def _make(kind):
    torch.manual_seed(0)
    if kind == "actor":
        return Actor(MLP(in_features=4, out_features=2, num_cells=[8]))
    if kind == "value":
        return ValueOperator(MLP(in_features=4, out_features=1, num_cells=[8]))
    if kind == "qvalue_categorical":
        return QValueActor(MLP(in_features=4, out_features=3, num_cells=[8]), spec=Categorical(3))
    if kind == "qvalue_one_hot":
        return QValueActor(MLP(in_features=4, out_features=3, num_cells=[8]), spec=OneHot(3))
    if kind == "tanh_normal":
        net = nn.Sequential(
            MLP(in_features=4, out_features=4, num_cells=[8]), NormalParamExtractor()
        )
        return ProbabilisticActor(
            TensorDictModule(net, ["observation"], ["loc", "scale"]),
            in_keys=["loc", "scale"],
            distribution_class=TanhNormal,
            distribution_kwargs={"low": -2.0, "high": 2.0},
            return_log_prob=True,
        )
    if kind == "categorical":
        return ProbabilisticActor(
            TensorDictModule(
                MLP(in_features=4, out_features=3, num_cells=[8]), ["observation"], ["logits"]
            ),
            in_keys=["logits"],
            distribution_class=torch.distributions.Categorical,
            return_log_prob=True,
        )
    raise ValueError(kind)


def _check(kind, backend, mode):
    module = _make(kind)
    compiled = torch.compile(module, fullgraph=True, backend=backend)
    td = TensorDict(observation=torch.randn(5, 4), batch_size=[5])
    with set_exploration_type(mode):
        torch.manual_seed(1)
        ref = module(td.clone())
        torch.manual_seed(1)
        out = compiled(td.clone())
    assert set(out.keys(True, True)) == set(ref.keys(True, True))
    drawn = kind == "categorical" and mode == ExplorationType.RANDOM
    for key in ref.keys(True, True):
        if drawn and key != "logits":
            continue
        torch.testing.assert_close(out[key], ref[key])
    if drawn:
        # compiled, a categorical draws by Gumbel-max (another random stream than eager
        # multinomial): a valid action, scored by the same logits
        action = out["action"]
        assert action.shape == ref["action"].shape and action.dtype == ref["action"].dtype
        assert ((action >= 0) & (action < 3)).all()
        expected = out["logits"].log_softmax(-1).gather(-1, action.unsqueeze(-1)).squeeze(-1)
        torch.testing.assert_close(out["action_log_prob"], expected)


KINDS = ["actor", "value", "qvalue_categorical", "qvalue_one_hot", "tanh_normal", "categorical"]


CASES = [(kind, ExplorationType.DETERMINISTIC) for kind in KINDS] + [
    ("tanh_normal", ExplorationType.RANDOM),
    ("categorical", ExplorationType.RANDOM),
]


@pytest.mark.parametrize("kind,mode", CASES)
def test_fullgraph_matches_eager(kind, mode):
    torch._dynamo.reset()
    _check(kind, "eager", mode)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["actor", "tanh_normal", "categorical", "qvalue_categorical"])
def test_inductor_matches_eager(kind):
    torch._dynamo.reset()
    _check(kind, "inductor", ExplorationType.DETERMINISTIC)
