"""``step_mdp`` options as TorchRL 0.14.1 defines them: the destination tensordict, the
action kept without the other root entries, no group left empty by the exclusions."""

import pytest
import torch
from tensordict import TensorDict

from rl.envs import step_mdp


def _transition():
    return TensorDict(
        {
            "obs": torch.zeros(4, 2),
            "action": torch.ones(4, 1),
            "other": torch.full((4, 1), 7.0),
            "reward": torch.zeros(4, 1),
            "next": {"obs": torch.ones(4, 2), "reward": torch.ones(4, 1),
                     "done": torch.zeros(4, 1, dtype=torch.bool)},
        },
        [4],
    )  # fmt: skip


@pytest.mark.parametrize("keep_other", [True, False])
@pytest.mark.parametrize("exclude_action", [True, False])
def test_action_and_other_root_entries(keep_other, exclude_action):
    td = _transition()
    out = step_mdp(td, keep_other=keep_other, exclude_action=exclude_action)
    assert out["obs"] is td["next", "obs"] and out["done"] is td["next", "done"]
    assert "reward" not in out.keys()  # excluded by default, not taken from the root
    assert ("action" in out.keys()) == (not exclude_action)
    if not exclude_action:
        assert out["action"] is td["action"]
    assert ("other" in out.keys()) == keep_other


def test_destination_tensordict_is_updated_and_returned():
    td = _transition()
    dest = TensorDict({"kept": torch.arange(4)}, [4])
    out = step_mdp(td, next_tensordict=dest, exclude_reward=False)
    assert out is dest
    assert sorted(dest.keys()) == ["done", "kept", "obs", "other", "reward"]
    assert (dest["reward"] == 1).all() and (dest["kept"] == torch.arange(4)).all()


def test_a_group_emptied_by_the_exclusions_is_dropped():
    td = TensorDict(
        {
            "state": torch.zeros(4, 1),
            "data": TensorDict({"action": torch.zeros(4, 3, 1)}, [4, 3]),
            "next": {
                "state": torch.ones(4, 1),
                "data": TensorDict(
                    {"reward": torch.ones(4, 3, 1), "done": torch.ones(4, 3, 1)}, [4, 3]
                ),
            },
        },
        [4],
    )
    keys = {"reward_keys": ("data", "reward"), "done_keys": ("data", "done"),
            "action_keys": ("data", "action")}  # fmt: skip
    out = step_mdp(td, exclude_done=True, exclude_reward=True, keep_other=False, **keys)
    assert list(out.keys()) == ["state"]
    out = step_mdp(td, exclude_done=False, exclude_reward=True, exclude_action=False, **keys)
    assert out["data"].batch_size == (4, 3)
    assert sorted(out["data"].keys()) == ["action", "done"]
