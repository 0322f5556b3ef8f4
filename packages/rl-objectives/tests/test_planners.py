import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule

from rl.core import Bounded, Composite, Unbounded
from rl.envs import ModelBasedEnvBase, PendulumEnv
from rl.modules import CEMPlanner, MPCPlannerBase, MPPIPlanner, WorldModelWrapper
from rl.modules.planners._planner import mask_post_done_reward


class PointEnv(ModelBasedEnvBase):
    """x' = x + a (a in [-1, 1]), reward = -|x' - target|; done once |x'| > limit."""

    def __init__(self, target=0.0, limit=None, reward=True):
        model = TensorDictModule(
            self._model, in_keys=["x", "action"], out_keys=["x", "reward", "done"]
        )
        super().__init__(model)
        self.target, self.limit = target, limit
        self.observation_spec = Composite(x=Unbounded((1,)))
        self.action_spec = Bounded(-1.0, 1.0, (1,))
        if reward:
            self.reward_spec = Unbounded((1,))

    def _model(self, x, a):
        nxt = x + a
        done = (
            nxt.abs() > self.limit
            if self.limit is not None
            else torch.zeros_like(nxt, dtype=torch.bool)
        )
        return nxt, -(nxt - self.target).abs(), done

    def _reset(self, tensordict):
        # rollouts past a done reset the finished candidates: keep the input's batch dims
        batch = tensordict.batch_size if tensordict is not None else ()
        return TensorDict(x=torch.full((*batch, 1), 3.0), batch_size=batch)


class TrapEnv(PointEnv):
    def __init__(self):
        super().__init__()
        self.world_model = TensorDictModule(
            self._trap, in_keys=["x", "action"], out_keys=["x", "reward", "done"]
        )

    def _trap(self, x, a):
        nxt = x + a
        below = nxt < 2.5
        reward = torch.where(below, torch.where(x < 2.5, 10.0, 0.0), 1.0)
        return nxt, reward, below

    def _reset(self, tensordict):
        # a finished candidate restarts inside the trap, where every step would earn 10
        batch = tensordict.batch_size if tensordict is not None else ()
        x = torch.zeros(*batch, 1)
        if tensordict is not None and "_reset" in tensordict.keys():
            x = torch.where(tensordict["_reset"], x, tensordict["x"])
        return TensorDict(x=x, batch_size=batch)


class TDZeroAdvantage(torch.nn.Module):
    """advantage = return from each step (undiscounted), as a plain loop would compute."""

    def forward(self, td):
        r = td["next", "reward"]
        td["advantage"] = r.flip(-2).cumsum(-2).flip(-2)
        return td


def make_planner(kind, env, **kw):
    kw = {"planning_horizon": 4, "optim_steps": 4, "num_candidates": 64, "top_k": 8, **kw}
    if kind == "cem":
        return CEMPlanner(env, **kw)
    return MPPIPlanner(env, TDZeroAdvantage(), temperature=1.0, **kw)


@pytest.mark.parametrize("kind", ["cem", "mppi"])
class TestPlanners:
    def test_moves_towards_target(self, kind):
        torch.manual_seed(0)
        env = PointEnv()
        planner = make_planner(kind, env)
        action = planner(env.reset())["action"]
        assert action.shape == (1,)
        assert action.item() < -0.5  # x=3, target 0: push down

    def test_batched_input(self, kind):
        torch.manual_seed(0)
        env = PointEnv()
        planner = make_planner(kind, env)
        td = TensorDict(x=torch.tensor([[3.0], [-3.0]]), batch_size=[2])
        action = planner(td)["action"]
        assert action.shape == (2, 1)
        assert action[0].item() < 0 < action[1].item()

    def test_rollout_as_policy(self, kind):
        torch.manual_seed(0)
        env = PointEnv()
        td = env.rollout(5, make_planner(kind, env))
        assert td["next", "x"][-1].abs().item() < 0.5

    def test_post_done_rewards_ignored(self, kind):
        # Staying above 2.5 earns 1 per step; dropping below ends the episode with 0, and
        # the (imagined) steps after that would earn 10 each: they must not count.
        torch.manual_seed(0)
        env = TrapEnv()
        action = make_planner(kind, env)(TensorDict(x=torch.full((1,), 3.0)))["action"]
        assert action.item() > -0.5

    def test_missing_key(self, kind):
        planner = make_planner(kind, PointEnv())
        with pytest.raises(KeyError, match="'x'"):
            planner(TensorDict(y=torch.zeros(1)))

    def test_wrong_shape(self, kind):
        planner = make_planner(kind, PointEnv())
        with pytest.raises(
            ValueError, match=r"'x' has shape \(3,\), expected trailing shape \(1,\)"
        ):
            planner(TensorDict(x=torch.zeros(3)))

    def test_unknown_reward_key(self, kind):
        with pytest.raises(ValueError, match="reward_key 'cost' is not among the rewards"):
            make_planner(kind, PointEnv(), reward_key="cost")

    def test_env_without_reward_spec(self, kind):
        env = PointEnv()
        env.full_reward_spec = Composite()  # declares no reward at all
        with pytest.raises(
            ValueError, match=r"reward_key \('next', 'reward'\) .*\(no reward spec\)"
        ):
            make_planner(kind, env)

    def test_top_k_too_large(self, kind):
        with pytest.raises(ValueError, match="top_k=65 exceeds num_candidates=64"):
            make_planner(kind, PointEnv(), top_k=65)

    def test_batch_locked_env_refused(self, kind):
        with pytest.raises(ValueError, match="batch_locked"):
            make_planner(kind, PendulumEnv())


def test_mask_post_done_reward_against_loop():
    reward = torch.randn(3, 6, 1)
    done = torch.rand(3, 6, 1) > 0.7
    expected = reward.clone()
    for b in range(3):
        seen = False
        for t in range(6):
            if seen:
                expected[b, t] = 0
            seen = seen or bool(done[b, t])
    torch.testing.assert_close(mask_post_done_reward(reward, done, time_dim=-2), expected)


def test_cem_refit_matches_hand_computation():
    # one optim step, horizon 1: the mean is the mean of the top-k actions by reward
    torch.manual_seed(1)
    env = PointEnv()
    planner = CEMPlanner(env, planning_horizon=1, optim_steps=1, num_candidates=10, top_k=3)
    torch.manual_seed(2)
    action = planner(env.reset())["action"]
    torch.manual_seed(2)
    cands = (torch.randn(10, 1, 1)).clamp(-1, 1)
    returns = -(3.0 + cands).abs().squeeze()
    expected = cands.squeeze()[returns.topk(3).indices].mean()
    torch.testing.assert_close(action.squeeze(), expected)


def test_abstract_base():
    with pytest.raises(TypeError):
        MPCPlannerBase(PointEnv())


def test_world_model_wrapper():
    t = TensorDictModule(torch.nn.Linear(2, 2), in_keys=["s"], out_keys=["s"])
    r = TensorDictModule(torch.nn.Linear(2, 1), in_keys=["s"], out_keys=["reward"])
    wm = WorldModelWrapper(t, r)
    assert wm.get_transition_model_operator() is t
    assert wm.get_reward_operator() is r
    out = wm(TensorDict(s=torch.ones(4, 2), batch_size=[4]))
    torch.testing.assert_close(out["reward"], r.module(t.module(torch.ones(4, 2))))
