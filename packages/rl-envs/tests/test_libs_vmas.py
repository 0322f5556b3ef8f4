"""VmasEnv / VmasWrapper: TorchRL's key and spec layout, grouping, seeding, partial resets."""

from __future__ import annotations

import pytest
import torch
from tensordict import LazyStackedTensorDict, TensorDict

import rl.envs
from rl.core import Bounded, Categorical, OneHot
from rl.envs import MarlGroupMapType, RewardSum, TransformedEnv, check_env_specs, step_mdp

vmas = pytest.importorskip("vmas")

from rl.envs.libs import vmas as vmas_lib  # noqa: E402
from rl.envs.libs.vmas import VmasEnv, VmasWrapper  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning")

B = 4  # sub-envs: small, VMAS steps on the CPU here


def nav(**kwargs):
    kwargs.setdefault("seed", 0)
    kwargs.setdefault("n_agents", 3)
    return VmasEnv("navigation", num_envs=B, **kwargs)


class TestVmasLayout:
    def test_torchrl_layout(self):
        env = nav(max_steps=5)
        assert env.batch_size == torch.Size([B])
        assert env.group_map == {"agents": ["agent_0", "agent_1", "agent_2"]}
        assert env.agent_names_to_indices_map == {"agent_0": 0, "agent_1": 1, "agent_2": 2}
        obs = env.full_observation_spec
        assert obs["agents"].shape == torch.Size([B, 3])
        assert obs["agents", "observation"].shape == torch.Size([B, 3, 18])
        assert set(obs["agents", "info"].keys()) == {"pos_rew", "final_rew", "agent_collisions"}
        assert obs["agents", "info", "pos_rew"].shape == torch.Size([B, 3, 1])
        action = env.full_action_spec["agents", "action"]
        assert isinstance(action, Bounded) and action.shape == torch.Size([B, 3, 2])
        assert env.full_reward_spec["agents", "reward"].shape == torch.Size([B, 3, 1])
        assert env.done_keys == ["done", "terminated"]
        assert env.reward_keys == [("agents", "reward")]
        assert env.action_keys == [("agents", "action")]
        assert env.reset_keys == ["_reset"]
        assert env.full_done_spec["done"].shape == torch.Size([B, 1])
        assert env.full_action_spec_unbatched["agents", "action"].shape == torch.Size([3, 2])
        assert env.het_specs is False
        check_env_specs(env, seed=0)

    @pytest.mark.parametrize(
        "categorical, cls, shape", [(True, Categorical, (B, 2)), (False, OneHot, (B, 2, 9))]
    )
    def test_discrete_actions(self, categorical, cls, shape):
        env = nav(n_agents=2, continuous_actions=False, categorical_actions=categorical)
        spec = env.full_action_spec["agents", "action"]
        assert isinstance(spec, cls) and spec.shape == torch.Size(shape)
        check_env_specs(env, seed=0)

    def test_one_hot_and_categorical_actions_agree(self):
        index = torch.tensor([[1, 4], [0, 8], [3, 2], [7, 5]])
        out = []
        for categorical in (True, False):
            env = nav(n_agents=2, continuous_actions=False, categorical_actions=categorical)
            td = env.reset()
            action = index if categorical else torch.nn.functional.one_hot(index, 9)
            td["agents", "action"] = action
            out.append(env.step(td)["next", "agents", "observation"])
        torch.testing.assert_close(out[0], out[1])

    def test_lazy_export_and_repr(self):
        assert rl.envs.VmasEnv is VmasEnv and rl.envs.VmasWrapper is VmasWrapper
        assert "navigation" in VmasEnv.available_envs
        env = nav(n_agents=2)
        assert repr(env) == (
            f"VmasEnv(num_envs={B}, n_agents=2, batch_size=torch.Size([{B}]), device=cpu) "
            "(scenario=navigation)"
        )
        assert env.scenario is env._env.scenario  # VMAS attributes reach through
        assert env.n_agents == 2 and env.num_envs == B


