"""Acting with a Decision Transformer: mask the context, keep the last step's action."""

from __future__ import annotations

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase, TensorDictModuleWrapper
from tensordict.utils import NestedKey, unravel_key

from rl.core import Composite, TensorSpec

__all__ = ["DecisionTransformerInferenceWrapper"]


class DecisionTransformerInferenceWrapper(TensorDictModuleWrapper):
    """Runs a Decision Transformer policy on a context window and returns the last step's action.

    The policy reads sequences ``[*B, T, F]`` of observations, actions and returns-to-go
    (e.g. stacked by ``CatFrames``). Before calling it, the wrapper zeroes all but the
    last ``inference_context`` observations and returns-to-go, and shifts the actions one
    step back (the last slot, the action to choose now, is zero; the ``inference_context
    - 1`` slots before it hold the previous actions). The output keeps the policy's action
    and the return-to-go of the last step only (``[*B, F]``), and the unmasked observation
    sequence. The input is not modified.

    Keys default to ``"observation"``, ``"action"`` (read and written) and
    ``"return_to_go"``; remap them with :meth:`set_tensor_keys`.

    Args:
        policy (TensorDictModuleBase): the Decision Transformer policy, e.g. a
            ``ProbabilisticActor`` around a :class:`~rl.modules.DTActor`.

    Keyword Args:
        inference_context (int): steps of context the policy sees. Defaults to ``5``.
        spec (TensorSpec, optional): the action spec (default: the policy's spec).
        device (torch.device, optional): where the spec is placed.

    Raises:
        ValueError: at the first call (or in :meth:`set_tensor_keys`) when the policy does
            not write the output action key; when the inputs disagree on ``[*B, T]``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.modules import (DecisionTransformer, DecisionTransformerInferenceWrapper,
        ...     DTActor, ProbabilisticActor, TanhDelta, TensorDictModule)
        >>> config = DecisionTransformer.DTConfig(n_embd=16, n_layer=1, n_head=2, n_inner=32)
        >>> net = TensorDictModule(DTActor(3, 1, transformer_config=config),
        ...     in_keys=["observation", "action", "return_to_go"], out_keys=["param"])
        >>> actor = ProbabilisticActor(net, in_keys=["param"], out_keys=["action"],
        ...     distribution_class=TanhDelta, distribution_kwargs={"low": -2.0, "high": 2.0})
        >>> policy = DecisionTransformerInferenceWrapper(actor)
        >>> td = TensorDict(observation=torch.randn(4, 20, 3), action=torch.randn(4, 20, 1),
        ...     return_to_go=torch.randn(4, 20, 1), batch_size=[4])
        >>> out = policy(td)
        >>> out["action"].shape, out["return_to_go"].shape, out["observation"].shape
        (torch.Size([4, 1]), torch.Size([4, 1]), torch.Size([4, 20, 3]))
    """

    def __init__(
        self,
        policy: TensorDictModuleBase,
        *,
        inference_context: int = 5,
        spec: TensorSpec | None = None,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__(policy)
        if inference_context < 1:
            raise ValueError(f"inference_context must be >= 1, got {inference_context}")
        self.observation_key: NestedKey = "observation"
        self.action_key: NestedKey = "action"
        self.out_action_key: NestedKey = "action"
        self.return_to_go_key: NestedKey = "return_to_go"
        self.inference_context = inference_context
        if spec is None:
            spec = getattr(policy, "spec", None)
            spec = None if spec is None else spec.clone()
        elif not isinstance(spec, Composite):
            spec = Composite({self.action_key: spec}, shape=spec.shape[:-1])
        if spec is not None and device is not None:
            spec = spec.to(device)
        self._spec = spec
        self.checked = False

    @property
    def spec(self) -> TensorSpec | None:
        """The action spec (a ``Composite``), ``None`` when neither given nor on the policy."""
        return self._spec

    @property
    def in_keys(self) -> list[NestedKey]:
        return [self.observation_key, self.action_key, self.return_to_go_key]

    @property
    def out_keys(self) -> list[NestedKey]:
        keys = {*self.td_module.out_keys, *self.in_keys}
        return sorted(keys, key=str)

    def set_tensor_keys(self, **kwargs: NestedKey) -> None:
        """Remap the keys read and written.

        Keyword Args:
            observation (NestedKey): the observation sequence.
            action (NestedKey): the action sequence given to the policy.
            return_to_go (NestedKey): the return-to-go sequence.
            out_action (NestedKey): the action the policy writes (one of its out_keys).

        Raises:
            TypeError: on another keyword.
            ValueError: when ``out_action`` is not written by the policy.
        """
        names = ("observation", "action", "return_to_go", "out_action")
        unknown = sorted(set(kwargs) - set(names))
        if unknown:
            raise TypeError(
                f"set_tensor_keys got unknown key name(s) {unknown}; valid ones are {list(names)}"
            )
        out_action = unravel_key(kwargs.get("out_action", self.out_action_key))
        if out_action not in self.td_module.out_keys:
            raise ValueError(
                f"The value of out_action_key ({out_action!r}) must be within the actor "
                f"output keys ({self.td_module.out_keys}); set it with "
                "set_tensor_keys(out_action=...)"
            )
        self.observation_key = unravel_key(kwargs.get("observation", self.observation_key))
        self.action_key = unravel_key(kwargs.get("action", self.action_key))
        self.return_to_go_key = unravel_key(kwargs.get("return_to_go", self.return_to_go_key))
        self.out_action_key = out_action
        self.checked = True

    def step(self, frames: int = 1) -> None:
        """No exploration schedule to advance (kept for the exploration-wrapper protocol)."""

    def mask_context(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Write the masked sequences into ``tensordict`` (new tensors; the old ones untouched).

        Observations and returns-to-go before the last ``inference_context`` steps become
        zero; actions are shifted one step back with a zero last slot, and only the
        ``inference_context - 1`` previous ones are kept.
        """
        observation = tensordict.get(self.observation_key)
        action = tensordict.get(self.action_key)
        return_to_go = tensordict.get(self.return_to_go_key)
        lead = {
            self.observation_key: tuple(observation.shape[:-1]),
            self.action_key: tuple(action.shape[:-1]),
            self.return_to_go_key: tuple(return_to_go.shape[:-1]),
        }
        if len(set(lead.values())) != 1:
            raise ValueError(
                "DecisionTransformerInferenceWrapper: the observation, action and "
                f"return-to-go sequences must share [*B, T], got {lead}"
            )
        steps = observation.shape[-2]
        start = max(steps - self.inference_context, 0)
        observation = observation.clone()
        observation[..., :start, :] = 0
        return_to_go = return_to_go.clone()
        return_to_go[..., :start, :] = 0
        # the previous actions, one step back; the last slot (the action to choose) is zero
        shifted = torch.zeros_like(action)
        shifted[..., : steps - 1, :] = action[..., 1:, :]
        shifted[..., : max(steps - self.inference_context, 0), :] = 0
        tensordict.set(self.observation_key, observation)
        tensordict.set(self.action_key, shifted)
        tensordict.set(self.return_to_go_key, return_to_go)
        return tensordict

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        if not self.checked:
            self.set_tensor_keys()
        observation = tensordict.get(self.observation_key)
        tensordict = self.mask_context(tensordict.copy())
        tensordict = self.td_module(tensordict)
        action = tensordict.get(self.out_action_key)
        if tensordict.ndim == action.ndim - 1:  # the time dimension is a batch dimension
            tensordict.batch_size = tensordict.batch_size[:-1]
        tensordict.set(self.out_action_key, action[..., -1, :])
        tensordict.set(self.return_to_go_key, tensordict.get(self.return_to_go_key)[..., -1, :])
        tensordict.set(self.observation_key, observation)
        return tensordict
