"""World-model containers for model-based RL."""

from __future__ import annotations

from tensordict import TensorDictBase
from tensordict.nn import TensorDictModule, TensorDictModuleBase, TensorDictSequential

__all__ = ["WorldModel", "WorldModelWrapper"]


class WorldModel(TensorDictModuleBase):
    """An encoder, a latent dynamics model and its heads, composed by their keys.

    The model predicts; rolling it out is the job of an env
    (:class:`~rl.envs.WorldModelEnv`), so imagined and real rollouts share one loop.
    Each part is a TensorDict module and talks to the others only through the keys it
    reads and writes, so any latent (a vector, an RSSM state, a nested entry) fits.

    Calling the module runs ``encoder -> dynamics -> reward_head [-> done_head]
    [-> decoder]``; :meth:`encode`, :meth:`step` and :meth:`decode` run one part.

    Args:
        encoder: observation to latent, e.g. ``"observation" -> "latent"``.
        dynamics: latent and action to the next latent, e.g.
            ``("latent", "action") -> ("next", "latent")``.
        reward_head: next latent to reward, e.g. ``("next", "latent") -> ("next", "reward")``.
        done_head: next latent to a done flag (``("next", "done")``), optional.
        decoder: latent to a reconstructed observation, optional (needed by :meth:`decode`).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> from rl.modules import WorldModel
        >>> encoder = TensorDictModule(torch.nn.Linear(8, 4), ["observation"], ["latent"])
        >>> class Dynamics(torch.nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.net = torch.nn.Linear(4 + 2, 4)
        ...     def forward(self, latent, action):
        ...         return self.net(torch.cat([latent, action], -1))
        >>> dynamics = TensorDictModule(Dynamics(), ["latent", "action"], [("next", "latent")])
        >>> reward = TensorDictModule(torch.nn.Linear(4, 1), [("next", "latent")], [("next", "reward")])
        >>> wm = WorldModel(encoder, dynamics, reward)
        >>> td = TensorDict(observation=torch.randn(2, 8), action=torch.randn(2, 2), batch_size=[2])
        >>> wm(td)["next", "reward"].shape
        torch.Size([2, 1])
    """

    def __init__(
        self,
        encoder: TensorDictModule,
        dynamics: TensorDictModule,
        reward_head: TensorDictModule,
        *,
        done_head: TensorDictModule | None = None,
        decoder: TensorDictModule | None = None,
    ) -> None:
        super().__init__()
        self.encoder = encoder
        self.dynamics = dynamics
        self.reward_head = reward_head
        self.done_head = done_head
        self.decoder = decoder
        heads = [m for m in (done_head, decoder) if m is not None]
        self._full_seq = TensorDictSequential(encoder, dynamics, reward_head, *heads)
        # the step without the encoder: what an env advances the latent with
        self._step_seq = TensorDictSequential(dynamics, reward_head, *heads)
        self.in_keys = self._full_seq.in_keys
        self.out_keys = self._full_seq.out_keys

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Encodes, steps and runs the heads (and the decoder, if any)."""
        return self._full_seq(tensordict)

    def encode(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Writes the latent of the observation in ``tensordict``."""
        return self.encoder(tensordict)

    def step(self, tensordict: TensorDictBase) -> TensorDictBase:
        """One imagined step from the latent already in ``tensordict`` (no encoder)."""
        return self._step_seq(tensordict)

    def decode(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Reconstructs the observation from the latent.

        Raises:
            RuntimeError: the model was built without a decoder.
        """
        if self.decoder is None:
            raise RuntimeError(
                "WorldModel.decode needs a decoder; build the WorldModel with decoder=..."
            )
        return self.decoder(tensordict)

    @property
    def step_module(self) -> TensorDictSequential:
        """The step sequence (dynamics, heads, decoder) without the encoder."""
        return self._step_seq


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