class TestVmasValues:
    def test_matches_vmas_stepped_directly(self):
        torch.manual_seed(0)
        actions = torch.rand(3, B, 3, 2) * 2 - 1
        env = nav(max_steps=10)
        env.set_seed(7)
        td = env.reset()
        got = []
        for t in range(3):
            td["agents", "action"] = actions[t]
            td = env.step(td)
            got.append(td["next"].clone())
            td = step_mdp(td, reward_keys=env.reward_keys, action_keys=env.action_keys)
        raw = vmas.make_env("navigation", num_envs=B, seed=0, max_steps=10, n_agents=3)
        raw.seed(7)
        raw.reset()
        for t in range(3):
            obs, rews, dones, infos = raw.step(list(actions[t].unbind(1)))
            torch.testing.assert_close(got[t]["agents", "observation"], torch.stack(obs, 1))
            torch.testing.assert_close(
                got[t]["agents", "reward"], torch.stack(rews, 1).unsqueeze(-1)
            )
            torch.testing.assert_close(
                got[t]["agents", "info", "pos_rew"],
                torch.stack([i["pos_rew"] for i in infos], 1).reshape(B, 3, 1),
            )
            assert torch.equal(got[t]["done"], dones.unsqueeze(-1))
            assert torch.equal(got[t]["terminated"], got[t]["done"])

    def test_seeding_reproduces(self):
        env = nav(n_agents=2)

        def run(seed):
            env.set_seed(seed)
            torch.manual_seed(seed)
            return env.rollout(4)

        a, b, c = run(3), run(3), run(4)
        torch.testing.assert_close(
            a["next", "agents", "observation"], b["next", "agents", "observation"]
        )
        torch.testing.assert_close(a["agents", "action"], b["agents", "action"])
        assert not torch.equal(a["agents", "observation"], c["agents", "observation"])

    def test_max_steps_sets_done_and_terminated(self):
        env = nav(n_agents=2, max_steps=3)
        td = env.rollout(3, break_when_any_done=False)
        assert td["next", "done"][:, :2].sum() == 0
        assert td["next", "done"][:, 2].all() and td["next", "terminated"][:, 2].all()
        assert "truncated" not in td["next"].keys()

    def test_terminated_truncated(self):
        env = nav(n_agents=2, max_steps=3, terminated_truncated=True)
        assert env.done_keys == ["done", "terminated", "truncated"]
        td = env.rollout(3, break_when_any_done=False)
        assert td["next", "truncated"][:, 2].all() and not td["next", "truncated"][:, :2].any()
        assert not td["next", "terminated"].any()
        assert torch.equal(td["next", "done"], td["next", "truncated"])
        check_env_specs(env, seed=0)

    def test_dict_spaces_give_the_same_data(self):
        torch.manual_seed(0)
        action = torch.rand(B, 2, 2) * 2 - 1
        out = []
        for dict_spaces in (False, True):
            env = nav(n_agents=2, dict_spaces=dict_spaces)
            env.set_seed(1)
            td = env.reset()
            td["agents", "action"] = action
            out.append(env.step(td)["next"])
        assert env._dict_spaces
        assert (out[0] == out[1]).all() and out[0]["agents", "observation"].abs().sum() > 0

    def test_partial_reset(self):
        env = nav(n_agents=2, max_steps=4)
        td = env.rand_step(env.reset())
        nxt = step_mdp(td, reward_keys=env.reward_keys, action_keys=env.action_keys)
        before = nxt["agents", "observation"].clone()
        mask = torch.tensor([[True], [False], [False], [True]])
        nxt["_reset"] = mask
        out = env.reset(nxt)
        changed = (out["agents", "observation"] != before).flatten(1).any(-1)
        assert changed.tolist() == [True, False, False, True]
        assert "_reset" not in out.keys()
        # the reset sub-envs restart their step count: 3 more steps end only the others
        for _ in range(3):
            out = step_mdp(
                env.rand_step(out), reward_keys=env.reward_keys, action_keys=env.action_keys
            )
        assert out["done"].flatten().tolist() == [False, True, True, False]

    def test_step_mdp_loop_keeps_group_batch(self):
        env = nav(n_agents=3)
        td = env.reset()
        for _ in range(3):
            td = env.rand_step(td)
            assert td["agents"].batch_size == torch.Size([B, 3])
            assert td["next", "agents"].batch_size == torch.Size([B, 3])
            td = step_mdp(td, reward_keys=env.reward_keys, action_keys=env.action_keys)
            assert td["agents"].batch_size == torch.Size([B, 3])
            assert set(td["agents"].keys()) == {"observation", "info"}
        rollout = env.rollout(3)
        assert rollout["next", "agents"].batch_size == torch.Size([B, 3, 3])

    def test_group_keys_through_transforms(self):
        env = TransformedEnv(
            nav(n_agents=2, max_steps=4),
            RewardSum(in_keys=[("agents", "reward")], out_keys=[("agents", "episode_reward")]),
        )
        check_env_specs(env, seed=0)
        td = env.rollout(4, break_when_any_done=False)
        reward = td["next", "agents", "reward"]
        torch.testing.assert_close(td["next", "agents", "episode_reward"], reward.cumsum(1))
        assert td["next", "agents", "episode_reward"].shape == (B, 4, 2, 1)


