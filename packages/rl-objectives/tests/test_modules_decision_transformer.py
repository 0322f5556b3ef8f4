"""DecisionTransformer, DTActor, OnlineDTActor and DecisionTransformerInferenceWrapper:
shapes, the token layout against a hand-built sequence, causality, masking, errors."""

from __future__ import annotations

import math

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn

from rl.modules import (
    DecisionTransformer,
    DecisionTransformerInferenceWrapper,
    DTActor,
    OnlineDTActor,
    ProbabilisticActor,
    TanhDelta,
    TanhNormal,
    TensorDictSequential,
)

SMALL = DecisionTransformer.DTConfig(n_embd=16, n_layer=2, n_head=2, n_inner=32, n_positions=64)


def inputs(*batch: int, steps: int = 5, obs_dim: int = 3, act_dim: int = 2, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randn(*batch, steps, obs_dim, generator=g),
        torch.randn(*batch, steps, act_dim, generator=g),
        torch.randn(*batch, steps, 1, generator=g),
    )


class TestDecisionTransformer:
    @pytest.mark.parametrize("batch", [(), (4,), (2, 3)])
    def test_shape(self, batch):
        model = DecisionTransformer(3, 2, config=SMALL)
        assert model(*inputs(*batch)).shape == (*batch, 5, 16)

    def test_state_tokens_of_the_interleaved_sequence(self):
        torch.manual_seed(0)
        model = DecisionTransformer(3, 2, config=SMALL).eval()
        obs, act, rtg = inputs(4)
        tokens = []  # R_1, s_1, a_1, R_2, ... built one step at a time
        for t in range(5):
            tokens += [
                model.embed_return(rtg[:, t]),
                model.embed_state(obs[:, t]),
                model.embed_action(act[:, t]),
            ]
        sequence = model.embed_ln(torch.stack(tokens, 1))
        hidden = model.transformer(inputs_embeds=sequence).last_hidden_state
        torch.testing.assert_close(model(obs, act, rtg), hidden[:, 1::3])

    def test_causal(self):
        torch.manual_seed(0)
        model = DecisionTransformer(3, 2, config=SMALL).eval()
        obs, act, rtg = inputs(2)
        out = model(obs, act, rtg)
        act2 = act.clone()
        act2[:, 2] += 1.0  # a_2 comes after s_2: only later state tokens see it
        out2 = model(obs, act2, rtg)
        torch.testing.assert_close(out[:, :3], out2[:, :3])
        assert (out[:, 3:] - out2[:, 3:]).abs().max() > 1e-4
        rtg2 = rtg.clone()
        rtg2[:, 2] += 1.0  # R_2 comes before s_2
        assert (model(obs, act, rtg2)[:, 2] - out[:, 2]).abs().max() > 1e-4

    def test_config(self):
        assert DecisionTransformer.default_config() == DecisionTransformer.DTConfig()
        cfg = DecisionTransformer.DTConfig(n_embd=128)
        assert repr(cfg).startswith("DTConfig(n_embd: 128, n_layer: 4, n_head: 4, n_inner: 1024")
        model = DecisionTransformer(3, 2, config={"n_embd": 8, "n_layer": 1, "n_head": 2})
        gpt = model.transformer.config
        assert (gpt.n_embd, gpt.n_layer, gpt.n_head, gpt.n_inner) == (8, 1, 2, 1024)
        assert (gpt.activation_function, gpt.n_positions) == ("relu", 1024)
        assert model.hidden_size == 8

    def test_bad_config(self):
        with pytest.raises(TypeError, match="Config of type str is not supported"):
            DecisionTransformer(3, 4, config="some_str")
        with pytest.raises(
            TypeError, match=r"unknown DecisionTransformer config entries \['n_embed'\]"
        ):
            DecisionTransformer(3, 4, config={"n_embed": 8})

    def test_bad_inputs(self):
        model = DecisionTransformer(3, 2, config=SMALL)
        obs, act, rtg = inputs(4)
        with pytest.raises(
            ValueError, match=r"observation has shape \(4, 5, 4\), expected \[\*B, T, 3\]"
        ):
            model(torch.randn(4, 5, 4), act, rtg)
        with pytest.raises(ValueError, match=r"share their batch and time dimensions"):
            model(obs, act[:, :4], rtg)


