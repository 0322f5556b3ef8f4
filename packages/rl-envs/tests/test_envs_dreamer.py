"""DreamerEnv / DreamerDecoder: imagination in latent space with a tiny world model."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule, TensorDictSequential
from torch import nn

from rl.core import Composite, Unbounded
from rl.envs import DreamerDecoder, DreamerEnv, ModelBasedEnvBase, TransformedEnv

S, H, A = 3, 4, 2


class _Transition(nn.Module):
    """state' = state + mean(action), belief' = belief / 2."""

    def forward(self, state, belief, action):
        return state + action.mean(-1, keepdim=True), belief / 2


class _Reward(nn.Module):
    def forward(self, state):
        return state.sum(-1, keepdim=True)


class _Decoder(nn.Module):
    def forward(self, state, belief):
        return torch.cat([state, belief], -1)


def _env(batch=(), decoder=True):
    # as TorchRL's Dreamer: the world model overwrites the root latents and writes "reward"
    world_model = TensorDictSequential(
        TensorDictModule(
            _Transition(),
            in_keys=["state", "belief", "action"],
            out_keys=["state", "belief"],
        ),
        TensorDictModule(_Reward(), in_keys=["state"], out_keys=["reward"]),
    )
    obs_decoder = (
        TensorDictModule(_Decoder(), in_keys=["state", "belief"], out_keys=["reco_pixels"])
        if decoder
        else None
    )
    env = DreamerEnv(world_model, prior_shape=(S,), belief_shape=(H,), obs_decoder=obs_decoder)
    env.observation_spec = Composite(state=Unbounded(S), belief=Unbounded(H))
    env.action_spec = Unbounded(A)
    env.reward_spec = Unbounded(1)
    env.state_spec = Composite(state=Unbounded(S), belief=Unbounded(H))
    return env


class _Policy(nn.Module):
    def forward(self, state, belief):
        return torch.ones(*state.shape[:-1], A) * 0.5


def _policy():
    return TensorDictModule(_Policy(), in_keys=["state", "belief"], out_keys=["action"])


def test_dreamer_env_rollout_matches_loop():
    env = _env()
    assert isinstance(env, ModelBasedEnvBase)
    assert env.prior_shape == (S,) and env.belief_shape == (H,)
    start = TensorDict(state=torch.zeros(5, S), belief=torch.ones(5, H), batch_size=[5])
    td = env.reset(start.clone())
    out = env.rollout(4, _policy(), auto_reset=False, tensordict=td)
    assert out.batch_size == (5, 4)
    state, belief = torch.zeros(5, S), torch.ones(5, H)
    for t in range(4):
        state, belief = state + 0.5, belief / 2
        torch.testing.assert_close(out["next", "state"][:, t], state)
        torch.testing.assert_close(out["next", "belief"][:, t], belief)
        torch.testing.assert_close(out["next", "reward"][:, t], state.sum(-1, keepdim=True))
    assert not out["next", "done"].any()
    assert env.any_done(out) is False
    assert env.maybe_reset(start) is start


@pytest.mark.parametrize("break_when_any_done", [True, False])
def test_dreamer_env_eager_rollout_reads_no_done_flag(break_when_any_done):
    """Eager too, a rollout asks the env's declared ``any_done`` (``False``) instead of
    reading each step's done flags: it runs its ``max_steps`` on ``meta``, where a host
    read raises (as a CUDA graph capture refuses one)."""
    env = _env(decoder=False).to("meta")
    start = TensorDict(state=torch.zeros(5, S), belief=torch.ones(5, H), batch_size=[5])
    td = env.reset(start.to("meta"))
    out = env.rollout(
        4, _policy(), auto_reset=False, tensordict=td, break_when_any_done=break_when_any_done
    )
    assert out.batch_size == (5, 4)
    assert {v.device.type for v in out.values(True, True)} == {"meta"}


def test_dreamer_env_reset_without_input_draws_from_specs():
    env = _env()
    td = env.reset()
    assert td["state"].shape == (S,) and td["belief"].shape == (H,)


def test_decode_obs_and_decoder_transform():
    env = _env()
    td = TensorDict(state=torch.zeros(2, S), belief=torch.ones(2, H), batch_size=[2])
    decoded = env.decode_obs(td.clone())
    torch.testing.assert_close(decoded["reco_pixels"], torch.cat([td["state"], td["belief"]], -1))
    with pytest.raises(ValueError, match="decoder"):
        _env(decoder=False).decode_obs(td)

    tenv = TransformedEnv(env, DreamerDecoder())
    out = tenv.rollout(3, _policy(), auto_reset=False, tensordict=tenv.reset(td.clone()))
    assert out["next", "reco_pixels"].shape == (2, 3, S + H)
    torch.testing.assert_close(
        out["next", "reco_pixels"],
        torch.cat([out["next", "state"], out["next", "belief"]], -1),
    )


def test_set_specs_from_env_needs_latents():
    src = _env()
    env = _env()
    env.set_specs_from_env(src)
    assert set(env.state_spec.keys()) == {"state", "belief"}
    bad = _env()
    bad.observation_spec = Composite(observation=Unbounded(S))
    with pytest.raises(KeyError, match="belief|state"):
        env.set_specs_from_env(bad)


def test_dreamer_env_rollout_traces_in_one_graph():
    """Under ``torch.compile`` a rollout takes the per-step path and the env's declared
    ``any_done`` (a constant ``False``): one graph, no break, no recompilation, the eager
    values."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    env = _env(decoder=False)
    policy = _policy()
    start = TensorDict(state=torch.randn(5, S), belief=torch.ones(5, H), batch_size=[5])

    def imagine(start):
        return env.rollout(4, policy, auto_reset=False, tensordict=env.reset(start.clone()))

    torch._dynamo.reset()
    counters.clear()
    eager = imagine(start)  # fills the env's key caches: read by no graph
    fn = torch.compile(imagine, backend="eager", fullgraph=True)
    with torch._dynamo.config.patch(error_on_recompile=True):
        compiled = fn(start)
        fn(start)
    assert compiled.batch_size == eager.batch_size == (5, 4)
    for key in eager.keys(True, True):
        torch.testing.assert_close(compiled[key], eager[key])
    assert counters["stats"]["unique_graphs"] == 1 and not counters["graph_break"]


def test_compiled_rollout_of_other_envs_reads_done_key_as_eager():
    """Only an env that declares ``any_done`` (DreamerEnv) has it asked by a traced
    rollout; another env's traced rollout stops on ``done_key``, where the eager one does."""
    import torch._dynamo

    from rl.envs import ConstantRewardProbe

    assert _env(decoder=False)._constant_any_done
    probe = ConstantRewardProbe(batch_size=[3])
    assert not probe._constant_any_done

    def run():
        torch.manual_seed(0)
        return probe.rollout(5, break_when_any_done=True)

    eager = run()
    torch._dynamo.reset()
    compiled = torch.compile(run, backend="eager")()
    assert compiled.batch_size == eager.batch_size
    for key in eager.keys(True, True):
        torch.testing.assert_close(compiled[key], eager[key])
