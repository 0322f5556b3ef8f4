"""The policy fast path of batched envs gives what the generic rollout loop gives."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from _engine_helpers import rollout_generic
from tensordict import TensorDict

from rl.envs import ParallelEnv, SerialEnv

sys.path.insert(0, str(Path(__file__).parent))
from _batched_factories import CounterEnv  # noqa: E402

KWARGS = [{"limit": 2.0}, {"truncate_at": 3}, {}]


def _make(kind: str):
    if kind == "serial":
        return SerialEnv(3, CounterEnv, KWARGS)
    return ParallelEnv(3, CounterEnv, KWARGS, mp_start_method="fork")


class Policy:
    """Acts on the observation, writes an extra entry; optionally replaces the root
    observation (a new tensor) or writes a ``"next"`` entry."""

    def __init__(self, replace_obs: bool = False, write_next: bool = False):
        self.replace_obs = replace_obs
        self.write_next = write_next

    def __call__(self, td):
        obs = td["observation"]
        td.set("action", (obs[..., :1] * 0.3 + 0.6).clamp(0, 1))
        td.set("score", obs[..., :2].sum(-1, keepdim=True))  # not the reset count
        if self.replace_obs:
            td.set("observation", obs * 2)
        if self.write_next:
            td.set("next", TensorDict(hint=obs[..., :1].clone(), batch_size=td.batch_size))
        return td


@pytest.mark.parametrize("kind", ["serial", "parallel"])
@pytest.mark.parametrize(
    "options", [{}, {"replace_obs": True}, {"write_next": True}], ids=["plain", "replace", "next"]
)
def test_policy_fast_path_equals_generic_loop(kind, options):
    env = _make(kind)
    try:
        env.set_seed(1)
        fast = env.rollout(9, Policy(**options), break_when_any_done=False)
        env.set_seed(1)
        generic = rollout_generic(
            env, 9, env.reset(), policy=Policy(**options), callback=None,
            break_when_any_done=False, break_when_all_done=False,
        )  # fmt: skip
        for td in (fast, generic):  # reset counts relative to the rollout's first reset
            start = td["next", "observation"][:, :1, 2].clone()
            td["observation"][..., 2] -= start * (2 if options.get("replace_obs") else 1)
            td["next", "observation"][..., 2] -= start
        assert set(fast.keys(True, True)) == set(generic.keys(True, True))
        assert "score" in fast.keys()
        for key in generic.keys(True, True):
            torch.testing.assert_close(fast[key], generic[key], msg=str(key))
        assert fast["next", "done"].any()
        # continuing from the last step: the done sub-envs are reset once, by reset()
        root = fast["next"][:, -1].exclude("reward").clone()
        root.set("_reset", root["done"].clone())
        again = env.rollout(3, Policy(), auto_reset=False, tensordict=env.reset(root))
        assert again.batch_size == (3, 3)
    finally:
        env.close()


def test_break_when_all_done_resets_only_the_done_sub_envs_of_a_worker():
    """A worker holding several sub-envs resets only its done ones (the shared mask),
    as the env's own reset does: the kernel gives what EnvKernel gives."""
    from rl.envs import GymEnv, StepCounter, TransformedEnv
    from rl.envs.engine import EnvKernel

    def make():
        return TransformedEnv(GymEnv("CartPole-v1", num_envs=3), StepCounter())

    outs = []
    for step_loop in (False, True):
        env = SerialEnv(2, make)
        if step_loop:
            env.__dict__["rollout_kernel"] = lambda env=env: EnvKernel(env)
        env.set_seed(0)
        torch.manual_seed(0)
        outs.append(env.rollout(200, break_when_all_done=True, break_when_any_done=False))
        env.close()
    fast, ref = outs
    assert fast.batch_size == ref.batch_size
    assert (fast == ref).all()
    # a sub-env that was not done keeps counting past another one's reset
    assert int(fast["next", "step_count"].max()) == fast.batch_size[-1]