class TestDTActors:
    @pytest.mark.parametrize("batch", [(), (3,), (3, 4)])
    def test_dt_actor(self, batch):
        actor = DTActor(3, 2, transformer_config=SMALL)
        assert actor(*inputs(*batch)).shape == (*batch, 5, 2)
        torch.testing.assert_close(actor.action_layer.bias, torch.zeros(2))
        w = actor.action_layer.weight  # orthogonal rows
        torch.testing.assert_close(w @ w.T, torch.eye(2), atol=1e-5, rtol=0)

    def test_default_config(self):
        cfg = DTActor.default_config()
        assert (cfg.n_embd, cfg.n_layer, cfg.n_head, cfg.n_inner) == (512, 4, 4, 2048)
        assert OnlineDTActor.default_config() == cfg

    @pytest.mark.parametrize("batch", [(), (3,)])
    def test_online_dt_actor(self, batch):
        torch.manual_seed(0)
        actor = OnlineDTActor(3, 2, transformer_config=SMALL).eval()
        obs, act, rtg = inputs(*batch)
        loc, scale = actor(obs, act, rtg)
        assert loc.shape == scale.shape == (*batch, 5, 2)
        hidden = actor.transformer(obs, act, rtg)
        torch.testing.assert_close(loc, actor.action_layer_mean(hidden))
        squashed = torch.tanh(actor.action_layer_logstd(hidden))
        torch.testing.assert_close(scale.log(), -5.0 + 3.5 * (squashed + 1))
        assert (scale > math.exp(-5.0)).all() and (scale < math.exp(2.0)).all()


class Recorder(nn.Module):
    """Stores what the policy sees; the action is the last observation's first entries."""

    def forward(self, obs, act, rtg):
        self.seen = (obs, act, rtg)
        return obs[..., :2]


def make_wrapper(action_key="action", context=3):
    net = Recorder()
    module = TensorDictModule(net, ["observation", action_key, "return_to_go"], ["param"])
    actor = ProbabilisticActor(
        module,
        in_keys=["param"],
        out_keys=[action_key],
        distribution_class=TanhDelta,
        distribution_kwargs={"low": -1.0, "high": 1.0},
    )
    return net, DecisionTransformerInferenceWrapper(actor, inference_context=context)


def sequences(steps=6):
    obs = torch.arange(1.0, steps + 1).view(1, steps, 1).expand(1, steps, 3).clone()
    act = torch.arange(1.0, steps + 1).view(1, steps, 1).expand(1, steps, 2).clone() * 10
    rtg = torch.arange(1.0, steps + 1).view(1, steps, 1) * 100
    return TensorDict(observation=obs, action=act, return_to_go=rtg, batch_size=[1])


