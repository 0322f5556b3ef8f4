"""WorldModelEnv and ImaginedEnv: imagined rollouts through the ordinary env API."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule, TensorDictSequential

from rl.core import Composite, Unbounded
from rl.envs import ImaginedEnv, PendulumEnv, WorldModelEnv, check_env_specs


class LinearWorldModel:
    """latent' = latent + action, reward = -|latent'|; optionally done once latent' > 2.

    Rl-envs does not depend on rl.modules: anything with a ``step_module`` works.
    """

    def __init__(self, done_above=None):
        def dynamics(latent, action):
            return latent + action

        def reward(latent):
            return -latent.abs().sum(-1, keepdim=True)

        mods = [
            TensorDictModule(dynamics, ["latent", "action"], [("next", "latent")]),
            TensorDictModule(reward, [("next", "latent")], [("next", "reward")]),
        ]
        if done_above is not None:
            mods.append(
                TensorDictModule(
                    lambda z: (z > done_above).any(-1, keepdim=True),
                    [("next", "latent")],
                    [("next", "done")],
                )
            )
        self.step_module = TensorDictSequential(*mods)


def latent_env(done_above=None, batch_size=()):
    return WorldModelEnv(
        LinearWorldModel(done_above),
        PendulumEnv(),  # action [1] in [-2, 2], reward [1], done flags
        observation_spec=Composite(latent=Unbounded((1,))),
        batch_size=batch_size,
    )


class TestWorldModelEnv:
    def test_rollout_follows_the_model(self):
        env = latent_env()
        start = TensorDict(latent=torch.tensor([[0.5], [-1.0]]), batch_size=[2])
        actions = iter([0.25, -0.5, 1.0])

        def policy(td):
            return td.set("action", torch.full((2, 1), next(actions)))

        out = env.rollout(3, policy, tensordict=start)
        assert out.batch_size == (2, 3)
        # a plain loop of the same model
        z, rewards = start["latent"].clone(), []
        for a in (0.25, -0.5, 1.0):
            z = z + a
            rewards.append(-z.abs())
        torch.testing.assert_close(out["next", "latent"][:, -1], z)
        torch.testing.assert_close(out["next", "reward"], torch.stack(rewards, 1))
        assert not out["next", "done"].any()

    def test_specs_from_base_env(self):
        env = latent_env(batch_size=[4])
        assert env.batch_size == (4,)
        assert env.action_spec.shape == (4, 1)
        assert env.reward_spec.shape == (4, 1)
        assert set(env.observation_spec.keys()) == {"latent"}
        env_default = WorldModelEnv(LinearWorldModel(), PendulumEnv())
        assert env_default.batch_size == (1,)  # an unbatched base env gives [1], as TorchRL
        assert set(env_default.observation_spec.keys()) == {"observation"}

    def test_check_env_specs(self):
        env = latent_env(batch_size=[3])
        env.reset = lambda td=None, **kw: WorldModelEnv.reset(
            env, TensorDict(latent=torch.zeros(3, 1), batch_size=[3]) if td is None else td
        )
        check_env_specs(env)

    def test_done_head_stops_rollout(self):
        env = latent_env(done_above=1.2)
        start = TensorDict(latent=torch.zeros(1, 1), batch_size=[1])
        out = env.rollout(
            10, lambda td: td.set("action", torch.full((1, 1), 0.5)), tensordict=start
        )
        assert out.shape == (1, 3)  # 0.5, 1.0, 1.5 > 1.2
        assert out["next", "done"][0, -1].item()

    def test_takes_extra_leading_dims(self):
        # planners roll out [*B, N] candidates through an unbatched model env
        env = latent_env()
        start = TensorDict(latent=torch.zeros(2, 5, 1), batch_size=[2, 5])
        out = env.rollout(
            4,
            lambda td: td.set("action", torch.ones(2, 5, 1)),
            tensordict=start,
            auto_reset=False,
            break_when_any_done=False,
        )
        assert out.batch_size == (2, 5, 4)
        torch.testing.assert_close(out["next", "latent"][..., -1, :], torch.full((2, 5, 1), 4.0))

    def test_reset_needs_the_latent(self):
        env = latent_env()
        with pytest.raises(RuntimeError, match="initial latent.*'latent'"):
            env.reset()
        with pytest.raises(RuntimeError, match="'latent'"):
            env.reset(TensorDict(observation=torch.zeros(3)))

    def test_observation_spec_must_be_composite(self):
        with pytest.raises(TypeError, match="observation_spec must be a Composite"):
            WorldModelEnv(LinearWorldModel(), PendulumEnv(), observation_spec=Unbounded((1,)))


def drift_model(next_key=("next", "observation")):
    """mean' = mean + 0.1 * action, var' = var + 0.01 I."""

    class Drift(torch.nn.Module):
        def forward(self, action, observation):
            d = observation["mean"].shape[-1]
            var = observation["var"] + 0.01 * torch.eye(d)
            return observation["mean"] + 0.1 * action, var

    return TensorDictModule(
        Drift(), ["action", "observation"], [(*next_key, "mean"), (*next_key, "var")]
    )


class TestImaginedEnv:
    def test_specs(self):
        env = ImaginedEnv(drift_model(), PendulumEnv())
        assert env.batch_size == (1,)
        assert env.observation_spec["observation", "mean"].shape == (1, 3)
        assert env.observation_spec["observation", "var"].shape == (1, 3, 3)
        assert env.action_spec.shape == (1, 1)
        assert ImaginedEnv(drift_model(), PendulumEnv(), batch_size=[5]).batch_size == (5,)

    def test_reset_from_a_point_is_a_certain_belief(self):
        env = ImaginedEnv(drift_model(), PendulumEnv())
        obs = torch.tensor([[1.0, 0.0, 0.5]])
        td = env.reset(TensorDict(observation=obs, batch_size=[1]))
        torch.testing.assert_close(td["observation", "mean"], obs)
        torch.testing.assert_close(td["observation", "var"], torch.zeros(1, 3, 3))
        belief = TensorDict(
            {("observation", "mean"): obs, ("observation", "var"): torch.eye(3)[None]},
            batch_size=[1],
        )
        torch.testing.assert_close(env.reset(belief)["observation", "var"], torch.eye(3)[None])

    def test_rollout_propagates_the_belief(self):
        env = ImaginedEnv(drift_model(), PendulumEnv())
        start = TensorDict(observation=torch.zeros(1, 3), batch_size=[1])
        out = env.rollout(4, lambda td: td.set("action", torch.ones(1, 1)), tensordict=start)
        assert out.batch_size == (1, 4)
        torch.testing.assert_close(out["next", "observation", "mean"][0, -1], torch.full((3,), 0.4))
        torch.testing.assert_close(out["next", "observation", "var"][0, -1], 0.04 * torch.eye(3))
        assert not out["next", "done"].any()
        assert (out["next", "reward"] == 0).all()
        assert env.any_done(TensorDict(done=torch.ones(1, 1, dtype=torch.bool))) is False

    def test_check_env_specs(self):
        env = ImaginedEnv(
            drift_model(("next_observation",)),
            PendulumEnv(),
            next_observation_key="next_observation",
        )
        check_env_specs(env)

    def test_missing_next_belief_names_the_key(self):
        env = ImaginedEnv(drift_model(("elsewhere",)), PendulumEnv())
        td = env.reset().set("action", torch.zeros(1, 1))
        with pytest.raises(KeyError, match=r"no next belief under .*next.*observation"):
            env.step(td)

    def test_base_env_needs_an_observation(self):
        class NoObs(PendulumEnv):
            def __init__(self):
                super().__init__()
                self.observation_spec = Composite(pixels=Unbounded((3,)))

        with pytest.raises(KeyError, match="'observation'"):
            ImaginedEnv(drift_model(), NoObs())
