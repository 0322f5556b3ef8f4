"""TorchRL's signatures and messages kept by rl.modules: tensordict compatibility helpers,
the "_" spec key, QValue's strict_shape="auto", the OU wrapper's ``key``, the mixers'
``device``, MultiAgentNetBase's keyword checks and find_depth's message."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn

from rl.core import Bounded, Categorical, Composite, Unbounded
from rl.modules import (
    Conv3dNet,
    MultiAgentNetBase,
    OrnsteinUhlenbeckProcessWrapper,
    QMixer,
    QValueActor,
    SafeModule,
    VDNMixer,
    ensure_tensordict_compatible,
    is_tensordict_compatible,
)


class _TwoHeads(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(5, 4), nn.Linear(5, 3)

    def forward(self, x):
        return self.a(x), self.b(x)


class TestTensorDictCompatibility:
    def test_is_tensordict_compatible(self):
        assert is_tensordict_compatible(SafeModule(nn.Linear(3, 4), in_keys=["x"], out_keys=["y"]))
        assert not is_tensordict_compatible(nn.Linear(3, 4))

        class Keyed(nn.Module):
            in_keys, out_keys = ["x"], ["y"]

            def forward(self, td):
                return td

        assert is_tensordict_compatible(Keyed())

        class Ambiguous(Keyed):
            def forward(self, a, b):
                return a

        with pytest.raises(
            TypeError, match="Ambiguous defines in_keys/out_keys but its forward takes 2"
        ):
            is_tensordict_compatible(Ambiguous())

    def test_ensure_tensordict_compatible(self):
        module = SafeModule(_TwoHeads(), in_keys=["x"], out_keys=["a", "b"])
        assert ensure_tensordict_compatible(module) is module
        with pytest.raises(TypeError, match="does not match the expected in_keys"):
            ensure_tensordict_compatible(module, in_keys=["obs"])
        with pytest.raises(TypeError, match="does not match the expected out_keys"):
            ensure_tensordict_compatible(module, out_keys=["c"])
        with pytest.raises(TypeError, match="takes a TensorDictModule or an nn.Module"):
            ensure_tensordict_compatible(object())
        with pytest.raises(TypeError, match=r"must be the in_keys \['obs'\] one to one"):
            ensure_tensordict_compatible(_TwoHeads(), in_keys=["obs"])
        wrapped = ensure_tensordict_compatible(_TwoHeads(), in_keys=["x"], out_keys=["a", "b"])
        assert isinstance(wrapped, TensorDictModule)
        td = wrapped(TensorDict(x=torch.ones(2, 5), batch_size=[2]))
        assert td["a"].shape == (2, 4) and td["b"].shape == (2, 3)
        safe = ensure_tensordict_compatible(
            nn.Linear(2, 2),
            in_keys=["input"],
            out_keys=["y"],
            safe=True,
            wrapper_type=SafeModule,
            spec=Bounded(-0.1, 0.1, (2,)),
        )
        out = safe(TensorDict(input=torch.full((3, 2), 100.0), batch_size=[3]))
        assert out["y"].abs().max() <= 0.1


def test_spec_key_underscore_is_dropped_with_a_warning():
    spec = Composite(_=Unbounded((4,)), out_2=Unbounded((3,)))
    with pytest.warns(UserWarning, match='got a spec with key "_": it will be ignored'):
        module = SafeModule(_TwoHeads(), in_keys=["input"], out_keys=["_", "out_2"], spec=spec)
    assert set(module.spec.keys()) == {"out_2"}
    td = module(TensorDict(input=torch.randn(2, 5), batch_size=[2]))
    assert "_" not in td.keys() and td["out_2"].shape == (2, 3)


def test_qvalue_strict_shape_auto_reads_the_value_before_reshaping():
    torch.manual_seed(0)
    spec = Categorical(4, shape=(1, 1), dtype=torch.int64)
    net = TensorDictModule(nn.Linear(3, 4), in_keys=["observation"], out_keys=["action_value"])
    actor = QValueActor(module=net, spec=spec, strict_shape="auto")
    td = actor(TensorDict(observation=torch.randn(12, 3)))
    assert td["action"].shape == (12, 1)
    values = td["action_value"]
    torch.testing.assert_close(td["action"].squeeze(-1), values.argmax(-1))
    torch.testing.assert_close(td["chosen_action_value"], values.max(-1, keepdim=True).values)


class TestOUWrapperKey:
    def _policy(self):
        return SafeModule(
            nn.Linear(3, 2), in_keys=["observation"], out_keys=["act"], spec=Bounded(-1, 1, (2,))
        )

    def test_key_is_the_old_action_key(self):
        with pytest.warns(DeprecationWarning, match=r"key=\.\.\.\) is deprecated: use action_key"):
            wrapper = OrnsteinUhlenbeckProcessWrapper(self._policy(), key="act")
        td = TensorDict(
            observation=torch.randn(4, 3),
            is_init=torch.ones(4, 1, dtype=torch.bool),
            batch_size=[4],
        )
        out = wrapper(td)
        assert (out["_ou_steps"] == 1).all() and out["act"].shape == (4, 2)

    def test_key_and_action_key_conflict(self):
        with pytest.raises(ValueError, match="got key='act' and action_key='other'"):
            OrnsteinUhlenbeckProcessWrapper(self._policy(), key="act", action_key="other")


class TestMixersDevice:
    def test_device_is_required_and_used(self):
        with pytest.raises(TypeError):
            VDNMixer(3)
        with pytest.raises(TypeError):
            QMixer((5,), 8, 3)
        mixer = QMixer((5,), 8, 3, "cpu")
        assert mixer.hyper_w_1.weight.device == torch.device("cpu")
        mixer = QMixer((5,), 8, 3, None)
        assert mixer(torch.zeros(4, 3, 1), torch.zeros(4, 5)).shape == (4, 1)
        torch.testing.assert_close(VDNMixer(3, None)(torch.ones(2, 3, 1)), torch.full((2, 1), 3.0))


class _PerAgent(MultiAgentNetBase):
    def _build_single_net(self, **kwargs):
        return nn.Linear(4, 2)

    def _pre_forward_check(self, inputs):
        return inputs


class TestMultiAgentNetBaseKeywords:
    @pytest.mark.parametrize(
        "kwargs, match",
        [
            ({"share_params": True, "agent_dim": -2}, "needs centralized=True or False"),
            ({"centralized": False, "agent_dim": -2}, "needs share_params=True or False"),
            ({"centralized": False, "share_params": True}, "needs agent_dim"),
        ],
    )
    def test_missing_keywords(self, kwargs, match):
        with pytest.raises(TypeError, match=match):
            _PerAgent(n_agents=3, **kwargs)

    def test_british_spelling(self):
        net = _PerAgent(n_agents=3, centralised=False, share_params=False, agent_dim=-2)
        assert net.centralized is False
        assert net(torch.randn(5, 3, 4)).shape == (5, 3, 2)


def test_find_depth_message():
    with pytest.raises(ValueError, match="depth=None requires one of the input args"):
        Conv3dNet(in_features=5, num_cells=32, depth=None)
    # the depth comes from the last list given; the first field of another length is named
    with pytest.raises(
        ValueError, match="depth=2 and num_cells=1 length conflict, consider matching"
    ):
        Conv3dNet(in_features=5, num_cells=[32], kernel_sizes=[3, 3])


def test_ou_process_submodule_step():
    from rl.modules import OrnsteinUhlenbeckProcessModule

    module = OrnsteinUhlenbeckProcessModule(
        Bounded(-5, 5, (2,)), theta=0.5, mu=0.1, sigma=0.3, dt=0.04, x0=0.2
    )
    assert module.ou.steps_key == module.steps_key == "_ou_steps"
    noise, steps = torch.tensor([[0.05, -0.1]]), torch.tensor([3])
    torch.manual_seed(0)
    new, new_steps = module.ou.step(noise, steps)
    torch.manual_seed(0)
    prev = noise + 0.2
    expected = prev + 0.5 * (0.1 - prev) * 0.04 + 0.3 * 0.2 * torch.randn(1, 2)
    torch.testing.assert_close(new, expected)
    assert new_steps.tolist() == [4]
