"""Specs a subclass's ``__new__`` assigns to the class (TorchRL's mock-env idiom) become the
instance's: each instance gets its own copy, and the class is left without them."""

import torch
from tensordict import TensorDict

from rl.core import Bounded, Composite, Unbounded
from rl.envs import EnvBase


class ClassSpecEnv(EnvBase):
    def __new__(cls, *args, size=3, **kwargs):
        cls._output_spec = Composite(
            full_observation_spec=Composite(obs=Unbounded((size,))),
            full_reward_spec=Composite(reward=Unbounded((1,))),
            full_done_spec=Composite(
                done=Unbounded((1,), dtype=torch.bool), terminated=Unbounded((1,), dtype=torch.bool)
            ),
        )
        cls._input_spec = Composite(full_action_spec=Composite(action=Bounded(-1, 1, (size,))))
        return super().__new__(cls, *args, **kwargs)

    def __init__(self, size=3):
        super().__init__()

    def _reset(self, td):
        return TensorDict(obs=torch.zeros(self.observation_spec["obs"].shape), batch_size=[])

    def _step(self, td):
        obs = td["obs"] + td["action"]
        done = torch.zeros(1, dtype=torch.bool)
        return TensorDict(obs=obs, reward=obs.sum(-1, keepdim=True), done=done, terminated=done)

    def _set_seed(self, seed):
        pass


def test_class_level_specs_move_to_each_instance():
    a, b = ClassSpecEnv(size=3), ClassSpecEnv(size=5)
    assert a.observation_spec["obs"].shape == (3,) and b.observation_spec["obs"].shape == (5,)
    assert a.action_spec.shape == (3,) and b.action_spec.shape == (5,)
    assert (
        "_output_spec" not in ClassSpecEnv.__dict__ and "_input_spec" not in ClassSpecEnv.__dict__
    )
    assert a.full_state_spec.is_empty()  # the missing entries are added empty
    torch.manual_seed(0)
    out = a.rollout(4)
    assert out["next", "obs"].shape == (4, 3)
    torch.testing.assert_close(out["next", "obs"], out["action"].cumsum(0))