class TestVmasGrouping:
    def test_default_groups_by_name_prefix(self):
        env = VmasEnv("simple_adversary", num_envs=B, seed=0)
        assert env.group_map == {"adversary": ["adversary_0"], "agent": ["agent_0", "agent_1"]}
        assert env.full_observation_spec["adversary", "observation"].shape == (B, 1, 8)
        assert env.full_observation_spec["agent", "observation"].shape == (B, 2, 10)
        check_env_specs(env, seed=0)

    def test_one_group_per_agent(self):
        env = nav(n_agents=2, group_map=MarlGroupMapType.ONE_GROUP_PER_AGENT)
        assert env.group_map == {"agent_0": ["agent_0"], "agent_1": ["agent_1"]}
        assert env.full_action_spec["agent_1", "action"].shape == (B, 1, 2)
        td = env.rollout(2)
        assert td["next", "agent_0"].batch_size == torch.Size([B, 2, 1])
        check_env_specs(env, seed=0)

    def test_custom_map_reorders_agents(self):
        torch.manual_seed(0)
        action = torch.rand(B, 3, 2) * 2 - 1
        obs = {}
        for name, group_map in [
            ("plain", None),
            ("custom", {"red": ["agent_2", "agent_0"], "blue": ["agent_1"]}),
        ]:
            env = nav(group_map=group_map)
            td = env.reset()
            if name == "plain":
                td["agents", "action"] = action
                obs[name] = env.step(td)["next", "agents", "observation"]
            else:
                td["red", "action"] = action[:, [2, 0]]
                td["blue", "action"] = action[:, [1]]
                nxt = env.step(td)["next"]
                obs[name] = torch.cat([nxt["red", "observation"], nxt["blue", "observation"]], 1)
        torch.testing.assert_close(obs["custom"], obs["plain"][:, [2, 0, 1]])

    def test_heterogeneous_group_is_lazy(self):
        env = VmasEnv(
            "simple_adversary", num_envs=B, seed=0, group_map=MarlGroupMapType.ALL_IN_ONE_GROUP
        )
        assert env.het_specs and env.het_specs_map == {"agents": True}
        td = env.rollout(3)
        agents = td["next", "agents"]
        assert isinstance(agents, LazyStackedTensorDict) and agents.batch_size == (B, 3, 3)
        obs_sizes = [sub["observation"].shape for sub in agents.tensordicts]
        assert obs_sizes == [(B, 3, 8), (B, 3, 10), (B, 3, 10)]
        spec = env.full_observation_spec["agents"]
        for j, size in enumerate((8, 10, 10)):
            assert spec[:, j]["observation"].shape == (B, size)
            assert spec[:, j].is_in(td["agents"].tensordicts[j][:, 0])

    def test_bad_group_map(self):
        with pytest.raises(ValueError, match="agent 'agent_1' is in no group"):
            nav(n_agents=2, group_map={"agents": ["agent_0"]})


class TestVmasErrors:
    def test_missing_action_names_key(self):
        env = nav(n_agents=2)
        td = env.reset()
        with pytest.raises(KeyError, match=r"needs the action key \(.*agents.*, .*action.*\)"):
            env.step(td)

    def test_out_of_bounds_action_with_type_checks(self):
        env = nav(n_agents=2, run_type_checks=True)
        td = env.reset()
        td["agents", "action"] = torch.full((B, 2, 2), 5.0)
        with pytest.raises(
            ValueError,
            match=r"(?s)action \('agents', 'action'\) = .* is outside action_spec Bounded",
        ):
            env.step(td)

    def test_unknown_scenario(self):
        with pytest.raises(ValueError, match="unknown VMAS scenario 'nope'"):
            VmasEnv("nope", num_envs=2)

    def test_wrapper_checks(self):
        raw = vmas.make_env("navigation", num_envs=2, seed=0, n_agents=2)
        with pytest.raises(TypeError, match="wraps a vmas.simulator.environment.Environment"):
            VmasWrapper(object())
        with pytest.raises(TypeError, match=r"batch_size must be \[2\] \(the VMAS num_envs\)"):
            VmasWrapper(raw, batch_size=[3])
        with pytest.raises(TypeError, match="differs from the VMAS env's device 'cpu'"):
            VmasWrapper(raw, device="meta")
        env = VmasWrapper(raw)
        assert env.batch_size == (2,) and env.group_map == {"agents": ["agent_0", "agent_1"]}

    @pytest.mark.parametrize("kwargs", [{"from_pixels": True}, {"pixels_only": True}])
    def test_pixels_are_refused_with_the_way_out(self, kwargs):
        with pytest.raises(
            NotImplementedError,
            match=r"does not render pixels .* with from_pixels=False and render frames",
        ):
            nav(n_agents=2, **kwargs)

    def test_missing_library(self, monkeypatch):
        monkeypatch.setattr(vmas_lib, "_has_vmas", False)
        with pytest.raises(ImportError, match=r"rl-envs\[vmas\]"):
            VmasEnv("navigation", num_envs=2)
        assert VmasEnv.available_envs == []


def test_docstring_layout():
    env = VmasWrapper(vmas.make_env("navigation", num_envs=4, seed=0, n_agents=2))
    td = env.rollout(5)
    assert td["next", "agents", "observation"].shape == (4, 5, 2, 18)
    assert isinstance(td, TensorDict)