class TestInferenceWrapper:
    def test_masking(self):
        net, policy = make_wrapper(context=3)
        td = sequences()
        before = td.clone()
        out = policy(td)
        obs, act, rtg = net.seen
        torch.testing.assert_close(obs[0, :, 0], torch.tensor([0.0, 0, 0, 4, 5, 6]))
        torch.testing.assert_close(rtg[0, :, 0], torch.tensor([0.0, 0, 0, 400, 500, 600]))
        # actions one step back, the last slot zero, the two before it kept
        torch.testing.assert_close(act[0, :, 0], torch.tensor([0.0, 0, 0, 50, 60, 0]))
        assert (td == before).all()  # the input is not modified
        torch.testing.assert_close(out["action"], torch.tanh(torch.full((1, 2), 6.0)))
        torch.testing.assert_close(out["return_to_go"], torch.tensor([[600.0]]))
        torch.testing.assert_close(out["observation"], before["observation"])
        assert out["param"].shape == (1, 6, 2)

    def test_context_longer_than_the_sequence(self):
        net, policy = make_wrapper(context=10)
        policy(sequences(4))
        obs, act, _ = net.seen
        torch.testing.assert_close(obs[0, :, 0], torch.tensor([1.0, 2, 3, 4]))
        torch.testing.assert_close(act[0, :, 0], torch.tensor([20.0, 30, 40, 0]))

    def test_time_in_the_batch_dims(self):
        _, policy = make_wrapper()
        td = sequences()
        td.batch_size = [1, 6]
        out = policy(td)
        assert out.batch_size == (1,)
        assert out["action"].shape == (1, 2)

    def test_keys(self):
        key = ("nested", "action")
        _, policy = make_wrapper(action_key=key)
        td = sequences().rename_key_("action", key)
        with pytest.raises(ValueError, match="The value of out_action_key"):
            policy(td)
        policy.set_tensor_keys(action=key, out_action=key)
        out = policy(td)
        assert out[key].shape == (1, 2)
        assert policy.in_keys == ["observation", key, "return_to_go"]
        assert policy.out_keys == sorted([key, "param", "observation", "return_to_go"], key=str)
        with pytest.raises(TypeError, match=r"unknown key name\(s\) \['obs'\]"):
            policy.set_tensor_keys(obs="x")

    def test_mismatched_sequences(self):
        _, policy = make_wrapper()
        td = sequences()
        td["return_to_go"] = td["return_to_go"][:, :5]
        with pytest.raises(ValueError, match="must share"):
            policy(td)
        with pytest.raises(ValueError, match="inference_context must be >= 1"):
            make_wrapper(context=0)

    def test_env_rollout(self):
        """In a rollout the wrapper runs (not the wrapped actor's tensor twin)."""
        from rl.core import tensor_policy
        from rl.envs import Compose, PendulumEnv, TransformedEnv
        from rl.envs.transforms import (
            CatFrames,
            TargetReturn,
            TensorDictPrimer,
            UnsqueezeTransform,
        )

        keys = ["observation_cat", "action_cat", "return_to_go_cat"]
        base = PendulumEnv()
        env = TransformedEnv(
            base,
            Compose(
                TargetReturn(-100.0, out_keys=["return_to_go"]),
                TensorDictPrimer(base.full_action_spec.clone()),
                UnsqueezeTransform(
                    -2, in_keys=["observation", "action", "return_to_go"], out_keys=keys
                ),
                CatFrames(N=4, dim=-2, in_keys=keys, padding="constant"),
            ),
        )
        inputs = [*keys[:2], "return_to_go_scaled"]
        module = TensorDictModule(DTActor(3, 1, transformer_config=SMALL), inputs, ["param"])
        actor = ProbabilisticActor(
            module,
            in_keys=["param"],
            distribution_class=TanhDelta,
            distribution_kwargs={"low": -2.0, "high": 2.0},
        )
        wrapper = DecisionTransformerInferenceWrapper(actor, inference_context=4)
        wrapper.set_tensor_keys(observation=keys[0], action=keys[1], return_to_go=inputs[2])
        assert tensor_policy(wrapper) is None
        # the wrapper writes the last return-to-go back at its key: a key of the policy's own,
        # as the rollout carries the env's "return_to_go_cat" at its [4, 1] shape
        scale = TensorDictModule(lambda r: r / 100, [keys[2]], [inputs[2]])
        rollout = env.rollout(5, TensorDictSequential(scale, wrapper))
        assert rollout["action"].shape == (5, 1)
        assert rollout["observation_cat"].shape == (5, 4, 3)

    @pytest.mark.parametrize("online", [True, False])
    def test_with_dt_actors(self, online):
        cls, dist, keys = (
            (OnlineDTActor, TanhNormal, ["loc", "scale"])
            if online
            else (DTActor, TanhDelta, ["param"])
        )
        module = TensorDictModule(
            cls(4, 2, transformer_config=SMALL), ["observation", "action", "return_to_go"], keys
        )
        actor = ProbabilisticActor(
            module,
            in_keys=keys,
            distribution_class=dist,
            distribution_kwargs={"low": -1.0, "high": 1.0},
        )
        td = TensorDict(
            observation=torch.randn(3, 20, 4),
            action=torch.randn(3, 20, 2),
            return_to_go=torch.randn(3, 20, 1),
            batch_size=[3],
        )
        out = DecisionTransformerInferenceWrapper(actor)(td)
        assert out["action"].shape == (3, 2) and out["action"].abs().max() <= 1
        assert out["return_to_go"].shape == (3, 1)
