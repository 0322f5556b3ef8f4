"""World-model containers for model-based RL."""

from __future__ import annotations

from tensordict.nn import TensorDictModule, TensorDictSequential

__all__ = ["WorldModelWrapper"]


class WorldModelWrapper(TensorDictSequential):
    """A transition model followed by a reward model, as one TensorDict module.

    Args:
        transition_model: maps ``(state, action)`` to the next (imagined) state.
        reward_model: reads the state the transition model wrote and writes the reward.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> from rl.modules import WorldModelWrapper
        >>> wm = WorldModelWrapper(
        ...     TensorDictModule(torch.nn.Linear(5, 4), in_keys=["obs_action"], out_keys=["state"]),
        ...     TensorDictModule(torch.nn.Linear(4, 1), in_keys=["state"], out_keys=["reward"]),
        ... )
        >>> wm(TensorDict(obs_action=torch.zeros(3, 5), batch_size=[3]))["reward"].shape
        torch.Size([3, 1])
    """

    def __init__(self, transition_model: TensorDictModule, reward_model: TensorDictModule) -> None:
        super().__init__(transition_model, reward_model)

    def get_transition_model_operator(self) -> TensorDictModule:
        """The transition model (state, action -> next state)."""
        return self.module[0]

    def get_reward_operator(self) -> TensorDictModule:
        """The reward model (state -> reward)."""
        return self.module[1]
